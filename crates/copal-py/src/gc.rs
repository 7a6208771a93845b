//! Pausing Python's cyclic garbage collector during bulk work.
//!
//! Loading or committing a batch allocates one container per object; each allocation can trigger
//! a collection that walks every tracked object, making bulk work quadratic-ish in the size of the
//! heap. Nothing the batch creates can become cyclic garbage before it ends, so collections during
//! it are pure waste: the guard pauses the collector and restores its previous state when dropped
//! (the next allocation afterwards collects as usual).

use pyo3::ffi;
use pyo3::prelude::*;

pub struct GcPause {
    was_enabled: bool,
}

impl GcPause {
    pub fn new(_py: Python<'_>) -> GcPause {
        // SAFETY: the GIL is held (witnessed by `_py`); PyGC_Disable only flips a flag.
        let was_enabled = unsafe { ffi::PyGC_Disable() } != 0;
        GcPause { was_enabled }
    }
}

impl Drop for GcPause {
    fn drop(&mut self) {
        if self.was_enabled {
            // SAFETY: dropped on the thread that created the guard, which still holds the GIL
            // (the guard never outlives the `Python` token's scope in which it was created).
            unsafe { ffi::PyGC_Enable() };
        }
    }
}
