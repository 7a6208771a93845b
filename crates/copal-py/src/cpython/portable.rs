//! The parts of the interface of `crate::cpython` that use the public API only on every
//! interpreter but CPython 3.11: no field slots for the decoder (every field goes through
//! `PyObject_GenericSetAttr`), references counted one `Py_INCREF` at a time, and class
//! attributes found along the MRO's dicts.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple, PyType};

/// Nothing: this interpreter's instance layout is not known.
pub struct FieldSlots;

impl FieldSlots {
    pub fn of(_class: &Bound<'_, PyType>, _fields: &[Py<PyString>]) -> Option<Self> {
        None
    }

    pub fn store(&self, _obj: &Bound<'_, PyAny>, _index: usize, _value: &Bound<'_, PyAny>) -> bool {
        false
    }

    pub fn is_for(&self, _class: &Bound<'_, PyType>) -> bool {
        false
    }
}

/// False: references are added one `Py_INCREF` at a time (`add_references`), since later
/// CPythons make some objects immortal and their counts must not be written.
pub const ADDS_REFERENCES_AT_ONCE: bool = false;

/// Adds `count` references to `object`'s reference count with `count` calls of `Py_INCREF`.
/// Unused in practice: with `ADDS_REFERENCES_AT_ONCE` false, no caller leaves references
/// uncounted.
///
/// # Safety
/// `object` must be a live object, the GIL held, and `count` references to it held by the
/// caller without being counted yet.
#[inline]
pub unsafe fn add_references(object: *mut ffi::PyObject, count: ffi::Py_ssize_t) {
    for _ in 0..count {
        // SAFETY: the caller's guarantee, one reference at a time.
        unsafe { ffi::Py_INCREF(object) };
    }
}

/// The attribute `name` of `class` as found along its MRO, without calling anything (no
/// metaclass `__getattribute__`, no descriptor): the first dict of the MRO's classes that has
/// it, read through `PyType_GetDict` (which also gives the dicts of static types).
pub fn class_attribute<'py>(class: &Bound<'py, PyType>, name: &Bound<'py, PyString>) -> Option<Bound<'py, PyAny>> {
    let py = class.py();
    // SAFETY: `class` is a live type, whose `tp_mro` is null (not ready) or a tuple of types it
    // holds; each dict is a new reference. A failed item lookup (an error from the hash of
    // `name`, a str, cannot happen) counts as not found.
    unsafe {
        let mro = (*class.as_type_ptr()).tp_mro;
        if mro.is_null() {
            return None;
        }
        let mro = Bound::from_borrowed_ptr(py, mro).cast_into_unchecked::<PyTuple>();
        for base in mro.iter() {
            let dict = Bound::from_owned_ptr_or_opt(py, ffi::PyType_GetDict(base.as_ptr().cast()))?;
            let mut found = std::ptr::null_mut();
            if ffi::compat::PyDict_GetItemRef(dict.as_ptr(), name.as_ptr(), &mut found) > 0 {
                return Some(Bound::from_owned_ptr(py, found));
            }
        }
        None
    }
}
