//! The embedded backend: one LMDB environment (a directory) holding five named databases and one
//! record table per class that has stored records.
//!
//! | database          | key                                  | value                                   |
//! |-------------------|--------------------------------------|-----------------------------------------|
//! | `records/<class>` | oid, u64 big-endian                  | record bytes + checksum (FORMAT.md)     |
//! | `descriptors`     | descriptor id, u32 BE                | descriptor bytes                        |
//! | `log`             | tid, u64 BE                          | changed oids, delta-varints             |
//! | `meta`            | ASCII name                           | format version, last tid, high-water    |
//! | `index_defs`      | index id, u32 BE                     | index definition                        |
//! | `index_entries`   | index id ++ index key ++ oid         | empty                                   |
//!
//! `<class>` is the class number in decimal. A class's new objects get ids past every stored one,
//! so their records are appended (MDB_APPEND) to the end of their own table, which fills pages
//! completely; in one shared table they would land mid-tree and LMDB would split pages in half
//! (docs/ARCHITECTURE.md "Storage layout", measured by `examples/record_layout.rs`). Store format
//! 1 kept every record in one `records` table; it is migrated when opened.
//!
//! Reads borrow straight from the memory map: a record handed to a visitor is never copied.

use std::collections::HashMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, TryLockError, Weak};

use heed::types::Bytes;
use heed::{Database, Env, EnvOpenOptions, PutFlags, RoTxn, RwTxn, WithoutTls};

use super::error::StoreError;
use super::new_database::{self, NewDatabase};
use super::{read_u32_key, read_u64_key, Backend, DescriptorTable, IdVisitor, SettingVisitor, Store, META_TID};
use crate::format::{oid_class, ClassNo, Oid};

use record_tables::{record_table_name, too_many_classes, RecordTables, MAX_RECORD_TABLES};
pub use compaction::CompactReport;
pub use options::{PageCheck, StoreOptions};
pub(crate) use data_file::{DATA_FILE, LOCK_FILE};
use map_users::{MapUse, MapUsers};
use table_names::FIXED_TABLES;
#[cfg(test)]
use record_tables::SHARED_RECORDS;

type Table = Database<Bytes, Bytes>;

const META_FORMAT: &[u8] = b"format";
/// Format 2: one record table per class. Format 1 (one shared `records` table) is migrated.
pub(crate) const STORE_FORMAT: u32 = 2;
const SHARED_RECORDS_FORMAT: u32 = 1;

/// The fixed table handles of an environment. Handles are plain numbers, so read and write
/// transactions carry their own copy.
#[derive(Clone, Copy)]
pub(crate) struct Tables {
    /// LMDB's unnamed database, whose keys are the names of the others.
    main: Table,
    descriptors: Table,
    log: Table,
    meta: Table,
    index_defs: Table,
    index_entries: Table,
}

pub(crate) struct LmdbBackend {
    env: Env<WithoutTls>,
    tables: Tables,
    /// The handles of the record tables opened so far, for the transactions that begin from
    /// now on; replaced (never changed in place) when tables are opened.
    records: RwLock<Arc<RecordTables>>,
    /// Held while table handles may be opened: LMDB forbids opening tables in two transactions
    /// of a process at once, and a write transaction may create a table at any point until it
    /// ends.
    opening: Mutex<()>,
    /// Counts this process's transactions, so that the map is replaced only while none runs.
    map_users: MapUsers,
    path: PathBuf,
    /// The store format the directory held when this process opened it (0: none, created), for
    /// `copal upgrade` to report a migration done by the open.
    pub(crate) found_format: u32,
    /// The options the environment was opened with: a later open of the directory in this
    /// process shares it, so it must ask for the same.
    options: StoreOptions,
}

/// LMDB refuses to open one environment twice in a process, so every `open` of the same
/// directory shares one store (and its catalog); an open asking for other options than the
/// store was opened with is refused, since they could not be honoured.
fn open_stores() -> &'static Mutex<HashMap<PathBuf, Weak<Store>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<Store>>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

pub(crate) fn open(path: &Path, options: StoreOptions) -> Result<Arc<Store>, StoreError> {
    // A read-only open creates nothing: the directory and its data file must exist.
    if options.read_only && !path.join(DATA_FILE).is_file() {
        return Err(StoreError::Storage {
            message: format!("{} holds no copal database (no {DATA_FILE}), and a read-only open creates none", path.display()),
        });
    }
    let new = (!options.read_only && new_database::is_new(path)).then(|| NewDatabase::prepare(path)).transpose()?;
    let opened = open_created(path, options);
    match (opened, new) {
        (Err(e), Some(new)) => Err(new.undo(e)),
        (opened, _) => opened,
    }
}

/// `open` of a directory that exists.
fn open_created(path: &Path, options: StoreOptions) -> Result<Arc<Store>, StoreError> {
    let canonical = path.canonicalize().map_err(|e| StoreError::Storage {
        message: format!("cannot resolve {}: {e}", path.display()),
    })?;
    let mut open = open_stores().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(store) = open.get(&canonical).and_then(Weak::upgrade) {
        let difference = match &store.backend {
            Backend::Lmdb(backend) => backend.options.first_difference(&options),
            Backend::Postgres(_) => None,
        };
        if let Some((option, open_with, asked)) = difference {
            return Err(StoreError::Storage {
                message: format!(
                    "{} is already open in this process with {option}={open_with}, and this open asks for \
                     {option}={asked}: LMDB opens a directory once per process, so every open of it shares \
                     that environment and its options until all of them are closed. Open it with the same \
                     options, or close the other Database first",
                    canonical.display()
                ),
            });
        }
        return Ok(store);
    }
    let backend = LmdbBackend::open(&canonical, &options)?;
    let store = Arc::new(Store::new(Backend::Lmdb(backend), options.log_retention)?);
    open.insert(canonical, Arc::downgrade(&store));
    Ok(store)
}

impl LmdbBackend {
    fn open(path: &Path, options: &StoreOptions) -> Result<LmdbBackend, StoreError> {
        // LMDB maps the file and trusts its meta pages: a file shorter than they say faults
        // (SIGBUS) on the first read past its end.
        let data = path.join(DATA_FILE);
        data_file::check_length(&data)?;
        let mut env_options = EnvOpenOptions::new().read_txn_without_tls();
        // One more than the tables of format 2, for the shared table of a format-1 store.
        let max_dbs = (FIXED_TABLES.len() + MAX_RECORD_TABLES + 1) as u32;
        env_options.map_size(options.map_size).max_readers(options.max_readers).max_dbs(max_dbs);
        let mut flags = heed::EnvFlags::empty();
        if !options.durable {
            flags |= heed::EnvFlags::NO_SYNC;
        }
        if options.read_only {
            flags |= heed::EnvFlags::READ_ONLY;
        }
        // SAFETY: NO_SYNC only changes when LMDB calls fsync, and READ_ONLY refuses write
        // transactions; neither affects memory safety.
        unsafe { env_options.flags(flags) };
        let env = loop {
            let before = file_identity(&data);
            // SAFETY: copal is the only writer of this directory's files, always through LMDB's
            // own locking; nothing truncates or rewrites the map behind LMDB's back (compaction
            // replaces the file while no process has it open).
            let env = unsafe { env_options.open(path) }?;
            // A read-only open opens the data file before it waits for LMDB's lock, which a
            // compaction holds while it replaces the file (`compaction`): the file opened may
            // be the one replaced.
            if !options.read_only || file_identity(&data) == before {
                break env;
            }
            env.prepare_for_closing().wait();
        };
        env.clear_stale_readers()?;
        // Before any table is opened, which reads pages through the map; the read transaction
        // keeps the snapshots walked from being overwritten by other processes' commits.
        if options.check_pages.applies_to(&data) {
            let _pin = loop {
                match env.read_txn() {
                    // SAFETY: no transaction of this environment runs, and none begins meanwhile
                    // (it is not published to `open_stores` yet).
                    Err(heed::Error::Mdb(heed::MdbError::MapResized)) => unsafe { env.resize(0) }?,
                    begun => break begun?,
                }
            };
            page_walk::check(&data)?;
        }
        let (tables, records, found_format) =
            if options.read_only { Self::read_tables(&env, path)? } else { Self::prepare_tables(&env, path)? };
        Ok(LmdbBackend {
            env,
            tables,
            records: RwLock::new(Arc::new(records)),
            opening: Mutex::new(()),
            map_users: MapUsers::default(),
            path: path.to_owned(),
            found_format,
            options: options.clone(),
        })
    }

    /// The error of a failed write to this environment (`super::error::write_error`).
    fn write_error(&self, error: heed::Error) -> StoreError {
        super::error::write_error(error, &self.path)
    }

    /// Whether the store was opened read-only (`StoreOptions::read_only`).
    pub(crate) fn read_only(&self) -> bool {
        self.options.read_only
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn env(&self) -> &Env<WithoutTls> {
        &self.env
    }

    /// Walks the data file's pages (`page_walk`) while a read transaction keeps the snapshots
    /// it reads from being overwritten.
    pub(crate) fn check_pages(&self) -> Result<page_walk::WalkSummary, StoreError> {
        let (_user, _pin) = self.map_users.begin(&self.env, || self.env.read_txn())?;
        page_walk::check(&self.path.join(DATA_FILE))
    }

    pub(crate) fn disk_size(&self) -> Result<u64, StoreError> {
        Ok(self.env.real_disk_size()?)
    }

    fn record_tables(&self) -> Arc<RecordTables> {
        Arc::clone(&self.records.read().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Makes `records` the set of open record tables; the caller holds the `opening` lock.
    fn publish(&self, records: Arc<RecordTables>) {
        *self.records.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = records;
    }

    fn lock_opening(&self) -> MutexGuard<'_, ()> {
        self.opening.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens the record tables that other processes created since this one last looked. The
    /// caller holds the `opening` lock.
    fn open_new_record_tables(&self, _opening: &MutexGuard<'_, ()>) -> Result<(), StoreError> {
        let mut records = RecordTables::clone(&self.record_tables());
        let (_user, txn) = self.map_users.begin(&self.env, || self.env.read_txn())?;
        records.open_listed(&self.env, self.tables.main, &txn)?;
        // Committed, so that the handles it opened stay open for every later transaction.
        txn.commit()?;
        self.publish(Arc::new(records));
        Ok(())
    }
}

/// The device and inode of `file` (None where unknown), to tell when it was replaced.
fn file_identity(file: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(file).ok().map(|meta| (meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        None
    }
}

/// The half-open key range `[first, end)` in the form heed accepts for unsized keys.
fn key_range<'k>(first: &'k [u8], end: &'k [u8]) -> (Bound<&'k [u8]>, Bound<&'k [u8]>) {
    (Bound::Included(first), Bound::Excluded(end))
}

/// Calls `visit(id, value)` for the rows of a table keyed by u32 ids, from id `first` on.
fn visit_ids(table: Table, txn: &RoTxn<'_>, first: u32, visit: IdVisitor<'_>) -> Result<(), StoreError> {
    let first = first.to_be_bytes();
    for entry in table.range(txn, &(Bound::Included(&first[..]), Bound::Unbounded))? {
        let (key, value) = entry?;
        visit(read_u32_key(key)?, value)?;
    }
    Ok(())
}

/// Reads shared by snapshots and commits (heed's write transaction reads as a read transaction).
impl Tables {
    /// Calls `visit(key, value)` for the settings whose key starts with `prefix` (they live in
    /// `meta`, whose other keys are the store's own and never start with a settings prefix).
    fn settings(&self, txn: &RoTxn<'_>, prefix: &[u8], visit: SettingVisitor<'_>) -> Result<(), StoreError> {
        let end = super::prefix_end(prefix).unwrap_or_default();
        for entry in self.meta.range(txn, &key_range(prefix, &end))? {
            let (key, value) = entry?;
            visit(key, value)?;
        }
        Ok(())
    }

    fn meta_u64(&self, txn: &RoTxn<'_>, key: &[u8]) -> Result<Option<u64>, StoreError> {
        match self.meta.get(txn, key)? {
            Some(bytes) => Ok(Some(read_u64_key(bytes, "meta value")?)),
            None => Ok(None),
        }
    }

    fn descriptors_after(&self, txn: &RoTxn<'_>, known: u32, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        match known.checked_add(1) {
            Some(first) => visit_ids(self.descriptors, txn, first, visit),
            None => Ok(()),
        }
    }

    fn index_defs(&self, txn: &RoTxn<'_>, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        visit_ids(self.index_defs, txn, 0, visit)
    }

    fn first_logged(&self, txn: &RoTxn<'_>) -> Result<Option<u64>, StoreError> {
        match self.log.first(txn)? {
            Some((key, _)) => Ok(Some(read_u64_key(key, "log")?)),
            None => Ok(None),
        }
    }

    fn log_entries(
        &self,
        txn: &RoTxn<'_>,
        from: u64,
        to: u64,
        mut visit: impl FnMut(u64, &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let (from, to) = (from.to_be_bytes(), to.to_be_bytes());
        for entry in self.log.range(txn, &(Bound::Included(&from[..]), Bound::Included(&to[..])))? {
            let (key, value) = entry?;
            visit(read_u64_key(key, "log")?, value)?;
        }
        Ok(())
    }

    /// Calls `visit(entry key)` for the index entries in `[lo, hi)` (no hi: to the last entry),
    /// in key order or reversed, until it returns false. An empty `lo` starts at the first entry
    /// (LMDB rejects empty keys, even as a bound).
    fn scan_entries(
        &self,
        txn: &RoTxn<'_>,
        lo: &[u8],
        hi: Option<&[u8]>,
        descending: bool,
        mut visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let start = if lo.is_empty() { Bound::Unbounded } else { Bound::Included(lo) };
        let range = (start, hi.map_or(Bound::Unbounded, Bound::Excluded));
        if descending {
            for entry in self.index_entries.rev_range(txn, &range)? {
                if !visit(entry?.0)? {
                    break;
                }
            }
        } else {
            for entry in self.index_entries.range(txn, &range)? {
                if !visit(entry?.0)? {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// A snapshot's LMDB read transaction. It keeps its own handle on the environment, so it may
/// outlive any borrow of the store.
pub(crate) struct LmdbRead {
    // Field order is load-bearing: `txn` ends before `_user` lets the map be replaced.
    txn: RoTxn<'static, WithoutTls>,
    tables: Tables,
    records: Arc<RecordTables>,
    _user: MapUse,
}

impl LmdbRead {
    pub(crate) fn begin(backend: &LmdbBackend) -> Result<LmdbRead, StoreError> {
        loop {
            // Taken before the transaction begins (the invariant of `RecordTables`).
            let records = backend.record_tables();
            let (user, txn) = backend.map_users.begin(&backend.env, || backend.env.clone().static_read_txn())?;
            if backend.tables.main.len(&txn)? <= records.tables_seen {
                return Ok(LmdbRead { txn, tables: backend.tables, records, _user: user });
            }
            // Another process created record tables. A reader never waits for the `opening`
            // lock: a write transaction holds it while its thread may need the GIL that this
            // one holds. The writer opens every committed table as it begins, so by the time
            // the lock is busy the tables this view lacks are open or about to be.
            drop((txn, user));
            match backend.opening.try_lock() {
                Ok(opening) => backend.open_new_record_tables(&opening)?,
                Err(TryLockError::Poisoned(poisoned)) => backend.open_new_record_tables(&poisoned.into_inner())?,
                Err(TryLockError::WouldBlock) => std::thread::sleep(std::time::Duration::from_micros(50)),
            }
        }
    }

    pub(crate) fn last_tid(&self) -> Result<u64, StoreError> {
        Ok(self.tables.meta_u64(&self.txn, META_TID)?.unwrap_or(0))
    }

    pub(crate) fn settings(&self, prefix: &[u8], visit: SettingVisitor<'_>) -> Result<(), StoreError> {
        self.tables.settings(&self.txn, prefix, visit)
    }

    pub(crate) fn meta_u64(&self, key: &[u8]) -> Result<Option<u64>, StoreError> {
        self.tables.meta_u64(&self.txn, key)
    }

    /// The stored value of `oid`, borrowed from the map.
    pub(crate) fn get(&self, oid: Oid) -> Result<Option<&[u8]>, StoreError> {
        self.records.get_record(&self.txn, oid)
    }

    /// Calls `visit(i, stored value)` for each `oids[i]` (sorted ascending), reading runs of
    /// nearby ids with one cursor sweep instead of one tree descent per id, and `missing(oid)`
    /// for each id without a record (whose error ends the reads).
    pub(crate) fn get_many<E>(
        &self,
        oids: &[Oid],
        mut missing: impl FnMut(Oid) -> Result<(), E>,
        failed: impl Fn(StoreError) -> E,
        mut visit: impl FnMut(usize, Oid, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        // Ids of one class are allocated densely, so a gap this small holds few other records.
        const MAX_GAP: u64 = 32;
        let mut start = 0;
        while start < oids.len() {
            let class = oid_class(oids[start]);
            let mut end = start + 1;
            while end < oids.len() && oids[end] - oids[end - 1] <= MAX_GAP && oid_class(oids[end]) == class {
                end += 1;
            }
            let mut wanted = start;
            if let Some(table) = self.records.get(class) {
                let (first, last) = (oids[start].to_be_bytes(), oids[end - 1].to_be_bytes());
                let range = (Bound::Included(&first[..]), Bound::Included(&last[..]));
                for entry in table.range(&self.txn, &range).map_err(|e| failed(e.into()))? {
                    let (key, value) = entry.map_err(|e| failed(e.into()))?;
                    let oid = read_u64_key(key, "record").map_err(&failed)?;
                    while wanted < end && oids[wanted] < oid {
                        missing(oids[wanted])?;
                        wanted += 1;
                    }
                    // Duplicated ids are visited once each.
                    while wanted < end && oids[wanted] == oid {
                        visit(wanted, oid, value)?;
                        wanted += 1;
                    }
                    if wanted == end {
                        break;
                    }
                }
            }
            for &oid in &oids[wanted..end] {
                missing(oid)?;
            }
            start = end;
        }
        Ok(())
    }

    pub(crate) fn scan_records(
        &self,
        first: Oid,
        end: Option<Oid>,
        visit: impl FnMut(Oid, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.records.scan(&self.txn, first, end, visit)
    }

    /// How many records have ids in `[first, end)`.
    pub(crate) fn count_records(&self, first: Oid, end: Oid) -> Result<u64, StoreError> {
        self.records.count(&self.txn, first, end)
    }

    /// The first tid the commit log still holds (None: the log is empty).
    pub(crate) fn first_logged(&self) -> Result<Option<u64>, StoreError> {
        self.tables.first_logged(&self.txn)
    }

    /// Calls `visit(tid, log entry)` for the tids `from..=to`.
    pub(crate) fn log_entries(&self, from: u64, to: u64, visit: impl FnMut(u64, &[u8]) -> Result<(), StoreError>) -> Result<(), StoreError> {
        self.tables.log_entries(&self.txn, from, to, visit)
    }

    pub(crate) fn index_defs(&self, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        self.tables.index_defs(&self.txn, visit)
    }

    pub(crate) fn scan_entries(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        descending: bool,
        visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.tables.scan_entries(&self.txn, lo, hi, descending, visit)
    }
}

impl DescriptorTable for LmdbRead {
    fn descriptors_after(
        &self,
        known: u32,
        visit: IdVisitor<'_>,
    ) -> Result<(), StoreError> {
        self.tables.descriptors_after(&self.txn, known, visit)
    }
}

/// A commit's LMDB write transaction: holding it is holding the environment's write lock, which
/// serializes commits of every process.
pub(crate) struct LmdbWrite<'s> {
    // Field order is load-bearing: `txn` must end (commit or abort) before `_opening` lets
    // another transaction of the process open tables.
    txn: RwTxn<'s>,
    tables: Tables,
    /// The record tables this transaction may use, including those it created.
    records: Arc<RecordTables>,
    /// Whether it created record tables (published when it commits).
    opened_tables: bool,
    backend: &'s LmdbBackend,
    _opening: MutexGuard<'s, ()>,
    _user: MapUse,
}

impl<'s> LmdbWrite<'s> {
    /// Waits for the write lock (other writers, in any process).
    pub(crate) fn begin(backend: &'s LmdbBackend) -> Result<LmdbWrite<'s>, StoreError> {
        // Held for the whole transaction: it may create a record table at any point, and no
        // other transaction may open tables between its begin and its end.
        if backend.read_only() {
            return Err(StoreError::ReadOnly { location: backend.path.display().to_string() });
        }
        let opening = backend.lock_opening();
        loop {
            let records = backend.record_tables();
            let (user, txn) = backend.map_users.begin(&backend.env, || backend.env.write_txn())?;
            if backend.tables.main.len(&txn)? <= records.tables_seen {
                return Ok(LmdbWrite {
                    txn,
                    tables: backend.tables,
                    records,
                    opened_tables: false,
                    backend,
                    _opening: opening,
                    _user: user,
                });
            }
            // Tables created by another process are opened (and published) outside this
            // transaction, so that snapshots begun while it runs find them open.
            drop((txn, user));
            backend.open_new_record_tables(&opening)?;
        }
    }

    /// The record table of `class`, created if the class has none yet.
    fn record_table(&mut self, class: ClassNo) -> Result<Table, StoreError> {
        if let Some(table) = self.records.get(class) {
            return Ok(table);
        }
        if self.records.count >= MAX_RECORD_TABLES {
            return Err(too_many_classes());
        }
        let table = self.backend.env.create_database(&mut self.txn, Some(&record_table_name(class))).map_err(|e| self.backend.write_error(e))?;
        Arc::make_mut(&mut self.records).insert(class, table);
        self.opened_tables = true;
        Ok(table)
    }

    pub(crate) fn meta_u64(&self, key: &[u8]) -> Result<Option<u64>, StoreError> {
        self.tables.meta_u64(&self.txn, key)
    }

    pub(crate) fn first_logged(&self) -> Result<Option<u64>, StoreError> {
        self.tables.first_logged(&self.txn)
    }

    pub(crate) fn log_entries(&self, from: u64, to: u64, visit: impl FnMut(u64, &[u8]) -> Result<(), StoreError>) -> Result<(), StoreError> {
        self.tables.log_entries(&self.txn, from, to, visit)
    }

    pub(crate) fn put_meta_u64(&mut self, key: &[u8], value: u64) -> Result<(), StoreError> {
        self.tables.meta.put(&mut self.txn, key, &value.to_be_bytes()[..]).map_err(|e| self.backend.write_error(e))
    }

    pub(crate) fn setting(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.tables.meta.get(&self.txn, key)?.map(<[u8]>::to_vec))
    }

    /// Sets (`Some`) or removes (`None`) the setting `key`.
    pub(crate) fn put_setting(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        match value {
            Some(value) => self.tables.meta.put(&mut self.txn, key, value).map_err(|e| self.backend.write_error(e))?,
            None => {
                self.tables.meta.delete(&mut self.txn, key).map_err(|e| self.backend.write_error(e))?;
            }
        }
        Ok(())
    }

    pub(crate) fn get(&self, oid: Oid) -> Result<Option<&[u8]>, StoreError> {
        self.records.get_record(&self.txn, oid)
    }

    /// The greatest oid stored in `[first, end)`.
    pub(crate) fn last_oid(&self, first: Oid, end: Oid) -> Result<Option<Oid>, StoreError> {
        let (first_key, end_key) = (first.to_be_bytes(), end.to_be_bytes());
        let last_class = oid_class(end.saturating_sub(1));
        for (_, table) in self.records.between(oid_class(first), last_class).rev() {
            if let Some((key, _)) = table.rev_range(&self.txn, &key_range(&first_key, &end_key))?.next().transpose()? {
                return Ok(Some(read_u64_key(key, "record")?));
            }
        }
        Ok(None)
    }

    /// Writes the stored value of `oid`. A `fresh` one (allocated by this commit, so past every
    /// stored id of its class) is appended: LMDB then fills the last page instead of splitting
    /// it in half.
    pub(crate) fn put_record(&mut self, oid: Oid, value: &[u8], fresh: bool) -> Result<(), StoreError> {
        let table = self.record_table(oid_class(oid))?;
        let key = oid.to_be_bytes();
        if fresh {
            match table.put_with_flags(&mut self.txn, PutFlags::APPEND, &key, value) {
                // Fresh ids written out of allocation order are not past the last key.
                Err(heed::Error::Mdb(heed::MdbError::KeyExist)) => {}
                result => return result.map_err(|e| self.backend.write_error(e)),
            }
        }
        table.put(&mut self.txn, &key, value).map_err(|e| self.backend.write_error(e))
    }

    pub(crate) fn delete_record(&mut self, oid: Oid) -> Result<(), StoreError> {
        if let Some(table) = self.records.get(oid_class(oid)) {
            table.delete(&mut self.txn, &oid.to_be_bytes()).map_err(|e| self.backend.write_error(e))?;
        }
        Ok(())
    }

    pub(crate) fn scan_records(
        &self,
        first: Oid,
        end: Option<Oid>,
        visit: impl FnMut(Oid, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.records.scan(&self.txn, first, end, visit)
    }

    pub(crate) fn put_descriptor(&mut self, id: u32, bytes: &[u8]) -> Result<(), StoreError> {
        self.tables.descriptors.put(&mut self.txn, &id.to_be_bytes(), bytes).map_err(|e| self.backend.write_error(e))
    }

    pub(crate) fn index_defs(&self, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        self.tables.index_defs(&self.txn, visit)
    }

    pub(crate) fn put_index_def(&mut self, id: u32, bytes: &[u8]) -> Result<(), StoreError> {
        self.tables.index_defs.put(&mut self.txn, &id.to_be_bytes(), bytes).map_err(|e| self.backend.write_error(e))
    }

    /// Removes index `id`: its definition and all its entries.
    pub(crate) fn drop_index(&mut self, id: u32) -> Result<(), StoreError> {
        self.tables.index_defs.delete(&mut self.txn, &id.to_be_bytes()).map_err(|e| self.backend.write_error(e))?;
        let (lo, hi) = (id.to_be_bytes(), (id + 1).to_be_bytes());
        self.tables.index_entries.delete_range(&mut self.txn, &key_range(&lo, &hi)).map_err(|e| self.backend.write_error(e))?;
        Ok(())
    }

    pub(crate) fn put_entry(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.tables.index_entries.put(&mut self.txn, key, &[][..]).map_err(|e| self.backend.write_error(e))
    }

    pub(crate) fn delete_entry(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.tables.index_entries.delete(&mut self.txn, key).map_err(|e| self.backend.write_error(e))?;
        Ok(())
    }

    pub(crate) fn scan_entries(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.tables.scan_entries(&self.txn, lo, hi, false, visit)
    }

    pub(crate) fn put_log(&mut self, tid: u64, entry: &[u8]) -> Result<(), StoreError> {
        self.tables.log.put(&mut self.txn, &tid.to_be_bytes(), entry).map_err(|e| self.backend.write_error(e))
    }

    /// Drops the log entries of tids below `cutoff`.
    pub(crate) fn prune_log(&mut self, cutoff: u64) -> Result<(), StoreError> {
        let cutoff = cutoff.to_be_bytes();
        self.tables.log.delete_range(&mut self.txn, &(Bound::Unbounded, Bound::Excluded(&cutoff[..])))?;
        Ok(())
    }

    /// Commits durably (unless the store was opened with `durable` false), then lets later
    /// transactions use the record tables it opened or created.
    pub(crate) fn commit(self) -> Result<(), StoreError> {
        let LmdbWrite { txn, mut records, opened_tables, backend, _opening, .. } = self;
        if opened_tables {
            Arc::make_mut(&mut records).tables_seen = backend.tables.main.len(&txn)?;
        }
        txn.commit().map_err(|e| backend.write_error(e))?;
        if opened_tables {
            backend.publish(records);
        }
        Ok(())
    }
}

impl DescriptorTable for LmdbWrite<'_> {
    fn descriptors_after(
        &self,
        known: u32,
        visit: IdVisitor<'_>,
    ) -> Result<(), StoreError> {
        self.tables.descriptors_after(&self.txn, known, visit)
    }
}

mod compaction;
mod data_file;
mod map_users;
mod open_tables;
mod options;
mod page_walk;
mod record_tables;
mod table_names;
#[cfg(test)]
mod tests;
