//! Equal strings stored and rebuilt once: the encoder's table of the strings a stream has
//! written (`StringTable`) and the decoder's cache of short decoded strings (`StringCache`).
//!
//! Records repeat the same short strings (status words, names of kinds, small codes) across
//! thousands of objects; building one Python string per occurrence costs an allocation and ~55
//! bytes each. A small direct-mapped cache hands out the same immutable string instead, as
//! pickle does for strings it memoized. Bounded: it never holds more than `SLOTS` strings.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::hashing::IntHasher;

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

/// The strings a stream has written so far, for stream version 2's shared strings
/// (docs/STREAM.md section 5): every STR of the body takes the next string slot, and a later
/// string equal to an earlier one is written as a STRREF to that one's slot when this is
/// shorter. Equal by content, not identity: the decoder shares equal strings anyway.
#[derive(Default)]
pub struct StringTable {
    slots: HashMap<Utf8Key, u64, BuildHasherDefault<IntHasher>>,
    /// Keeps alive the strings whose UTF-8 bytes the keys of `slots` point to: Python code that
    /// runs during encoding (an `__eq__`, loading a ghost) could otherwise free one.
    owners: Vec<Py<PyString>>,
    next: u64,
    referenced: bool,
}

/// The UTF-8 bytes of a string held in `StringTable::owners`, hashed by Python's string hash
/// (computed once per string object and cached in it).
struct Utf8Key {
    hash: isize,
    bytes: *const u8,
    len: usize,
}

impl Utf8Key {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the bytes belong to a string kept alive by `StringTable::owners` (or, for a
        // lookup key, borrowed from a live `&str`) and Python strings are immutable.
        unsafe { std::slice::from_raw_parts(self.bytes, self.len) }
    }
}

impl PartialEq for Utf8Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.bytes() == other.bytes()
    }
}

impl Eq for Utf8Key {}

impl Hash for Utf8Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash as u64);
    }
}

impl StringTable {
    /// The string slot to refer to instead of writing `s` (whose UTF-8 form is `text`), or None
    /// when `s` is to be written as a STR, which then takes the next slot.
    pub fn earlier_slot(&mut self, s: &Bound<'_, PyString>, text: &str) -> PyResult<Option<u64>> {
        let key = Utf8Key { hash: s.hash()?, bytes: text.as_ptr(), len: text.len() };
        if let Some(&slot) = self.slots.get(&key) {
            if varint_len(slot) < varint_len(text.len() as u64) + text.len() {
                self.referenced = true;
                return Ok(Some(slot));
            }
        } else {
            self.slots.insert(key, self.next);
            self.owners.push(s.clone().unbind());
        }
        self.next += 1;
        Ok(None)
    }

    /// Whether a STRREF was written: the stream then needs version 2.
    pub fn referenced(&self) -> bool {
        self.referenced
    }
}

/// The size of `value` as a varint.
fn varint_len(value: u64) -> usize {
    (64 - value.max(1).leading_zeros() as usize).div_ceil(7)
}
