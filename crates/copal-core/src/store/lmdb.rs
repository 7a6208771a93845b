//! The embedded store: one LMDB environment (a directory) holding four named databases.
//!
//! | database      | key                      | value                                   |
//! |---------------|--------------------------|-----------------------------------------|
//! | `records`     | oid, u64 big-endian      | record bytes (docs/FORMAT.md "Records") |
//! | `descriptors` | descriptor id, u32 BE    | descriptor bytes                        |
//! | `log`         | tid, u64 BE              | changed oids, delta-varints             |
//! | `meta`        | ASCII name               | format version, last tid                |

use std::collections::HashMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use heed::types::Bytes;
use heed::{Database, Env, EnvOpenOptions, RoTxn, WithoutTls};

use super::catalog::Catalog;
use super::error::StoreError;
use super::stats::StoreStats;
use crate::format::{encode_root_record, Descriptor, ROOT_CLASS, ROOT_DESCRIPTOR, ROOT_OID, ROOT_TYPE_NAME};

pub(crate) type Table = Database<Bytes, Bytes>;

pub(crate) const META_FORMAT: &[u8] = b"format";
pub(crate) const META_TID: &[u8] = b"tid";
const STORE_FORMAT: u32 = 1;

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Address space reserved for the map. The file itself only grows as data is written, so the
    /// default reserves a terabyte of virtual memory and the database never has to be resized.
    pub map_size: usize,
    pub max_readers: u32,
    /// fsync at every commit (LMDB's default). Without it a machine crash may lose the last
    /// commits, but never corrupts the database.
    pub durable: bool,
    /// How many commits the commit log keeps for cache invalidation; a connection that falls
    /// further behind drops its whole cache.
    pub log_retention: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { map_size: 1 << 40, max_readers: 1022, durable: true, log_retention: 100_000 }
    }
}

pub struct LmdbStore {
    pub(crate) env: Env<WithoutTls>,
    pub(crate) records: Table,
    pub(crate) descriptors: Table,
    pub(crate) log: Table,
    pub(crate) meta: Table,
    pub(crate) index_defs: Table,
    pub(crate) index_entries: Table,
    pub(crate) catalog: RwLock<Catalog>,
    pub(crate) options: StoreOptions,
    pub stats: StoreStats,
    path: PathBuf,
}

/// LMDB refuses to open one environment twice in a process, so every `open` of the same
/// directory shares one store (and its catalog and counters).
fn open_stores() -> &'static Mutex<HashMap<PathBuf, Weak<LmdbStore>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<LmdbStore>>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

impl LmdbStore {
    pub fn open(path: &Path, options: StoreOptions) -> Result<Arc<LmdbStore>, StoreError> {
        std::fs::create_dir_all(path).map_err(|e| StoreError::Storage {
            message: format!("cannot create database directory {}: {e}", path.display()),
        })?;
        let canonical = path.canonicalize().map_err(|e| StoreError::Storage {
            message: format!("cannot resolve {}: {e}", path.display()),
        })?;
        let mut open = open_stores().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(store) = open.get(&canonical).and_then(Weak::upgrade) {
            return Ok(store);
        }
        let store = Arc::new(Self::open_env(&canonical, options)?);
        open.insert(canonical, Arc::downgrade(&store));
        Ok(store)
    }

    fn open_env(path: &Path, options: StoreOptions) -> Result<LmdbStore, StoreError> {
        let mut env_options = EnvOpenOptions::new().read_txn_without_tls();
        env_options.map_size(options.map_size).max_readers(options.max_readers).max_dbs(8);
        if !options.durable {
            // SAFETY: NO_SYNC only changes when LMDB calls fsync; it does not affect memory safety.
            unsafe { env_options.flags(heed::EnvFlags::NO_SYNC) };
        }
        // SAFETY: copal is the only writer of this directory's files, always through LMDB's own
        // locking; nothing truncates or rewrites the map behind LMDB's back.
        let env = unsafe { env_options.open(path) }?;
        env.clear_stale_readers()?;
        let mut wtxn = env.write_txn()?;
        let records = env.create_database(&mut wtxn, Some("records"))?;
        let descriptors = env.create_database(&mut wtxn, Some("descriptors"))?;
        let log = env.create_database(&mut wtxn, Some("log"))?;
        let meta: Table = env.create_database(&mut wtxn, Some("meta"))?;
        let index_defs = env.create_database(&mut wtxn, Some("index_defs"))?;
        let index_entries = env.create_database(&mut wtxn, Some("index_entries"))?;
        match meta.get(&wtxn, META_FORMAT)? {
            None => {
                let root = Descriptor {
                    id: ROOT_DESCRIPTOR,
                    class_no: ROOT_CLASS,
                    type_name: ROOT_TYPE_NAME.to_owned(),
                    fields: vec!["data".to_owned()],
                };
                descriptors.put(&mut wtxn, &ROOT_DESCRIPTOR.to_be_bytes()[..], &root.encode()[..])?;
                records.put(&mut wtxn, &ROOT_OID.to_be_bytes()[..], &super::checksum::seal(&encode_root_record(0))[..])?;
                meta.put(&mut wtxn, META_FORMAT, &STORE_FORMAT.to_be_bytes()[..])?;
                meta.put(&mut wtxn, META_TID, &0u64.to_be_bytes()[..])?;
            }
            Some(bytes) if bytes == STORE_FORMAT.to_be_bytes() => {}
            Some(_) => {
                return Err(StoreError::Incompatible {
                    message: format!("{} was written by an incompatible copal store format", path.display()),
                })
            }
        }
        // Committed even when nothing was written: LMDB closes database handles opened in a
        // transaction that aborts.
        wtxn.commit()?;
        let store = LmdbStore {
            env,
            records,
            descriptors,
            log,
            meta,
            index_defs,
            index_entries,
            catalog: RwLock::new(Catalog::default()),
            options,
            stats: StoreStats::default(),
            path: path.to_owned(),
        };
        {
            let rtxn = store.env.read_txn()?;
            store.refresh_catalog(&rtxn)?;
        }
        Ok(store)
    }

    /// The stored value of `oid` as it is on disk (record and checksum), for repair tools.
    pub fn raw_value(&self, oid: crate::format::Oid) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.env.read_txn()?;
        Ok(self.records.get(&txn, &oid.to_be_bytes())?.map(<[u8]>::to_vec))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Size in bytes of the files of the environment.
    pub fn disk_size(&self) -> Result<u64, StoreError> {
        Ok(self.env.real_disk_size()?)
    }

    pub fn catalog(&self) -> std::sync::RwLockReadGuard<'_, Catalog> {
        self.catalog.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Loads descriptors that other processes (or connections) added since the catalog was read.
    pub(crate) fn refresh_catalog(&self, txn: &RoTxn<'_>) -> Result<(), StoreError> {
        let known = self.catalog().max_id;
        let start = (known + 1).to_be_bytes();
        let mut fresh = Vec::new();
        for entry in self.descriptors.range(txn, &(Bound::Included(&start[..]), Bound::Unbounded))? {
            let (key, value) = entry?;
            let id = read_u32_key(key)?;
            let descriptor = Descriptor::decode(id, value)
                .map_err(|source| StoreError::Corrupt { what: format!("descriptor {id}"), source })?;
            fresh.push(Arc::new(descriptor));
        }
        if !fresh.is_empty() {
            let mut catalog = self.catalog.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            fresh.into_iter().for_each(|d| catalog.insert(d));
        }
        Ok(())
    }
}

/// The half-open key range `[first, end)` in the form heed accepts for unsized keys.
pub(crate) fn key_range<'k>(first: &'k [u8], end: &'k [u8]) -> (Bound<&'k [u8]>, Bound<&'k [u8]>) {
    (Bound::Included(first), Bound::Excluded(end))
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
