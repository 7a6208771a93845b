//! The dict keys of one JSON document as the direct writer (json_writer.rs) writes them,
//! `"key":`, kept by the key's address: the dicts of a document usually share their key
//! objects (literals in code are interned, and JSON parsers give a repeated key the same str),
//! and copying a kept fragment costs less than escaping the key again.

use copal_core::text::json::{escaped_key, push_piece};
use copal_core::text::TextOut;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::strings::str_text;

/// Slots of the cache; a key goes to the slot of its address (direct mapped), replacing the
/// key there.
const SLOTS: usize = 256;

/// Dict keys a document writes before it starts the cache: its slots take a few kilobytes to
/// make, which would double the time of writing a small dict.
const KEYS_BEFORE_CACHING: usize = 64;

/// The longest fragment kept: `push_piece` copies up to 32 bytes by fixed-size moves, and
/// longer keys are rarely repeated field names.
const MAX_FRAGMENT: usize = 32;

/// The bytes `escaped_key` adds to a key's text at least: its quotes and colon.
const KEY_PUNCTUATION: usize = 3;

#[derive(Default)]
pub struct KeyCache {
    /// Empty until the document has written `KEYS_BEFORE_CACHING` keys.
    slots: Vec<Slot>,
    keys_written: usize,
}

#[derive(Default)]
struct Slot {
    /// The key, held so that its address cannot be reused by another str while it is here (a
    /// str is immutable, so a held key's text cannot change either).
    key: Option<Py<PyString>>,
    /// Its `"key":` once the key was met a second time in this slot; empty before, so that a
    /// dict whose keys are all distinct pays one reference, not a copy, per key.
    fragment: String,
}

impl KeyCache {
    /// Whether `key` is in the cache (then it is a UTF-8 str: only such keys are written).
    pub fn holds(&self, key: *mut ffi::PyObject) -> bool {
        self.slots.get(slot_index(key)).is_some_and(|slot| slot.key.as_ref().is_some_and(|held| held.as_ptr() == key))
    }

    /// Appends `"key":` (escaped_key's text) for `key`, an exact str whose text is UTF-8.
    pub fn write(&mut self, out: &mut impl TextOut, key: Borrowed<'_, '_, PyString>) -> PyResult<()> {
        if self.slots.is_empty() {
            self.keys_written += 1;
            if self.keys_written <= KEYS_BEFORE_CACHING {
                escaped_key(out, str_text(&key)?);
                return Ok(());
            }
            self.slots.resize_with(SLOTS, Slot::default);
        }
        let slot = &mut self.slots[slot_index(key.as_ptr())];
        let held = slot.key.as_ref().is_some_and(|held| held.as_ptr() == key.as_ptr());
        if held && !slot.fragment.is_empty() {
            push_piece(out, &slot.fragment);
            return Ok(());
        }
        let text = str_text(&key)?;
        if !held {
            slot.key = Some(key.to_owned().unbind());
            slot.fragment.clear();
            escaped_key(out, text);
        } else if text.len() + KEY_PUNCTUATION > MAX_FRAGMENT {
            escaped_key(out, text);
        } else {
            escaped_key(&mut slot.fragment, text);
            if slot.fragment.len() <= MAX_FRAGMENT {
                push_piece(out, &slot.fragment);
            } else {
                // Escapes made it longer than a fragment kept.
                out.push_str(&std::mem::take(&mut slot.fragment));
            }
        }
        Ok(())
    }
}

/// The slot of `key`: objects are 16-byte aligned, and the bits above those four vary between
/// keys.
fn slot_index(key: *mut ffi::PyObject) -> usize {
    (key as usize >> 4) % SLOTS
}
