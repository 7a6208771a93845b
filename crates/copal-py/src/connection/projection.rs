//! Projections and aggregates of a query as Python values: the core reads the values from the
//! records (`copal_core::query::values_pending`, `aggregate_pending`); they become Python objects
//! here through the record decoder, written as one value (a list of tuples, a dict of groups)
//! so that a whole result is built in one pass. References become the transaction's objects
//! (ghosts until touched), as loading makes them.

use std::sync::Arc;

use copal_core::format::{Reader, TzInfo, Value, Writer};
use copal_core::query::{self, AggregateError, Aggregation, Pending, Query};
use copal_core::store::Snapshot;
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyTzInfo, PyType};

use super::thread::without_gil;
use super::Connection;
use crate::decode::{DecodeInfo, Decoder, Resolver};
use crate::errors::IntoPyResult;
use crate::allocation;
use crate::hashing::IntMap;
use crate::list_builder::ListBuilder;

/// Resolves as the connection does, but references to the transaction's new objects (which
/// have provisional ids until the commit) give those objects.
struct TransactionObjects<'a> {
    conn: &'a Connection,
    new_objects: Option<&'a IntMap<u64, Py<PyAny>>>,
}

impl<'py> Resolver<'py> for TransactionObjects<'_> {
    fn descriptor(&self, py: Python<'py>, id: u32) -> PyResult<Arc<DecodeInfo>> {
        self.conn.descriptor(py, id)
    }

    fn class_of(&self, py: Python<'py>, info: &DecodeInfo) -> PyResult<Bound<'py, PyType>> {
        self.conn.class_of(py, info)
    }

    fn object(&self, py: Python<'py>, oid: u64) -> PyResult<Bound<'py, PyAny>> {
        match self.new_objects.and_then(|objects| objects.get(&oid)) {
            Some(obj) => Ok(obj.bind(py).clone()),
            None => self.conn.object_for(py, oid),
        }
    }

    fn zone(&self, py: Python<'py>, tz: &TzInfo) -> PyResult<Option<Bound<'py, PyTzInfo>>> {
        self.conn.zone(py, tz)
    }
}

/// Reads values from the records of a transaction, and makes their Python values.
pub(super) struct Reading<'a> {
    pub(super) conn: &'a Connection,
    pub(super) pending: &'a Pending,
    pub(super) new_objects: Option<&'a IntMap<u64, Py<PyAny>>>,
}

impl Reading<'_> {
    /// `work` on the transaction's snapshot and changes, without the GIL.
    fn in_snapshot<T>(&self, py: Python<'_>, work: impl FnOnce(&Snapshot, &Pending) -> PyResult<T>) -> PyResult<T> {
        self.conn.with_snapshot(|snapshot| without_gil(py, || work(snapshot, self.pending)))
    }

    /// The Python value of `value`: the common scalars made here, anything else by the record
    /// decoder (written as one value first), which makes every value as loading does.
    fn value<'py>(&self, py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
        match value {
            Value::None => Ok(py.None().into_bound(py)),
            Value::Bool(b) => Ok(PyBool::new(py, *b).to_owned().into_any()),
            Value::Int(i) => allocation::int(py, *i),
            Value::Float(f) => allocation::float(py, *f),
            Value::Str(s) => Ok(allocation::str(py, s)?.into_any()),
            other => self.decoded(py, other),
        }
    }

    fn decoded<'py>(&self, py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
        let mut w = Writer::new();
        value.encode(&mut w);
        let resolver = TransactionObjects { conn: self.conn, new_objects: self.new_objects };
        let what = || "query result".to_owned();
        let mut decoder = Decoder::new(py, &resolver, &what);
        let value = decoder.standalone(&mut Reader::new(&w.buf));
        drop(decoder);
        value
    }

    /// The values of `query.select` in each match: a list of tuples (None where a path leads
    /// nowhere).
    pub(super) fn values<'py>(&self, py: Python<'py>, query: &Query) -> PyResult<Bound<'py, PyAny>> {
        let rows = self.in_snapshot(py, |snapshot, pending| query::values_pending(snapshot, pending, query).py_err())?;
        let mut out = Vec::with_capacity(rows.len());
        let none = Value::None;
        for (_, values) in rows {
            // A row of common scalars is made value by value; any other row is decoded whole,
            // with one decoder, rather than one decoder per value.
            let row = match values.iter().all(|value| value.as_ref().is_none_or(is_scalar)) {
                true => {
                    let items = values.iter().map(|value| self.value(py, value.as_ref().unwrap_or(&none))).collect::<PyResult<Vec<_>>>()?;
                    allocation::tuple(py, items)?.into_any()
                }
                false => self.decoded(py, &Value::Tuple(values.into_iter().map(|value| value.unwrap_or(Value::None)).collect()))?,
            };
            out.push(row);
        }
        Ok(ListBuilder::of(py, out)?.into_any())
    }

    /// The values of `query.select` in each match as Arrow columns, named `names`.
    pub(super) fn arrow<'py>(&self, py: Python<'py>, query: &Query, names: &[String]) -> PyResult<Bound<'py, PyAny>> {
        let built = self.in_snapshot(py, |snapshot, pending| {
            let rows = query::values_pending(snapshot, pending, query).py_err()?;
            let count = rows.len();
            let columns = copal_core::arrow::columns(names, rows.into_iter().map(|(_, values)| values).collect());
            Ok(columns.map(|columns| (columns, count)))
        })?;
        let (columns, rows) = built.map_err(|e| PyTypeError::new_err(e.to_string()))?;
        Ok(Bound::new(py, crate::arrow_stream::ArrowStream::new(columns, rows))?.into_any())
    }

    /// The aggregate of the matches: its value, or with a group path a dict of the aggregate
    /// per group value.
    pub(super) fn aggregate<'py>(&self, py: Python<'py>, query: &Query, aggregation: &Aggregation) -> PyResult<Bound<'py, PyAny>> {
        let groups = self.in_snapshot(py, |snapshot, pending| {
            query::aggregate_pending(snapshot, pending, query, aggregation).map_err(|e| match e {
                AggregateError::Store(e) => crate::errors::store_error(e),
                e @ AggregateError::Overflow => PyOverflowError::new_err(e.to_string()),
                e => PyTypeError::new_err(e.to_string()),
            })
        })?;
        match aggregation.group {
            Some(_) => {
                let dict = PyDict::new(py);
                for (group, value) in groups {
                    dict.set_item(self.value(py, &group)?, self.value(py, &value)?)?;
                }
                Ok(dict.into_any())
            }
            None => self.value(py, &groups.into_iter().next().map_or(Value::None, |(_, value)| value)),
        }
    }
}

/// Whether `Reading::value` makes `value` itself, without the decoder.
fn is_scalar(value: &Value) -> bool {
    matches!(value, Value::None | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_))
}
