//! Numbers in queries: bool, int, big int, float and Decimal compare by their exact values, as
//! Python compares them (`1 == 1.0 == True == Decimal("1")`, `Decimal("0.1") != 0.1`).

use std::cmp::Ordering;

use super::decimal::{self, Decimal, Parsed};
use crate::format::Value;

/// A number as something comparable exactly.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Num<'v> {
    Int(i128),
    /// A float, or a Decimal infinity or NaN (which are the float's).
    Float(f64),
    /// An integer beyond 128 bits: little-endian two's complement.
    Big(&'v [u8]),
    /// A finite Decimal.
    Decimal(Decimal<'v>),
}

/// 2^127: every float at or beyond it is outside i128 (and infinities too).
pub(crate) const TWO_127: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;

pub(crate) fn number(value: &Value) -> Option<Num<'_>> {
    Some(match value {
        Value::Bool(b) => Num::Int(i128::from(*b)),
        Value::Int(i) => Num::Int(i128::from(*i)),
        // Readers accept BIGINTs longer than needed (docs/FORMAT.md 6.1): the value decides.
        Value::BigInt(bytes) => match bigint_to_i128(minimal_twos_complement(bytes)) {
            Some(i) => Num::Int(i),
            None => Num::Big(minimal_twos_complement(bytes)),
        },
        Value::Float(f) => Num::Float(*f),
        Value::Decimal(text) => match decimal::parse(text) {
            Parsed::Finite(d) => Num::Decimal(d),
            Parsed::Infinite { negative } => Num::Float(if negative { f64::NEG_INFINITY } else { f64::INFINITY }),
            Parsed::NaN => Num::Float(f64::NAN),
        },
        _ => return None,
    })
}

/// Whether a value is a NaN (float or Decimal), which equals nothing and sorts last.
pub(crate) fn is_nan(value: &Value) -> bool {
    matches!(number(value), Some(Num::Float(f)) if f.is_nan())
}

/// `le` (little-endian two's complement) without the high bytes that only repeat the sign: the
/// fewest bytes that keep the value, at least one unless `le` is empty.
pub(crate) fn minimal_twos_complement(le: &[u8]) -> &[u8] {
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
    if f.abs() < TWO_127 {
        let negative = big.last().is_some_and(|b| b & 0x80 != 0);
        return Some(if negative { Ordering::Less } else { Ordering::Greater });
    }
    Some(compare_big(big, &float_to_twos_complement(f)))
}

/// The two's complement bytes (little-endian) of an integral float.
pub(crate) fn float_to_twos_complement(f: f64) -> Vec<u8> {
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

/// The exact order of two numbers; None when either is NaN.
pub(crate) fn compare_numbers(a: Num<'_>, b: Num<'_>) -> Option<Ordering> {
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
        (Num::Decimal(x), Num::Decimal(y)) => Some(x.cmp(&y)),
        (Num::Decimal(x), Num::Int(i)) => Some(x.cmp_i128(i)),
        (Num::Decimal(x), Num::Float(f)) => x.cmp_f64(f),
        (Num::Decimal(x), Num::Big(y)) => Some(x.cmp_twos_complement(y)),
        (other, Num::Decimal(y)) => compare_numbers(Num::Decimal(y), other).map(Ordering::reverse),
    }
}

fn compare_int_float(i: i128, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f >= TWO_127 {
        return Some(Ordering::Less);
    }
    if f < -TWO_127 {
        return Some(Ordering::Greater);
    }
    // Exact: compare the integer with the float's integral part, then its fraction.
    let whole = f.trunc();
    match i.cmp(&(whole as i128)) {
        Ordering::Equal => 0.0f64.partial_cmp(&(f - whole)),
        other => Some(other),
    }
}

/// What a Decimal's index key holds (`format::index_key`, whose number keys are the nearest
/// float and a residual that orders the numbers sharing it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum DecimalKey {
    /// An integer within i128: keyed as the int is.
    Integer(i128),
    /// The nearest float and the residual.
    Number(f64, i64),
}

/// 2^53: from there on, floats are integers and integers near one share its key.
const TWO_53: f64 = 9_007_199_254_740_992.0;

/// The index key of a Decimal `d` whose nearest float is `n` (an integral one within i128 is
/// keyed as that int). Below 2^53 the only other numbers keyed with `n` equal it, so the
/// residual is the sign of `d - n`: the decimal's key lies strictly between the keys of the
/// floats and ints around it, and is shared by the decimals on the same side of `n`. From 2^53
/// on, an integer near `n` is keyed with its distance to `n`, and the decimal with
/// `floor(d) - n`: it shares its key with the integer just below it and the decimals of that
/// unit. From 2^127 on (and for infinities and NaN) the residual is the sign or 0, as floats
/// there have 0. Keys thus never order two numbers against their values.
pub(crate) fn decimal_key(text: &str) -> DecimalKey {
    let d = match decimal::parse(text) {
        Parsed::Finite(d) => d,
        Parsed::Infinite { negative } => return DecimalKey::Number(if negative { f64::NEG_INFINITY } else { f64::INFINITY }, 0),
        Parsed::NaN => return DecimalKey::Number(f64::NAN, 0),
    };
    if let Some(i) = d.to_i128() {
        return DecimalKey::Integer(i);
    }
    // Rust's parsing rounds to the nearest float (ties to even), as an int's conversion does.
    let nearest: f64 = text.parse().unwrap_or(f64::NAN);
    let residual = if !nearest.is_finite() {
        0
    } else if nearest.abs() < TWO_53 || nearest.abs() >= TWO_127 {
        match d.cmp_f64(nearest) {
            Some(Ordering::Less) => -1,
            Some(Ordering::Greater) => 1,
            _ => 0,
        }
    } else {
        let below = d.floor_i128().unwrap_or(0) - nearest as i128;
        below.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    };
    DecimalKey::Number(nearest, residual)
}

/// Whether numbers keyed near `value` may share its key without equalling it: decimals within
/// a unit of an integer from 2^53 on, and decimals near any decimal.
pub(crate) fn key_is_coarse(value: &Value) -> bool {
    match number(value) {
        Some(Num::Decimal(_)) => true,
        Some(Num::Int(i)) => i.unsigned_abs() as f64 >= TWO_53,
        Some(Num::Float(f)) => f.abs() >= TWO_53,
        Some(Num::Big(_)) | None => true,
    }
}

/// The order of numbers in `order_by`: by value, NaN after every other number (NaNs tie).
pub(crate) fn sort_numbers(a: Num<'_>, b: Num<'_>) -> Ordering {
    let nan = |n: Num<'_>| matches!(n, Num::Float(f) if f.is_nan());
    match (nan(a), nan(b)) {
        (false, false) => compare_numbers(a, b).unwrap_or(Ordering::Equal),
        (x, y) => x.cmp(&y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::compare;

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
    fn decimals_compare_exactly_with_every_number() {
        let d = |s: &str| Value::Decimal(s.to_owned());
        assert_eq!(compare(&d("0.1"), &Value::Float(0.1)), Some(Ordering::Less));
        assert_eq!(compare(&d("1.000"), &Value::Bool(true)), Some(Ordering::Equal));
        assert_eq!(compare(&d("1E+30"), &Value::BigInt(10i128.pow(30).to_le_bytes()[..13].to_vec())), Some(Ordering::Equal));
        assert_eq!(compare(&d("-Infinity"), &Value::Float(f64::NEG_INFINITY)), Some(Ordering::Equal));
        assert_eq!(compare(&d("NaN"), &d("NaN")), None);
        assert_eq!(compare(&Value::Float(0.5), &d("0.5")), Some(Ordering::Equal));
        assert_eq!(compare(&Value::Int(3), &d("2.9999999999999999999999")), Some(Ordering::Greater));
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
}
