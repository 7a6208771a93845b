//! Decoded fields stored straight into CPython 3.11's compact instance layout, where
//! `PyObject_GenericSetAttr` spends a seventh of decoding seed 003 looking up the type (for a
//! data descriptor) and the class's shared key table for every attribute of every object.
//!
//! A class whose instances have a managed dict (every class with a `__dict__` and no
//! `__slots__`) keeps one shared key table (`ht_cached_keys`); a fresh instance made by
//! `object.__new__` holds a values array indexed like that table, with a byte prefix recording
//! the order attributes were first set (what `vars()` iterates). Both lookups give the same
//! answer for every object of a descriptor, so `FieldSlots::of` does them once per decoding, and
//! `FieldSlots::store` writes the value where `_PyObject_StoreInstanceAttribute` would.
//! Whenever a condition below does not hold, the field goes through `PyObject_GenericSetAttr`,
//! as every field does on other interpreters (`cpython::portable`).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

use super::instance;
use crate::cpython::dict_layout;

/// Where the fields of one descriptor go in the instances of one class, valid while the class's
/// key table and version tag are those recorded (a change to the class, such as a property
/// added by Python code run mid-decoding, resets the tag).
pub struct FieldSlots {
    /// Whether each field goes in the values array, at which index; None for fields that
    /// `PyObject_GenericSetAttr` must store (a name absent from the key table, or shadowed by
    /// a data descriptor whose setter must run).
    slots: Vec<Option<u8>>,
    class: usize,
    keys: usize,
    version_tag: u32,
}

extern "C" {
    // Exported by CPython 3.11 though not part of the limited API (class_cache.rs uses it too).
    fn _PyType_Lookup(class: *mut ffi::PyTypeObject, name: *mut ffi::PyObject) -> *mut ffi::PyObject;
}

impl FieldSlots {
    /// The slots of `fields` in the instances of `class`, or None if its instances do not keep
    /// their attributes in a shared key table.
    pub fn of(class: &Bound<'_, PyType>, fields: &[Py<PyString>]) -> Option<Self> {
        let py = class.py();
        let ty = class.as_type_ptr();
        // SAFETY: reading the flags, version tag and (for heap types) cached keys of a live type
        // with the GIL held; the key table is live while the type holds it.
        unsafe {
            let keys = dict_layout::shared_keys(ty)?;
            let entry_count = usize::try_from((*keys).nentries).ok()?.min(dict_layout::SHARED_KEYS_MAX_SIZE);
            let entries = dict_layout::unicode_entries(keys);
            let slots = fields
                .iter()
                .map(|field| {
                    let name = field.bind(py);
                    // A data descriptor (a property with a setter) takes the store: its setter
                    // runs, through PyObject_GenericSetAttr, as before. The lookup also gives
                    // the type a valid version tag (through its method cache).
                    let found = _PyType_Lookup(ty, name.as_ptr());
                    if !found.is_null() && (*ffi::Py_TYPE(found)).tp_descr_set.is_some() {
                        return None;
                    }
                    (0..entry_count)
                        .find(|&index| {
                            let key = (*entries.add(index)).key;
                            !key.is_null()
                                && (key == name.as_ptr() || ffi::PyUnicode_Compare(key, name.as_ptr()) == 0)
                        })
                        .map(|index| index as u8)
                })
                .collect();
            if (*ty).tp_flags & ffi::Py_TPFLAGS_VALID_VERSION_TAG == 0 || (*ty).tp_version_tag == 0 {
                return None;
            }
            Some(FieldSlots { slots, class: ty as usize, keys: keys as usize, version_tag: (*ty).tp_version_tag })
        }
    }

    /// Whether these are the slots of instances of `class` as it is now: kept across
    /// decodings (standalone.rs), they are reused only for the class they were found for.
    pub fn is_for(&self, class: &Bound<'_, PyType>) -> bool {
        let ty = class.as_type_ptr();
        // SAFETY: reading the flags and version tag of a live type with the GIL held.
        unsafe {
            ty as usize == self.class
                && (*ty).tp_flags & ffi::Py_TPFLAGS_VALID_VERSION_TAG != 0
                && (*ty).tp_version_tag == self.version_tag
        }
    }

    /// Stores `value` as field `index` of `obj`, as `PyObject_GenericSetAttr` would have, and
    /// returns true; or returns false, having done nothing, when that call must do it: the field
    /// has no slot, `obj` is not of the class, the class changed, or `obj`'s attributes have
    /// moved to a dict (Python code run mid-decoding may have asked for its `__dict__`).
    pub fn store(&self, obj: &Bound<'_, PyAny>, index: usize, value: &Bound<'_, PyAny>) -> bool {
        let Some(&Some(slot)) = self.slots.get(index) else {
            return false;
        };
        let obj = obj.as_ptr();
        // SAFETY: `obj` is live and the GIL is held. Its type is the class (checked first),
        // whose instances have a managed dict (checked by `of`); the key table is the one whose
        // indices `of` read, so `slot` is below its entry count and within every values array
        // made for it. The value's new reference moves into the array.
        unsafe {
            let ty = ffi::Py_TYPE(obj);
            if ty as usize != self.class
                || (*ty.cast::<ffi::PyHeapTypeObject>()).ht_cached_keys as usize != self.keys
                || (*ty).tp_flags & ffi::Py_TPFLAGS_VALID_VERSION_TAG == 0
                || (*ty).tp_version_tag != self.version_tag
            {
                return false;
            }
            let values = *instance::values_pointer(obj);
            if values.is_null() {
                return false;
            }
            let target = values.add(slot as usize);
            let old = *target;
            *target = value.clone().into_ptr();
            if old.is_null() {
                instance::add_to_insertion_order(values, slot);
            } else {
                ffi::Py_DECREF(old);
            }
        }
        true
    }
}
