//! The private structures of dicts and key tables that CPython 3.11, 3.12 and 3.13 (with the
//! GIL) lay out alike, as their Include/internal/pycore_dict.h define them: the key table's
//! header, its entries of str keys, and the key table a class shares with its instances. Where
//! an instance keeps its values differs per version (`instance` of `v3_11`, `v3_12`, `v3_13`).

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
#[cfg_attr(not(cpython_3_11_layouts), allow(dead_code))]
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

/// Whether the instances of `ty` have a managed dict (`instance::made_dict_pointer`), and
/// values arrays where `instance` finds them: a heap type with `Py_TPFLAGS_MANAGED_DICT`.
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
