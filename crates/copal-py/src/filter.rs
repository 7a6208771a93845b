//! Query filters as Python builds them (`copal.field(...)` operators, the `copal query` command
//! line), typed: each node is checked when it is made (an unknown operator or a malformed path
//! is refused there), and a query converts the tree into `copal_core::query::Expr` by matching
//! its variants. Operand values stay Python objects until a query runs: their encoding depends
//! on the database (its descriptors, its objects).

use copal_core::format::Limits;
use copal_core::query::{CmpOp, Path};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::query_scope::QueryScope;

/// One node of a filter.
pub enum FilterNode {
    Everything,
    Compare { path: Path, op: CmpOp, value: Py<PyAny> },
    OneOf { path: Path, values: Vec<Py<PyAny>> },
    StartsWith { path: Path, prefix: Py<PyAny> },
    IsNone { path: Path },
    All(Vec<Py<Filter>>),
    Any(Vec<Py<Filter>>),
    Not(Py<Filter>),
    /// The objects that the value at `path` of a stored object in `scope` matching `filter`
    /// refers to (`copal.referenced_by`).
    ReferencedBy { scope: Py<QueryScope>, path: Path, filter: Py<Filter> },
}

/// An immutable filter tree; `copal.Expr` wraps one.
///
/// Invariant: `depth` (the levels of `and`, `or` and `not` above the deepest condition) is at
/// most the decoders' `max_depth` (`copal_core::format::Limits`). Every walk of a filter (into a
/// core query, `explain`, dropping it) recurses once per level, so a tree nested deeper is
/// refused as it is made, before any walk could run off the end of the stack.
#[pyclass(frozen, module = "copal._core")]
pub struct Filter {
    pub node: FilterNode,
    depth: usize,
}

impl From<FilterNode> for Filter {
    /// A condition (a leaf: nothing nested in it).
    fn from(node: FilterNode) -> Filter {
        Filter { node, depth: 0 }
    }
}

impl Filter {
    /// `node`, an `and`, `or` or `not`, one level above the filters it holds; refused past the
    /// depth limit.
    fn nesting(node: FilterNode) -> PyResult<Filter> {
        let items = match &node {
            FilterNode::All(items) | FilterNode::Any(items) => items.as_slice(),
            FilterNode::Not(item) | FilterNode::ReferencedBy { filter: item, .. } => std::slice::from_ref(item),
            _ => &[],
        };
        let depth = 1 + items.iter().map(|item| item.get().depth).max().unwrap_or(0);
        let limit = Limits::default().max_depth;
        if depth > limit {
            return Err(PyValueError::new_err(format!(
                "query filter nested deeper than {limit} levels of and/or/not; combine the conditions \
                 in fewer levels (copal.field(...).in_() for many alternatives)"
            )));
        }
        Ok(Filter { node, depth })
    }

    /// `items`, with the items of each one that is itself an `and` (`or`: `pick`) in its place:
    /// `a & b & c` is one `and` of three conditions, however many conditions a program chains.
    fn flattened(py: Python<'_>, items: Vec<Py<Filter>>, pick: fn(&FilterNode) -> Option<&Vec<Py<Filter>>>) -> Vec<Py<Filter>> {
        let mut flat = Vec::with_capacity(items.len());
        for item in items {
            match pick(&item.get().node) {
                Some(inner) => flat.extend(inner.iter().map(|each| each.clone_ref(py))),
                None => flat.push(item),
            }
        }
        flat
    }
}

pub(crate) fn checked_path(path: Vec<String>) -> PyResult<Path> {
    if path.is_empty() || path.iter().any(String::is_empty) {
        return Err(PyValueError::new_err(format!("invalid field path {:?}", path.join("."))));
    }
    Ok(path)
}

fn op_text(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "==",
        CmpOp::Ne => "!=",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    }
}

#[pymethods]
impl Filter {
    /// The filter of a query without conditions.
    #[staticmethod]
    fn everything() -> Filter {
        FilterNode::Everything.into()
    }

    /// The value at `path` compares with `value` by `op` ("==", "!=", "<", "<=", ">", ">=").
    #[staticmethod]
    fn compare(path: Vec<String>, op: &str, value: Py<PyAny>) -> PyResult<Filter> {
        let op = CmpOp::parse(op).ok_or_else(|| PyValueError::new_err(format!("unknown comparison operator {op:?}")))?;
        Ok(FilterNode::Compare { path: checked_path(path)?, op, value }.into())
    }

    /// The value at `path` equals one of `values` (any iterable, read once here).
    #[staticmethod]
    fn one_of(path: Vec<String>, values: &Bound<'_, PyAny>) -> PyResult<Filter> {
        // Read with a loop: collecting asks for a length hint, whose failure pyo3 reports as
        // unraisable.
        let mut items = Vec::new();
        for value in values.try_iter()? {
            items.push(value?.unbind());
        }
        Ok(FilterNode::OneOf { path: checked_path(path)?, values: items }.into())
    }

    /// The value at `path` is a str (or bytes) starting with `prefix`.
    #[staticmethod]
    fn starts_with(path: Vec<String>, prefix: Py<PyAny>) -> PyResult<Filter> {
        Ok(FilterNode::StartsWith { path: checked_path(path)?, prefix }.into())
    }

    /// The value at `path` is None or missing.
    #[staticmethod]
    fn is_none(path: Vec<String>) -> PyResult<Filter> {
        Ok(FilterNode::IsNone { path: checked_path(path)? }.into())
    }

    /// Every one of `items` holds.
    #[staticmethod]
    pub(crate) fn all_of(py: Python<'_>, items: Vec<Py<Filter>>) -> PyResult<Filter> {
        let items = Filter::flattened(py, items, |node| match node {
            FilterNode::All(inner) => Some(inner),
            _ => None,
        });
        Filter::nesting(FilterNode::All(items))
    }

    /// At least one of `items` holds.
    #[staticmethod]
    fn any_of(py: Python<'_>, items: Vec<Py<Filter>>) -> PyResult<Filter> {
        let items = Filter::flattened(py, items, |node| match node {
            FilterNode::Any(inner) => Some(inner),
            _ => None,
        });
        Filter::nesting(FilterNode::Any(items))
    }

    /// `item` does not hold.
    #[staticmethod]
    fn negate(item: Py<Filter>) -> PyResult<Filter> {
        Filter::nesting(FilterNode::Not(item))
    }

    /// The objects that the value at `path` of at least one stored object of `scope` matching
    /// `filter` refers to.
    #[staticmethod]
    fn referenced_by(scope: Py<QueryScope>, path: Vec<String>, filter: Py<Filter>) -> PyResult<Filter> {
        Filter::nesting(FilterNode::ReferencedBy { scope, path: checked_path(path)?, filter })
    }

    /// The filter as `explain()` shows it.
    fn describe<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        crate::allocation::str(py, &self.text(py)?)
    }

    fn __repr__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        crate::allocation::str(py, &format!("Filter({})", self.text(py)?))
    }
}

impl Filter {
    /// The filter as `explain()` shows it.
    pub(crate) fn text(&self, py: Python<'_>) -> PyResult<String> {
        let path = |path: &Path| path.join(".");
        let repr = |value: &Py<PyAny>| -> PyResult<String> { Ok(value.bind(py).repr()?.to_string()) };
        let joined = |items: &[Py<Filter>], word: &str| -> PyResult<String> {
            let parts = items.iter().map(|item| item.get().text(py)).collect::<PyResult<Vec<_>>>()?;
            Ok(format!("({})", parts.join(&format!(" {word} "))))
        };
        Ok(match &self.node {
            FilterNode::Everything => "nothing (all objects)".to_owned(),
            FilterNode::Compare { path: p, op, value } => format!("{} {} {}", path(p), op_text(*op), repr(value)?),
            FilterNode::OneOf { path: p, values } => {
                let shown = values.iter().map(repr).collect::<PyResult<Vec<_>>>()?;
                format!("{} in [{}]", path(p), shown.join(", "))
            }
            FilterNode::StartsWith { path: p, prefix } => format!("{} startswith {}", path(p), repr(prefix)?),
            FilterNode::IsNone { path: p } => format!("{} is None", path(p)),
            FilterNode::All(items) => joined(items, "and")?,
            FilterNode::Any(items) => joined(items, "or")?,
            FilterNode::Not(item) => format!("not {}", item.get().text(py)?),
            FilterNode::ReferencedBy { scope, path: p, filter } => {
                let names = &scope.get().type_names;
                let of = names.first().map_or("", String::as_str);
                format!("referenced by {of}.{} where {}", path(p), filter.get().text(py)?)
            }
        })
    }

    /// Every path the filter reads, once each.
    pub(crate) fn collect_paths(&self, out: &mut Vec<Path>) {
        match &self.node {
            FilterNode::Everything => {}
            FilterNode::Compare { path, .. } | FilterNode::OneOf { path, .. } | FilterNode::StartsWith { path, .. } | FilterNode::IsNone { path } => {
                if !out.contains(path) {
                    out.push(path.clone());
                }
            }
            FilterNode::All(items) | FilterNode::Any(items) => items.iter().for_each(|item| item.get().collect_paths(out)),
            FilterNode::Not(item) => item.get().collect_paths(out),
            // Its paths are read from other objects.
            FilterNode::ReferencedBy { .. } => {}
        }
    }
}
