//! The Python objects the binding needs from the copal package, handed to it by the package's
//! own modules as each one is imported (`install_hooks`): the binding never imports copal, so
//! the package and the compiled module import in one direction only.
//!
//! Each module hands what it defines at the end of its own import (python/copal/errors.py its
//! exception classes, persistent.py the class registry and its generation, evolution.py `Broken`, `BrokenObject`
//! and `plan`, slots.py `stored_slots`, query.py `_scope`).
//! `import copal` imports them all before it returns, so a program never meets a missing hook;
//! code that imports `copal._core` alone gets a RuntimeError naming the module to import, never
//! a wrong class.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyType};

/// The exception classes of python/copal/errors.py that the binding raises, in `ERROR_NAMES`
/// order.
static ERRORS: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();
static REGISTRY: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
static REGISTRY_GENERATION: PyOnceLock<Py<PyList>> = PyOnceLock::new();
static BROKEN: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static BROKEN_OBJECT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static EVOLUTION_PLAN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static STORED_SLOTS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static QUERY_SCOPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The names of the exception classes `install_hooks(errors=...)` must hand over.
pub(crate) const ERROR_NAMES: [&str; 9] = [
    "CopalError",
    "ConflictError",
    "CorruptRecordError",
    "SchemaError",
    "DanglingReference",
    "StorageError",
    "UniqueViolation",
    "DatabaseNotEmpty",
    "ReadOnlyError",
];

/// Hands the binding the objects of the copal package it uses; each keyword is optional, so
/// that every module hands its own. A hook already handed keeps its first value (a module
/// imported again makes new objects, but the binding goes on with the ones it was given).
#[pyfunction]
#[pyo3(signature = (*, errors=None, registry=None, registry_generation=None, broken=None, broken_object=None, evolution_plan=None, stored_slots=None, query_scope=None))]
#[allow(clippy::too_many_arguments)]
pub fn install_hooks(
    py: Python<'_>,
    errors: Option<Bound<'_, PyDict>>,
    registry: Option<Bound<'_, PyDict>>,
    registry_generation: Option<Bound<'_, PyList>>,
    broken: Option<Bound<'_, PyType>>,
    broken_object: Option<Bound<'_, PyType>>,
    evolution_plan: Option<Bound<'_, PyAny>>,
    stored_slots: Option<Bound<'_, PyAny>>,
    query_scope: Option<Bound<'_, PyAny>>,
) -> PyResult<()> {
    if let Some(errors) = errors {
        let classes = ERROR_NAMES
            .iter()
            .map(|name| {
                let class = errors.get_item(name)?.ok_or_else(|| PyRuntimeError::new_err(format!("install_hooks: errors lacks {name}")))?;
                Ok(class.cast_into::<PyType>()?.unbind())
            })
            .collect::<PyResult<Vec<_>>>()?;
        let _ = ERRORS.set(py, classes);
    }
    fn keep<T>(py: Python<'_>, cell: &PyOnceLock<Py<T>>, value: Option<Bound<'_, T>>) {
        if let Some(value) = value {
            let _ = cell.set(py, value.unbind());
        }
    }
    keep(py, &REGISTRY, registry);
    keep(py, &REGISTRY_GENERATION, registry_generation);
    keep(py, &BROKEN, broken);
    keep(py, &BROKEN_OBJECT, broken_object);
    keep(py, &EVOLUTION_PLAN, evolution_plan);
    keep(py, &STORED_SLOTS, stored_slots);
    keep(py, &QUERY_SCOPE, query_scope);
    Ok(())
}

fn handed<'py, T>(py: Python<'py>, cell: &'py PyOnceLock<Py<T>>, what: &str, module: &str) -> PyResult<&'py Bound<'py, T>> {
    cell.get(py).map(|value| value.bind(py)).ok_or_else(|| {
        PyRuntimeError::new_err(format!("copal._core needs {what} from {module}, which has not been imported: import copal first"))
    })
}

/// The exception class `ERROR_NAMES[index]`.
pub(crate) fn error_class(py: Python<'_>, index: usize) -> PyResult<&Bound<'_, PyType>> {
    let classes = ERRORS.get(py).ok_or_else(|| {
        PyRuntimeError::new_err("copal._core needs the exception classes of copal.errors, which has not been imported: import copal first")
    })?;
    Ok(classes[index].bind(py))
}

macro_rules! handed_hook {
    ($(#[$doc:meta])* $name:ident: $cell:ident, $kind:ty, $what:literal, $module:literal) => {
        $(#[$doc])*
        pub(crate) fn $name(py: Python<'_>) -> PyResult<&Bound<'_, $kind>> {
            handed(py, &$cell, $what, $module)
        }
    };
}

handed_hook!(
    /// `copal.evolution.Broken`: the read-only class of objects whose class cannot be found.
    broken_type: BROKEN, PyType, "Broken", "copal.evolution"
);
handed_hook!(
    /// `copal.evolution.BrokenObject`: embedded objects whose class cannot be found.
    broken_object_type: BROKEN_OBJECT, PyType, "BrokenObject", "copal.evolution"
);
handed_hook!(
    /// `copal.evolution.plan`: how to load a stored shape into a class.
    evolution_plan: EVOLUTION_PLAN, PyAny, "plan", "copal.evolution"
);
handed_hook!(
    /// `copal.slots.stored_slots`: which slots of a class hold stored fields.
    stored_slots: STORED_SLOTS, PyAny, "stored_slots", "copal.slots"
);
handed_hook!(
    /// `copal.query._scope(cls, only)`: the `QueryScope` of queries of a class.
    query_scope: QUERY_SCOPE, PyAny, "_scope", "copal.query"
);

/// The class registry for a decoder: `copal.persistent.registry` (the persistent classes by
/// stored type name; one dict, filled and never replaced), or before copal.persistent hands it
/// over, an empty dict (no class can have been registered yet: plain values still decode).
pub(crate) fn registry_for_decoding(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    match REGISTRY.get(py) {
        Some(registry) => Ok(registry.bind(py).clone()),
        None => crate::allocation::dict(py),
    }
}

/// `copal.persistent.registry_generation[0]`: grows whenever the class registry changes (0
/// before copal.persistent hands it over).
pub(crate) fn registry_generation(py: Python<'_>) -> PyResult<i64> {
    match REGISTRY_GENERATION.get(py) {
        Some(generation) => generation.bind(py).get_item(0)?.extract(),
        None => Ok(0),
    }
}
