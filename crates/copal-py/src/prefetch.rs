//! Cache hints for the walks over the items of a list or tuple: the JSON writer's
//! (json_writer.rs) and the binary encoder's lists of objects (encode/containers.rs `object_list`).
//!
//! Writing 100,000 objects, the JSON writer spent much of its time waiting for memory: the first
//! read of each item, of its dict (made once something asked for its `__dict__`, as orjson and
//! msgspec do), of its values array (CPython 3.11 keeps an instance's fields in an array apart
//! from the object, which a made dict takes over) and of each field's value. Each of these reads
//! needs the one before, so the processor cannot start them early by itself. `ahead` asks for
//! them a few items ahead, one level per item, each level from lines asked for one item
//! before: the object four items ahead, its dict or values array three ahead, a dict's values
//! array two ahead, the field values of the next item.

use pyo3::ffi;

/// Asks for the cache line holding `address`. A hint only: it reads nothing the program sees
/// and cannot fault, whatever the address. A no-op where no stable intrinsic exists.
#[inline(always)]
fn line<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, part of every x86_64 processor, and never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// The lines of an object's start, and of the two pointers before its GC header, where an
/// instance with a managed dict keeps its values array (compact_layout.rs).
#[inline(always)]
fn object(obj: *mut ffi::PyObject) {
    line(obj);
    line(obj.cast::<u8>().wrapping_sub(32));
}

/// Before the item at `index` of a sequence of `len` items is written: asks for what the
/// next four will need first (see the module's doc).
///
/// # Safety
/// `item(k)`, for `index < k < len`, must return a live object the sequence holds.
#[inline(always)]
pub unsafe fn ahead(item: impl Fn(usize) -> *mut ffi::PyObject, len: usize, index: usize) {
    if index + 4 < len {
        object(item(index + 4));
    }
    // SAFETY: the caller's guarantee.
    unsafe {
        if index + 3 < len {
            instance::dict_or_values(item(index + 3));
        }
        if index + 2 < len {
            instance::dict_values(item(index + 2));
        }
        if index + 1 < len {
            instance::field_values(item(index + 1));
        }
    }
}

#[cfg(all(Py_3_11, not(Py_3_12), not(PyPy), not(Py_LIMITED_API)))]
mod instance {
    use pyo3::ffi;

    use crate::compact_layout::{self as layout, DictKeys};

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
        // managed dict, as `dict_items` does; a dict pointer that is not null is its dict.
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

    /// # Safety
    /// `obj` must be a live object.
    #[inline(always)]
    pub unsafe fn dict_or_values(obj: *mut ffi::PyObject) {
        // SAFETY: the caller's guarantee.
        match unsafe { fields(obj) } {
            Some(Fields::Values(values)) => super::line(values),
            Some(Fields::Dict(dict)) => super::line(dict),
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
                super::line((*dict).ma_values);
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
        // values array has room for each of its table's entries (`dict_items` reads them the
        // same way); a field not set is a null pointer, a harmless hint.
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
                super::line(value);
                super::line(value.cast::<u8>().wrapping_add(64));
            }
        }
    }
}

#[cfg(not(all(Py_3_11, not(Py_3_12), not(PyPy), not(Py_LIMITED_API))))]
mod instance {
    use pyo3::ffi;

    /// Nothing: this CPython's layouts are not known (see compact_layout.rs).
    pub unsafe fn dict_or_values(_obj: *mut ffi::PyObject) {}

    /// Nothing, as `dict_or_values`.
    pub unsafe fn dict_values(_obj: *mut ffi::PyObject) {}

    /// Nothing, as `dict_or_values`.
    pub unsafe fn field_values(_obj: *mut ffi::PyObject) {}
}
