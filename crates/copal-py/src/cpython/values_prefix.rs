//! The values arrays of CPython 3.11 and 3.12, alike in both (Include/internal/pycore_dict.h):
//! an instance's values, indexed like its class's shared key table, after a byte prefix that
//! records the order they were set ("[-1] = prefix size. [-2] = used size. size[-2-n...] =
//! insertion order"). Deleting a value removes its index and closes the gap
//! (`delete_index_from_values`), so the order always lists exactly the values set.

use pyo3::ffi;

/// The values array of a dict's `ma_values` (a `PyDictValues`, which is the array itself).
#[inline(always)]
pub fn array_of(ma_values: *mut ffi::PyDictValues) -> *mut *mut ffi::PyObject {
    ma_values.cast()
}

/// The number of values set in a values array: its insertion order's length, the byte at -2.
///
/// # Safety
/// `values` must be a live values array.
#[inline(always)]
pub unsafe fn inserted_count(values: *const *mut ffi::PyObject) -> usize {
    // SAFETY: every values array is allocated with its prefix (`new_values`).
    unsafe { usize::from(*values.cast::<u8>().sub(2)) }
}

/// The index in `values` of the `position`th value set (`get_index_from_order`: the byte at
/// `-3 - position`).
///
/// # Safety
/// `values` must be a live values array and `position` below its `inserted_count`.
#[inline(always)]
pub unsafe fn inserted_index(values: *const *mut ffi::PyObject, position: usize) -> usize {
    // SAFETY: the prefix holds `inserted_count` indices before the count byte.
    unsafe { usize::from(*values.cast::<u8>().sub(3 + position)) }
}

/// Where the insertion order of `values` starts, for a cache hint: in the prefix, just before
/// the array.
///
/// # Safety
/// `values` must be a live values array (nothing is read).
#[inline(always)]
pub unsafe fn order_address(values: *const *mut ffi::PyObject) -> *const u8 {
    values.cast::<u8>().wrapping_sub(3)
}
