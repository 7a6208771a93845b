//! CPython 3.11's private structures of dicts and of instances with a managed dict, as
//! Include/internal/pycore_dict.h and pycore_object.h of 3.11 define them: the struct mirrors,
//! constants and offsets that the rest of this module reads and writes through. The layouts
//! change in 3.12 and 3.13, so nothing outside `cpython::v3_11` uses them.

use pyo3::ffi;

/// `struct _dictkeysobject` up to its index table.
#[repr(C)]
pub struct DictKeys {
    pub refcnt: ffi::Py_ssize_t,
    pub log2_size: u8,
    pub log2_index_bytes: u8,
    pub kind: u8,
    pub version: u32,
    pub usable: ffi::Py_ssize_t,
    pub nentries: ffi::Py_ssize_t,
    // `dk_indices` follows: `1 << log2_index_bytes` bytes, then the entries.
}

/// `DICT_KEYS_UNICODE`: a combined table whose keys are all exact strs (`insertdict` turns it
/// into `DICT_KEYS_GENERAL` before it takes any other key), its values in its entries.
pub const KEYS_UNICODE: u8 = 1;

/// `DICT_KEYS_SPLIT`: a key table shared by the instances of a class.
pub const KEYS_SPLIT: u8 = 2;

/// `PyDictUnicodeEntry`, the entries of `KEYS_UNICODE` and `KEYS_SPLIT` tables. In a split
/// table the value is not here but in each values array.
#[repr(C)]
pub struct UnicodeEntry {
    pub key: *mut ffi::PyObject,
    pub value: *mut ffi::PyObject,
}

/// `SHARED_KEYS_MAX_SIZE`: a shared table holds at most 30 keys, so an index fits the one-byte
/// insertion order.
pub const SHARED_KEYS_MAX_SIZE: usize = 30;

/// `DK_UNICODE_ENTRIES`: the entries of a `KEYS_UNICODE` or `KEYS_SPLIT` table, after its
/// index table.
///
/// # Safety
/// `keys` must be a live key table.
pub unsafe fn unicode_entries(keys: *const DictKeys) -> *const UnicodeEntry {
    // SAFETY: the index table starts right after the header and is `1 << log2_index_bytes`
    // bytes long; the entries follow it, within the same allocation.
    unsafe { keys.add(1).cast::<u8>().add(1 << (*keys).log2_index_bytes).cast() }
}

/// Whether the instances of `ty` have a managed dict, with its values and dict pointers before
/// them (`values_pointer`, `dict_pointer`): a heap type with `Py_TPFLAGS_MANAGED_DICT`.
///
/// # Safety
/// `ty` must be a live type.
#[inline(always)]
pub unsafe fn has_managed_dict(ty: *mut ffi::PyTypeObject) -> bool {
    // SAFETY: the caller's guarantee.
    let flags = unsafe { (*ty).tp_flags };
    flags & ffi::Py_TPFLAGS_MANAGED_DICT != 0 && flags & ffi::Py_TPFLAGS_HEAPTYPE != 0
}

/// The key table that the instances of `ty` share (indexing their values arrays), if `ty` has
/// a managed dict and still such a table; live while the type holds it.
///
/// # Safety
/// `ty` must be a live type.
#[inline(always)]
pub unsafe fn shared_keys(ty: *mut ffi::PyTypeObject) -> Option<*const DictKeys> {
    // SAFETY: the caller's guarantee; a heap type's cached keys are null or a live table.
    unsafe {
        if !has_managed_dict(ty) {
            return None;
        }
        let keys = (*ty.cast::<ffi::PyHeapTypeObject>()).ht_cached_keys.cast::<DictKeys>();
        (!keys.is_null() && (*keys).kind == KEYS_SPLIT).then_some(keys.cast_const())
    }
}

/// `_PyObject_ValuesPointer`: the values array of an instance with a managed dict is the fourth
/// pointer before the object; null once the instance's dict was made (`_PyObject_ManagedDictPointer`,
/// at -3, then holds the dict, which took the array over).
///
/// # Safety
/// `obj` must be a live object whose type has `Py_TPFLAGS_MANAGED_DICT`.
pub unsafe fn values_pointer(obj: *mut ffi::PyObject) -> *mut *mut *mut ffi::PyObject {
    // SAFETY: such objects are allocated with two pointers before the GC header, which is two
    // pointers long too (`_PyType_PreHeaderSize`).
    unsafe { obj.cast::<*mut *mut ffi::PyObject>().sub(4) }
}

/// `_PyObject_ManagedDictPointer`: where an instance with a managed dict keeps its dict once
/// made (null before).
///
/// # Safety
/// `obj` must be a live object whose type has `Py_TPFLAGS_MANAGED_DICT`.
pub unsafe fn dict_pointer(obj: *mut ffi::PyObject) -> *mut *mut ffi::PyObject {
    // SAFETY: as for `values_pointer`, one pointer further.
    unsafe { obj.cast::<*mut ffi::PyObject>().sub(3) }
}

/// The number of values set in a values array: its insertion order's length, the byte at -2
/// (pycore_dict.h: "[-1] = prefix size. [-2] = used size. size[-2-n...] = insertion order").
///
/// # Safety
/// `values` must be a live values array.
pub unsafe fn inserted_count(values: *const *mut ffi::PyObject) -> usize {
    // SAFETY: every values array is allocated with its prefix (`new_values`).
    unsafe { usize::from(*values.cast::<u8>().sub(2)) }
}

/// The index in `values` of the `position`th value set (`get_index_from_order`: the byte at
/// `-3 - position`). Deleting a value removes its index and closes the gap
/// (`delete_index_from_values`), so the order always lists exactly the values set.
///
/// # Safety
/// `values` must be a live values array and `position` below its `inserted_count`.
pub unsafe fn inserted_index(values: *const *mut ffi::PyObject, position: usize) -> usize {
    // SAFETY: the prefix holds `inserted_count` indices before the count byte.
    unsafe { usize::from(*values.cast::<u8>().sub(3 + position)) }
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
