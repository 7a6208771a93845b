//! Equal strings stored and rebuilt once: the encoder's table of the strings a stream has
//! written (`StringTable`) and the decoder's cache of short decoded strings (`StringCache`).
//!
//! Records repeat the same short strings (status words, names of kinds, small codes) across
//! thousands of objects; building one Python string per occurrence costs an allocation and ~55
//! bytes each. When decoding them, a small direct-mapped cache hands out the same immutable
//! string instead, as pickle does for strings it memoized. Bounded: it never holds more than
//! `SLOTS` strings. Streams do better: they store each distinct string once (`StringTable`).

use copal_core::format::{text_hash, WrittenStrings};
use pyo3::prelude::*;
use pyo3::types::PyString;

const SLOTS: usize = 1024;
/// The fewest slots of a cache sized for its input (`StringCache::for_input`).
const MIN_SLOTS: usize = 16;
/// Longer strings are rarely repeated verbatim and cost more to compare than to build.
pub const MAX_CACHED_LEN: usize = 32;

pub struct StringCache {
    slots: Vec<Option<Py<PyString>>>,
}

impl Default for StringCache {
    fn default() -> Self {
        Self::with_slots(SLOTS)
    }
}

impl StringCache {
    /// A cache for decoding an input of `len` bytes. A short input holds few strings: allocating
    /// and dropping all the slots would cost more than decoding it (`copal.loads` of a small
    /// stream, one value of an archive).
    pub fn for_input(len: usize) -> Self {
        Self::with_slots((len / 8).next_power_of_two().clamp(MIN_SLOTS, SLOTS))
    }

    /// `count` must be a power of two.
    fn with_slots(count: usize) -> Self {
        StringCache { slots: (0..count).map(|_| None).collect() }
    }

    /// The Python string for `text` (at most MAX_CACHED_LEN bytes).
    pub fn get<'py>(&mut self, py: Python<'py>, text: &str) -> Bound<'py, PyString> {
        let mask = self.slots.len() - 1;
        let slot = &mut self.slots[slot_of(text.as_bytes()) & mask];
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
    hash as usize
}

/// The strings a stream has written so far, for stream version 2's shared strings
/// (docs/STREAM.md section 5): every STR of the body takes the next string slot, and a later
/// string equal to an earlier one is written as a STRREF to that one's slot when this is
/// shorter. Equal by content, not identity: the decoder shares equal strings anyway.
///
/// Two levels. `recent` finds a string object met before by its address alone, as pickle's memo
/// does (a list holding one string object 10,000 times, names taken from a small vocabulary):
/// no hashing, no byte comparison. Everything else goes to the content table `written`
/// (copal-core's `WrittenStrings`), which also catches equal strings that are distinct objects.
#[derive(Default)]
pub struct StringTable {
    written: WrittenStrings,
    /// Direct-mapped by object address: string objects found again by content, with the slot of
    /// their content's entry. Each entry holds a reference to its string, so that the address
    /// cannot be freed and reused by another string while it is a key. Empty until the first
    /// repeated string: a stream of distinct strings never pays for it.
    recent: Vec<Option<Recent>>,
}

/// A string object of `StringTable::recent`.
struct Recent {
    string: Py<PyString>,
    slot: u64,
    /// Whether a STRREF to `slot` is shorter than writing the string again.
    refers: bool,
}

/// The number of entries of `StringTable::recent` (a power of two): room for a vocabulary of
/// repeated string objects (kinds, cities, status words) with few collisions.
const RECENT_SLOTS: usize = 256;

impl StringTable {
    /// Starts a new output: slots start again from 0 and earlier offsets mean nothing.
    pub fn clear(&mut self) {
        self.written.clear();
        self.recent.clear();
    }

    /// The slot to refer to instead of writing `s`, when `s` is a string object met before
    /// (found without reading its text).
    pub fn recent_reference(&self, s: &Bound<'_, PyString>) -> Option<u64> {
        match self.recent.get(recent_index(s)) {
            Some(Some(seen)) if seen.refers && seen.string.as_ptr() == s.as_ptr() => Some(seen.slot),
            _ => None,
        }
    }

    /// The string slot to refer to instead of writing `s` (whose UTF-8 form is `text`), or None
    /// when `s` is to be written as a STR: the caller writes it to `output` and calls `wrote`.
    pub fn earlier_slot(&mut self, s: &Bound<'_, PyString>, text: &str, output: &[u8]) -> Option<u64> {
        let slot = self.written.find(text_hash(text.as_bytes()), text.as_bytes(), output)?;
        let refers = varint_len(slot) < varint_len(text.len() as u64) + text.len();
        self.remember(s, slot, refers);
        refers.then_some(slot)
    }

    /// Prepares the lookup of `s`, a string to be written soon (`WrittenStrings::prefetch`).
    pub fn prefetch(&self, s: &Bound<'_, PyString>) {
        if self.recent_reference(s).is_some() {
            return;
        }
        if let Ok(text) = s.to_str() {
            self.written.prefetch(text_hash(text.as_bytes()));
        }
    }

    /// The string `earlier_slot` last answered None for was written as a STR, its UTF-8 bytes at
    /// `bytes` of the output: it takes the next slot.
    pub fn wrote(&mut self, bytes: std::ops::Range<usize>) {
        self.written.wrote(bytes);
    }

    fn remember(&mut self, s: &Bound<'_, PyString>, slot: u64, refers: bool) {
        if self.recent.is_empty() {
            self.recent.resize_with(RECENT_SLOTS, || None);
        }
        self.recent[recent_index(s)] = Some(Recent { string: s.clone().unbind(), slot, refers });
    }
}

/// The entry of `StringTable::recent` for the string at the address of `s`. Addresses are
/// multiples of 16; Fibonacci hashing spreads them over the top bits.
fn recent_index(s: &Bound<'_, PyString>) -> usize {
    let spread = (s.as_ptr() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (spread >> (64 - RECENT_SLOTS.trailing_zeros())) as usize
}

/// The size of `value` as a varint.
fn varint_len(value: u64) -> usize {
    (64 - value.max(1).leading_zeros() as usize).div_ceil(7)
}
