//! Storage: one `Store` front over interchangeable backends (docs/ARCHITECTURE.md "Storage
//! backends"), its snapshots and its commit protocol (DESIGN.md §4).
//!
//! The shared layers (`Snapshot`, `Commit`, the catalog, index maintenance, `verify`) are written
//! once over a small set of table primitives (get, range scan, put, delete on the records,
//! descriptors, log, meta, index tables) that each backend provides. Backends are variants of
//! enums rather than trait objects: a visitor closure stays generic (inlined into the per-record
//! loop) and the per-call `match` costs one predictable branch.

mod anchors;
mod backup;
mod catalog;
mod checksum;
mod commit;
mod error;
mod gc;
mod index;
mod inspect;
mod lmdb;
mod new_database;
mod pg_columns;
mod pg_pool;
mod pg_schema;
mod pg_settings;
mod pg_write;
mod postgres;
mod schema;
mod setup;
mod snapshot;
mod stats;
#[cfg(test)]
mod test_support;
mod transfer;
mod transfer_binary;
mod transfer_record;
mod transfer_text;
mod verify;

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

pub use catalog::Catalog;
pub use checksum::unseal;
pub use commit::Commit;
pub use error::StoreError;
pub use gc::{GcOptions, GcProgress, GcReport, Progress as GcProgressFn};
pub use index::{entry_oid, prefix_end, stale_indexes, DeclaredIndex, FieldDefault, IndexDef, RemovedIndex};
pub use inspect::{RecordSummary, TableSpace};
pub use lmdb::{CompactReport, PageCheck, StoreOptions};
pub use pg_pool::PoolLimits;
pub use schema::{DescriptorUse, RemovedValues, SchemaGcReport, SchemaSummary};
pub use setup::MigrationReport;
pub use snapshot::Snapshot;
pub use stats::StoreStats;
pub use transfer::{EntryFault, ExportFormat, TransferError, TransferReport};
pub use verify::VerifyReport;

use crate::format::{Descriptor, Oid};

/// The `meta` name of the last committed tid.
pub(crate) const META_TID: &[u8] = b"tid";

/// An open database: a backend plus what every backend shares (the descriptor catalog cached
/// in memory).
pub struct Store {
    pub(crate) backend: Backend,
    pub(crate) catalog: RwLock<Catalog>,
    pub(crate) log_retention: u64,
    /// The index definitions decoded last, with their stored bytes: a snapshot whose stored
    /// definition is the same bytes shares the decoded one.
    pub(crate) index_defs: Mutex<Vec<StoredIndexDef>>,
}

/// An index definition decoded, and the stored bytes it was decoded from.
pub(crate) type StoredIndexDef = (Arc<[u8]>, Arc<IndexDef>);

pub(crate) enum Backend {
    Lmdb(lmdb::LmdbBackend),
    Postgres(postgres::PgBackend),
}

impl Store {
    /// Opens (creating if absent) the embedded LMDB store in directory `path`. Every open of one
    /// directory in a process returns the same store (LMDB forbids opening it twice).
    pub fn lmdb(path: &Path, options: StoreOptions) -> Result<Arc<Store>, StoreError> {
        lmdb::open(path, options)
    }

    /// Opens the database at `location`: a `postgresql://` (or `postgres://`) URL, creating
    /// copal's tables on first open (an older schema version is refused: see `Store::upgrade`),
    /// or else a directory for the embedded LMDB store. Of the
    /// options, a PostgreSQL store uses `durable` (off: `synchronous_commit = off`), `pool`
    /// and `log_retention`.
    pub fn open(location: &str, options: StoreOptions) -> Result<Arc<Store>, StoreError> {
        if postgres::is_url(location) {
            postgres::open(location, options.durable, options.pool, options.log_retention)
        } else {
            lmdb::open(Path::new(location), options)
        }
    }

    fn new(backend: Backend, log_retention: u64) -> Result<Store, StoreError> {
        let store = Store::without_catalog(backend, log_retention);
        store.refresh_catalog(&snapshot::Read::begin(&store.backend)?)?;
        Ok(store)
    }

    /// A store whose catalog is still to be read (`refresh_catalog`).
    fn without_catalog(backend: Backend, log_retention: u64) -> Store {
        Store { backend, catalog: RwLock::new(Catalog::default()), log_retention, index_defs: Mutex::default() }
    }

    pub fn catalog(&self) -> RwLockReadGuard<'_, Catalog> {
        self.catalog.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Loads descriptors that other processes (or connections) added since the catalog was read.
    pub(crate) fn refresh_catalog(&self, read: &impl DescriptorTable) -> Result<(), StoreError> {
        let known = self.catalog().max_id;
        let mut fresh = Vec::new();
        read.descriptors_after(known, &mut |id, bytes| {
            let descriptor = Descriptor::decode(id, bytes)
                .map_err(|source| StoreError::Corrupt { what: format!("descriptor {id}"), source })?;
            fresh.push(Arc::new(descriptor));
            Ok(())
        })?;
        if !fresh.is_empty() {
            let mut catalog = self.catalog.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            fresh.into_iter().for_each(|d| catalog.insert(d));
        }
        Ok(())
    }

    /// The stored value of `oid` as it is on disk (record and checksum), for repair tools.
    pub fn raw_value(self: &Arc<Self>, oid: Oid) -> Result<Option<Vec<u8>>, StoreError> {
        Snapshot::new(self)?.raw_value(oid)
    }

    /// Where the database lives, for messages and `repr`: a directory, or a URL without its
    /// password.
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Lmdb(lmdb) => lmdb.path().display().to_string(),
            Backend::Postgres(pg) => pg.location().to_owned(),
        }
    }

    /// Whether the store was opened read-only (`StoreOptions::read_only`): every commit fails.
    pub fn read_only(&self) -> bool {
        matches!(&self.backend, Backend::Lmdb(lmdb) if lmdb.read_only())
    }

    /// Size in bytes of the database's files.
    pub fn disk_size(&self) -> Result<u64, StoreError> {
        match &self.backend {
            Backend::Lmdb(lmdb) => lmdb.disk_size(),
            Backend::Postgres(pg) => pg.disk_size(),
        }
    }
}

/// A visitor of `(id, stored bytes)` rows of the descriptors or index definitions table. A
/// trait object: these tables are read rarely and are small, so dynamic dispatch costs nothing.
pub(crate) type IdVisitor<'a> = &'a mut dyn FnMut(u32, &[u8]) -> Result<(), StoreError>;

/// A visitor of `(key, value)` settings: small store-level declarations kept as bytes (the
/// removed fields of classes, schema.rs).
pub(crate) type SettingVisitor<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> Result<(), StoreError>;

/// Reading the descriptors table, in a snapshot or inside a commit.
pub(crate) trait DescriptorTable {
    /// Calls `visit(id, descriptor bytes)` for every descriptor with an id above `known`.
    fn descriptors_after(
        &self,
        known: u32,
        visit: IdVisitor<'_>,
    ) -> Result<(), StoreError>;
}

pub(crate) fn read_u32_key(key: &[u8]) -> Result<u32, StoreError> {
    key.try_into().map(u32::from_be_bytes).map_err(|_| bad_key("descriptor"))
}

pub(crate) fn read_u64_key(key: &[u8], what: &str) -> Result<u64, StoreError> {
    key.try_into().map(u64::from_be_bytes).map_err(|_| bad_key(what))
}

fn bad_key(what: &str) -> StoreError {
    StoreError::Corrupt {
        what: format!("{what} key"),
        source: crate::format::DecodeError::OutOfRange { offset: 0, what: "key length" },
    }
}
