//! Text forms of streams (docs/TEXT_FORMATS.md) for `copal.dumps(obj, format="json"|"xml")` and
//! `copal.loads` of such documents. Thin by design: the graph goes through the binary body
//! (standalone.rs, the same codec as every stream) and copal_core::text transcodes the body;
//! JSON is first tried with the direct writer (json_writer.rs), which gives the same document
//! several times faster. A document may be compressed as a whole, in the codec's standard
//! frame (a gzip member, a zstd or an LZ4 frame), so that gunzip, zstd and lz4 read it too.

use copal_core::stream::{Codec, Payload};
use copal_core::text::{json, xml, TableEntry, TextError};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::allocation;
use crate::errors::CorruptRecordError;
use crate::standalone::{checked_compression, checked_max_size, decode_document_body, decompress, encode_body, loads_raw, loads_stream};

type Writer = fn(&[u8]) -> Result<String, TextError>;
/// A reader of documents: the descriptor table and the value of one's stream body, read through
/// trees of at most the given bytes if it must be.
type Parser = fn(&str, usize) -> Result<(Vec<TableEntry>, Vec<u8>), TextError>;

fn codec(format: &str) -> PyResult<(&'static str, Writer, Parser)> {
    match format {
        "json" => Ok(("JSON", json::to_json, json::table_and_value_from_json)),
        "xml" => Ok(("XML", xml::to_xml, xml::table_and_value_from_xml)),
        other => Err(PyValueError::new_err(format!("unknown text format {other:?}"))),
    }
}

/// `copal.dumps(obj, format=...)` for a text format: the document of `obj`'s graph.
#[pyfunction]
pub fn dumps_text_raw<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>, format: &str) -> PyResult<Bound<'py, PyBytes>> {
    let (name, write, _) = codec(format)?;
    // Text has no shared strings (docs/TEXT_FORMATS.md): the body is written without them.
    let body = encode_body(py, obj, false)?.parts.concat();
    // The body was just written by the encoder, so it always decodes: a value the format has no
    // form for (a name holding a character XML cannot carry) is the caller's, anything else a bug.
    let text = py.detach(|| write(&body)).map_err(|e| match e {
        TextError::Mapping { message } => PyValueError::new_err(format!("cannot write the value as {name}: {message}")),
        e => PyRuntimeError::new_err(format!("{name} transcoding failed: {e}")),
    })?;
    Ok(allocation::bytes(py, text.as_bytes())?.cast_into::<PyBytes>()?)
}

/// `copal.dumps(obj, format="json")` written straight from the objects: the document, or None
/// when the graph holds a value the direct writer leaves to `dumps_text_raw` (json_writer.rs).
#[pyfunction]
pub fn dumps_json_raw<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    crate::json_writer::write(py, obj)
}

/// The object graph of the document `text` in `format`, its trees and objects held to `memory`
/// bytes if given (`TextError::TooLarge`, decode/memory.rs).
fn load_text<'py>(py: Python<'py>, text: &str, format: &str, memory: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
    let (name, _, parse) = codec(format)?;
    let parts = py.detach(|| parse(text, memory.unwrap_or(usize::MAX)));
    let (table, value) = parts.map_err(|e| crate::errors::text_error(name, e))?;
    decode_document_body(py, &table, &value, memory)
}

/// `load_text` of the UTF-8 bytes `document`.
fn load_document<'py>(py: Python<'py>, document: &[u8], format: &str, memory: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
    let (name, _, _) = codec(format)?;
    let text = std::str::from_utf8(document).map_err(|e| CorruptRecordError::new_err(format!("corrupt {name} document: not UTF-8 ({e})")))?;
    load_text(py, text, format, memory)
}

/// `copal.dumps(obj, format="json"|"xml", compress=...)`: `document` in the standard frame of
/// `compression` (a stream compression code other than none) at `level`.
#[pyfunction]
#[pyo3(signature = (document, compression, level = None))]
pub fn compress_text_raw<'py>(py: Python<'py>, document: &[u8], compression: u8, level: Option<i32>) -> PyResult<Bound<'py, PyBytes>> {
    let compression = checked_compression(compression, level)?;
    let Some(codec) = compression.codec else {
        return Err(PyValueError::new_err("compress_text_raw needs a compression"));
    };
    let framed = py.detach(|| compression.compress(&[document]));
    let framed = framed.map_err(|e| PyRuntimeError::new_err(format!("{codec} compression failed: {e}")))?.unwrap_or_default();
    Ok(allocation::bytes(py, &framed)?.cast_into::<PyBytes>()?)
}

/// `copal.loads` of anything but a stream in bytes: a str is a JSON or an XML document; other
/// bytes-like data is told apart by its first bytes (`Payload`): a compressed document or
/// stream, a document, or else a stream (whose reader reports what is wrong).
pub(crate) fn loads_other<'py>(py: Python<'py>, data: &Bound<'py, PyAny>, max_size: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(text) = data.cast::<PyString>() {
        let text = text.to_str()?;
        let format = if Payload::of(text.as_bytes()) == Some(Payload::Xml) { "xml" } else { "json" };
        return load_text(py, text, format, None);
    }
    let copied;
    let bytes = match data.cast::<PyBytes>() {
        Ok(bytes) => bytes.as_bytes(),
        Err(_) => {
            copied = PyBuffer::<u8>::get(data)?.to_vec(py)?;
            &copied[..]
        }
    };
    match Payload::of(bytes) {
        Some(Payload::Compressed(codec)) => loads_compressed(py, bytes, codec, checked_max_size(max_size)?),
        Some(Payload::Json) => load_document(py, bytes, "json", None),
        Some(Payload::Xml) => load_document(py, bytes, "xml", None),
        _ => loads_raw(py, bytes, max_size),
    }
}

/// What a payload starting with `head` is (`Payload`): "zstd", "gzip" or "lz4" for a compression
/// frame, "json", "xml", or "binary"; None while `head` holds only blanks.
#[pyfunction]
pub fn payload_kind(head: &[u8]) -> Option<&'static str> {
    Payload::of(head).map(|payload| match payload {
        Payload::Compressed(codec) => codec.name(),
        Payload::Json => "json",
        Payload::Xml => "xml",
        Payload::Binary => "binary",
    })
}

/// The object graph of what `data`, one frame of `codec` and nothing after it, inflates to: a
/// document or a stream. It inflates to at most `max_size` bytes and its objects take about as
/// much memory at most (a small hostile input cannot claim gigabytes either way).
fn loads_compressed<'py>(py: Python<'py>, data: &[u8], codec: Codec, max_size: usize) -> PyResult<Bound<'py, PyAny>> {
    let inflated = decompress(py, codec.code(), data, max_size)?;
    match Payload::of(&inflated) {
        Some(Payload::Json) => load_document(py, &inflated, "json", Some(max_size)),
        Some(Payload::Xml) => load_document(py, &inflated, "xml", Some(max_size)),
        _ => loads_stream(py, &inflated, max_size, Some(max_size)),
    }
}
