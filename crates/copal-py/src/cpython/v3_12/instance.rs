//! Where CPython 3.12 keeps the values of an instance with a managed dict, as its
//! Include/internal/pycore_dict.h and pycore_object.h define it: one word, the third before
//! the object (`_PyObject_DictOrValuesPointer`), holds either the values array (allocated apart,
//! with the byte prefix of 3.11 recording the order the values were set), tagged by its low
//! bit, or the dict made for the instance, which took the array over. The interface of every
//! version's `instance` (see cpython/v3_11/instance.rs); the prefix is read by `values_prefix`.

use pyo3::ffi;

use crate::cpython::dict_layout::has_managed_dict;
pub use crate::cpython::values_prefix::{array_of, inserted_count, inserted_index, order_address};

/// Whether a dict's version tag shows whether it changed (`cpython::tables` reads made dicts
/// and plain dicts in place only then). Not relied on from 3.12, where PEP 509 is withdrawn
/// (the tag is deprecated and shares its bits with dict watchers): made dicts and plain dicts
/// are read through `PyDict_Next`.
pub const VERSIONED_DICTS: bool = false;

/// The dict-or-values word of an instance with a managed dict.
///
/// # Safety
/// `obj` must be a live object whose type has `Py_TPFLAGS_MANAGED_DICT`.
#[inline(always)]
unsafe fn dict_or_values(obj: *mut ffi::PyObject) -> usize {
    // SAFETY: such objects are allocated with two pointers before the GC header, which is two
    // pointers long too; the word is the first of them.
    unsafe { *obj.cast::<usize>().sub(3) }
}

/// The values array `obj` holds itself (its dict was never made), if it has one.
///
/// # Safety
/// `obj` must be a live object, and the GIL held.
#[inline(always)]
pub unsafe fn own_values(obj: *mut ffi::PyObject) -> Option<*mut *mut ffi::PyObject> {
    // SAFETY: the word is read only once the type has a managed dict; tagged, it is the
    // array's address less one (`_PyDictOrValues_GetValues`).
    unsafe {
        if !has_managed_dict(ffi::Py_TYPE(obj)) {
            return None;
        }
        let word = dict_or_values(obj);
        (word & 1 != 0).then(|| (word + 1) as *mut *mut ffi::PyObject)
    }
}

/// Whether `values`, found by `own_values`, is still the array of `obj`: the word still names
/// it. The array is freed only after the instance has handed it to a dict made for it (which
/// replaces the word first), so a word still equal cannot name a new array at the same address.
///
/// # Safety
/// `obj` must be the live object `own_values` found `values` in. An instance with its own
/// array cannot change type (assigning `__class__` makes its dict first, which this test sees).
#[inline(always)]
pub unsafe fn holds_own_values(obj: *mut ffi::PyObject, values: *mut *mut ffi::PyObject) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { dict_or_values(obj) == values as usize - 1 }
}

/// The dict of an instance with a managed dict once made; null before.
///
/// # Safety
/// `obj` must be a live object whose type has `Py_TPFLAGS_MANAGED_DICT`.
#[inline(always)]
pub unsafe fn made_dict_pointer(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: the caller's guarantee; an untagged word is the dict or null.
    unsafe {
        let word = dict_or_values(obj);
        if word & 1 != 0 { std::ptr::null_mut() } else { word as *mut ffi::PyObject }
    }
}
