//! The record tables of the embedded store: one LMDB table per class (`records/<class>`), the
//! cache of their handles, and the migration of format-1 stores, which kept every record in one
//! table.

use std::ops::Bound;

use heed::types::Bytes;
use heed::{Env, PutFlags, RoTxn, RwTxn, WithoutTls};

use super::table_names::missing;
use super::Table;
use crate::format::{class_extent, make_oid, oid_class, ClassNo, Oid};
use crate::store::error::StoreError;
use crate::store::read_u64_key;

/// The format-1 table that held every record.
pub(super) const SHARED_RECORDS: &str = "records";
pub(super) const RECORD_TABLE_PREFIX: &str = "records/";

/// How many classes may have stored records. LMDB sizes every transaction by its `max_dbs`
/// (LMDB zeroes about 50 bytes per possible table at each transaction begin: 0.7 µs for 1,024
/// tables, 4.5 µs for 4,096, measured by `examples/record_layout.rs`), so the bound is a
/// trade between the number of classes and the cost of every transaction.
pub(crate) const MAX_RECORD_TABLES: usize = 1000;

/// The handles of the record tables, by class number.
///
/// Invariant: a transaction only uses handles opened before it began. LMDB gives a transaction
/// the handles that exist when it begins; a later one is invalid in it (EINVAL), and opening a
/// table inside a transaction that began before another handle was opened can reuse that
/// handle's slot. So every transaction takes its copy of this set before it begins, and when its
/// view holds tables the set lacks (another process created them), the transaction is restarted
/// after they are opened (`LmdbRead::begin`, `LmdbWrite::begin`).
#[derive(Clone, Default)]
pub(crate) struct RecordTables {
    by_class: Vec<Option<Table>>,
    pub(super) count: usize,
    /// The number of tables (entries of the unnamed database) in the view that opened these
    /// handles: a view with more has record tables that are not open yet. Tables are never
    /// dropped once a store has the per-class layout, so the number only grows.
    pub(super) tables_seen: u64,
}

impl RecordTables {
    pub(super) fn get(&self, class: ClassNo) -> Option<Table> {
        self.by_class.get(usize::from(class)).copied().flatten()
    }

    pub(super) fn insert(&mut self, class: ClassNo, table: Table) {
        let slot = usize::from(class);
        if self.by_class.len() <= slot {
            self.by_class.resize(slot + 1, None);
        }
        if self.by_class[slot].replace(table).is_none() {
            self.count += 1;
        }
    }

    /// The tables of the classes `first..=last`, in class order.
    pub(super) fn between(&self, first: ClassNo, last: ClassNo) -> impl DoubleEndedIterator<Item = (ClassNo, Table)> + '_ {
        let end = self.by_class.len().min(usize::from(last) + 1);
        let start = usize::from(first).min(end);
        (start..end).filter_map(|slot| Some((slot as ClassNo, self.by_class[slot]?)))
    }

    /// Opens the record tables listed in `txn`'s view that are not open yet. The caller holds
    /// the backend's `opening` lock and ends `txn` by committing it (LMDB closes the handles a
    /// transaction opened when it aborts).
    pub(super) fn open_listed(&mut self, env: &Env<WithoutTls>, main: Table, txn: &RoTxn<'_>) -> Result<(), StoreError> {
        let mut names = Vec::new();
        for entry in main.prefix_iter(txn, RECORD_TABLE_PREFIX.as_bytes())? {
            let (name, _) = entry?;
            names.push(name.to_vec());
        }
        for name in names {
            let class = record_table_class(&name)?;
            if self.get(class).is_none() {
                let name = std::str::from_utf8(&name).unwrap_or_default();
                let table = env
                    .open_database(txn, Some(name))?
                    .ok_or_else(|| missing(env, txn, main, name, "records, listed but not found: the list is out of order"))?;
                self.insert(class, table);
            }
        }
        self.tables_seen = main.len(txn)?;
        Ok(())
    }
}

pub(super) fn record_table_name(class: ClassNo) -> String {
    format!("{RECORD_TABLE_PREFIX}{class}")
}

fn record_table_class(name: &[u8]) -> Result<ClassNo, StoreError> {
    std::str::from_utf8(&name[RECORD_TABLE_PREFIX.len()..])
        .ok()
        .and_then(|number| number.parse().ok())
        .ok_or_else(|| StoreError::Storage {
            message: format!("unexpected table {} in the environment", String::from_utf8_lossy(name)),
        })
}

pub(super) fn too_many_classes() -> StoreError {
    StoreError::Exhausted {
        message: format!(
            "the database cannot store objects of more than {MAX_RECORD_TABLES} classes; \
             store the objects of the new class in another database"
        ),
    }
}

/// Reads of the record tables shared by snapshots and commits.
impl RecordTables {
    pub(super) fn get_record<'t>(&self, txn: &'t RoTxn<'_>, oid: Oid) -> Result<Option<&'t [u8]>, StoreError> {
        match self.get(oid_class(oid)) {
            Some(table) => Ok(table.get(txn, &oid.to_be_bytes())?),
            None => Ok(None),
        }
    }

    /// Calls `visit(oid, stored value)` for the records with `first <= oid < end` (no end: to
    /// the last record), in oid order, until it returns false.
    pub(super) fn scan(
        &self,
        txn: &RoTxn<'_>,
        first: Oid,
        end: Option<Oid>,
        mut visit: impl FnMut(Oid, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let last_class = end.map_or(ClassNo::MAX, |end| oid_class(end.saturating_sub(1)));
        for (class, table) in self.between(oid_class(first), last_class) {
            let start = first.max(make_oid(class, 0)).to_be_bytes();
            // Open-ended, stopping at `end` by comparing ids: a bounded range would compare
            // every key with the end key (a memcmp per record of a scan).
            for entry in table.range(txn, &(Bound::Included(&start[..]), Bound::Unbounded))? {
                let (key, value) = entry?;
                let oid = read_u64_key(key, "record")?;
                if end.is_some_and(|end| oid >= end) || !visit(oid, value)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// How many records have ids in `[first, end)`: a table's own count for each whole class
    /// extent in the range, a walk over the keys otherwise.
    pub(super) fn count(&self, txn: &RoTxn<'_>, first: Oid, end: Oid) -> Result<u64, StoreError> {
        let mut n = 0;
        for (class, table) in self.between(oid_class(first), oid_class(end.saturating_sub(1))) {
            let (extent_first, extent_end) = class_extent(class);
            if first <= extent_first && extent_end <= end {
                n += table.len(txn)?;
            } else {
                self.scan(txn, first.max(extent_first), Some(end.min(extent_end)), |_, _| {
                    n += 1;
                    Ok(true)
                })?;
            }
        }
        Ok(n)
    }
}

/// Moves every record of a format-1 store's shared `records` table into per-class tables and
/// drops the shared table, inside the open's write transaction: LMDB commits all of it or none.
pub(super) fn migrate_shared_records(env: &Env<WithoutTls>, wtxn: &mut RwTxn<'_>, records: &mut RecordTables) -> Result<(), StoreError> {
    // Copied in batches: the cursor over the shared table borrows the transaction that the
    // writes need.
    const BATCH: usize = 10_000;
    let Some(shared) = env.open_database::<Bytes, Bytes>(wtxn, Some(SHARED_RECORDS))? else { return Ok(()) };
    let mut after: Option<Vec<u8>> = None;
    loop {
        let start = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let batch = shared
            .range(wtxn, &(start, Bound::Unbounded))?
            .take(BATCH)
            .map(|entry| entry.map(|(key, value)| (key.to_vec(), value.to_vec())))
            .collect::<Result<Vec<_>, _>>()?;
        let Some((last, _)) = batch.last() else { break };
        after = Some(last.clone());
        for (key, value) in &batch {
            let class = oid_class(read_u64_key(key, "record")?);
            let table = match records.get(class) {
                Some(table) => table,
                None if records.count >= MAX_RECORD_TABLES => return Err(too_many_classes()),
                None => {
                    let table = env.create_database(wtxn, Some(&record_table_name(class)))?;
                    records.insert(class, table);
                    table
                }
            };
            // The shared table is in key order, so every record goes at the end of its table.
            table.put_with_flags(wtxn, PutFlags::APPEND, key, value)?;
        }
    }
    // SAFETY: the handle is not used after this, and no other transaction of the process exists
    // while the environment is being opened.
    unsafe { shared.remove(wtxn)? };
    Ok(())
}
