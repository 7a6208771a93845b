//! Python query descriptions -> core queries. python/copal/query.py builds filters as nested
//! tuples: ("cmp", path, op, value), ("in", path, values), ("prefix", path, value),
//! ("none", path), ("and", [filters]), ("or", [filters]), ("not", filter), ("true",).

use copal_core::format::{decode_value, Reader, Value};
use copal_core::query::{CmpOp, Expr, Path};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::encode::{Encoder, Sink};

/// Stands for an operand of a class the database has never stored: equal to nothing.
fn matches_nothing() -> Value {
    Value::Enum { descriptor: u32::MAX, member: String::new() }
}

/// Converts operands with the encoder (so they mean exactly what a stored value would).
pub struct OperandConverter<'a> {
    pub sink: &'a mut dyn OperandSink,
}

pub trait OperandSink: Sink {
    /// Whether the last encoding failed because a class is unknown to the database.
    fn take_unknown_class(&mut self) -> bool;
    fn decode(&self, bytes: &[u8]) -> PyResult<Value>;
}

impl OperandConverter<'_> {
    pub fn value(&mut self, operand: &Bound<'_, PyAny>) -> PyResult<Value> {
        let encoded = Encoder::new(self.sink).standalone(operand);
        if self.sink.take_unknown_class() {
            return Ok(matches_nothing());
        }
        self.sink.decode(&encoded?)
    }

    pub fn expr(&mut self, filter: &Bound<'_, PyAny>) -> PyResult<Expr> {
        let node = filter.cast::<PyTuple>().map_err(|_| PyValueError::new_err("malformed query filter"))?;
        let kind: String = node.get_item(0)?.extract()?;
        let path = |node: &Bound<'_, PyTuple>| -> PyResult<Path> { node.get_item(1)?.extract() };
        Ok(match kind.as_str() {
            "true" => Expr::True,
            "cmp" => {
                let op: String = node.get_item(2)?.extract()?;
                let op = CmpOp::parse(&op).ok_or_else(|| PyValueError::new_err(format!("unknown operator {op:?}")))?;
                Expr::Cmp { path: path(node)?, op, value: self.value(&node.get_item(3)?)? }
            }
            "in" => {
                // Loops, not `collect`: collecting a Python iterator asks for its length hint,
                // whose failure (out of memory) pyo3 prints as unraisable.
                let mut values = Vec::new();
                for value in node.get_item(2)?.try_iter()? {
                    values.push(self.value(&value?)?);
                }
                Expr::In { path: path(node)?, values }
            }
            "prefix" => Expr::StartsWith { path: path(node)?, prefix: self.value(&node.get_item(2)?)? },
            "none" => Expr::IsNone { path: path(node)? },
            "and" | "or" => {
                let mut items = Vec::new();
                for item in node.get_item(1)?.try_iter()? {
                    items.push(self.expr(&item?)?);
                }
                if kind == "and" { Expr::And(items) } else { Expr::Or(items) }
            }
            "not" => Expr::Not(Box::new(self.expr(&node.get_item(1)?)?)),
            other => return Err(PyValueError::new_err(format!("unknown query filter {other:?}"))),
        })
    }
}

pub fn decode_operand(bytes: &[u8], catalog: &copal_core::store::Catalog) -> PyResult<Value> {
    decode_value(&mut Reader::new(bytes), catalog).map_err(|e| crate::errors::corrupt("query operand", e))
}
