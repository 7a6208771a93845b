//! A connection: one identity map (oid -> object), one snapshot at a time, and the commit of
//! its changes. The Python `Transaction` drives it; one connection serves one thread at a time.

mod commit;
mod eviction;
mod loading;
mod projection;
mod query;
mod sinks;
mod thread;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard};

use copal_core::store::RemovedIndex;
use copal_core::{Snapshot, Store};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTzInfo};

use crate::allocation::ToPython;
use crate::classes::ClassCache;
use crate::decode::DecodeInfo;
use crate::errors::IntoPyResult;
use crate::gc::GcPause;
use crate::hashing::{IntMap, IntSet};
use crate::list_builder::ListBuilder;
use crate::persistent::{deactivate, PersistentBase, GENERATION, GHOST, UNSAVED};
use crate::query::OperandConverter;
use crate::query_scope::QueryScope;
use crate::database::StoreHandle;
use crate::stats::SharedStats;
use loading::collect_references;
use sinks::ReadOnlySink;
use thread::{without_gil, Guarded};

pub(crate) use query::{run as run_query, Request as QueryRequest, ITERATION_BATCH};
pub(crate) use query::{declared_index, IndexArgs};


#[pyclass(frozen, module = "copal._core")]
pub struct Connection {
    /// Let go of when the connection is closed (see `StoreHandle`).
    store: StoreHandle,
    stats: Arc<SharedStats>,
    snapshot: Guarded<Option<Snapshot>>,
    /// The last tid whose changes this connection's cache reflects.
    seen_tid: AtomicU64,
    /// The tid of this connection's first snapshot (u64::MAX before it): every object it holds
    /// was read at or after it, so a garbage collection since may have removed one of them.
    first_tid: AtomicU64,
    /// The identity map: oid -> the one object of this connection for that oid. A Rust map costs a
    /// third of a Python dict's memory per entry and needs no int object per key.
    cache: Guarded<IntMap<u64, Py<PyAny>>>,
    registry: Py<PyDict>,
    /// The state of the running transaction: the objects it changed, added (`tx.add`) and
    /// deleted, and the ids of the cached objects holding plain containers that it loaded or
    /// touched (`watched`). Commit, query and abort work on these alone, so that their cost
    /// follows the transaction, never the size of the cache.
    changed: Guarded<Vec<Py<PyAny>>>,
    added: Guarded<Vec<Py<PyAny>>>,
    deleted: Guarded<Vec<Py<PyAny>>>,
    watched: Guarded<IntSet<u64>>,
    /// Whether the running transaction is read-only: it refuses every change and commits nothing.
    readonly: AtomicBool,
    /// The state bytes that cached objects holding plain mutable containers were loaded or last
    /// written with (FLAG_MUTABLE_STATE): a transaction that watches such an object compares
    /// its state with them at commit to find changes made in place.
    saved_states: Guarded<IntMap<u64, Vec<u8>>>,
    classes: Guarded<ClassCache>,
    decode_infos: Guarded<IntMap<u32, Arc<DecodeInfo>>>,
    zones: Guarded<HashMap<String, Py<PyTzInfo>>>,
    strings: Guarded<crate::strings::StringCache>,
    /// Non-ghost objects in the cache, and the target above which the least recently used are
    /// turned back into ghosts at transaction boundaries.
    loaded: AtomicUsize,
    cache_size: usize,
    me: Guarded<Option<Py<Connection>>>,
    /// The thread of the event loop that runs the transaction (`PyThread_get_thread_ident`; 0
    /// when none guards its reads), and what runs before each read of the store, the commit
    /// and the abort on that thread (`guard_reads`). Reset when the transaction ends.
    loop_thread: AtomicU64,
    on_loop_read: Guarded<Option<Py<PyAny>>>,
}

impl Connection {
    pub fn new(store: Arc<Store>, stats: Arc<SharedStats>, registry: Py<PyDict>, cache_size: usize) -> Self {
        Connection {
            store: StoreHandle::new(store),
            stats,
            snapshot: Guarded::new(None),
            seen_tid: AtomicU64::new(0),
            first_tid: AtomicU64::new(u64::MAX),
            cache: Guarded::new(IntMap::default()),
            registry,
            changed: Guarded::new(Vec::new()),
            added: Guarded::new(Vec::new()),
            deleted: Guarded::new(Vec::new()),
            watched: Guarded::new(IntSet::default()),
            readonly: AtomicBool::new(false),
            saved_states: Guarded::new(IntMap::default()),
            classes: Guarded::new(ClassCache::default()),
            decode_infos: Guarded::new(IntMap::default()),
            zones: Guarded::new(HashMap::new()),
            strings: Guarded::new(Default::default()),
            loaded: AtomicUsize::new(0),
            cache_size,
            me: Guarded::new(None),
            loop_thread: AtomicU64::new(0),
            on_loop_read: Guarded::new(None),
        }
    }

    /// Creates the connection's Python object (the jar of its objects).
    pub fn create(py: Python<'_>, connection: Connection) -> PyResult<Py<Connection>> {
        let me = Py::new(py, connection)?;
        *me.get().me.lock()? = Some(me.clone_ref(py));
        Ok(me)
    }

    /// This connection's own Python object: the `_p_jar` of the objects it loads.
    fn self_ref(&self, py: Python<'_>) -> PyResult<Py<Connection>> {
        self.me.lock()?.as_ref().map(|me| me.clone_ref(py)).ok_or_else(|| PyRuntimeError::new_err("connection is closed"))
    }

    /// Whether a transaction runs on this connection (it holds the transaction's snapshot).
    pub fn in_transaction(&self) -> bool {
        self.snapshot.lock().is_ok_and(|snapshot| snapshot.is_some())
    }

    /// Whether the running transaction is read-only.
    pub fn is_readonly(&self) -> bool {
        self.readonly.load(Ordering::Relaxed)
    }

    pub fn register(&self, obj: Py<PyAny>) {
        if let Ok(mut changed) = self.changed.lock() {
            changed.push(obj);
        }
    }

    /// Puts the cached object `oid`, whose state holds plain containers, among the objects the
    /// running transaction watches for changes in place (a read-only transaction watches
    /// nothing: it never compares). Between transactions the set is emptied by the next `begin`.
    pub fn watch(&self, oid: u64) {
        if self.is_readonly() {
            return;
        }
        if let Ok(mut watched) = self.watched.lock() {
            watched.insert(oid);
        }
    }

    pub fn forget_state(&self, oid: u64) {
        if let Ok(mut saved) = self.saved_states.lock() {
            saved.remove(&oid);
        }
        if let Ok(mut watched) = self.watched.lock() {
            watched.remove(&oid);
        }
        let _ = self.loaded.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
    }

    /// The class numbers of the stored type names `names` (unknown names are skipped). The
    /// catalog is re-read only when a name is missing from it: a class number, once given, never
    /// changes, but another process may have registered the name since.
    pub(crate) fn resolve_classes(&self, names: &[String]) -> PyResult<Vec<u16>> {
        let store = self.store.get()?;
        {
            let catalog = store.catalog();
            let classes: Vec<u16> = names.iter().filter_map(|n| catalog.class_no(n)).collect();
            if classes.len() == names.len() {
                return Ok(classes);
            }
        }
        self.with_snapshot(|s| s.refresh_catalog().py_err())?;
        let catalog = store.catalog();
        Ok(names.iter().filter_map(|n| catalog.class_no(n)).collect())
    }

    /// Runs `f` on the transaction's snapshot (or, outside a transaction, on a fresh one).
    /// `f` must not call Python code: the snapshot stays locked while it runs.
    fn with_snapshot<T>(&self, f: impl FnOnce(&Snapshot) -> PyResult<T>) -> PyResult<T> {
        self.before_round_trip()?;
        let current = self.snapshot.lock()?;
        match current.as_ref() {
            Some(snapshot) => f(snapshot),
            None => {
                drop(current);
                // Outside a transaction, reads see the latest committed state. Beginning and
                // ending the snapshot are round trips on PostgreSQL: other threads run meanwhile.
                let store = self.store.get()?;
                let snapshot = Python::attach(|py| without_gil(py, || Snapshot::new(&store))).py_err()?.count_into(&self.stats.storage);
                let result = f(&snapshot);
                Python::attach(|py| without_gil(py, move || drop(snapshot)));
                result
            }
        }
    }

    /// Runs the `guard_reads` hook when the store is about to be read, or the transaction
    /// committed or aborted, on the guarded thread.
    fn before_round_trip(&self) -> PyResult<()> {
        let guarded = self.loop_thread.load(Ordering::Relaxed);
        if guarded == 0 || guarded != current_thread() {
            return Ok(());
        }
        Python::attach(|py| {
            let hook = self.on_loop_read.lock()?.as_ref().map(|hook| hook.clone_ref(py));
            hook.map_or(Ok(()), |hook| hook.call0(py).map(drop))
        })
    }

    /// The store, while the connection is open.
    pub(crate) fn store(&self) -> PyResult<Arc<Store>> {
        self.store.get()
    }

    /// The cache of the classes this connection encodes and decodes.
    pub(crate) fn classes(&self) -> PyResult<MutexGuard<'_, ClassCache>> {
        self.classes.lock()
    }

    /// Refuses `what` in a read-only transaction.
    fn check_writable(&self, what: &str) -> PyResult<()> {
        if self.is_readonly() {
            return Err(crate::errors::ReadOnlyError::new_err(format!("cannot {what}: {}", self.why_readonly())));
        }
        Ok(())
    }

    /// Why the running transaction is read-only, and what to do instead: every transaction on a
    /// store opened read-only is.
    pub(crate) fn why_readonly(&self) -> String {
        match self.store.get() {
            Ok(store) if store.read_only() => format!(
                "{} is open read-only (copal.open(..., readonly=True)); open it without readonly for changes",
                store.location()
            ),
            _ => "the transaction is read-only; use a read-write transaction (with db.transaction() as tx: ...)".to_owned(),
        }
    }

    /// `obj` as a persistent object that is new or of this connection (`what`: what the
    /// caller does with it, for the error): an object of another connection or database is
    /// refused by the check that refuses referencing one (`PersistentBase::check_own`).
    fn own_object<'a>(&self, slf: &Bound<'_, Self>, obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a PersistentBase> {
        let p = PersistentBase::of(obj).map_err(|_| {
            PyTypeError::new_err(format!("only copal.Persistent objects can be {what}, not {}", obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()))
        })?;
        p.check_own(&slf.clone().unbind(), what)?;
        Ok(p)
    }
}

#[pymethods]
impl Connection {
    /// Starts a transaction (`readonly`: one that refuses every change and commits nothing):
    /// takes a fresh snapshot and invalidates cached objects that other transactions changed
    /// since this connection last looked.
    #[pyo3(signature = (readonly=false))]
    fn begin<'py>(&self, py: Python<'py>, readonly: bool) -> PyResult<Bound<'py, PyAny>> {
        // Shrinking the cache here rather than when the previous transaction ended keeps the
        // cost out of single-transaction programs and off the commit's latency.
        self.evict(py)?;
        // A new generation: the first touch of each object in this transaction is seen.
        GENERATION.fetch_add(1, Ordering::Relaxed);
        self.watched.lock()?.clear();
        self.readonly.store(readonly, Ordering::Relaxed);
        let store = self.store.get()?;
        let snapshot = without_gil(py, || Snapshot::new(&store)).py_err()?.count_into(&self.stats.storage);
        let since = self.seen_tid.load(Ordering::Relaxed);
        // A connection with nothing cached has nothing to invalidate: skip reading the log.
        // Reading the log is a round trip on PostgreSQL: other threads run meanwhile.
        let changes = match self.cache.lock()?.is_empty() {
            true => Some(Vec::new()),
            false => without_gil(py, || snapshot.changes_since(since)).py_err()?,
        };
        match changes {
            Some(oids) => {
                for oid in oids {
                    if let Some(obj) = self.cached(py, oid)? {
                        deactivate(&obj, true)?;
                    }
                }
            }
            None => self.invalidate_all(py)?,
        }
        self.seen_tid.store(snapshot.tid(), Ordering::Relaxed);
        self.first_tid.fetch_min(snapshot.tid(), Ordering::Relaxed);
        let tid = snapshot.tid().to_python(py)?;
        *self.snapshot.lock()? = Some(snapshot);
        Ok(tid)
    }

    /// Ends the transaction: releases the snapshot and forgets its state; on abort, the objects
    /// it changed become ghosts again so that they reload their committed state, and so do the
    /// objects holding plain containers that it used (they may have been changed in place).
    /// Cached objects it did not use stay loaded.
    fn end(&self, py: Python<'_>, aborted: bool) -> PyResult<()> {
        if aborted {
            self.before_round_trip()?;
        }
        let changed: Vec<_> = self.changed.lock()?.drain(..).collect();
        let watched: Vec<u64> = self.watched.lock()?.drain().collect();
        self.added.lock()?.clear();
        self.deleted.lock()?.clear();
        if aborted {
            for oid in watched {
                if let Some(obj) = self.cached(py, oid)? {
                    deactivate(&obj, true)?;
                }
            }
            for obj in changed {
                deactivate(obj.bind(py), true)?;
            }
        }
        self.readonly.store(false, Ordering::Relaxed);
        self.loop_thread.store(0, Ordering::Relaxed);
        self.on_loop_read.lock()?.take();
        // Ending a snapshot is a round trip on PostgreSQL (its ROLLBACK): other threads run
        // meanwhile.
        let snapshot = self.snapshot.lock()?.take();
        without_gil(py, || drop(snapshot));
        Ok(())
    }

    /// Until the running transaction ends, calls `hook()` before each read of the store, and
    /// before the commit or abort, made on the calling thread, an event loop's
    /// (python/copal/aio.py): any of them there holds the loop. Those made on other threads (the
    /// transaction's work handed to worker threads) do not call it.
    fn guard_reads(&self, hook: Py<PyAny>) -> PyResult<()> {
        *self.on_loop_read.lock()? = Some(hook);
        self.loop_thread.store(current_thread(), Ordering::Relaxed);
        Ok(())
    }

    /// Makes `obj` persistent at the next commit even if no stored object references it, and
    /// anchors it (garbage collection keeps it until it is deleted), a stored object too.
    fn add(slf: &Bound<'_, Self>, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        let this = slf.get();
        this.check_writable("add objects")?;
        this.own_object(slf, obj, "added")?;
        if !this.added.lock()?.iter().any(|o| o.is(obj)) {
            this.added.lock()?.push(obj.clone().unbind());
        }
        Ok(())
    }

    /// Deletes `obj` at the next commit; an object added in this transaction is no longer added.
    fn delete(slf: &Bound<'_, Self>, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        let this = slf.get();
        this.check_writable("delete objects")?;
        let p = this.own_object(slf, obj, "deleted")?;
        if p.state() == GHOST {
            // Its serial, which the commit's conflict check compares, is that of the record in
            // this transaction's snapshot.
            this.activate(obj)?;
        }
        if p.state() == UNSAVED {
            this.added.lock()?.retain(|o| !o.is(obj));
        } else if !this.deleted.lock()?.iter().any(|o| o.is(obj)) {
            this.deleted.lock()?.push(obj.clone().unbind());
        }
        Ok(())
    }

    /// The objects added (`add`) in the running transaction and not stored yet.
    fn added_objects<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        ListBuilder::of(py, self.added.lock()?.iter().map(|o| o.bind(py).clone()).collect())
    }

    /// The objects deleted in the running transaction.
    fn deleted_objects<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        ListBuilder::of(py, self.deleted.lock()?.iter().map(|o| o.bind(py).clone()).collect())
    }

    /// Whether the running transaction is read-only.
    #[getter]
    fn readonly(&self) -> bool {
        self.is_readonly()
    }

    /// The object with id `oid`, loaded (raises DanglingReference if it does not exist).
    fn get<'py>(&self, py: Python<'py>, oid: u64) -> PyResult<Bound<'py, PyAny>> {
        let Some(obj) = self.cached(py, oid)? else {
            // Read first, so that no ghost is made for an object that does not exist; then
            // loaded from that read (checking and then activating read the record twice).
            let record = self.record_of(oid)?;
            let obj = self.object_for(py, oid)?;
            self.load_from(&obj, oid, &record)?;
            return Ok(obj);
        };
        if PersistentBase::of(&obj)?.state() == GHOST {
            self.activate(&obj)?;
        } else {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(obj)
    }

    /// The root mapping.
    fn root<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.get(py, copal_core::format::ROOT_OID)
    }

    /// Loads every ghost reachable from `objects`, level by level, up to `depth` levels; each
    /// level's records are read in id order in one sweep. Returns how many objects it loaded.
    #[pyo3(signature = (objects, depth=None))]
    fn load_closure<'py>(&self, objects: &Bound<'py, PyList>, depth: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
        let py = objects.py();
        let _pause = GcPause::new(py);
        let mut level: Vec<Bound<'_, PyAny>> = objects.iter().collect();
        // Objects already loaded are visited once; ghosts are visited when they load.
        let mut visited = IntSet::default();
        let mut loaded = 0;
        let mut levels_left = depth.map(|d| d + 1);
        while !level.is_empty() && levels_left != Some(0) {
            levels_left = levels_left.map(|d| d - 1);
            let mut next = Vec::new();
            let mut ghosts: Vec<(u64, Bound<'_, PyAny>)> = Vec::new();
            for obj in level {
                match PersistentBase::of(&obj) {
                    Ok(p) => {
                        match (p.state(), p.oid()) {
                            (GHOST, Some(oid)) => ghosts.push((oid, obj)),
                            _ if visited.insert(obj.as_ptr() as usize) => {
                                collect_references(&crate::persistent::instance_dict(&obj)?.into_any(), &mut next, 0)?
                            }
                            _ => {}
                        }
                    }
                    Err(_) => collect_references(&obj, &mut next, 0)?,
                }
            }
            loaded += self.load_ghosts(py, &mut ghosts, Some(&mut next))?;
            level = next;
        }
        loaded.to_python(py)
    }

    /// The objects with ids `oids`, in that order, loading the ghosts among them in one sweep
    /// (raises DanglingReference for an id without a record).
    pub(crate) fn load_many<'py>(&self, py: Python<'py>, oids: Vec<u64>) -> PyResult<Bound<'py, PyList>> {
        let _pause = GcPause::new(py);
        let objects = oids.iter().map(|oid| self.object_for(py, *oid)).collect::<PyResult<Vec<_>>>()?;
        let mut ghosts: Vec<(u64, Bound<'_, PyAny>)> = Vec::new();
        for (oid, obj) in oids.iter().zip(&objects) {
            if PersistentBase::of(obj)?.state() == GHOST {
                ghosts.push((*oid, obj.clone()));
            } else {
                self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.load_ghosts(py, &mut ghosts, None)?;
        ListBuilder::of(py, objects.into_iter().map(Bound::into_any).collect())
    }

    /// Runs a query on this snapshot, in Rust on the raw records of the objects stored under the
    /// type names of `scope` (which also gives the renamed fields and defaults), seeing the running transaction's own changes (`crate::pending`):
    /// `mode` "objects" returns the matching objects, "iterate" the first `ITERATION_BATCH` of
    /// them and the ids of the others, "oids" their ids (None for an object not stored yet),
    /// "count" how many match, "explain" how the query runs.
    #[pyo3(signature = (scope, filter, order, offset, limit, mode))]
    fn query<'py>(
        slf: &Bound<'py, Self>,
        scope: &Bound<'py, QueryScope>,
        filter: &Bound<'py, crate::filter::Filter>,
        order: Vec<(Vec<String>, bool)>,
        offset: usize,
        limit: Option<usize>,
        mode: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        query::run(slf, query::Request { scope: scope.get(), filter, order, offset, limit, mode, select: Vec::new(), aggregation: None })
    }

    /// Makes the store's indexes match the declarations: `declared` lists (declaring type name,
    /// covered type names, fields, unique, renamed fields, defaults); indexes declared removed
    /// (`removed`: declaring type name and fields) or superseded are dropped
    /// (`copal_core::store::stale_indexes`), other undeclared ones kept. Runs as a commit of
    /// its own, building new indexes from the existing objects.
    /// `progress(index, records read, records to read)`, if given, is called while an index is
    /// built; an exception it raises aborts the maintenance commit.
    #[pyo3(signature = (declared, removed, progress=None))]
    fn sync_indexes(
        &self,
        py: Python<'_>,
        declared: Vec<IndexArgs>,
        removed: Vec<RemovedIndex>,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        query::sync_indexes(self, py, declared, removed, progress)
    }

    /// The class numbers of the stored type names `names` (unknown names are skipped).
    fn class_numbers<'py>(&self, py: Python<'py>, names: Vec<String>) -> PyResult<Bound<'py, PyList>> {
        let numbers = self.resolve_classes(&names)?.into_iter().map(|number| crate::allocation::int(py, i64::from(number))).collect::<PyResult<_>>()?;
        // Made here, as `index_keys`'s list.
        ListBuilder::of(py, numbers)
    }

    /// The index keys of `values` (the defaults of index fields, which an index definition
    /// records as keys), encoded as query operands are.
    fn index_keys<'py>(&self, py: Python<'py>, values: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyList>> {
        crate::query::share_zone_search_path(py)?;
        let mut sink = ReadOnlySink { conn: self, unknown_class: false };
        let mut converter = OperandConverter { sink: &mut sink };
        let keys = values
            .iter()
            .map(|value| crate::allocation::bytes(py, &copal_core::format::index_key::key_of(&converter.value(value)?)))
            .collect::<PyResult<Vec<_>>>()?;
        // Made here: a Vec returned to Python becomes a list by pyo3's `PyList::new`, which
        // panics when the list cannot be allocated.
        ListBuilder::of(py, keys)
    }

    /// Whether the running transaction has changed objects, or loaded objects whose state holds
    /// mutable containers (which may have changed in place): without them a query needs no
    /// read-your-writes work.
    fn has_pending(&self) -> PyResult<bool> {
        if self.is_readonly() {
            return Ok(false);
        }
        Ok(!self.changed.lock()?.is_empty()
            || !self.watched.lock()?.is_empty()
            || !self.added.lock()?.is_empty()
            || !self.deleted.lock()?.is_empty())
    }

    /// Objects registered as changed in the running transaction.
    fn changed_objects<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        ListBuilder::of(py, self.changed.lock()?.iter().map(|o| o.bind(py).clone()).collect())
    }

    /// Objects holding plain mutable containers that the running transaction loaded or touched
    /// (possibly changed in place).
    fn watched_objects<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let oids: Vec<u64> = self.watched.lock()?.iter().copied().collect();
        for oid in oids {
            if let Some(obj) = self.cached(py, oid)? {
                out.append(obj)?;
            }
        }
        Ok(out)
    }

    /// Drops the cache and the self-reference, so the connection and its objects can be freed.
    fn close(&self) -> PyResult<()> {
        self.on_loop_read.lock()?.take();
        self.snapshot.lock()?.take();
        self.changed.lock()?.clear();
        self.added.lock()?.clear();
        self.deleted.lock()?.clear();
        self.watched.lock()?.clear();
        self.saved_states.lock()?.clear();
        let cache = std::mem::take(&mut *self.cache.lock()?);
        drop(cache);
        self.me.lock()?.take();
        self.store.close();
        Ok(())
    }

    /// Number of non-ghost objects in the cache.
    fn loaded_count<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.loaded.load(Ordering::Relaxed).to_python(py)
    }

    /// Commits the running transaction: objects registered as changed, watched objects whose
    /// plain containers were changed in place, added objects and everything newly reachable
    /// from them, and the deletion of deleted objects. Returns the new tid, or None when there
    /// was nothing to write (always, in a read-only transaction).
    fn commit<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyAny>>> {
        commit::commit(slf)
    }
}

/// The identity of the calling thread, as Python's `threading.get_ident()` gives it.
fn current_thread() -> u64 {
    // SAFETY: PyThread_get_thread_ident has no preconditions; it reads the calling thread's id.
    // A C unsigned long: 64 bits on Linux and macOS, 32 on Windows.
    unsafe { pyo3::ffi::PyThread_get_thread_ident() as u64 }
}
