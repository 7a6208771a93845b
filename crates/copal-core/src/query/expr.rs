//! Filter expressions (the Python `copal.field(...)` operators) and their evaluation.

use std::borrow::Cow;
use std::cmp::Ordering;

use super::order::{compare, equals};
use super::value_set::ValueSets;
use super::Query;
use crate::format::Value;

/// A dotted path: a field of the record, then fields of embedded objects, keys of dicts, or
/// fields of referenced persistent objects.
pub type Path = Vec<String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn parse(op: &str) -> Option<CmpOp> {
        Some(match op {
            "==" => CmpOp::Eq,
            "!=" => CmpOp::Ne,
            "<" => CmpOp::Lt,
            "<=" => CmpOp::Le,
            ">" => CmpOp::Gt,
            ">=" => CmpOp::Ge,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone)]
pub enum Expr {
    True,
    Cmp { path: Path, op: CmpOp, value: Value },
    In { path: Path, values: Vec<Value> },
    StartsWith { path: Path, prefix: Value },
    IsNone { path: Path },
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    /// True for the objects that the value at the one selected path of at least one match of
    /// the query refers to (a reference, or references held in a container): a join followed
    /// backwards. A query resolves it into `SelfIn` before it reads anything (`resolve`).
    ReferencedBy(Box<Query>),
    /// True for the objects with one of these oids.
    SelfIn(Vec<Value>),
}

impl Expr {
    /// Every path the expression reads, in order of first use.
    pub fn paths<'e>(&'e self, out: &mut Vec<&'e Path>) {
        match self {
            Expr::True => {}
            Expr::Cmp { path, .. } | Expr::In { path, .. } | Expr::StartsWith { path, .. } | Expr::IsNone { path } => {
                if !out.contains(&path) {
                    out.push(path);
                }
            }
            Expr::And(items) | Expr::Or(items) => items.iter().for_each(|e| e.paths(out)),
            Expr::Not(inner) => inner.paths(out),
            // Their paths are the inner query's, or none: the object's own oid.
            Expr::ReferencedBy(_) | Expr::SelfIn(_) => {}
        }
    }

    /// Whether the expression holds a `ReferencedBy`, which must be resolved before it is
    /// evaluated.
    pub(crate) fn has_reverse_joins(&self) -> bool {
        match self {
            Expr::ReferencedBy(_) => true,
            Expr::And(items) | Expr::Or(items) => items.iter().any(Expr::has_reverse_joins),
            Expr::Not(inner) => inner.has_reverse_joins(),
            _ => false,
        }
    }

    /// Evaluates the expression; `lookup(path)` gives the value at a path (None: missing),
    /// borrowed where it can be, so that testing a field of a record copies nothing.
    pub fn eval<'v>(&self, lookup: &mut dyn FnMut(&Path) -> Option<Cow<'v, Value>>) -> bool {
        self.eval_with(lookup, &ValueSets::default())
    }

    /// As `eval`, testing membership in the `in_` lists that `sets` holds hashed (built from
    /// this expression by `ValueSets::new`) in constant time.
    pub(crate) fn eval_with<'v>(&self, lookup: &mut dyn FnMut(&Path) -> Option<Cow<'v, Value>>, sets: &ValueSets<'_>) -> bool {
        match self {
            Expr::True => true,
            Expr::Cmp { path, op, value } => match lookup(path) {
                None => *op == CmpOp::Ne,
                Some(found) => compares(&found, *op, value),
            },
            Expr::In { path, values } => lookup(path).is_some_and(|found| sets.contains(values, &found)),
            Expr::StartsWith { path, prefix } => lookup(path).is_some_and(|found| starts_with(&found, prefix)),
            Expr::IsNone { path } => lookup(path).is_none_or(|found| matches!(*found, Value::None)),
            Expr::And(items) => items.iter().all(|e| e.eval_with(lookup, sets)),
            Expr::Or(items) => items.iter().any(|e| e.eval_with(lookup, sets)),
            Expr::Not(inner) => !inner.eval_with(lookup, sets),
            Expr::SelfIn(oids) => lookup(&Vec::new()).is_some_and(|found| sets.contains(oids, &found)),
            // Resolved into `SelfIn` before any evaluation.
            Expr::ReferencedBy(_) => false,
        }
    }
}

/// `found <op> expected` with Python's semantics, except that comparing values of different
/// kinds is false instead of an error (and `!=` true).
pub fn compares(found: &Value, op: CmpOp, expected: &Value) -> bool {
    // The common test of a scan, answered without ordering the strings.
    if let (Value::Str(x), Value::Str(y), CmpOp::Eq | CmpOp::Ne) = (found, expected, op) {
        return (x == y) == (op == CmpOp::Eq);
    }
    match op {
        CmpOp::Eq => return equals(found, expected),
        CmpOp::Ne => return !equals(found, expected),
        // None only equals None: `None <= None` is an error in Python, here false.
        _ if matches!(found, Value::None) => return false,
        _ => {}
    }
    let ordering = compare(found, expected);
    match op {
        CmpOp::Lt => ordering == Some(Ordering::Less),
        CmpOp::Le => matches!(ordering, Some(Ordering::Less | Ordering::Equal)),
        CmpOp::Gt => ordering == Some(Ordering::Greater),
        _ => matches!(ordering, Some(Ordering::Greater | Ordering::Equal)),
    }
}

fn str_bytes(value: &Value) -> &[u8] {
    match value {
        Value::Str(s) => s.as_bytes(),
        Value::StrSurrogates(b) => b,
        _ => &[],
    }
}

fn starts_with(found: &Value, prefix: &Value) -> bool {
    match (found, prefix) {
        // Strings with lone surrogates are generalized UTF-8, whose byte order is code point order.
        (Value::Str(_) | Value::StrSurrogates(_), Value::Str(_) | Value::StrSurrogates(_)) => {
            str_bytes(found).starts_with(str_bytes(prefix))
        }
        (Value::Bytes(s) | Value::ByteArray(s), Value::Bytes(p)) => s.starts_with(p),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(s: &str) -> Path {
        s.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn missing_fields_fail_comparisons_and_count_as_none() {
        let mut lookup = |_: &Path| None::<Cow<'_, Value>>;
        assert!(!Expr::Cmp { path: path("a"), op: CmpOp::Eq, value: Value::Int(1) }.eval(&mut lookup));
        assert!(Expr::Cmp { path: path("a"), op: CmpOp::Ne, value: Value::Int(1) }.eval(&mut lookup));
        assert!(Expr::IsNone { path: path("a") }.eval(&mut lookup));
    }

    #[test]
    fn boolean_structure() {
        let mut lookup = |p: &Path| Some(Cow::Owned(if p[0] == "a" { Value::Int(3) } else { Value::Str("xy".into()) }));
        let e = Expr::And(vec![
            Expr::Cmp { path: path("a"), op: CmpOp::Ge, value: Value::Float(2.5) },
            Expr::Not(Box::new(Expr::In { path: path("a"), values: vec![Value::Int(1), Value::Int(2)] })),
            Expr::Or(vec![
                Expr::StartsWith { path: path("b"), prefix: Value::Str("x".into()) },
                Expr::IsNone { path: path("b") },
            ]),
        ]);
        assert!(e.eval(&mut lookup));
        assert!(!Expr::Cmp { path: path("b"), op: CmpOp::Lt, value: Value::Int(1) }.eval(&mut lookup));
    }
}
