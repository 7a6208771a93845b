//! A consistent read view of the store, held for the lifetime of a copal transaction so that it
//! never sees part of a later commit however long it runs (an LMDB read transaction).

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, PoisonError};

use super::checksum::{unseal, without_checksum};
use super::error::StoreError;
use super::index::IndexDef;
use super::lmdb::LmdbRead;
use super::postgres::PgRead;
use super::stats::StoreStats;
use super::{Backend, DescriptorTable, IdVisitor, SettingVisitor, Store};
use crate::format::{class_extent, ClassNo, DecodeError, Descriptor, DescriptorSource, Oid, Reader};

/// A backend's read transaction.
pub(crate) enum Read {
    Lmdb(LmdbRead),
    // Boxed: a PostgreSQL connection is large, and one allocation per snapshot is nothing next
    // to a round trip.
    Postgres(Box<PgRead>),
}

/// Runs `$body` with `$r` bound to the backend's read transaction.
macro_rules! with_read {
    ($read:expr, $r:ident => $body:expr) => {
        match $read {
            Read::Lmdb($r) => $body,
            Read::Postgres($r) => $body,
        }
    };
}

impl Read {
    pub(crate) fn begin(backend: &Backend) -> Result<Read, StoreError> {
        match backend {
            Backend::Lmdb(lmdb) => Ok(Read::Lmdb(LmdbRead::begin(lmdb)?)),
            Backend::Postgres(pg) => Ok(Read::Postgres(Box::new(PgRead::begin(pg)?))),
        }
    }

    /// The stored value of `oid` (with its checksum): borrowed from LMDB's map, a copy from
    /// PostgreSQL.
    fn get(&self, oid: Oid) -> Result<Option<Cow<'_, [u8]>>, StoreError> {
        match self {
            Read::Lmdb(r) => Ok(r.get(oid)?.map(Cow::Borrowed)),
            Read::Postgres(r) => r.get(oid),
        }
    }
}

impl DescriptorTable for Read {
    fn descriptors_after(
        &self,
        known: u32,
        visit: IdVisitor<'_>,
    ) -> Result<(), StoreError> {
        with_read!(self, r => r.descriptors_after(known, visit))
    }
}

pub struct Snapshot {
    // Field order is load-bearing: `read` must be dropped before `store`, whose backend it
    // reads (LMDB's static transaction also keeps its own handle on the environment).
    read: Read,
    store: Arc<Store>,
    tid: u64,
    /// The index definitions, read by the first query that plans (they cannot change within
    /// a snapshot).
    index_defs: OnceLock<Vec<Arc<IndexDef>>>,
    /// Whether the store's catalog holds every descriptor of this snapshot.
    catalog_current: AtomicBool,
    /// Where the records read are counted (`count_into`).
    stats: Option<Arc<StoreStats>>,
}

impl Snapshot {
    pub fn new(store: &Arc<Store>) -> Result<Snapshot, StoreError> {
        let read = Read::begin(&store.backend)?;
        let tid = with_read!(&read, r => r.last_tid())?;
        Ok(Snapshot { read, store: Arc::clone(store), tid, index_defs: OnceLock::new(), catalog_current: AtomicBool::new(false), stats: None })
    }

    /// Counts the records this snapshot reads into `stats`.
    pub fn count_into(mut self, stats: &Arc<StoreStats>) -> Snapshot {
        self.stats = Some(Arc::clone(stats));
        self
    }

    fn count_read(&self, records: u64) {
        if let Some(stats) = &self.stats {
            StoreStats::add(&stats.records_read, records);
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Ends the snapshot and returns its backend transaction, for a commit to continue on its
    /// connection (`Commit::begin_after`).
    pub(crate) fn into_read(self) -> Read {
        self.read
    }

    /// The id of the last transaction visible in this snapshot.
    pub fn tid(&self) -> u64 {
        self.tid
    }

    /// The record of `oid` (valid while the snapshot lives; borrowed from the map by LMDB).
    pub fn get(&self, oid: Oid) -> Result<Option<Cow<'_, [u8]>>, StoreError> {
        let record = match self.read.get(oid)? {
            None => return Ok(None),
            Some(Cow::Borrowed(value)) => Cow::Borrowed(unseal(oid, value)?),
            Some(Cow::Owned(mut value)) => {
                let len = unseal(oid, &value)?.len();
                value.truncate(len);
                Cow::Owned(value)
            }
        };
        self.count_read(1);
        Ok(Some(record))
    }

    /// The stored value of `oid` with its checksum, unchecked, for repair tools.
    pub(crate) fn raw_value(&self, oid: Oid) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.read.get(oid)?.map(Cow::into_owned))
    }

    /// Calls `visit(i, record)` for each `oids[i]` (which must be sorted ascending), reading
    /// batches of ids together, and `missing(oid)` for an id that has no record: its error ends
    /// the reads, its `Ok` skips the id. Storage errors are converted by `failed`.
    pub fn get_many<E>(
        &self,
        oids: &[Oid],
        missing: impl FnMut(Oid) -> Result<(), E>,
        failed: impl Fn(StoreError) -> E,
        mut visit: impl FnMut(usize, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let checked = |i: usize, oid: Oid, value: &[u8]| visit(i, unseal(oid, value).map_err(&failed)?);
        with_read!(&self.read, r => r.get_many(oids, missing, &failed, checked))?;
        self.count_read(oids.len() as u64);
        Ok(())
    }

    /// Calls `visit(oid, record, stored value)` with every record of the class extent, in oid
    /// order, until it returns false. The record's checksum is NOT verified: the caller verifies
    /// the stored value (`store::unseal`) of the records it uses, so that a scan spends no time
    /// on the checksums of the records its filter rejects.
    pub fn scan_extent_unverified(
        &self,
        class: ClassNo,
        mut visit: impl FnMut(Oid, &[u8], &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let (first, end) = class_extent(class);
        let mut read = 0;
        let result = with_read!(&self.read, r => r.scan_records(first, Some(end), |oid, value| {
            read += 1;
            visit(oid, without_checksum(value), value)
        }));
        self.count_read(read);
        result
    }

    /// How many records the class extent holds besides those of `excluded`, without reading
    /// them (the backend counts; only excluded ids of the class are looked up).
    pub fn count_extent(&self, class: ClassNo, excluded: &HashSet<Oid>) -> Result<u64, StoreError> {
        let (first, end) = class_extent(class);
        let total = with_read!(&self.read, r => r.count_records(first, end))?;
        let mut stored_excluded = 0;
        for &oid in excluded.iter().filter(|oid| (first..end).contains(*oid)) {
            stored_excluded += u64::from(self.read.get(oid)?.is_some());
        }
        Ok(total - stored_excluded)
    }

    /// Calls `visit(oid, stored value)` for the records from oid `first` on, unchecked, in oid
    /// order, until it returns false.
    pub(crate) fn scan_values_from(&self, first: Oid, visit: impl FnMut(Oid, &[u8]) -> Result<bool, StoreError>) -> Result<(), StoreError> {
        with_read!(&self.read, r => r.scan_records(first, None, visit))
    }

    /// How many records the store holds, counted by the backend.
    pub(crate) fn count_all(&self) -> Result<u64, StoreError> {
        with_read!(&self.read, r => r.count_records(0, Oid::MAX))
    }

    /// Calls `visit(oid, stored value)` for every record of the store, unchecked, in oid order.
    pub(crate) fn scan_all_values(&self, mut visit: impl FnMut(Oid, &[u8]) -> Result<(), StoreError>) -> Result<(), StoreError> {
        self.scan_values_from(0, |oid, value| visit(oid, value).map(|()| true))
    }

    /// The high-water mark of `class`: every sequence number below it was given out once
    /// (`Commit::allocate_oid`); None if the class never recorded one.
    pub(crate) fn high_water_mark(&self, class: ClassNo) -> Result<Option<u64>, StoreError> {
        with_read!(&self.read, r => r.meta_u64(&super::commit::high_water_key(class)))
    }

    /// Calls `visit(key, value)` for the store-level settings whose key starts with `prefix`.
    pub(crate) fn settings(&self, prefix: &[u8], visit: SettingVisitor<'_>) -> Result<(), StoreError> {
        with_read!(&self.read, r => r.settings(prefix, visit))
    }

    /// The oids changed by transactions after `since` up to this snapshot, or None when the
    /// commit log no longer reaches back that far (the caller must then drop its whole cache).
    pub fn changes_since(&self, since: u64) -> Result<Option<Vec<Oid>>, StoreError> {
        logged_changes(since, self.tid, || with_read!(&self.read, r => r.first_logged()), |from, to, visit| {
            with_read!(&self.read, r => r.log_entries(from, to, visit))
        })
    }

    /// The first tid the commit log holds past this snapshot's last tid: None in a sound store,
    /// whose last tid is that of the newest log entry.
    pub(crate) fn logged_after_last_tid(&self) -> Result<Option<u64>, StoreError> {
        let mut found = None;
        // The log's tids are PostgreSQL bigints there: i64::MAX is the highest.
        with_read!(&self.read, r => r.log_entries(self.tid.saturating_add(1), i64::MAX as u64, |tid, _| {
            found = found.or(Some(tid));
            Ok(())
        }))?;
        Ok(found)
    }

    /// The index definitions of this snapshot.
    pub fn index_defs(&self) -> Result<&[Arc<IndexDef>], StoreError> {
        if let Some(defs) = self.index_defs.get() {
            return Ok(defs);
        }
        let mut decoded = self.store.index_defs.lock().unwrap_or_else(PoisonError::into_inner);
        let mut found = Vec::with_capacity(decoded.len());
        with_read!(&self.read, r => r.index_defs(&mut |id, bytes| {
            match decoded.iter().find(|(stored, def)| def.id == id && **stored == *bytes) {
                Some((stored, def)) => found.push((Arc::clone(stored), Arc::clone(def))),
                None => found.push((Arc::from(bytes), Arc::new(IndexDef::decode_stored(id, bytes)?))),
            }
            Ok(())
        }))?;
        let defs = found.iter().map(|(_, def)| Arc::clone(def)).collect();
        *decoded = found;
        drop(decoded);
        Ok(self.index_defs.get_or_init(|| defs))
    }

    /// Reads the descriptors that other processes or connections added since the catalog was
    /// loaded.
    pub fn refresh_catalog(&self) -> Result<(), StoreError> {
        if !self.catalog_current.load(Ordering::Relaxed) {
            self.store.refresh_catalog(&self.read)?;
            self.catalog_current.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Calls `visit(entry key)` for the entries of index `id` in `[start, end)` (bytes after the
    /// index id; no end: to the end of the index), in key order or reversed, until it returns
    /// false.
    pub fn scan_index(
        &self,
        id: u32,
        start: &[u8],
        end: Option<&[u8]>,
        descending: bool,
        visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let mut lo = id.to_be_bytes().to_vec();
        lo.extend_from_slice(start);
        let hi = match end {
            Some(end) => [&id.to_be_bytes()[..], end].concat(),
            None => (id + 1).to_be_bytes().to_vec(),
        };
        with_read!(&self.read, r => r.scan_entries(&lo, Some(&hi), descending, visit))
    }

    /// Calls `visit(entry key)` for the index entries from `lo` on, in key order, until it
    /// returns false.
    pub(crate) fn scan_entries_from(&self, lo: &[u8], visit: impl FnMut(&[u8]) -> Result<bool, StoreError>) -> Result<(), StoreError> {
        with_read!(&self.read, r => r.scan_entries(lo, None, false, visit))
    }

    /// Calls `visit(entry key)` for every index entry of the store, in key order.
    pub(crate) fn scan_all_entries(&self, mut visit: impl FnMut(&[u8]) -> Result<(), StoreError>) -> Result<(), StoreError> {
        with_read!(&self.read, r => r.scan_entries(&[], None, false, |key| visit(key).map(|()| true)))
    }

    /// The descriptor `id`, reading descriptors added since the catalog was loaded if needed.
    pub fn descriptor(&self, id: u32) -> Result<Arc<Descriptor>, StoreError> {
        if let Some(d) = self.store.catalog().get(id) {
            return Ok(Arc::clone(d));
        }
        self.store.refresh_catalog(&self.read)?;
        self.store.catalog().get(id).cloned().ok_or(StoreError::Corrupt {
            what: "record".to_owned(),
            source: crate::format::DecodeError::UnknownDescriptor { id },
        })
    }

    /// Every descriptor committed up to this snapshot (and possibly a few later ones).
    pub fn all_descriptors(&self) -> Result<Vec<Arc<Descriptor>>, StoreError> {
        self.store.refresh_catalog(&self.read)?;
        let mut all: Vec<_> = self.store.catalog().descriptors().cloned().collect();
        all.sort_by_key(|d| d.id);
        Ok(all)
    }
}

impl DescriptorSource for Snapshot {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        self.store.catalog().field_count(id)
    }
}

/// The oids changed by the transactions after `since` up to `upto`, read from the commit log
/// through `first_logged` and `log_entries`; None when the log no longer reaches back that far.
pub(crate) fn logged_changes(
    since: u64,
    upto: u64,
    first_logged: impl FnOnce() -> Result<Option<u64>, StoreError>,
    log_entries: impl FnOnce(u64, u64, &mut dyn FnMut(u64, &[u8]) -> Result<(), StoreError>) -> Result<(), StoreError>,
) -> Result<Option<Vec<Oid>>, StoreError> {
    if since >= upto {
        return Ok(Some(Vec::new()));
    }
    let Some(first_kept) = first_logged()? else { return Ok(None) };
    if first_kept > since + 1 {
        return Ok(None);
    }
    let mut oids = Vec::new();
    log_entries(since + 1, upto, &mut |tid, entry| {
        decode_oid_list(entry, &mut oids).map_err(|source| StoreError::Corrupt { what: format!("commit log entry {tid}"), source })
    })?;
    Ok(Some(oids))
}

pub(crate) fn encode_oid_list(oids: &mut [Oid]) -> Vec<u8> {
    oids.sort_unstable();
    let mut w = crate::format::Writer { buf: Vec::with_capacity(oids.len() * 3) };
    let mut previous = 0;
    for &oid in oids.iter() {
        w.varint(oid - previous);
        previous = oid;
    }
    w.buf
}

fn decode_oid_list(data: &[u8], out: &mut Vec<Oid>) -> Result<(), crate::format::DecodeError> {
    let mut r = Reader::new(data);
    let mut previous: Oid = 0;
    while !r.is_empty() {
        previous = previous.wrapping_add(r.varint()?);
        out.push(previous);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oid_lists_round_trip() {
        let mut oids = vec![1 << 48 | 5, 3, 1 << 48 | 2, 1 << 50];
        let bytes = encode_oid_list(&mut oids);
        let mut back = Vec::new();
        decode_oid_list(&bytes, &mut back).unwrap();
        assert_eq!(back, oids);
    }
}
