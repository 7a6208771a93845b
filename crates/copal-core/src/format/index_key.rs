//! Order-preserving index keys (docs/FORMAT.md "Index keys"): the bytes of a key sort like the
//! values, with the order of queries (`query::sort_order`): missing < None < numbers < str <
//! bytes < date < datetime < time < timedelta < UUID < other. Numbers compare by value across
//! int, float, bool and Decimal, so `1`, `1.0`, `True` and `Decimal("1.0")` have the same key.
//! Each encoded value is self-delimiting, so a compound key sorts field by field and an encoded
//! prefix selects a range.
//!
//! Keys never order two values against `sort_order`, but some are coarser than the values
//! (`sort_group`): decimals share keys with numbers within a unit of them, integers beyond
//! 2^116 share keys (and those beyond 128 bits, an infinity's), timedeltas beyond 292 years
//! share the saturated key, and values of the other kind (and lists and tuples) are keyed by
//! their encoding, which does not follow their order. Readers of an index in key order sort
//! the entries of one group by value.

use super::Value;
use crate::query::{datetime_line, decimal_key, time_line, DecimalKey};

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
        Value::Decimal(text) => match decimal_key(text) {
            DecimalKey::Integer(i) => push_int(out, i),
            DecimalKey::Number(nearest, residual) => push_number(out, nearest, residual),
        },
        Value::Str(s) => push_escaped(out, STR, s.as_bytes()),
        Value::StrSurrogates(b) => push_escaped(out, STR, b),
        Value::Bytes(b) | Value::ByteArray(b) => push_escaped(out, BYTES, b),
        Value::Date { days } => push_i64(out, DATE, *days),
        // Aware datetimes by instant, naive ones by wall clock (`query::sort_order`).
        Value::DateTime { micros, tz, fold } => push_i64(out, DATETIME, datetime_line(*micros, tz, *fold)),
        // Times with an offset in UTC, as filters compare them, others by wall clock.
        Value::Time { micros, tz, .. } => push_i64(out, TIME, time_line(*micros, tz)),
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

/// The length of the key of one field at the start of `key` (the whole of `key` if it ends
/// within it).
pub fn field_len(key: &[u8]) -> usize {
    match key.first() {
        None => 0,
        Some(&MISSING | &NONE) => 1,
        Some(&NUMBER | &UUID) => 17,
        Some(&DATE | &DATETIME | &TIME | &TIMEDELTA) => 9,
        Some(_) => {
            // Escaped bytes up to the 00 00 terminator.
            let mut i = 1;
            while i + 1 < key.len() {
                match (key[i], key[i + 1]) {
                    (0, 0) => return i + 2,
                    (0, _) => i += 2,
                    _ => i += 1,
                }
            }
            key.len()
        }
    }
}

/// The entries of an index whose first `fields` field keys fall in one group sort by value
/// among themselves, not by key: groups are contiguous in key order, and two entries of
/// different groups are in key order. Keys of one group share `prefix` (and `big`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortGroup<'k> {
    pub prefix: &'k [u8],
    /// For the group of the numbers from 2^127 on (true) or from -2^127 down (false), whose
    /// keys share only their tag: integers beyond 128 bits are keyed as infinities.
    pub big: Option<bool>,
    /// Whether the values of the group may differ (else they all sort alike).
    pub coarse: bool,
}

/// The group of a key (without the oid) for its first `fields` fields: the whole of their keys,
/// up to the first that may be shared by values of different order, whose group is that of a
/// number's float (with residual 0 below 2^53, an int's or float's key is its value's alone), of
/// the big numbers, of a saturated timedelta, or of the other kind.
pub fn sort_group(key: &[u8], fields: usize) -> SortGroup<'_> {
    let mut pos = 0;
    for _ in 0..fields {
        let rest = &key[pos.min(key.len())..];
        let len = field_len(rest);
        let coarse = |prefix: usize, big: Option<bool>| SortGroup { prefix: &key[..pos + prefix], big, coarse: true };
        match rest.first() {
            Some(&NUMBER) if len == 17 => {
                let bits = u64::from_be_bytes(rest[1..9].try_into().expect("17 bytes"));
                let residual = u64::from_be_bytes(rest[9..17].try_into().expect("17 bytes")) ^ (1 << 63);
                let value = f64::from_bits(if bits >> 63 == 1 { bits & !(1 << 63) } else { !bits });
                if value.abs() >= 170_141_183_460_469_231_731_687_303_715_884_105_728.0 {
                    return coarse(1, Some(value > 0.0));
                }
                if residual != 0 || value.abs() >= 9_007_199_254_740_992.0 {
                    return coarse(9, None);
                }
            }
            Some(&TIMEDELTA) if len == 9 && (rest[1..9] == [0; 8] || rest[1..9] == [0xFF; 8]) => return coarse(9, None),
            Some(&OTHER) => return coarse(1, None),
            _ => {}
        }
        pos += len;
    }
    SortGroup { prefix: &key[..pos.min(key.len())], big: None, coarse: false }
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
    out.reserve(17);
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
    use crate::format::TzInfo;
    use crate::query::{compare, equals, sort_order};
    use std::cmp::Ordering;

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

    /// Numbers of every type near each other: integers around 2^53 and 2^64, floats, and
    /// decimals between and beside them.
    fn numbers() -> Vec<Value> {
        let d = |s: &str| Value::Decimal(s.to_owned());
        let two_53: i64 = 1 << 53;
        let mut values = vec![
            Value::Int(0),
            Value::Int(1),
            Value::Int(-1),
            Value::Bool(true),
            Value::Float(0.1),
            Value::Float(-0.1),
            Value::Float(0.5),
            Value::Float(1.5),
            Value::Float(f64::NAN),
            Value::Float(f64::INFINITY),
            Value::Float(two_53 as f64),
            Value::Float(1.8446744073709552e19),
            Value::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 1]),
            Value::BigInt(vec![1, 0, 0, 0, 0, 0, 0, 0, 1]),
            Value::BigInt(vec![0; 20].into_iter().chain([1]).collect()),
        ];
        for i in [two_53 - 2, two_53 - 1, two_53, two_53 + 1, two_53 + 2, two_53 + 3, -two_53 - 1] {
            values.push(Value::Int(i));
        }
        for text in [
            "0.1", "0.10", "0.10000000000000000001", "0.09999999999999999999", "-0.1", "0.5", "1.5", "1", "1.000",
            "0", "-0", "1E-400", "-1E-400", "NaN", "sNaN", "Infinity", "-Infinity", "1E+400",
            "9007199254740991.5", "9007199254740992", "9007199254740992.5", "9007199254740993", "9007199254740993.25",
            "9007199254740993.75", "9007199254740994", "-9007199254740993.5", "18446744073709551616.5",
            "18446744073709551616", "18446744073709551615.999",
        ] {
            values.push(d(text));
        }
        values
    }

    #[test]
    fn number_keys_never_order_against_values() {
        let values = numbers();
        for a in &values {
            for b in &values {
                let (ka, kb) = (key(a), key(b));
                if equals(a, b) {
                    assert_eq!(ka, kb, "{a:?} == {b:?}");
                }
                match sort_order(Some(a), Some(b)) {
                    Ordering::Less => assert!(ka <= kb, "{a:?} < {b:?}"),
                    Ordering::Greater => assert!(ka >= kb, "{a:?} > {b:?}"),
                    Ordering::Equal => {}
                }
                // Keys of different groups are in the order of their values.
                if sort_group(&ka, 1) != sort_group(&kb, 1) {
                    assert_eq!(ka.cmp(&kb), sort_order(Some(a), Some(b)), "{a:?} vs {b:?}");
                }
            }
        }
    }

    #[test]
    fn ints_and_floats_below_2_53_key_strictly_apart_from_other_numbers() {
        let values = numbers();
        let operands = values.iter().filter(|v| match v {
            Value::Int(i) => i.unsigned_abs() < 1 << 53,
            Value::Float(f) => f.abs() < 9_007_199_254_740_992.0,
            _ => false,
        });
        for x in operands {
            for v in &values {
                match compare(v, x) {
                    Some(Ordering::Less) => assert!(key(v) < key(x), "{v:?} < {x:?}"),
                    Some(Ordering::Greater) => assert!(key(v) > key(x), "{v:?} > {x:?}"),
                    Some(Ordering::Equal) => assert_eq!(key(v), key(x)),
                    None => {}
                }
            }
        }
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
