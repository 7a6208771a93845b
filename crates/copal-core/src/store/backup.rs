//! Hot backups: a consistent, compacted copy of the store taken while writers keep committing.

use std::path::Path;

use heed::CompactionOption;

use super::error::StoreError;
use super::{Backend, Store};

impl Store {
    /// Copies an embedded store into the new directory `dest` and returns the copy's size in
    /// bytes.
    ///
    /// LMDB copies inside one read transaction, so the copy holds exactly the commits made
    /// before it started, however many commit meanwhile (writers are never blocked). The copy
    /// is compacted: free pages are left out. `dest` must not exist or be an empty directory.
    /// A PostgreSQL database is backed up with PostgreSQL's own tools (`pg_dump`).
    pub fn backup(&self, dest: &Path) -> Result<u64, StoreError> {
        let Backend::Lmdb(lmdb) = &self.backend else {
            return Err(StoreError::Storage {
                message: "copal backup copies embedded databases; back up a PostgreSQL database with pg_dump".to_owned(),
            });
        };
        let storage = |what: &str, e: &dyn std::fmt::Display| StoreError::Storage {
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
        std::fs::create_dir_all(dest).map_err(|e| storage("cannot create the destination", &e))?;
        let file = lmdb.env().copy_to_path(dest.join("data.mdb"), CompactionOption::Enabled)?;
        let size = file.metadata().map_err(|e| storage("cannot read the copy", &e))?.len();
        file.sync_all().map_err(|e| storage("cannot sync the copy", &e))?;
        Ok(size)
    }
}
