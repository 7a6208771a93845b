//! Equal strings stored and rebuilt once: the encoder's table of the strings a stream has
//! written (`StringTable`) and the decoder's cache of short decoded strings (`StringCache`).
//!
//! Records repeat the same short strings (status words, names of kinds, small codes) across
//! thousands of objects; building one Python string per occurrence costs an allocation and ~55
//! bytes each. When decoding them, a small direct-mapped cache hands out the same immutable
//! string instead, as pickle does for strings it memoized. Bounded: it never holds more than
//! `SLOTS` strings. Streams do better: they store each distinct string once (`StringTable`).

use copal_core::format::{reference_is_shorter, ObjectField, StringForm, StringsMark, WrittenStrings};
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
    pub fn get<'py>(&mut self, py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyString>> {
        let mask = self.slots.len() - 1;
        let slot = &mut self.slots[slot_of(text.as_bytes()) & mask];
        if let Some(cached) = slot {
            let cached = cached.bind(py);
            if cached.to_str().is_ok_and(|s| s == text) {
                return Ok(cached.clone());
            }
        }
        let fresh = crate::allocation::str(py, text)?;
        *slot = Some(fresh.clone().unbind());
        Ok(fresh)
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
/// string equal to an earlier one is written as a reference to that one's slot when this is
/// shorter. Equal by content, not identity: the decoder shares equal strings anyway.
///
/// Two levels. `recent` finds a string object met before by its address alone, as pickle's memo
/// does (a list holding one string object 10,000 times, names taken from a small vocabulary):
/// no hashing, no byte comparison, a reference written at once. Everything else is written in
/// full and made unique by content when the body is complete (copal-core's `WrittenStrings`,
/// `finish`), which also catches equal strings that are distinct objects.
#[derive(Default)]
pub struct StringTable {
    written: WrittenStrings,
    /// Direct-mapped by object address: the string objects written last, with their provisional
    /// slots. Each entry holds a reference to its string, so that the address cannot be freed
    /// and reused by another string while it is a key. Grows with the stream (the number of
    /// strings written in full) up to `RECENT_SLOTS` entries, so that a small stream does not
    /// pay for a large table.
    recent: Vec<Option<Recent>>,
}

/// A string object of `StringTable::recent`.
struct Recent {
    string: Py<PyString>,
    slot: u64,
    /// Whether a reference to `slot` is shorter than writing the string again.
    refers: bool,
}

/// The most entries of `StringTable::recent` (a power of two): room for a vocabulary of
/// repeated string objects (kinds, cities, status words) with few collisions.
const RECENT_SLOTS: usize = 256;

/// The fewest entries of `StringTable::recent`.
const MIN_RECENT_SLOTS: usize = 8;

impl StringTable {
    /// Starts a new body: slots start again from 0.
    pub fn clear(&mut self) {
        self.written.clear();
        self.recent.clear();
    }

    /// The table as it is now, for `rewind`.
    pub fn mark(&self) -> StringsMark {
        self.written.mark()
    }

    /// Forgets the strings written since `mark` was taken, whose bytes the caller removes from
    /// the body (an abandoned OBJECT_LIST, encode.rs): their slots will be taken by other
    /// strings, so no string object may be found by address with one of them.
    pub fn rewind(&mut self, mark: StringsMark) {
        self.written.rewind(mark);
        let next_slot = self.written.strings_in_full();
        for entry in &mut self.recent {
            if entry.as_ref().is_some_and(|seen| seen.slot >= next_slot) {
                *entry = None;
            }
        }
    }

    /// The slot to refer to for the string `s` if it is a string object written before in this
    /// body (found without reading its text) and a reference is shorter than its text.
    pub fn reference_slot(&self, s: &Bound<'_, PyString>) -> Option<u64> {
        let seen = self.recent.get(recent_index(s, self.recent.len()))?.as_ref()?;
        (seen.refers && seen.string.as_ptr() == s.as_ptr()).then_some(seen.slot)
    }

    /// Writes at the end of `out` `count` references in `form` to `slot`, which
    /// `reference_slot` gave (`WrittenStrings::write_references`).
    pub fn write_references(&mut self, out: &mut Vec<u8>, form: StringForm, slot: u64, count: usize) {
        self.written.write_references(out, form, slot, count);
    }

    /// Writes `s`, whose UTF-8 form is `text`, at the end of `out` in `form`: in full, or, as
    /// the value of `field` of an object, as a reference if that field wrote an equal string
    /// recently (`WrittenStrings::write_field`). Unless `may_repeat` is false (the caller knows
    /// that the object cannot be met again), `s` is remembered by address.
    pub fn write_new(
        &mut self,
        out: &mut Vec<u8>,
        form: StringForm,
        s: &Bound<'_, PyString>,
        text: &str,
        field: Option<ObjectField>,
        may_repeat: bool,
    ) {
        let slot = match field {
            Some(field) => self.written.write_field(out, form, text.as_bytes(), field),
            None => self.written.write_new(out, form, text.as_bytes()),
        };
        if !may_repeat {
            return;
        }
        let written_count = self.written.strings_in_full() as usize;
        if self.recent.len() < RECENT_SLOTS && written_count > self.recent.len() {
            // Entries move with the size: start again empty.
            let size = written_count.next_power_of_two().clamp(MIN_RECENT_SLOTS, RECENT_SLOTS);
            self.recent.clear();
            self.recent.resize_with(size, || None);
        }
        let index = recent_index(s, self.recent.len());
        self.recent[index] = Some(Recent { string: s.clone().unbind(), slot, refers: reference_is_shorter(slot, text.len()) });
    }

    /// Makes the body written since `clear` share its equal strings (`WrittenStrings::finish`).
    pub fn finish(&mut self, body: &mut Vec<u8>) {
        self.written.finish(body);
    }
}

/// The entry of a `StringTable::recent` of `size` entries (a power of two, or 0: none) for the
/// string at the address of `s`. Addresses are multiples of 16; Fibonacci hashing spreads them
/// over the top bits.
fn recent_index(s: &Bound<'_, PyString>, size: usize) -> usize {
    if size == 0 {
        return 0;
    }
    let spread = (s.as_ptr() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (spread >> (64 - size.trailing_zeros())) as usize
}
