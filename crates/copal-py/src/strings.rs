//! Reuse of short decoded strings.
//!
//! Records repeat the same short strings (status words, names of kinds, small codes) across
//! thousands of objects; building one Python string per occurrence costs an allocation and ~55
//! bytes each. A small direct-mapped cache hands out the same immutable string instead, as
//! pickle does for strings it memoized. Bounded: it never holds more than `SLOTS` strings.

use pyo3::prelude::*;
use pyo3::types::PyString;

const SLOTS: usize = 1024;
/// Longer strings are rarely repeated verbatim and cost more to compare than to build.
pub const MAX_CACHED_LEN: usize = 32;

pub struct StringCache {
    slots: Vec<Option<Py<PyString>>>,
}

impl Default for StringCache {
    fn default() -> Self {
        StringCache { slots: (0..SLOTS).map(|_| None).collect() }
    }
}

impl StringCache {
    /// The Python string for `text` (at most MAX_CACHED_LEN bytes).
    pub fn get<'py>(&mut self, py: Python<'py>, text: &str) -> Bound<'py, PyString> {
        let slot = &mut self.slots[slot_of(text.as_bytes())];
        if let Some(cached) = slot {
            let cached = cached.bind(py);
            if cached.to_str().is_ok_and(|s| s == text) {
                return cached.clone();
            }
        }
        let fresh = PyString::new(py, text);
        *slot = Some(fresh.clone().unbind());
        fresh
    }
}

fn slot_of(bytes: &[u8]) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (hash as usize) & (SLOTS - 1)
}
