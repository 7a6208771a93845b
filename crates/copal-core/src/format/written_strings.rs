//! The strings a stream writes, made unique after the fact: the writer's side of stream version
//! 2's shared strings (docs/STREAM.md section 5). Every STR of a body takes the next string slot;
//! a later string equal to an earlier one is written as a reference to that one's slot when this
//! is shorter. The encoder (copal-py `strings.rs`) adds the lookup of string objects by address;
//! this part knows nothing of Python, so that its hashing, its duplicate finding and its rewrite
//! of the body are tested here.
//!
//! **Sequential deduplication.** While the body is written, every string is written in full as
//! if it were new (its provisional slot is its index among the strings written in full) and is
//! logged: where it is, how long, in which form, and its hash. When the body is complete,
//! `finish` sorts the hashes, confirms equal hashes by comparing bytes, and if some string
//! repeats an earlier one, rewrites the body once, in order: each repeat becomes a reference to
//! its first occurrence's final slot (when shorter), and references are renumbered. A body whose
//! strings are all distinct is final as written. A table probed per string (the previous design)
//! waits for memory on every new string once it outgrows the cache; the log and the rewrite only
//! read and write memory in order, and the sort works on one array of 8-byte keys.
//!
//! **Repeats found as they are written.** Strings written as the values of objects' fields
//! (`write_field`) are first looked up in a small table per field (`field_texts`): a repeat
//! found there is written as a reference at once and never reaches `finish`. What the tables
//! miss, `finish` finds as above, so the body is the same either way.
//!
//! This file holds the log and its writing; `text_hash.rs` the hash the log keeps of each
//! string, `deduplication.rs` what `finish` does with the log.

mod deduplication;
#[cfg(test)]
mod tests;
mod text_hash;

use std::cell::Cell;

use super::field_kind::StrHead;
use super::field_texts::{FieldTexts, ObjectField};
use super::tag;
use super::varint::{varint_len, write_varint};
use super::writer::repeat_tail;

pub use text_hash::text_hash;

/// How a string is written: the two forms of docs/STREAM.md section 5, each with its own way of
/// writing a new string and a reference to a string slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StringForm {
    /// A tagged value: STR (tag, varint length, bytes) or STRREF (tag, varint slot).
    Tagged,
    /// The untagged field of kind STR in a TYPED_OBJECT: a `StrHead` varint, then the bytes of
    /// a new string.
    Typed,
}

impl StringForm {
    /// Writes `text` as a new string; in a body that shares strings, it takes the next string
    /// slot.
    pub fn write_new(self, out: &mut Vec<u8>, text: &[u8]) {
        match self {
            StringForm::Tagged => {
                out.push(tag::STR);
                write_varint(out, text.len() as u64);
            }
            StringForm::Typed => write_varint(out, StrHead::New(text.len() as u64).encode()),
        }
        out.extend_from_slice(text);
    }

    fn write_reference(self, out: &mut Vec<u8>, slot: u64) {
        match self {
            StringForm::Tagged => {
                out.push(tag::STRREF);
                write_varint(out, slot);
            }
            StringForm::Typed => write_varint(out, StrHead::Slot(slot).encode()),
        }
    }

    /// The number of bytes of a reference to `slot`.
    fn reference_len(self, slot: u64) -> usize {
        match self {
            StringForm::Tagged => 1 + varint_len(slot),
            StringForm::Typed => varint_len(StrHead::Slot(slot).encode()),
        }
    }

    /// The number of bytes before the text of a new string of `len` bytes.
    fn head_len(self, len: usize) -> usize {
        match self {
            StringForm::Tagged => 1 + varint_len(len as u64),
            StringForm::Typed => varint_len(StrHead::New(len as u64).encode()),
        }
    }
}

/// Whether a reference to `slot` is written instead of a string of `len` bytes equal to that
/// slot's: when it is shorter (a tag and the varint of the slot against a tag, the varint of the
/// length and the bytes; the same comparison serves the typed form). The rule of writers in
/// docs/STREAM.md section 5.
pub fn reference_is_shorter(slot: u64, len: usize) -> bool {
    varint_len(slot) < varint_len(len as u64) + len
}

/// The strings written into one body so far, in the order written (see the module comment).
///
/// Positions, lengths and counts are kept in 32 bits, half the memory of the log: a body past
/// 4 GiB or 2^32 strings stops logging (`abandoned`) and is left as written, which is valid
/// (every string in full, every reference to a provisional slot that is its real slot) but
/// does not share the strings that repeat by content.
pub struct WrittenStrings {
    /// One per string written in full, its provisional slot being its index.
    texts: Vec<LoggedText>,
    /// One per run of equal references written (`write_references`), in the order written.
    references: Vec<LoggedReference>,
    /// One per string written in full, its provisional slot being its index: the top 32 bits of
    /// its hash, then the index, so that sorting them groups equal hashes in the order written.
    /// `finish` reuses them for the final slots (`final_slots`).
    keys: Vec<u64>,
    /// The number of strings written in full: the next provisional slot.
    strings_in_full: u64,
    abandoned: bool,
    /// The texts written last in each field of the body's objects (`write_field`), by
    /// descriptor and position.
    fields: Vec<Vec<FieldTexts>>,
    /// The log's generation: a rewind starts a new one, in which the places and slots that
    /// `fields` remembered before it may no longer hold their strings. Never 0 (`FieldTexts`'s
    /// empty entries).
    generation: u32,
}

/// A string of the body written in full: `len` bytes of text after its head in `form` at
/// `start`. 8 bytes, the form in the top bit of the length (`WithForm`).
#[derive(Clone, Copy)]
struct LoggedText {
    start: u32,
    len: WithForm,
}

impl LoggedText {
    fn len(&self) -> usize {
        self.len.value() as usize
    }

    fn form(&self) -> StringForm {
        self.len.form()
    }

    fn text_start(&self) -> usize {
        self.start as usize + self.form().head_len(self.len())
    }

    fn end(&self) -> usize {
        self.text_start() + self.len()
    }
}

/// `count` references of the body to provisional slot `slot`, in `form`, one after the other
/// from `start`. 12 bytes, the form in the top bit of the count (`WithForm`).
#[derive(Clone, Copy)]
struct LoggedReference {
    start: u32,
    slot: u32,
    count: WithForm,
}

/// A number below 2^31 and a `StringForm` in one 32-bit word (the form in the top bit), so
/// that the log's entries take 8 and 12 bytes instead of 12 and 16: seed 003's log (50,000
/// records) then fits the size kept for the next body (`MAX_SPARE_LOG_BYTES`), and is not grown
/// again, page by page, for every stream.
#[derive(Clone, Copy)]
struct WithForm(u32);

impl WithForm {
    const TYPED: u32 = 1 << 31;

    /// None if `value` does not fit 31 bits.
    fn new(value: usize, form: StringForm) -> Option<WithForm> {
        let value = u32::try_from(value).ok().filter(|&value| value < Self::TYPED)?;
        Some(WithForm(match form {
            StringForm::Tagged => value,
            StringForm::Typed => value | Self::TYPED,
        }))
    }

    fn value(self) -> u32 {
        self.0 & !Self::TYPED
    }

    fn form(self) -> StringForm {
        if self.0 & Self::TYPED == 0 { StringForm::Tagged } else { StringForm::Typed }
    }
}

/// The state of a `WrittenStrings` at some point of its body, to go back to (`rewind`).
#[derive(Clone, Copy)]
pub struct StringsMark {
    texts: usize,
    references: usize,
    strings_in_full: u64,
    abandoned: bool,
}

thread_local! {
    /// The emptied log of the last `WrittenStrings` dropped on this thread, for the next one to
    /// grow into: a large body's log (20 bytes per string in full, 16 per run of references) allocated
    /// afresh for every stream cost a page fault per 4 KiB appended, and its reallocations
    /// copied it.
    static SPARE_LOG: Cell<Option<Log>> = const { Cell::new(None) };
}

/// The largest log kept for the next body (`SPARE_LOG`), in bytes: the memory a thread keeps
/// after writing a large stream.
const MAX_SPARE_LOG_BYTES: usize = 8 << 20;

/// The vectors of a `WrittenStrings`'s log: texts, references and keys.
type Log = (Vec<LoggedText>, Vec<LoggedReference>, Vec<u64>);

impl Default for WrittenStrings {
    fn default() -> Self {
        let (texts, references, keys) = SPARE_LOG.try_with(Cell::take).ok().flatten().unwrap_or_default();
        WrittenStrings { texts, references, keys, strings_in_full: 0, abandoned: false, fields: Vec::new(), generation: 1 }
    }
}

impl Drop for WrittenStrings {
    fn drop(&mut self) {
        // A log whose doublings took it past the size kept is kept at the size this body used,
        // if that fits, so that the next body of that size does not grow it again from nothing,
        // page fault by page fault and copy by copy: the doublings leave up to half of the room
        // unused (seed 003's log, 50,000 records: 10 MiB of room for 7 MiB of entries).
        if self.log_bytes(true) > MAX_SPARE_LOG_BYTES && self.log_bytes(false) <= MAX_SPARE_LOG_BYTES {
            self.texts.shrink_to_fit();
            self.references.shrink_to_fit();
            self.keys.shrink_to_fit();
        }
        if self.log_bytes(true) <= MAX_SPARE_LOG_BYTES {
            self.clear();
            let log = (std::mem::take(&mut self.texts), std::mem::take(&mut self.references), std::mem::take(&mut self.keys));
            // A thread being torn down keeps nothing.
            let _ = SPARE_LOG.try_with(|spare| spare.set(Some(log)));
        }
    }
}

impl WrittenStrings {
    /// The bytes of the log's entries: those it holds, or with `capacity`, those it has room for.
    fn log_bytes(&self, capacity: bool) -> usize {
        let entries = |len: usize, room: usize| if capacity { room } else { len };
        entries(self.texts.len(), self.texts.capacity()) * size_of::<LoggedText>()
            + entries(self.references.len(), self.references.capacity()) * size_of::<LoggedReference>()
            + entries(self.keys.len(), self.keys.capacity()) * size_of::<u64>()
    }

    /// Starts a new body: slots start again from 0.
    pub fn clear(&mut self) {
        self.texts.clear();
        self.references.clear();
        self.keys.clear();
        self.strings_in_full = 0;
        self.abandoned = false;
        self.fields.clear();
    }

    /// The log as it is now, for `rewind`.
    pub fn mark(&self) -> StringsMark {
        StringsMark {
            texts: self.texts.len(),
            references: self.references.len(),
            strings_in_full: self.strings_in_full,
            abandoned: self.abandoned,
        }
    }

    /// Forgets the strings written since `mark` was taken, whose bytes the caller removes from
    /// the body: the next string takes the first of their slots again.
    pub fn rewind(&mut self, mark: StringsMark) {
        self.texts.truncate(mark.texts);
        self.references.truncate(mark.references);
        self.keys.truncate(mark.texts);
        self.strings_in_full = mark.strings_in_full;
        self.abandoned = mark.abandoned;
        self.next_generation();
    }

    /// Starts a new generation of the log, so that no string remembered by `fields` before it
    /// is found again. At the end of the numbers the tables are emptied instead, so that an
    /// entry of a generation long past never passes for one of the new.
    fn next_generation(&mut self) {
        if self.generation == u32::MAX {
            self.fields.iter_mut().flatten().for_each(FieldTexts::forget);
            self.generation = 0;
        }
        self.generation += 1;
    }

    /// The number of strings written in full since `clear`: the next string's provisional slot.
    pub fn strings_in_full(&self) -> u64 {
        self.strings_in_full
    }

    /// Writes `text` at the end of `out` (the body) in `form`, as a new string. Returns its
    /// provisional slot, which `write_reference` may refer to: `finish` renumbers it.
    pub fn write_new(&mut self, out: &mut Vec<u8>, form: StringForm, text: &[u8]) -> u64 {
        self.write_new_hashed(out, form, text, text_hash(text))
    }

    /// Writes `text`, the value of `field` of an object, at the end of `out` (the body) in
    /// `form`: as a reference when the field wrote an equal string in full recently (see
    /// `field_texts`), else as a new string. Returns the provisional slot of the string, which
    /// `write_reference` may refer to. The body is the same as `write_new`'s once `finish`ed.
    pub fn write_field(&mut self, out: &mut Vec<u8>, form: StringForm, text: &[u8], field: ObjectField) -> u64 {
        let hash = text_hash(text);
        let generation = self.generation;
        if self.abandoned {
            return self.write_new_hashed(out, form, text, hash);
        }
        let texts = self.field_texts(field);
        if texts.retired {
            return self.write_new_hashed(out, form, text, hash);
        }
        if let Some(slot) = texts.find(out, text, hash, generation) {
            self.write_reference(out, form, slot);
            return slot;
        }
        let slot = self.write_new_hashed(out, form, text, hash);
        if !self.abandoned {
            // Not abandoned: the body's length and the slot fit 32 bits.
            let start = (out.len() - text.len()) as u32;
            self.field_texts(field).remember(hash, text, start, slot as u32, generation);
        }
        slot
    }

    /// The table of `field`'s texts, made on first use.
    #[inline]
    fn field_texts(&mut self, field: ObjectField) -> &mut FieldTexts {
        let (descriptor, index) = (field.descriptor as usize, field.index as usize);
        if self.fields.get(descriptor).is_some_and(|of_descriptor| index < of_descriptor.len()) {
            return &mut self.fields[descriptor][index];
        }
        self.new_field_texts(field)
    }

    /// `field_texts` of a field met for the first time in this body.
    #[cold]
    fn new_field_texts(&mut self, field: ObjectField) -> &mut FieldTexts {
        let (descriptor, index) = (field.descriptor as usize, field.index as usize);
        if self.fields.len() <= descriptor {
            self.fields.resize_with(descriptor + 1, Vec::new);
        }
        let of_descriptor = &mut self.fields[descriptor];
        if of_descriptor.len() <= index {
            of_descriptor.resize_with(index + 1, FieldTexts::default);
        }
        &mut of_descriptor[index]
    }

    /// `write_new` with the hash given (tests force collisions with it).
    fn write_new_hashed(&mut self, out: &mut Vec<u8>, form: StringForm, text: &[u8], hash: u64) -> u64 {
        let start = out.len();
        form.write_new(out, text);
        // Counted apart from the log, which stops growing once abandoned.
        let slot = self.strings_in_full;
        self.strings_in_full += 1;
        match (u32::try_from(out.len()), u32::try_from(slot), WithForm::new(text.len(), form)) {
            (Ok(_), Ok(index), Some(len)) if !self.abandoned => {
                // All fit: `start` is below the end.
                self.texts.push(LoggedText { start: start as u32, len });
                self.keys.push(hash & !u64::from(u32::MAX) | u64::from(index));
            }
            _ => self.abandoned = true,
        }
        slot
    }

    /// Writes at the end of `out` a reference in `form` to `slot`, a slot `write_new` returned
    /// for this body.
    pub fn write_reference(&mut self, out: &mut Vec<u8>, form: StringForm, slot: u64) {
        self.write_references(out, form, slot, 1);
    }

    /// Writes at the end of `out` `count` (at least 1) references in `form` to `slot`, one
    /// after the other: the items of a list holding one string object `count` times. They are
    /// logged as one entry (a list of 10,000 repeats logged 10,000 entries, most of its cost).
    pub fn write_references(&mut self, out: &mut Vec<u8>, form: StringForm, slot: u64, count: usize) {
        let start = out.len();
        form.write_reference(out, slot);
        if count > 1 {
            repeat_tail(out, out.len() - start, count - 1);
        }
        match (u32::try_from(out.len()), u32::try_from(slot), WithForm::new(count, form)) {
            (Ok(_), Ok(slot), Some(count)) if !self.abandoned => {
                self.references.push(LoggedReference { start: start as u32, slot, count });
            }
            _ => self.abandoned = true,
        }
    }
}
