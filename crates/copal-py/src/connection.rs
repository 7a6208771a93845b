//! A connection: one identity map (oid -> object), one snapshot at a time, and the commit of
//! its changes. The Python `Transaction` drives it; one connection serves one thread at a time.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use copal_core::format::{oid_class, TzInfo, FLAG_MUTABLE_STATE};
use copal_core::query::{self, Pending, Query};
use copal_core::{Commit, Snapshot, Store};
use copal_core::store::{stale_indexes, DeclaredIndex, FieldDefault, RemovedIndex};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyTzInfo, PyType};
use pyo3::IntoPyObjectExt;

use crate::allocation::ToPython;
use crate::classes::{field_names, keys_are, resolve, ClassCache, ClassShape};
use crate::decode::{DecodeInfo, Decoder, Resolver};
use crate::encode::{Encoder, FieldSource, Sink};
use crate::errors::{dangling, IntoPyResult, SchemaError};
use crate::gc::GcPause;
use crate::hashing::{IntMap, IntSet};
use crate::list_builder::ListBuilder;
use crate::persistent::{deactivate, PersistentBase, CHANGED, GHOST, GENERATION, UNSAVED, UP_TO_DATE};
use crate::pytypes;
use crate::query::{OperandConverter, OperandSink};
use crate::database::StoreHandle;
use crate::stats::SharedStats;

/// Runs `f` without the GIL. LMDB write transactions must stay on the thread that began them;
/// `detach` runs the closure on the current thread, so carrying one through it is sound even
/// though heed marks the transaction `!Send`.
struct SameThread<T>(T);
// SAFETY: values wrapped here only pass through `Python::detach`, which runs its closure on the
// calling thread; they never reach another thread.
unsafe impl<T> Send for SameThread<T> {}

fn without_gil<T>(py: Python<'_>, f: impl FnOnce() -> T) -> T {
    let f = SameThread(f);
    let out = py.detach(move || {
        let f = f;
        SameThread((f.0)())
    });
    out.0
}

/// Interior state of a connection. A connection serves one thread at a time, and moves between
/// threads through the database's pool; the mutex makes that sound and turns accidental
/// concurrent use (or re-entry) into an error instead of undefined behaviour.
struct Guarded<T>(Mutex<T>);

impl<T> Guarded<T> {
    fn new(value: T) -> Self {
        Guarded(Mutex::new(value))
    }

    fn lock(&self) -> PyResult<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "this copal connection is in use by another thread: objects and transactions \
                 belong to the thread that opened the transaction",
            )),
        }
    }
}

/// An index declaration as `copal.indexes.declared_indexes` passes it: (declaring type name,
/// covered type names, fields, unique, renamed fields, field defaults as index keys).
pub(crate) type IndexArgs = (String, Vec<String>, Vec<String>, bool, Vec<(String, String, String)>, Vec<FieldDefault>);

pub(crate) fn declared_index((type_name, covered, fields, unique, renamed, defaults): &IndexArgs) -> DeclaredIndex<'_> {
    DeclaredIndex { type_name, covered, fields, unique: *unique, renamed, defaults }
}

#[pyclass(frozen, module = "copal._core")]
pub struct Connection {
    /// Let go of when the connection is closed (see `StoreHandle`).
    store: StoreHandle,
    stats: Arc<SharedStats>,
    snapshot: Guarded<Option<Snapshot>>,
    /// The last tid whose changes this connection's cache reflects.
    seen_tid: AtomicU64,
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
}

impl Connection {
    pub fn new(store: Arc<Store>, stats: Arc<SharedStats>, registry: Py<PyDict>, cache_size: usize) -> Self {
        Connection {
            store: StoreHandle::new(store),
            stats,
            snapshot: Guarded::new(None),
            seen_tid: AtomicU64::new(0),
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
    fn resolve_classes(&self, names: &[String]) -> PyResult<Vec<u16>> {
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
        let current = self.snapshot.lock()?;
        match current.as_ref() {
            Some(snapshot) => f(snapshot),
            None => {
                drop(current);
                // Outside a transaction, reads see the latest committed state.
                let snapshot = Snapshot::new(&self.store.get()?).py_err()?.count_into(&self.stats.storage);
                f(&snapshot)
            }
        }
    }

    /// Loads the record of ghost `obj` and fills its state.
    pub fn activate(&self, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        let oid = PersistentBase::of(obj)?.oid().ok_or_else(|| PyRuntimeError::new_err("ghost without oid"))?;
        let record = self.record_of(oid)?;
        self.load_from(obj, oid, &record)
    }

    /// The record of `oid` in the transaction's snapshot (DanglingReference if there is none).
    fn record_of(&self, oid: u64) -> PyResult<Vec<u8>> {
        let record = self.with_snapshot(|snapshot| Ok(snapshot.get(oid).py_err()?.map(std::borrow::Cow::into_owned)))?;
        record.ok_or_else(|| dangling(oid))
    }

    /// Loads the ghost `obj` from its `record`.
    fn load_from(&self, obj: &Bound<'_, PyAny>, oid: u64, record: &[u8]) -> PyResult<()> {
        self.stats.cache_misses.fetch_add(1, Ordering::Relaxed);
        self.set_state(obj, oid, record, None)
    }

    /// Fills `obj` from `record`; with `ghost_refs`, collects the ghosts it references.
    fn set_state<'py>(
        &self,
        obj: &Bound<'py, PyAny>,
        oid: u64,
        record: &[u8],
        ghost_refs: Option<&mut Vec<Bound<'py, PyAny>>>,
    ) -> PyResult<()> {
        let py = obj.py();
        let what = || format!("record of object {oid:#x}");
        let mut strings = self.strings.lock()?;
        let mut decoder = Decoder::new(py, self, &what);
        decoder.strings = Some(&mut strings);
        let collect = ghost_refs.is_some();
        if collect {
            decoder.ghost_refs = Some(Vec::new());
        }
        let (header, state_start) = decoder.record_into(obj, record)?;
        if let (Some(out), Some(found)) = (ghost_refs, decoder.ghost_refs.take()) {
            out.extend(found);
        }
        let p = PersistentBase::of(obj)?;
        p.set_loaded(header.tid);
        // A Broken object is read-only and must keep its record: never re-encoded.
        if header.flags & FLAG_MUTABLE_STATE != 0 && !obj.is_instance(pytypes::broken_type(py)?)? {
            self.saved_states.lock()?.insert(oid, record[state_start..].to_vec());
            p.set_holds_containers(true);
            self.watch(oid);
        }
        self.loaded.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The object for `oid`: from the identity map, or a new ghost.
    fn object_for<'py>(&self, py: Python<'py>, oid: u64) -> PyResult<Bound<'py, PyAny>> {
        if let Some(obj) = self.cached(py, oid)? {
            return Ok(obj);
        }
        let class = self.class_for(py, oid_class(oid))?;
        let obj = new_instance(&class)?;
        PersistentBase::of(&obj)?.attach(oid, self.self_ref(py)?, GHOST);
        if class.is(pytypes::broken_type(py)?) {
            let type_name = self.store.get()?.catalog().type_name(oid_class(oid)).unwrap_or("?").to_owned();
            let name = crate::allocation::interned!(py, "_v_copal_type")?;
            // SAFETY: valid object, name and value; bypasses Broken's read-only __setattr__.
            let rc = unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), crate::allocation::str(py, &type_name)?.as_ptr()) };
            if rc != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        self.cache.lock()?.insert(oid, obj.clone().unbind());
        Ok(obj)
    }

    /// `object_for` of each of `oids`, the cached ones found under one lock of the cache.
    fn objects_for<'py>(&self, py: Python<'py>, oids: &[u64]) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut found = Vec::with_capacity(oids.len());
        {
            let cache = self.cache.lock()?;
            found.extend(oids.iter().map(|oid| cache.get(oid).map(|o| o.bind(py).clone())));
        }
        oids.iter().zip(found).map(|(oid, cached)| cached.map_or_else(|| self.object_for(py, *oid), Ok)).collect()
    }

    fn cached<'py>(&self, py: Python<'py>, oid: u64) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(self.cache.lock()?.get(&oid).map(|o| o.bind(py).clone()))
    }

    fn class_for<'py>(&self, py: Python<'py>, class_no: u16) -> PyResult<Bound<'py, PyType>> {
        if let Some(class) = self.classes.lock()?.by_class_no.get(&class_no) {
            return Ok(class.bind(py).clone());
        }
        let type_name = {
            let store = self.store.get()?;
            let known = store.catalog().type_name(class_no).map(str::to_owned);
            match known {
                Some(name) => name,
                None => {
                    self.with_snapshot(|s| s.refresh_catalog().py_err())?;
                    store.catalog().type_name(class_no).map(str::to_owned).ok_or_else(|| {
                        crate::errors::CorruptRecordError::new_err(format!("reference to unknown class number {class_no}"))
                    })?
                }
            }
        };
        // Objects of a class that cannot be found, or that names something other than a
        // persistent class, load as read-only Broken objects: nothing named by data is called.
        let class = match resolve(py, self.registry.bind(py), &type_name) {
            Ok(class) if class.is_subclass_of::<PersistentBase>()? => class,
            Ok(_) => pytypes::broken_type(py)?.clone(),
            Err(e) if e.is_instance_of::<SchemaError>(py) => pytypes::broken_type(py)?.clone(),
            Err(e) => return Err(e),
        };
        self.classes.lock()?.by_class_no.insert(class_no, class.clone().unbind());
        Ok(class)
    }

    fn invalidate_all(&self, py: Python<'_>) -> PyResult<()> {
        let objects: Vec<_> = self.cache.lock()?.values().map(|o| o.clone_ref(py)).collect();
        for obj in objects {
            let obj = obj.into_bound(py);
            if obj.is_instance_of::<PersistentBase>() {
                deactivate(&obj, true)?;
            }
        }
        Ok(())
    }

    /// Ghostifies the least recently used objects when more than `cache_size` are loaded, and
    /// drops ghosts that nothing else references.
    fn evict(&self, py: Python<'_>) -> PyResult<()> {
        if self.loaded.load(Ordering::Relaxed) <= self.cache_size {
            return Ok(());
        }
        let mut loaded: Vec<(u32, Bound<'_, PyAny>)> = Vec::new();
        let mut unreferenced = Vec::new();
        {
            let mut cache = self.cache.lock()?;
            cache.retain(|_, obj| {
                let obj = obj.bind(py);
                let Ok(p) = PersistentBase::of(obj) else { return true };
                match p.state() {
                    UP_TO_DATE => loaded.push((p.last_access(), obj.clone())),
                    // A ghost referenced by the cache only can go: it would be recreated on demand.
                    // SAFETY: reading the reference count of a live object.
                    GHOST if unsafe { ffi::Py_REFCNT(obj.as_ptr()) } <= 1 => {
                        unreferenced.push(obj.clone().unbind());
                        return false;
                    }
                    _ => {}
                }
                true
            });
        }
        // Released outside the lock: deallocation may run Python code.
        drop(unreferenced);
        let target = self.cache_size - self.cache_size / 4;
        let excess = loaded.len().saturating_sub(target);
        if excess > 0 {
            loaded.sort_unstable_by_key(|(access, _)| *access);
            for (_, obj) in loaded.into_iter().take(excess) {
                deactivate(&obj, false)?;
            }
        }
        Ok(())
    }
}

impl Connection {
    /// Loads `ghosts` (sorted and deduplicated here) reading their records in id order, in
    /// chunks: records are copied out so that decoding (which runs Python) happens with the
    /// snapshot unlocked, in bounded memory. With `next`, collects the ghosts they reference.
    fn load_ghosts<'py>(
        &self,
        py: Python<'py>,
        ghosts: &mut Vec<(u64, Bound<'py, PyAny>)>,
        mut next: Option<&mut Vec<Bound<'py, PyAny>>>,
    ) -> PyResult<usize> {
        ghosts.sort_unstable_by_key(|(oid, _)| *oid);
        ghosts.dedup_by_key(|(oid, _)| *oid);
        const CHUNK: usize = 4096;
        let mut buffer = Vec::new();
        let mut spans = Vec::with_capacity(CHUNK);
        for chunk in ghosts.chunks(CHUNK) {
            let oids: Vec<u64> = chunk.iter().map(|(oid, _)| *oid).collect();
            buffer.clear();
            spans.clear();
            self.with_snapshot(|snapshot| {
                let snapshot = SameThread(snapshot);
                let read = without_gil(py, || {
                    snapshot.0.get_many(&oids, ReadFailure::Missing, ReadFailure::Store, |_, record| {
                        spans.push(buffer.len()..buffer.len() + record.len());
                        buffer.extend_from_slice(record);
                        Ok(())
                    })
                });
                read.map_err(|failure| match failure {
                    ReadFailure::Store(error) => crate::errors::store_error(error),
                    ReadFailure::Missing(oid) => dangling(oid),
                })
            })?;
            for ((oid, obj), span) in chunk.iter().zip(spans.drain(..)) {
                self.set_state(obj, *oid, &buffer[span], next.as_deref_mut())?;
            }
        }
        self.stats.cache_misses.fetch_add(ghosts.len() as u64, Ordering::Relaxed);
        Ok(ghosts.len())
    }
}

/// How many results of an iterated query are built at once: a loop that stops early builds only
/// what it consumed, plus the rest of its batch.
const ITERATION_BATCH: usize = 1000;

/// Why a batch read failed; converted to a Python error once the GIL is back.
enum ReadFailure {
    Missing(u64),
    Store(copal_core::StoreError),
}

/// A new, empty instance of persistent `class`, created by the base class's constructor only:
/// the class's own `__init__` is not called (its state comes from the record).
fn new_instance<'py>(class: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let py = class.py();
    let args = PyTuple::empty(py);
    // SAFETY: `class` is a subclass of PersistentBase (checked by `class_for`), whose tp_new is
    // PyO3's constructor wrapper accepting any arguments; it returns a new reference or null.
    unsafe {
        let tp_new = (*class.as_type_ptr()).tp_new.ok_or_else(|| PyTypeError::new_err("class cannot be instantiated"))?;
        Bound::from_owned_ptr_or_err(py, tp_new(class.as_type_ptr(), args.as_ptr(), std::ptr::null_mut()))
    }
}

impl<'py> Resolver<'py> for Connection {
    fn descriptor(&self, py: Python<'py>, id: u32) -> PyResult<Arc<DecodeInfo>> {
        if let Some(info) = self.decode_infos.lock()?.get(&id) {
            return Ok(Arc::clone(info));
        }
        let descriptor = self.with_snapshot(|s| s.descriptor(id).py_err())?;
        let interned = |names: &[String]| names.iter().map(|f| Ok(crate::allocation::interned_str(py, f)?.unbind())).collect::<PyResult<Vec<Py<PyString>>>>();
        let mut names = interned(&descriptor.fields)?;
        let mut fixup = None;
        let class = match resolve(py, self.registry.bind(py), &descriptor.type_name) {
            Err(e) if crate::allocation::is_memory_error(py, &e) => return Err(e),
            found => found.ok(),
        };
        if let Some(class) = class {
            let stored_names = ListBuilder::of(py, names.iter().map(|name| name.bind(py).clone().into_any()).collect())?;
            let plan = pytypes::evolution_plan(py)?.call1((class, stored_names))?;
            if !plan.is_none() {
                let (new_names, fix): (Vec<String>, Bound<'_, PyAny>) = plan.extract()?;
                names = interned(&new_names)?;
                fixup = (!fix.is_none()).then(|| fix.unbind());
            }
        }
        let info = Arc::new(DecodeInfo::new(descriptor.type_name.clone(), names, fixup));
        self.decode_infos.lock()?.insert(id, Arc::clone(&info));
        Ok(info)
    }

    fn class_of(&self, py: Python<'py>, info: &DecodeInfo) -> PyResult<Bound<'py, PyType>> {
        resolve(py, self.registry.bind(py), &info.type_name)
    }

    fn object(&self, py: Python<'py>, oid: u64) -> PyResult<Bound<'py, PyAny>> {
        self.object_for(py, oid)
    }

    fn zone(&self, py: Python<'py>, tz: &TzInfo) -> PyResult<Option<Bound<'py, PyTzInfo>>> {
        let key = match tz {
            TzInfo::Naive => return Ok(None),
            TzInfo::Offset(micros) => format!("{micros}"),
            TzInfo::Named(name) => name.clone(),
        };
        if let Some(zone) = self.zones.lock()?.get(&key) {
            return Ok(Some(zone.bind(py).clone()));
        }
        let Some(zone) = crate::decode::new_zone(py, tz)? else { return Ok(None) };
        self.zones.lock()?.insert(key, zone.clone().unbind());
        Ok(Some(zone))
    }
}

/// Encodes query operands: references and known classes only, nothing registered.
struct ReadOnlySink<'c> {
    conn: &'c Connection,
    /// Set when an operand's class has no descriptor with its fields: no record can equal it.
    unknown_class: bool,
}

impl OperandSink for ReadOnlySink<'_> {
    fn take_unknown_class(&mut self) -> bool {
        std::mem::take(&mut self.unknown_class)
    }

    fn decode(&self, bytes: &[u8]) -> PyResult<copal_core::Value> {
        crate::query::decode_operand(bytes, &self.conn.store.get()?.catalog())
    }
}

impl Sink for ReadOnlySink<'_> {
    fn descriptor_named(&mut self, type_name: &str, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let (fields, _) = field_names(dict)?;
        let store = self.conn.store.get()?;
        let catalog = store.catalog();
        let Some(d) = catalog.find(type_name, &fields) else {
            self.unknown_class = true;
            return Err(SchemaError::new_err(format!("no stored {type_name} has these fields")));
        };
        Ok(ClassShape { descriptor: d.id, class_no: d.class_no, tracks_own: false })
    }

    fn descriptor(&mut self, class: &Bound<'_, PyType>, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let (fields, _) = field_names(dict)?;
        let type_name = crate::classes::type_name_of(class)?;
        let store = self.conn.store.get()?;
        let catalog = store.catalog();
        let Some(d) = catalog.find(&type_name, &fields) else {
            self.unknown_class = true;
            return Err(SchemaError::new_err(format!("no stored {type_name} has these fields")));
        };
        Ok(ClassShape { descriptor: d.id, class_no: d.class_no, tracks_own: false })
    }

    fn enum_descriptor(&mut self, class: &Bound<'_, PyType>) -> PyResult<u32> {
        Ok(self.descriptor(class, &crate::allocation::dict(class.py())?)?.descriptor)
    }

    fn reference(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
        PersistentBase::of(obj)?.oid().ok_or_else(|| {
            PyTypeError::new_err("a query cannot compare with an object that is not stored yet")
        })
    }
}

/// The sink of a commit: registers descriptors and gives ids to newly reachable objects.
struct CommitSink<'c, 's> {
    conn: &'c Connection,
    jar: Py<Connection>,
    commit: Commit<'s>,
    /// Shapes registered by this commit, merged into the class cache once it succeeds.
    new_shapes: Vec<(usize, Vec<Py<PyString>>, ClassShape)>,
    /// Objects that became persistent in this commit and still have to be written.
    to_write: VecDeque<(Py<PyAny>, ClassShape)>,
    persisted: Vec<Py<PyAny>>,
}

impl Sink for CommitSink<'_, '_> {
    fn descriptor_named(&mut self, type_name: &str, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let (fields, _) = field_names(dict)?;
        let d = self.commit.descriptor(type_name, &fields).py_err()?;
        Ok(ClassShape { descriptor: d.id, class_no: d.class_no, tracks_own: false })
    }

    fn descriptor(&mut self, class: &Bound<'_, PyType>, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let mut classes = self.conn.classes.lock()?;
        let entry = classes.entry(class)?;
        if let Some(shape) = entry.find_shape(dict) {
            return Ok(shape);
        }
        let key = class.as_ptr() as usize;
        if let Some((_, _, shape)) = self.new_shapes.iter().find(|(k, fields, _)| *k == key && keys_are(dict, fields)) {
            return Ok(*shape);
        }
        let (fields, interned) = field_names(dict)?;
        if !class.is_subclass_of::<PersistentBase>()? {
            // Refused at write time what would be refused at read time: a by-value class whose
            // finalizer or property setters would run on stored values.
            let info = DecodeInfo::plain(entry.type_name.clone(), interned.iter().map(|f| f.clone_ref(class.py())).collect());
            crate::decode::check_inert(class, &info).map_err(|e| {
                if crate::allocation::is_memory_error(class.py(), &e) {
                    return e;
                }
                PyTypeError::new_err(format!("cannot store a {} by value: {}; make it a copal.Persistent", entry.type_name, e.value(class.py())))
            })?;
        }
        let descriptor = self.commit.descriptor(&entry.type_name, &fields).py_err()?;
        let shape = ClassShape { descriptor: descriptor.id, class_no: descriptor.class_no, tracks_own: entry.tracks_own };
        self.new_shapes.push((key, interned, shape));
        Ok(shape)
    }

    fn enum_descriptor(&mut self, class: &Bound<'_, PyType>) -> PyResult<u32> {
        Ok(self.descriptor(class, &crate::allocation::dict(class.py())?)?.descriptor)
    }

    fn reference(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
        let py = obj.py();
        let p = PersistentBase::of(obj)?;
        if p.state() != UNSAVED {
            if !p.is_jar(&self.jar) {
                return Err(PyTypeError::new_err(
                    "a persistent object of another connection or database cannot be referenced; \
                     copy it or load it in this transaction",
                ));
            }
            return p.oid().ok_or_else(|| PyRuntimeError::new_err("stored object without oid"));
        }
        let dict = crate::encode::stored_state(obj)?;
        let shape = self.descriptor(&obj.get_type(), &dict)?;
        let oid = self.commit.allocate_oid(shape.class_no).py_err()?;
        p.attach(oid, self.jar.clone_ref(py), CHANGED);
        self.to_write.push_back((obj.clone().unbind(), shape));
        self.persisted.push(obj.clone().unbind());
        Ok(oid)
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
        let changes = if self.cache.lock()?.is_empty() { Some(Vec::new()) } else { snapshot.changes_since(since).py_err()? };
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
        let tid = snapshot.tid().to_python(py)?;
        *self.snapshot.lock()? = Some(snapshot);
        Ok(tid)
    }

    /// Ends the transaction: releases the snapshot and forgets its state; on abort, the objects
    /// it changed become ghosts again so that they reload their committed state, and so do the
    /// objects holding plain containers that it used (they may have been changed in place).
    /// Cached objects it did not use stay loaded.
    fn end(&self, py: Python<'_>, aborted: bool) -> PyResult<()> {
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
        self.snapshot.lock()?.take();
        Ok(())
    }

    /// Makes `obj` persistent at the next commit even if no stored object references it.
    fn add(slf: &Bound<'_, Self>, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        let this = slf.get();
        this.check_writable("add objects")?;
        let p = this.own_object(slf, obj, "added")?;
        if p.state() == UNSAVED && !this.added.lock()?.iter().any(|o| o.is(obj)) {
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
    fn load_many<'py>(&self, py: Python<'py>, oids: Vec<u64>) -> PyResult<Bound<'py, PyList>> {
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
    /// type names `names`, seeing the running transaction's own changes (`crate::pending`):
    /// `mode` "objects" returns the matching objects, "iterate" the first `ITERATION_BATCH` of
    /// them and the ids of the others, "oids" their ids (None for an object not stored yet),
    /// "count" how many match, "explain" how the query runs.
    #[pyo3(signature = (names, filter, order, offset, limit, mode, renamed, defaults))]
    #[allow(clippy::too_many_arguments)]
    fn query<'py>(
        slf: &Bound<'py, Self>,
        names: Vec<String>,
        filter: &Bound<'py, crate::filter::Filter>,
        order: Vec<(Vec<String>, bool)>,
        offset: usize,
        limit: Option<usize>,
        mode: &str,
        renamed: Vec<(String, String, String)>,
        defaults: Vec<(String, String, Bound<'py, PyAny>)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        // Datetimes in named zones compare by the instants of the zone's rules.
        crate::query::share_zone_search_path(py)?;
        let this = slf.get();
        let jar = slf.clone().unbind();
        let mut overlay = this.overlay(slf)?;
        let mut classes = this.resolve_classes(&names)?;
        if let Some(overlay) = &overlay {
            // New objects may be of classes the store has never held (provisional numbers).
            classes.extend(names.iter().filter_map(|name| overlay.pending.provisional_class(name)));
        }
        if classes.is_empty() && mode != "explain" {
            // Nothing of these types was ever stored, nor is about to be.
            let empty = || ListBuilder::of(py, Vec::new());
            return match mode {
                "count" => 0.into_bound_py_any(py),
                "iterate" => Ok(crate::allocation::tuple(py, vec![empty()?.into_any(), empty()?.into_any()])?.into_any()),
                _ => Ok(empty()?.into_any()),
            };
        }
        // Operands mean what stored values mean; with an overlay, new objects and the classes
        // and layouts it made are known too.
        let mut read_only = ReadOnlySink { conn: this, unknown_class: false };
        let mut in_overlay = overlay.as_mut().map(|overlay| overlay.operand_sink(this, &jar));
        let sink: &mut dyn OperandSink = match in_overlay.as_mut() {
            Some(sink) => sink,
            None => &mut read_only,
        };
        let mut converter = OperandConverter { sink };
        let filter = converter.expr(filter)?;
        let mut query = Query::new(classes, filter);
        for (type_name, field, default) in defaults {
            query.defaults.entry(type_name).or_default().push((field, converter.value(&default)?));
        }
        drop(in_overlay);
        query.order = order;
        query.offset = offset;
        query.limit = limit;
        for (type_name, old, new) in renamed {
            query.renamed.entry(type_name).or_default().push((old, new));
        }
        let _pause = GcPause::new(py);
        let empty = Pending::default();
        let pending = overlay.as_ref().map_or(&empty, |overlay| &overlay.pending);
        if mode == "explain" {
            let text = this.with_snapshot(|snapshot| query::explain_pending(snapshot, pending, &query).py_err())?;
            return Ok(crate::allocation::str(py, &text)?.into_any());
        }
        let pending = SameThread(pending);
        if mode == "count" {
            let n = this.with_snapshot(|snapshot| {
                let snapshot = SameThread(snapshot);
                without_gil(py, || query::count_pending(snapshot.0, pending.0, &query)).py_err()
            })?;
            return crate::allocation::unsigned_int(py, n);
        }
        let new_objects = overlay.as_ref().map(|overlay| &overlay.new_objects);
        if mode == "oids" {
            let oids = this.with_snapshot(|snapshot| {
                let snapshot = SameThread(snapshot);
                without_gil(py, || query::oids_pending(snapshot.0, pending.0, &query)).py_err()
            })?;
            let out = ListBuilder::of(py, Vec::new())?;
            for oid in oids {
                match new_objects.is_some_and(|objects| objects.contains_key(&oid)) {
                    true => out.append(py.None())?,
                    false => out.append(crate::allocation::unsigned_int(py, oid)?)?,
                }
            }
            return Ok(out.into_any());
        }
        // "objects": every result built; "iterate": the first `ITERATION_BATCH` built and the ids
        // of the others (loaded as the iteration reaches them), or all built when the
        // transaction has new objects (they have no id to load them by).
        let built = match mode {
            "iterate" if overlay.is_none() => ITERATION_BATCH,
            "objects" | "iterate" => usize::MAX,
            other => return Err(pyo3::exceptions::PyValueError::new_err(format!("unknown query mode {other:?}"))),
        };
        let from_index = this.with_snapshot(|snapshot| {
            let snapshot = SameThread(snapshot);
            without_gil(py, || query::index_oids(snapshot.0, pending.0, &query)).py_err()
        })?;
        let objects = ListBuilder::of(py, Vec::new())?;
        let rest = ListBuilder::of(py, Vec::new())?;
        if let Some(oids) = from_index {
            // The index answered alone: cached objects need no record, ghosts are read in one
            // sweep. The overlay has no record of these classes: every result is stored.
            let (now, later) = oids.split_at(built.min(oids.len()));
            let found = this.objects_for(py, now)?;
            let mut ghosts = Vec::new();
            for (oid, obj) in now.iter().zip(&found) {
                if PersistentBase::of(obj)?.state() == GHOST {
                    ghosts.push((*oid, obj.clone()));
                }
            }
            this.stats.cache_hits.fetch_add((found.len() - ghosts.len()) as u64, Ordering::Relaxed);
            this.load_ghosts(py, &mut ghosts, None)?;
            for obj in found {
                objects.append(obj)?;
            }
            for oid in later {
                rest.append(crate::allocation::unsigned_int(py, *oid)?)?;
            }
        } else {
            let matches = this.with_snapshot(|snapshot| {
                let snapshot = SameThread(snapshot);
                without_gil(py, || query::run_pending(snapshot.0, pending.0, &query)).py_err()
            })?;
            for (index, (oid, record)) in matches.into_iter().enumerate() {
                if index >= built {
                    rest.append(crate::allocation::unsigned_int(py, oid)?)?;
                    continue;
                }
                if let Some(obj) = new_objects.and_then(|objects| objects.get(&oid)) {
                    objects.append(obj.bind(py))?;
                    continue;
                }
                // A result with a pending record is an object of this transaction, loaded already.
                let obj = this.object_for(py, oid)?;
                if PersistentBase::of(&obj)?.state() == GHOST {
                    this.stats.cache_misses.fetch_add(1, Ordering::Relaxed);
                    this.set_state(&obj, oid, &record, None)?;
                } else {
                    this.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
                }
                objects.append(obj)?;
            }
        }
        if mode == "iterate" {
            return Ok(crate::allocation::tuple(py, vec![objects.into_any(), rest.into_any()])?.into_any());
        }
        Ok(objects.into_any())
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
        let store = self.store.get()?;
        let mut commit = without_gil(py, || Commit::begin(&store)).py_err()?;
        commit.set_maintenance();
        let before = commit.indexes().to_vec();
        for declaration in &declared {
            let declared = declared_index(declaration);
            let (type_name, fields) = (declared.type_name, declared.fields);
            let label = format!("index {type_name}({})", fields.join(", "));
            let mut failure = None;
            let mut report = |read: u64, total: u64| {
                if let (Some(callback), None) = (&progress, &failure) {
                    failure = callback.call1((label.as_str(), read, total)).err();
                }
            };
            let built = commit.ensure_index(&declared, &mut report);
            if let Some(error) = failure {
                return Err(error);
            }
            built.py_err()?;
        }
        let declarations: Vec<DeclaredIndex<'_>> = declared.iter().map(declared_index).collect();
        let stale = stale_indexes(commit.indexes(), &declarations, &removed);
        for id in &stale {
            commit.drop_index(*id).py_err()?;
        }
        // Nothing to write leaves the store untouched (dropping the commit aborts it).
        if commit.indexes() != before.as_slice() {
            without_gil(py, move || commit.finish()).py_err()?;
        }
        Ok(())
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
        let py = slf.py();
        let this = slf.get();
        if this.is_readonly() {
            return Ok(None);
        }
        // Index keys of datetimes in named zones are their instants by the zone's rules.
        crate::query::share_zone_search_path(py)?;
        let jar = slf.clone().unbind();
        let changed: Vec<Bound<'_, PyAny>> = this.changed.lock()?.iter().map(|o| o.bind(py).clone()).collect();
        let added: Vec<Bound<'_, PyAny>> = this.added.lock()?.iter().map(|o| o.bind(py).clone()).collect();
        let deleted: Vec<Bound<'_, PyAny>> = this.deleted.lock()?.iter().map(|o| o.bind(py).clone()).collect();
        let watched: Vec<(u64, Vec<u8>)> = {
            let saved = this.saved_states.lock()?;
            let mut watched: Vec<(u64, Vec<u8>)> =
                this.watched.lock()?.iter().filter_map(|oid| saved.get(oid).map(|state| (*oid, state.clone()))).collect();
            // In id order: the records are compared and written in the order they sit on disk.
            watched.sort_unstable_by_key(|(oid, _)| *oid);
            watched
        };
        let unsaved_added = added.iter().any(|o| PersistentBase::of(o).map(|p| p.state() == UNSAVED).unwrap_or(true));
        if changed.is_empty() && deleted.is_empty() && !unsaved_added && watched.is_empty() {
            return Ok(None);
        }
        let _pause = GcPause::new(py);
        let store = this.store.get()?;
        // The commit ends the transaction: it takes over the snapshot, whose connection it runs
        // on (PostgreSQL). A read while it runs (none in practice) takes a fresh snapshot.
        let snapshot = this.snapshot.lock()?.take();
        let mut commit = without_gil(py, || match snapshot {
            Some(snapshot) => Commit::begin_after(&store, snapshot),
            None => Commit::begin(&store),
        })
        .py_err()?;
        commit.count_into(&this.stats.storage);
        let mut sink = CommitSink { conn: this, jar, commit, new_shapes: Vec::new(), to_write: VecDeque::new(), persisted: Vec::new() };
        let result = this.write_changes(py, &mut sink, &changed, &watched, &added, &deleted);
        let result = result.and_then(|written| {
            let CommitSink { commit, new_shapes, persisted, .. } = sink;
            if written.is_empty() && deleted.is_empty() {
                return Ok((None, written, new_shapes, persisted));
            }
            let tid = without_gil(py, move || commit.finish()).py_err()?;
            Ok((Some(tid), written, new_shapes, persisted))
        });
        match result {
            Ok((tid, written, new_shapes, _)) => {
                let mut classes = this.classes.lock()?;
                for (key, fields, shape) in new_shapes {
                    if let Some(entry) = classes.by_type.get_mut(&key) {
                        entry.shapes.push((fields, shape));
                    }
                }
                drop(classes);
                let Some(tid) = tid else { return Ok(None) };
                let mut cache = this.cache.lock()?;
                cache.reserve(written.len());
                let mut saved = this.saved_states.lock()?;
                for (obj, oid, mutable_state) in written {
                    let p = PersistentBase::of(&obj)?;
                    let was_loaded = p.state() != GHOST;
                    p.set_loaded(tid);
                    if let std::collections::hash_map::Entry::Vacant(slot) = cache.entry(oid) {
                        slot.insert(obj.clone().unbind());
                        this.loaded.fetch_add(1, Ordering::Relaxed);
                    } else if !was_loaded {
                        this.loaded.fetch_add(1, Ordering::Relaxed);
                    }
                    p.set_holds_containers(mutable_state.is_some());
                    match mutable_state {
                        Some(state) => {
                            saved.insert(oid, state);
                        }
                        None if !saved.is_empty() => {
                            saved.remove(&oid);
                        }
                        None => {}
                    }
                }
                for obj in &deleted {
                    let p = PersistentBase::of(obj)?;
                    if let Some(oid) = p.oid() {
                        // `obj` itself is still referenced by `deleted`: no deallocation here.
                        cache.remove(&oid);
                        saved.remove(&oid);
                    }
                    p.set_holds_containers(false);
                    p.detach();
                }
                // Only when no other commit came between this transaction's snapshot and its
                // commit: else the next begin must read their log entries too (this one's own
                // objects are then reloaded with them, which is merely redundant).
                if tid == this.seen_tid.load(Ordering::Relaxed) + 1 {
                    this.seen_tid.store(tid, Ordering::Relaxed);
                }
                drop(saved);
                drop(cache);
                this.changed.lock()?.clear();
                this.added.lock()?.clear();
                this.deleted.lock()?.clear();
                this.watched.lock()?.clear();
                // Committed: a tid that cannot be made an int is still a MemoryError, not a panic.
                Ok(Some(crate::allocation::unsigned_int(py, tid)?))
            }
            Err(error) => Err(error),
        }
    }
}

impl Connection {
    /// The store, while the connection is open.
    pub(crate) fn store(&self) -> PyResult<Arc<Store>> {
        self.store.get()
    }

    /// The cache of the classes this connection encodes and decodes.
    pub(crate) fn classes(&self) -> PyResult<MutexGuard<'_, ClassCache>> {
        self.classes.lock()
    }

    /// The running transaction's changes as records for the query engine, or None when it has
    /// none (always in a read-only transaction, which never compares).
    fn overlay(&self, slf: &Bound<'_, Self>) -> PyResult<Option<crate::pending::Overlay>> {
        let py = slf.py();
        if self.is_readonly() {
            return Ok(None);
        }
        let bind = |objects: &[Py<PyAny>]| objects.iter().map(|o| o.bind(py).clone()).collect::<Vec<_>>();
        let changed = bind(&self.changed.lock()?);
        let added = bind(&self.added.lock()?);
        let deleted = bind(&self.deleted.lock()?);
        let watched_oids: Vec<u64> = self.watched.lock()?.iter().copied().collect();
        if changed.is_empty() && added.is_empty() && deleted.is_empty() && watched_oids.is_empty() {
            return Ok(None);
        }
        let mut watched = Vec::with_capacity(watched_oids.len());
        for oid in watched_oids {
            let saved = self.saved_states.lock()?.get(&oid).cloned();
            if let (Some(obj), Some(saved)) = (self.cached(py, oid)?, saved) {
                watched.push((obj, saved));
            }
        }
        let changes = crate::pending::TransactionChanges { changed, watched, added, deleted };
        crate::pending::overlay(py, self, &slf.clone().unbind(), changes)
    }

    /// Refuses `what` in a read-only transaction.
    fn check_writable(&self, what: &str) -> PyResult<()> {
        if self.is_readonly() {
            return Err(crate::errors::ReadOnlyError::new_err(format!(
                "cannot {what} in a read-only transaction; use db.transaction() (read-write) for changes"
            )));
        }
        Ok(())
    }

    /// `obj` as a persistent object that is new or of this connection (`what`: what the
    /// caller does with it, for the error): an object of another connection or database is
    /// refused, as referencing one is.
    fn own_object<'a>(&self, slf: &Bound<'_, Self>, obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a PersistentBase> {
        let p = PersistentBase::of(obj).map_err(|_| {
            PyTypeError::new_err(format!("only copal.Persistent objects can be {what}, not {}", obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()))
        })?;
        if p.state() != UNSAVED && !p.is_jar(&slf.clone().unbind()) {
            return Err(PyTypeError::new_err(format!(
                "a persistent object of another connection or database cannot be {what} here; \
                 load it in this transaction"
            )));
        }
        Ok(p)
    }

    fn write_changes<'py>(
        &self,
        py: Python<'py>,
        sink: &mut CommitSink<'_, '_>,
        changed: &[Bound<'py, PyAny>],
        watched: &[(u64, Vec<u8>)],
        added: &[Bound<'py, PyAny>],
        deleted: &[Bound<'py, PyAny>],
    ) -> PyResult<Vec<Written<'py>>> {
        let tid = sink.commit.tid();
        let mut written = Vec::new();
        let outcome = (|| {
            // The changed and deleted objects' conflict checks, all before any write (their
            // records read in one batch): a conflict names every object that conflicts.
            let mut checked = Vec::new();
            for obj in changed {
                let p = PersistentBase::of(obj)?;
                if let (CHANGED, Some(oid)) = (p.state(), p.oid()) {
                    checked.push((oid, p.serial()));
                }
            }
            for obj in deleted {
                let p = PersistentBase::of(obj)?;
                checked.extend(p.oid().map(|oid| (oid, p.serial())));
            }
            let oids: Vec<u64> = checked.iter().map(|(oid, _)| *oid).collect();
            sink.commit.prefetch(&oids).py_err()?;
            let mut conflicting = Vec::new();
            for (oid, serial) in &checked {
                if sink.commit.stored_tid(*oid).py_err()? != Some(*serial) {
                    conflicting.push((*oid, *serial));
                }
            }
            if let Some((oid, serial)) = conflicting.first() {
                // The first one's check makes the error (and counts the refused commit).
                let first = sink.commit.check_unchanged(*oid, *serial).err().unwrap_or(copal_core::StoreError::Conflict {
                    oid: *oid,
                    read_tid: *serial,
                    stored_tid: None,
                });
                return Err(crate::errors::conflicts(first, conflicting.iter().map(|(oid, _)| *oid).collect()));
            }
            for obj in added {
                sink.reference(obj)?;
            }
            for obj in changed {
                let p = PersistentBase::of(obj)?;
                let (oid, state) = (p.oid(), p.state());
                let Some(oid) = oid else { continue };
                if state != CHANGED {
                    continue;
                }
                written.extend(self.write_one(sink, obj, oid, tid, None, None)?);
            }
            for (oid, saved) in watched {
                let Some(obj) = self.cached(py, *oid)? else { continue };
                let p = PersistentBase::of(&obj)?;
                let (serial, state) = (p.serial(), p.state());
                if state != UP_TO_DATE {
                    continue;
                }
                if let Some(entry) = self.write_one(sink, &obj, *oid, tid, Some((saved, serial)), None)? {
                    written.push(entry);
                }
            }
            while let Some((obj, shape)) = sink.to_write.pop_front() {
                let obj = obj.into_bound(py);
                let oid = PersistentBase::of(&obj)?.oid().expect("persisted objects have ids");
                written.extend(self.write_one(sink, &obj, oid, tid, None, Some(shape))?);
            }
            for obj in deleted {
                let p = PersistentBase::of(obj)?;
                let oid = p.oid();
                if let Some(oid) = oid {
                    sink.commit.delete(oid).py_err()?;
                }
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => Ok(written),
            Err(error) => {
                // Objects that received ids in this failed commit become unsaved again.
                for obj in &sink.persisted {
                    PersistentBase::of(obj.bind(py))?.detach();
                }
                Err(error)
            }
        }
    }

    /// Encodes and stores one object. With `compare_to` (the state bytes it was loaded with and
    /// its serial), writes only if the state differs, after a conflict check.
    fn write_one<'py>(
        &self,
        sink: &mut CommitSink<'_, '_>,
        obj: &Bound<'py, PyAny>,
        oid: u64,
        tid: u64,
        compare_to: Option<(&Vec<u8>, u64)>,
        shape: Option<ClassShape>,
    ) -> PyResult<Option<Written<'py>>> {
        self.stats.objects_encoded.fetch_add(1, Ordering::Relaxed);
        let (record, state_start, mutable) = Encoder::new(sink).record(obj, tid, shape)?;
        let state = &record[state_start..];
        if let Some((saved, serial)) = compare_to {
            if state == saved.as_slice() {
                return Ok(None);
            }
            sink.commit.check_unchanged(oid, serial).py_err()?;
        }
        sink.commit.put(oid, &record).py_err()?;
        let mutable_state = mutable.then(|| state.to_vec());
        Ok(Some((obj.clone(), oid, mutable_state)))
    }
}

/// An object a commit wrote: the object, its id, and, if its state can change in place unseen,
/// the state bytes it was written with (the next commit compares them).
type Written<'py> = (Bound<'py, PyAny>, u64, Option<Vec<u8>>);

/// Appends every persistent object referenced from `value` (through plain containers and
/// plain objects, not through other persistent objects) to `out`.
fn collect_references<'py>(value: &Bound<'py, PyAny>, out: &mut Vec<Bound<'py, PyAny>>, depth: usize) -> PyResult<()> {
    if depth > 256 {
        return Ok(());
    }
    if value.is_instance_of::<PersistentBase>() {
        out.push(value.clone());
    } else if let Ok(list) = value.cast::<PyList>() {
        for item in list.iter() {
            collect_references(&item, out, depth + 1)?;
        }
    } else if let Ok(dict) = value.cast::<PyDict>() {
        for (k, v) in dict.iter() {
            collect_references(&k, out, depth + 1)?;
            collect_references(&v, out, depth + 1)?;
        }
    } else if let Ok(tuple) = value.cast::<PyTuple>() {
        for item in tuple.iter() {
            collect_references(&item, out, depth + 1)?;
        }
    } else if value.is_instance_of::<pyo3::types::PySet>() || value.is_instance_of::<pyo3::types::PyFrozenSet>() {
        for item in value.try_iter()? {
            collect_references(&item?, out, depth + 1)?;
        }
    } else if !value.is_instance_of::<PyString>()
        && (crate::encode::has_instance_dict(value) || crate::encode::is_python_class(&value.get_type()))
        && !value.is_instance(pytypes::enum_type(value.py())?)?
    {
        // Plain objects stored by value, through their slots and instance dict; enum members
        // and objects of built-in types without an instance dict hold no references of their own.
        let fields = match crate::slots::layout_of(&value.get_type())? {
            Some(layout) => Some(crate::slots::SlotFields::of(value, &layout)?.to_dict()?),
            None => crate::persistent::instance_dict(value).ok(),
        };
        if let Some(fields) = fields {
            collect_references(&fields.into_any(), out, depth + 1)?;
        }
    }
    Ok(())
}
