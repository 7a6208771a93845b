//! The names in LMDB's unnamed database, which lists the environment's named tables.
//!
//! Invariant: a new environment lists no table, and copal creates them all in the write
//! transaction that initialises it; from then on it lists every fixed table and the root's
//! record table. An environment that lists some tables but lacks one of these is damaged: it is
//! reported (`StoreError::Damaged`) before anything is written, never initialised again, which
//! would replace the store's data with an empty root.

use heed::types::Bytes;
use heed::{Env, RoTxn, RwTxn, WithoutTls};

use super::record_tables::{record_table_name, RECORD_TABLE_PREFIX, SHARED_RECORDS};
use super::Table;
use crate::format::{ClassNo, ROOT_CLASS};
use crate::store::error::StoreError;

/// The tables every store holds besides its record tables.
pub(super) const FIXED_TABLES: [&str; 5] = ["descriptors", "log", "meta", "index_defs", "index_entries"];

/// Opens the fixed table `name`: created when the environment is new (`create`), required
/// otherwise.
pub(super) fn fixed_table(env: &Env<WithoutTls>, wtxn: &mut RwTxn<'_>, main: Table, name: &str, create: bool) -> Result<Table, StoreError> {
    if create {
        return Ok(env.create_database(wtxn, Some(name))?);
    }
    open_fixed_table(env, wtxn, main, name)
}

/// Opens the fixed table `name` of an initialised environment.
pub(super) fn open_fixed_table(env: &Env<WithoutTls>, txn: &RoTxn<'_>, main: Table, name: &str) -> Result<Table, StoreError> {
    env.open_database::<Bytes, Bytes>(txn, Some(name))?.ok_or_else(|| missing(env, txn, main, name, "a table every store holds"))
}

/// The error of an initialised environment whose list of tables lacks `name` (`role`: what the
/// table holds), naming the listed tables that copal never writes: a damaged name is often
/// among them.
pub(super) fn missing(env: &Env<WithoutTls>, txn: &RoTxn<'_>, main: Table, name: &str, role: &str) -> StoreError {
    let foreign = match foreign_names(main, txn) {
        Ok(names) if !names.is_empty() => format!("; it lists tables copal does not write: {}", names.join(", ")),
        Ok(_) => String::new(),
        Err(error) => format!("; its list of tables does not read: {error}"),
    };
    let path = env.path().display();
    StoreError::Damaged { message: format!("{path} has committed data but no table {name} ({role}){foreign}") }
}

/// The error of a store without its root's record table.
pub(super) fn missing_root_table(env: &Env<WithoutTls>, txn: &RoTxn<'_>, main: Table) -> StoreError {
    missing(env, txn, main, &record_table_name(ROOT_CLASS), "the root's record")
}

/// The listed names that are neither fixed tables nor record tables.
fn foreign_names(main: Table, txn: &RoTxn<'_>) -> Result<Vec<String>, StoreError> {
    let mut names = Vec::new();
    for entry in main.iter(txn)? {
        let name = String::from_utf8_lossy(entry?.0).into_owned();
        let record_table = name.strip_prefix(RECORD_TABLE_PREFIX).is_some_and(|class| class.parse::<ClassNo>().is_ok());
        if !(record_table || name == SHARED_RECORDS || FIXED_TABLES.contains(&name.as_str())) {
            names.push(name);
        }
    }
    Ok(names)
}
