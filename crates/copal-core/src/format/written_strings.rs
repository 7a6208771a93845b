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

use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;

use super::field_kind::StrHead;
use super::field_texts::{FieldTexts, ObjectField};
use super::tag;
use super::varint::{varint_len, write_varint, MAX_VARINT_LEN};
use super::writer::repeat_tail;

/// The hash of a string's UTF-8 bytes for `WrittenStrings::find`.
///
/// Python's own string hash (SipHash-1-3, computed on first use and cached in the string) costs
/// about 20 ns on the short strings records are made of, and most strings a stream writes are
/// fresh objects that were never hashed. This multiply-fold hash reads 8 bytes per step. It is
/// keyed with a random number per process, as Python's is, so that input chosen to collide in
/// one process does not collide in another; collisions only cost time, never correctness, as
/// every match is confirmed by comparing the bytes.
pub fn text_hash(bytes: &[u8]) -> u64 {
    const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut hash = process_key() ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        hash = folded_multiply(hash ^ u64::from_le_bytes(word.try_into().expect("chunks of 8 bytes")), MULTIPLIER);
    }
    folded_multiply(hash ^ tail_word(bytes, words.remainder().len()), MULTIPLIER)
}

/// The last `rest` (0 to 7) bytes of `bytes` as one word, read without copying them to a buffer
/// first (a copy then a wider load stalls on store forwarding, which cost more than the rest of
/// the hash). Past 8 bytes, the last 8 bytes (overlapping the last full word); with the length
/// mixed in, no two strings of one length give the same words.
fn tail_word(bytes: &[u8], rest: usize) -> u64 {
    let len = bytes.len();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let half = |at: usize| u64::from(u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")));
    match (rest, len) {
        (0, _) => 0,
        (_, 8..) => word(len - 8),
        (4.., _) => half(0) | half(len - 4) << 32,
        _ => u64::from(bytes[0]) | u64::from(bytes[len / 2]) << 8 | u64::from(bytes[len - 1]) << 16,
    }
}

/// The full 128-bit product folded onto 64 bits: every bit of the result depends on every bit
/// of both factors (as in foldhash and aHash).
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

fn process_key() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    // RandomState draws its keys from the operating system once per thread.
    *KEY.get_or_init(|| RandomState::new().hash_one(0x636f_7061_6c00_u64))
}


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

    /// Makes `body` (everything written since `clear`, from its first byte) share its equal
    /// strings: see the module comment. Leaves `body` as it is when no string repeats another.
    pub fn finish(&mut self, body: &mut Vec<u8>) {
        if self.abandoned || !self.mark_repeats(body) {
            return;
        }
        let repeats = self.final_slots();
        self.rewrite(body, &repeats);
    }

    /// Finds the texts that repeat an earlier one, and points the key of each at its first
    /// occurrence: its low 32 bits become that occurrence's provisional slot (smaller than its
    /// own, which the key of a text written once keeps). False when every text is written once.
    fn mark_repeats(&mut self, body: &[u8]) -> bool {
        let Some(filter) = RepeatFilter::of(&self.keys) else { return false };
        let mut candidates = self.candidates(&filter);
        // Equal hash bits together, in the order written (the index is in the key's low bits).
        candidates.sort_unstable_by_key(|candidate| candidate.key);
        let mut any = false;
        // The firsts of the distinct texts of one run of equal hashes, in the order written.
        let mut distinct: Vec<&Candidate> = Vec::new();
        for run in candidates.chunk_by(|a, b| a.key >> 32 == b.key >> 32).filter(|run| run.len() > 1) {
            distinct.clear();
            for candidate in run {
                let text = candidate.text(body);
                match distinct.iter().find(|earlier| earlier.text(body) == text) {
                    Some(earlier) => {
                        self.keys[candidate.key as u32 as usize] = u64::from(earlier.key as u32);
                        any = true;
                    }
                    None => distinct.push(candidate),
                }
            }
        }
        any
    }

    /// The keys that pass `filter` with the places of their texts, in the order written: the
    /// few that pass are looked up in the log by their index, in increasing order.
    fn candidates(&self, filter: &RepeatFilter) -> Vec<Candidate> {
        self.keys
            .iter()
            .filter(|&&key| filter.passes(key))
            .map(|&key| {
                let text = &self.texts[key as u32 as usize];
                Candidate { key, start: text.text_start() as u32, len: text.len() as u32 }
            })
            .collect()
    }

    /// Replaces each key (marked by `mark_repeats`) by the final slot that a reference to its
    /// provisional slot names: a text kept in full takes the next slot, in order, as a reader
    /// numbers them; a repeat names its first occurrence's. Returns the repeats made references
    /// (those whose reference is shorter, the writer's rule of docs/STREAM.md section 5), in
    /// the order written; the others stay in full and take a slot.
    fn final_slots(&mut self) -> Vec<Change> {
        let mut repeats = Vec::new();
        let mut kept = 0;
        for (slot, text) in self.texts.iter().enumerate() {
            let first = self.keys[slot] as u32 as usize;
            if first == slot {
                self.keys[slot] = kept;
                kept += 1;
                continue;
            }
            // The first occurrence was written earlier, so its key is already its final slot.
            let referent = self.keys[first];
            self.keys[slot] = referent;
            if reference_is_shorter(referent, text.len()) {
                repeats.push(Change { start: text.start, end: text.end() as u32, form: text.form(), slot: referent, count: 1 });
            } else {
                kept += 1;
            }
        }
        repeats
    }

    /// Rewrites `body` in place with each of `repeats` written as a reference, and every
    /// reference renumbered to the final slot (`final_slots`) of the slot it named.
    ///
    /// In place, because nothing grows: a reference replaces a string only when shorter, and a
    /// renumbered reference names a slot no larger than before, so the rewritten body up to any
    /// change ends no later than the original did. Only the strings whose bytes change (repeats
    /// made references, references whose slot moved down) move the bytes between them, in one
    /// copy per change; the part before the first change is not moved at all, and no second
    /// body is allocated (its fresh pages cost a page fault per 4 KiB written). The strings
    /// kept in full are not visited at all: only the repeats and the references, merged in the
    /// order written.
    fn rewrite(&self, body: &mut Vec<u8>, repeats: &[Change]) {
        let mut rewrite = Rewrite { written: 0, unchanged: 0, reference: Vec::with_capacity(MAX_VARINT_LEN + 1) };
        let mut repeats = repeats.iter().peekable();
        for reference in &self.references {
            while let Some(repeat) = repeats.next_if(|repeat| repeat.start < reference.start) {
                rewrite.replace(body, repeat);
            }
            let slot = self.keys[reference.slot as usize];
            if slot != u64::from(reference.slot) {
                let (form, count) = (reference.count.form(), reference.count.value());
                let len = form.reference_len(u64::from(reference.slot)) * count as usize;
                let change = Change { start: reference.start, end: reference.start + len as u32, form, slot, count };
                rewrite.replace(body, &change);
            }
        }
        repeats.for_each(|repeat| rewrite.replace(body, repeat));
        let end = body.len();
        move_down(body, rewrite.unchanged..end, &mut rewrite.written);
        body.truncate(rewrite.written);
    }
}

/// `count` references to final slot `slot`, in `form`, to write in place of the bytes
/// `start..end` of the body (a repeated string, or a run of references renumbered).
struct Change {
    start: u32,
    end: u32,
    form: StringForm,
    slot: u64,
    count: u32,
}

/// The state of `WrittenStrings::rewrite`: `body[..written]` is the rewritten body up to
/// `body[unchanged]` of the original, and `body[unchanged..]` is still to rewrite (its next
/// bytes are as they must be, up to the next change); `written <= unchanged`.
struct Rewrite {
    written: usize,
    unchanged: usize,
    /// The bytes of the reference being written.
    reference: Vec<u8>,
}

impl Rewrite {
    fn replace(&mut self, body: &mut [u8], change: &Change) {
        move_down(body, self.unchanged..change.start as usize, &mut self.written);
        self.reference.clear();
        change.form.write_reference(&mut self.reference, change.slot);
        let len = self.reference.len();
        debug_assert!(self.written + len * change.count as usize <= change.end as usize, "the rewrite overtook the bytes it reads");
        for _ in 0..change.count {
            body[self.written..self.written + len].copy_from_slice(&self.reference);
            self.written += len;
        }
        self.unchanged = change.end as usize;
    }
}

/// Moves the bytes `from` of `body` down to `*to` (no further than `from.start`), and advances
/// `*to` past them. Bytes already in place are not copied.
fn move_down(body: &mut [u8], from: std::ops::Range<usize>, to: &mut usize) {
    if from.start != *to {
        body.copy_within(from.clone(), *to);
    }
    *to += from.len();
}

/// A string that may repeat another: its key (hash bits and provisional slot) and the place of
/// its text in the body, beside each other so that the runs of equal hashes are compared without
/// looking up a table at random.
struct Candidate {
    key: u64,
    start: u32,
    len: u32,
}

impl Candidate {
    fn text<'a>(&self, body: &'a [u8]) -> &'a [u8] {
        &body[self.start as usize..(self.start + self.len) as usize]
    }
}

/// Which keys may repeat another's hash bits. Sorting every key would take most of the time of
/// `finish` on a stream of distinct strings (7 ms for 300,000 keys, a tenth of the encoding):
/// instead each key's hash bits set a bit in a bitmap of eight bits per key (a few hundred KiB,
/// which stay in the cache), and only the keys whose bit was set by another key pass, about one
/// in eight when all hashes differ.
enum RepeatFilter {
    /// Few keys: all pass, the bitmap would cost more than it spares.
    All,
    /// The bits set by more than one key, of a bitmap of `mask + 1` bits.
    Again { again: Vec<u64>, mask: usize },
}

impl RepeatFilter {
    /// The filter for `keys`; None when no two keys share their hash bits (nothing repeats).
    fn of(keys: &[u64]) -> Option<RepeatFilter> {
        if keys.len() < FILTER_FROM {
            return Some(RepeatFilter::All);
        }
        let mask = (keys.len() * 8).next_power_of_two() - 1;
        let (mut seen, mut again) = (vec![0u64; (mask + 1) / 64], vec![0u64; (mask + 1) / 64]);
        let mut any_again = false;
        for &key in keys {
            let (word, bit) = bit_of(key, mask);
            any_again |= seen[word] & bit != 0;
            again[word] |= seen[word] & bit;
            seen[word] |= bit;
        }
        any_again.then_some(RepeatFilter::Again { again, mask })
    }

    fn passes(&self, key: u64) -> bool {
        match self {
            RepeatFilter::All => true,
            RepeatFilter::Again { again, mask } => {
                let (word, bit) = bit_of(key, *mask);
                again[word] & bit != 0
            }
        }
    }
}

/// The word and the bit within it of `key`'s hash bits in a bitmap of `mask + 1` bits.
fn bit_of(key: u64, mask: usize) -> (usize, u64) {
    let bit = (key >> 32) as usize & mask;
    (bit / 64, 1 << (bit % 64))
}

/// Fewer keys are all sorted: the bitmap would cost more than it spares.
const FILTER_FROM: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// One step of writing a body: other bytes, a string written in full (with the hash the
    /// table is given), or a reference to a provisional slot (the encoder's by-address level).
    #[derive(Clone)]
    enum Step {
        Other(&'static [u8]),
        New(StringForm, String, u64),
        Reference(StringForm, u64),
        /// That many references to a provisional slot, one after the other (`write_references`).
        References(StringForm, u64, usize),
        /// A string written as the value of a field of an object (`write_field`).
        Field(StringForm, String, ObjectField),
    }

    fn field(form: StringForm, text: &str, descriptor: u32, index: u32) -> Step {
        Step::Field(form, text.to_owned(), ObjectField { descriptor, index })
    }

    fn new(form: StringForm, text: &str) -> Step {
        Step::New(form, text.to_owned(), text_hash(text.as_bytes()))
    }

    /// The body `steps` make, deduplicated by `finish`.
    fn deduplicated(steps: &[Step]) -> Vec<u8> {
        let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
        write_steps(&mut strings, &mut body, steps);
        strings.finish(&mut body);
        body
    }

    fn write_steps(strings: &mut WrittenStrings, body: &mut Vec<u8>, steps: &[Step]) {
        for step in steps {
            match step {
                Step::Other(bytes) => body.extend_from_slice(bytes),
                Step::New(form, text, hash) => {
                    strings.write_new_hashed(body, *form, text.as_bytes(), *hash);
                }
                Step::Reference(form, slot) => strings.write_reference(body, *form, *slot),
                Step::References(form, slot, count) => strings.write_references(body, *form, *slot, *count),
                Step::Field(form, text, field) => {
                    strings.write_field(body, *form, text.as_bytes(), *field);
                }
            }
        }
    }

    /// The body `steps` make when each string is looked up by content as it is written (the
    /// encoder's previous design, whose bytes `finish` must reproduce): a string equal to an
    /// earlier one is a reference to the first one's slot when shorter.
    fn written_directly(steps: &[Step]) -> Vec<u8> {
        let (mut body, mut first_slots, mut provisional) = (Vec::new(), HashMap::new(), Vec::new());
        let mut slots = 0;
        let expanded = steps.iter().flat_map(|step| match step {
            Step::References(form, slot, count) => vec![Step::Reference(*form, *slot); *count],
            other => vec![other.clone()],
        });
        for step in &expanded.collect::<Vec<_>>() {
            let (form, text) = match step {
                Step::Other(bytes) => {
                    body.extend_from_slice(bytes);
                    continue;
                }
                Step::New(form, text, _) | Step::Field(form, text, _) => {
                    provisional.push(text.clone());
                    (*form, text.clone())
                }
                Step::Reference(form, slot) => (*form, provisional[*slot as usize].clone()),
                Step::References(..) => unreachable!("expanded above"),
            };
            match first_slots.get(&text) {
                Some(&slot) if reference_is_shorter(slot, text.len()) => form.write_reference(&mut body, slot),
                found => {
                    form.write_new(&mut body, text.as_bytes());
                    if found.is_none() {
                        first_slots.insert(text, slots);
                    }
                    slots += 1;
                }
            }
        }
        body
    }

    /// The strings of a body made of strings only, read as a reader does (slots taken in order).
    fn read_strings(body: &[u8], forms: &[StringForm]) -> Vec<String> {
        let (mut at, mut slots, mut strings) = (0, Vec::<String>::new(), Vec::new());
        let varint = |at: &mut usize| {
            let (mut value, mut shift) = (0u64, 0);
            loop {
                let byte = body[*at];
                *at += 1;
                value |= u64::from(byte & 0x7f) << shift;
                shift += 7;
                if byte < 0x80 {
                    return value;
                }
            }
        };
        for form in forms {
            let head = match form {
                StringForm::Tagged => {
                    at += 1;
                    let head = varint(&mut at);
                    if body[at - 1 - varint_len(head)] == tag::STR { StrHead::New(head) } else { StrHead::Slot(head) }
                }
                StringForm::Typed => StrHead::decode(varint(&mut at)),
            };
            let text = match head {
                StrHead::New(len) => {
                    let text = String::from_utf8(body[at..at + len as usize].to_vec()).unwrap();
                    at += len as usize;
                    slots.push(text.clone());
                    text
                }
                StrHead::Slot(slot) => slots[slot as usize].clone(),
            };
            strings.push(text);
        }
        assert_eq!(at, body.len(), "nothing follows the strings");
        strings
    }

    /// Checks that `finish` writes what direct lookups would, and returns that body.
    fn same_as_direct(steps: &[Step]) -> Vec<u8> {
        let body = deduplicated(steps);
        assert_eq!(body, written_directly(steps));
        body
    }

    use StringForm::{Tagged, Typed};

    /// The keys of `keys` that pass their filter, in their order.
    fn possible_repeats(keys: &[u64]) -> Vec<u64> {
        RepeatFilter::of(keys).map_or_else(Vec::new, |filter| keys.iter().copied().filter(|&key| filter.passes(key)).collect())
    }

    #[test]
    fn keys_whose_hash_bits_repeat_are_all_kept() {
        // Hash bits from a small range, so that many repeat; every one of those must be kept.
        let mut state = 7u64;
        let keys: Vec<u64> = (0..5000u64)
            .map(|index| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 52) << 32 | index
            })
            .collect();
        let repeated: Vec<u64> = {
            let mut counts = HashMap::new();
            for key in &keys {
                *counts.entry(key >> 32).or_insert(0) += 1;
            }
            let mut repeated: Vec<u64> = keys.iter().copied().filter(|key| counts[&(key >> 32)] > 1).collect();
            repeated.sort_unstable();
            repeated
        };
        let kept = possible_repeats(&keys);
        assert!(kept.windows(2).all(|pair| (pair[0] as u32) < (pair[1] as u32)), "in the order written");
        let mut kept = kept;
        kept.sort_unstable();
        let mut kept_repeated = kept.iter().copied().filter(|key| repeated.binary_search(key).is_ok());
        assert!(repeated.iter().all(|key| kept_repeated.next() == Some(*key)));
        // Distinct hash bits: nothing to compare.
        let distinct: Vec<u64> = (0..5000u64).map(|index| text_hash(&index.to_le_bytes()) & !u64::from(u32::MAX) | index).collect();
        assert!(possible_repeats(&distinct).len() < distinct.len() / 4);
    }

    #[test]
    fn an_abandoned_log_still_numbers_slots_and_leaves_the_body_as_written() {
        let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
        strings.write_new(&mut body, Tagged, b"a");
        // As a body past 4 GiB does: the log stops, the slots go on.
        strings.abandoned = true;
        assert_eq!(strings.write_new(&mut body, Tagged, b"a"), 1);
        assert_eq!(strings.write_new(&mut body, Typed, b"b"), 2);
        strings.write_reference(&mut body, Tagged, 2);
        let written = body.clone();
        strings.finish(&mut body);
        assert_eq!(body, written);
        assert_eq!(read_strings(&body, &[Tagged, Tagged, Typed, Tagged]), ["a", "a", "b", "b"]);
    }

    /// The body of `before`, `abandoned` (written after a mark, then rewound and its bytes
    /// removed) and `after`, finished, with the log that wrote it.
    fn rewound(before: &[Step], abandoned: &[Step], after: &[Step]) -> (WrittenStrings, Vec<u8>) {
        let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
        write_steps(&mut strings, &mut body, before);
        let (mark, len) = (strings.mark(), body.len());
        write_steps(&mut strings, &mut body, abandoned);
        strings.rewind(mark);
        body.truncate(len);
        write_steps(&mut strings, &mut body, after);
        strings.finish(&mut body);
        (strings, body)
    }

    #[test]
    fn strings_written_after_a_mark_and_rewound_leave_no_trace() {
        // Before the mark: "a", "b". After it, abandoned: a repeat of "a", a new "c", a
        // reference to "c" and other bytes. Then, written again from the mark: "c" (taking the
        // abandoned "c"'s slot), "b" and a reference to "c".
        let before = [new(Tagged, "a"), Step::Other(b"\x01"), new(Typed, "b")];
        let abandoned = [new(Typed, "a"), new(Tagged, "c"), Step::Reference(Typed, 3), Step::Other(b"\x02\x03")];
        let after = [new(Tagged, "c"), new(Typed, "b"), Step::Reference(Tagged, 2)];
        let (strings, body) = rewound(&before, &abandoned, &after);
        assert_eq!(strings.strings_in_full(), 4, "the abandoned strings' slots were taken again");
        let unbroken: Vec<Step> = before.iter().chain(&after).cloned().collect();
        assert_eq!(body, same_as_direct(&unbroken));
    }

    #[test]
    fn a_log_kept_for_the_next_body_starts_empty() {
        let steps: Vec<Step> = (0..2000).map(|i| new(Tagged, &format!("s{}", i % 700))).collect();
        let first = deduplicated(&steps);
        // The log of the first body was kept for this thread's next one.
        let strings = WrittenStrings::default();
        assert!(strings.texts.capacity() >= 2000 && strings.texts.is_empty() && strings.references.is_empty() && strings.keys.is_empty());
        assert_eq!(strings.strings_in_full(), 0);
        drop(strings);
        assert_eq!(deduplicated(&steps), first);
        assert_eq!(first, written_directly(&steps));
    }

    #[test]
    fn a_log_grown_past_the_size_kept_is_kept_at_the_size_it_used() {
        let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
        for i in 0..300_000 {
            strings.write_new(&mut body, Tagged, format!("s{i}").as_bytes());
        }
        (0..200_000).for_each(|_| strings.write_reference(&mut body, Typed, 7));
        let used = strings.log_bytes(false);
        assert!(strings.log_bytes(true) > MAX_SPARE_LOG_BYTES && used <= MAX_SPARE_LOG_BYTES);
        drop(strings);
        let next = WrittenStrings::default();
        assert!(next.texts.is_empty() && next.references.is_empty() && next.keys.is_empty());
        assert!((used..=MAX_SPARE_LOG_BYTES).contains(&next.log_bytes(true)), "{} bytes of room kept", next.log_bytes(true));
    }

    #[test]
    fn numbers_keep_their_form_in_one_word() {
        for value in [0, 1, 300, (1 << 31) - 1] {
            for form in [Tagged, Typed] {
                let packed = WithForm::new(value, form).expect("below 2^31");
                assert_eq!((packed.value() as usize, packed.form()), (value, form));
            }
        }
        // Larger numbers leave the body as written (`abandoned`).
        assert!(WithForm::new(1 << 31, Tagged).is_none() && WithForm::new(usize::MAX, Typed).is_none());
    }

    #[test]
    fn distinct_strings_are_left_as_written() {
        let steps: Vec<Step> = (0..300).map(|i| new(if i % 2 == 0 { Tagged } else { Typed }, &format!("s{i}"))).collect();
        let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
        for (slot, step) in steps.iter().enumerate() {
            let Step::New(form, text, _) = step else { unreachable!() };
            assert_eq!(strings.write_new(&mut body, *form, text.as_bytes()), slot as u64);
        }
        let written = body.clone();
        strings.finish(&mut body);
        assert_eq!(body, written);
    }

    #[test]
    fn repeats_become_references_to_the_first_and_later_slots_move_down() {
        let steps = [new(Tagged, "red"), new(Typed, "green"), new(Typed, "red"), new(Tagged, "blue"), new(Tagged, "green"), new(Typed, "blue")];
        let body = same_as_direct(&steps);
        // red: slot 0, green: 1, red again: STRREF 0 (typed head 1), blue: slot 2 (3 provisionally).
        assert_eq!(body, b"\x07\x03red\x0agreen\x01\x07\x04blue\x1b\x01\x05");
        let forms: Vec<StringForm> = steps.iter().map(|step| match step { Step::New(form, ..) => *form, _ => unreachable!() }).collect();
        assert_eq!(read_strings(&body, &forms), ["red", "green", "red", "blue", "green", "blue"]);
    }

    #[test]
    fn references_to_provisional_slots_are_renumbered() {
        // "b" repeats "a"'s text, so "c" moves from provisional slot 3 to slot 2; the references
        // to 1 ("b", a repeat) and 3 name the first occurrences' final slots.
        let steps = [new(Tagged, "a"), new(Tagged, "x"), new(Typed, "a"), new(Tagged, "c"), Step::Reference(Tagged, 2), Step::Reference(Typed, 3)];
        let body = same_as_direct(&steps);
        assert_eq!(read_strings(&body, &[Tagged, Tagged, Typed, Tagged, Tagged, Typed]), ["a", "x", "a", "c", "a", "c"]);
        assert_eq!(&body[body.len() - 3..], b"\x1b\x00\x05");
    }

    #[test]
    fn runs_of_references_are_renumbered_as_single_references_are() {
        // "s7" again is a repeat, so "c" moves from provisional slot 128 to 127, and each run of
        // references to it is rewritten one byte shorter per reference (a two-byte varint becomes
        // one); the runs to slots before the repeat are left as written.
        let mut steps: Vec<Step> = (0..126).map(|i| new(Tagged, &format!("s{i}"))).collect();
        steps.extend([new(Tagged, "a"), new(Typed, "s7"), new(Tagged, "c"), Step::References(Tagged, 128, 5)]);
        steps.extend([Step::References(Typed, 0, 3), Step::References(Tagged, 126, 1), new(Typed, "c"), Step::References(Typed, 128, 4)]);
        let body = same_as_direct(&steps);
        let forms = [vec![Tagged; 127], vec![Typed], vec![Tagged; 6], vec![Typed; 3], vec![Tagged], vec![Typed; 5]].concat();
        let mut expected: Vec<String> = (0..126).map(|i| format!("s{i}")).collect();
        expected.extend(["a", "s7", "c", "c", "c", "c", "c", "c", "s0", "s0", "s0", "a", "c", "c", "c", "c", "c"].map(String::from));
        assert_eq!(read_strings(&body, &forms), expected);
    }

    #[test]
    fn colliding_hashes_are_told_apart_by_their_bytes() {
        let texts = ["north", "south", "north", "east", "south", "north"];
        let steps: Vec<Step> = texts.iter().map(|text| Step::New(Tagged, text.to_string(), 42 << 32)).collect();
        let body = same_as_direct(&steps);
        assert_eq!(read_strings(&body, &[Tagged; 6]), texts);
        assert_eq!(body.len(), 7 + 7 + 6 + 3 * 2, "three distinct strings, three references");
        // Equal top bits with different low bits collide too (keys keep the top 32 bits).
        let steps = [Step::New(Typed, "up".into(), 42 << 32 | 7), Step::New(Typed, "down".into(), 42 << 32), Step::New(Typed, "up".into(), 42 << 32)];
        assert_eq!(read_strings(&same_as_direct(&steps), &[Typed; 3]), ["up", "down", "up"]);
    }

    #[test]
    fn a_repeat_whose_reference_is_longer_is_written_again_and_takes_a_slot() {
        // "x" first at slot 200: a STRREF (tag and 2 bytes) is longer than the STR (3 bytes).
        let mut steps: Vec<Step> = (0..200).map(|i| new(Tagged, &format!("s{i}"))).collect();
        steps.extend([new(Tagged, "x"), new(Tagged, "x"), new(Tagged, "y"), new(Tagged, "y"), new(Tagged, "s5")]);
        let body = same_as_direct(&steps);
        // "x" again takes slot 201, so "y" is 202, and its repeat a STR too; "s5" a STRREF.
        assert!(body.ends_with(b"\x07\x01x\x07\x01x\x07\x01y\x07\x01y\x1b\x05"));
    }

    #[test]
    fn many_repeats_of_one_string_and_repeats_at_the_end_of_the_body() {
        let mut steps = vec![Step::Other(b"\x01\x02"), new(Typed, "same")];
        for i in 0..1000 {
            steps.push(if i % 3 == 0 { Step::Other(b"\x03") } else { new(if i % 2 == 0 { Tagged } else { Typed }, "same") });
        }
        steps.push(new(Tagged, "last"));
        steps.push(new(Tagged, "last"));
        let body = same_as_direct(&steps);
        assert!(body.ends_with(b"\x07\x04last\x1b\x01"));
        assert!(body.len() < 1000 * 2 + 20);
    }

    #[test]
    fn bodies_of_mixed_strings_match_direct_lookups() {
        // Texts from a vocabulary of 40 of several lengths and unique ones, past slots 127 and
        // 16383 (two- and three-byte varints), references to provisional slots of repeats and
        // of firsts, and other bytes between them.
        let (mut steps, mut provisional) = (Vec::new(), Vec::<String>::new());
        let mut state = 12345u64;
        for i in 0..40_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let pick = (state >> 33) as usize;
            let form = if pick & 1 == 0 { Tagged } else { Typed };
            if pick % 5 == 1 {
                steps.push(Step::Other(b"\x00"));
            }
            if pick % 5 == 2 && !provisional.is_empty() {
                let slot = (pick / 5) % provisional.len();
                if reference_is_shorter(slot as u64, provisional[slot].len()) {
                    steps.push(Step::Reference(form, slot as u64));
                    continue;
                }
            }
            let vocabulary = pick / 8 % 40;
            let text = if pick.is_multiple_of(7) { format!("unique-{i}") } else { "v".repeat(vocabulary % 5 + 1) + &vocabulary.to_string() };
            provisional.push(text.clone());
            steps.push(new(form, &text));
        }
        assert!(provisional.len() > 16384);
        same_as_direct(&steps);
    }

    #[test]
    fn repeats_in_a_field_are_references_as_written_and_the_body_is_the_same() {
        // Two classes whose fields repeat a vocabulary (the same texts in two fields, and in a
        // field of another class), beside a field of distinct values and tagged strings.
        let mut steps = Vec::new();
        for i in 0..3000 {
            let city = format!("city-{}", i % 37);
            steps.push(field(Typed, &city, 0, 1));
            steps.push(field(Typed, &format!("mail-{i}@example.org"), 0, 2));
            steps.push(field(Typed, &city, 1, 0));
            steps.push(Step::Other(b"\x05"));
            steps.push(new(Tagged, &format!("street-{}", i % 300)));
            steps.push(field(Tagged, &format!("city-{}", i % 41), 0, 3));
        }
        let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
        write_steps(&mut strings, &mut body, &steps);
        // Most repeats of the cities never reached the log of texts in full (15,000 strings
        // otherwise; those that did collided in a direct-mapped table).
        assert!(strings.texts.len() < 3000 + 3000 + 2000, "{} texts in full", strings.texts.len());
        strings.finish(&mut body);
        assert_eq!(body, written_directly(&steps));
    }

    #[test]
    fn texts_that_look_alike_are_not_taken_for_each_other() {
        // Prefixes, one byte apart, equal bytes of another length, empty, non-ASCII: each in
        // one field, each written twice, and the first a prefix of what follows it.
        let texts = ["ab", "abc", "abd", "", "a", "ab\u{e9}", "ab\u{e8}", "abc", "ab"];
        let mut steps: Vec<Step> = texts.iter().map(|text| field(Typed, text, 0, 0)).collect();
        steps.extend(texts.iter().rev().map(|text| field(Tagged, text, 0, 0)));
        let body = same_as_direct(&steps);
        let forms: Vec<StringForm> = (0..texts.len()).map(|_| Typed).chain((0..texts.len()).map(|_| Tagged)).collect();
        let read: Vec<String> = texts.iter().chain(texts.iter().rev()).map(|text| text.to_string()).collect();
        assert_eq!(read_strings(&body, &forms), read);
    }

    #[test]
    fn a_rewind_forgets_what_the_fields_remembered() {
        // "lost" is written in a field after the mark and rewound; "kept" before it. Then other
        // bytes and strings take the place and the slot of "lost", and the field writes "lost"
        // and "kept" again: "lost" must be new (its old place now holds "here"), "kept" may not
        // be found by the field any more (a new generation) but is shared by `finish`.
        let before = [field(Typed, "kept", 0, 0)];
        let abandoned = [field(Typed, "lost", 0, 0), field(Typed, "lost", 0, 0)];
        let after = [new(Typed, "here"), field(Typed, "lost", 0, 0), field(Typed, "kept", 0, 0), field(Typed, "lost", 0, 0)];
        let (_, body) = rewound(&before, &abandoned, &after);
        let unbroken: Vec<Step> = before.iter().chain(&after).cloned().collect();
        assert_eq!(body, same_as_direct(&unbroken));
        assert_eq!(read_strings(&body, &[Typed; 5]), ["kept", "here", "lost", "kept", "lost"]);
    }

    #[test]
    fn generations_past_the_last_number_start_again_with_empty_tables() {
        let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
        strings.write_field(&mut body, Typed, b"old", ObjectField { descriptor: 0, index: 0 });
        let mark = strings.mark();
        strings.generation = u32::MAX - 1;
        strings.rewind(mark);
        strings.rewind(mark);
        assert_eq!(strings.generation, 1);
        // The entry of "old" (generation 1) was emptied: not taken for the new generation 1.
        strings.write_field(&mut body, Typed, b"old", ObjectField { descriptor: 0, index: 0 });
        assert_eq!(strings.texts.len(), 2);
        strings.finish(&mut body);
        assert_eq!(read_strings(&body, &[Typed; 2]), ["old", "old"]);
    }

    #[test]
    fn many_distinct_strings_in_fields_retire_them_and_vocabularies_keep_theirs() {
        let (mut steps, mut state) = (Vec::new(), 7u64);
        for i in 0..40_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            steps.push(field(Typed, &format!("distinct-{i}"), 2, 0));
            steps.push(field(Typed, &format!("vocabulary-{}", (state >> 33) % 3000), 2, 1));
            if i % 1000 == 0 {
                // A repeat of a distinct value, far from its first occurrence.
                steps.push(field(Typed, &format!("distinct-{}", i / 2), 2, 0));
            }
        }
        let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
        write_steps(&mut strings, &mut body, &steps);
        assert!(strings.fields[2][0].retired && !strings.fields[2][1].retired);
        strings.finish(&mut body);
        assert_eq!(body, written_directly(&steps));
    }
}
