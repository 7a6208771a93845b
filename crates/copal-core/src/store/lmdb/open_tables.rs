//! Opening an environment's tables: preparing them for reading and writing (created in a new
//! environment, a format-1 store migrated), or, read-only, only finding them.

use std::path::Path;

use heed::{Env, RoTxn, WithoutTls};

use super::record_tables::{migrate_shared_records, record_table_name, RecordTables};
use super::table_names::{fixed_table, missing_root_table, open_fixed_table, FIXED_TABLES};
use super::{LmdbBackend, Table, Tables, META_FORMAT, SHARED_RECORDS_FORMAT, STORE_FORMAT};
use crate::store::anchors::ANCHORS_RECORDED;
use crate::format::{encode_root_record, Descriptor, ROOT_CLASS, ROOT_DESCRIPTOR, ROOT_OID, ROOT_TYPE_NAME};
use crate::store::error::StoreError;
use crate::store::META_TID;

/// The store format a `meta` value names (0: none; `u32::MAX`: a value of the wrong size).
fn format_of(found: Option<&[u8]>) -> u32 {
    match found {
        None => 0,
        Some(bytes) => bytes.try_into().map(u32::from_be_bytes).unwrap_or(u32::MAX),
    }
}

fn unreadable_format(path: &Path, format: u32) -> StoreError {
    StoreError::Incompatible {
        message: format!(
            "{} has store format {format}, which this copal (format {STORE_FORMAT}) cannot read: \
             use the copal release that wrote it, or a later one",
            path.display()
        ),
    }
}

fn no_format(path: &Path) -> StoreError {
    StoreError::Damaged { message: format!("{} has committed data but its meta table holds no store format", path.display()) }
}

fn unnamed_table(env: &Env<WithoutTls>, txn: &RoTxn<'_>, path: &Path) -> Result<Table, StoreError> {
    env.open_database(txn, None)?.ok_or_else(|| StoreError::Storage {
        message: format!("{}: LMDB has no unnamed database", path.display()),
    })
}

impl LmdbBackend {
    /// Opens the tables of an environment, creating them in a new one and migrating a format-1
    /// store; returns them with the store format found.
    pub(super) fn prepare_tables(env: &Env<WithoutTls>, path: &Path) -> Result<(Tables, RecordTables, u32), StoreError> {
        let mut wtxn = env.write_txn()?;
        let main = unnamed_table(env, &wtxn, path)?;
        // Only a new environment gets its tables created (the invariant of `table_names`).
        let new = main.is_empty(&wtxn)?;
        let [descriptors, log, meta, index_defs, index_entries] =
            FIXED_TABLES.map(|name| fixed_table(env, &mut wtxn, main, name, new));
        let tables = Tables { main, descriptors: descriptors?, log: log?, meta: meta?, index_defs: index_defs?, index_entries: index_entries? };
        let mut records = RecordTables::default();
        let found = tables.meta.get(&wtxn, META_FORMAT)?;
        let found_format = format_of(found);
        match found_format {
            0 if !new => return Err(no_format(path)),
            0 => {
                let root = Descriptor {
                    id: ROOT_DESCRIPTOR,
                    class_no: ROOT_CLASS,
                    type_name: ROOT_TYPE_NAME.to_owned(),
                    fields: vec!["data".to_owned()],
                };
                tables.descriptors.put(&mut wtxn, &ROOT_DESCRIPTOR.to_be_bytes()[..], &root.encode()[..])?;
                let root_value = crate::store::checksum::seal(&encode_root_record(0));
                let root_table: Table = env.create_database(&mut wtxn, Some(&record_table_name(ROOT_CLASS)))?;
                root_table.put(&mut wtxn, &ROOT_OID.to_be_bytes()[..], &root_value[..])?;
                tables.meta.put(&mut wtxn, META_FORMAT, &STORE_FORMAT.to_be_bytes()[..])?;
                tables.meta.put(&mut wtxn, META_TID, &0u64.to_be_bytes()[..])?;
                tables.meta.put(&mut wtxn, ANCHORS_RECORDED, &[][..])?;
            }
            STORE_FORMAT => {}
            SHARED_RECORDS_FORMAT => {
                migrate_shared_records(env, &mut wtxn, &mut records)?;
                tables.meta.put(&mut wtxn, META_FORMAT, &STORE_FORMAT.to_be_bytes()[..])?;
            }
            other => return Err(unreadable_format(path, other)),
        }
        records.open_listed(env, tables.main, &wtxn)?;
        if records.get(ROOT_CLASS).is_none() {
            return Err(missing_root_table(env, &wtxn, main));
        }
        // Committed even when nothing was written: LMDB closes database handles opened in a
        // transaction that aborts.
        wtxn.commit()?;
        Ok((tables, records, found_format))
    }

    /// Opens the tables of an existing store of the current format without writing anything.
    pub(super) fn read_tables(env: &Env<WithoutTls>, path: &Path) -> Result<(Tables, RecordTables, u32), StoreError> {
        let txn = env.read_txn()?;
        let main = unnamed_table(env, &txn, path)?;
        if main.is_empty(&txn)? {
            return Err(StoreError::Storage {
                message: format!("{} holds no copal database yet, and a read-only open creates none", path.display()),
            });
        }
        let [descriptors, log, meta, index_defs, index_entries] =
            FIXED_TABLES.map(|name| open_fixed_table(env, &txn, main, name));
        let tables = Tables { main, descriptors: descriptors?, log: log?, meta: meta?, index_defs: index_defs?, index_entries: index_entries? };
        match format_of(tables.meta.get(&txn, META_FORMAT)?) {
            0 => return Err(no_format(path)),
            STORE_FORMAT => {}
            SHARED_RECORDS_FORMAT => {
                return Err(StoreError::Incompatible {
                    message: format!(
                        "{} has store format {SHARED_RECORDS_FORMAT}, which a read-only open cannot migrate: \
                         open it once without readonly, or run `copal upgrade` on it",
                        path.display()
                    ),
                })
            }
            other => return Err(unreadable_format(path, other)),
        }
        let mut records = RecordTables::default();
        records.open_listed(env, tables.main, &txn)?;
        if records.get(ROOT_CLASS).is_none() {
            return Err(missing_root_table(env, &txn, main));
        }
        // Committed, so that the handles it opened stay open for every later transaction.
        txn.commit()?;
        Ok((tables, records, STORE_FORMAT))
    }
}
