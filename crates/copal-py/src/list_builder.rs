//! Python lists filled item by item by the decoder, which knows their length when it makes them.
//!
//! `PyList_Append` checks its arguments, and grows the list's array over and over on the way to
//! its final size (a call and a reallocation now and then per item: a seventh of decoding a list
//! of 10,000 ints). A `ListBuilder` makes the list with room for its items, and stores each
//! item in the next free place of the array.
//!
//! The list is visible while it is filled: it takes its memo slot before its items are decoded
//! (an item may refer back to it), and decoding may run Python code (a fix-up of an evolved
//! class, a `BrokenObject`) that sees it. So it is never a list of holes as `PyList_New(n)`
//! makes it: its length is the number of items stored so far and the room is past its end, as
//! in any list CPython over-allocated. Python code may change it meanwhile; each `push` reads
//! its length and room again, and appends as Python would when there is no room left.
//!
//! On the free-threaded build another thread may read the list while it is filled, through
//! the memo or Python code run meanwhile, and the list's own lock orders its writes: the list is
//! filled with `PyList_Append` there, never by writing its fields.

use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::cpython;

pub struct ListBuilder<'py> {
    list: Bound<'py, PyList>,
    /// The last object `extend_shared` stored and how many of its references in the list are not
    /// counted in its reference count yet (`settle` adds them in one go).
    uncounted: (*mut pyo3::ffi::PyObject, isize),
}

impl<'py> ListBuilder<'py> {
    /// An empty list with room for `capacity` items. The caller bounds `capacity` by its input,
    /// which the items it claims must come from.
    pub fn with_capacity(py: Python<'py>, capacity: usize) -> PyResult<Self> {
        let uncounted = (std::ptr::null_mut(), 0);
        #[cfg(not(any(Py_LIMITED_API, PyPy, Py_GIL_DISABLED)))]
        {
            use pyo3::ffi;
            // SAFETY: PyList_New returns a new list of `capacity` null items, or null with an
            // exception set (MemoryError). Setting its size to 0 leaves its `allocated` places as
            // room, an ordinary state of a list (Include/cpython/listobject.h: "0 <= ob_size <=
            // allocated"); nothing else has seen the list yet.
            unsafe {
                let list = ffi::PyList_New(capacity as ffi::Py_ssize_t);
                let list = Bound::from_owned_ptr_or_err(py, list)?.cast_into_unchecked::<PyList>();
                (*list.as_ptr().cast::<ffi::PyVarObject>()).ob_size = 0;
                Ok(ListBuilder { list, uncounted })
            }
        }
        #[cfg(any(Py_LIMITED_API, PyPy, Py_GIL_DISABLED))]
        {
            let _ = capacity;
            Ok(ListBuilder { list: PyList::empty(py), uncounted })
        }
    }

    /// A list of `values`, made by calls that raise MemoryError (pyo3's `PyList::new` panics
    /// when it cannot allocate).
    pub fn of(py: Python<'py>, values: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyList>> {
        let mut list = ListBuilder::with_capacity(py, values.len())?;
        for value in values {
            list.push(value)?;
        }
        Ok(list.list.clone())
    }

    pub fn list(&self) -> &Bound<'py, PyList> {
        &self.list
    }

    /// Appends `item` to the list.
    #[inline]
    pub fn push(&mut self, item: Bound<'py, PyAny>) -> PyResult<()> {
        self.settle();
        if let Err(item) = self.store(item.into_ptr()) {
            // SAFETY: `store` handed back the reference it was given.
            let item = unsafe { Bound::from_owned_ptr(self.list.py(), item) };
            self.list.append(item)?;
        }
        Ok(())
    }

    /// Appends the items `next` gives until it gives None or the list has no room left, and
    /// returns how many it appended (an error only where lists are appended to one by one: where
    /// `cpython::ADDS_REFERENCES_AT_ONCE` is false). The items are values that lists repeat
    /// (small ints, shared strings), whose reference counts are raised once per run of one
    /// object (`settle`, `cpython::add_references`) rather than once per item; and the list's
    /// length is stored once at the end. What is left per item is `next`, a store and a
    /// comparison: a loop over `push` pays for reloading the length, and for increments of one
    /// count, each waiting on the one before.
    ///
    /// # Safety
    /// Something other than the list must keep each item alive until this builder's next `push`,
    /// `settle`, `into_any` or drop, and no Python code may run before then (it could remove
    /// the items whose references are not counted yet, freeing them).
    #[inline(always)]
    pub unsafe fn extend_shared<'a>(&mut self, mut next: impl FnMut() -> Option<&'a Bound<'py, PyAny>>) -> PyResult<usize>
    where
        'py: 'a,
    {
        #[cfg(not(any(Py_LIMITED_API, PyPy, Py_GIL_DISABLED)))]
        if cpython::ADDS_REFERENCES_AT_ONCE {
            let list = self.list.as_ptr().cast::<pyo3::ffi::PyListObject>();
            // SAFETY: as in `store`, places from the list's length up to `allocated` are room;
            // the length is set to cover the places filled, as `store` does item by item.
            unsafe {
                let len = (*list).ob_base.ob_size;
                let room = ((*list).allocated - len).max(0) as usize;
                let places = (*list).ob_item.add(len as usize);
                let (mut run, mut run_length) = self.uncounted;
                let mut filled = 0;
                while filled < room {
                    let Some(item) = next() else { break };
                    let pointer = item.as_ptr();
                    places.add(filled).write(pointer);
                    if pointer != run {
                        self.uncounted = (run, run_length);
                        self.settle();
                        (run, run_length) = (pointer, 0);
                    }
                    run_length += 1;
                    filled += 1;
                }
                self.uncounted = (run, run_length);
                (*list).ob_base.ob_size = len + filled as pyo3::ffi::Py_ssize_t;
                return Ok(filled);
            }
        }
        let mut appended = 0;
        while let Some(item) = next() {
            self.push(item.clone())?;
            appended += 1;
        }
        Ok(appended)
    }

    /// Counts the references `extend_shared` stored.
    pub fn settle(&mut self) {
        let (object, count) = std::mem::replace(&mut self.uncounted, (std::ptr::null_mut(), 0));
        if count > 0 {
            // SAFETY: `object` is alive (`extend_shared`'s contract), the GIL is held, and the
            // list holds `count` references to it that its reference count does not include.
            unsafe { cpython::add_references(object, count) };
        }
    }

    /// Stores the reference `item` in the list's next place if it has room, or hands it back.
    #[inline]
    fn store(&mut self, item: *mut pyo3::ffi::PyObject) -> Result<(), *mut pyo3::ffi::PyObject> {
        #[cfg(not(any(Py_LIMITED_API, PyPy, Py_GIL_DISABLED)))]
        {
            let list = self.list.as_ptr().cast::<pyo3::ffi::PyListObject>();
            // SAFETY: `list` is a live list (owned by `self.list`). While its length is below
            // `allocated`, the place at its length is room past its end (CPython's list_resize
            // keeps `ob_item` that large): storing the item's reference there and counting it
            // is what `PyList_Append` does when it needs not grow the array.
            unsafe {
                let len = (*list).ob_base.ob_size;
                if len < (*list).allocated {
                    *(*list).ob_item.add(len as usize) = item;
                    (*list).ob_base.ob_size = len + 1;
                    return Ok(());
                }
            }
        }
        Err(item)
    }

    pub fn into_any(mut self) -> Bound<'py, PyAny> {
        self.settle();
        self.list.clone().into_any()
    }
}

impl Drop for ListBuilder<'_> {
    fn drop(&mut self) {
        self.settle();
    }
}
