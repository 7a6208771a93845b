//! The hash that `WrittenStrings` logs each string with, to find the strings that repeat.

use std::hash::{BuildHasher, RandomState};
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
