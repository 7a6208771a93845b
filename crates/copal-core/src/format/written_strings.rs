//! The distinct strings a stream has written, found again by their content: the writer's side of
//! stream version 2's shared strings (docs/STREAM.md section 5). Every STR of a body takes the
//! next string slot; a later string equal to an earlier one can be written as a STRREF to that
//! one's slot. The encoder (copal-py `strings.rs`) adds the lookup of string objects by address
//! and decides when a reference is shorter; this part knows nothing of Python, so that its
//! hashing and its handling of collisions are tested here.
//!
//! The table keeps no copy of the strings: an entry is the place of a string's bytes in the
//! output being written (the payload of its STR), which the caller passes in to compare.

use std::hash::{BuildHasher, RandomState};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

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

/// The number of distinct strings of the largest stream written lately (see `grow`).
static RECENT_DISTINCT: AtomicUsize = AtomicUsize::new(0);

/// A table this full is grown straight to the size of recent streams rather than step by step.
/// Below it, tables stay small: `copal.dumps` of a small value never allocates for a large one.
const PRESIZE_FROM: usize = 4096;

/// The fewest entries of a table.
const MIN_ENTRIES: usize = 64;

/// An open-addressing table (linear probing) of the distinct strings written, 8 bytes each: 32
/// bits of the string's hash and the index of its record in `written`. A probe that finds
/// nothing (a new string: every string of a stream of distinct strings) reads one cache line and
/// writes the entry into that same line; the record and the string's bytes in the output are
/// read only when the hash bits match. At 300,000 distinct strings the table is 4 MiB, larger
/// than the cache: the wait for memory on each probe is most of the cost of sharing strings,
/// which this layout (one cache line per new string, where a general-purpose hash map keyed by
/// the hash with records beside it touches two to three) and the encoder's prefetching of
/// lookups (`prefetch`) cut down.
#[derive(Default)]
pub struct WrittenStrings {
    /// A power of two of entries (or none yet), at most five eighths full: `bits << 32 |
    /// (index + 1)`, 0 when vacant. A string's entry is at or after (wrapping) position
    /// `bits & mask`, with no vacant entry between.
    entries: Vec<u64>,
    written: Vec<Written>,
    next_slot: u64,
    /// The string `find` last found nowhere: its hash bits and the vacant entry where it goes.
    pending: Option<(u32, usize)>,
}

/// A distinct string written as a STR. Offsets, lengths and slots past u32 (a stream beyond
/// 4 GiB) are not entered: such strings are written in full, which is still correct.
#[derive(Clone, Copy)]
struct Written {
    /// Where its UTF-8 bytes are in the output.
    start: u32,
    len: u32,
    slot: u32,
}

impl Written {
    fn holds(&self, text: &[u8], output: &[u8]) -> bool {
        let start = self.start as usize;
        output.get(start..start + self.len as usize) == Some(text)
    }
}

/// The most distinct strings entered (an entry stores the index plus one in 32 bits).
const MAX_DISTINCT: usize = u32::MAX as usize - 1;

impl WrittenStrings {
    /// Starts a new output: slots start again from 0 and earlier offsets mean nothing.
    pub fn clear(&mut self) {
        self.remember_size();
        self.entries.fill(0);
        self.written.clear();
        self.next_slot = 0;
        self.pending = None;
    }

    /// The slot of a string written before whose bytes equal `text` (at their place in
    /// `output`), `hash` being `text_hash(text)`. None: the caller writes `text` as a STR and
    /// calls `wrote`.
    pub fn find(&mut self, hash: u64, text: &[u8], output: &[u8]) -> Option<u64> {
        // Part of the hash: equal bits are only a hint, confirmed by comparing the bytes.
        let bits = (hash >> 32) as u32;
        if self.entries.is_empty() {
            self.pending = Some((bits, 0));
            return None;
        }
        let mask = self.entries.len() - 1;
        let mut position = bits as usize & mask;
        // Never endless: the table always has vacant entries (at most five eighths full).
        while let entry @ 1.. = self.entries[position] {
            if (entry >> 32) as u32 == bits {
                let written = self.written[(entry as u32 - 1) as usize];
                if written.holds(text, output) {
                    // If the caller writes it again all the same, it is a repeat: not entered.
                    self.pending = None;
                    return Some(u64::from(written.slot));
                }
            }
            position = (position + 1) & mask;
        }
        self.pending = Some((bits, position));
        None
    }

    /// Starts loading into the cache the entry where `find(hash, ..)` will start, for a string
    /// the caller will write soon. A stream of distinct strings finds each at a random place of
    /// a table far larger than the cache; the wait is hidden when the load starts an object or
    /// two before the string is written.
    pub fn prefetch(&self, hash: u64) {
        if self.entries.is_empty() {
            return;
        }
        let entry: *const u64 = &self.entries[(hash >> 32) as usize & (self.entries.len() - 1)];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch only hints the cache; it reads nothing and cannot fault (the address
        // is inside `entries` anyway).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(entry.cast::<i8>());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = entry;
    }

    /// A STR was written, its UTF-8 bytes at `bytes` of the output: it takes the next slot, and
    /// is entered if it is the string `find` last found nowhere.
    pub fn wrote(&mut self, bytes: Range<usize>) {
        let slot = self.next_slot;
        self.next_slot += 1;
        let Some((bits, mut position)) = self.pending.take() else { return };
        let (Ok(start), Ok(len), Ok(slot)) = (u32::try_from(bytes.start), u32::try_from(bytes.len()), u32::try_from(slot)) else {
            return;
        };
        if self.written.len() >= MAX_DISTINCT {
            return;
        }
        if (self.written.len() + 1) * 8 > self.entries.len() * 5 {
            self.grow();
            position = self.vacant_position(bits);
        }
        self.entries[position] = u64::from(bits) << 32 | (self.written.len() as u64 + 1);
        self.written.push(Written { start, len, slot });
    }

    /// The first vacant entry for a string with hash bits `bits`.
    fn vacant_position(&self, bits: u32) -> usize {
        let mask = self.entries.len() - 1;
        let mut position = bits as usize & mask;
        while self.entries[position] != 0 {
            position = (position + 1) & mask;
        }
        position
    }

    /// Doubles the table, or more: streams written one after another tend to be alike (the same
    /// kind of data, dumped again), so a table past `PRESIZE_FROM` entries grows at once to the
    /// size of the largest recent stream, instead of moving every entry up to twenty times.
    fn grow(&mut self) {
        let distinct = self.written.len();
        let mut wanted = (2 * self.entries.len()).max(MIN_ENTRIES);
        if distinct >= PRESIZE_FROM {
            // Room for that many at most five eighths full.
            let recent = RECENT_DISTINCT.load(Ordering::Relaxed);
            wanted = wanted.max((recent * 8 / 5 + 1).next_power_of_two());
            self.written.reserve(recent.saturating_sub(distinct));
        }
        let old = std::mem::replace(&mut self.entries, vec![0; wanted]);
        for entry in old.into_iter().filter(|&entry| entry != 0) {
            let position = self.vacant_position((entry >> 32) as u32);
            self.entries[position] = entry;
        }
    }

    /// Records the size of the stream just written for the next ones (see `grow`). The largest
    /// recent size decays by a quarter per smaller stream, so that one huge stream does not make
    /// every later table huge.
    fn remember_size(&self) {
        let distinct = self.written.len();
        if distinct < PRESIZE_FROM {
            return;
        }
        let recent = RECENT_DISTINCT.load(Ordering::Relaxed);
        RECENT_DISTINCT.store(distinct.max(recent - recent / 4), Ordering::Relaxed);
    }

    /// The number of distinct strings entered.
    pub fn distinct(&self) -> usize {
        self.written.len()
    }
}

impl Drop for WrittenStrings {
    fn drop(&mut self) {
        self.remember_size();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `text` as the caller does: the slot it is found at, or None after writing it.
    fn write(table: &mut WrittenStrings, output: &mut Vec<u8>, hash: u64, text: &str) -> Option<u64> {
        let found = table.find(hash, text.as_bytes(), output);
        if found.is_none() {
            output.push(0x07);
            let start = output.len();
            output.extend_from_slice(text.as_bytes());
            table.wrote(start..output.len());
        }
        found
    }

    #[test]
    fn equal_strings_are_found_at_their_first_slot() {
        let (mut table, mut output) = (WrittenStrings::default(), Vec::new());
        for text in ["a", "bb", "ccc"] {
            assert_eq!(write(&mut table, &mut output, text_hash(text.as_bytes()), text), None);
        }
        assert_eq!(write(&mut table, &mut output, text_hash(b"bb"), "bb"), Some(1));
        assert_eq!(write(&mut table, &mut output, text_hash(b"ccc"), "ccc"), Some(2));
        assert_eq!(table.distinct(), 3);
    }

    #[test]
    fn colliding_hashes_are_told_apart_by_their_bytes() {
        // Every string gets the same hash: the run of entries after its place is walked.
        let (mut table, mut output) = (WrittenStrings::default(), Vec::new());
        let texts = ["north", "south", "east", "west"];
        for text in texts {
            assert_eq!(write(&mut table, &mut output, 42 << 32, text), None);
        }
        for (slot, text) in texts.iter().enumerate() {
            assert_eq!(write(&mut table, &mut output, 42 << 32, text), Some(slot as u64));
        }
        // Equal high bits with different low bits collide too (entries keep the top 32 bits).
        assert_eq!(write(&mut table, &mut output, (42 << 32) | 7, "up"), None);
        assert_eq!(write(&mut table, &mut output, 42 << 32, "up"), Some(4));
        assert_eq!(table.distinct(), 5);
    }

    /// Writes each of `texts` (all different) with the hash `hash` gives it, then each again:
    /// found at its first slot. Returns the table.
    fn all_found_again(texts: &[String], hash: impl Fn(&str) -> u64) -> WrittenStrings {
        let (mut table, mut output) = (WrittenStrings::default(), Vec::new());
        for text in texts {
            assert_eq!(write(&mut table, &mut output, hash(text), text), None);
        }
        for (slot, text) in texts.iter().enumerate() {
            assert_eq!(write(&mut table, &mut output, hash(text), text), Some(slot as u64));
        }
        assert_eq!(table.distinct(), texts.len());
        table
    }

    #[test]
    fn colliding_hashes_survive_growth_and_wrap_around_the_end() {
        // Hash bits of all ones place every string at the last entry: the run wraps to the
        // start, and grows past the first table size.
        let texts: Vec<String> = (0..2 * MIN_ENTRIES).map(|i| format!("s{i}")).collect();
        all_found_again(&texts, |_| u64::from(u32::MAX) << 32);
    }

    #[test]
    fn a_repeat_written_again_takes_a_slot_but_is_not_entered() {
        let (mut table, mut output) = (WrittenStrings::default(), Vec::new());
        write(&mut table, &mut output, text_hash(b"x"), "x");
        // Found, but written again in full (as a one-byte string past slot 127 is).
        assert_eq!(table.find(text_hash(b"x"), b"x", &output), Some(0));
        output.extend_from_slice(b"\x07x");
        table.wrote(output.len() - 1..output.len());
        assert_eq!(write(&mut table, &mut output, text_hash(b"y"), "y"), None);
        assert_eq!(write(&mut table, &mut output, text_hash(b"y"), "y"), Some(2));
        assert_eq!(write(&mut table, &mut output, text_hash(b"x"), "x"), Some(0));
        assert_eq!(table.distinct(), 2);
    }

    #[test]
    fn many_distinct_strings_past_the_presize_threshold_are_all_found() {
        let texts: Vec<String> = (0..3 * PRESIZE_FROM).map(|i| format!("name-{i}")).collect();
        let mut table = all_found_again(&texts, |text| text_hash(text.as_bytes()));
        table.clear();
        assert_eq!(table.distinct(), 0);
        // Its entry would match this output (the first STR of the stream again).
        assert_eq!(table.find(text_hash(b"name-0"), b"name-0", b"\x07name-0"), None);
    }

    #[test]
    fn the_hash_reads_every_byte_at_every_length() {
        // Lengths around each way of reading the last bytes (1-3, 4-7, full words, overlaps).
        let mut hashes = std::collections::HashSet::new();
        for len in 0..=25u8 {
            let base: Vec<u8> = (b'a'..b'a' + len).collect();
            assert!(hashes.insert(text_hash(&base)), "length {len} collides");
            for position in 0..base.len() {
                let mut changed = base.clone();
                changed[position] ^= 0x20;
                assert!(hashes.insert(text_hash(&changed)), "byte {position} of {len} does not change the hash");
            }
        }
    }
}
