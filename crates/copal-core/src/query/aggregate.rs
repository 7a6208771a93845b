//! Aggregates of a query's matches, read from the records without building objects: how many
//! match, and the sum, least, greatest and mean of a path's values, over all matches or per
//! group of matches whose values of another path are equal.
//!
//! Values follow Python's arithmetic and comparisons (as filters do): ints are summed exactly
//! (up to 128 bits), floats with compensated summation (as `sum` does from CPython 3.12), an
//! int and a float make a float, bools count as ints; `min` and `max` compare as `<` does in
//! filters. A match whose path leads nowhere or to None adds nothing to a sum, mean, least or
//! greatest value (SQL's rule for NULL); with nothing to aggregate, they are None. Values that
//! Python could not add (a str) or order (a str and an int) are an error, not skipped.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;

use super::number::bigint_to_i128;
use super::order::{compare, equals, kind, Kind};
use super::pending::{Overlay, Source};
use super::{access, for_each_match, values_pending, Access, Expr, Path, Pending, Query};
use crate::format::{index_key, Value};
use crate::store::{Snapshot, StoreError};

/// What to compute of each group's matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// How many match.
    Count,
    /// The sum of the field's values.
    Sum,
    /// The least of the field's values.
    Min,
    /// The greatest of the field's values.
    Max,
    /// The mean of the field's values, a float.
    Avg,
}

impl Aggregate {
    pub fn name(self) -> &'static str {
        match self {
            Aggregate::Count => "count",
            Aggregate::Sum => "sum",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
            Aggregate::Avg => "avg",
        }
    }
}

/// An aggregate of the values of `field` (none for a count), per value of `group` if given.
#[derive(Debug, Clone)]
pub struct Aggregation {
    pub kind: Aggregate,
    pub field: Option<Path>,
    pub group: Option<Path>,
}

/// Why an aggregate could not be computed.
#[derive(Debug)]
pub enum AggregateError {
    Store(StoreError),
    /// A value that the aggregate cannot add (a str for a sum, a Decimal, which is not summed
    /// in Rust).
    NotANumber { aggregate: Aggregate, value: Value },
    /// Two values that cannot be ordered (a str and an int, a naive and an aware datetime).
    NotComparable { aggregate: Aggregate, first: Value, second: Value },
    /// An int sum beyond 128 bits.
    Overflow,
}

impl fmt::Display for AggregateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Store(e) => write!(f, "{e}"),
            Self::NotANumber { aggregate, value } => {
                write!(f, "{}() of a value that is not an int, float or bool: {}", aggregate.name(), describe(value))
            }
            Self::NotComparable { aggregate, first, second } => {
                write!(f, "{}() of values that cannot be ordered: {} and {}", aggregate.name(), describe(first), describe(second))
            }
            Self::Overflow => f.write_str("sum() of ints beyond 128 bits"),
        }
    }
}

impl std::error::Error for AggregateError {}

impl From<StoreError> for AggregateError {
    fn from(e: StoreError) -> Self {
        AggregateError::Store(e)
    }
}

/// A value named for an error message as Python would name it: its type, and the value itself
/// when it is a short scalar.
fn describe(value: &Value) -> String {
    let shown = |text: String| match text.chars().count() <= 40 {
        true => text,
        false => format!("{}...", text.chars().take(37).collect::<String>()),
    };
    match value {
        Value::Str(s) => format!("str {}", shown(format!("{s:?}"))),
        Value::Int(i) => format!("int {i}"),
        Value::Float(f) => format!("float {f}"),
        Value::Decimal(text) => format!("Decimal {}", shown(text.clone())),
        Value::Bytes(_) | Value::ByteArray(_) => "bytes".to_owned(),
        Value::StrSurrogates(_) => "str".to_owned(),
        Value::Complex(..) => "complex".to_owned(),
        Value::List(_) => "list".to_owned(),
        Value::Tuple(_) => "tuple".to_owned(),
        Value::Dict(_) => "dict".to_owned(),
        Value::Set(_) => "set".to_owned(),
        Value::FrozenSet(_) => "frozenset".to_owned(),
        Value::Date { .. } => "date".to_owned(),
        Value::DateTime { tz: crate::format::TzInfo::Naive, .. } => "naive datetime".to_owned(),
        Value::DateTime { .. } => "aware datetime".to_owned(),
        Value::Time { .. } => "time".to_owned(),
        Value::TimeDelta { .. } => "timedelta".to_owned(),
        Value::Uuid(_) => "UUID".to_owned(),
        Value::Enum { member, .. } => format!("enum member {member}"),
        Value::Ref(oid) => format!("stored object {oid:#x}"),
        _ => "object".to_owned(),
    }
}

/// The running aggregate of one group.
#[derive(Default)]
struct Running {
    /// Matches counted, or values added for a mean.
    count: u64,
    int: i128,
    /// Float values' sum and its compensation (Neumaier's).
    float: f64,
    compensation: f64,
    floats: bool,
    best: Option<Value>,
}

impl Running {
    fn add(&mut self, kind: Aggregate, value: Option<Value>) -> Result<(), AggregateError> {
        if kind == Aggregate::Count {
            self.count += 1;
            return Ok(());
        }
        let value = match value {
            None | Some(Value::None) => return Ok(()),
            Some(value) => value,
        };
        match kind {
            Aggregate::Min | Aggregate::Max => self.keep_best(kind, value),
            _ => self.add_number(kind, value),
        }
    }

    fn add_number(&mut self, kind: Aggregate, value: Value) -> Result<(), AggregateError> {
        let int = match value {
            Value::Int(i) => i128::from(i),
            Value::Bool(b) => i128::from(b),
            Value::BigInt(ref bytes) => bigint_to_i128(bytes).ok_or(AggregateError::Overflow)?,
            Value::Float(f) => {
                let sum = self.float + f;
                self.compensation += match self.float.abs() >= f.abs() {
                    true => (self.float - sum) + f,
                    false => (f - sum) + self.float,
                };
                self.float = sum;
                self.floats = true;
                self.count += 1;
                return Ok(());
            }
            value => return Err(AggregateError::NotANumber { aggregate: kind, value }),
        };
        self.int = self.int.checked_add(int).ok_or(AggregateError::Overflow)?;
        self.count += 1;
        Ok(())
    }

    fn keep_best(&mut self, kind: Aggregate, value: Value) -> Result<(), AggregateError> {
        // NaN is neither less nor greater than anything: it never becomes the least or the
        // greatest value (as with Python's min and max of values after a first number).
        if matches!(value, Value::Float(f) if f.is_nan()) {
            return Ok(());
        }
        let Some(best) = &self.best else {
            self.best = Some(value);
            return Ok(());
        };
        let better = match compare(&value, best) {
            Some(order) => order == if kind == Aggregate::Min { Ordering::Less } else { Ordering::Greater },
            None => return Err(AggregateError::NotComparable { aggregate: kind, first: best.clone(), second: value }),
        };
        if better {
            self.best = Some(value);
        }
        Ok(())
    }

    /// The aggregate: None when there was no value to aggregate (a count is never None).
    fn result(self, kind: Aggregate) -> Value {
        let floats = self.float + self.compensation;
        match kind {
            Aggregate::Count => int_value(i128::from(self.count)),
            Aggregate::Min | Aggregate::Max => self.best.unwrap_or(Value::None),
            _ if self.count == 0 => Value::None,
            Aggregate::Sum if self.floats => Value::Float(self.int as f64 + floats),
            Aggregate::Sum => int_value(self.int),
            Aggregate::Avg => Value::Float((self.int as f64 + floats) / self.count as f64),
        }
    }
}

/// `i` as an INT, or a BIGINT beyond 64 bits.
fn int_value(i: i128) -> Value {
    match i64::try_from(i) {
        Ok(small) => Value::Int(small),
        Err(_) => Value::BigInt(super::number::minimal_twos_complement(&i.to_le_bytes()).to_vec()),
    }
}

/// The groups of an aggregation and their running aggregates.
struct Groups<'a> {
    aggregation: &'a Aggregation,
    /// Each group's value and running aggregate, in the order of their first match.
    groups: Vec<(Value, Running)>,
    /// Groups by index key (equal values have equal keys: 1, 1.0 and True are one group, as
    /// in a dict), then by value among the few values that share a coarse key.
    by_key: HashMap<Vec<u8>, Vec<usize>>,
    /// The key of the group value added last (its buffer is reused).
    key: Vec<u8>,
}

impl Groups<'_> {
    /// Adds a match whose selected values are `keys` (which it empties): its group's value (if
    /// grouped), then its field's value (if the aggregate has a field).
    fn add(&mut self, keys: &mut Vec<Option<Value>>) -> Result<(), AggregateError> {
        let aggregation = self.aggregation;
        let field = if aggregation.field.is_some() { keys.pop().flatten() } else { None };
        let at = match aggregation.group {
            Some(_) => self.group_of(keys.pop().flatten().unwrap_or(Value::None)),
            None if self.groups.is_empty() => {
                self.groups.push((Value::None, Running::default()));
                0
            }
            None => 0,
        };
        self.groups[at].1.add(aggregation.kind, field)
    }

    /// The index in `groups` of the group of `value`, made if it is the first of its group.
    fn group_of(&mut self, value: Value) -> usize {
        self.key.clear();
        index_key::push_key(&mut self.key, Some(&value));
        let groups = &self.groups;
        if let Some(&at) = self.by_key.get(&self.key[..]).and_then(|candidates| candidates.iter().find(|&&i| equals(&groups[i].0, &value))) {
            return at;
        }
        self.by_key.entry(self.key.clone()).or_default().push(self.groups.len());
        self.groups.push((value, Running::default()));
        self.groups.len() - 1
    }

    fn results(mut self) -> Vec<(Value, Value)> {
        if self.groups.is_empty() && self.aggregation.group.is_none() {
            self.groups.push((Value::None, Running::default()));
        }
        let kind = self.aggregation.kind;
        self.groups.into_iter().map(|(group, running)| (group, running.result(kind))).collect()
    }
}

/// The aggregate of the matches of `query` as a transaction with `pending` changes sees them:
/// one (None, aggregate) without a group, else one (group value, aggregate) per distinct value
/// of the group path among the matches (None for matches where it leads nowhere or to None), in
/// the order of their first match. A query with an offset or a limit aggregates the matches it
/// returns (in its order); any other is aggregated as its records are read, keeping nothing but
/// the groups.
pub fn aggregate_pending(
    snapshot: &Snapshot,
    pending: &Pending,
    query: &Query,
    aggregation: &Aggregation,
) -> Result<Vec<(Value, Value)>, AggregateError> {
    let query = &*super::resolved(snapshot, pending, query)?;
    if let Some(extreme) = extreme_through_index(snapshot, pending, query, aggregation)? {
        return Ok(vec![(Value::None, extreme)]);
    }
    let select = aggregation.group.iter().chain(&aggregation.field).cloned().collect();
    let mut groups = Groups { aggregation, groups: Vec::new(), by_key: HashMap::new(), key: Vec::new() };
    if query.offset > 0 || query.limit.is_some() {
        let query = Query { select, ..query.clone() };
        for (_, mut keys) in values_pending(snapshot, pending, &query)? {
            groups.add(&mut keys)?;
        }
        return Ok(groups.results());
    }
    let query = Query { order: Vec::new(), select, ..query.clone() };
    let access = access(snapshot, &query)?;
    let overlay = Overlay::new(pending, &query);
    let mut failure = None;
    for_each_match(Source { snapshot, pending }, &query, &access, &overlay, |_, _, keys| match groups.add(keys) {
        Ok(()) => true,
        Err(error) => {
            failure = Some(error);
            false
        }
    })?;
    match failure {
        Some(error) => Err(error),
        None => Ok(groups.results()),
    }
}

/// The least or greatest value of an ungrouped `min`/`max` read from the two ends of an index
/// that orders the field, reading a record or two instead of all of them; None when no index
/// gives that order, or when the ends cannot vouch for the values between them: ends of two
/// kinds or of kinds whose values may be unordered among themselves (naive and aware datetimes
/// and times, containers, objects), or a NaN at an end. The scan then decides (and raises what
/// Python would).
fn extreme_through_index(snapshot: &Snapshot, pending: &Pending, query: &Query, aggregation: &Aggregation) -> Result<Option<Value>, StoreError> {
    let (Aggregate::Min | Aggregate::Max, None, Some(field)) = (aggregation.kind, &aggregation.group, &aggregation.field) else { return Ok(None) };
    if query.offset > 0 || query.limit.is_some() {
        return Ok(None);
    }
    let not_none = Expr::Not(Box::new(Expr::IsNone { path: field.clone() }));
    let end = |descending: bool| Query {
        filter: Expr::And(vec![query.filter.clone(), not_none.clone()]),
        order: vec![(field.clone(), descending)],
        select: vec![field.clone()],
        offset: 0,
        limit: Some(1),
        ..query.clone()
    };
    let least = end(false);
    if !matches!(access(snapshot, &least)?, Access::Index { ordered: true, .. }) {
        return Ok(None);
    }
    let value_at = |q: &Query| -> Result<Option<Value>, StoreError> { Ok(values_pending(snapshot, pending, q)?.into_iter().next().and_then(|(_, mut v)| v.pop().flatten())) };
    let (first, last) = match (value_at(&least)?, value_at(&end(true))?) {
        (Some(first), Some(last)) => (first, last),
        // No value at all: nothing to aggregate.
        (None, None) => return Ok(Some(Value::None)),
        _ => return Ok(None),
    };
    let vouched = matches!(kind(&first), Kind::Number | Kind::Str | Kind::Bytes | Kind::Date | Kind::TimeDelta | Kind::Uuid)
        && kind(&first) == kind(&last)
        && ![&first, &last].iter().any(|v| matches!(v, Value::Float(f) if f.is_nan()));
    Ok(vouched.then(|| if aggregation.kind == Aggregate::Min { first } else { last }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aggregate(kind: Aggregate, values: Vec<Option<Value>>) -> Result<Value, AggregateError> {
        let mut running = Running::default();
        for value in values {
            running.add(kind, value)?;
        }
        Ok(running.result(kind))
    }

    #[test]
    fn sums_follow_python_arithmetic() {
        let ints = vec![Some(Value::Int(i64::MAX)), Some(Value::Int(i64::MAX)), Some(Value::Bool(true)), None, Some(Value::None)];
        let expected = i128::from(i64::MAX) * 2 + 1;
        assert_eq!(aggregate(Aggregate::Sum, ints).unwrap(), int_value(expected));
        assert!(matches!(int_value(expected), Value::BigInt(_)));
        let mixed = vec![Some(Value::Int(1)), Some(Value::Float(0.5))];
        assert_eq!(aggregate(Aggregate::Sum, mixed).unwrap(), Value::Float(1.5));
        // Compensated: 1e16 + 1.0 + 1.0 - 1e16 is 2.0, not 0.0.
        let floats = [1e16, 1.0, 1.0, -1e16].map(|f| Some(Value::Float(f))).to_vec();
        assert_eq!(aggregate(Aggregate::Sum, floats).unwrap(), Value::Float(2.0));
        assert_eq!(aggregate(Aggregate::Sum, vec![None]).unwrap(), Value::None);
        assert_eq!(aggregate(Aggregate::Avg, vec![Some(Value::Int(1)), Some(Value::Int(2)), None]).unwrap(), Value::Float(1.5));
        let overflow = vec![Some(Value::BigInt(i128::MAX.to_le_bytes().to_vec())), Some(Value::Int(1))];
        assert!(matches!(aggregate(Aggregate::Sum, overflow), Err(AggregateError::Overflow)));
        let text = vec![Some(Value::Str("x".into()))];
        assert!(matches!(aggregate(Aggregate::Sum, text), Err(AggregateError::NotANumber { .. })));
    }

    #[test]
    fn least_and_greatest_compare_as_filters_do() {
        let values = vec![Some(Value::Int(3)), Some(Value::Float(f64::NAN)), Some(Value::Float(1.5)), None, Some(Value::Decimal("7".into()))];
        assert_eq!(aggregate(Aggregate::Min, values.clone()).unwrap(), Value::Float(1.5));
        assert_eq!(aggregate(Aggregate::Max, values).unwrap(), Value::Decimal("7".into()));
        assert_eq!(aggregate(Aggregate::Max, vec![None]).unwrap(), Value::None);
        let mixed = vec![Some(Value::Int(3)), Some(Value::Str("a".into()))];
        assert!(matches!(aggregate(Aggregate::Min, mixed), Err(AggregateError::NotComparable { .. })));
        assert_eq!(aggregate(Aggregate::Count, vec![None, None]).unwrap(), Value::Int(2));
    }
}
