//! Cache hints for the walks over the items of a list or tuple: the JSON writer's
//! (json_writer.rs) and the binary encoder's lists of objects (encode/containers.rs `object_list`).
//!
//! Writing 100,000 objects, the JSON writer spent much of its time waiting for memory: the first
//! read of each item, of its dict (made once something asked for its `__dict__`, as orjson and
//! msgspec do), of its values array (CPython 3.11 and 3.12 keep an instance's fields in an array
//! apart from the object, which a made dict takes over; 3.13 keeps them in the object, their
//! insertion order a few lines further) and of each field's value. Each of these reads
//! needs the one before, so the processor cannot start them early by itself. `ahead` asks for
//! them a few items ahead, one level per item, each level from lines asked for one item
//! before: the object four items ahead, its dict or values array three ahead, a dict's values
//! array two ahead, the field values of the next item. The levels past the object are found
//! through CPython's private layouts (crate::cpython `hints`), and asked for only where those
//! are known.

use pyo3::ffi;

use crate::cpython::hints;

/// Asks for the cache line holding `address`. A hint only: it reads nothing the program sees
/// and cannot fault, whatever the address. A no-op where no stable intrinsic exists.
#[inline(always)]
pub(crate) fn line<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, part of every x86_64 processor, and never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// The lines of an object's start, and of the two pointers before its GC header, where an
/// instance with a managed dict keeps its values array (on CPython 3.11:
/// cpython/v3_11/instance.rs `values_pointer`).
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
            hints::dict_or_values(item(index + 3));
        }
        if index + 2 < len {
            hints::dict_values(item(index + 2));
        }
        if index + 1 < len {
            hints::field_values(item(index + 1));
        }
    }
}
