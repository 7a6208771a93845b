//! Equal strings stored and rebuilt once: the encoder's table of the strings a stream has
//! written (`StringTable`) and the decoder's cache of short decoded strings (`StringCache`).
//!
//! Records repeat the same short strings (status words, names of kinds, small codes) across
//! thousands of objects; building one Python string per occurrence costs an allocation and ~55
//! bytes each. When decoding them, a small direct-mapped cache hands out the same immutable
//! string instead, as pickle does for strings it memoized. Bounded: it never holds more than
//! `SLOTS` strings. Streams do better: they store each distinct string once (`StringTable`).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::hashing::IntHasher;

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
/// no hashing, no byte comparison. Everything else goes to the content table `by_hash`, which
/// also catches equal strings that are distinct objects.
#[derive(Default)]
pub struct StringTable {
    /// Python's hash of a string (computed once per string object and cached in it) -> the
    /// latest of `written` with that hash.
    by_hash: HashMap<isize, usize, BuildHasherDefault<IntHasher>>,
    written: Vec<Written>,
    /// The UTF-8 bytes of the strings of `written`, one after the other: a copy, so that no
    /// Python string has to be kept alive (or released) for the table.
    bytes: Vec<u8>,
    next_slot: u64,
    /// Direct-mapped by object address: string objects found again by content, with the slot of
    /// their content's entry in `written`. Each entry holds a reference to its string, so that
    /// the address cannot be freed and reused by another string while it is a key. Empty until
    /// the first repeated string: a stream of distinct strings never pays for it.
    recent: Vec<Option<Recent>>,
}

/// A string object of `StringTable::recent`.
struct Recent {
    string: Py<PyString>,
    slot: u64,
}

/// The number of entries of `StringTable::recent` (a power of two): room for a vocabulary of
/// repeated string objects (kinds, cities, status words) with few collisions.
const RECENT_SLOTS: usize = 256;

/// A distinct string written as a STR.
struct Written {
    bytes: std::ops::Range<usize>,
    slot: u64,
    /// The string written before it with the same hash, if any.
    same_hash: Option<usize>,
}

impl StringTable {
    /// The string slot to refer to instead of writing `s` (whose UTF-8 form is `text`), or None
    /// when `s` is to be written as a STR, which then takes the next slot.
    pub fn earlier_slot(&mut self, s: &Bound<'_, PyString>, text: &str) -> PyResult<Option<u64>> {
        let recent = recent_index(s);
        if let Some(Some(seen)) = self.recent.get(recent) {
            if seen.string.as_ptr() == s.as_ptr() {
                let slot = seen.slot;
                return Ok(self.refer_or_rewrite(slot, text));
            }
        }
        let hash = s.hash()?;
        let head = match self.by_hash.entry(hash) {
            Entry::Occupied(head) => *head.get(),
            Entry::Vacant(vacant) => {
                vacant.insert(self.written.len());
                self.push_written(text, None);
                return Ok(None);
            }
        };
        let mut candidate = Some(head);
        while let Some(index) = candidate {
            let written = &self.written[index];
            if &self.bytes[written.bytes.clone()] == text.as_bytes() {
                let slot = written.slot;
                self.remember(recent, s, slot);
                return Ok(self.refer_or_rewrite(slot, text));
            }
            candidate = written.same_hash;
        }
        self.by_hash.insert(hash, self.written.len());
        self.push_written(text, Some(head));
        Ok(None)
    }

    /// A string equal to the one written in `slot`: a reference to it when that is shorter than
    /// writing it again, else None (it is written again and takes the next slot).
    fn refer_or_rewrite(&mut self, slot: u64, text: &str) -> Option<u64> {
        if varint_len(slot) < varint_len(text.len() as u64) + text.len() {
            return Some(slot);
        }
        self.next_slot += 1;
        None
    }

    /// Records a string written as a STR for the first time.
    fn push_written(&mut self, text: &str, same_hash: Option<usize>) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(text.as_bytes());
        self.written.push(Written { bytes: start..self.bytes.len(), slot: self.next_slot, same_hash });
        self.next_slot += 1;
    }

    fn remember(&mut self, index: usize, s: &Bound<'_, PyString>, slot: u64) {
        if self.recent.is_empty() {
            self.recent.resize_with(RECENT_SLOTS, || None);
        }
        self.recent[index] = Some(Recent { string: s.clone().unbind(), slot });
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
