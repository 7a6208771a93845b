//! The texts each field of a stream's objects wrote last, to find its repeats as they are
//! written (`WrittenStrings::write_field`).
//!
//! Records of one class repeat values per field: an address book's streets, names and cities
//! come from small vocabularies, while its e-mail addresses and phone numbers are all distinct.
//! A small direct-mapped table per field (class and position), probed with the hash the log
//! computes anyway, finds most repeats of a vocabulary field while the string is written: it is
//! then written as a reference at once and never reaches `finish`'s sort, confirmation and
//! rewrite. Kept per field, the vocabulary of one field is not pushed out by the distinct
//! values of another, and a field whose values do not repeat stops being probed (`retired`).
//! A repeat the table misses (pushed out, or after the field retired) is still found by
//! `finish`, so what the table finds only changes the time, never the bytes.

use super::written_strings::reference_is_shorter;

/// A field of the objects of a stream: its class's descriptor and its position among the
/// descriptor's fields. Only tells fields apart; any numbering the caller keeps to works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectField {
    pub descriptor: u32,
    pub index: u32,
}

/// The fewest entries of a field's table (a power of two): a field written a few times costs
/// an allocation of a few hundred bytes.
const MIN_ENTRIES: usize = 16;

/// The most entries of a field's table (a power of two): 320 KiB, room for a vocabulary
/// of a few thousand texts with few collisions, which stays in the second-level cache.
const MAX_ENTRIES: usize = 8192;

/// A field retires when fewer than one probe in `RETIRE_BELOW` found its text, counted from the
/// table's last doubling to its next (or, once it is full, over each window of `MAX_ENTRIES`
/// probes), from `JUDGED_FROM` entries on. A vocabulary of `V` texts is found about `S / V` of
/// the time by a table of `S` entries, and not at all when the values do not repeat (e-mail
/// addresses, phone numbers): those fields retire after a few hundred strings, before their table
/// is large enough to cost cache misses, while a vocabulary of up to about `RETIRE_BELOW`
/// times the table's size keeps its table growing. What a retired field's repeats cost instead
/// is their place in `finish`, which finds them all the same.
const RETIRE_BELOW: u32 = 64;

/// The size from which a table is judged: smaller ones have seen too few strings to tell (a
/// vocabulary of 3,000 texts is found about one time in 60 by a table of 64 entries, one in 15
/// by one of 256).
const JUDGED_FROM: usize = 256;

/// The bytes of a text an entry holds itself: the whole of most vocabulary texts (names,
/// streets, cities), so that confirming a find reads no more than the entry. Confirming from the
/// body instead read a place written long before, out of the cache: a seventh of `dumps` on
/// seed 003.
const INLINE_LEN: usize = 20;

/// A string written in full as the value of the field: the top 32 bits of its hash, its first
/// `INLINE_LEN` bytes (zeros after its end), the place of its text in the body, and its
/// provisional slot. Valid only in the log generation `generation`
/// (`WrittenStrings::generation`: a rewind may since have removed or overwritten its bytes and
/// given its slot to another string); generation 0 marks an empty entry.
#[derive(Clone, Copy, Default)]
struct RecentText {
    hash: u32,
    len: u32,
    start: u32,
    slot: u32,
    generation: u32,
    head: [u8; INLINE_LEN],
}

/// The first `INLINE_LEN` bytes of `text`, zeros after its end.
fn head_of(text: &[u8]) -> [u8; INLINE_LEN] {
    let mut head = [0; INLINE_LEN];
    let len = text.len().min(INLINE_LEN);
    head[..len].copy_from_slice(&text[..len]);
    head
}

/// The texts written last as the values of one field. Invariant: `entries.len()` is a power of
/// two between `MIN_ENTRIES` and `MAX_ENTRIES`.
pub(super) struct FieldTexts {
    entries: Vec<RecentText>,
    /// The strings written in full through this table, which it grows with (to `MAX_ENTRIES`).
    remembered: usize,
    /// Probes and finds since the last judgement (`RETIRE_BELOW`).
    probes: u32,
    finds: u32,
    /// No longer probed: the field's values did not repeat within the table's reach.
    pub(super) retired: bool,
}

impl Default for FieldTexts {
    fn default() -> Self {
        FieldTexts { entries: vec![RecentText::default(); MIN_ENTRIES], remembered: 0, probes: 0, finds: 0, retired: false }
    }
}

impl FieldTexts {
    fn index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.entries.len() - 1)
    }

    /// The provisional slot of a string written in full earlier in this field, in the current
    /// `generation`, whose text (confirmed in `body`) is `text`, if a reference to it is
    /// shorter than writing `text` again.
    pub(super) fn find(&mut self, body: &[u8], text: &[u8], hash: u64, generation: u32) -> Option<u64> {
        let entry = self.entries[self.index(hash)];
        let found = entry.generation == generation
            && entry.hash == (hash >> 32) as u32
            && entry.len as usize == text.len()
            && entry.head == head_of(text)
            && (text.len() <= INLINE_LEN
                || body.get(entry.start as usize + INLINE_LEN..entry.start as usize + text.len()) == Some(&text[INLINE_LEN..]))
            && reference_is_shorter(u64::from(entry.slot), text.len());
        self.probes += 1;
        self.finds += u32::from(found);
        if self.entries.len() == MAX_ENTRIES && self.probes == MAX_ENTRIES as u32 {
            self.judge();
        }
        found.then_some(u64::from(entry.slot))
    }

    /// Remembers `text`, just written in full at `start` of the body in provisional slot
    /// `slot`, both of which fit 32 bits (the log's own limit).
    pub(super) fn remember(&mut self, hash: u64, text: &[u8], start: u32, slot: u32, generation: u32) {
        self.remembered += 1;
        if self.remembered > self.entries.len() && self.entries.len() < MAX_ENTRIES {
            if self.entries.len() >= JUDGED_FROM {
                self.judge();
            }
            self.grow(generation);
        }
        let index = self.index(hash);
        // `text` is in the body, whose length fits 32 bits.
        let len = text.len() as u32;
        self.entries[index] = RecentText { hash: (hash >> 32) as u32, len, start, slot, generation, head: head_of(text) };
    }

    /// Retires the field if too few of the probes since the last judgement found their text.
    fn judge(&mut self) {
        self.retired = self.finds < self.probes / RETIRE_BELOW;
        (self.probes, self.finds) = (0, 0);
    }

    /// Doubles the table, keeping the valid entries that do not collide in it.
    fn grow(&mut self, generation: u32) {
        let doubled = vec![RecentText::default(); self.entries.len() * 2];
        let old = std::mem::replace(&mut self.entries, doubled);
        for entry in old.into_iter().filter(|entry| entry.generation == generation) {
            let index = self.index(u64::from(entry.hash) << 32);
            self.entries[index] = entry;
        }
    }

    /// Empties the table (the log generations start again).
    pub(super) fn forget(&mut self) {
        self.entries.fill(RecentText::default());
    }
}
