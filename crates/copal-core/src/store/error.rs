use std::fmt;

use crate::format::{DecodeError, Oid};

/// Why a store operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// Another transaction committed a change to `oid` after this transaction read it.
    Conflict { oid: Oid, read_tid: u64, stored_tid: Option<u64> },
    /// Stored bytes (a record, a descriptor, the commit log) could not be decoded.
    Corrupt { what: String, source: DecodeError },
    /// The storage engine failed: I/O error, disk or map full, lock or environment trouble.
    /// The message names the engine where the failure is the engine's own ("PostgreSQL: ...",
    /// "LMDB: ..."); the error kind itself is not repeated in it.
    Storage { message: String },
    /// The database's layout (LMDB store format, PostgreSQL schema version) is one this copal
    /// cannot use: written by a newer copal, or older and in need of `copal upgrade`.
    Incompatible { message: String },
    /// The database's own structure is damaged: a table it needs, or its root record, is
    /// missing. copal reports such a store and never initialises it again, which would hide
    /// its data.
    Damaged { message: String },
    /// The database has no room for more classes or objects of a class.
    Exhausted { message: String },
    /// A commit would store two objects with the same key in a unique index.
    UniqueViolation { index: String, oid: Oid, other: Oid },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Conflict { oid, read_tid, stored_tid } => match stored_tid {
                Some(stored) => write!(
                    f,
                    "object {oid:#x} was changed by transaction {stored} after this transaction read it \
                     (at {read_tid}); retry the transaction"
                ),
                None => write!(f, "object {oid:#x} was deleted by another transaction after this one read it; retry the transaction"),
            },
            Self::Corrupt { what, source } => write!(f, "corrupt {what}: {source}"),
            Self::Storage { message } | Self::Incompatible { message } | Self::Exhausted { message } => f.write_str(message),
            Self::Damaged { message } => write!(f, "damaged database: {message}; nothing was changed: restore it from a backup"),
            Self::UniqueViolation { index, oid, other } => write!(
                f,
                "object {oid:#x} has the same key as object {other:#x} in unique index {index}; \
                 nothing of this transaction was written"
            ),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<heed::Error> for StoreError {
    fn from(error: heed::Error) -> Self {
        let message = match &error {
            heed::Error::Mdb(heed::MdbError::MapFull) => {
                "the database map is full (map_size reached); nothing of this transaction was written. \
                 Reopen with a larger map_size"
                    .to_owned()
            }
            heed::Error::Mdb(heed::MdbError::ReadersFull) => {
                "LMDB: every reader slot of the database is taken (MDB_READERS_FULL): the processes using it \
                 hold as many open transactions as it has slots. End each transaction (a `with \
                 db.transaction()` block does), close Databases no longer used, or stop the process that \
                 holds them; the slots of processes that have exited are freed when the database is next opened"
                    .to_owned()
            }
            heed::Error::Io(io) if io.raw_os_error() == Some(28) => {
                "no space left on device; nothing of this transaction was written".to_owned()
            }
            other => format!("LMDB: {other}"),
        };
        StoreError::Storage { message }
    }
}
