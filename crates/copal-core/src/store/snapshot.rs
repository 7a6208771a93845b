//! A consistent read view of the store: one LMDB read transaction held for the lifetime of a
//! copal transaction, so it never sees part of a later commit however long it runs.

use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use heed::{RoTxn, WithoutTls};

use super::error::StoreError;
use super::lmdb::{key_range, read_u64_key, LmdbStore, META_TID};
use super::checksum::{unseal, without_checksum};
use super::stats::StoreStats;
use crate::format::{class_extent, oid_class, ClassNo, DecodeError, Descriptor, DescriptorSource, Oid, Reader};

pub struct Snapshot {
    // Field order is load-bearing: `txn` must be dropped before `store`, whose environment it
    // reads (the static transaction also keeps its own handle on the environment).
    txn: RoTxn<'static, WithoutTls>,
    store: Arc<LmdbStore>,
    tid: u64,
    /// The index definitions, read by the first query that plans (they cannot change within
    /// a snapshot).
    index_defs: OnceLock<Vec<Arc<super::IndexDef>>>,
}

impl Snapshot {
    pub fn new(store: &Arc<LmdbStore>) -> Result<Snapshot, StoreError> {
        let txn = store.env.clone().static_read_txn()?;
        let tid = match store.meta.get(&txn, META_TID)? {
            Some(bytes) => read_u64_key(bytes, "last tid")?,
            None => 0,
        };
        Ok(Snapshot { txn, store: Arc::clone(store), tid, index_defs: OnceLock::new() })
    }

    pub(crate) fn txn(&self) -> &RoTxn<'static, WithoutTls> {
        &self.txn
    }

    pub fn store(&self) -> &Arc<LmdbStore> {
        &self.store
    }

    /// The id of the last transaction visible in this snapshot.
    pub fn tid(&self) -> u64 {
        self.tid
    }

    /// The record of `oid`, borrowed from the map (valid while the snapshot lives).
    pub fn get(&self, oid: Oid) -> Result<Option<&[u8]>, StoreError> {
        let Some(value) = self.store.records.get(&self.txn, &oid.to_be_bytes())? else { return Ok(None) };
        StoreStats::add(&self.store.stats.records_read, 1);
        Ok(Some(unseal(oid, value)?))
    }

    /// Calls `visit(i, record)` for each `oids[i]` (which must be sorted ascending), reading runs
    /// of nearby ids with one cursor sweep instead of one tree descent per id. Fails with
    /// `missing(oid)` for an id that has no record; storage errors are converted by `failed`.
    pub fn get_many<E>(
        &self,
        oids: &[Oid],
        missing: impl Fn(Oid) -> E,
        failed: impl Fn(StoreError) -> E,
        mut visit: impl FnMut(usize, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        // Ids of one class are allocated densely, so a gap this small holds few other records.
        const MAX_GAP: u64 = 32;
        let mut start = 0;
        while start < oids.len() {
            let mut end = start + 1;
            while end < oids.len() && oids[end] - oids[end - 1] <= MAX_GAP && oid_class(oids[end]) == oid_class(oids[start]) {
                end += 1;
            }
            let (first, last) = (oids[start].to_be_bytes(), oids[end - 1].to_be_bytes());
            let mut wanted = start;
            let range = (Bound::Included(&first[..]), Bound::Included(&last[..]));
            for entry in self.store.records.range(&self.txn, &range).map_err(|e| failed(e.into()))? {
                let (key, value) = entry.map_err(|e| failed(e.into()))?;
                let oid = read_u64_key(key, "record").map_err(&failed)?;
                let record = unseal(oid, value).map_err(&failed)?;
                if wanted < end && oids[wanted] < oid {
                    return Err(missing(oids[wanted]));
                }
                if wanted < end && oids[wanted] == oid {
                    visit(wanted, record)?;
                    wanted += 1;
                    // Duplicated ids are visited once each.
                    while wanted < end && oids[wanted] == oid {
                        visit(wanted, record)?;
                        wanted += 1;
                    }
                }
                if wanted == end {
                    break;
                }
            }
            if wanted < end {
                return Err(missing(oids[wanted]));
            }
            StoreStats::add(&self.store.stats.records_read, (end - start) as u64);
            start = end;
        }
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
        let first = class_extent(class).0.to_be_bytes();
        let mut read = 0;
        let result = (|| {
            // Open-ended, stopping at the first id of another class: a bounded range would
            // compare every key with the end key.
            for entry in self.store.records.range(&self.txn, &(Bound::Included(&first[..]), Bound::Unbounded))? {
                let (key, value) = entry?;
                let oid = read_u64_key(key, "record")?;
                if oid_class(oid) != class {
                    break;
                }
                read += 1;
                if !visit(oid, without_checksum(value), value)? {
                    break;
                }
            }
            Ok(())
        })();
        StoreStats::add(&self.store.stats.records_read, read);
        result
    }

    /// How many records of the class extent `counted(oid)` accepts, without reading them.
    pub fn count_extent(&self, class: ClassNo, counted: impl Fn(Oid) -> bool) -> Result<u64, StoreError> {
        let (first, end) = class_extent(class);
        let (first, end) = (first.to_be_bytes(), end.to_be_bytes());
        let mut n = 0;
        for entry in self.store.records.range(&self.txn, &key_range(&first, &end))? {
            n += u64::from(counted(read_u64_key(entry?.0, "record")?));
        }
        Ok(n)
    }

    /// The oids changed by transactions after `since` up to this snapshot, or None when the
    /// commit log no longer reaches back that far (the caller must then drop its whole cache).
    pub fn changes_since(&self, since: u64) -> Result<Option<Vec<Oid>>, StoreError> {
        if since >= self.tid {
            return Ok(Some(Vec::new()));
        }
        let first_kept = match self.store.log.first(&self.txn)? {
            Some((key, _)) => read_u64_key(key, "log")?,
            None => return Ok(None),
        };
        if first_kept > since + 1 {
            return Ok(None);
        }
        let start = (since + 1).to_be_bytes();
        let end = self.tid.to_be_bytes();
        let mut oids = Vec::new();
        for entry in self.store.log.range(&self.txn, &(Bound::Included(&start[..]), Bound::Included(&end[..])))? {
            let (key, value) = entry?;
            decode_oid_list(value, &mut oids).map_err(|source| StoreError::Corrupt {
                what: format!("commit log entry {}", read_u64_key(key, "log").unwrap_or(0)),
                source,
            })?;
        }
        Ok(Some(oids))
    }

    /// The index definitions of this snapshot.
    pub fn index_defs(&self) -> Result<&[Arc<super::IndexDef>], StoreError> {
        if let Some(defs) = self.index_defs.get() {
            return Ok(defs);
        }
        let defs = self.store.index_defs(&self.txn)?;
        Ok(self.index_defs.get_or_init(|| defs))
    }

    /// Reads the descriptors that other processes or connections added since the catalog was
    /// loaded.
    pub fn refresh_catalog(&self) -> Result<(), StoreError> {
        self.store.refresh_catalog(&self.txn)
    }

    /// Visits entry keys of index `id` in `[start, end)`; see `LmdbStore::scan_index`.
    pub fn scan_index(
        &self,
        id: u32,
        start: &[u8],
        end: Option<&[u8]>,
        descending: bool,
        visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.store.scan_index(&self.txn, id, start, end, descending, visit)
    }

    /// The descriptor `id`, reading descriptors added since the catalog was loaded if needed.
    pub fn descriptor(&self, id: u32) -> Result<Arc<Descriptor>, StoreError> {
        if let Some(d) = self.store.catalog().get(id) {
            return Ok(Arc::clone(d));
        }
        self.store.refresh_catalog(&self.txn)?;
        self.store.catalog().get(id).cloned().ok_or(StoreError::Corrupt {
            what: "record".to_owned(),
            source: crate::format::DecodeError::UnknownDescriptor { id },
        })
    }

    /// Every descriptor committed up to this snapshot (and possibly a few later ones).
    pub fn all_descriptors(&self) -> Result<Vec<Arc<Descriptor>>, StoreError> {
        self.store.refresh_catalog(&self.txn)?;
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
