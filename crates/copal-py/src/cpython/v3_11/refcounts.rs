//! References counted several at a time, for the list builder's runs of one shared item
//! (list_builder.rs `extend_shared`). CPython 3.11 keeps an object's reference count as a plain
//! `Py_ssize_t` in `ob_refcnt` (Include/object.h), and `Py_INCREF` adds one to it; builds with
//! `Py_REF_DEBUG` also count each reference in a global total, so there references are added
//! one `Py_INCREF` at a time. Later versions make some objects immortal, whose count must not
//! be written: `cpython::portable` adds references one at a time there.

use pyo3::ffi;

/// Whether `add_references` adds any number of references in one write, so that a caller
/// gains by counting a run of references to one object at once.
pub const ADDS_REFERENCES_AT_ONCE: bool = cfg!(not(py_sys_config = "Py_REF_DEBUG"));

/// Adds `count` references to `object`'s reference count, as `count` calls of `Py_INCREF` do.
///
/// # Safety
/// `object` must be a live object, the GIL held, and `count` references to it held by the
/// caller without being counted yet.
#[inline]
pub unsafe fn add_references(object: *mut ffi::PyObject, count: ffi::Py_ssize_t) {
    // SAFETY: the caller's guarantee; without `Py_REF_DEBUG`, `Py_INCREF` of CPython 3.11 is
    // `ob_refcnt++` and nothing else, so adding `count` at once is `count` of them.
    #[cfg(not(py_sys_config = "Py_REF_DEBUG"))]
    unsafe {
        (*object).ob_refcnt += count
    };
    #[cfg(py_sys_config = "Py_REF_DEBUG")]
    for _ in 0..count {
        // SAFETY: the caller's guarantee, one reference at a time.
        unsafe { ffi::Py_INCREF(object) };
    }
}
