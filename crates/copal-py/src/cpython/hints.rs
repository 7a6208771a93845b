//! Cache hints for the fields of instances a few items ahead of the JSON writer and the binary
//! encoder (crate::prefetch `ahead`): where an instance keeps its fields (its values array and
//! their insertion order, or its made dict), a made dict's values array, and the first field
//! values, found through the version's `instance` layout. Elsewhere `cpython::no_tables` gives
//! no hints.

use pyo3::ffi;

use super::dict_layout::{self, DictKeys};
use super::instance;
use crate::prefetch::line;

/// The fields asked for at most: enough for most classes, and a bounded cost for the others.
const FIELDS: usize = 8;

/// Where an instance keeps its fields.
enum Fields {
    /// Its own values array (no dict took it over).
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
    // SAFETY: `obj` is live; its layout is read as `tables` reads it, the dict pointer only
    // once its type has a managed dict; a dict pointer that is not null is its dict.
    unsafe {
        if let Some(values) = instance::own_values(obj) {
            return Some(Fields::Values(values));
        }
        if !dict_layout::has_managed_dict(ffi::Py_TYPE(obj)) {
            return None;
        }
        let dict = instance::made_dict_pointer(obj);
        (!dict.is_null()).then(|| Fields::Dict(dict.cast()))
    }
}

/// Where `obj` keeps its fields: its values array and their order, or its made dict.
///
/// # Safety
/// `obj` must be a live object.
#[inline(always)]
pub unsafe fn dict_or_values(obj: *mut ffi::PyObject) {
    // SAFETY: the caller's guarantee; `values` is a live array.
    match unsafe { fields(obj) } {
        Some(Fields::Values(values)) => {
            line(values);
            line(unsafe { instance::order_address(values) });
        }
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
            Some(Fields::Values(values)) => match dict_layout::shared_keys(ffi::Py_TYPE(obj)) {
                Some(keys) => (values, keys),
                None => return,
            },
            Some(Fields::Dict(dict)) if !(*dict).ma_values.is_null() => {
                (instance::array_of((*dict).ma_values), (*dict).ma_keys.cast_const().cast::<DictKeys>())
            }
            _ => return,
        };
        if (*keys).kind != dict_layout::KEYS_SPLIT {
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
