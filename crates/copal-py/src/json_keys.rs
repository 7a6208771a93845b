//! The dict keys of one JSON document as the direct writer (json_writer.rs) writes them,
//! `"key":`, kept by the key's address: the dicts of a document usually share their key
//! objects (literals in code are interned, and JSON parsers give a repeated key the same str),
//! and copying a kept fragment costs less than escaping the key again.

use copal_core::text::json::{escaped_key, push_piece};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// Slots of the cache; a key goes to the slot of its address (direct mapped), replacing the
/// key there.
const SLOTS: usize = 256;

/// The longest fragment kept: `push_piece` copies up to 32 bytes by fixed-size moves, and
/// longer keys are rarely repeated field names.
const MAX_FRAGMENT: usize = 32;

#[derive(Default)]
pub struct KeyCache {
    /// Empty until the document's first str-keyed dict.
    slots: Vec<Slot>,
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
    fn slot(&mut self, key: *mut ffi::PyObject) -> &mut Slot {
        if self.slots.is_empty() {
            self.slots.resize_with(SLOTS, Slot::default);
        }
        // Objects are 16-byte aligned: the bits above those four vary between keys.
        &mut self.slots[(key as usize >> 4) % SLOTS]
    }

    /// Whether `key` is in the cache (then it is a UTF-8 str: only such keys are written).
    pub fn holds(&mut self, key: *mut ffi::PyObject) -> bool {
        self.slot(key).key.as_ref().is_some_and(|held| held.as_ptr() == key)
    }

    /// Appends `"key":` (escaped_key's text) for `key`, an exact str whose text is UTF-8.
    pub fn write(&mut self, out: &mut String, key: Borrowed<'_, '_, PyString>) -> PyResult<()> {
        let slot = self.slot(key.as_ptr());
        let held = slot.key.as_ref().is_some_and(|held| held.as_ptr() == key.as_ptr());
        if held && !slot.fragment.is_empty() {
            push_piece(out, &slot.fragment);
            return Ok(());
        }
        let start = out.len();
        escaped_key(out, key.to_str()?);
        let fragment = &out[start..];
        if held && fragment.len() <= MAX_FRAGMENT {
            slot.fragment.push_str(fragment);
        } else if !held {
            slot.key = Some(key.to_owned().unbind());
            slot.fragment.clear();
        }
        Ok(())
    }
}
