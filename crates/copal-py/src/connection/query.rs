//! Queries of a connection's snapshot, seeing the running transaction's own changes, and the
//! maintenance of the store's indexes.

use std::sync::atomic::Ordering;

use copal_core::query::{self, Aggregate, Aggregation, Path, Pending};
use copal_core::store::{stale_indexes, DeclaredIndex, FieldDefault, RemovedIndex};
use copal_core::Commit;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use super::sinks::ReadOnlySink;
use super::thread::{without_gil, SameThread};
use super::Connection;
use crate::errors::IntoPyResult;
use crate::gc::GcPause;
use crate::list_builder::ListBuilder;
use crate::persistent::{PersistentBase, GHOST};
use crate::query::{OperandConverter, OperandSink};
use crate::query_scope::QueryScope;

/// How many results of an iterated query are built at once: a loop that stops early builds only
/// what it consumed, plus the rest of its batch.
pub(crate) const ITERATION_BATCH: usize = 1000;

/// A query as `Connection.query` receives it (its documentation describes each part).
pub(crate) struct Request<'a, 'py> {
    pub(crate) scope: &'a QueryScope,
    pub(crate) filter: &'a Bound<'py, crate::filter::Filter>,
    pub(crate) order: Vec<(Vec<String>, bool)>,
    pub(crate) offset: usize,
    pub(crate) limit: Option<usize>,
    pub(crate) mode: &'a str,
    /// The paths whose values "values" returns.
    pub(crate) select: Vec<Path>,
    /// What "aggregate" computes.
    pub(crate) aggregation: Option<Aggregation>,
}

/// Runs a query (`Connection.query`).
pub(crate) fn run<'py>(slf: &Bound<'py, Connection>, request: Request<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
    let Request { scope, filter, order, offset, limit, mode, select, aggregation } = request;
    let py = slf.py();
    // Datetimes in named zones compare by the instants of the zone's rules.
    crate::query::share_zone_search_path(py)?;
    let this = slf.get();
    let jar = slf.clone().unbind();
    let mut overlay = this.overlay(slf)?;
    // Operands mean what stored values mean; with an overlay, new objects and the classes
    // (provisional numbers) and layouts it made are known too.
    let mut read_only = ReadOnlySink { conn: this, unknown_class: false };
    let mut in_overlay = overlay.as_mut().map(|overlay| overlay.operand_sink(this, &jar));
    let sink: &mut dyn OperandSink = match in_overlay.as_mut() {
        Some(sink) => sink,
        None => &mut read_only,
    };
    let read: Vec<Path> = {
        let aggregated = aggregation.iter().flat_map(|a| a.group.iter().chain(&a.field));
        order.iter().map(|(path, _)| path).chain(&select).chain(aggregated).cloned().collect()
    };
    let mut query = OperandConverter { sink }.query(scope, filter, &read)?;
    drop(in_overlay);
    if query.classes.is_empty() {
        // Nothing of these types was ever stored, nor is about to be.
        let empty = || ListBuilder::of(py, Vec::new());
        return match (mode, &aggregation) {
            ("aggregate", Some(Aggregation { group: Some(_), .. })) => Ok(pyo3::types::PyDict::new(py).into_any()),
            ("aggregate", Some(Aggregation { kind: Aggregate::Count, .. })) => 0.into_bound_py_any(py),
            ("aggregate", _) => Ok(py.None().into_bound(py)),
            ("arrow", _) => {
                let names: Vec<String> = select.iter().map(|path| path.join(".")).collect();
                let columns = copal_core::arrow::columns(&names, Vec::new()).map_err(|e| pyo3::exceptions::PyTypeError::new_err(e.to_string()))?;
                Ok(Bound::new(py, crate::arrow_stream::ArrowStream::new(columns, 0))?.into_any())
            }
            ("count", _) => 0.into_bound_py_any(py),
            ("iterate", _) => Ok(crate::allocation::tuple(py, vec![empty()?.into_any(), empty()?.into_any()])?.into_any()),
            ("explain", _) => Ok(crate::allocation::str(py, "nothing stored yet")?.into_any()),
            _ => Ok(empty()?.into_any()),
        };
    }
    query.order = order;
    query.select = select;
    query.offset = offset;
    query.limit = limit;
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
    let reading = super::projection::Reading { conn: this, pending: pending.0, new_objects };
    match (mode, &aggregation) {
        ("values", _) => return reading.values(py, &query),
        ("arrow", _) => {
            let names: Vec<String> = query.select.iter().map(|path| path.join(".")).collect();
            return reading.arrow(py, &query, &names);
        }
        ("aggregate", Some(aggregation)) => return reading.aggregate(py, &query, aggregation),
        _ => {}
    }
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

/// An index declaration as `copal.indexes.declared_indexes` passes it: (declaring type name,
/// covered type names, fields, unique, renamed fields, field defaults as index keys).
pub(crate) type IndexArgs = (String, Vec<String>, Vec<String>, bool, Vec<(String, String, String)>, Vec<FieldDefault>);

pub(crate) fn declared_index((type_name, covered, fields, unique, renamed, defaults): &IndexArgs) -> DeclaredIndex<'_> {
    DeclaredIndex { type_name, covered, fields, unique: *unique, renamed, defaults }
}

/// Makes the store's indexes match the declarations (`Connection.sync_indexes`).
pub(super) fn sync_indexes(
    conn: &Connection,
    py: Python<'_>,
    declared: Vec<IndexArgs>,
    removed: Vec<RemovedIndex>,
    progress: Option<Bound<'_, PyAny>>,
) -> PyResult<()> {
    let store = conn.store.get()?;
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

impl Connection {
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
}
