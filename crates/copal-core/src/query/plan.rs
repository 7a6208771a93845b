//! The planner: picks an index for a query's filter and order, or a scan of the extents.
//!
//! An index on fields (f1, …, fn) serves a query whose top-level conjuncts fix f1 … fk by
//! equality and then bound f(k+1) by a range, a prefix or (when k = 0) a list of values; or whose
//! order_by keys are the index fields after the fixed ones (then results come in order and a limit
//! stops the scan early: top-k without sorting). Every candidate is still tested against the
//! whole filter, so ranges may be wider than the condition but never narrower.

use std::sync::Arc;

use super::clock::{datetime_line, is_zoned};
use super::expr::{CmpOp, Expr, Path};
use super::number::{bigint_to_i128, decimal_key, is_nan as value_is_nan, key_is_coarse, DecimalKey};
use super::order::{kind, Kind};
use super::Query;
use crate::format::index_key::{key_of, kind_byte, push_key, str_prefix_key, NUMBER, STR};
use crate::format::{Oid, TzInfo, Value};
use crate::store::{prefix_end, IndexDef};

/// A byte range of index keys: `[start, end)`, `end` None meaning the end of the index.
#[derive(Debug, Clone)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
pub enum Access {
    Scan,
    /// Reading the objects of these oids (sorted, no duplicates): the filter requires the
    /// object to be one of them (`Expr::SelfIn`, a resolved `referenced_by`).
    Oids(Vec<Oid>),
    Index {
        def: Arc<IndexDef>,
        ranges: Vec<KeyRange>,
        /// The index yields results in the query's order (ascending or descending), the
        /// entries of one sort group (`index_key::sort_group` of the first `sorted_fields`
        /// fields: the fixed ones and the order's) sorted by value among themselves.
        ordered: bool,
        sorted_fields: usize,
        /// The ranges hold exactly the entries of the matching objects: the filter needs no
        /// record to be read (a count is a count of index entries).
        exact: bool,
        descending: bool,
        /// How many leading index fields the filter fixes by equality.
        fixed: usize,
        /// How conditions bound the field after the fixed ones, if they do.
        bounded: Option<Bound>,
        /// The ranges hold at most one entry: the index is unique and equalities fix every
        /// field to a value whose key is exact (never None, which unique indexes exempt).
        single: bool,
    },
}

/// How conditions select key ranges of the index field after the fixed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// A list of values (`in_`).
    Values,
    /// A string prefix (`startswith`).
    Prefix,
    /// Comparisons (`<`, `<=`, `>`, `>=`, or an equality whose operand others share keys with).
    Range,
}

pub(super) fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::And(items) => items.iter().flat_map(conjuncts).collect(),
        other => vec![other],
    }
}

/// Reading the objects of a `SelfIn` conjunct, the smallest if there are several: a join's
/// objects, named by oid, are fewer than an extent or an index range holds in the cases that
/// call for a join (and never more than the inner query matched).
pub(super) fn by_oids(conds: &[&Expr]) -> Option<Access> {
    let smallest = conds
        .iter()
        .filter_map(|c| match c {
            Expr::SelfIn(values) => Some(values),
            _ => None,
        })
        .min_by_key(|values| values.len())?;
    let mut oids: Vec<Oid> = smallest.iter().filter_map(|v| if let Value::Ref(oid) = v { Some(*oid) } else { None }).collect();
    oids.sort_unstable();
    oids.dedup();
    Some(Access::Oids(oids))
}

fn single(path: &Path) -> Option<&str> {
    (path.len() == 1).then(|| path[0].as_str())
}

/// The first equality on `field` among `conds` that an index can serve as a fixed prefix (the
/// operand's equals have its key): its position and operand.
fn eq_value<'e>(conds: &[&'e Expr], field: &str) -> Option<(usize, &'e Value)> {
    let point = |value: &Value| !zoned(value) && is_faithful(value);
    conds.iter().enumerate().find_map(|(i, c)| match c {
        Expr::Cmp { path, op: CmpOp::Eq, value } if single(path) == Some(field) && point(value) => Some((i, value)),
        Expr::In { path, values } if single(path) == Some(field) && values.len() == 1 && point(&values[0]) => {
            values.first().map(|v| (i, v))
        }
        _ => None,
    })
}

/// The magnitude below which number keys order and equal exactly like numbers. A key is the
/// number as a float plus an exactness residual of 64 bits, which stops being exact for integers
/// from about 2^116 on (and integers beyond 128 bits all have an infinity's key), so an operand
/// that large could miss stored values that equal it or lie on its side.
const FAITHFUL_NUMBERS: f64 = 4.153837486827862e34; // 2^115

/// How far (microseconds) the instant of a datetime in a named zone may be from that of a
/// datetime of the same zone that Python finds equal, smaller or greater by wall clock: less
/// than the difference of two UTC offsets, each within a day.
const ZONE_SLACK: i64 = 2 * 86_400_000_000;

/// The keys of the stored values that may compare with an operand: those equal to it lie in
/// `lo..=hi`, those smaller at or below `hi`, those greater at or above `lo`; if `strict`,
/// smaller ones lie below `lo` and greater ones above `hi`.
struct OperandKeys {
    lo: Vec<u8>,
    hi: Vec<u8>,
    strict: bool,
}

/// The keys of `value` as an operand, or None when a key range could miss a stored value that
/// compares with it. Candidates are re-tested, so extra keys in a range are harmless; missing
/// ones are not. Values of the "other" kind (and sequences) are keyed by their encoding, which
/// equal values need not share (`{1, 2} == frozenset({2, 1})`); references are equal exactly
/// when their encodings are. A datetime in a named zone compares with its zone's datetimes by
/// wall clock, but is keyed by instant: its keys span `ZONE_SLACK` around its instant.
fn operand_keys(value: &Value) -> Option<OperandKeys> {
    if let Value::DateTime { micros, tz, fold } = value {
        if is_zoned(tz) {
            let instant = datetime_line(*micros, tz, *fold);
            let at = |micros: i64| key_of(&Value::DateTime { micros, tz: TzInfo::Offset(0), fold: false });
            return Some(OperandKeys { lo: at(instant - ZONE_SLACK), hi: at(instant + ZONE_SLACK), strict: false });
        }
    }
    let key = key_of(value);
    let strict = !(kind(value) == Kind::Number && key_is_coarse(value));
    is_faithful(value).then(|| OperandKeys { lo: key.clone(), hi: key, strict })
}

fn zoned(value: &Value) -> bool {
    matches!(value, Value::DateTime { tz, .. } if is_zoned(tz))
}

/// Whether the stored values that compare with `value` have keys in the ranges its key
/// bounds (`operand_keys`).
fn is_faithful(value: &Value) -> bool {
    match value {
        Value::Float(f) => f.is_nan() || f.abs() < FAITHFUL_NUMBERS,
        Value::BigInt(bytes) => bigint_to_i128(bytes).is_some_and(|i| (i.unsigned_abs() as f64) < FAITHFUL_NUMBERS),
        Value::Decimal(text) => match decimal_key(text) {
            DecimalKey::Integer(i) => (i.unsigned_abs() as f64) < FAITHFUL_NUMBERS,
            DecimalKey::Number(nearest, _) => nearest.is_nan() || nearest.abs() < FAITHFUL_NUMBERS,
        },
        // Timedeltas beyond 292 years share the saturated key.
        Value::TimeDelta { days, seconds, micros } => {
            let total = i128::from(*days) * 86_400_000_000 + i128::from(*seconds) * 1_000_000 + i128::from(*micros);
            (i128::from(i64::MIN) + 1..i128::from(i64::MAX)).contains(&total)
        }
        Value::Int(_) | Value::Bool(_) | Value::None => true,
        Value::Str(_) | Value::StrSurrogates(_) | Value::Bytes(_) | Value::ByteArray(_) => true,
        Value::Date { .. } | Value::DateTime { .. } | Value::Time { .. } | Value::Uuid(_) => true,
        Value::Ref(_) => true,
        _ => false,
    }
}

/// Whether the index key of `value` selects exactly the stored values that the filter's
/// comparison with it accepts: true for the kinds whose keys are exact and whose order in
/// filters is the key order (bools, ints and floats below 2^53 other than NaN, str, bytes,
/// dates). Decimals share keys with close numbers, and so do integers from 2^53 on with the
/// decimals just above them.
fn has_exact_key(value: &Value) -> bool {
    match value {
        Value::Bool(_) | Value::Int(_) | Value::Float(_) => !value_is_nan(value) && !key_is_coarse(value),
        Value::Str(_) | Value::Bytes(_) | Value::Date { .. } => true,
        _ => false,
    }
}

/// The end of the number keys that are not NaN: NaN has the greatest key of its kind, and no
/// comparison accepts it, so a range bounded only below stops before it.
fn numbers_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = joined(prefix, &[NUMBER]);
    end.extend_from_slice(&[0xFF; 8]);
    end
}

fn joined(prefix: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut out = prefix.to_vec();
    out.extend_from_slice(rest);
    out
}

/// The key ranges that conditions on one index field select, which of the conditions they
/// answer exactly (the positions in the conjunct list), and how they bound the field.
struct FieldRanges {
    ranges: Vec<KeyRange>,
    exact: Vec<usize>,
    bound: Bound,
}

/// The ranges for conditions on the field after the fixed prefix, if any condition applies.
fn field_ranges(conds: &[&Expr], field: &str, prefix: &[u8]) -> Option<FieldRanges> {
    let mut lower: Option<(Vec<u8>, bool)> = None;
    let mut upper: Option<(Vec<u8>, bool)> = None;
    let mut kinds: Vec<u8> = Vec::new();
    let mut bounds = Vec::new();
    let mut all_exact = true;
    for (i, cond) in conds.iter().enumerate() {
        match cond {
            Expr::In { path, values } if single(path) == Some(field) => {
                let Some(keys) = values.iter().map(operand_keys).collect::<Option<Vec<_>>>() else { continue };
                let mut ranges: Vec<KeyRange> = keys
                    .into_iter()
                    .map(|k| KeyRange { start: joined(prefix, &k.lo), end: prefix_end(&joined(prefix, &k.hi)) })
                    .collect();
                ranges.sort_by(|a, b| a.start.cmp(&b.start));
                // Overlapping ranges are merged: each entry is read once.
                let mut merged: Vec<KeyRange> = Vec::with_capacity(ranges.len());
                for range in ranges {
                    match merged.last_mut() {
                        Some(last) if last.end.as_ref().is_none_or(|end| range.start <= *end) => {
                            last.end = match (last.end.take(), range.end) {
                                (Some(a), Some(b)) => Some(a.max(b)),
                                _ => None,
                            };
                        }
                        _ => merged.push(range),
                    }
                }
                let exact = if values.iter().all(has_exact_key) { vec![i] } else { Vec::new() };
                return Some(FieldRanges { ranges: merged, exact, bound: Bound::Values });
            }
            Expr::StartsWith { path, prefix: Value::Str(p) } if single(path) == Some(field) => {
                let start = joined(prefix, &str_prefix_key(p.as_bytes(), STR));
                let ranges = vec![KeyRange { end: prefix_end(&start), start }];
                return Some(FieldRanges { ranges, exact: vec![i], bound: Bound::Prefix });
            }
            Expr::Cmp { path, op, value } if single(path) == Some(field) => {
                let Some(keys) = operand_keys(value) else { continue };
                let (lo, hi) = (joined(prefix, &keys.lo), joined(prefix, &keys.hi));
                match op {
                    CmpOp::Gt if keys.strict => lower = Some((hi, false)),
                    CmpOp::Gt | CmpOp::Ge => lower = Some((lo, true)),
                    CmpOp::Lt if keys.strict => upper = Some((lo, false)),
                    CmpOp::Lt | CmpOp::Le => upper = Some((hi, true)),
                    // An equality whose operand has one key fixes the field (`eq_value`).
                    CmpOp::Eq if keys.lo != keys.hi => {
                        lower = Some((lo, true));
                        upper = Some((hi, true));
                    }
                    CmpOp::Eq | CmpOp::Ne => continue,
                }
                kinds.push(kind_byte(value));
                bounds.push(i);
                all_exact &= has_exact_key(value);
            }
            _ => {}
        }
    }
    let kind = *kinds.last()?;
    // Bounds of different kinds select a range no comparison accepts whole.
    let exact = if all_exact && kinds.iter().all(|k| *k == kind) { bounds } else { Vec::new() };
    // A one-sided range stays within the operand's kind: `age > 30` never matches strings.
    let start = match lower {
        Some((key, true)) => key,
        Some((key, false)) => prefix_end(&key)?,
        None => joined(prefix, &[kind]),
    };
    let end = match upper {
        Some((key, true)) => prefix_end(&key),
        Some((key, false)) => Some(key),
        None if kind == NUMBER => Some(numbers_end(prefix)),
        None => prefix_end(&joined(prefix, &[kind])),
    };
    Some(FieldRanges { ranges: vec![KeyRange { start, end }], exact, bound: Bound::Range })
}

/// Whether `def` keys the records of `type_names` as the query reads them: a field under the
/// same former names, and a field they lack as the same default (or missing). An index built by
/// a program whose classes rename or default a field otherwise (another version of the class,
/// during a rolling deploy: indexes are kept while any version declares them) would give other
/// answers than a scan: the query scans.
fn reads_like_query(query: &Query, def: &IndexDef, type_names: &[&str]) -> bool {
    type_names.iter().all(|&type_name| {
        let renames = query.renamed.get(type_name);
        def.fields.iter().all(|field| {
            let indexed_default = def.default_key(type_name, field);
            let default_agrees = match query.field_default(type_name, field) {
                Some(value) => indexed_default == Some(key_of(value).as_slice()),
                None => indexed_default.is_none(),
            };
            let former_of_query = || renames.into_iter().flatten().filter(|(_, new)| new == field).map(|(old, _)| old.as_str());
            let former_of_index = || def.renamed.iter().filter(|(t, _, new)| t == type_name && new == field).map(|(_, old, _)| old.as_str());
            // Most fields were never renamed: the sets are compared only when either has one.
            let renames_agree = match (former_of_query().next(), former_of_index().next()) {
                (None, None) => true,
                _ => {
                    let mut former: Vec<&str> = former_of_query().collect();
                    let mut indexed: Vec<&str> = former_of_index().collect();
                    former.sort_unstable();
                    indexed.sort_unstable();
                    former == indexed
                }
            };
            default_agrees && renames_agree
        })
    })
}

/// Whether an index whose fields after the fixed ones are `rest` yields results in the order of
/// `order` (all keys in one direction, each the next field of `rest`).
fn index_gives_order(order: &[(Path, bool)], rest: &[String]) -> bool {
    !order.is_empty()
        && order.windows(2).all(|w| w[0].1 == w[1].1)
        && order.len() <= rest.len()
        && order.iter().zip(rest).all(|((path, _), field)| single(path) == Some(field.as_str()))
}

/// The best access for `query` among `defs` (those covering every queried type).
pub fn plan(query: &Query, defs: &[Arc<IndexDef>], type_names: &[&str]) -> Access {
    let conds = conjuncts(&query.filter);
    let mut tested = Vec::new();
    query.filter.paths(&mut tested);
    let first_order = query.order.first().and_then(|(path, _)| single(path));
    // An index serves a query only through its first field: tested, or the first sort key.
    let usable = |def: &IndexDef| {
        def.fields.first().is_some_and(|first| first_order == Some(first.as_str()) || tested.iter().any(|path| single(path) == Some(first.as_str())))
    };
    let mut best: Option<(usize, Access)> = None;
    for def in defs {
        if !usable(def) || !type_names.iter().all(|t| def.covered.iter().any(|c| c == t)) || !reads_like_query(query, def, type_names) {
            continue;
        }
        let mut prefix = Vec::new();
        let mut fixed = 0;
        // The conjuncts that the key ranges answer exactly.
        let mut answered = vec![false; conds.len()];
        for field in &def.fields {
            match eq_value(&conds, field) {
                Some((i, value)) => {
                    push_key(&mut prefix, Some(value));
                    answered[i] = has_exact_key(value);
                    fixed += 1;
                }
                None => break,
            }
        }
        let mut bounded = None;
        let mut score = fixed * 4;
        let selected = def.fields.get(fixed).and_then(|next| field_ranges(&conds, next, &prefix));
        let ranges = match selected {
            Some(selected) => {
                selected.exact.into_iter().for_each(|i| answered[i] = true);
                score += 2;
                bounded = Some(selected.bound);
                selected.ranges
            }
            None => vec![KeyRange { end: if prefix.is_empty() { None } else { prefix_end(&prefix) }, start: prefix }],
        };
        let exact = conds.iter().zip(&answered).all(|(cond, answered)| *answered || matches!(cond, Expr::True));
        // Results come in index order when the order keys are the fields after the fixed ones.
        let ordered = index_gives_order(&query.order, &def.fields[fixed.min(def.fields.len())..]);
        if ordered {
            score += 1;
        }
        if score == 0 {
            continue;
        }
        let descending = ordered && query.order[0].1;
        let sorted_fields = fixed + query.order.len();
        if best.as_ref().is_none_or(|(s, _)| score > *s) {
            let single = def.unique && exact && fixed == def.fields.len();
            let access = Access::Index { def: Arc::clone(def), ranges, ordered, sorted_fields, exact, descending, fixed, bounded, single };
            best = Some((score, access));
        }
    }
    best.map(|(_, access)| access).unwrap_or(Access::Scan)
}

pub fn describe(access: &Access, query: &Query) -> String {
    match access {
        Access::Scan => "scan of the class extents in Rust, decoding only the tested fields".to_owned(),
        Access::Oids(oids) => format!("read of the {} object(s) referenced by the matches of the inner query", oids.len()),
        Access::Index { def, ranges, ordered, exact, descending, fixed, bounded, .. } => {
            let mut why: Vec<String> = def.fields[..*fixed].iter().map(|field| format!("{field} =")).collect();
            if let (Some(bound), Some(field)) = (bounded, def.fields.get(*fixed)) {
                why.push(match bound {
                    Bound::Values => format!("{field} in (…)"),
                    Bound::Prefix => format!("{field} prefix"),
                    Bound::Range => format!("{field} range"),
                });
            }
            if *ordered {
                why.push("order".to_owned());
            }
            let mut text = format!(
                "{} index {}({}) [{}], {} key range(s)",
                if def.unique { "unique" } else { "" },
                def.type_name,
                def.fields.join(", "),
                why.join(", "),
                ranges.len()
            );
            if *exact {
                text.push_str(", answers the filter from the index alone");
            }
            if *ordered {
                text.push_str(if *descending { ", read in descending order" } else { ", read in order" });
                if let Some(limit) = query.limit {
                    text.push_str(&format!(", stops after {} results (top-k, no sort)", limit + query.offset));
                }
            }
            text.trim_start().to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_whose_keys_others_share_select_inclusive_ranges() {
        let strict = |value: Value| operand_keys(&value).map(|keys| (keys.lo == keys.hi, keys.strict));
        assert_eq!(strict(Value::Int(5)), Some((true, true)));
        assert_eq!(strict(Value::Float(0.1)), Some((true, true)));
        // Decimals near them, and integers from 2^53 on, share keys with unequal numbers.
        assert_eq!(strict(Value::Decimal("0.1".into())), Some((true, false)));
        assert_eq!(strict(Value::Int(1 << 60)), Some((true, false)));
        assert_eq!(strict(Value::Float(1e40)), None);
        assert!(has_exact_key(&Value::Int(5)) && !has_exact_key(&Value::Int(1 << 60)));
        assert!(!has_exact_key(&Value::Decimal("5".into())));
        // A datetime in a named zone spans the instants of its zone's equal wall clocks.
        let zoned = Value::DateTime { micros: 0, tz: TzInfo::Named("Europe/Paris".into()), fold: false };
        if is_zoned(&TzInfo::Named("Europe/Paris".into())) {
            assert_eq!(strict(zoned), Some((false, false)));
        }
        assert_eq!(strict(Value::DateTime { micros: 0, tz: TzInfo::Offset(0), fold: false }), Some((true, true)));
    }
}
