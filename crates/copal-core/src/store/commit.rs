//! The commit protocol (DESIGN.md §4), written once for every backend: under the backend's
//! write serialization (LMDB's write lock), check that every object this transaction changes
//! still has the tid it read, allocate ids, write records, descriptors, index entries and the
//! commit log entry, then commit durably. Dropping a `Commit` without `finish` aborts it and
//! leaves the store exactly as it was.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::anchors::{anchor_key, collected_at, ANCHORS, COLLECTED_AT};
use super::catalog::Catalog;
use super::checksum::{seal, unseal};
use super::error::StoreError;
use super::index::{entry_key, entry_oid, key_has_no_value, prefix_end, DeclaredIndex, DescriptorNames, IndexDef};
use super::lmdb::LmdbWrite;
use super::postgres::PgWrite;
use super::snapshot::{encode_oid_list, logged_changes, Read, Snapshot};
use super::stats::StoreStats;
use super::{IdVisitor, Backend, DescriptorTable, Store, META_TID};
use crate::format::{
    class_extent, make_oid, oid_class, oid_seq, record_references, ClassNo, DecodeError, Descriptor, DescriptorSource, Oid, RecordHeader,
    MAX_SEQ,
};

/// A backend's write transaction.
pub(crate) enum Write<'s> {
    Lmdb(LmdbWrite<'s>),
    // Boxed for the same reason as `snapshot::Read::Postgres`.
    Postgres(Box<PgWrite>),
}

/// Runs `$body` with `$w` bound to the backend's write transaction.
macro_rules! with_write {
    ($write:expr, $w:ident => $body:expr) => {
        match $write {
            Write::Lmdb($w) => $body,
            Write::Postgres($w) => $body,
        }
    };
}

impl Write<'_> {
    fn get(&self, oid: Oid) -> Result<Option<Cow<'_, [u8]>>, StoreError> {
        match self {
            Write::Lmdb(w) => Ok(w.get(oid)?.map(Cow::Borrowed)),
            Write::Postgres(w) => w.get(oid),
        }
    }
}

impl DescriptorTable for Write<'_> {
    fn descriptors_after(
        &self,
        known: u32,
        visit: IdVisitor<'_>,
    ) -> Result<(), StoreError> {
        with_write!(self, w => w.descriptors_after(known, visit))
    }
}

pub struct Commit<'s> {
    pub(crate) store: &'s Store,
    write: Write<'s>,
    tid: u64,
    next_seq: HashMap<ClassNo, u64>,
    /// Oids allocated by this commit and not written yet: they have no stored record, so index
    /// maintenance need not read one (a round trip per new object on PostgreSQL).
    fresh: HashSet<Oid>,
    changed: Vec<Oid>,
    new_descriptors: Vec<Arc<Descriptor>>,
    indexes: Vec<Arc<IndexDef>>,
    /// Index or schema maintenance rather than an application transaction: not counted in the
    /// `commits` and `records_written` statistics.
    maintenance: bool,
    next_descriptor: u32,
    next_class: ClassNo,
    /// Where the commit and its conflicts are counted (`count_into`).
    stats: Option<Arc<StoreStats>>,
    /// With `check_references_since`: the transaction's read tid and the objects that the
    /// records it writes refer to, which must exist when it finishes.
    referenced: Option<(u64, Vec<Oid>)>,
}

impl<'s> Commit<'s> {
    /// Waits for the write lock (other writers, in any process) and starts a commit.
    pub fn begin(store: &'s Store) -> Result<Commit<'s>, StoreError> {
        Self::start(store, None)
    }

    /// Ends `snapshot`, a snapshot of `store` whose transaction is now committing, and starts
    /// the commit as `begin` does. On PostgreSQL the commit runs on the snapshot's connection
    /// (a transaction that reads then commits holds one server connection, not two); the
    /// conflict checks compare each object's stored tid with the tid it was read with, so they
    /// need nothing of the snapshot.
    pub fn begin_after(store: &'s Store, snapshot: Snapshot) -> Result<Commit<'s>, StoreError> {
        let same_store = std::ptr::eq(Arc::as_ptr(snapshot.store()), store);
        Self::start(store, same_store.then(|| snapshot.into_read()))
    }

    fn start(store: &'s Store, ending: Option<Read>) -> Result<Commit<'s>, StoreError> {
        let known_descriptors = store.catalog().max_id;
        let write = match (&store.backend, ending) {
            (Backend::Postgres(pg), Some(Read::Postgres(read))) => {
                Write::Postgres(Box::new(PgWrite::begin(pg, Some(*read), known_descriptors)?))
            }
            (Backend::Postgres(pg), _) => Write::Postgres(Box::new(PgWrite::begin(pg, None, known_descriptors)?)),
            // LMDB's read transaction ends here, before the write transaction starts (a
            // transaction still running would keep the map from being enlarged: lmdb/map_users.rs).
            (Backend::Lmdb(lmdb), ending) => {
                drop(ending);
                Write::Lmdb(LmdbWrite::begin(lmdb)?)
            }
        };
        store.refresh_catalog(&write)?;
        let last_tid = with_write!(&write, w => w.meta_u64(META_TID))?.unwrap_or(0);
        let mut indexes = Vec::new();
        with_write!(&write, w => w.index_defs(&mut |id, bytes| {
            indexes.push(Arc::new(IndexDef::decode_stored(id, bytes)?));
            Ok(())
        }))?;
        let (next_descriptor, next_class) = {
            let catalog = store.catalog();
            (catalog.max_id + 1, catalog.max_class + 1)
        };
        Ok(Commit {
            store,
            write,
            tid: last_tid + 1,
            next_seq: HashMap::new(),
            fresh: HashSet::new(),
            changed: Vec::new(),
            new_descriptors: Vec::new(),
            indexes,
            maintenance: false,
            next_descriptor,
            next_class,
            stats: None,
            referenced: None,
        })
    }

    /// The tid this commit will have; records written by it carry it in their header.
    pub fn tid(&self) -> u64 {
        self.tid
    }

    /// The tid of the stored record of `oid` (None if there is no such record).
    pub fn stored_tid(&self, oid: Oid) -> Result<Option<u64>, StoreError> {
        match self.write.get(oid)? {
            None => Ok(None),
            Some(value) => RecordHeader::parse(unseal(oid, &value)?)
                .map(|(header, _)| Some(header.tid))
                .map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source }),
        }
    }

    /// Reads ahead the stored records of `oids`, which the commit is about to check or replace:
    /// one round trip for all of them on PostgreSQL (LMDB reads them in place, at no cost).
    pub fn prefetch(&mut self, oids: &[Oid]) -> Result<(), StoreError> {
        match &mut self.write {
            Write::Lmdb(_) => Ok(()),
            Write::Postgres(w) => w.prefetch(oids),
        }
    }

    /// Fails with `Conflict` unless `oid` is still stored with `read_tid`.
    pub fn check_unchanged(&self, oid: Oid, read_tid: u64) -> Result<(), StoreError> {
        let stored_tid = self.stored_tid(oid)?;
        if stored_tid == Some(read_tid) {
            Ok(())
        } else {
            if let Some(stats) = &self.stats {
                StoreStats::add(&stats.conflicts, 1);
            }
            Err(StoreError::Conflict { oid, read_tid, stored_tid })
        }
    }

    /// A fresh object id in the extent of `class`: past the last stored one and past every id
    /// ever given out in the class (the class's high-water mark in `meta`), so that the id of a
    /// deleted object is never reused and a stale reference can never reach a new object.
    pub fn allocate_oid(&mut self, class: ClassNo) -> Result<Oid, StoreError> {
        let seq = self.next_free_seq(class)?;
        if seq > MAX_SEQ {
            return Err(StoreError::Exhausted { message: format!("class {class} has no object ids left") });
        }
        self.next_seq.insert(class, seq + 1);
        let oid = make_oid(class, seq);
        self.fresh.insert(oid);
        Ok(oid)
    }

    /// The sequence number `allocate_oid` gives next in `class`.
    fn next_free_seq(&mut self, class: ClassNo) -> Result<u64, StoreError> {
        if let Some(&seq) = self.next_seq.get(&class) {
            return Ok(seq);
        }
        let (first, end) = class_extent(class);
        let last = with_write!(&mut self.write, w => w.last_oid(first, end))?;
        let after_last = last.map_or(0, |oid| oid_seq(oid) + 1);
        let high_water = with_write!(&self.write, w => w.meta_u64(&high_water_key(class)))?.unwrap_or(0);
        Ok(after_last.max(high_water))
    }

    /// Stores the record of a new object under the id it already has (an import keeps the ids
    /// of its export): `oid` must have no stored record. Raises the class's high-water mark past
    /// `oid`, so that `allocate_oid` never gives it (or an id below it) again.
    pub fn put_new_with_oid(&mut self, oid: Oid, record: &[u8]) -> Result<(), StoreError> {
        let class = oid_class(oid);
        let next = self.next_free_seq(class)?.max(oid_seq(oid) + 1);
        self.next_seq.insert(class, next);
        self.fresh.insert(oid);
        self.put(oid, record)
    }

    /// Raises the high-water mark of `class` to `next` (if below): `allocate_oid` then never
    /// gives a sequence number below `next` (an import keeps the ids its export gave out).
    pub fn raise_high_water_mark(&mut self, class: ClassNo, next: u64) -> Result<(), StoreError> {
        let next = self.next_free_seq(class)?.max(next);
        self.next_seq.insert(class, next);
        Ok(())
    }

    /// The descriptor of `type_name` with exactly these fields, registering it (and a class
    /// number for a new type name) in this commit if the database does not have it yet.
    pub fn descriptor(&mut self, type_name: &str, fields: &[String]) -> Result<Arc<Descriptor>, StoreError> {
        if let Some(d) = self.store.catalog().find(type_name, fields) {
            return Ok(Arc::clone(d));
        }
        if let Some(d) = self.new_descriptors.iter().find(|d| d.type_name == type_name && d.fields == fields) {
            return Ok(Arc::clone(d));
        }
        let known_class = self.store.catalog().class_no(type_name);
        let class_no = match known_class.or_else(|| {
            self.new_descriptors.iter().find(|d| d.type_name == type_name).map(|d| d.class_no)
        }) {
            Some(class_no) => class_no,
            None => {
                let class_no = self.next_class;
                self.next_class = class_no.checked_add(1).ok_or_else(|| StoreError::Exhausted {
                    message: "the database has no class numbers left (65,535 type names)".to_owned(),
                })?;
                class_no
            }
        };
        let descriptor = Arc::new(Descriptor {
            id: self.next_descriptor,
            class_no,
            type_name: type_name.to_owned(),
            fields: fields.to_vec(),
        });
        self.next_descriptor += 1;
        with_write!(&mut self.write, w => w.put_descriptor(descriptor.id, &descriptor.encode()))?;
        self.new_descriptors.push(Arc::clone(&descriptor));
        Ok(descriptor)
    }

    pub fn put(&mut self, oid: Oid, record: &[u8]) -> Result<(), StoreError> {
        // An id this commit allocated has no stored record yet (only its first write is fresh).
        let fresh = self.fresh.remove(&oid);
        if !self.indexes.is_empty() {
            let old = if fresh { None } else { self.stored_record(oid)? };
            self.update_indexes(oid, old.as_deref(), Some(record))?;
        }
        if let Some((read_tid, mut targets)) = self.referenced.take() {
            let found = self.references_into(oid, record, &mut targets);
            self.referenced = Some((read_tid, targets));
            found?;
        }
        with_write!(&mut self.write, w => w.put_record(oid, &seal(record), fresh))?;
        self.changed.push(oid);
        Ok(())
    }

    /// Writes `record` as is, leaving indexes untouched: for repair tools and corruption tests,
    /// which must be able to store bytes that do not decode.
    pub fn put_raw(&mut self, oid: Oid, record: &[u8], sealed: bool) -> Result<(), StoreError> {
        let value = if sealed { seal(record) } else { record.to_vec() };
        with_write!(&mut self.write, w => w.put_record(oid, &value, false))?;
        self.changed.push(oid);
        Ok(())
    }

    pub fn delete(&mut self, oid: Oid) -> Result<(), StoreError> {
        if !self.indexes.is_empty() {
            let old = self.stored_record(oid)?;
            self.update_indexes(oid, old.as_deref(), None)?;
        }
        with_write!(&mut self.write, w => {
            w.delete_record(oid)?;
            w.delete_entry(&anchor_key(oid))
        })?;
        self.changed.push(oid);
        Ok(())
    }

    /// Anchors `oid` (`Transaction.add`): garbage collection keeps it, and what it reaches,
    /// until it is deleted.
    pub fn anchor(&mut self, oid: Oid) -> Result<(), StoreError> {
        with_write!(&mut self.write, w => w.put_entry(&anchor_key(oid)))
    }

    /// Makes the commit check, when it finishes, that every object its records refer to exists,
    /// if garbage collection removed objects after `read_tid` (the tid the transaction read its
    /// objects at): such a transaction may hold an object that was unreachable and collected,
    /// and a reference to it would dangle. A missing object fails the commit with `Conflict`.
    pub fn check_references_since(&mut self, read_tid: u64) -> Result<(), StoreError> {
        if collected_at(self.setting(COLLECTED_AT)?.as_deref())? > read_tid {
            self.referenced = Some((read_tid, Vec::new()));
        }
        Ok(())
    }

    /// The oids changed by the transactions committed after `since`, or None when the commit
    /// log no longer reaches back that far. Nothing commits while this commit runs, so they
    /// are every change up to it.
    pub fn changes_since(&self, since: u64) -> Result<Option<Vec<Oid>>, StoreError> {
        logged_changes(since, self.tid - 1, || with_write!(&self.write, w => w.first_logged()), |from, to, visit| {
            with_write!(&self.write, w => w.log_entries(from, to, visit))
        })
    }

    /// Fails with `Conflict` if an object that a record written by this commit refers to no
    /// longer exists (`check_references_since`).
    fn check_referenced(&mut self) -> Result<(), StoreError> {
        let Some((read_tid, mut targets)) = self.referenced.take() else { return Ok(()) };
        targets.sort_unstable();
        targets.dedup();
        // What this commit writes or deletes is the transaction's own doing.
        let own: HashSet<Oid> = self.changed.iter().copied().collect();
        targets.retain(|oid| !own.contains(oid));
        self.prefetch(&targets)?;
        for oid in targets {
            if self.write.get(oid)?.is_none() {
                return Err(StoreError::Conflict { oid, read_tid, stored_tid: None });
            }
        }
        Ok(())
    }

    /// The current record of `oid` for index maintenance; a damaged one counts as absent (its
    /// stale entries are then reported by `copal verify`).
    pub(crate) fn stored_record(&self, oid: Oid) -> Result<Option<Vec<u8>>, StoreError> {
        let value = self.write.get(oid)?;
        Ok(value.and_then(|v| unseal(oid, &v).ok().map(<[u8]>::to_vec)))
    }

    /// Appends the references of the stored record of `oid` to `out`; false if it has none. A
    /// record that does not decode fails: what it refers to is unknown.
    pub(crate) fn stored_references(&self, oid: Oid, out: &mut Vec<Oid>) -> Result<bool, StoreError> {
        let Some(value) = self.write.get(oid)? else { return Ok(false) };
        self.references_into(oid, unseal(oid, &value)?, out)?;
        Ok(true)
    }

    /// Appends the references of `record`, the record of `oid`, to `out`.
    fn references_into(&self, oid: Oid, record: &[u8], out: &mut Vec<Oid>) -> Result<(), StoreError> {
        let catalog = self.store.catalog();
        let descriptors = WithPending { catalog: &catalog, pending: &self.new_descriptors };
        record_references(record, &descriptors, out).map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source })
    }

    /// Moves the index entries of `oid` from the keys of its `old` record to those of `new`,
    /// checking unique indexes.
    fn update_indexes(&mut self, oid: Oid, old: Option<&[u8]>, new: Option<&[u8]>) -> Result<(), StoreError> {
        let indexes = self.indexes.clone();
        for def in indexes {
            let old_key = self.key_of(&def, oid, old)?;
            let new_key = self.key_of(&def, oid, new)?;
            if old_key == new_key {
                continue;
            }
            if let Some(key) = old_key {
                with_write!(&mut self.write, w => w.delete_entry(&entry_key(def.id, &key, oid)))?;
            }
            if let Some(key) = new_key {
                self.add_entry(&def, &key, oid)?;
            }
        }
        Ok(())
    }

    fn key_of(&self, def: &IndexDef, oid: Oid, record: Option<&[u8]>) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(record) = record else { return Ok(None) };
        let catalog = self.store.catalog();
        let descriptors = WithPending { catalog: &catalog, pending: &self.new_descriptors };
        def.key_of(record, &descriptors).map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source })
    }

    fn add_entry(&mut self, def: &IndexDef, key: &[u8], oid: Oid) -> Result<(), StoreError> {
        if def.unique && !key_has_no_value(key, def.fields.len()) {
            let mut prefix = def.id.to_be_bytes().to_vec();
            prefix.extend_from_slice(key);
            let end = prefix_end(&prefix);
            let mut other = None;
            with_write!(&mut self.write, w => w.scan_entries(&prefix, end.as_deref(), |entry| {
                let holder = entry_oid(entry)?;
                other = (holder != oid).then_some(holder);
                Ok(other.is_none())
            }))?;
            if let Some(other) = other {
                let index = format!("{}({})", def.type_name, def.fields.join(", "));
                return Err(StoreError::UniqueViolation { index, oid, other });
            }
        }
        with_write!(&mut self.write, w => w.put_entry(&entry_key(def.id, key, oid)))?;
        Ok(())
    }

    /// Makes sure an index on `fields` declared by `type_name` exists and holds the objects of
    /// every type in `covered` (building entries for the existing objects); returns its id.
    /// A build calls `progress(records read, records to read)` every few thousand records.
    pub fn ensure_index(&mut self, declared: &DeclaredIndex<'_>, progress: &mut dyn FnMut(u64, u64)) -> Result<u32, StoreError> {
        // A definition whose renames or defaults differ is another index: the old one is dropped
        // by the caller and this one built, so that old records get their keys under the former
        // names and as the defaults.
        let existing = self.indexes.iter().find(|d| d.is_declared_as(declared)).cloned();
        let &DeclaredIndex { type_name, covered, fields, unique, renamed, defaults } = declared;
        let (def, to_build): (IndexDef, Vec<String>) = match existing {
            Some(def) => {
                let missing: Vec<String> = covered.iter().filter(|c| !def.covered.contains(c)).cloned().collect();
                if missing.is_empty() {
                    return Ok(def.id);
                }
                let mut def = (*def).clone();
                def.covered.extend(missing.iter().cloned());
                (def, missing)
            }
            None => {
                let last = self.indexes.iter().map(|d| d.id).max().unwrap_or(0);
                let Some(id) = last.checked_add(1).filter(|&id| id != ANCHORS) else {
                    return Err(StoreError::Exhausted { message: "the database has no index ids left".to_owned() });
                };
                let def = IndexDef {
                    id,
                    type_name: type_name.to_owned(),
                    covered: covered.to_vec(),
                    fields: fields.to_vec(),
                    unique,
                    renamed: renamed.to_vec(),
                    defaults: defaults.to_vec(),
                };
                (def, covered.to_vec())
            }
        };
        with_write!(&mut self.write, w => w.put_index_def(def.id, &def.encode()))?;
        let def = Arc::new(def);
        self.indexes.retain(|d| d.id != def.id);
        self.indexes.push(Arc::clone(&def));
        let classes: Vec<ClassNo> = {
            let catalog = self.store.catalog();
            to_build.iter().filter_map(|name| catalog.class_no(name)).collect()
        };
        let extents: Vec<(Oid, Oid)> = classes.into_iter().map(class_extent).collect();
        let mut total = 0;
        for &(first, end) in &extents {
            with_write!(&mut self.write, w => w.scan_records(first, Some(end), |_, _| {
                total += 1;
                Ok(true)
            }))?;
        }
        const PROGRESS_EVERY: u64 = 8192;
        let mut read = 0;
        for &(first, end) in &extents {
            let mut entries = Vec::new();
            let catalog = self.store.catalog();
            let descriptors = WithPending { catalog: &catalog, pending: &self.new_descriptors };
            with_write!(&mut self.write, w => w.scan_records(first, Some(end), |oid, value| {
                read += 1;
                if read % PROGRESS_EVERY == 0 {
                    progress(read, total);
                }
                // A damaged record gets no entry; `copal verify` reports it.
                let Ok(record) = unseal(oid, value) else { return Ok(true) };
                let key = def.key_of(record, &descriptors)
                    .map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source })?;
                entries.extend(key.map(|key| (key, oid)));
                Ok(true)
            }))?;
            drop(catalog);
            for (index_key, oid) in entries {
                self.add_entry(&def, &index_key, oid)?;
            }
        }
        progress(read, total);
        Ok(def.id)
    }

    /// Removes index `id` and all its entries.
    pub fn drop_index(&mut self, id: u32) -> Result<(), StoreError> {
        with_write!(&mut self.write, w => w.drop_index(id))?;
        self.indexes.retain(|d| d.id != id);
        Ok(())
    }

    /// The store-level setting `key` (small declarations kept as bytes, such as the removed
    /// fields of schema.rs).
    pub(crate) fn setting(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        with_write!(&self.write, w => w.setting(key))
    }

    /// Sets (`Some`) or removes (`None`) the setting `key`.
    pub(crate) fn put_setting(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        with_write!(&mut self.write, w => w.put_setting(key, value))
    }

    /// Marks this commit as maintenance (see the `maintenance` field).
    pub fn set_maintenance(&mut self) {
        self.maintenance = true;
    }

    /// Counts this commit (records written, the commit, its conflicts) into `stats`.
    pub fn count_into(&mut self, stats: &Arc<StoreStats>) {
        self.stats = Some(Arc::clone(stats));
    }


    /// The index definitions as this commit sees them.
    pub fn indexes(&self) -> &[Arc<IndexDef>] {
        &self.indexes
    }

    /// Writes the commit log entry and the new last tid, prunes the log, and commits durably.
    /// A maintenance commit that changed no record (index definitions and entries only) takes no
    /// tid and leaves no log entry: no cached object needs invalidating. It returns the last tid.
    pub fn finish(mut self) -> Result<u64, StoreError> {
        self.check_referenced()?;
        let written = self.changed.len() as u64;
        let store = self.store;
        if self.maintenance && self.changed.is_empty() {
            with_write!(self.write, w => w.commit())?;
            return Ok(self.tid - 1);
        }
        let log_entry = encode_oid_list(&mut self.changed);
        let (tid, next_seq) = (self.tid, &self.next_seq);
        with_write!(&mut self.write, w => {
            w.put_log(tid, &log_entry)?;
            w.put_meta_u64(META_TID, tid)?;
            for (&class, &next) in next_seq {
                w.put_meta_u64(&high_water_key(class), next)?;
            }
            if tid > store.log_retention {
                w.prune_log(tid - store.log_retention)?;
            }
        });
        with_write!(self.write, w => w.commit())?;
        {
            let mut catalog = store.catalog.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            self.new_descriptors.drain(..).for_each(|d| catalog.insert(d));
        }
        // `self.write` has been consumed by its commit: the counters are reached directly.
        if let (false, Some(stats)) = (self.maintenance, &self.stats) {
            StoreStats::add(&stats.records_written, written);
            StoreStats::add(&stats.commits, 1);
        }
        Ok(self.tid)
    }
}

/// The catalog plus the descriptors registered by a commit in progress.
struct WithPending<'a> {
    catalog: &'a Catalog,
    pending: &'a [Arc<Descriptor>],
}

impl DescriptorSource for WithPending<'_> {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        self.names(id).map(|(_, fields)| fields.len())
    }
}

impl DescriptorNames for WithPending<'_> {
    fn names(&self, id: u32) -> Result<(&str, &[String]), DecodeError> {
        match self.pending.iter().find(|d| d.id == id) {
            Some(d) => Ok((d.type_name.as_str(), d.fields.as_slice())),
            None => self.catalog.names(id),
        }
    }
}

/// The `meta` key of a class's high-water mark: `seq` and the class number, big-endian.
pub(crate) fn high_water_key(class: ClassNo) -> [u8; 5] {
    let [hi, lo] = class.to_be_bytes();
    [b's', b'e', b'q', hi, lo]
}

impl From<DecodeError> for StoreError {
    fn from(source: DecodeError) -> Self {
        StoreError::Corrupt { what: "record".to_owned(), source }
    }
}
