//! How a connection is used from Python threads: one thread at a time, and work without the GIL
//! that stays on the calling thread.

use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// Runs `f` without the GIL. LMDB write transactions must stay on the thread that began them;
/// `detach` runs the closure on the current thread, so carrying one through it is sound even
/// though heed marks the transaction `!Send`.
pub(super) struct SameThread<T>(pub(super) T);
// SAFETY: values wrapped here only pass through `Python::detach`, which runs its closure on the
// calling thread; they never reach another thread.
unsafe impl<T> Send for SameThread<T> {}

pub(super) fn without_gil<T>(py: Python<'_>, f: impl FnOnce() -> T) -> T {
    let f = SameThread(f);
    let out = py.detach(move || {
        let f = f;
        SameThread((f.0)())
    });
    out.0
}

/// Interior state of a connection. A connection serves one thread at a time, and moves between
/// threads through the database's pool; the mutex makes that sound and turns accidental
/// concurrent use (or re-entry) into an error instead of undefined behaviour.
pub(super) struct Guarded<T>(Mutex<T>);

impl<T> Guarded<T> {
    pub(super) fn new(value: T) -> Self {
        Guarded(Mutex::new(value))
    }

    pub(super) fn lock(&self) -> PyResult<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "this copal connection is in use by another thread: objects and transactions \
                 belong to the thread that opened the transaction",
            )),
        }
    }
}
