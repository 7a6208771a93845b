//! Hot backups: a consistent, compacted copy of the store taken while writers keep committing.
//!
//! A backup is written into a hidden directory beside the destination and renamed to it only
//! once complete and synced, so the destination never holds part of a copy: a backup that fails
//! removes its partial copy, and one that is killed leaves it under the hidden name
//! (`.NAME.partial-PID`), which no open mistakes for a database.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use heed::CompactionOption;

use super::error::{available_space, out_of_space, StoreError, NEARLY_FULL};
use super::transfer::TransferError;
use super::{lmdb, Backend, Store, StoreOptions};

impl Store {
    /// Copies the database into the new directory `dest`, as an embedded store, and returns the
    /// copy's size in bytes. The copy holds exactly the commits made before it started, however
    /// many commit meanwhile (writers are never blocked), and leaves free space out. `dest` must
    /// not exist or be an empty directory.
    ///
    /// An embedded store is copied page by page inside one LMDB read transaction. A PostgreSQL
    /// database is copied object by object from one snapshot (`copy_into`), with the same
    /// oids, descriptors and indexes: the backup opens with `copal.open(dest)`, and
    /// `copal export dest | copal import URL` restores it into a new PostgreSQL database.
    pub fn backup(self: &Arc<Self>, dest: &Path) -> Result<u64, StoreError> {
        let storage = |what: &str, e: &dyn Display| StoreError::Storage {
            message: format!("backup to {}: {what}: {e}", dest.display()),
        };
        if dest.exists() {
            let mut entries = std::fs::read_dir(dest).map_err(|e| storage("cannot read the destination", &e))?;
            if entries.next().is_some() {
                return Err(StoreError::Storage {
                    message: format!("backup to {}: the destination is not empty; choose a new directory", dest.display()),
                });
            }
        }
        let partial = partial_path(dest)?;
        // A directory of this name is the copy of an earlier backup by a process of the same
        // id that was killed.
        if partial.exists() {
            std::fs::remove_dir_all(&partial).map_err(|e| storage("cannot remove an earlier partial copy", &e))?;
        }
        std::fs::create_dir_all(&partial).map_err(|e| storage("cannot create the destination", &e))?;
        let copied = self.copy_to(&partial);
        let size = match copied {
            Ok(size) => size,
            Err(failure) => {
                let full = failure.out_of_space || available_space(&partial).is_some_and(|bytes| bytes < NEARLY_FULL);
                let left = std::fs::remove_dir_all(&partial).is_err().then_some(partial.as_path());
                return Err(backup_failed(dest, &failure.cause, full, left));
            }
        };
        std::fs::rename(&partial, dest).map_err(|e| storage("cannot move the finished copy into place", &e))?;
        // The rename is durable once the directory holding it is synced.
        let parent = std::fs::File::open(parent_of(dest)).and_then(|dir| dir.sync_all());
        parent.map_err(|e| storage("cannot sync the directory holding the copy", &e))?;
        Ok(size)
    }

    /// Writes the backup into the empty directory `dir`; its size in bytes.
    fn copy_to(self: &Arc<Self>, dir: &Path) -> Result<u64, CopyFailure> {
        let Backend::Lmdb(source) = &self.backend else {
            let options = StoreOptions { log_retention: self.log_retention, ..StoreOptions::default() };
            let copy = lmdb::open(dir, options).map_err(CopyFailure::store)?;
            self.copy_into(&copy, &mut |_, _| {}).map_err(|e| match e {
                TransferError::Store(e) => CopyFailure::store(e),
                other => CopyFailure { cause: other.to_string(), out_of_space: false },
            })?;
            return copy.disk_size().map_err(CopyFailure::store);
        };
        let file = source.env().copy_to_path(dir.join(lmdb::DATA_FILE), CompactionOption::Enabled).map_err(|e| {
            let out_of_space = out_of_space(&e, None);
            CopyFailure { cause: StoreError::from(e).to_string(), out_of_space }
        })?;
        let io = |e: std::io::Error| CopyFailure { out_of_space: e.raw_os_error() == Some(libc::ENOSPC), cause: e.to_string() };
        file.sync_all().map_err(io)?;
        Ok(file.metadata().map_err(io)?.len())
    }
}

/// Why a copy failed: the cause in words, and whether it was reported as a full file system.
struct CopyFailure {
    cause: String,
    out_of_space: bool,
}

impl CopyFailure {
    fn store(error: StoreError) -> Self {
        CopyFailure { cause: error.to_string(), out_of_space: false }
    }
}

/// The hidden directory beside `dest` that a backup by this process is written into.
fn partial_path(dest: &Path) -> Result<PathBuf, StoreError> {
    let name = dest.file_name().ok_or_else(|| StoreError::Storage {
        message: format!("backup to {}: the destination names no directory; give it a name", dest.display()),
    })?;
    Ok(parent_of(dest).join(format!(".{}.partial-{}", name.to_string_lossy(), std::process::id())))
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// The error of a backup to `dest` whose copy failed with `cause`; `full`: the file system ran
/// out of space; `left`: the partial copy that could not be removed.
fn backup_failed(dest: &Path, cause: &str, full: bool, left: Option<&Path>) -> StoreError {
    let what = if full { "no space left on device".to_owned() } else { format!("the copy failed: {cause}") };
    let aftermath = match left {
        None => "nothing was written to the destination".to_owned(),
        Some(partial) => format!("nothing was written to the destination, and the partial copy {} remains: delete it", partial.display()),
    };
    let next = if full { "; free space there, or back up to another file system" } else { "" };
    StoreError::Storage { message: format!("backup to {}: {what}; {aftermath}{next}", dest.display()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_backup_says_so_and_not_that_a_transaction_was_undone() {
        let full = backup_failed(Path::new("/b/copy"), "LMDB: Input/output error (os error 5)", true, None).to_string();
        assert!(full.starts_with("backup to /b/copy: no space left on device; nothing was written to the destination"), "{full}");
        let other = backup_failed(Path::new("/b/copy"), "LMDB: boom", false, Some(Path::new("/b/.copy.partial-7"))).to_string();
        assert!(other.contains("the copy failed: LMDB: boom") && other.contains("/b/.copy.partial-7 remains"), "{other}");
        for message in [full, other] {
            assert!(!message.contains("transaction"), "{message}");
        }
    }

    #[test]
    fn the_partial_copy_is_a_hidden_sibling_of_the_destination() {
        let pid = std::process::id();
        assert_eq!(partial_path(Path::new("/b/copy")).unwrap(), PathBuf::from(format!("/b/.copy.partial-{pid}")));
        assert_eq!(partial_path(Path::new("copy")).unwrap(), PathBuf::from(format!("./.copy.partial-{pid}")));
        assert!(partial_path(Path::new("/")).is_err());
    }
}
