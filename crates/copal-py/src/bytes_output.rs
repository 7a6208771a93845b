//! A text output (`copal_core::text::TextOut`) that is the bytes object handed back to Python:
//! the JSON writer (json_writer.rs) writes its document straight into it, where writing into a
//! `String` first meant copying the whole document once more at the end (4 to 8% of writing
//! seed 001, and its stores missed the cache: the document is larger than it).
//!
//! A bytes object made with room and grown or shrunk in place by `_PyBytes_Resize`, as CPython's
//! own writers did before 3.15's `PyBytesWriter`. (pyo3's `ffi::compat` version of that API
//! panics when a resize fails for lack of memory: it tests `_PyBytes_Resize`'s result for > 0.)

use copal_core::text::TextOut;
use pyo3::exceptions::PyMemoryError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

extern "C" {
    /// CPython's (Objects/bytesobject.c): resizes a bytes object that nothing else refers to,
    /// keeping its content; on failure it frees the object, sets `*bytes` to null and raises.
    fn _PyBytes_Resize(bytes: *mut *mut ffi::PyObject, size: ffi::Py_ssize_t) -> std::ffi::c_int;
}

/// The smallest capacity a growth asks for: below it every few bytes would cost a call.
const MIN_GROWTH: usize = 256;

/// The span `repeat` stops doubling at: its source then stays in the first level of cache.
const REPEAT_BLOCK: usize = 4096;

/// The smallest buffer whose pages are mapped ahead of the writing (`make_room`): below it the
/// system calls cost more than the page faults they spare.
const PREFAULTED_BUFFER: usize = 8 << 20;

/// How far ahead of the text the pages of a large buffer are mapped: a few hundred pages per
/// call, and never much more than the document needs (the buffer is sized for the last
/// document, which may have been far longer).
const PREPARED_STEP: usize = 1 << 20;

/// A bytes object being written. Invariant: `data` points to `capacity` writable bytes, the
/// content of `bytes` (a new object nothing else refers to, moved only by `grow`, which takes the
/// pointer again), or of `lost.scratch` once `bytes` could not grow; the first `len` of them are
/// the text, and `len <= prepared <= capacity`.
pub struct BytesOutput<'py> {
    /// Owned; null once a resize failed (CPython freed it).
    bytes: *mut ffi::PyObject,
    data: *mut u8,
    len: usize,
    /// The end of the room handed to the writers: the whole buffer, or, in a large one, the part
    /// whose pages were mapped so far (`make_room` maps the next part).
    prepared: usize,
    capacity: usize,
    lost: Option<Lost>,
    py: Python<'py>,
}

/// The state of an output whose bytes object could not grow (out of memory). The writers
/// cannot stop halfway, so the rest of the document goes over the start of a scratch buffer,
/// again and again, and is lost: `finish` raises the error instead.
struct Lost {
    error: PyErr,
    scratch: Vec<u8>,
}

impl<'py> BytesOutput<'py> {
    /// An empty output with room for `capacity` bytes (`MIN_GROWTH` at least).
    pub fn with_capacity(py: Python<'py>, capacity: usize) -> PyResult<Self> {
        let size = capacity.clamp(MIN_GROWTH, ffi::PY_SSIZE_T_MAX as usize);
        // SAFETY: the GIL is held (witnessed by `py`); a null data pointer asks for an
        // uninitialized object of `size` bytes, a new reference or null with an exception set.
        let bytes = unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), size as ffi::Py_ssize_t) };
        if bytes.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: a live bytes object.
        let data = unsafe { ffi::PyBytes_AsString(bytes) }.cast::<u8>();
        let mut output = BytesOutput { bytes, data, len: 0, prepared: 0, capacity: size, lost: None, py };
        output.prepare(0);
        Ok(output)
    }

    /// Forgets the text written after its first `len` bytes, keeping the room.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends `times` copies of the text written since byte `from` (at most `len`): the JSON
    /// writer's runs of one value in a list (`[0]*n`), whose text it writes once. The copies
    /// are made from the start of the run, doubling the span copied up to `REPEAT_BLOCK` bytes,
    /// then that block at a time, so that the source stays in the first level of cache.
    pub fn repeat(&mut self, from: usize, times: usize) {
        // A lost document is not kept: nothing to copy, and `from` may lie past a rewind.
        if self.lost.is_some() {
            return;
        }
        let piece = self.len - from;
        // Too large a run fails to grow the output, a MemoryError.
        let total = piece.saturating_mul(times);
        self.reserve(total);
        if self.lost.is_some() {
            return;
        }
        // SAFETY: `total` bytes were reserved past `len` (the buffer moves only in `reserve`,
        // so the pointer is taken after it), and `from..len` is written text. Each copy reads
        // `n <= filled` bytes from the start of the run and stores them just past the `filled`
        // bytes of copies made so far, so the two spans never overlap, and it ends within the
        // reservation (`filled + n <= piece + total`). Copies of UTF-8 text ending where text
        // ended keep the text UTF-8.
        unsafe {
            let run = self.data.add(from);
            let (mut filled, end) = (piece, piece + total);
            let mut block = piece;
            while filled < end {
                let n = block.min(end - filled);
                std::ptr::copy_nonoverlapping(run, run.add(filled), n);
                filled += n;
                if block < REPEAT_BLOCK {
                    block = filled;
                }
            }
            self.advance(total);
        }
    }

    /// The bytes object of the text; MemoryError if it could not grow to hold it.
    pub fn finish(mut self) -> PyResult<Bound<'py, PyBytes>> {
        if let Some(lost) = self.lost.take() {
            return Err(lost.error);
        }
        let mut bytes = std::mem::replace(&mut self.bytes, std::ptr::null_mut());
        // SAFETY: `bytes` is the live object of the invariant, owned here alone (taken out of
        // `self`, whose drop then has nothing to release). Shrinking it to the text keeps the
        // text; on failure CPython frees it and raises.
        unsafe {
            if self.len != self.capacity && _PyBytes_Resize(&mut bytes, self.len as ffi::Py_ssize_t) < 0 {
                return Err(PyErr::fetch(self.py));
            }
            Ok(Bound::from_owned_ptr(self.py, bytes).cast_into_unchecked())
        }
    }

    /// Makes room for `additional` more bytes: in the buffer if it has it, else by growing it.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, additional: usize) {
        if self.lost.is_some() {
            return self.rewind_scratch(additional);
        }
        if self.capacity - self.len < additional {
            self.grow(additional);
            if self.lost.is_some() {
                return;
            }
        }
        self.prepare(additional);
    }

    /// Hands the writers room for `additional` bytes at least, which the buffer has: all of a
    /// small buffer; of a large one, the next `PREPARED_STEP` bytes too, whose pages that are not
    /// in memory yet are mapped in one call (`populate_absent_pages`). Writing a document of
    /// several megabytes into memory fresh from the system otherwise took a page fault on the
    /// first write to each 4 KiB page: 4,200 for seed 001's 17 MB, some 8 of the 24 ms its
    /// writing took on this project's virtual machines, of which mapping ahead spares about 3.
    fn prepare(&mut self, additional: usize) {
        if self.capacity < PREFAULTED_BUFFER {
            self.prepared = self.capacity;
            return;
        }
        let wanted = self.len.saturating_add(additional.max(PREPARED_STEP));
        let prepared = wanted.min(self.capacity).max(self.prepared);
        // SAFETY: both offsets are within the buffer (`self.prepared <= prepared <= capacity`).
        unsafe { populate_absent_pages(self.data.add(self.prepared) as usize, self.data.add(prepared) as usize) };
        self.prepared = prepared;
    }

    /// Makes room for `additional` more bytes, doubling the room at least, so that writing a
    /// long document grows its buffer a logarithmic number of times.
    fn grow(&mut self, additional: usize) {
        let largest = ffi::PY_SSIZE_T_MAX as usize;
        let wanted = self.len.saturating_add(additional).max(self.capacity.saturating_mul(2)).min(largest);
        // SAFETY: `bytes` is live and owned alone (the invariant); resizing keeps the bytes
        // written and may move them, so the data pointer is taken again. A failed resize frees
        // the object and nulls `self.bytes`.
        let resized = wanted - self.len >= additional && unsafe { _PyBytes_Resize(&mut self.bytes, wanted as ffi::Py_ssize_t) } == 0;
        if !resized {
            let error = PyErr::take(self.py).unwrap_or_else(|| PyMemoryError::new_err("the JSON document is too large"));
            self.lost = Some(Lost { error, scratch: Vec::new() });
            return self.rewind_scratch(additional);
        }
        // SAFETY: a live bytes object.
        self.data = unsafe { ffi::PyBytes_AsString(self.bytes) }.cast::<u8>();
        self.capacity = wanted;
        // The buffer may have moved: what was prepared in the old one says nothing of the new.
        self.prepared = self.len;
    }

    /// Goes on writing over the start of the scratch buffer of a lost document (see `Lost`),
    /// with room for `additional` bytes.
    #[cold]
    #[inline(never)]
    fn rewind_scratch(&mut self, additional: usize) {
        let Some(lost) = self.lost.as_mut() else { return };
        if lost.scratch.capacity() < additional {
            // As large as the largest single write (a long string): a Rust buffer, which needs
            // memory as the String this output replaced did.
            lost.scratch.reserve_exact(additional.max(MIN_GROWTH));
        }
        self.data = lost.scratch.as_mut_ptr();
        self.capacity = lost.scratch.capacity();
        self.prepared = self.capacity;
        self.len = 0;
    }
}

/// Has Linux map the pages between `start` and `end` that are not in memory yet, a call per
/// `RESIDENCY_PAGES` pages (one for a `PREPARED_STEP` of 4 KiB pages), before they are written
/// (`MADV_POPULATE_WRITE`, Linux 5.14; elsewhere, or where refused, they fault in as before).
/// Pages already in memory (a buffer reused from the heap) are left alone: asking for them
/// again cost about a tenth of writing seed 001. What the pages hold is not changed, and
/// nothing is allocated (this runs when memory may be short).
#[cfg(target_os = "linux")]
fn populate_absent_pages(start: usize, end: usize) {
    use std::ffi::{c_int, c_uchar, c_void};
    extern "C" {
        fn getpagesize() -> c_int;
        fn mincore(addr: *mut c_void, len: usize, residency: *mut c_uchar) -> c_int;
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }
    const MADV_POPULATE_WRITE: c_int = 23;
    const RESIDENCY_PAGES: usize = 256;
    // SAFETY: `getpagesize` has no preconditions.
    let page = usize::try_from(unsafe { getpagesize() }).unwrap_or(0);
    if !page.is_power_of_two() {
        return;
    }
    let (mut from, end) = (start.next_multiple_of(page), end & !(page - 1));
    let mut residency = [0u8; RESIDENCY_PAGES];
    while from < end {
        let upto = end.min(from.saturating_add(RESIDENCY_PAGES * page));
        // SAFETY: the range lies within one live buffer of this output and is page aligned,
        // and `residency` has a byte for each of its pages. Neither call changes what the
        // pages hold.
        unsafe {
            if mincore(from as *mut c_void, upto - from, residency.as_mut_ptr()) != 0 {
                return;
            }
            if let Some(absent) = residency[..(upto - from) / page].iter().position(|&resident| resident & 1 == 0) {
                let first = from + absent * page;
                madvise(first as *mut c_void, upto - first, MADV_POPULATE_WRITE);
            }
        }
        from = upto;
    }
}

#[cfg(not(target_os = "linux"))]
fn populate_absent_pages(_start: usize, _end: usize) {}

impl Drop for BytesOutput<'_> {
    fn drop(&mut self) {
        // SAFETY: `bytes` is owned (or null); the GIL is held for `'py`.
        unsafe { ffi::Py_XDECREF(self.bytes) };
    }
}

// SAFETY: `reserve` leaves `prepared - len >= additional`, and `data + len` then points to that
// many writable bytes of the buffer (the struct's invariant), which stay in place until `grow`.
unsafe impl TextOut for BytesOutput<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn reserve(&mut self, additional: usize) {
        if self.prepared - self.len < additional {
            self.make_room(additional);
        }
    }

    #[inline]
    fn room(&self) -> usize {
        self.prepared - self.len
    }

    #[inline]
    fn end(&mut self) -> *mut u8 {
        // SAFETY: `len <= prepared <= capacity`, so the pointer is within the buffer or one past
        // its end.
        unsafe { self.data.add(self.len) }
    }

    #[inline]
    unsafe fn advance(&mut self, n: usize) {
        self.len += n;
    }
}
