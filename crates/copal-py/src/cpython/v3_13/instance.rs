//! Where CPython 3.13 keeps the values of an instance with a managed dict, as its
//! Include/internal/pycore_dict.h and pycore_object.h define them. The instances of a class
//! with `Py_TPFLAGS_INLINE_VALUES` (a plain class: no `__slots__`, no base with fields) hold
//! their values in the object itself, right after its header (`_PyObject_InlineValues`): a
//! `PyDictValues` of four bytes (capacity, size, embedded, valid), padding to a word, the
//! array of `capacity` values indexed like the class's shared key table, then the order they
//! were set (`get_insertion_order_array`), one byte per value. A dict made for the instance
//! (the third word before the object) shares those inline values while it can; once it cannot
//! (a key the shared table has no room for, `__dict__` replaced) it takes the values into a
//! table of its own and clears `valid`. The interface of every version's `instance` (see
//! cpython/v3_11/instance.rs).

use pyo3::ffi;

use crate::cpython::dict_layout::has_managed_dict;

/// Whether a dict's version tag shows whether it changed (`cpython::tables` reads made dicts
/// and plain dicts in place only then). Not relied on from 3.12, where PEP 509 is withdrawn
/// (the tag is deprecated and shares its bits with dict watchers): made dicts and plain dicts
/// are read through `PyDict_Next`.
pub const VERSIONED_DICTS: bool = false;

/// `Py_TPFLAGS_INLINE_VALUES` (Include/object.h, 3.13).
const INLINE_VALUES: std::ffi::c_ulong = 1 << 2;

/// The bytes from the start of a `PyDictValues` to its array.
const HEADER: usize = size_of::<*mut ffi::PyObject>();

/// The four bytes of a `PyDictValues` before its array, found from the array.
#[repr(C)]
struct Header {
    capacity: u8,
    size: u8,
    _embedded: u8,
    valid: u8,
}

/// # Safety
/// `values` must be the array of a live `PyDictValues`.
#[inline(always)]
unsafe fn header<'a>(values: *const *mut ffi::PyObject) -> &'a Header {
    // SAFETY: the header starts a word before the array, in the same allocation.
    unsafe { &*values.cast::<u8>().sub(HEADER).cast::<Header>() }
}

/// The values array `obj` holds inline, if its class keeps them there and they are still its
/// values (`valid`: no dict made for it took them over).
///
/// # Safety
/// `obj` must be a live object, and the GIL held.
#[inline(always)]
pub unsafe fn own_values(obj: *mut ffi::PyObject) -> Option<*mut *mut ffi::PyObject> {
    // SAFETY: the inline values are read only once the type says its instances have them,
    // right after the object's header (which is then its whole basic size).
    unsafe {
        let ty = ffi::Py_TYPE(obj);
        if (*ty).tp_flags & INLINE_VALUES == 0 || !has_managed_dict(ty) || (*ty).tp_basicsize != size_of::<ffi::PyObject>() as ffi::Py_ssize_t {
            return None;
        }
        let values = obj.cast::<u8>().add(size_of::<ffi::PyObject>() + HEADER).cast::<*mut ffi::PyObject>();
        (header(values).valid != 0).then_some(values)
    }
}

/// Whether `values`, found by `own_values`, are still the values of `obj`: `valid` is cleared,
/// never set again, when a dict takes them over. The array is part of the object, so it lives
/// as long as `obj`.
///
/// # Safety
/// `obj` must be the live object `own_values` found `values` in. Its class cannot have changed
/// meanwhile without clearing `valid` (assigning `__class__` to a class with another layout
/// makes its dict first).
#[inline(always)]
pub unsafe fn holds_own_values(_obj: *mut ffi::PyObject, values: *mut *mut ffi::PyObject) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { header(values).valid != 0 }
}

/// `_PyObject_GetManagedDict`: the dict made for an instance with a managed dict (the third word
/// before the object); null before.
///
/// # Safety
/// `obj` must be a live object whose type has `Py_TPFLAGS_MANAGED_DICT`.
#[inline(always)]
pub unsafe fn made_dict_pointer(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: such objects are allocated with two pointers before the GC header, which is two
    // pointers long too (`MANAGED_DICT_OFFSET`).
    unsafe { *obj.cast::<*mut ffi::PyObject>().sub(3) }
}

/// The values array of a dict's `ma_values` (a `PyDictValues`: the array follows its header).
#[inline(always)]
pub fn array_of(ma_values: *mut ffi::PyDictValues) -> *mut *mut ffi::PyObject {
    ma_values.cast::<u8>().wrapping_add(HEADER).cast()
}

/// The number of values set in a values array.
///
/// # Safety
/// `values` must be a live values array.
#[inline(always)]
pub unsafe fn inserted_count(values: *const *mut ffi::PyObject) -> usize {
    // SAFETY: the caller's guarantee.
    unsafe { usize::from(header(values).size) }
}

/// The index in `values` of the `position`th value set: the `position`th byte of the order
/// after the array's `capacity` values. Deleting a value removes its index and closes the gap
/// (`delete_index_from_values`), so the order always lists exactly the values set.
///
/// # Safety
/// `values` must be a live values array and `position` below its `inserted_count`.
#[inline(always)]
pub unsafe fn inserted_index(values: *const *mut ffi::PyObject, position: usize) -> usize {
    // SAFETY: the order holds `size` indices after the array, within the allocation.
    unsafe { usize::from(*order_address(values).add(position)) }
}

/// Where the insertion order of `values` starts: after its `capacity` values.
///
/// # Safety
/// `values` must be a live values array.
#[inline(always)]
pub unsafe fn order_address(values: *const *mut ffi::PyObject) -> *const u8 {
    // SAFETY: the caller's guarantee; the order follows the array in the same allocation.
    unsafe { values.add(usize::from(header(values).capacity)).cast() }
}
