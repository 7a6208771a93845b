//! Python classes the codec recognises: the standard library's, imported once per interpreter,
//! and copal's own, handed over by the package (`crate::hooks`).

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};

macro_rules! imported_type {
    ($fn_name:ident, $module:literal, $name:literal) => {
        pub fn $fn_name(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
            static CELL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
            crate::allocation::imported(&CELL, py, $module, $name)
        }
    };
}

imported_type!(decimal_type, "decimal", "Decimal");
imported_type!(uuid_type, "uuid", "UUID");
imported_type!(enum_type, "enum", "Enum");
imported_type!(flag_type, "enum", "Flag");
imported_type!(timezone_type, "datetime", "timezone");
imported_type!(zoneinfo_type, "zoneinfo", "ZoneInfo");
imported_type!(object_type, "builtins", "object");

/// The classes and functions of the copal package itself, which the package hands over.
pub(crate) use crate::hooks::{broken_object_type, broken_type, evolution_plan};

/// Whether this is a free-threaded build (`Py_GIL_DISABLED`), where an object's reference count
/// is split between threads and cannot be read as a whole. Known when the module is built: a
/// free-threaded interpreter loads only modules built for it. (Asked of `sysconfig` at run
/// time, a first call that ran out of memory answered "free-threaded" for the process's life.)
pub const FREE_THREADED: bool = cfg!(Py_GIL_DISABLED);

/// CPython's `subtype_dealloc`, the deallocator of every class that Python code makes
/// (`encode::is_python_class`); not exported, so learnt from a class made for the purpose when
/// the module is imported (`learn_class_statement_dealloc`). Zero before, which no class has.
static CLASS_STATEMENT_DEALLOC: AtomicUsize = AtomicUsize::new(0);

pub fn class_statement_dealloc() -> usize {
    CLASS_STATEMENT_DEALLOC.load(Ordering::Relaxed)
}

/// Makes a class with `type()` and keeps its deallocator (`class_statement_dealloc`).
pub fn learn_class_statement_dealloc(py: Python<'_>) -> PyResult<()> {
    let namespace = crate::allocation::dict(py)?;
    let probe = py.get_type::<PyType>().call1(("copal_probe", PyTuple::empty(py), namespace))?.cast_into::<PyType>()?;
    // SAFETY: `probe` is a live type object; only its deallocator is read.
    let dealloc = unsafe { (*probe.as_type_ptr()).tp_dealloc };
    CLASS_STATEMENT_DEALLOC.store(dealloc.map_or(0, |dealloc| dealloc as usize), Ordering::Relaxed);
    Ok(())
}
