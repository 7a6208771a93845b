//! `WrittenStrings::finish`: the strings of a body that repeat an earlier one, found in the log
//! by their hashes and confirmed by their bytes, and the rewrite of the body in place that makes
//! them references (see the module comment of written_strings.rs).

use super::{reference_is_shorter, StringForm, WrittenStrings};
use crate::format::varint::MAX_VARINT_LEN;

impl WrittenStrings {
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
pub(super) enum RepeatFilter {
    /// Few keys: all pass, the bitmap would cost more than it spares.
    All,
    /// The bits set by more than one key, of a bitmap of `mask + 1` bits.
    Again { again: Vec<u64>, mask: usize },
}

impl RepeatFilter {
    /// The filter for `keys`; None when no two keys share their hash bits (nothing repeats).
    pub(super) fn of(keys: &[u64]) -> Option<RepeatFilter> {
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

    pub(super) fn passes(&self, key: u64) -> bool {
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
