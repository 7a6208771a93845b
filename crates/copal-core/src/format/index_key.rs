//! Order-preserving index keys (docs/FORMAT.md "Index keys"): the bytes of a key sort like the
//! values, with the order of queries (`query::sort_order`): missing < None < numbers < str <
//! bytes < date < datetime < time < timedelta < UUID < other. Numbers compare by value across
//! int, float and bool, so `1`, `1.0` and `True` have the same key. Each encoded value is
//! self-delimiting, so a compound key sorts field by field and an encoded prefix selects a range.

use super::Value;
use super::TzInfo;

pub const MISSING: u8 = 0x00;
pub const NONE: u8 = 0x01;
pub const NUMBER: u8 = 0x02;
pub const STR: u8 = 0x03;
pub const BYTES: u8 = 0x04;
pub const DATE: u8 = 0x05;
pub const DATETIME: u8 = 0x06;
pub const TIME: u8 = 0x07;
pub const TIMEDELTA: u8 = 0x08;
pub const UUID: u8 = 0x09;
pub const OTHER: u8 = 0x0A;

/// The key of `value` alone.
pub fn key_of(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    push_key(&mut out, Some(value));
    out
}

/// Appends the key of `value` (None: the field is missing) to `out`.
pub fn push_key(out: &mut Vec<u8>, value: Option<&Value>) {
    let Some(value) = value else {
        out.push(MISSING);
        return;
    };
    match value {
        Value::None => out.push(NONE),
        Value::Bool(b) => push_number(out, f64::from(u8::from(*b)), 0),
        Value::Int(i) => push_int(out, i128::from(*i)),
        Value::BigInt(bytes) => push_bigint(out, bytes),
        Value::Float(f) => push_number(out, *f, 0),
        Value::Decimal(text) => push_number(out, text.parse().unwrap_or(f64::NAN), 0),
        Value::Str(s) => push_escaped(out, STR, s.as_bytes()),
        Value::StrSurrogates(b) => push_escaped(out, STR, b),
        Value::Bytes(b) | Value::ByteArray(b) => push_escaped(out, BYTES, b),
        Value::Date { days } => push_i64(out, DATE, *days),
        Value::DateTime { micros, tz, .. } => {
            let utc = match tz {
                TzInfo::Offset(offset) => micros - offset,
                _ => *micros,
            };
            push_i64(out, DATETIME, utc)
        }
        // Aware times in UTC, as filters compare them (naive ones and named zones by wall time).
        Value::Time { micros, tz, .. } => {
            let offset = if let TzInfo::Offset(offset) = tz { *offset } else { 0 };
            push_i64(out, TIME, *micros as i64 - offset)
        }
        Value::TimeDelta { days, seconds, micros } => {
            push_i64(out, TIMEDELTA, days.saturating_mul(86_400_000_000).saturating_add((seconds * 1_000_000 + micros) as i64))
        }
        Value::Uuid(bytes) => {
            out.push(UUID);
            out.extend_from_slice(bytes);
        }
        other => {
            let mut w = super::Writer::new();
            other.encode(&mut w);
            push_escaped(out, OTHER, &w.buf);
        }
    }
}

/// The key of a string prefix: every str key starting with `prefix` starts with these bytes.
pub fn str_prefix_key(prefix: &[u8], tag: u8) -> Vec<u8> {
    let mut out = vec![tag];
    escape_into(&mut out, prefix);
    out
}

/// The first byte of the keys of values of `value`'s kind (for ranges bounded on one side).
pub fn kind_byte(value: &Value) -> u8 {
    let mut out = Vec::with_capacity(9);
    push_key(&mut out, Some(value));
    out[0]
}

fn push_int(out: &mut Vec<u8>, i: i128) {
    let approx = i as f64;
    // The float rounds large integers; the residual keeps them exact and in order.
    let residual = i - approx as i128;
    push_number(out, approx, residual.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64);
}

fn push_bigint(out: &mut Vec<u8>, le: &[u8]) {
    if le.len() <= 16 {
        let negative = le.last().is_some_and(|b| b & 0x80 != 0);
        let mut bytes = [if negative { 0xFF } else { 0 }; 16];
        bytes[..le.len()].copy_from_slice(le);
        push_int(out, i128::from_le_bytes(bytes));
    } else {
        let negative = le.last().is_some_and(|b| b & 0x80 != 0);
        push_number(out, if negative { f64::NEG_INFINITY } else { f64::INFINITY }, 0);
    }
}

/// A number: its float value in an order-preserving form, then an exactness residual.
fn push_number(out: &mut Vec<u8>, value: f64, residual: i64) {
    out.push(NUMBER);
    let bits = if value.is_nan() {
        u64::MAX
    } else {
        // -0.0 and 0.0 are equal numbers: one key.
        let value = if value == 0.0 { 0.0 } else { value };
        let bits = value.to_bits();
        if bits >> 63 == 1 { !bits } else { bits | (1 << 63) }
    };
    out.extend_from_slice(&bits.to_be_bytes());
    out.extend_from_slice(&((residual as u64) ^ (1 << 63)).to_be_bytes());
}

fn push_i64(out: &mut Vec<u8>, tag: u8, value: i64) {
    out.push(tag);
    out.extend_from_slice(&((value as u64) ^ (1 << 63)).to_be_bytes());
}

/// Bytes with 0x00 written as 0x00 0xFF, then the terminator 0x00 0x00: order-preserving and
/// self-delimiting.
fn push_escaped(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    escape_into(out, bytes);
    out.extend_from_slice(&[0, 0]);
}

fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        push_key(&mut out, Some(v));
        out
    }

    #[test]
    fn key_order_is_value_order() {
        let ordered = [
            Value::None,
            Value::Float(f64::NEG_INFINITY),
            Value::Int(-5),
            Value::Float(-0.5),
            Value::Bool(false),
            Value::Float(0.25),
            Value::Int(1),
            Value::Int((1 << 53) + 1),
            Value::Float(1e300),
            Value::Float(f64::NAN),
            Value::Str(String::new()),
            Value::Str("a\0".into()),
            Value::Str("a\0b".into()),
            Value::Str("ab".into()),
            Value::Bytes(vec![0]),
            Value::Date { days: -3 },
            Value::Date { days: 4 },
            Value::DateTime { micros: 0, tz: TzInfo::Naive, fold: false },
        ];
        for pair in ordered.windows(2) {
            assert!(key(&pair[0]) < key(&pair[1]), "{:?} !< {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn equal_numbers_have_equal_keys() {
        assert_eq!(key(&Value::Int(1)), key(&Value::Float(1.0)));
        assert_eq!(key(&Value::Bool(true)), key(&Value::Int(1)));
        assert_eq!(key(&Value::Float(-0.0)), key(&Value::Int(0)));
        assert_ne!(key(&Value::Int((1 << 53) + 1)), key(&Value::Float((1u64 << 53) as f64)));
    }

    #[test]
    fn compound_keys_sort_field_by_field() {
        let mut a = key(&Value::Str("a".into()));
        a.extend(key(&Value::Int(9)));
        let mut b = key(&Value::Str("ab".into()));
        b.extend(key(&Value::Int(1)));
        assert!(a < b);
        assert!(key(&Value::Str("abc".into())).starts_with(&str_prefix_key(b"ab", STR)));
    }
}
