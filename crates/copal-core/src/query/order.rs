//! The order of values in queries: Python's comparisons within a kind of value (`compare`,
//! `equals`), and the total order of `order_by` (`sort_order`), which sorts values of different
//! kinds by kind (docs/ARCHITECTURE.md "Queries").

use std::cmp::Ordering;

use super::clock::{compare_datetimes, compare_times, datetime_line, datetimes_equal, time_line};
use super::number::{compare_numbers, number, sort_numbers};
use crate::format::Value;

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

/// Python-like comparison of two values of the same kind; None when they are not comparable
/// (different kinds, NaN, unorderable values). Equal means `<=` and `>=` hold; `==` is
/// `equals`, which differs for datetimes in a fold (PEP 495).
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
        (Value::DateTime { micros: x, tz: tx, fold: fx }, Value::DateTime { micros: y, tz: ty, fold: fy }) => {
            compare_datetimes((*x, tx, *fx), (*y, ty, *fy))
        }
        (Value::Dict(x), Value::Dict(y)) => unordered_eq(x.len(), y.len(), || {
            x.iter().all(|(k, v)| y.iter().any(|(k2, v2)| equals(k, k2) && equals(v, v2)))
        }),
        (Value::Set(x) | Value::FrozenSet(x), Value::Set(y) | Value::FrozenSet(y)) => {
            unordered_eq(x.len(), y.len(), || x.iter().all(|a| y.iter().any(|b| equals(a, b))))
        }
        (Value::Time { micros: x, tz: tx, .. }, Value::Time { micros: y, tz: ty, .. }) => compare_times((*x, tx), (*y, ty)),
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

/// Python's `==` within a kind (values of different kinds are unequal).
pub fn equals(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::DateTime { micros: x, tz: tx, fold: fx }, Value::DateTime { micros: y, tz: ty, fold: fy }) => {
            datetimes_equal((*x, tx, *fx), (*y, ty, *fy))
        }
        _ => compare(a, b) == Some(Ordering::Equal),
    }
}

/// Equality of unordered collections (dicts, sets): Equal or not comparable.
fn unordered_eq(len_a: usize, len_b: usize, all_found: impl FnOnce() -> bool) -> Option<Ordering> {
    (len_a == len_b && all_found()).then_some(Ordering::Equal)
}

/// Python's order of two lists (or tuples): by the first items that are not equal, else by
/// length.
fn compare_sequences(x: &[Value], y: &[Value]) -> Option<Ordering> {
    for (a, b) in x.iter().zip(y) {
        if equals(a, b) {
            continue;
        }
        return match compare(a, b)? {
            // Ordered alike but unequal (datetimes in a fold): Python's `<` then says neither.
            Ordering::Equal => None,
            other => Some(other),
        };
    }
    Some(x.len().cmp(&y.len()))
}

/// The total order of `order_by`: missing values first, then by kind, then within a kind:
/// numbers by value with NaN last; datetimes and times by instant (naive ones by wall clock, on
/// the same line); lists and tuples item by item in this order, then by length; values of the
/// "other" kind (dicts, sets, complex numbers, enum members, objects, references) tie; other
/// kinds as `compare` orders them. Ties keep object-id order.
pub fn sort_order(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => value_order(a, b),
    }
}

fn value_order(a: &Value, b: &Value) -> Ordering {
    let kind_a = kind(a);
    kind_a.cmp(&kind(b)).then_with(|| match (kind_a, a, b) {
        (Kind::Number, _, _) => match (number(a), number(b)) {
            (Some(x), Some(y)) => sort_numbers(x, y),
            _ => Ordering::Equal,
        },
        (Kind::DateTime, Value::DateTime { micros: x, tz: tx, fold: fx }, Value::DateTime { micros: y, tz: ty, fold: fy }) => {
            datetime_line(*x, tx, *fx).cmp(&datetime_line(*y, ty, *fy))
        }
        (Kind::Time, Value::Time { micros: x, tz: tx, .. }, Value::Time { micros: y, tz: ty, .. }) => {
            time_line(*x, tx).cmp(&time_line(*y, ty))
        }
        (Kind::Sequence, Value::List(x) | Value::Tuple(x), Value::List(y) | Value::Tuple(y)) => {
            x.iter().zip(y).map(|(a, b)| value_order(a, b)).find(|o| o.is_ne()).unwrap_or_else(|| x.len().cmp(&y.len()))
        }
        (Kind::Other, _, _) => Ordering::Equal,
        _ => compare(a, b).unwrap_or(Ordering::Equal),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::TzInfo;

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
        assert!(equals(&utc_noon, &paris_one));
    }

    #[test]
    fn sort_order_is_total_where_python_cannot_order() {
        let list = |items: Vec<Value>| Value::List(items);
        // Items of different kinds sort by kind, so these lists sort although Python cannot.
        let values = [
            list(vec![Value::Int(1), Value::Int(2)]),
            list(vec![Value::Int(2)]),
            list(vec![Value::Str("a".into())]),
            list(vec![Value::Float(f64::NAN)]),
            Value::Tuple(vec![Value::Int(1)]),
        ];
        for a in &values {
            for b in &values {
                for c in &values {
                    let (ab, bc, ac) = (value_order(a, b), value_order(b, c), value_order(a, c));
                    if ab.is_le() && bc.is_le() {
                        assert!(ac.is_le(), "{a:?} <= {b:?} <= {c:?}");
                    }
                }
                assert_eq!(value_order(a, b), value_order(b, a).reverse());
            }
        }
        assert_eq!(value_order(&values[0], &values[1]), Ordering::Less);
        let other = [Value::Complex(1.0, 2.0), Value::Dict(Vec::new()), Value::Ref(3)];
        assert!(other.iter().all(|a| other.iter().all(|b| value_order(a, b).is_eq())));
        let nan = Value::Decimal("NaN".into());
        assert_eq!(sort_order(Some(&nan), Some(&Value::Float(f64::INFINITY))), Ordering::Greater);
        assert_eq!(sort_order(Some(&nan), Some(&Value::Float(f64::NAN))), Ordering::Equal);
    }
}
