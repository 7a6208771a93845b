//! Attributes of classes found along their MRO through CPython 3.11's type lookup, which has no
//! public equivalent there and also gives the class the version tag that the class cache
//! (class_cache.rs) keys its facts by.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

/// The attribute `name` of `class` as found along its MRO, without calling anything (no
/// metaclass `__getattribute__`, no descriptor). Assigns the class its version tag if it has
/// none (a lookup through the method cache).
pub fn class_attribute<'py>(class: &Bound<'py, PyType>, name: &Bound<'py, PyString>) -> Option<Bound<'py, PyAny>> {
    // SAFETY: `class` is a live type and `name` a str; the GIL is held. _PyType_Lookup returns a
    // borrowed reference or null, never with an exception set.
    unsafe {
        let found = _PyType_Lookup(class.as_type_ptr(), name.as_ptr());
        Bound::from_borrowed_ptr_or_opt(class.py(), found)
    }
}

extern "C" {
    // Exported by CPython 3.11, though not part of its public API, so pyo3 does not declare it.
    fn _PyType_Lookup(class: *mut ffi::PyTypeObject, name: *mut ffi::PyObject) -> *mut ffi::PyObject;
}
