//! Primitive writers shared by every encoder (the Rust `Value` encoder here and the Python
//! object encoder in copal-py), so both produce identical bytes for identical values.

use super::reader::TzInfo;
use super::tag;
use super::varint::{write_varint, zigzag_encode};

#[derive(Default, Debug, Clone)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer { buf: Vec::with_capacity(64) }
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
