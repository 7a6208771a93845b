//! `copal.Query`: building a query (`where`, `order_by`, `limit`, `offset`, `only`) and running
//! it (`first`, `all`, `one`, `exists`, `count`, `oids`, iteration, `explain`) are calls into
//! Rust, with no Python frame between the program and the engine: a point lookup,
//! `tx.query(C).where(key=value).first()`, is the hot path of many applications. Conditions
//! (`copal.Expr`, python/copal/query.py) carry the filter tree that queries take. The
//! awaitable forms (`afirst`, ..., `async for`) hand those same calls to the transaction, which
//! runs them in a worker thread (python/copal/aio.py).

use std::sync::{Mutex, PoisonError};

use copal_core::query::{Aggregate, Aggregation, Path};
use pyo3::exceptions::{PyLookupError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};

use crate::allocation::interned;
use crate::connection::{Connection, ITERATION_BATCH};
use crate::filter::{checked_path, Filter, FilterNode};
use crate::list_builder::ListBuilder;
use crate::query_scope::QueryScope;

/// The stored objects of a class (subclasses included) that satisfy conditions.
///
/// Queries are immutable: every method returns a new one. Nothing is read until the query is
/// iterated or asked for results. Conditions are evaluated in Rust on the raw records: only the
/// fields they test are decoded, and only matching objects are built. Objects added, changed or
/// deleted by the running transaction are seen as they are now (read-your-writes).
///
/// >>> adults = tx.query(Person).where(copal.field("age") >= 18).order_by("name")  # doctest: +SKIP
/// >>> adults.limit(10).all()                                                      # doctest: +SKIP
#[pyclass(frozen, module = "copal", name = "Query")]
pub struct QueryObject {
    tx: Py<PyAny>,
    cls: Py<PyType>,
    node: Py<Filter>,
    order: Vec<(Path, bool)>,
    offset: usize,
    limit: Option<usize>,
    only: bool,
    /// The scope of `cls` (and `only`) when the query was made (`copal.query._scope`).
    scope: Py<QueryScope>,
}

impl QueryObject {
    fn with(&self, py: Python<'_>) -> QueryObject {
        QueryObject {
            tx: self.tx.clone_ref(py),
            cls: self.cls.clone_ref(py),
            node: self.node.clone_ref(py),
            order: self.order.clone(),
            offset: self.offset,
            limit: self.limit,
            only: self.only,
            scope: self.scope.clone_ref(py),
        }
    }

    /// The scope of queries of `cls` as the class registry stands now.
    fn scope_of<'py>(py: Python<'py>, cls: &Bound<'py, PyType>, only: bool) -> PyResult<Bound<'py, QueryScope>> {
        Ok(crate::hooks::query_scope(py)?.call1((cls, only))?.cast_into::<QueryScope>()?)
    }

    /// This query's scope, made again if a class was registered since.
    fn current_scope<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, QueryScope>> {
        let scope = self.scope.bind(py);
        if scope.get().generation == crate::hooks::registry_generation(py)? {
            return Ok(scope.clone());
        }
        QueryObject::scope_of(py, self.cls.bind(py), self.only)
    }

    /// Runs the query in `mode` (see `Connection.query`) with at most `limit` results.
    fn run<'py>(&self, py: Python<'py>, mode: &str, limit: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
        self.run_selecting(py, mode, limit, Vec::new(), None)
    }

    /// `run`, reading the values of `select` ("values") or computing `aggregation`
    /// ("aggregate").
    fn run_selecting<'py>(
        &self,
        py: Python<'py>,
        mode: &str,
        limit: Option<usize>,
        select: Vec<Path>,
        aggregation: Option<Aggregation>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let limit = match (limit, self.limit) {
            (Some(asked), Some(own)) => Some(asked.min(own)),
            (asked, own) => asked.or(own),
        };
        let tx = self.tx.bind(py);
        // `_state` is one of python/copal/aio.py's interned state strings.
        if !tx.getattr(interned!(py, "_state")?)?.is(interned!(py, "active")?) {
            return Err(PyRuntimeError::new_err("this transaction has ended; start a new one with db.transaction()"));
        }
        let conn = tx.getattr(interned!(py, "_conn")?)?;
        let conn = conn.cast::<Connection>()?;
        let scope = self.current_scope(py)?;
        let request = crate::connection::QueryRequest {
            scope: scope.get(),
            filter: self.node.bind(py),
            order: self.order.clone(),
            offset: self.offset,
            limit,
            mode,
            select,
            aggregation,
        };
        crate::connection::run_query(conn, request)
    }

    /// `kind` of the values of `field` over the results, per value of `group` if given.
    fn aggregate<'py>(&self, py: Python<'py>, kind: Aggregate, field: Option<&Bound<'py, PyAny>>, group: Option<Path>) -> PyResult<Bound<'py, PyAny>> {
        let field = field.map(path_of).transpose()?;
        self.run_selecting(py, "aggregate", None, Vec::new(), Some(Aggregation { kind, field, group }))
    }

    /// `method` of this query run by the transaction in a worker thread: an awaitable
    /// (`Transaction._in_thread`, python/copal/aio.py).
    fn in_thread<'py>(slf: &Bound<'py, Self>, method: &str) -> PyResult<Bound<'py, PyAny>> {
        in_thread(&slf.get().tx, slf.getattr(method)?, &[])
    }

    fn class_name(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.cls.bind(py).name()?.to_string())
    }
}

/// `call(*arguments)` run by transaction `tx` in a worker thread: an awaitable
/// (`Transaction._in_thread`, python/copal/aio.py).
fn in_thread<'py>(tx: &Py<PyAny>, call: Bound<'py, PyAny>, arguments: &[Bound<'py, PyAny>]) -> PyResult<Bound<'py, PyAny>> {
    let py = call.py();
    let call = match arguments.is_empty() {
        true => call,
        false => {
            let partial = py.import(interned!(py, "functools")?)?.getattr(interned!(py, "partial")?)?;
            let parts: Vec<Bound<'py, PyAny>> = std::iter::once(call).chain(arguments.iter().cloned()).collect();
            partial.call1(PyTuple::new(py, parts)?)?
        }
    };
    tx.bind(py).call_method1(interned!(py, "_in_thread")?, (call,))
}

/// The node of a condition (`copal.Expr`, whose `node` is the filter).
fn condition_node<'py>(condition: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Filter>> {
    let py = condition.py();
    let node = condition.getattr_opt(interned!(py, "node")?)?;
    match node.as_ref().map(|node| node.cast::<Filter>()) {
        Some(Ok(node)) => Ok(node.clone()),
        _ => Err(PyTypeError::new_err(format!(
            "expected a copal condition (copal.field(...) == ...), not {}",
            condition.get_type().name()?
        ))),
    }
}

/// A dotted path ("a.b.c") or a `copal.Field`'s path.
fn path_of(path: &Bound<'_, PyAny>) -> PyResult<Path> {
    if let Ok(text) = path.cast::<PyString>() {
        let text = text.to_str()?;
        return checked_path(text.split('.').map(str::to_owned).collect());
    }
    let parts = path.getattr_opt(interned!(path.py(), "path")?)?.map(|parts| parts.extract::<Vec<String>>());
    match parts {
        Some(Ok(parts)) => checked_path(parts),
        _ => Err(PyTypeError::new_err(format!("a path is a str (\"a.b\") or a copal.field(...), not {}", path.get_type().name()?))),
    }
}

/// The paths given to `method` (`values`, `to_arrow`): at least one.
fn selected(paths: &Bound<'_, PyTuple>, method: &str) -> PyResult<Vec<Path>> {
    if paths.is_empty() {
        return Err(PyTypeError::new_err(format!("{method}() needs at least one path")));
    }
    paths.iter().map(|path| path_of(&path)).collect()
}

#[pymethods]
impl QueryObject {
    /// The query of every stored object of `cls` (and its subclasses) in transaction `tx`
    /// (what `tx.query(cls)` returns).
    #[new]
    fn new(py: Python<'_>, tx: Py<PyAny>, cls: Bound<'_, PyType>) -> PyResult<QueryObject> {
        let node = Py::new(py, Filter::from(FilterNode::Everything))?;
        let scope = QueryObject::scope_of(py, &cls, false)?.unbind();
        Ok(QueryObject { tx, cls: cls.unbind(), node, order: Vec::new(), offset: 0, limit: None, only: false, scope })
    }

    /// `Query[T]` in annotations.
    #[classmethod]
    fn __class_getitem__<'py>(cls: &Bound<'py, PyType>, item: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = cls.py();
        let alias = py.import(interned!(py, "types")?)?.getattr(interned!(py, "GenericAlias")?)?;
        alias.call1((cls, item))
    }

    /// Only objects satisfying every condition and attribute equality.
    #[pyo3(signature = (*conditions, **equalities))]
    fn r#where<'py>(slf: &Bound<'py, Self>, conditions: &Bound<'py, PyTuple>, equalities: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, QueryObject>> {
        let py = slf.py();
        let this = slf.get();
        let mut nodes: Vec<Py<Filter>> = Vec::new();
        if !matches!(this.node.get().node, FilterNode::Everything) {
            nodes.push(this.node.clone_ref(py));
        }
        for condition in conditions.iter() {
            nodes.push(condition_node(&condition)?.unbind());
        }
        if let Some(equalities) = equalities {
            for (name, value) in equalities.iter() {
                let path = path_of(&name)?;
                nodes.push(Py::new(py, Filter::from(FilterNode::Compare { path, op: copal_core::query::CmpOp::Eq, value: value.unbind() }))?);
            }
        }
        let node = match nodes.len() {
            0 => return Ok(slf.clone()),
            1 => nodes.pop().expect("one node"),
            _ => Py::new(py, Filter::all_of(py, nodes)?)?,
        };
        Bound::new(py, QueryObject { node, ..this.with(py) })
    }

    /// Sorts by these paths (appended to any earlier order). Values of different kinds sort
    /// by kind (None, numbers, str, bytes, dates, ...); missing values come first.
    #[pyo3(signature = (*paths, descending=false))]
    fn order_by<'py>(slf: &Bound<'py, Self>, paths: &Bound<'py, PyTuple>, descending: bool) -> PyResult<Bound<'py, QueryObject>> {
        let mut state = slf.get().with(slf.py());
        for path in paths.iter() {
            state.order.push((path_of(&path)?, descending));
        }
        Bound::new(slf.py(), state)
    }

    /// At most `n` results.
    fn limit<'py>(slf: &Bound<'py, Self>, n: i64) -> PyResult<Bound<'py, QueryObject>> {
        let n = usize::try_from(n).map_err(|_| PyValueError::new_err("limit must be >= 0"))?;
        Bound::new(slf.py(), QueryObject { limit: Some(n), ..slf.get().with(slf.py()) })
    }

    /// Skips the first `n` results.
    fn offset<'py>(slf: &Bound<'py, Self>, n: i64) -> PyResult<Bound<'py, QueryObject>> {
        let n = usize::try_from(n).map_err(|_| PyValueError::new_err("offset must be >= 0"))?;
        Bound::new(slf.py(), QueryObject { offset: n, ..slf.get().with(slf.py()) })
    }

    /// Objects of exactly `cls`, not of its subclasses.
    fn only<'py>(slf: &Bound<'py, Self>, cls: Bound<'py, PyType>) -> PyResult<Bound<'py, QueryObject>> {
        let py = slf.py();
        let scope = QueryObject::scope_of(py, &cls, true)?.unbind();
        Bound::new(py, QueryObject { cls: cls.unbind(), only: true, scope, ..slf.get().with(py) })
    }

    /// The first result (in `order_by` order, else in object-id order), or None.
    fn first<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let found = self.run(py, "objects", Some(1))?;
        let found = found.cast::<PyList>()?;
        Ok(if found.is_empty() { py.None().into_bound(py) } else { found.get_item(0)? })
    }

    /// Every result, as a list.
    fn all<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.run(py, "objects", None)
    }

    /// The only result; raises LookupError unless there is exactly one.
    fn one<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let found = self.run(py, "objects", Some(2))?;
        let found = found.cast::<PyList>()?;
        if found.len() != 1 {
            let how_many = if found.is_empty() { "none" } else { "several" };
            return Err(PyLookupError::new_err(format!("expected exactly one {}, found {how_many}", self.class_name(py)?)));
        }
        found.get_item(0)
    }

    /// Whether there is at least one result.
    fn exists(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(!self.run(py, "oids", Some(1))?.cast::<PyList>()?.is_empty())
    }

    /// How many objects match (ignoring offset and limit).
    fn count<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.offset > 0 || self.limit.is_some() {
            return crate::allocation::unsigned_int(py, self.run(py, "oids", None)?.len()? as u64);
        }
        self.run(py, "count", None)
    }

    /// The object ids of the results, without building the objects (None for an object the
    /// running transaction created and has not committed yet).
    fn oids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.run(py, "oids", None)
    }

    /// The values of `paths` in each result, as tuples, in the results' order (`order_by`,
    /// `offset` and `limit` apply), read in Rust from the records without building the
    /// objects. A path is a field name, a dotted path through embedded objects, dicts and
    /// references (`"address.city"`), or a `copal.field(...)`; where it leads nowhere the value
    /// is None. A reference gives the referenced object (a ghost until touched); containers are
    /// copies (two paths to one shared list give two equal lists).
    #[pyo3(signature = (*paths))]
    fn values<'py>(&self, py: Python<'py>, paths: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        self.run_selecting(py, "values", None, selected(paths, "values")?, None)
    }

    /// The values of `paths` in each result as Arrow columns (one per path, named by it), built
    /// in Rust from the records: an object that Arrow readers take without a Python object per
    /// value (`pyarrow.table(q.to_arrow("name", "age"))`, `polars.DataFrame(...)`, DuckDB).
    /// Column types follow the values: int (int64), float (float64; ints among floats become
    /// floats), bool, str (large_utf8), bytes (large_binary), date (date32), datetime
    /// (timestamp[us], UTC for aware ones), a reference (uint64: the object's id); None and
    /// missing values are nulls. TypeError for a column of other values (containers, Decimals,
    /// ...) or of two types; `values()` reads those.
    #[pyo3(signature = (*paths))]
    fn to_arrow<'py>(&self, py: Python<'py>, paths: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        self.run_selecting(py, "arrow", None, selected(paths, "to_arrow")?, None)
    }

    /// The sum of the values of `path` over the results (Python's arithmetic: ints exactly, an
    /// int and a float make a float; None and missing values add nothing), evaluated in Rust;
    /// None when no result has a value. TypeError for a value that is not an int, float or
    /// bool (Decimals are not summed in Rust).
    fn sum<'py>(&self, py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.aggregate(py, Aggregate::Sum, Some(path), None)
    }

    /// The least value of `path` over the results (compared as filters compare; None and
    /// missing values left out), or None. TypeError for values that cannot be ordered.
    fn min<'py>(&self, py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.aggregate(py, Aggregate::Min, Some(path), None)
    }

    /// The greatest value of `path` over the results, as `min` finds the least.
    fn max<'py>(&self, py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.aggregate(py, Aggregate::Max, Some(path), None)
    }

    /// The mean of the values of `path` over the results, a float (the values as `sum` adds
    /// them, divided by how many there are), or None.
    fn avg<'py>(&self, py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.aggregate(py, Aggregate::Avg, Some(path), None)
    }

    /// The results grouped by the value of `path`: aggregates of the groups are dicts keyed by
    /// that value (`query.group_by("city").count()`).
    fn group_by(slf: &Bound<'_, Self>, path: &Bound<'_, PyAny>) -> PyResult<GroupedQuery> {
        Ok(GroupedQuery { query: slf.clone().unbind(), group: path_of(path)? })
    }

    /// The results, built in batches of 1,000 as the iteration goes (a loop that stops early
    /// builds only what it consumed, plus the rest of its batch).
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Results> {
        let found = self.run(py, "iterate", None)?;
        let (first, rest): (Bound<'py, PyList>, Vec<u64>) = found.extract()?;
        let conn = self.tx.bind(py).getattr(interned!(py, "_conn")?)?.cast_into::<Connection>()?.unbind();
        Ok(Results { conn, batch: Mutex::new((first.unbind(), 0)), rest: Mutex::new(rest.into_iter()) })
    }

    /// `await query.afirst()`: `first()`, run in a worker thread while the event loop goes on.
    fn afirst<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        QueryObject::in_thread(slf, "first")
    }

    /// `await query.aall()`: `all()`, run in a worker thread while the event loop goes on.
    fn aall<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        QueryObject::in_thread(slf, "all")
    }

    /// `await query.aone()`: `one()`, run in a worker thread while the event loop goes on.
    fn aone<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        QueryObject::in_thread(slf, "one")
    }

    /// `await query.aexists()`: `exists()`, run in a worker thread while the event loop goes on.
    fn aexists<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        QueryObject::in_thread(slf, "exists")
    }

    /// `await query.acount()`: `count()`, run in a worker thread while the event loop goes on.
    fn acount<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        QueryObject::in_thread(slf, "count")
    }

    /// `await query.avalues(*paths)`: `values(*paths)`, run in a worker thread.
    #[pyo3(signature = (*paths))]
    fn avalues<'py>(slf: &Bound<'py, Self>, paths: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        in_thread(&slf.get().tx, slf.getattr(interned!(slf.py(), "values")?)?, &paths.iter().collect::<Vec<_>>())
    }

    /// `await query.asum(path)`: `sum(path)`, run in a worker thread.
    fn asum<'py>(slf: &Bound<'py, Self>, path: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        in_thread(&slf.get().tx, slf.getattr(interned!(slf.py(), "sum")?)?, &[path])
    }

    /// `await query.amin(path)`: `min(path)`, run in a worker thread.
    fn amin<'py>(slf: &Bound<'py, Self>, path: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        in_thread(&slf.get().tx, slf.getattr(interned!(slf.py(), "min")?)?, &[path])
    }

    /// `await query.amax(path)`: `max(path)`, run in a worker thread.
    fn amax<'py>(slf: &Bound<'py, Self>, path: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        in_thread(&slf.get().tx, slf.getattr(interned!(slf.py(), "max")?)?, &[path])
    }

    /// `await query.aavg(path)`: `avg(path)`, run in a worker thread.
    fn aavg<'py>(slf: &Bound<'py, Self>, path: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        in_thread(&slf.get().tx, slf.getattr(interned!(slf.py(), "avg")?)?, &[path])
    }

    /// `async for obj in query`: the results, a batch at a time, each batch run and built in a
    /// worker thread (`Transaction._aiter`, python/copal/aio.py).
    fn __aiter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        slf.get().tx.bind(py).call_method1(interned!(py, "_aiter")?, (slf,))
    }

    /// How the query will run: the index or scan the planner chose, then ordering and paging.
    fn explain(&self, py: Python<'_>) -> PyResult<String> {
        let access: String = self.run(py, "explain", None)?.extract()?;
        let filter = self.node.get();
        let mut parts = vec![format!("{access}; filter {}", filter.text(py)?)];
        let mut paths = Vec::new();
        filter.collect_paths(&mut paths);
        let scope = self.current_scope(py)?;
        let scope = scope.get();
        let defaults = scope.defaults_for(py, paths.iter().chain(self.order.iter().map(|(path, _)| path)))?;
        // Records written before a field was added are read as holding its default; those of
        // the queried classes are named (paths through references may read others' too).
        let defaults: Vec<_> = defaults.into_iter().filter(|(type_name, _, _)| scope.type_names.contains(type_name)).collect();
        if !defaults.is_empty() {
            let read_as = defaults
                .iter()
                .map(|(type_name, name, default)| Ok(format!("{name} = {} ({type_name})", default.repr()?)))
                .collect::<PyResult<Vec<_>>>()?;
            parts.push(format!("records without a field read as its default: {}", read_as.join(", ")));
        }
        if !self.order.is_empty() {
            let keys: Vec<String> = self.order.iter().map(|(path, desc)| path.join(".") + if *desc { " desc" } else { "" }).collect();
            let top = self.limit.map(|limit| format!(" (top {})", self.offset + limit)).unwrap_or_default();
            parts.push(format!("sort by {}{top}", keys.join(", ")));
        }
        if self.offset > 0 {
            parts.push(format!("skip {}", self.offset));
        }
        if let Some(limit) = self.limit {
            parts.push(format!("limit {limit}"));
        }
        Ok(parts.join("; "))
    }
}

/// The iterator over a query's results: the first batch built by the query, the others loaded
/// by id as the iteration reaches them.
#[pyclass(frozen, module = "copal._core")]
pub struct Results {
    conn: Py<Connection>,
    /// The batch being consumed and the position in it.
    batch: Mutex<(Py<PyList>, usize)>,
    rest: Mutex<std::vec::IntoIter<u64>>,
}

#[pymethods]
impl Results {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        loop {
            {
                let mut batch = self.batch.lock().unwrap_or_else(PoisonError::into_inner);
                let (list, position) = &mut *batch;
                let list = list.bind(py);
                if *position < list.len() {
                    *position += 1;
                    return list.get_item(*position - 1).map(Some);
                }
            }
            if !self.load_next(py)? {
                return Ok(None);
            }
        }
    }

    /// The results of the current batch not consumed yet, or else the next batch, loaded; an
    /// empty list at the end. `async for` takes one such list per step, in a worker thread.
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        loop {
            {
                let mut batch = self.batch.lock().unwrap_or_else(PoisonError::into_inner);
                let (list, position) = &mut *batch;
                let list = list.bind(py);
                if *position < list.len() {
                    let rest = list.get_slice(*position, list.len());
                    *position = list.len();
                    return Ok(rest);
                }
            }
            if !self.load_next(py)? {
                return ListBuilder::of(py, Vec::new());
            }
        }
    }
}

impl Results {
    /// Loads the next batch of results by id into `batch`; false when none is left.
    fn load_next(&self, py: Python<'_>) -> PyResult<bool> {
        let oids: Vec<u64> = self.rest.lock().unwrap_or_else(PoisonError::into_inner).by_ref().take(ITERATION_BATCH).collect();
        if oids.is_empty() {
            return Ok(false);
        }
        // Loading runs Python code (ghosts' classes): no lock is held meanwhile.
        let loaded = self.conn.get().load_many(py, oids)?;
        *self.batch.lock().unwrap_or_else(PoisonError::into_inner) = (loaded.unbind(), 0);
        Ok(true)
    }
}

/// A query's results grouped by the value of a path (`Query.group_by`): each aggregate is a
/// dict of the groups' values to the aggregate of their results, evaluated in Rust on the
/// records; the groups are the distinct values among the results (equal values are one group,
/// as in a dict: 1 and 1.0), None gathering the results where the path leads nowhere, in the
/// order of their first result.
#[pyclass(frozen, module = "copal", name = "GroupedQuery")]
pub struct GroupedQuery {
    query: Py<QueryObject>,
    group: Path,
}

impl GroupedQuery {
    fn in_thread<'py>(slf: &Bound<'py, Self>, method: &str, path: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        in_thread(&slf.get().query.get().tx, slf.getattr(method)?, path.as_slice())
    }

    fn aggregate<'py>(&self, py: Python<'py>, kind: Aggregate, field: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        self.query.get().aggregate(py, kind, field, Some(self.group.clone()))
    }
}

#[pymethods]
impl GroupedQuery {
    /// How many results each group has.
    fn count<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.aggregate(py, Aggregate::Count, None)
    }

    /// The sum of `path` in each group (as `Query.sum`).
    fn sum<'py>(&self, py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.aggregate(py, Aggregate::Sum, Some(path))
    }

    /// The least value of `path` in each group (as `Query.min`).
    fn min<'py>(&self, py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.aggregate(py, Aggregate::Min, Some(path))
    }

    /// The greatest value of `path` in each group (as `Query.max`).
    fn max<'py>(&self, py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.aggregate(py, Aggregate::Max, Some(path))
    }

    /// The mean of `path` in each group (as `Query.avg`).
    fn avg<'py>(&self, py: Python<'py>, path: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.aggregate(py, Aggregate::Avg, Some(path))
    }

    /// `await grouped.acount()`: `count()`, run in a worker thread.
    fn acount<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        GroupedQuery::in_thread(slf, "count", None)
    }

    /// `await grouped.asum(path)`: `sum(path)`, run in a worker thread.
    fn asum<'py>(slf: &Bound<'py, Self>, path: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        GroupedQuery::in_thread(slf, "sum", Some(path))
    }

    /// `await grouped.amin(path)`: `min(path)`, run in a worker thread.
    fn amin<'py>(slf: &Bound<'py, Self>, path: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        GroupedQuery::in_thread(slf, "min", Some(path))
    }

    /// `await grouped.amax(path)`: `max(path)`, run in a worker thread.
    fn amax<'py>(slf: &Bound<'py, Self>, path: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        GroupedQuery::in_thread(slf, "max", Some(path))
    }

    /// `await grouped.aavg(path)`: `avg(path)`, run in a worker thread.
    fn aavg<'py>(slf: &Bound<'py, Self>, path: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        GroupedQuery::in_thread(slf, "avg", Some(path))
    }
}
