//! Creating a new embedded database: LMDB maps its lock file and writes into the map, so on a
//! full file system a new database does not fail, it dies of SIGBUS when the page under the map
//! cannot be allocated. A database is created only where the file system has room for what
//! creating it writes (`NEARLY_FULL`, 1 MiB: the lock file's 64 KiB, the first pages of the data
//! file and its first commits), and a creation that fails anyway (the file system filled in the
//! meantime) leaves nothing behind: the files LMDB made and the directories made for them are
//! removed.

use std::path::{Path, PathBuf};

use super::error::{available_space, StoreError, NEARLY_FULL};
use super::lmdb::{DATA_FILE, LOCK_FILE};

/// A new database's directory, made ready for LMDB to create its files in; `undo` removes what
/// the creation made.
pub(crate) struct NewDatabase {
    path: PathBuf,
    /// The outermost directory this creation made (None if the directory existed).
    made: Option<PathBuf>,
}

/// Whether the directory `path` holds no database yet (an open creates one there).
pub(crate) fn is_new(path: &Path) -> bool {
    !path.join(DATA_FILE).exists()
}

impl NewDatabase {
    /// Checks that the file system of `path` has room for a new database, then makes the
    /// directory (and its missing parents).
    pub(crate) fn prepare(path: &Path) -> Result<NewDatabase, StoreError> {
        let existing = path.ancestors().find(|dir| dir.exists()).unwrap_or(Path::new("."));
        if let Some(available) = available_space(existing).filter(|&bytes| bytes < NEARLY_FULL) {
            return Err(no_space(path, Some(available)));
        }
        let made = path.ancestors().take_while(|dir| !dir.exists()).last().map(Path::to_owned);
        std::fs::create_dir_all(path).map_err(|e| StoreError::Storage {
            message: format!("cannot create database directory {}: {e}", path.display()),
        })?;
        Ok(NewDatabase { path: path.to_owned(), made })
    }

    /// Removes what creating the database made, after `error` stopped it; the error to report:
    /// a full file system says so.
    pub(crate) fn undo(self, error: StoreError) -> StoreError {
        let available = available_space(&self.path);
        for file in [DATA_FILE, LOCK_FILE] {
            let _ = std::fs::remove_file(self.path.join(file));
        }
        if let Some(made) = &self.made {
            // Only the directories this creation made, and only if nothing else is in them.
            for dir in self.path.ancestors().take_while(|dir| dir.starts_with(made)) {
                let _ = std::fs::remove_dir(dir);
            }
        }
        match available {
            Some(bytes) if bytes < NEARLY_FULL => no_space(&self.path, available),
            _ => error,
        }
    }
}

fn no_space(path: &Path, available: Option<u64>) -> StoreError {
    let free = available.map_or_else(String::new, |bytes| format!(" ({bytes} bytes are free)"));
    StoreError::Storage {
        message: format!(
            "no space left on device: a new database needs at least {} KiB free on the file system that would \
             hold {}{free}; nothing was created. Free space there, or create the database elsewhere",
            NEARLY_FULL >> 10,
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_creation_removes_what_it_made_and_nothing_else() {
        let root = std::env::temp_dir().join(format!("copal-new-database-{}", std::process::id()));
        let kept = root.join("kept");
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::write(kept.join("other"), b"x").unwrap();
        let path = root.join("a").join("b").join("db");
        let new = NewDatabase::prepare(&path).unwrap();
        assert!(path.is_dir() && is_new(&path));
        std::fs::write(path.join(DATA_FILE), b"partial").unwrap();
        std::fs::write(path.join(LOCK_FILE), b"partial").unwrap();
        let error = new.undo(StoreError::Storage { message: "failed".into() });
        assert_eq!(error.to_string(), "failed");
        assert!(!root.join("a").exists() && kept.join("other").exists());
        // In a directory that existed, the directory stays.
        let new = NewDatabase::prepare(&kept).unwrap();
        std::fs::write(kept.join(DATA_FILE), b"partial").unwrap();
        new.undo(StoreError::Storage { message: "failed".into() });
        assert!(kept.join("other").exists() && !kept.join(DATA_FILE).exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn no_space_says_what_is_needed_and_that_nothing_was_created() {
        let message = no_space(Path::new("/full/db"), Some(4096)).to_string();
        assert!(message.starts_with("no space left on device: a new database needs at least 1024 KiB free"), "{message}");
        assert!(message.contains("/full/db (4096 bytes are free); nothing was created"), "{message}");
    }
}
