//! The order of values in queries: Python's order within a kind of value, and a fixed order
//! between kinds (docs/ARCHITECTURE.md "Queries"), so that sorting mixed values is total.

use std::cmp::Ordering;

use crate::format::{TzInfo, Value};

/// Kinds of values in sort order. Values of different kinds are never equal and never `<` each
/// other in a filter; in `order_by` they sort by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    None,
    Number,
    Str,
    Bytes,
    Date,
    DateTime,
    Time,
    TimeDelta,
    Uuid,
    Sequence,
    Other,
}

pub fn kind(value: &Value) -> Kind {
    match value {
        Value::None => Kind::None,
        Value::Bool(_) | Value::Int(_) | Value::BigInt(_) | Value::Float(_) | Value::Decimal(_) => Kind::Number,
        Value::Str(_) | Value::StrSurrogates(_) => Kind::Str,
        Value::Bytes(_) | Value::ByteArray(_) => Kind::Bytes,
        Value::Date { .. } => Kind::Date,
        Value::DateTime { .. } => Kind::DateTime,
        Value::Time { .. } => Kind::Time,
        Value::TimeDelta { .. } => Kind::TimeDelta,
        Value::Uuid(_) => Kind::Uuid,
        Value::List(_) | Value::Tuple(_) => Kind::Sequence,
        _ => Kind::Other,
    }
}

/// A number as something comparable: exact for integers up to 128 bits, else a float.
#[derive(Debug, Clone, Copy)]
pub(super) enum Num<'v> {
    Int(i128),
    Float(f64),
    /// An integer beyond 128 bits: little-endian two's complement.
    Big(&'v [u8]),
}

pub(super) fn number(value: &Value) -> Option<Num<'_>> {
    Some(match value {
        Value::Bool(b) => Num::Int(i128::from(*b)),
        Value::Int(i) => Num::Int(i128::from(*i)),
        // Readers accept BIGINTs longer than needed (docs/FORMAT.md 6.1): the value decides.
        Value::BigInt(bytes) => match bigint_to_i128(minimal_twos_complement(bytes)) {
            Some(i) => Num::Int(i),
            None => Num::Big(minimal_twos_complement(bytes)),
        },
        Value::Float(f) => Num::Float(*f),
        Value::Decimal(text) => Num::Float(text.parse::<f64>().ok().or_else(|| special_decimal(text))?),
        _ => return None,
    })
}

fn special_decimal(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    let negative = lower.starts_with('-');
    if lower.contains("inf") {
        Some(if negative { f64::NEG_INFINITY } else { f64::INFINITY })
    } else {
        None
    }
}

/// `le` (little-endian two's complement) without the high bytes that only repeat the sign: the
/// fewest bytes that keep the value, at least one unless `le` is empty.
pub(super) fn minimal_twos_complement(le: &[u8]) -> &[u8] {
    let negative = le.last().is_some_and(|b| b & 0x80 != 0);
    let fill = if negative { 0xFF } else { 0x00 };
    let mut len = le.len();
    while len > 1 && le[len - 1] == fill && (le[len - 2] & 0x80 != 0) == negative {
        len -= 1;
    }
    &le[..len]
}

/// A BIGINT's value if it fits 128 bits (little-endian two's complement bytes).
pub(crate) fn bigint_to_i128(le: &[u8]) -> Option<i128> {
    if le.len() > 16 {
        return None;
    }
    let negative = le.last().is_some_and(|b| b & 0x80 != 0);
    let mut bytes = [if negative { 0xFF } else { 0 }; 16];
    bytes[..le.len()].copy_from_slice(le);
    Some(i128::from_le_bytes(bytes))
}

/// Exact order of two integers given as little-endian two's complement of any length.
fn compare_big(a: &[u8], b: &[u8]) -> Ordering {
    let negative = |x: &[u8]| x.last().is_some_and(|b| b & 0x80 != 0);
    let (na, nb) = (negative(a), negative(b));
    if na != nb {
        return if na { Ordering::Less } else { Ordering::Greater };
    }
    let fill = if na { 0xFF } else { 0 };
    let len = a.len().max(b.len());
    for i in (0..len).rev() {
        let x = a.get(i).copied().unwrap_or(fill);
        let y = b.get(i).copied().unwrap_or(fill);
        if x != y {
            return x.cmp(&y);
        }
    }
    Ordering::Equal
}

/// Exact order of an integer beyond 128 bits and a float, as Python compares them.
fn compare_big_float(big: &[u8], f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f.is_infinite() {
        return Some(if f > 0.0 { Ordering::Less } else { Ordering::Greater });
    }
    // Floats below 2^127 in magnitude lie strictly between the big integers of either sign.
    if f.abs() < 170_141_183_460_469_231_731_687_303_715_884_105_728.0 {
        let negative = big.last().is_some_and(|b| b & 0x80 != 0);
        return Some(if negative { Ordering::Less } else { Ordering::Greater });
    }
    Some(compare_big(big, &float_to_twos_complement(f)))
}

/// The two's complement bytes (little-endian) of an integral float.
pub(super) fn float_to_twos_complement(f: f64) -> Vec<u8> {
    let bits = f.to_bits();
    let exponent = ((bits >> 52) & 0x7FF) as usize - 1075;
    let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
    let mut magnitude = vec![0u8; (53 + exponent) / 8 + 2];
    for bit in 0..53 {
        if mantissa >> bit & 1 == 1 {
            let at = bit + exponent;
            magnitude[at / 8] |= 1 << (at % 8);
        }
    }
    if f < 0.0 {
        // Negate: invert and add one.
        let mut carry = 1u16;
        for byte in magnitude.iter_mut() {
            let sum = u16::from(!*byte) + carry;
            *byte = sum as u8;
            carry = sum >> 8;
        }
    }
    magnitude
}

fn compare_numbers(a: Num<'_>, b: Num<'_>) -> Option<Ordering> {
    match (a, b) {
        (Num::Big(x), Num::Big(y)) => Some(compare_big(x, y)),
        (Num::Big(x), Num::Int(i)) => Some(compare_big(x, &i.to_le_bytes())),
        (Num::Int(i), Num::Big(y)) => Some(compare_big(&i.to_le_bytes(), y)),
        (Num::Big(x), Num::Float(f)) => compare_big_float(x, f),
        (Num::Float(f), Num::Big(y)) => compare_big_float(y, f).map(Ordering::reverse),
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y),
        (Num::Int(i), Num::Float(f)) => compare_int_float(i, f),
        (Num::Float(f), Num::Int(i)) => compare_int_float(i, f).map(Ordering::reverse),
    }
}

fn compare_int_float(i: i128, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    // 2^127: every float at or beyond it is outside i128 (and infinities too).
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    if f >= LIMIT {
        return Some(Ordering::Less);
    }
    if f < -LIMIT {
        return Some(Ordering::Greater);
    }
    // Exact: compare the integer with the float's integral part, then its fraction.
    let whole = f.trunc();
    match i.cmp(&(whole as i128)) {
        Ordering::Equal => 0.0f64.partial_cmp(&(f - whole)),
        other => Some(other),
    }
}

fn utc_micros(micros: i64, tz: &TzInfo) -> i64 {
    match tz {
        TzInfo::Offset(offset) => micros - offset,
        _ => micros,
    }
}

/// Whether a time has a UTC offset in Python's sense. A time in a named zone has none:
/// `time.utcoffset()` needs a date to find the zone's offset, so Python treats it as naive.
fn is_aware(tz: &TzInfo) -> bool {
    matches!(tz, TzInfo::Offset(_))
}

/// Python-like comparison of two values of the same kind; None when they are not comparable
/// (different kinds, NaN, unorderable values).
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    if kind(a) != kind(b) {
        return None;
    }
    match (a, b) {
        (Value::None, Value::None) => Some(Ordering::Equal),
        (Value::Str(x), Value::Str(y)) => Some(x.cmp(y)),
        (Value::Str(x), Value::StrSurrogates(y)) => Some(x.as_bytes().cmp(y)),
        (Value::StrSurrogates(x), Value::Str(y)) => Some(x.as_slice().cmp(y.as_bytes())),
        (Value::StrSurrogates(x), Value::StrSurrogates(y)) => Some(x.cmp(y)),
        (Value::Bytes(x) | Value::ByteArray(x), Value::Bytes(y) | Value::ByteArray(y)) => Some(x.cmp(y)),
        (Value::Date { days: x }, Value::Date { days: y }) => Some(x.cmp(y)),
        // As in Python, naive and aware datetimes are never equal nor ordered.
        (Value::DateTime { tz: tx, .. }, Value::DateTime { tz: ty, .. })
            if (*tx == TzInfo::Naive) != (*ty == TzInfo::Naive) =>
        {
            None
        }
        (Value::DateTime { micros: x, tz: tx, .. }, Value::DateTime { micros: y, tz: ty, .. }) => {
            Some(utc_micros(*x, tx).cmp(&utc_micros(*y, ty)))
        }
        (Value::Dict(x), Value::Dict(y)) => unordered_eq(x.len(), y.len(), || {
            x.iter().all(|(k, v)| y.iter().any(|(k2, v2)| equal(k, k2) && equal(v, v2)))
        }),
        (Value::Set(x) | Value::FrozenSet(x), Value::Set(y) | Value::FrozenSet(y)) => {
            unordered_eq(x.len(), y.len(), || x.iter().all(|a| y.iter().any(|b| equal(a, b))))
        }
        // Times too: naive and aware are never equal nor ordered; aware ones compare in UTC.
        (Value::Time { tz: tx, .. }, Value::Time { tz: ty, .. }) if is_aware(tx) != is_aware(ty) => None,
        (Value::Time { micros: x, tz: tx, .. }, Value::Time { micros: y, tz: ty, .. }) => {
            Some(utc_micros(*x as i64, tx).cmp(&utc_micros(*y as i64, ty)))
        }
        (
            Value::TimeDelta { days: d1, seconds: s1, micros: m1 },
            Value::TimeDelta { days: d2, seconds: s2, micros: m2 },
        ) => Some((d1, s1, m1).cmp(&(d2, s2, m2))),
        (Value::Uuid(x), Value::Uuid(y)) => Some(x.cmp(y)),
        (Value::List(x), Value::List(y)) | (Value::Tuple(x), Value::Tuple(y)) => compare_sequences(x, y),
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => compare_numbers(x, y),
            _ => (a == b).then_some(Ordering::Equal),
        },
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    compare(a, b) == Some(Ordering::Equal)
}

/// Equality of unordered collections (dicts, sets): Equal or not comparable.
fn unordered_eq(len_a: usize, len_b: usize, all_found: impl FnOnce() -> bool) -> Option<Ordering> {
    (len_a == len_b && all_found()).then_some(Ordering::Equal)
}

fn compare_sequences(x: &[Value], y: &[Value]) -> Option<Ordering> {
    for (a, b) in x.iter().zip(y) {
        match compare(a, b)? {
            Ordering::Equal => continue,
            other => return Some(other),
        }
    }
    Some(x.len().cmp(&y.len()))
}

/// The total order of `order_by`: missing values first, then by kind, then by value (values that
/// cannot be compared, like NaN, after the others of their kind).
pub fn sort_order(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        // Values that do not compare (NaN, naive vs aware, lists of mixed kinds, dicts...) fall
        // back to their index keys, which order every value totally and consistently.
        (Some(a), Some(b)) => kind(a).cmp(&kind(b)).then_with(|| match compare(a, b) {
            Some(ordering) if !is_nan(a) && !is_nan(b) => ordering,
            _ => index_key(a).cmp(&index_key(b)),
        }),
    }
}

fn is_nan(value: &Value) -> bool {
    match value {
        Value::Float(f) => f.is_nan(),
        Value::Decimal(text) => text.to_ascii_lowercase().contains("nan"),
        _ => false,
    }
}

fn index_key(value: &Value) -> Vec<u8> {
    let mut key = Vec::new();
    crate::format::index_key::push_key(&mut key, Some(value));
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_exactly_across_types() {
        assert_eq!(compare(&Value::Int(1), &Value::Float(1.0)), Some(Ordering::Equal));
        assert_eq!(compare(&Value::Int(i64::MAX), &Value::Float(9.223372036854776e18)), Some(Ordering::Less));
        assert_eq!(compare(&Value::Bool(true), &Value::Int(2)), Some(Ordering::Less));
        assert_eq!(compare(&Value::Float(f64::NAN), &Value::Int(0)), None);
        let big = Value::BigInt({
            let mut b = vec![0; 9];
            b[8] = 1;
            b
        });
        assert_eq!(compare(&big, &Value::Int(i64::MAX)), Some(Ordering::Greater));
    }

    #[test]
    fn bigints_longer_than_needed_compare_by_value() {
        let one = Value::BigInt(vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(compare(&one, &Value::Float(1.0)), Some(Ordering::Equal));
        assert_eq!(compare(&one, &Value::Int(2)), Some(Ordering::Less));
        let minus_one = Value::BigInt(vec![0xFF; 20]);
        assert_eq!(compare(&minus_one, &Value::Float(-0.5)), Some(Ordering::Less));
        assert_eq!(compare(&minus_one, &Value::Bool(true)), Some(Ordering::Less));
    }

    #[test]
    fn huge_integers_compare_exactly_with_floats() {
        let two_200 = 2f64.powi(200);
        let mut bytes = vec![0u8; 27];
        bytes[25] = 1; // 2^200
        bytes[0] = 1; // + 1
        assert_eq!(compare(&Value::BigInt(bytes.clone()), &Value::Float(two_200)), Some(Ordering::Greater));
        bytes[0] = 0;
        assert_eq!(compare(&Value::BigInt(bytes), &Value::Float(two_200)), Some(Ordering::Equal));
        assert_eq!(compare(&Value::Int(i64::MAX), &Value::Float(1.7e38)), Some(Ordering::Less));
    }

    #[test]
    fn different_kinds_do_not_compare_but_sort_by_kind() {
        assert_eq!(compare(&Value::Int(1), &Value::Str("1".into())), None);
        assert_eq!(sort_order(Some(&Value::Str("a".into())), Some(&Value::Int(5))), Ordering::Greater);
        assert_eq!(sort_order(None, Some(&Value::None)), Ordering::Less);
    }

    #[test]
    fn aware_datetimes_compare_as_instants() {
        let utc_noon = Value::DateTime { micros: 12 * 3_600_000_000, tz: TzInfo::Offset(0), fold: false };
        let paris_one = Value::DateTime { micros: 13 * 3_600_000_000, tz: TzInfo::Offset(3_600_000_000), fold: false };
        assert_eq!(compare(&utc_noon, &paris_one), Some(Ordering::Equal));
    }
}
