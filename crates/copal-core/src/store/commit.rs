//! The commit protocol (DESIGN.md §4): under LMDB's single write lock, check that every object
//! this transaction changes still has the tid it read, allocate ids, write records, descriptors
//! and the commit log entry, then commit durably. Dropping a `Commit` without `finish` aborts it
//! and leaves the store exactly as it was.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use heed::RwTxn;

use super::error::StoreError;
use super::catalog::Catalog;
use super::checksum::{seal, unseal};
use super::index::{entry_key, entry_oid, key_has_no_value, prefix_end, DescriptorNames, IndexDef};
use super::lmdb::{key_range, read_u64_key, LmdbStore, META_TID};
use super::snapshot::encode_oid_list;
use super::stats::StoreStats;
use crate::format::{class_extent, make_oid, oid_seq, ClassNo, DecodeError, Descriptor, DescriptorSource, Oid, RecordHeader, MAX_SEQ};

pub struct Commit<'s> {
    store: &'s LmdbStore,
    txn: RwTxn<'s>,
    tid: u64,
    next_seq: HashMap<ClassNo, u64>,
    changed: Vec<Oid>,
    new_descriptors: Vec<Arc<Descriptor>>,
    indexes: Vec<Arc<IndexDef>>,
    /// Index or schema maintenance rather than an application transaction: not counted in the
    /// `commits` and `records_written` statistics.
    maintenance: bool,
    next_descriptor: u32,
    next_class: ClassNo,
}

impl<'s> Commit<'s> {
    /// Waits for the write lock (other writers, in any process) and starts a commit.
    pub fn begin(store: &'s LmdbStore) -> Result<Commit<'s>, StoreError> {
        let txn = store.env.write_txn()?;
        store.refresh_catalog(&txn)?;
        let last_tid = match store.meta.get(&txn, META_TID)? {
            Some(bytes) => read_u64_key(bytes, "last tid")?,
            None => 0,
        };
        let indexes = store.index_defs(&txn)?;
        let (next_descriptor, next_class) = {
            let catalog = store.catalog();
            (catalog.max_id + 1, catalog.max_class + 1)
        };
        Ok(Commit {
            store,
            txn,
            tid: last_tid + 1,
            next_seq: HashMap::new(),
            changed: Vec::new(),
            new_descriptors: Vec::new(),
            indexes,
            maintenance: false,
            next_descriptor,
            next_class,
        })
    }

    /// The tid this commit will have; records written by it carry it in their header.
    pub fn tid(&self) -> u64 {
        self.tid
    }

    /// The tid of the stored record of `oid` (None if there is no such record).
    pub fn stored_tid(&self, oid: Oid) -> Result<Option<u64>, StoreError> {
        match self.store.records.get(&self.txn, &oid.to_be_bytes())? {
            None => Ok(None),
            Some(value) => RecordHeader::parse(unseal(oid, value)?)
                .map(|(header, _)| Some(header.tid))
                .map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source }),
        }
    }

    /// Fails with `Conflict` unless `oid` is still stored with `read_tid`.
    pub fn check_unchanged(&self, oid: Oid, read_tid: u64) -> Result<(), StoreError> {
        let stored_tid = self.stored_tid(oid)?;
        if stored_tid == Some(read_tid) {
            Ok(())
        } else {
            StoreStats::add(&self.store.stats.conflicts, 1);
            Err(StoreError::Conflict { oid, read_tid, stored_tid })
        }
    }

    /// A fresh object id in the extent of `class`: past the last stored one and past every id
    /// ever given out in the class (the class's high-water mark in `meta`), so that the id of a
    /// deleted object is never reused and a stale reference can never reach a new object.
    pub fn allocate_oid(&mut self, class: ClassNo) -> Result<Oid, StoreError> {
        let seq = match self.next_seq.get(&class) {
            Some(&seq) => seq,
            None => {
                let (first, end) = class_extent(class);
                let (first, end) = (first.to_be_bytes(), end.to_be_bytes());
                let last = self.store.records.rev_range(&self.txn, &key_range(&first, &end))?.next().transpose()?;
                let after_last = match last {
                    Some((key, _)) => oid_seq(read_u64_key(key, "record")?) + 1,
                    None => 0,
                };
                let high_water = match self.store.meta.get(&self.txn, &high_water_key(class))? {
                    Some(bytes) => read_u64_key(bytes, "high-water mark")?,
                    None => 0,
                };
                after_last.max(high_water)
            }
        };
        if seq > MAX_SEQ {
            return Err(StoreError::Exhausted { message: format!("class {class} has no object ids left") });
        }
        self.next_seq.insert(class, seq + 1);
        Ok(make_oid(class, seq))
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
        self.store.descriptors.put(&mut self.txn, &descriptor.id.to_be_bytes(), &descriptor.encode())?;
        self.new_descriptors.push(Arc::clone(&descriptor));
        Ok(descriptor)
    }

    pub fn put(&mut self, oid: Oid, record: &[u8]) -> Result<(), StoreError> {
        if !self.indexes.is_empty() {
            let old = self.stored_record(oid)?;
            self.update_indexes(oid, old.as_deref(), Some(record))?;
        }
        self.store.records.put(&mut self.txn, &oid.to_be_bytes(), &seal(record))?;
        self.changed.push(oid);
        Ok(())
    }

    /// Writes `record` as is, leaving indexes untouched: for repair tools and corruption tests,
    /// which must be able to store bytes that do not decode.
    pub fn put_raw(&mut self, oid: Oid, record: &[u8], sealed: bool) -> Result<(), StoreError> {
        let value = if sealed { seal(record) } else { record.to_vec() };
        self.store.records.put(&mut self.txn, &oid.to_be_bytes(), &value)?;
        self.changed.push(oid);
        Ok(())
    }

    pub fn delete(&mut self, oid: Oid) -> Result<(), StoreError> {
        if !self.indexes.is_empty() {
            let old = self.stored_record(oid)?;
            self.update_indexes(oid, old.as_deref(), None)?;
        }
        self.store.records.delete(&mut self.txn, &oid.to_be_bytes())?;
        self.changed.push(oid);
        Ok(())
    }

    /// The current record of `oid` for index maintenance; a damaged one counts as absent (its
    /// stale entries are then reported by `copal verify`).
    fn stored_record(&self, oid: Oid) -> Result<Option<Vec<u8>>, StoreError> {
        let value = self.store.records.get(&self.txn, &oid.to_be_bytes())?;
        Ok(value.and_then(|v| unseal(oid, v).ok()).map(<[u8]>::to_vec))
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
                self.store.index_entries.delete(&mut self.txn, &entry_key(def.id, &key, oid))?;
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
            let end = prefix_end(&prefix).unwrap_or_default();
            for entry in self.store.index_entries.range(&self.txn, &key_range(&prefix, &end))? {
                let other = entry_oid(entry?.0)?;
                if other != oid {
                    let index = format!("{}({})", def.type_name, def.fields.join(", "));
                    return Err(StoreError::UniqueViolation { index, oid, other });
                }
            }
        }
        self.store.index_entries.put(&mut self.txn, &entry_key(def.id, key, oid), &[][..])?;
        Ok(())
    }

    /// Makes sure an index on `fields` declared by `type_name` exists and holds the objects of
    /// every type in `covered` (building entries for the existing objects); returns its id.
    /// A build calls `progress(records read, records to read)` every few thousand records.
    pub fn ensure_index(
        &mut self,
        type_name: &str,
        covered: &[String],
        fields: &[String],
        unique: bool,
        renamed: &[(String, String, String)],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u32, StoreError> {
        // A definition whose renames differ is another index: the old one is dropped by the
        // caller and this one built, so that old records get their keys under the former names.
        let existing = self
            .indexes
            .iter()
            .find(|d| d.type_name == type_name && d.fields == fields && d.unique == unique && d.renamed == renamed)
            .cloned();
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
                let id = self.indexes.iter().map(|d| d.id).max().unwrap_or(0) + 1;
                let def = IndexDef {
                    id,
                    type_name: type_name.to_owned(),
                    covered: covered.to_vec(),
                    fields: fields.to_vec(),
                    unique,
                    renamed: renamed.to_vec(),
                };
                (def, covered.to_vec())
            }
        };
        self.store.index_defs.put(&mut self.txn, &def.id.to_be_bytes(), &def.encode())?;
        let def = Arc::new(def);
        self.indexes.retain(|d| d.id != def.id);
        self.indexes.push(Arc::clone(&def));
        let classes: Vec<ClassNo> = {
            let catalog = self.store.catalog();
            to_build.iter().filter_map(|name| catalog.class_no(name)).collect()
        };
        let extents: Vec<([u8; 8], [u8; 8])> = classes
            .into_iter()
            .map(|class| {
                let (first, end) = class_extent(class);
                (first.to_be_bytes(), end.to_be_bytes())
            })
            .collect();
        let mut total = 0;
        for (first, end) in &extents {
            total += self.store.records.range(&self.txn, &key_range(first, end))?.count() as u64;
        }
        const PROGRESS_EVERY: u64 = 8192;
        let mut read = 0;
        for (first, end) in &extents {
            let mut entries = Vec::new();
            for entry in self.store.records.range(&self.txn, &key_range(first, end))? {
                let (key, value) = entry?;
                read += 1;
                if read % PROGRESS_EVERY == 0 {
                    progress(read, total);
                }
                let oid = read_u64_key(key, "record")?;
                let Ok(record) = unseal(oid, value) else { continue };
                if let Some(index_key) = self.key_of(&def, oid, Some(record))? {
                    entries.push((index_key, oid));
                }
            }
            for (index_key, oid) in entries {
                self.add_entry(&def, &index_key, oid)?;
            }
        }
        progress(read, total);
        Ok(def.id)
    }

    /// Removes index `id` and all its entries.
    pub fn drop_index(&mut self, id: u32) -> Result<(), StoreError> {
        self.store.index_defs.delete(&mut self.txn, &id.to_be_bytes())?;
        let (lo, hi) = (id.to_be_bytes(), (id + 1).to_be_bytes());
        self.store.index_entries.delete_range(&mut self.txn, &key_range(&lo, &hi))?;
        self.indexes.retain(|d| d.id != id);
        Ok(())
    }

    /// The store and this commit's write transaction, for store-level settings that other files
    /// of this module keep in the `meta` table (declared removed fields, schema.rs).
    pub(crate) fn meta_access(&mut self) -> (&'s LmdbStore, &mut RwTxn<'s>) {
        (self.store, &mut self.txn)
    }

    /// Marks this commit as maintenance (see the `maintenance` field).
    pub fn set_maintenance(&mut self) {
        self.maintenance = true;
    }

    /// The index definitions as this commit sees them.
    pub fn indexes(&self) -> &[Arc<IndexDef>] {
        &self.indexes
    }

    /// Writes the commit log entry and the new last tid, prunes the log, and commits durably.
    /// A maintenance commit that changed no record (index definitions and entries only) takes no
    /// tid and leaves no log entry: no cached object needs invalidating. It returns the last tid.
    pub fn finish(mut self) -> Result<u64, StoreError> {
        let written = self.changed.len() as u64;
        let store = self.store;
        if self.maintenance && self.changed.is_empty() {
            self.txn.commit()?;
            return Ok(self.tid - 1);
        }
        let log_entry = encode_oid_list(&mut self.changed);
        store.log.put(&mut self.txn, &self.tid.to_be_bytes(), &log_entry)?;
        store.meta.put(&mut self.txn, META_TID, &self.tid.to_be_bytes())?;
        for (&class, &next) in &self.next_seq {
            store.meta.put(&mut self.txn, &high_water_key(class), &next.to_be_bytes())?;
        }
        if self.tid > store.options.log_retention {
            let cutoff = (self.tid - store.options.log_retention).to_be_bytes();
            store.log.delete_range(&mut self.txn, &(Bound::Unbounded, Bound::Excluded(&cutoff[..])))?;
        }
        self.txn.commit()?;
        {
            let mut catalog = store.catalog.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            self.new_descriptors.drain(..).for_each(|d| catalog.insert(d));
        }
        if !self.maintenance {
            StoreStats::add(&store.stats.records_written, written);
            StoreStats::add(&store.stats.commits, 1);
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
fn high_water_key(class: ClassNo) -> [u8; 5] {
    let [hi, lo] = class.to_be_bytes();
    [b's', b'e', b'q', hi, lo]
}

impl From<DecodeError> for StoreError {
    fn from(source: DecodeError) -> Self {
        StoreError::Corrupt { what: "record".to_owned(), source }
    }
}
