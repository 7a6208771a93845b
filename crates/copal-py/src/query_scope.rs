//! What a query needs to know of the program's classes beyond the store: the type names its
//! objects are stored under, the fields those classes (and the classes of the objects its paths
//! reach) renamed, and the defaults of the fields its paths read. Python knows these (the class
//! registry, `__copal_renamed__`, class attributes and `__init__` defaults) and makes one scope
//! per queried class and state of its registry; queries of that class share it, so a point
//! lookup hands Rust one object and converts nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use copal_core::query::Path;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Per stored type name, the (former name, current name) pairs of the fields its class renamed.
pub type Renames = Arc<HashMap<String, Vec<(String, String)>>>;

/// (stored type name, default) for each class that gives one field a default.
type FieldDefaults = Arc<Vec<(String, Py<PyAny>)>>;

#[pyclass(frozen, module = "copal._core")]
pub struct QueryScope {
    /// The class registry's generation when the scope was made: a later one makes it stale.
    pub(crate) generation: i64,
    pub(crate) type_names: Vec<String>,
    pub(crate) renamed: Renames,
    /// `field_defaults(names)` of python/copal/evolution.py, or None when queries read the
    /// stored fields only (the `copal query` command, which has no application classes).
    field_defaults: Option<Py<PyAny>>,
    /// What `field_defaults` gave for each field name asked so far: a query reads a few fields,
    /// so a list searched by name is faster than a hashed map.
    defaults_by_field: Mutex<Vec<(String, FieldDefaults)>>,
}

#[pymethods]
impl QueryScope {
    /// `type_names`: the stored type names of the queried objects; `renamed`: (stored type name,
    /// former field name, current name) for every renamed field of a registered class;
    /// `field_defaults(names)`: (stored type name, field, default) for each field of `names`
    /// that a registered class gives a default.
    #[new]
    #[pyo3(signature = (type_names, renamed, field_defaults=None))]
    fn new(py: Python<'_>, type_names: Vec<String>, renamed: Vec<(String, String, String)>, field_defaults: Option<Py<PyAny>>) -> PyResult<QueryScope> {
        let mut renames: HashMap<String, Vec<(String, String)>> = HashMap::new();
        for (type_name, old, new) in renamed {
            renames.entry(type_name).or_default().push((old, new));
        }
        let generation = crate::hooks::registry_generation(py)?;
        Ok(QueryScope { generation, type_names, renamed: Arc::new(renames), field_defaults, defaults_by_field: Mutex::default() })
    }
}

impl QueryScope {
    /// (stored type name, field, default) for every segment of `paths` that a class gives a
    /// default.
    pub(crate) fn defaults_for<'py, 'p>(
        &self,
        py: Python<'py>,
        paths: impl Iterator<Item = &'p Path>,
    ) -> PyResult<Vec<(String, String, Bound<'py, PyAny>)>> {
        let mut found: Vec<(String, String, Bound<'py, PyAny>)> = Vec::new();
        let Some(field_defaults) = &self.field_defaults else { return Ok(found) };
        for segment in paths.flatten() {
            if found.iter().any(|(_, field, _)| field == segment) {
                continue;
            }
            for (type_name, default) in self.defaults_of(py, field_defaults, segment)?.iter() {
                found.push((type_name.clone(), segment.clone(), default.bind(py).clone()));
            }
        }
        Ok(found)
    }

    /// The defaults of field `name`, asked of Python at the first query that reads it. The lock
    /// is not held while Python runs: `field_defaults` may run queries of its own.
    fn defaults_of(&self, py: Python<'_>, field_defaults: &Py<PyAny>, name: &str) -> PyResult<FieldDefaults> {
        let known = |by_field: &[(String, FieldDefaults)]| by_field.iter().find(|(field, _)| field == name).map(|(_, d)| Arc::clone(d));
        if let Some(defaults) = known(&self.defaults_by_field.lock().unwrap_or_else(PoisonError::into_inner)) {
            return Ok(defaults);
        }
        let names = PyTuple::new(py, [name])?;
        let given: Vec<(String, String, Py<PyAny>)> = field_defaults.bind(py).call1((names,))?.extract()?;
        let defaults: FieldDefaults = Arc::new(given.into_iter().map(|(type_name, _, default)| (type_name, default)).collect());
        let mut by_field = self.defaults_by_field.lock().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have asked meanwhile: the first answer stays.
        if let Some(first) = known(&by_field) {
            return Ok(first);
        }
        by_field.push((name.to_owned(), Arc::clone(&defaults)));
        Ok(defaults)
    }
}
