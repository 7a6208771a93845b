//! Where CPython 3.11 keeps the values of an instance with a managed dict, as its
//! Include/internal/pycore_dict.h and pycore_object.h define it: a values array allocated apart
//! from the instance, its pointer the fourth word before the object, with a byte prefix
//! recording the order the values were set; the dict, once made, the third word before, taking
//! the array over. The interface every version's `instance` gives `cpython::tables` and
//! `cpython::hints`, and what the decoder's `field_slots` writes through.

use pyo3::ffi;

use crate::cpython::dict_layout::has_managed_dict;
pub use crate::cpython::values_prefix::{array_of, inserted_count, inserted_index, order_address};

/// Whether a dict's version tag shows whether it changed (`cpython::tables` reads made dicts
/// and plain dicts in place only then). PEP 509, in force in 3.11: every change of a dict,
/// and every new dict, takes a new version tag from a counter that never repeats, so a dict
/// whose tag is unchanged is unchanged.
pub const VERSIONED_DICTS: bool = true;

/// `_PyObject_ValuesPointer`: the values array of an instance with a managed dict is the fourth
/// pointer before the object; null once the instance's dict was made (`made_dict_pointer`,
/// at -3, then holds the dict, which took the array over).
///
/// # Safety
/// `obj` must be a live object whose type has `Py_TPFLAGS_MANAGED_DICT`.
pub unsafe fn values_pointer(obj: *mut ffi::PyObject) -> *mut *mut *mut ffi::PyObject {
    // SAFETY: such objects are allocated with two pointers before the GC header, which is two
    // pointers long too (`_PyType_PreHeaderSize`).
    unsafe { obj.cast::<*mut *mut ffi::PyObject>().sub(4) }
}

/// The values array `obj` holds itself (its dict was never made), if it has one.
///
/// # Safety
/// `obj` must be a live object, and the GIL held.
#[inline(always)]
pub unsafe fn own_values(obj: *mut ffi::PyObject) -> Option<*mut *mut ffi::PyObject> {
    // SAFETY: the values pointer is read only once the type has a managed dict.
    unsafe {
        if !has_managed_dict(ffi::Py_TYPE(obj)) {
            return None;
        }
        let values = *values_pointer(obj);
        (!values.is_null()).then_some(values)
    }
}

/// Whether `values`, found by `own_values`, is still the array of `obj`. It is freed only after
/// the instance has handed it to a dict made for it (which nulls the pointer first), so a
/// pointer still equal cannot be a new array at the same address.
///
/// # Safety
/// `obj` must be the live object `own_values` found `values` in. An instance with its own
/// array cannot change type (assigning `__class__` makes its dict first, which this test sees).
#[inline(always)]
pub unsafe fn holds_own_values(obj: *mut ffi::PyObject, values: *mut *mut ffi::PyObject) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { *values_pointer(obj) == values }
}

/// `_PyObject_ManagedDictPointer`: where an instance with a managed dict keeps its dict once
/// made (null before).
///
/// # Safety
/// `obj` must be a live object whose type has `Py_TPFLAGS_MANAGED_DICT`.
#[inline(always)]
pub unsafe fn made_dict_pointer(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: as for `values_pointer`, one pointer further.
    unsafe { *obj.cast::<*mut ffi::PyObject>().sub(3) }
}

/// `_PyDictValues_AddToInsertionOrder`: records `index` as the last value set.
///
/// # Safety
/// `values` must be a live values array whose slot `index` was empty until now.
pub unsafe fn add_to_insertion_order(values: *mut *mut ffi::PyObject, index: u8) {
    // SAFETY: the prefix was sized for every slot of the array (`init_inline_values`), and each
    // slot is added once, when it stops being empty.
    unsafe {
        let count = values.cast::<u8>().sub(2);
        let new_count = *count + 1;
        *count.sub(new_count as usize) = index;
        *count = new_count;
    }
}
