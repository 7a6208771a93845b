//! A text output (`copal_core::text::TextOut`) that is the bytes object handed back to Python:
//! the JSON writer (json_writer.rs) writes its document straight into it, where writing into a
//! `String` first meant copying the whole document once more at the end (4 to 8% of writing
//! seed 001, and its stores missed the cache: the document is larger than it).
//!
//! Built on the `PyBytesWriter` API of CPython 3.15, which pyo3's `ffi::compat` provides for the
//! older versions.

use std::ptr::NonNull;

use copal_core::text::TextOut;
use pyo3::ffi::{self, compat};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The smallest capacity a growth asks for: below it every few bytes would cost a call.
const MIN_GROWTH: usize = 256;

/// A bytes object being written. Invariant: `data` points to `capacity` writable bytes of the
/// object `writer` holds (moved only by `grow`, which takes the pointer again), the first `len`
/// of which are the text.
pub struct BytesOutput<'py> {
    writer: NonNull<compat::PyBytesWriter>,
    data: *mut u8,
    len: usize,
    capacity: usize,
    py: Python<'py>,
}

impl<'py> BytesOutput<'py> {
    /// An empty output with room for `capacity` bytes.
    pub fn with_capacity(py: Python<'py>, capacity: usize) -> PyResult<Self> {
        let size = ffi::Py_ssize_t::try_from(capacity).unwrap_or(ffi::PY_SSIZE_T_MAX);
        // SAFETY: the GIL is held (witnessed by `py`).
        let writer = NonNull::new(unsafe { compat::PyBytesWriter_Create(size) }).ok_or_else(|| PyErr::fetch(py))?;
        // SAFETY: a live writer, whose buffer holds the `size` bytes it was made with.
        let data = unsafe { compat::PyBytesWriter_GetData(writer.as_ptr()) }.cast::<u8>();
        Ok(BytesOutput { writer, data, len: 0, capacity: size as usize, py })
    }

    /// Forgets the text written after its first `len` bytes, keeping the room.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// The bytes object of the text.
    pub fn finish(self) -> PyResult<Bound<'py, PyBytes>> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the writer is live and `len` bytes of it are written (the invariant); the call
        // consumes it, so `this` is not dropped (which would discard it again). It returns a new
        // reference to a bytes object, or null with an exception set.
        unsafe {
            let bytes = compat::PyBytesWriter_FinishWithSize(this.writer.as_ptr(), this.len as ffi::Py_ssize_t);
            Ok(Bound::from_owned_ptr_or_err(this.py, bytes)?.cast_into_unchecked())
        }
    }

    /// Makes room for `additional` more bytes, doubling the room at least, so that writing a
    /// long document grows its buffer a logarithmic number of times.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, additional: usize) {
        let largest = ffi::PY_SSIZE_T_MAX as usize;
        let wanted = self.len.saturating_add(additional).max(self.capacity.saturating_mul(2)).max(MIN_GROWTH).min(largest);
        // SAFETY: a live writer; resizing keeps the bytes written, and may move them, so the
        // data pointer is taken again.
        let resized = wanted - self.len >= additional
            && unsafe { compat::PyBytesWriter_Resize(self.writer.as_ptr(), wanted as ffi::Py_ssize_t) } == 0;
        if !resized {
            // Out of memory: the writer aborts as a String's growth does (the writer this replaced
            // wrote into one).
            std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(wanted, 1).unwrap_or(std::alloc::Layout::new::<u8>()));
        }
        // SAFETY: as above.
        self.data = unsafe { compat::PyBytesWriter_GetData(self.writer.as_ptr()) }.cast::<u8>();
        self.capacity = wanted;
    }
}

impl Drop for BytesOutput<'_> {
    fn drop(&mut self) {
        // SAFETY: a live writer (`finish` does not drop it), discarded once; the GIL is held
        // for `'py`.
        unsafe { compat::PyBytesWriter_Discard(self.writer.as_ptr()) };
    }
}

// SAFETY: `reserve` leaves `capacity - len >= additional`, and `data + len` then points to that
// many writable bytes of the buffer (the struct's invariant), which stay in place until `grow`.
unsafe impl TextOut for BytesOutput<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn reserve(&mut self, additional: usize) {
        if self.capacity - self.len < additional {
            self.grow(additional);
        }
    }

    #[inline]
    fn end(&mut self) -> *mut u8 {
        // SAFETY: `len <= capacity`, so the pointer is within the buffer or one past its end.
        unsafe { self.data.add(self.len) }
    }

    #[inline]
    unsafe fn advance(&mut self, n: usize) {
        self.len += n;
    }
}
