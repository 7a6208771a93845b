//! Cache hints for the fields of CPython 3.11 instances a few items ahead of the JSON writer
//! and the binary encoder (crate::prefetch `ahead`): where an instance keeps its fields (its
//! values array or its made dict), a made dict's values array, and the first field values,
//! found through the layouts of `layout`. Elsewhere `cpython::portable` gives no hints.

use pyo3::ffi;

use super::layout::{self, DictKeys};
use crate::prefetch::line;

/// The fields asked for at most: enough for most classes, and a bounded cost for the others.
const FIELDS: usize = 8;

/// Where an instance keeps its fields.
enum Fields {
    /// Its values array (its dict was never made).
    Values(*mut *mut ffi::PyObject),
    /// Its dict.
    Dict(*mut ffi::PyDictObject),
}

/// Where `obj` keeps its fields, if it is an instance of a class with a managed dict.
///
/// # Safety
/// `obj` must be a live object.
#[inline(always)]
unsafe fn fields(obj: *mut ffi::PyObject) -> Option<Fields> {
    // SAFETY: `obj` is live; the pointers before it are read only once its type has a
    // managed dict, as `tables` reads them; a dict pointer that is not null is its dict.
    unsafe {
        if !layout::has_managed_dict(ffi::Py_TYPE(obj)) {
            return None;
        }
        let values = *layout::values_pointer(obj);
        if !values.is_null() {
            return Some(Fields::Values(values));
        }
        let dict = *layout::dict_pointer(obj);
        (!dict.is_null()).then(|| Fields::Dict(dict.cast()))
    }
}

/// Where `obj` keeps its fields: its values array, or its made dict.
///
/// # Safety
/// `obj` must be a live object.
#[inline(always)]
pub unsafe fn dict_or_values(obj: *mut ffi::PyObject) {
    // SAFETY: the caller's guarantee.
    match unsafe { fields(obj) } {
        Some(Fields::Values(values)) => line(values),
        Some(Fields::Dict(dict)) => line(dict),
        None => {}
    }
}

/// The values array of a split dict (a made instance dict).
///
/// # Safety
/// `obj` must be a live object.
#[inline(always)]
pub unsafe fn dict_values(obj: *mut ffi::PyObject) {
    // SAFETY: the caller's guarantee; a live dict's values pointer is null or its array.
    unsafe {
        if let Some(Fields::Dict(dict)) = fields(obj) {
            line((*dict).ma_values);
        }
    }
}

/// The objects of the first fields of `obj`, two lines each (a str's text starts 48 bytes
/// in).
///
/// # Safety
/// `obj` must be a live object.
#[inline(always)]
pub unsafe fn field_values(obj: *mut ffi::PyObject) {
    // SAFETY: `obj` is live; a key table is read while its class or dict holds it, and a
    // values array has room for each of its table's entries (`tables` reads them the same
    // way); a field not set is a null pointer, a harmless hint.
    unsafe {
        let (values, keys) = match fields(obj) {
            Some(Fields::Values(values)) => match layout::shared_keys(ffi::Py_TYPE(obj)) {
                Some(keys) => (values, keys),
                None => return,
            },
            Some(Fields::Dict(dict)) => ((*dict).ma_values.cast::<*mut ffi::PyObject>(), (*dict).ma_keys.cast_const().cast::<DictKeys>()),
            None => return,
        };
        if values.is_null() || (*keys).kind != layout::KEYS_SPLIT {
            return;
        }
        let count = usize::try_from((*keys).nentries).unwrap_or(0).min(FIELDS);
        for index in 0..count {
            let value = *values.add(index);
            line(value);
            line(value.cast::<u8>().wrapping_add(64));
        }
    }
}
