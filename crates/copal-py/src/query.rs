//! Python query filters (`crate::filter::Filter`) -> core queries, their operands encoded as
//! stored values are.

use std::path::PathBuf;

use copal_core::format::{decode_value, Reader, Value};
use copal_core::format::ClassNo;
use copal_core::query::{Expr, Path, Query};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::allocation::{self, interned};
use crate::encode::{Encoder, Sink};
use crate::filter::{Filter, FilterNode};
use crate::query_scope::QueryScope;

/// Stands for an operand of a class the database has never stored: equal to nothing.
fn matches_nothing() -> Value {
    Value::Enum { descriptor: u32::MAX, member: String::new() }
}

/// Converts operands with the encoder (so they mean exactly what a stored value would).
pub struct OperandConverter<'a> {
    pub sink: &'a mut dyn OperandSink,
}

pub trait OperandSink: Sink {
    /// Whether the last encoding failed because a class is unknown to the database.
    fn take_unknown_class(&mut self) -> bool;
    fn decode(&self, bytes: &[u8]) -> PyResult<Value>;
    /// The class numbers of the stored type names `type_names` that have one.
    fn classes(&self, type_names: &[String]) -> PyResult<Vec<ClassNo>>;
}

impl OperandConverter<'_> {
    pub fn value(&mut self, operand: &Bound<'_, PyAny>) -> PyResult<Value> {
        let encoded = Encoder::new(self.sink).standalone(operand);
        if self.sink.take_unknown_class() {
            return Ok(matches_nothing());
        }
        self.sink.decode(&encoded?)
    }

    pub fn expr(&mut self, filter: &Bound<'_, Filter>) -> PyResult<Expr> {
        let py = filter.py();
        let mut all = |items: &[Py<Filter>]| items.iter().map(|item| self.expr(item.bind(py))).collect::<PyResult<Vec<_>>>();
        Ok(match &filter.get().node {
            FilterNode::Everything => Expr::True,
            FilterNode::All(items) => Expr::And(all(items)?),
            FilterNode::Any(items) => Expr::Or(all(items)?),
            FilterNode::Not(item) => Expr::Not(Box::new(self.expr(item.bind(py))?)),
            FilterNode::Compare { path, op, value } => Expr::Cmp { path: path.clone(), op: *op, value: self.value(value.bind(py))? },
            FilterNode::OneOf { path, values } => {
                let values = values.iter().map(|value| self.value(value.bind(py))).collect::<PyResult<Vec<_>>>()?;
                Expr::In { path: path.clone(), values }
            }
            FilterNode::StartsWith { path, prefix } => Expr::StartsWith { path: path.clone(), prefix: self.value(prefix.bind(py))? },
            FilterNode::IsNone { path } => Expr::IsNone { path: path.clone() },
            FilterNode::ReferencedBy { scope, path, filter } => {
                // The objects of `scope` matching `filter`, selecting `path`.
                let mut inner = self.query(scope.get(), filter.bind(py), std::slice::from_ref(path))?;
                inner.select = vec![path.clone()];
                Expr::ReferencedBy(Box::new(inner))
            }
        })
    }

    /// The query of the stored objects of `scope` (their classes, those of the sink's pending
    /// objects included) that match `filter`, reading fields as loading gives them: under the
    /// names the classes renamed, and as their defaults where records lack them, for the paths
    /// of the filter and `read` (the paths the query reads besides).
    pub fn query(&mut self, scope: &QueryScope, filter: &Bound<'_, Filter>, read: &[Path]) -> PyResult<Query> {
        let py = filter.py();
        let classes = self.sink.classes(&scope.type_names)?;
        let filter = self.expr(filter)?;
        let mut paths = Vec::new();
        filter.paths(&mut paths);
        let defaults = scope.defaults_for(py, paths.into_iter().chain(read))?;
        let mut query = Query::new(classes, filter);
        for (type_name, field, default) in defaults {
            query.defaults.entry(type_name).or_default().push((field, self.value(&default)?));
        }
        query.renamed = std::sync::Arc::clone(&scope.renamed);
        Ok(query)
    }
}

pub fn decode_operand(bytes: &[u8], catalog: &copal_core::store::Catalog) -> PyResult<Value> {
    decode_value(&mut Reader::new(bytes), catalog).map_err(|e| crate::errors::corrupt("query operand", e))
}

/// Makes the core read time zones where Python's `zoneinfo` reads them (`zoneinfo.TZPATH`, then
/// the `tzdata` package's files), once per process: the engine compares a datetime in a named
/// zone by the instant that zone's rules give it (and keys it so in indexes), which must be the
/// rules Python loads. Importing `zoneinfo` takes milliseconds, so this waits until the process
/// has imported it (every datetime in a named zone that Python makes or loads imports it), unless
/// no directory of the core's default path (PYTHONTZPATH, else CPython's default `TZPATH`)
/// exists. A MemoryError is raised (and the next call tries again); a `zoneinfo` or `tzdata` that
/// cannot be read leaves the core's default.
pub fn share_zone_search_path(py: Python<'_>) -> PyResult<()> {
    static SHARED: PyOnceLock<()> = PyOnceLock::new();
    static DEFAULT_USABLE: PyOnceLock<bool> = PyOnceLock::new();
    static MODULES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    if SHARED.get(py).is_some() {
        return Ok(());
    }
    let modules = MODULES.get_or_try_init(py, || PyModule::import(py, interned!(py, "sys")?)?.getattr(interned!(py, "modules")?).map(Bound::unbind))?;
    let imported = modules.bind(py).contains(interned!(py, "zoneinfo")?)?;
    if !imported && *DEFAULT_USABLE.get_or_init(py, copal_core::query::zone_search_path_exists) {
        return Ok(());
    }
    SHARED
        .get_or_try_init(py, || {
            let attempt = || -> PyResult<Vec<PathBuf>> {
                let zoneinfo = py.import(allocation::str(py, "zoneinfo")?)?;
                let mut dirs: Vec<PathBuf> = zoneinfo.getattr(interned!(py, "TZPATH")?)?.extract::<Vec<String>>()?.into_iter().map(PathBuf::from).collect();
                match py.import(allocation::str(py, "tzdata")?) {
                    Ok(tzdata) => {
                        let package: Vec<String> = tzdata.getattr(interned!(py, "__path__")?)?.extract()?;
                        dirs.extend(package.into_iter().map(|dir| PathBuf::from(dir).join("zoneinfo")));
                    }
                    Err(error) if allocation::is_memory_error(py, &error) => return Err(error),
                    // Not installed: zoneinfo reads TZPATH only.
                    Err(_) => {}
                }
                Ok(dirs)
            };
            match attempt() {
                Ok(dirs) => copal_core::query::set_zone_search_path(dirs),
                Err(error) if allocation::is_memory_error(py, &error) => return Err(error),
                Err(_) => {}
            }
            Ok(())
        })
        .map(|_| ())
}
