//! Keeping a connection's cache bounded: invalidation and least-recently-used eviction.

use std::sync::atomic::Ordering;

use pyo3::ffi;
use pyo3::prelude::*;

use super::Connection;
use crate::persistent::{deactivate, PersistentBase, GHOST, UP_TO_DATE};
use crate::pytypes;

impl Connection {
    pub(super) fn invalidate_all(&self, py: Python<'_>) -> PyResult<()> {
        let objects: Vec<_> = self.cache.lock()?.values().map(|o| o.clone_ref(py)).collect();
        for obj in objects {
            let obj = obj.into_bound(py);
            if obj.is_instance_of::<PersistentBase>() {
                deactivate(&obj, true)?;
            }
        }
        Ok(())
    }

    /// Ghostifies the least recently used objects when more than `cache_size` are loaded, and
    /// drops ghosts that nothing else references.
    pub(super) fn evict(&self, py: Python<'_>) -> PyResult<()> {
        if self.loaded.load(Ordering::Relaxed) <= self.cache_size {
            return Ok(());
        }
        let mut loaded: Vec<(u32, Bound<'_, PyAny>)> = Vec::new();
        let mut unreferenced = Vec::new();
        {
            let mut cache = self.cache.lock()?;
            cache.retain(|_, obj| {
                let obj = obj.bind(py);
                let Ok(p) = PersistentBase::of(obj) else { return true };
                match p.state() {
                    UP_TO_DATE => loaded.push((p.last_access(), obj.clone())),
                    // A ghost referenced by the cache only can go: it would be recreated on demand.
                    // A count of one is exact on builds with the GIL: every other holder, the
                    // interpreter's borrowed stack references included, implies a strong
                    // reference elsewhere. Free-threaded builds split the count between
                    // threads, and keep their ghosts.
                    // SAFETY: reading the reference count of a live object.
                    GHOST if !pytypes::FREE_THREADED && unsafe { ffi::Py_REFCNT(obj.as_ptr()) } <= 1 => {
                        unreferenced.push(obj.clone().unbind());
                        return false;
                    }
                    _ => {}
                }
                true
            });
        }
        // Released outside the lock: deallocation may run Python code.
        drop(unreferenced);
        let target = self.cache_size - self.cache_size / 4;
        let excess = loaded.len().saturating_sub(target);
        if excess > 0 {
            loaded.sort_unstable_by_key(|(access, _)| *access);
            for (_, obj) in loaded.into_iter().take(excess) {
                deactivate(&obj, false)?;
            }
        }
        Ok(())
    }
}
