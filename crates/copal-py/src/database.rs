//! The store handle shared by the connections of one `copal.Database`.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use copal_core::store::{GcOptions, GcProgress, MigrationReport, StoreStats};
use copal_core::{PageCheck, Snapshot, StoreOptions};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::allocation::{self, set_item, ToPython};
use crate::connection::{declared_index, Connection, IndexArgs};
use crate::errors::IntoPyResult;
use crate::stats::SharedStats;

/// A handle on an open store that `close` lets go of. Every `copal.open` of one LMDB directory
/// in a process shares one store, which stays open (with the options of its first open) while
/// any handle holds it: the handles of a closed Database and of its connections (which the
/// objects it loaded keep alive) let go, so that the directory can be opened again with other
/// options.
pub(crate) struct StoreHandle(RwLock<Option<Arc<copal_core::Store>>>);

impl StoreHandle {
    pub(crate) fn new(store: Arc<copal_core::Store>) -> Self {
        StoreHandle(RwLock::new(Some(store)))
    }

    /// The store, unless the handle was closed.
    pub(crate) fn get(&self) -> PyResult<Arc<copal_core::Store>> {
        let store = self.0.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        store.clone().ok_or_else(|| PyRuntimeError::new_err("the database is closed"))
    }

    pub(crate) fn close(&self) {
        self.0.write().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    }
}

#[pyclass(module = "copal._core", frozen)]
pub struct Store {
    pub(crate) store: StoreHandle,
    /// Where the database lives, kept for `repr` after closing.
    location: String,
    stats: Arc<SharedStats>,
}

#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (path, map_size=None, durable=true, max_connections=None, pool_timeout=None, readonly=false, check_pages=None))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        path: String,
        map_size: Option<usize>,
        durable: bool,
        max_connections: Option<usize>,
        pool_timeout: Option<f64>,
        readonly: bool,
        check_pages: Option<bool>,
    ) -> PyResult<Self> {
        let check_pages = match check_pages {
            None => PageCheck::Small,
            Some(true) => PageCheck::Always,
            Some(false) => PageCheck::Never,
        };
        let mut options = StoreOptions { durable, read_only: readonly, check_pages, ..StoreOptions::default() };
        if let Some(size) = map_size {
            options.map_size = size;
        }
        if let Some(max) = max_connections {
            options.pool.max_connections = max;
        }
        if let Some(seconds) = pool_timeout {
            options.pool.timeout = std::time::Duration::try_from_secs_f64(seconds)
                .map_err(|_| pyo3::exceptions::PyValueError::new_err(format!("pool_timeout must be seconds >= 0, not {seconds}")))?;
        }
        let store = py.detach(|| copal_core::Store::open(&path, options)).py_err()?;
        Ok(Store { location: store.location(), store: StoreHandle::new(store), stats: Arc::default() })
    }

    /// Creates the database at `location` unless it exists (`copal init`); a dict saying what
    /// was done (see `migration_report`).
    #[staticmethod]
    fn init<'py>(py: Python<'py>, location: String) -> PyResult<Bound<'py, PyDict>> {
        let report = py.detach(|| copal_core::Store::init(&location)).py_err()?;
        migration_report(py, &report)
    }

    /// Migrates the database at `location` to this copal's layout version (`copal upgrade`).
    #[staticmethod]
    fn upgrade<'py>(py: Python<'py>, location: String) -> PyResult<Bound<'py, PyDict>> {
        let report = py.detach(|| copal_core::Store::upgrade(&location)).py_err()?;
        migration_report(py, &report)
    }

    /// Rewrites the embedded database in directory `location` without its free pages (`copal
    /// compact`): a dict with its `location`, `size_before` and `size_after`.
    #[staticmethod]
    fn compact<'py>(py: Python<'py>, location: String) -> PyResult<Bound<'py, PyDict>> {
        let report = py.detach(|| copal_core::Store::compact(&location)).py_err()?;
        let out = allocation::dict(py)?;
        set_item(&out, "location", &report.location)?;
        set_item(&out, "size_before", report.size_before)?;
        set_item(&out, "size_after", report.size_after)?;
        Ok(out)
    }

    /// A new connection (identity map + snapshot) on this store; `registry` maps type names to
    /// the application's persistent classes.
    fn connect(&self, py: Python<'_>, registry: Py<PyDict>, cache_size: usize) -> PyResult<Py<Connection>> {
        Connection::create(py, Connection::new(self.store.get()?, Arc::clone(&self.stats), registry, cache_size))
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.stats.storage;
        let out = allocation::dict(py)?;
        set_item(&out, "records_read", StoreStats::get(&s.records_read))?;
        set_item(&out, "records_written", StoreStats::get(&s.records_written))?;
        set_item(&out, "commits", StoreStats::get(&s.commits))?;
        set_item(&out, "conflicts", StoreStats::get(&s.conflicts))?;
        set_item(&out, "cache_hits", self.stats.cache_hits.load(Ordering::Relaxed))?;
        set_item(&out, "cache_misses", self.stats.cache_misses.load(Ordering::Relaxed))?;
        set_item(&out, "objects_encoded", self.stats.objects_encoded.load(Ordering::Relaxed))?;
        Ok(out)
    }

    fn disk_size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.store.get()?.disk_size().py_err()?.to_python(py)
    }

    /// A consistent, compacted hot copy of the store in the new directory `dest`; returns its
    /// size in bytes.
    fn backup<'py>(&self, py: Python<'py>, dest: PathBuf) -> PyResult<Bound<'py, PyAny>> {
        let store = self.store.get()?;
        py.detach(move || store.backup(&dest)).py_err()?.to_python(py)
    }

    /// Where the database lives (a directory for the embedded store).
    fn location<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.location.as_str().to_python(py)
    }

    /// Lets go of the store (see `StoreHandle`); the Database's connections are closed first.
    fn close(&self) {
        self.store.close();
    }

    /// Checks the whole store (see `copal verify`): a dict with counts and a list of problems.
    fn verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store.get()?;
        let report = py.detach(move || store.verify()).py_err()?;
        let out = allocation::dict(py)?;
        set_item(&out, "records", report.records)?;
        set_item(&out, "references", report.references)?;
        set_item(&out, "index_entries", report.index_entries)?;
        set_item(&out, "anchors", report.anchors)?;
        set_item(&out, "problems", report.problems)?;
        Ok(out)
    }

    /// The stored schema (`copal schema`): every descriptor with the number of records written
    /// with it (read from record headers alone), the records whose header is unreadable, and the
    /// removed fields declared for each type name.
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store.get()?;
        let summary = py.detach(move || Snapshot::new(&store)?.schema_summary()).py_err()?;
        let mut descriptors = Vec::with_capacity(summary.descriptors.len());
        for used in &summary.descriptors {
            let d = &used.descriptor;
            let entry = allocation::dict(py)?;
            set_item(&entry, "id", d.id)?;
            set_item(&entry, "class", d.class_no)?;
            set_item(&entry, "type_name", &d.type_name)?;
            set_item(&entry, "fields", &d.fields)?;
            set_item(&entry, "records", used.records)?;
            descriptors.push(entry);
        }
        let out = allocation::dict(py)?;
        set_item(&out, "descriptors", descriptors)?;
        set_item(&out, "unreadable", summary.unreadable)?;
        set_item(&out, "removed", summary.removed.into_iter().collect::<Vec<_>>())?;
        Ok(out)
    }

    /// The type names of the stored descriptors, read from the catalog alone: unlike `schema`,
    /// no record is read, so checking a name costs the same on a store of any size.
    fn type_names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let store = self.store.get()?;
        let descriptors = py.detach(move || Snapshot::new(&store)?.all_descriptors()).py_err()?;
        descriptors.iter().map(|descriptor| &descriptor.type_name).collect::<Vec<_>>().to_python(py)
    }

    /// Whether the store already holds the declared indexes (as `Connection.sync_indexes` takes
    /// them) and removed fields (as `sync_removed` takes them): then neither needs its
    /// maintenance commit, whose lock would make a new process wait behind running commits.
    fn holds_declarations(
        &self,
        py: Python<'_>,
        declared: Vec<IndexArgs>,
        removed_indexes: Vec<copal_core::store::RemovedIndex>,
        removed: Vec<(String, Vec<String>)>,
    ) -> PyResult<bool> {
        let store = self.store.get()?;
        py.detach(move || {
            let indexes: Vec<_> = declared.iter().map(declared_index).collect();
            Snapshot::new(&store)?.holds_declarations(&indexes, &removed_indexes, &removed)
        })
        .py_err()
    }

    /// Stores the removed fields that the application's classes declare (`__copal_removed__`),
    /// so that `copal gc --schema` works without the classes: `declared` pairs each stored type
    /// name of a registered class with its removed fields (empty withdraws a declaration). A
    /// maintenance commit, made only if a declaration changed.
    fn sync_removed(&self, py: Python<'_>, declared: Vec<(String, Vec<String>)>) -> PyResult<()> {
        let store = self.store.get()?;
        py.detach(move || {
            let mut commit = copal_core::Commit::begin(&store)?;
            commit.set_maintenance();
            let mut changed = false;
            for (type_name, fields) in &declared {
                changed |= commit.declare_removed(type_name, fields)?;
            }
            // Nothing changed: dropping the commit aborts it and leaves the store untouched.
            if changed {
                commit.finish()?;
            }
            Ok(())
        })
        .py_err()
    }

    /// Values of declared removed fields still held by records (`copal gc --schema`); with
    /// `purge`, rewrites those records without them in one maintenance commit.
    fn gc_schema<'py>(&self, py: Python<'py>, purge: bool) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store.get()?;
        let report = py.detach(move || store.gc_schema(purge)).py_err()?;
        let mut removed = Vec::with_capacity(report.removed.len());
        for values in &report.removed {
            let entry = allocation::dict(py)?;
            set_item(&entry, "type_name", &values.type_name)?;
            set_item(&entry, "field", &values.field)?;
            set_item(&entry, "records", values.records)?;
            removed.push(entry);
        }
        let out = allocation::dict(py)?;
        set_item(&out, "removed", removed)?;
        set_item(&out, "records", report.records)?;
        set_item(&out, "purged", report.purged)?;
        set_item(&out, "shared", report.shared)?;
        set_item(&out, "tid", report.tid)?;
        Ok(out)
    }

    /// Removes the objects that neither the root nor an anchor reaches (`Database.gc`), in
    /// commits of at most `batch` removals, with the GIL released. `progress(what, done, total)`
    /// is called as it goes; an exception it raises (or a signal's, such as KeyboardInterrupt)
    /// stops the collection after its current commit and is raised here.
    #[pyo3(signature = (batch, progress=None))]
    fn collect_garbage<'py>(&self, py: Python<'py>, batch: usize, progress: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.store.get()?;
        let mut failure: Option<PyErr> = None;
        let report = py
            .detach(|| {
                store.collect_garbage(GcOptions { batch, ..GcOptions::default() }, &mut |step| {
                    Python::attach(|py| {
                        let (what, done, total) = match step {
                            GcProgress::Derive { read, total } => ("gc: finding anchors", read, total),
                            GcProgress::Mark { reached, total } => ("gc: marking", reached, total),
                            GcProgress::Sweep { removed, candidates } => ("gc: removing", removed, candidates),
                        };
                        let called = progress.as_ref().map_or(Ok(()), |p| p.call1(py, (what, done, total)).map(drop));
                        match called.and_then(|()| py.check_signals()) {
                            Ok(()) => ControlFlow::Continue(()),
                            Err(error) => {
                                failure = Some(error);
                                ControlFlow::Break(())
                            }
                        }
                    })
                })
            })
            .py_err()?;
        if let Some(error) = failure {
            return Err(error);
        }
        let by_type = allocation::dict(py)?;
        for (type_name, count) in &report.removed_by_type {
            set_item(&by_type, type_name, *count)?;
        }
        let out = allocation::dict(py)?;
        set_item(&out, "objects", report.objects)?;
        set_item(&out, "reachable", report.reachable)?;
        set_item(&out, "removed", report.removed)?;
        set_item(&out, "removed_bytes", report.removed_bytes)?;
        set_item(&out, "removed_by_type", by_type)?;
        set_item(&out, "anchors_derived", report.anchors_derived)?;
        set_item(&out, "commits", report.commits)?;
        Ok(out)
    }

    /// Testing hook: the stored value of `oid` (record and checksum), None if absent.
    fn raw_value<'py>(&self, py: Python<'py>, oid: u64) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.store.get()?.raw_value(oid).py_err()?.map(|v| allocation::bytes(py, &v)).transpose()
    }

    /// Testing and repair hook: the raw record bytes of `oid` (None if absent).
    fn raw_record<'py>(&self, py: Python<'py>, oid: u64) -> PyResult<Option<Bound<'py, PyAny>>> {
        let snapshot = Snapshot::new(&self.store.get()?).py_err()?;
        snapshot.get(oid).py_err()?.map(|r| allocation::bytes(py, &r)).transpose()
    }

    /// Testing and repair hook: writes raw bytes as the record of `oid` (with its checksum, or
    /// with `sealed` false as the stored value itself), in a commit of its own.
    #[pyo3(signature = (oid, data, sealed=true))]
    fn put_raw_record<'py>(&self, py: Python<'py>, oid: u64, data: &[u8], sealed: bool) -> PyResult<Bound<'py, PyAny>> {
        let store = self.store.get()?;
        let mut commit = copal_core::Commit::begin(&store).py_err()?;
        commit.put_raw(oid, data, sealed).py_err()?;
        commit.finish().py_err()?.to_python(py)
    }
}

/// `location`, `from_version`, `to_version`, `steps` and `created` of `report` as a dict.
fn migration_report<'py>(py: Python<'py>, report: &MigrationReport) -> PyResult<Bound<'py, PyDict>> {
    let out = allocation::dict(py)?;
    set_item(&out, "location", &report.location)?;
    set_item(&out, "from_version", report.from_version)?;
    set_item(&out, "to_version", report.to_version)?;
    set_item(&out, "steps", &report.steps)?;
    set_item(&out, "created", &report.created)?;
    Ok(out)
}
