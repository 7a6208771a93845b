use std::fmt;
use std::path::Path;

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
    /// A commit was begun on a store opened read-only (`StoreOptions::read_only`), at `location`.
    ReadOnly { location: String },
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
            Self::ReadOnly { location } => write!(
                f,
                "{location} is open read-only (readonly=True): nothing can be written through it; open it \
                 without readonly to change it"
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
            heed::Error::Io(io) if io.raw_os_error() == Some(ENOSPC) => NO_SPACE.to_owned(),
            other => format!("LMDB: {other}"),
        };
        StoreError::Storage { message }
    }
}

const EIO: i32 = 5;
const ENOSPC: i32 = 28;
const NO_SPACE: &str = "no space left on device; nothing of this transaction was written. Free space on the \
    file system that holds the database, then run the transaction again";

/// Below this many bytes available, a failed write is taken for a full file system.
pub(crate) const NEARLY_FULL: u64 = 1 << 20;

/// Whether LMDB's `error` from writing is a full file system, given the bytes `available` to
/// unprivileged users on it (None: unknown). LMDB reports a short write, which is how a full
/// disk usually shows, as EIO, so an EIO counts as a full disk when almost nothing is left.
pub(crate) fn out_of_space(error: &heed::Error, available: Option<u64>) -> bool {
    match error {
        heed::Error::Io(io) => match io.raw_os_error() {
            Some(ENOSPC) => true,
            Some(EIO) => available.is_some_and(|bytes| bytes < NEARLY_FULL),
            _ => false,
        },
        _ => false,
    }
}

/// The bytes available to unprivileged users on the file system holding `path` (None: not known
/// on this platform, or `statvfs` failed).
pub(crate) fn available_space(path: &Path) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: `path` is NUL-terminated and `stats` is writable memory of the type statvfs
        // fills; it is read only after statvfs reports success.
        let stats = unsafe {
            if libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) != 0 {
                return None;
            }
            stats.assume_init()
        };
        #[allow(clippy::unnecessary_cast)] // The field types differ between platforms.
        Some(stats.f_bavail as u64 * stats.f_frsize as u64)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// The error of an LMDB write to the environment in directory `path`: a full file system is
/// said so, whichever way LMDB reports it.
pub(crate) fn write_error(error: heed::Error, path: &Path) -> StoreError {
    let available = matches!(&error, heed::Error::Io(io) if io.raw_os_error() == Some(EIO)).then(|| available_space(path)).flatten();
    write_error_with(error, available)
}

fn write_error_with(error: heed::Error, available: Option<u64>) -> StoreError {
    if out_of_space(&error, available) {
        return StoreError::Storage { message: NO_SPACE.to_owned() };
    }
    error.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os_error(code: i32) -> heed::Error {
        heed::Error::Io(std::io::Error::from_raw_os_error(code))
    }

    #[test]
    fn an_input_output_error_on_a_full_file_system_is_no_space() {
        for available in [0, NEARLY_FULL - 1] {
            let message = write_error_with(os_error(EIO), Some(available)).to_string();
            assert!(message.starts_with("no space left on device"), "{message}");
        }
        assert!(write_error_with(os_error(ENOSPC), None).to_string().starts_with("no space left on device"));
    }

    #[test]
    fn an_input_output_error_with_space_left_stays_one() {
        for available in [Some(NEARLY_FULL), Some(u64::MAX), None] {
            let message = write_error_with(os_error(EIO), available).to_string();
            assert!(message.starts_with("LMDB: Input/output error"), "{message}");
        }
    }

    #[test]
    fn available_space_reads_the_file_system() {
        if cfg!(unix) {
            assert!(available_space(Path::new(".")).is_some());
        }
        assert_eq!(available_space(Path::new("/no/such/directory/anywhere")), None);
    }
}
