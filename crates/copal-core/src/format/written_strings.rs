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

use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;

use super::field_kind::StrHead;
use super::tag;
use super::varint::{varint_len, write_varint, MAX_VARINT_LEN};

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
    events: Vec<Event>,
    /// One per string written in full, its provisional slot being its index: the top 32 bits of
    /// its hash, then the index, so that sorting them groups equal hashes in the order written.
    keys: Vec<u64>,
    /// The number of strings written in full: the next provisional slot.
    strings_in_full: u64,
    abandoned: bool,
}

/// A string of the body as written: `len` bytes of text after the head at `start` (`slot` is
/// `NEW`), or a reference to provisional slot `slot` of `len` bytes at `start`.
#[derive(Clone, Copy)]
struct Event {
    start: u32,
    len: u32,
    slot: u32,
    form: StringForm,
}

/// `Event::slot` of a string written in full.
const NEW: u32 = u32::MAX;

/// The state of a `WrittenStrings` at some point of its body, to go back to (`rewind`).
#[derive(Clone, Copy)]
pub struct StringsMark {
    events: usize,
    keys: usize,
    strings_in_full: u64,
    abandoned: bool,
}

thread_local! {
    /// The emptied log of the last `WrittenStrings` dropped on this thread, for the next one to
    /// grow into: a large body's log (16 bytes per string event) allocated afresh for every
    /// stream cost a page fault per 4 KiB appended, and its reallocations copied it.
    static SPARE_LOG: Cell<Option<(Vec<Event>, Vec<u64>)>> = const { Cell::new(None) };
}

/// The largest log kept for the next body (`SPARE_LOG`), in bytes: the memory a thread keeps
/// after writing a large stream.
const MAX_SPARE_LOG_BYTES: usize = 8 << 20;

impl Default for WrittenStrings {
    fn default() -> Self {
        let (events, keys) = SPARE_LOG.try_with(Cell::take).ok().flatten().unwrap_or_default();
        WrittenStrings { events, keys, strings_in_full: 0, abandoned: false }
    }
}

impl Drop for WrittenStrings {
    fn drop(&mut self) {
        let bytes = self.events.capacity() * size_of::<Event>() + self.keys.capacity() * size_of::<u64>();
        if bytes <= MAX_SPARE_LOG_BYTES {
            self.clear();
            let log = (std::mem::take(&mut self.events), std::mem::take(&mut self.keys));
            // A thread being torn down keeps nothing.
            let _ = SPARE_LOG.try_with(|spare| spare.set(Some(log)));
        }
    }
}

impl WrittenStrings {
    /// Starts a new body: slots start again from 0.
    pub fn clear(&mut self) {
        self.events.clear();
        self.keys.clear();
        self.strings_in_full = 0;
        self.abandoned = false;
    }

    /// The log as it is now, for `rewind`.
    pub fn mark(&self) -> StringsMark {
        StringsMark { events: self.events.len(), keys: self.keys.len(), strings_in_full: self.strings_in_full, abandoned: self.abandoned }
    }

    /// Forgets the strings written since `mark` was taken, whose bytes the caller removes from
    /// the body: the next string takes the first of their slots again.
    pub fn rewind(&mut self, mark: StringsMark) {
        self.events.truncate(mark.events);
        self.keys.truncate(mark.keys);
        self.strings_in_full = mark.strings_in_full;
        self.abandoned = mark.abandoned;
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

    /// `write_new` with the hash given (tests force collisions with it).
    fn write_new_hashed(&mut self, out: &mut Vec<u8>, form: StringForm, text: &[u8], hash: u64) -> u64 {
        let start = out.len();
        form.write_new(out, text);
        // Counted apart from the log, which stops growing once abandoned.
        let slot = self.strings_in_full;
        self.strings_in_full += 1;
        match (u32::try_from(out.len()), u32::try_from(slot)) {
            (Ok(_), Ok(index)) if index != NEW && !self.abandoned => {
                // Both fit: `start` and the length are below the end.
                self.events.push(Event { start: start as u32, len: text.len() as u32, slot: NEW, form });
                self.keys.push(hash & !u64::from(u32::MAX) | u64::from(index));
            }
            _ => self.abandoned = true,
        }
        slot
    }

    /// Writes at the end of `out` a reference in `form` to `slot`, a slot `write_new` returned
    /// for this body.
    pub fn write_reference(&mut self, out: &mut Vec<u8>, form: StringForm, slot: u64) {
        let start = out.len();
        form.write_reference(out, slot);
        match (u32::try_from(out.len()), u32::try_from(slot)) {
            (Ok(_), Ok(slot)) if !self.abandoned => {
                self.events.push(Event { start: start as u32, len: (out.len() - start) as u32, slot, form });
            }
            _ => self.abandoned = true,
        }
    }

    /// Makes `body` (everything written since `clear`, from its first byte) share its equal
    /// strings: see the module comment. Leaves `body` as it is when no string repeats another.
    pub fn finish(&mut self, body: &mut Vec<u8>) {
        if self.abandoned {
            return;
        }
        let Some((groups, group_count)) = self.repeated_texts(body) else { return };
        self.rewrite(body, &groups, group_count);
    }

    /// For each provisional slot, the number of its group of equal texts (`NO_GROUP` for a text
    /// written once), and the number of groups; None when every text is written once.
    fn repeated_texts(&mut self, body: &[u8]) -> Option<(Vec<u32>, usize)> {
        let filter = RepeatFilter::of(&self.keys)?;
        let mut candidates = self.candidates(&filter);
        // Equal hash bits together, in the order written (the index is in the key's low bits).
        candidates.sort_unstable_by_key(|candidate| candidate.key);
        let mut groups: Option<Vec<u32>> = None;
        let mut group_count = 0;
        // The firsts of the distinct texts of one run of equal hashes, in the order written.
        let mut distinct: Vec<&Candidate> = Vec::new();
        for run in candidates.chunk_by(|a, b| a.key >> 32 == b.key >> 32).filter(|run| run.len() > 1) {
            distinct.clear();
            for candidate in run {
                let text = candidate.text(body);
                let Some(earlier) = distinct.iter().find(|earlier| earlier.text(body) == text) else {
                    distinct.push(candidate);
                    continue;
                };
                let groups = groups.get_or_insert_with(|| vec![NO_GROUP; self.keys.len()]);
                let earlier = earlier.key as u32 as usize;
                if groups[earlier] == NO_GROUP {
                    groups[earlier] = group_count as u32;
                    group_count += 1;
                }
                groups[candidate.key as u32 as usize] = groups[earlier];
            }
        }
        groups.map(|groups| (groups, group_count))
    }

    /// The keys that pass `filter` with the places of their texts, in the order written, found
    /// by one pass over the log and the keys in order.
    fn candidates(&self, filter: &RepeatFilter) -> Vec<Candidate> {
        let strings_in_full = self.events.iter().filter(|event| event.slot == NEW);
        strings_in_full
            .zip(&self.keys)
            .filter(|(_, &key)| filter.passes(key))
            .map(|(event, &key)| {
                let len = event.len as usize;
                Candidate { key, start: (event.start as usize + event.form.head_len(len)) as u32, len: event.len }
            })
            .collect()
    }

    /// Rewrites `body` in place with each string that repeats an earlier one (`groups`,
    /// `group_count` groups) written as a reference to the first's final slot where this is
    /// shorter, and every reference renumbered. Final slots count the strings still written in
    /// full, in order, as a reader numbers them.
    ///
    /// In place, because nothing grows: a reference replaces a string only when shorter, and a
    /// renumbered reference names a slot no larger than before, so the rewritten body up to any
    /// event ends no later than the original did. Only the events whose bytes change (repeats
    /// made references, references whose slot moved down) move the bytes between them, in one
    /// copy per change; the part before the first change is not moved at all, and no second
    /// body is allocated (its fresh pages cost a page fault per 4 KiB written).
    fn rewrite(&self, body: &mut Vec<u8>, groups: &[u32], group_count: usize) {
        // For each provisional slot, the final slot a reference to it names: its first
        // occurrence's. Read at random only for the by-address references, which name few
        // strings (a vocabulary of string objects).
        let mut referent: Vec<u64> = Vec::with_capacity(groups.len());
        // For each group, its first occurrence's final slot once written: a small array, for
        // the random reads of the repeats.
        let mut group_slots: Vec<Option<u64>> = vec![None; group_count];
        let mut kept = 0;
        // `body[..written]` is the rewritten body up to `body[unchanged]` of the original, and
        // `body[unchanged..]` is still to rewrite (its next bytes are as they must be, up to the
        // next event that changes); `written <= unchanged` (see above).
        let (mut written, mut unchanged) = (0, 0);
        let mut reference = Vec::with_capacity(MAX_VARINT_LEN + 1);
        let mut replace = |body: &mut Vec<u8>, written: &mut usize, unchanged: &mut usize, event: &Event, end: usize, slot: u64| {
            move_down(body, *unchanged..event.start as usize, written);
            reference.clear();
            event.form.write_reference(&mut reference, slot);
            debug_assert!(*written + reference.len() <= end, "the rewrite overtook the bytes it reads");
            body[*written..*written + reference.len()].copy_from_slice(&reference);
            *written += reference.len();
            *unchanged = end;
        };
        for event in &self.events {
            let start = event.start as usize;
            if event.slot == NEW {
                let len = event.len as usize;
                let group = groups[referent.len()];
                let earlier = (group != NO_GROUP).then(|| group_slots[group as usize].get_or_insert(kept)).copied();
                let slot = earlier.unwrap_or(kept);
                referent.push(slot);
                if slot < kept && reference_is_shorter(slot, len) {
                    replace(body, &mut written, &mut unchanged, event, start + event.form.head_len(len) + len, slot);
                } else {
                    kept += 1;
                }
            } else {
                let slot = referent[event.slot as usize];
                if slot != u64::from(event.slot) {
                    replace(body, &mut written, &mut unchanged, event, start + event.len as usize, slot);
                }
            }
        }
        let end = body.len();
        move_down(body, unchanged..end, &mut written);
        body.truncate(written);
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

/// `WrittenStrings::repeated_texts`'s mark of a text written once.
const NO_GROUP: u32 = u32::MAX;

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
            }
        }
    }

    /// The body `steps` make when each string is looked up by content as it is written (the
    /// encoder's previous design, whose bytes `finish` must reproduce): a string equal to an
    /// earlier one is a reference to the first one's slot when shorter.
    fn written_directly(steps: &[Step]) -> Vec<u8> {
        let (mut body, mut first_slots, mut provisional) = (Vec::new(), HashMap::new(), Vec::new());
        let mut slots = 0;
        for step in steps {
            let (form, text) = match step {
                Step::Other(bytes) => {
                    body.extend_from_slice(bytes);
                    continue;
                }
                Step::New(form, text, _) => {
                    provisional.push(text.clone());
                    (*form, text.clone())
                }
                Step::Reference(form, slot) => (*form, provisional[*slot as usize].clone()),
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

    #[test]
    fn strings_written_after_a_mark_and_rewound_leave_no_trace() {
        // Before the mark: "a", "b". After it, abandoned: a repeat of "a", a new "c", a
        // reference to "c" and other bytes. Then, written again from the mark: "c" (taking the
        // abandoned "c"'s slot), "b" and a reference to "c".
        let before = [new(Tagged, "a"), Step::Other(b"\x01"), new(Typed, "b")];
        let abandoned = [new(Typed, "a"), new(Tagged, "c"), Step::Reference(Typed, 3), Step::Other(b"\x02\x03")];
        let after = [new(Tagged, "c"), new(Typed, "b"), Step::Reference(Tagged, 2)];
        let (mut strings, mut body) = (WrittenStrings::default(), Vec::new());
        write_steps(&mut strings, &mut body, &before);
        let (mark, len) = (strings.mark(), body.len());
        write_steps(&mut strings, &mut body, &abandoned);
        strings.rewind(mark);
        body.truncate(len);
        assert_eq!(strings.strings_in_full(), 2);
        write_steps(&mut strings, &mut body, &after);
        strings.finish(&mut body);
        let unbroken: Vec<Step> = before.iter().chain(&after).cloned().collect();
        assert_eq!(body, same_as_direct(&unbroken));
    }

    #[test]
    fn a_log_kept_for_the_next_body_starts_empty() {
        let steps: Vec<Step> = (0..2000).map(|i| new(Tagged, &format!("s{}", i % 700))).collect();
        let first = deduplicated(&steps);
        // The log of the first body was kept for this thread's next one.
        let strings = WrittenStrings::default();
        assert!(strings.events.capacity() >= 2000 && strings.events.is_empty() && strings.keys.is_empty());
        assert_eq!(strings.strings_in_full(), 0);
        drop(strings);
        assert_eq!(deduplicated(&steps), first);
        assert_eq!(first, written_directly(&steps));
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
            let text = if pick % 7 == 0 { format!("unique-{i}") } else { "v".repeat(vocabulary % 5 + 1) + &vocabulary.to_string() };
            provisional.push(text.clone());
            steps.push(new(form, &text));
        }
        assert!(provisional.len() > 16384);
        same_as_direct(&steps);
    }
}
