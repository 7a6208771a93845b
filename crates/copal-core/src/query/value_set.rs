//! Membership tests of `in_` filters in constant time: the values of a long list are hashed by a
//! canonical form under which two values are equal exactly when `compares(a, Eq, b)` holds.
//!
//! The index key (`format::index_key::key_of`) is not such a form: integers beyond 2^116 share
//! keys, integers beyond 128 bits share the key of an infinity, decimals share keys with their
//! neighbours, and containers are keyed by their encoding. `Canon` is exact instead, and values
//! without one (NaN, huge integers, containers compared as unordered collections, objects) are
//! tested one by one.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use super::clock::{datetime_line, fold_matters, is_zoned, time_line, time_offset};
use super::decimal::Decimal;
use super::expr::{compares, CmpOp, Expr};
use super::number::{bigint_to_i128, float_to_twos_complement, minimal_twos_complement, number, Num, TWO_127};
use crate::format::{Oid, TzInfo, Value};

/// The length from which an `in_` list is hashed: shorter lists are compared value by value,
/// which costs less than building a canonical form.
const HASHED_FROM: usize = 8;

/// The largest integers with a canonical form, in bits: beyond, an integer (only a BIGINT or an
/// integral Decimal can be one) is compared one by one, so that no form costs more than a
/// small conversion between decimal and binary digits.
const MAX_CANONICAL_BITS: usize = 4096;

/// The canonical form of a value. For values `a` and `b` that both have one,
/// `compares(a, Eq, b)` holds exactly when their forms are equal; a value without one is never
/// equal to a value with one. Numbers are their exact value (`1`, `1.0`, `True` and
/// `Decimal("1")` are `Int(1)`; `0.5` and `Decimal("0.50")` are `Float`), as `order::compare`
/// compares them; strings are their (generalized UTF-8) bytes; times and datetimes are their
/// UTC instant, apart for naive and aware ones, except that a datetime in a fold or gap of its
/// zone equals only datetimes of that zone with the same wall clock.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Canon<'v> {
    None,
    /// An integral number within i128 (ints, bools, integral floats and decimals, BIGINTs).
    Int(i128),
    /// An integer beyond i128: its minimal little-endian two's complement bytes.
    Big(Cow<'v, [u8]>),
    /// The bits of a float that is neither an integer nor NaN (a fraction or an infinity), and
    /// of the decimals that equal it.
    Float(u64),
    /// A decimal that is neither an integer nor a float's value.
    Decimal(DecimalForm<'v>),
    Str(&'v [u8]),
    Bytes(&'v [u8]),
    Date(i64),
    DateTime { aware: bool, utc: i64 },
    /// A datetime in a fold or gap of a named zone (or in a zone the search path does not hold):
    /// its zone and wall clock.
    ZonedWall(&'v str, i64),
    Time { aware: bool, utc: i64 },
    TimeDelta(i64, u64, u64),
    Uuid(&'v [u8; 16]),
    List(Vec<Canon<'v>>),
    Tuple(Vec<Canon<'v>>),
    Ref(Oid),
    Enum(u32, &'v str),
}

/// A nonzero decimal by its sign, scale and significant digits, which equal decimals share.
#[derive(Debug)]
struct DecimalForm<'v>(Decimal<'v>);

impl PartialEq for DecimalForm<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.cmp(&other.0).is_eq()
    }
}

impl Eq for DecimalForm<'_> {}

impl Hash for DecimalForm<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.is_negative().hash(state);
        self.0.scale().hash(state);
        self.0.digits().for_each(|d| d.hash(state));
    }
}

/// `value`'s canonical form, or None for the values compared one by one: NaN (equal to
/// nothing), integers beyond `MAX_CANONICAL_BITS`, dicts and sets (equal regardless of order),
/// complex numbers, objects, and sequences holding any of these.
fn canonical(value: &Value) -> Option<Canon<'_>> {
    Some(match value {
        Value::None => Canon::None,
        Value::Bool(_) | Value::Int(_) | Value::BigInt(_) | Value::Float(_) | Value::Decimal(_) => number_form(number(value)?)?,
        Value::Str(s) => Canon::Str(s.as_bytes()),
        Value::StrSurrogates(b) => Canon::Str(b),
        Value::Bytes(b) | Value::ByteArray(b) => Canon::Bytes(b),
        Value::Date { days } => Canon::Date(*days),
        // As `order::equals` compares them: naive and aware are never equal; a zone's own
        // datetimes compare by wall clock, which for those outside folds and gaps is as by
        // instant.
        Value::DateTime { micros, tz, fold } => match tz {
            TzInfo::Named(key) if fold_matters(*micros, tz) || !is_zoned(tz) => Canon::ZonedWall(key, *micros),
            _ => Canon::DateTime { aware: *tz != TzInfo::Naive, utc: datetime_line(*micros, tz, *fold) },
        },
        Value::Time { micros, tz, .. } => Canon::Time { aware: time_offset(tz).is_some(), utc: time_line(*micros, tz) },
        Value::TimeDelta { days, seconds, micros } => Canon::TimeDelta(*days, *seconds, *micros),
        Value::Uuid(b) => Canon::Uuid(b),
        Value::List(items) => Canon::List(items.iter().map(canonical).collect::<Option<_>>()?),
        Value::Tuple(items) => Canon::Tuple(items.iter().map(canonical).collect::<Option<_>>()?),
        Value::Ref(oid) => Canon::Ref(*oid),
        Value::Enum { descriptor, member } => Canon::Enum(*descriptor, member),
        _ => return None,
    })
}

/// The canonical form of a number (None for NaN, which equals nothing, and for integers
/// beyond `MAX_CANONICAL_BITS`).
fn number_form(number: Num<'_>) -> Option<Canon<'_>> {
    Some(match number {
        Num::Int(i) => Canon::Int(i),
        Num::Big(le) => integer_form(Cow::Borrowed(le))?,
        Num::Float(f) if f.is_nan() => return None,
        Num::Float(f) if f.is_finite() && f.fract() == 0.0 => {
            if (-TWO_127..TWO_127).contains(&f) {
                Canon::Int(f as i128)
            } else {
                integer_form(Cow::Owned(float_to_twos_complement(f)))?
            }
        }
        Num::Float(f) => Canon::Float(f.to_bits()),
        Num::Decimal(d) if d.is_integral() => match d.to_i128() {
            Some(i) => Canon::Int(i),
            // Past the bound (with the sign's byte), `integer_form` has none either.
            None => integer_form(Cow::Owned(d.to_twos_complement(MAX_CANONICAL_BITS + 16)?))?,
        },
        Num::Decimal(d) => match d.as_float() {
            Some(f) => Canon::Float(f.to_bits()),
            None => Canon::Decimal(DecimalForm(d)),
        },
    })
}

/// The canonical form of an integer given as little-endian two's complement of any length.
fn integer_form(le: Cow<'_, [u8]>) -> Option<Canon<'_>> {
    let len = minimal_twos_complement(&le).len();
    if len * 8 > MAX_CANONICAL_BITS + 8 {
        return None;
    }
    Some(match bigint_to_i128(&le[..len]) {
        Some(i) => Canon::Int(i),
        None => Canon::Big(match le {
            Cow::Borrowed(b) => Cow::Borrowed(&b[..len]),
            Cow::Owned(mut b) => {
                b.truncate(len);
                Cow::Owned(b)
            }
        }),
    })
}

/// The values of an `in_` list, for membership tests: `contains(found)` holds exactly when
/// `compares(found, Eq, v)` holds for some value `v` of the list.
#[derive(Debug)]
pub(crate) struct ValueSet<'e> {
    /// The canonical forms of the values that have one.
    hashed: HashSet<Canon<'e>>,
    /// The values without a canonical form.
    others: Vec<&'e Value>,
}

impl<'e> ValueSet<'e> {
    pub(crate) fn new(values: &'e [Value]) -> Self {
        let mut set = ValueSet { hashed: HashSet::with_capacity(values.len()), others: Vec::new() };
        for value in values {
            match canonical(value) {
                Some(form) => {
                    set.hashed.insert(form);
                }
                None => set.others.push(value),
            }
        }
        set
    }

    pub(crate) fn contains(&self, found: &Value) -> bool {
        // A value with a canonical form equals only values with the same form, and one without
        // equals only values without (`Canon`).
        match canonical(found) {
            Some(form) => self.hashed.contains(&form),
            None => self.others.iter().any(|v| compares(found, CmpOp::Eq, v)),
        }
    }
}

/// The hashed `in_` lists of one filter, found by the address of the list they were built from
/// (the filter is borrowed while they live, so its lists do not move).
#[derive(Debug, Default)]
pub(crate) struct ValueSets<'e> {
    sets: Vec<(&'e [Value], ValueSet<'e>)>,
}

impl<'e> ValueSets<'e> {
    /// The sets of the `in_` lists of `filter` long enough to gain from hashing.
    pub(crate) fn new(filter: &'e Expr) -> Self {
        let mut sets = ValueSets::default();
        sets.collect(filter);
        sets
    }

    fn collect(&mut self, expr: &'e Expr) {
        match expr {
            Expr::In { values, .. } | Expr::SelfIn(values) if values.len() >= HASHED_FROM => self.sets.push((values, ValueSet::new(values))),
            Expr::And(items) | Expr::Or(items) => items.iter().for_each(|e| self.collect(e)),
            Expr::Not(inner) => self.collect(inner),
            _ => {}
        }
    }

    /// Whether `found` equals a value of `values` (an `in_` list of the filter, or any list).
    pub(crate) fn contains(&self, values: &[Value], found: &Value) -> bool {
        match self.sets.iter().find(|(list, _)| std::ptr::eq(*list, values)) {
            Some((_, set)) => set.contains(found),
            None => values.iter().any(|v| compares(found, CmpOp::Eq, v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer 2^bits + offset as a BIGINT, padded with `extra` sign bytes.
    fn big(bits: u32, negative: bool, extra: usize) -> Value {
        let mut le = vec![0u8; bits as usize / 8 + 2 + extra];
        le[bits as usize / 8] = 1 << (bits % 8);
        if negative {
            let mut carry = 1u16;
            for byte in le.iter_mut() {
                let sum = u16::from(!*byte) + carry;
                *byte = sum as u8;
                carry = sum >> 8;
            }
        }
        Value::BigInt(le)
    }

    /// 2020-10-25T02:30 as wall-clock microseconds.
    const PARIS_FOLD: i64 = 1_603_593_000_000_000;

    /// Values chosen to sit on the edges of `compares`' equality: numbers of every type that
    /// equal each other or nearly, NaN, signed zeros, strings with surrogates, naive and aware
    /// times, sequences, unordered collections, objects.
    fn tricky() -> Vec<Value> {
        let naive = TzInfo::Naive;
        let mut values = vec![
            Value::None,
            Value::Bool(false),
            Value::Bool(true),
            Value::Int(0),
            Value::Int(1),
            Value::Int(-1),
            Value::Int(2),
            Value::Int(i64::MAX),
            Value::Int(i64::MIN),
            Value::Int((1 << 53) + 1),
            Value::Float(0.0),
            Value::Float(-0.0),
            Value::Float(1.0),
            Value::Float(1.5),
            Value::Float(-1.5),
            Value::Float((1u64 << 53) as f64),
            Value::Float(9.223372036854776e18),
            Value::Float(TWO_127),
            Value::Float(-TWO_127),
            Value::Float(2f64.powi(200)),
            Value::Float(-(2f64.powi(200))),
            Value::Float(f64::INFINITY),
            Value::Float(f64::NEG_INFINITY),
            Value::Float(f64::NAN),
            Value::Decimal("1".into()),
            Value::Decimal("1.0".into()),
            Value::Decimal("1.5".into()),
            Value::Decimal("-0".into()),
            Value::Decimal("Infinity".into()),
            Value::Decimal("-Infinity".into()),
            Value::Decimal("NaN".into()),
            Value::Decimal("sNaN".into()),
            Value::Decimal("1e400".into()),
            Value::Decimal("0.1".into()),
            Value::Decimal("0.10".into()),
            Value::Decimal("0.10000000000000000001".into()),
            Value::Decimal("0.1000000000000000055511151231257827021181583404541015625".into()),
            Value::Float(0.1),
            Value::Decimal("0.5".into()),
            Value::Float(0.5),
            Value::Decimal("-1.5E+0".into()),
            Value::Decimal("1E+30".into()),
            Value::Decimal("1.0E+30".into()),
            Value::Decimal("1606938044258990275541962092341162602522202993782792835301376".into()),
            Value::Decimal("1606938044258990275541962092341162602522202993782792835301376.5".into()),
            Value::Decimal("1E+2000".into()),
            Value::Decimal("-1E+2000".into()),
            Value::Decimal("9007199254740993".into()),
            Value::Int(9_007_199_254_740_993),
            Value::BigInt(vec![1]),
            Value::BigInt(vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Value::BigInt(vec![0xFF; 20]),
            big(127, false, 0),
            big(127, false, 3),
            big(127, true, 0),
            big(200, false, 0),
            big(200, true, 0),
            big(200, true, 2),
            big(64, false, 0),
            Value::Complex(1.0, 0.0),
            Value::Complex(0.0, 0.0),
            Value::Complex(-0.0, 0.0),
            Value::Str(String::new()),
            Value::Str("a".into()),
            Value::Str("1".into()),
            Value::StrSurrogates(b"a".to_vec()),
            Value::StrSurrogates(vec![0xED, 0xA0, 0x80]),
            Value::Bytes(b"a".to_vec()),
            Value::ByteArray(b"a".to_vec()),
            Value::Date { days: 1 },
            Value::DateTime { micros: 3_600_000_000, tz: naive.clone(), fold: false },
            Value::DateTime { micros: 3_600_000_000, tz: naive.clone(), fold: true },
            Value::DateTime { micros: 3_600_000_000, tz: TzInfo::Offset(0), fold: false },
            Value::DateTime { micros: 7_200_000_000, tz: TzInfo::Offset(3_600_000_000), fold: false },
            Value::DateTime { micros: 3_600_000_000, tz: TzInfo::Named("Europe/Paris".into()), fold: false },
            Value::DateTime { micros: 0, tz: TzInfo::Offset(0), fold: false },
            Value::DateTime { micros: 0, tz: TzInfo::Naive, fold: false },
            Value::DateTime { micros: 0, tz: TzInfo::Named("Europe/London".into()), fold: false },
            Value::DateTime { micros: 0, tz: TzInfo::Named("No/Such_Zone".into()), fold: false },
            // 2020-10-25 02:30 in Paris, twice (fold 0 is 00:30 UTC, fold 1 is 01:30 UTC).
            Value::DateTime { micros: PARIS_FOLD, tz: TzInfo::Named("Europe/Paris".into()), fold: false },
            Value::DateTime { micros: PARIS_FOLD, tz: TzInfo::Named("Europe/Paris".into()), fold: true },
            Value::DateTime { micros: PARIS_FOLD - 2 * 3_600_000_000, tz: TzInfo::Offset(0), fold: false },
            Value::DateTime { micros: PARIS_FOLD - 3_600_000_000, tz: TzInfo::Offset(0), fold: false },
            Value::DateTime { micros: PARIS_FOLD - 3_600_000_000, tz: TzInfo::Named("Europe/London".into()), fold: false },
            Value::DateTime { micros: PARIS_FOLD + 3_600_000_000, tz: TzInfo::Named("Europe/Paris".into()), fold: false },
            Value::DateTime { micros: PARIS_FOLD + 3_600_000_000, tz: TzInfo::Offset(3_600_000_000), fold: false },
            Value::Time { micros: 3_600_000_000, tz: TzInfo::Named("UTC".into()), fold: false },
            Value::Time { micros: 3_600_000_000, tz: naive.clone(), fold: false },
            Value::Time { micros: 3_600_000_000, tz: TzInfo::Named("Europe/Paris".into()), fold: false },
            Value::Time { micros: 3_600_000_000, tz: TzInfo::Offset(0), fold: false },
            Value::Time { micros: 7_200_000_000, tz: TzInfo::Offset(3_600_000_000), fold: false },
            Value::TimeDelta { days: 1, seconds: 0, micros: 0 },
            Value::TimeDelta { days: 0, seconds: 86_400, micros: 0 },
            Value::Uuid([7; 16]),
            Value::Ref(5),
            Value::Ref(6),
            Value::Enum { descriptor: 3, member: "RED".into() },
            Value::Enum { descriptor: 4, member: "RED".into() },
            Value::BackRef(0),
            Value::Dict(vec![(Value::Int(1), Value::Str("a".into())), (Value::Int(2), Value::None)]),
            Value::Dict(vec![(Value::Float(2.0), Value::None), (Value::Bool(true), Value::Str("a".into()))]),
            Value::Set(vec![Value::Int(1), Value::Int(2)]),
            Value::FrozenSet(vec![Value::Float(2.0), Value::Bool(true)]),
            Value::Object { descriptor: 9, fields: vec![Value::Int(1)] },
            Value::Object { descriptor: 9, fields: vec![Value::Float(1.0)] },
        ];
        let scalars = values.clone();
        // Sequences of the values above, so that equality of their items is exercised too.
        for (i, item) in scalars.iter().enumerate().step_by(3) {
            let next = scalars[(i + 7) % scalars.len()].clone();
            values.push(Value::List(vec![item.clone(), next.clone()]));
            values.push(Value::Tuple(vec![item.clone(), next]));
            values.push(Value::List(vec![item.clone()]));
        }
        values.push(Value::List(vec![Value::Int(1), Value::Decimal("NaN".into())]));
        values.push(Value::List(vec![Value::Float(1.0), Value::Decimal("NaN".into())]));
        values.push(Value::List(Vec::new()));
        values.push(Value::Tuple(Vec::new()));
        values
    }

    #[test]
    fn canonical_forms_are_equal_exactly_when_values_compare_equal() {
        let values = tricky();
        for a in &values {
            for b in &values {
                let expected = compares(a, CmpOp::Eq, b);
                match (canonical(a), canonical(b)) {
                    (Some(x), Some(y)) => assert_eq!(x == y, expected, "{a:?} == {b:?}"),
                    (None, None) => {}
                    _ => assert!(!expected, "{a:?} == {b:?}, but only one has a canonical form"),
                }
            }
        }
    }

    #[test]
    fn numbers_equal_across_types_share_a_form() {
        let one = canonical(&Value::Int(1));
        assert!(one.is_some());
        for other in [Value::Bool(true), Value::Float(1.0), Value::Decimal("1.00".into()), Value::BigInt(vec![1, 0, 0])] {
            assert_eq!(canonical(&other), one, "{other:?}");
        }
        assert_eq!(canonical(&Value::Float(-0.0)), canonical(&Value::Int(0)));
        assert_eq!(canonical(&Value::Float(f64::NAN)), None);
        assert_eq!(canonical(&Value::Float(2f64.powi(200))), canonical(&big(200, false, 1)));
        assert_eq!(canonical(&Value::Decimal("0.50".into())), canonical(&Value::Float(0.5)));
        assert_ne!(canonical(&Value::Decimal("0.1".into())), canonical(&Value::Float(0.1)));
        assert_eq!(canonical(&Value::Decimal("NaN".into())), None);
        assert_eq!(canonical(&big(5000, false, 0)), None);
        assert_ne!(canonical(&Value::Float(f64::INFINITY)), canonical(&big(2000, false, 0)));
    }

    /// A small deterministic generator (xorshift64*), so that the property test below needs no
    /// dependency and runs the same cases everywhere.
    struct Cases(u64);

    impl Cases {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Random values of mixed kinds, biased towards small numbers so that equal ones are common.
    fn random_value(cases: &mut Cases, pool: &[Value], depth: u32) -> Value {
        match cases.below(if depth > 1 { 8 } else { 10 }) {
            0 | 1 => pool[cases.below(pool.len())].clone(),
            2 => Value::Int(cases.below(7) as i64 - 3),
            3 => Value::Float((cases.below(13) as f64 - 6.0) / 2.0),
            4 => Value::Bool(cases.below(2) == 1),
            5 => Value::Decimal(format!("{}.{}", cases.below(4), cases.below(3) * 5)),
            6 => Value::Str(["a", "b", "1", ""][cases.below(4)].to_owned()),
            7 => Value::BigInt((0..cases.below(20)).map(|_| [0, 1, 0xFF, 0x80][cases.below(4)]).collect()),
            8 => Value::List((0..cases.below(3)).map(|_| random_value(cases, pool, depth + 1)).collect()),
            _ => Value::Tuple((0..cases.below(3)).map(|_| random_value(cases, pool, depth + 1)).collect()),
        }
    }

    #[test]
    fn hashed_membership_agrees_with_comparing_every_value() {
        let pool = tricky();
        let mut cases = Cases(0x9E37_79B9_7F4A_7C15);
        for _ in 0..400 {
            let values: Vec<Value> = (0..cases.below(40)).map(|_| random_value(&mut cases, &pool, 0)).collect();
            let set = ValueSet::new(&values);
            let probes = pool.iter().cloned().chain((0..60).map(|_| random_value(&mut cases, &pool, 0)));
            for found in probes {
                let linear = values.iter().any(|v| compares(&found, CmpOp::Eq, v));
                assert_eq!(set.contains(&found), linear, "{found:?} in {values:?}");
            }
        }
    }

    #[test]
    fn only_long_lists_of_the_filter_are_hashed_and_lookups_find_them() {
        let long: Vec<Value> = (0..100).map(Value::Int).collect();
        let filter = Expr::Or(vec![
            Expr::In { path: vec!["a".into()], values: long.clone() },
            Expr::Not(Box::new(Expr::In { path: vec!["b".into()], values: vec![Value::Int(1)] })),
        ]);
        let sets = ValueSets::new(&filter);
        assert_eq!(sets.sets.len(), 1);
        let Expr::Or(items) = &filter else { unreachable!() };
        let Expr::In { values, .. } = &items[0] else { unreachable!() };
        assert!(sets.contains(values, &Value::Float(42.0)));
        assert!(!sets.contains(values, &Value::Float(42.5)));
        // A list that is not the filter's (an equal copy) is compared value by value.
        assert!(sets.contains(&long, &Value::Bool(true)));
    }
}
