//! Text forms of streams (docs/TEXT_FORMATS.md) for `copal.dumps(obj, format="json")` and
//! `copal.loads` of a JSON document. Thin by design: the graph goes through the binary body
//! (standalone.rs, the same codec as every stream) and copal_core::text transcodes the body.

use copal_core::text::{json, TextError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::{corrupt, CorruptRecordError};
use crate::standalone::{decode_body, encode_body};

/// `copal.dumps(obj, format="json")`: the JSON document of `obj`'s graph.
#[pyfunction]
pub fn dumps_json_raw<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
    let body = encode_body(py, obj)?.concat();
    let text = py.detach(|| json::to_json(&body));
    // The body was just written by the encoder, so it always decodes; a failure is a bug.
    let text = text.map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("JSON transcoding failed: {e}")))?;
    Ok(PyString::new(py, &text))
}

/// `copal.loads` of a JSON document: the object graph it describes.
#[pyfunction]
pub fn loads_json_raw<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let body = py.detach(|| json::from_json(text).map(|body| body.encode()));
    let body = body.map_err(|e| match e {
        TextError::Body(e) => corrupt("JSON document", e),
        other => CorruptRecordError::new_err(format!("corrupt JSON document: {other}")),
    })?;
    decode_body(py, &body)
}
