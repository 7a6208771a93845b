//! Primitive writers shared by every encoder (the Rust `Value` encoder here and the Python
//! object encoder in copal-py), so both produce identical bytes for identical values.

use std::cell::Cell;

use super::reader::TzInfo;
use super::tag;
use super::varint::{write_varint, zigzag_encode};

#[derive(Default, Debug, Clone)]
pub struct Writer {
    pub buf: Vec<u8>,
}

thread_local! {
    /// The emptied buffer of the last large body given back on this thread (`Writer::recycle`),
    /// for the next one to grow into: a body of megabytes written into fresh memory costs a
    /// page fault per 4 KiB and a copy at each doubling, on every `copal.dumps`.
    static SPARE_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The largest buffer kept for the next body (`SPARE_BUFFER`), in bytes: the memory a thread
/// keeps after writing a large stream.
const MAX_SPARE_BUFFER_BYTES: usize = 32 << 20;

impl Writer {
    pub fn new() -> Self {
        Writer { buf: Vec::with_capacity(64) }
    }

    /// A writer whose buffer is the one last given back on this thread with `recycle`, if any:
    /// for bodies whose buffer is dropped once copied out (a stream's), never for bytes kept
    /// (a record would hold on to the spare's capacity).
    pub fn reusing() -> Self {
        let buf = SPARE_BUFFER.try_with(Cell::take).unwrap_or_default();
        if buf.capacity() == 0 { Writer::new() } else { Writer { buf } }
    }

    /// Keeps `buf` (emptied) for the next `reusing` writer of this thread, unless it is larger
    /// than `MAX_SPARE_BUFFER_BYTES` or smaller than the spare already kept.
    pub fn recycle(mut buf: Vec<u8>) {
        if buf.capacity() > MAX_SPARE_BUFFER_BYTES {
            return;
        }
        buf.clear();
        // A thread being torn down keeps nothing.
        let _ = SPARE_BUFFER.try_with(|spare| {
            let kept = spare.take();
            spare.set(if kept.capacity() >= buf.capacity() { kept } else { buf });
        });
    }

    pub fn u8(&mut self, byte: u8) {
        self.buf.push(byte);
    }

    pub fn varint(&mut self, value: u64) {
        write_varint(&mut self.buf, value);
    }

    pub fn zigzag(&mut self, value: i64) {
        write_varint(&mut self.buf, zigzag_encode(value));
    }

    pub fn bytes(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    pub fn length_prefixed(&mut self, data: &[u8]) {
        self.varint(data.len() as u64);
        self.bytes(data);
    }

    pub fn f64(&mut self, value: f64) {
        self.bytes(&value.to_le_bytes());
    }

    /// An integer: INT when it fits in i64, else BIGINT with minimal two's complement bytes.
    pub fn int_i64(&mut self, value: i64) {
        self.u8(tag::INT);
        self.zigzag(value);
    }

    pub fn bigint_le(&mut self, twos_complement_le: &[u8]) {
        self.u8(tag::BIGINT);
        self.length_prefixed(twos_complement_le);
    }

    pub fn str(&mut self, value: &str) {
        self.u8(tag::STR);
        self.length_prefixed(value.as_bytes());
    }

    pub fn tz_flags(tz: &TzInfo, fold: bool) -> u8 {
        let zone = match tz {
            TzInfo::Naive => 0,
            TzInfo::Offset(_) => tag::TZ_OFFSET,
            TzInfo::Named(_) => tag::TZ_NAMED,
        };
        zone | if fold { tag::TZ_FOLD } else { 0 }
    }

    pub fn tz_suffix(&mut self, tz: &TzInfo) {
        match tz {
            TzInfo::Naive => {}
            TzInfo::Offset(micros) => self.zigzag(*micros),
            TzInfo::Named(key) => self.length_prefixed(key.as_bytes()),
        }
    }

    pub fn datetime(&mut self, micros_since_epoch: i64, tz: &TzInfo, fold: bool) {
        self.u8(tag::DATETIME);
        self.u8(Self::tz_flags(tz, fold));
        self.zigzag(micros_since_epoch);
        self.tz_suffix(tz);
    }

    pub fn time(&mut self, micros_since_midnight: u64, tz: &TzInfo, fold: bool) {
        self.u8(tag::TIME);
        self.u8(Self::tz_flags(tz, fold));
        self.varint(micros_since_midnight);
        self.tz_suffix(tz);
    }

    pub fn reference(&mut self, class: u16, seq: u64) {
        self.u8(tag::REF);
        self.varint(u64::from(class));
        self.varint(seq);
    }
}

/// Writes the last `len` bytes of `out` again `times` more times: a run of one value repeated
/// (`[0] * n`, one string object n times) costs a few copies that double what is written, instead
/// of encoding each item again.
pub fn repeat_tail(out: &mut Vec<u8>, len: usize, times: usize) {
    let start = out.len() - len;
    let end = out.len() + len * times;
    out.reserve(len * times);
    while out.len() < end {
        let copied = (out.len() - start).min(end - out.len());
        out.extend_from_within(start..start + copied);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_tails_are_whole_copies_of_the_last_bytes() {
        for (len, times) in [(1, 0), (1, 1), (2, 7), (3, 1000), (11, 33)] {
            let mut out = b"head".to_vec();
            let pattern: Vec<u8> = (0..len as u8).map(|byte| byte + 100).collect();
            out.extend_from_slice(&pattern);
            repeat_tail(&mut out, len, times);
            let mut expected = b"head".to_vec();
            (0..=times).for_each(|_| expected.extend_from_slice(&pattern));
            assert_eq!(out, expected, "{len} bytes {times} more times");
        }
    }

    #[test]
    fn a_recycled_buffer_comes_back_empty_with_its_capacity() {
        let mut first = Writer::reusing();
        first.bytes(&[7; 1000]);
        let capacity = first.buf.capacity();
        Writer::recycle(first.buf);
        let second = Writer::reusing();
        assert!(second.buf.is_empty());
        assert_eq!(second.buf.capacity(), capacity);
        // Taken: the next writer starts without it.
        assert!(Writer::reusing().buf.capacity() < capacity);
    }

    #[test]
    fn a_smaller_buffer_does_not_replace_the_spare() {
        Writer::recycle(Vec::with_capacity(4096));
        Writer::recycle(Vec::with_capacity(16));
        assert!(Writer::reusing().buf.capacity() >= 4096);
    }
}
