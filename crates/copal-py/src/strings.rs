//! Equal strings stored and rebuilt once: the encoder's table of the strings a stream has
//! written (`StringTable`) and the decoder's cache of short decoded strings (`StringCache`).
//!
//! Records repeat the same short strings (status words, names of kinds, small codes) across
//! thousands of objects; building one Python string per occurrence costs an allocation and ~55
//! bytes each. When decoding them, a small direct-mapped cache hands out the same immutable
//! string instead, as pickle does for strings it memoized. Bounded: it never holds more than
//! `SLOTS` strings. Streams do better: they store each distinct string once (`StringTable`).

use copal_core::format::{reference_is_shorter, ObjectField, StringForm, StringsMark, WrittenStrings};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

const SLOTS: usize = 1024;
/// The fewest slots of a cache sized for its input (`StringCache::for_input`).
const MIN_SLOTS: usize = 16;
/// Longer strings are rarely repeated verbatim and cost more to compare than to build.
pub const MAX_CACHED_LEN: usize = 32;

pub struct StringCache {
    slots: Vec<Option<Cached>>,
    /// How far `hash` is shifted right to index `slots`: 64 less the bits of its length.
    shift: u32,
    /// The slot of the string the last lookup found, if it found one: a run of one string (a
    /// column of equal values) is found without hashing it, and distinct strings, each new,
    /// are not compared with the last one.
    last_found: Option<usize>,
}

/// A string of the cache with the hash of its text: a lookup that finds another string in the
/// slot (most lookups, when strings are distinct) is told by the hash alone, without reading
/// the string object, an object the decoder made long before.
struct Cached {
    hash: u64,
    string: Py<PyString>,
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
        StringCache { slots: (0..count).map(|_| None).collect(), shift: 64 - count.trailing_zeros(), last_found: None }
    }

    /// The Python string of the UTF-8 `text` (at most MAX_CACHED_LEN bytes) and whether it is a
    /// new string (not found in the cache), or None if `text` is not UTF-8.
    pub fn get<'py>(&mut self, py: Python<'py>, text: &[u8]) -> PyResult<Option<(Bound<'py, PyAny>, bool)>> {
        if let Some(Some(last)) = self.last_found.map(|index| &self.slots[index]) {
            let string = last.string.bind(py);
            if str_text(string).is_ok_and(|s| s.as_bytes() == text) {
                return Ok(Some((string.clone().into_any(), false)));
            }
        }
        let hash = hash_of(text);
        let index = (hash >> self.shift) as usize;
        let slot = &mut self.slots[index];
        if let Some(cached) = slot {
            let string = cached.string.bind(py);
            if cached.hash == hash && str_text(string).is_ok_and(|s| s.as_bytes() == text) {
                self.last_found = Some(index);
                return Ok(Some((string.clone().into_any(), false)));
            }
        }
        self.last_found = None;
        let Some(fresh) = new_string(py, text)? else { return Ok(None) };
        // SAFETY: `new_string` makes a str.
        let string = unsafe { fresh.clone().cast_into_unchecked::<PyString>() }.unbind();
        *slot = Some(Cached { hash, string });
        Ok(Some((fresh, true)))
    }
}

/// A hash of a short text, a word at a time (the FNV hash it replaced took a byte at a time).
fn hash_of(text: &[u8]) -> u64 {
    const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;
    let mix = |hash: u64, word: u64| (hash ^ word).wrapping_mul(MULTIPLIER).rotate_left(31);
    let mut hash = text.len() as u64;
    let mut words = text.chunks_exact(8);
    for word in &mut words {
        hash = mix(hash, u64::from_le_bytes(word.try_into().expect("eight bytes")));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        hash = mix(hash, u64::from_le_bytes(word));
    }
    (hash ^ (hash >> 29)).wrapping_mul(MULTIPLIER)
}

/// The string of UTF-8 `bytes`, or None if they are not UTF-8. CPython's decoder checks them as
/// it copies them, so they are not checked twice (this is the most frequent value); ASCII text,
/// checked here a word at a time, is copied into a new ASCII string without it.
pub fn new_string<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
    // Empty and one-character strings come from CPython's decoder, which returns shared
    // singletons for some of them.
    #[cfg(not(any(Py_LIMITED_API, PyPy)))]
    if bytes.len() > 1 && bytes.is_ascii() {
        // SAFETY: PyUnicode_New returns a new compact ASCII string of `bytes.len()` characters
        // (or null with an exception set), whose data, writable until the string is shared,
        // holds that many bytes plus a terminating NUL that it already wrote.
        unsafe {
            let string = Bound::from_owned_ptr_or_err(py, ffi::PyUnicode_New(bytes.len() as ffi::Py_ssize_t, 127))?;
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), ffi::PyUnicode_1BYTE_DATA(string.as_ptr()), bytes.len());
            return Ok(Some(string));
        }
    }
    // SAFETY: `bytes` is valid for its length (which a slice keeps below isize::MAX); the call
    // returns a new reference, or null with an exception set.
    let string = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyUnicode_DecodeUTF8(bytes.as_ptr().cast(), bytes.len() as ffi::Py_ssize_t, c"strict".as_ptr()),
        )
    };
    match string {
        Ok(string) => Ok(Some(string)),
        Err(error) if error.is_instance_of::<pyo3::exceptions::PyUnicodeDecodeError>(py) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The text of `s` (an error for lone surrogates, which UTF-8 cannot hold). A compact ASCII str,
/// the most frequent kind, is read in place: its characters are its UTF-8, and the call to
/// `PyUnicode_AsUTF8AndSize` that `to_str` makes for every str took a twentieth of writing
/// seed 003.
pub(crate) fn str_text<'a>(s: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    #[cfg(not(any(PyPy, GraalPy, Py_LIMITED_API, Py_3_14)))]
    {
        let ptr = s.as_ptr();
        // SAFETY: `s` is a live str, which `'a` keeps alive; a compact ASCII str (always ready)
        // holds its `length` characters, one byte each, inline after its header, and ASCII is
        // UTF-8.
        unsafe {
            if ffi::PyUnicode_IS_COMPACT_ASCII(ptr) != 0 {
                let length = usize::try_from(ffi::PyUnicode_GET_LENGTH(ptr)).unwrap_or(0);
                let bytes = std::slice::from_raw_parts(ffi::PyUnicode_DATA(ptr).cast::<u8>(), length);
                return Ok(std::str::from_utf8_unchecked(bytes));
            }
        }
    }
    s.to_str()
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
    /// the body (an abandoned OBJECT_LIST, encode/containers.rs): their slots will be taken by other
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
