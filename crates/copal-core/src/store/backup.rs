//! Hot backups: a consistent, compacted copy of the store taken while writers keep committing.

use std::path::Path;
use std::sync::Arc;

use heed::CompactionOption;

use super::error::StoreError;
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
        let Backend::Lmdb(source) = &self.backend else {
            let options = StoreOptions { log_retention: self.log_retention, ..StoreOptions::default() };
            let copy = lmdb::open(dest, options)?;
            self.copy_into(&copy, &mut |_, _| {}).map_err(|e| match e {
                TransferError::Store(e) => e,
                other => storage("copy failed", &other),
            })?;
            return copy.disk_size();
        };
        let file = source.env().copy_to_path(dest.join("data.mdb"), CompactionOption::Enabled)?;
        let size = file.metadata().map_err(|e| storage("cannot read the copy", &e))?.len();
        file.sync_all().map_err(|e| storage("cannot sync the copy", &e))?;
        Ok(size)
    }
}
