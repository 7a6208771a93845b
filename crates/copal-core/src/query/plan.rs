//! The planner: picks an index for a query's filter and order, or a scan of the extents.
//!
//! An index on fields (f1, …, fn) serves a query whose top-level conjuncts fix f1 … fk by
//! equality and then bound f(k+1) by a range, a prefix or (when k = 0) a list of values; or whose
//! order_by keys are the index fields after the fixed ones (then results come in order and a limit
//! stops the scan early: top-k without sorting). Every candidate is still tested against the
//! whole filter, so ranges may be wider than the condition but never narrower.

use std::sync::Arc;

use super::expr::{CmpOp, Expr, Path};
use super::Query;
use crate::format::index_key::{kind_byte, push_key, str_prefix_key, STR};
use crate::format::Value;
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
    Index {
        def: Arc<IndexDef>,
        ranges: Vec<KeyRange>,
        /// The index yields results in the query's order (ascending or descending).
        ordered: bool,
        descending: bool,
        why: String,
    },
}

fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::And(items) => items.iter().flat_map(conjuncts).collect(),
        other => vec![other],
    }
}

fn single(path: &Path) -> Option<&str> {
    (path.len() == 1).then(|| path[0].as_str())
}

fn eq_value<'e>(conds: &[&'e Expr], field: &str) -> Option<&'e Value> {
    conds.iter().find_map(|c| match c {
        Expr::Cmp { path, op: CmpOp::Eq, value } if single(path) == Some(field) => Some(value),
        Expr::In { path, values } if single(path) == Some(field) && values.len() == 1 => values.first(),
        _ => None,
    })
}

fn key_of(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    push_key(&mut out, Some(value));
    out
}

fn joined(prefix: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut out = prefix.to_vec();
    out.extend_from_slice(rest);
    out
}

/// The ranges for conditions on the field after the fixed prefix, if any condition applies.
fn field_ranges(conds: &[&Expr], field: &str, prefix: &[u8]) -> Option<(Vec<KeyRange>, String)> {
    let mut lower: Option<(Vec<u8>, bool)> = None;
    let mut upper: Option<(Vec<u8>, bool)> = None;
    let mut kind: Option<u8> = None;
    for cond in conds {
        match cond {
            Expr::In { path, values } if single(path) == Some(field) => {
                let mut keys: Vec<Vec<u8>> = values.iter().map(|v| joined(prefix, &key_of(v))).collect();
                keys.sort();
                keys.dedup();
                let ranges = keys.into_iter().map(|k| KeyRange { end: prefix_end(&k), start: k }).collect();
                return Some((ranges, format!("{field} in (…)")));
            }
            Expr::StartsWith { path, prefix: Value::Str(p) } if single(path) == Some(field) => {
                let start = joined(prefix, &str_prefix_key(p.as_bytes(), STR));
                return Some((vec![KeyRange { end: prefix_end(&start), start }], format!("{field} prefix")));
            }
            Expr::Cmp { path, op, value } if single(path) == Some(field) => {
                let key = joined(prefix, &key_of(value));
                kind = Some(kind_byte(value));
                match op {
                    CmpOp::Gt => lower = Some((key, false)),
                    CmpOp::Ge => lower = Some((key, true)),
                    CmpOp::Lt => upper = Some((key, false)),
                    CmpOp::Le => upper = Some((key, true)),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let kind = kind?;
    if lower.is_none() && upper.is_none() {
        return None;
    }
    // A one-sided range stays within the operand's kind: `age > 30` never matches strings.
    let start = match lower {
        Some((key, true)) => key,
        Some((key, false)) => prefix_end(&key)?,
        None => joined(prefix, &[kind]),
    };
    let end = match upper {
        Some((key, true)) => prefix_end(&key),
        Some((key, false)) => Some(key),
        None => prefix_end(&joined(prefix, &[kind])),
    };
    Some((vec![KeyRange { start, end }], format!("{field} range")))
}

/// The best access for `query` among `defs` (those covering every queried type).
pub fn plan(query: &Query, defs: &[Arc<IndexDef>], type_names: &[String]) -> Access {
    let conds = conjuncts(&query.filter);
    let mut best: Option<(usize, Access)> = None;
    for def in defs {
        if !type_names.iter().all(|t| def.covered.contains(t)) {
            continue;
        }
        let mut prefix = Vec::new();
        let mut fixed = 0;
        let mut why = Vec::new();
        for field in &def.fields {
            match eq_value(&conds, field) {
                Some(value) => {
                    prefix.extend(key_of(value));
                    fixed += 1;
                    why.push(format!("{field} ="));
                }
                None => break,
            }
        }
        let mut ranges = vec![KeyRange { end: if prefix.is_empty() { None } else { prefix_end(&prefix) }, start: prefix.clone() }];
        let mut score = fixed * 4;
        if let Some(next) = def.fields.get(fixed) {
            if let Some((field_ranges, what)) = field_ranges(&conds, next, &prefix) {
                ranges = field_ranges;
                score += 2;
                why.push(what);
            }
        }
        // Results come in index order when the order keys are the fields after the fixed ones.
        let order_fields: Vec<Option<&str>> = query.order.iter().map(|(p, _)| single(p)).collect();
        let rest: Vec<Option<&str>> = def.fields[fixed.min(def.fields.len())..].iter().map(|f| Some(f.as_str())).collect();
        let same_direction = query.order.windows(2).all(|w| w[0].1 == w[1].1);
        let ordered = !query.order.is_empty() && same_direction && order_fields.len() <= rest.len() && order_fields == rest[..order_fields.len()];
        if ordered {
            score += 1;
            why.push("order".to_owned());
        }
        if score == 0 {
            continue;
        }
        let descending = ordered && query.order[0].1;
        let access = Access::Index { def: Arc::clone(def), ranges, ordered, descending, why: why.join(", ") };
        if best.as_ref().is_none_or(|(s, _)| score > *s) {
            best = Some((score, access));
        }
    }
    best.map(|(_, access)| access).unwrap_or(Access::Scan)
}

pub fn describe(access: &Access, query: &Query) -> String {
    match access {
        Access::Scan => "scan of the class extents in Rust, decoding only the tested fields".to_owned(),
        Access::Index { def, ranges, ordered, descending, why } => {
            let mut text = format!(
                "{} index {}({}) [{}], {} key range(s)",
                if def.unique { "unique" } else { "" },
                def.type_name,
                def.fields.join(", "),
                why,
                ranges.len()
            );
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
