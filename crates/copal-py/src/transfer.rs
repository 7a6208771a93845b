//! Export and import of whole databases (docs/EXPORT.md) over Python file objects, and the
//! record views of `copal ls` / `copal show`. The core does the work with the GIL released; the
//! adapters here take it back only to call the file's `read`/`write` (a megabyte at a time) and
//! the progress callback. Compression wraps the whole export, in the standard frames of
//! copal_core::stream::compression.

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::sync::{Arc, Mutex};

use copal_core::store::{ExportFormat, TransferError, TransferReport};
use copal_core::stream::compression::detecting_reader;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::allocation::{self, interned, set_item, ToPython};
use crate::database::Store;
use crate::errors::{self, IntoPyResult};
use crate::standalone::{checked_compression, checked_max_size};

/// Bytes moved per call of the Python file's `read` or `write`.
const CHUNK: usize = 1 << 20;

/// The first Python exception raised by the file or the progress callback: it is re-raised as
/// it is rather than as the I/O error it becomes inside the core.
type Raised = Arc<Mutex<Option<PyErr>>>;

fn keep(raised: &Raised, error: PyErr) -> io::Error {
    let message = error.to_string();
    raised.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(error);
    io::Error::other(message)
}

/// The name of a method called through `call`, made once (`interned!`).
type MethodName = for<'py> fn(Python<'py>) -> PyResult<&'py Bound<'py, PyString>>;

/// Calls a Python method with the GIL, keeping its exception.
fn call(raised: &Raised, target: &Py<PyAny>, method: MethodName, args: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>>) -> io::Result<Py<PyAny>> {
    Python::attach(|py| {
        let result = method(py).and_then(|method| target.bind(py).call_method1(method, (args(py)?,)));
        result.map(Bound::unbind).map_err(|e| keep(raised, e))
    })
}

struct PyFileWriter {
    file: Py<PyAny>,
    raised: Raised,
}

impl Write for PyFileWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        call(&self.raised, &self.file, |py| interned!(py, "write"), |py| allocation::bytes(py, buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct PyFileReader {
    file: Py<PyAny>,
    raised: Raised,
}

impl Read for PyFileReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let chunk = call(&self.raised, &self.file, |py| interned!(py, "read"), |py| buf.len().to_python(py))?;
        Python::attach(|py| {
            let chunk = chunk.bind(py);
            let bytes: &[u8] = chunk.extract().map_err(|e| keep(&self.raised, PyErr::from(e)))?;
            if bytes.len() > buf.len() {
                return Err(io::Error::other("the file's read returned more bytes than asked for"));
            }
            buf[..bytes.len()].copy_from_slice(bytes);
            Ok(bytes.len())
        })
    }
}

/// Calls `progress(what, done, total)`, keeping its first exception.
fn reporter<'a>(progress: Option<&'a Py<PyAny>>, what: &'a str, raised: &'a Raised) -> impl FnMut(u64, u64) + 'a {
    move |done, total| {
        if let Some(progress) = progress {
            Python::attach(|py| {
                let called = (|| progress.call1(py, (what.to_python(py)?, done.to_python(py)?, total.to_python(py)?)))();
                if let Err(e) = called {
                    keep(raised, e);
                }
            });
        }
    }
}

/// The Python exception of a failed transfer: the first exception the file or the progress
/// callback raised, as it was raised; otherwise the core's error, mapped by errors.rs.
/// `reading`: an I/O error that the file did not raise comes from decompressing the input.
fn transfer_error(error: TransferError, raised: &Raised, reading: bool) -> PyErr {
    if let Some(first) = raised.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return first;
    }
    errors::transfer_error(error, reading)
}

fn report_dict<'py>(py: Python<'py>, report: &TransferReport) -> PyResult<Bound<'py, PyDict>> {
    let out = allocation::dict(py)?;
    set_item(&out, "records", report.records)?;
    set_item(&out, "descriptors", report.descriptors)?;
    set_item(&out, "indexes", report.indexes)?;
    set_item(&out, "tid", report.tid)?;
    Ok(out)
}

/// Writes the database to the binary file object `file` (docs/EXPORT.md): `format` "copal",
/// "json" or "xml"; `compression` a stream compression code.
#[pyfunction]
#[pyo3(signature = (store, file, format, compression, level, types, progress))]
#[allow(clippy::too_many_arguments)]
pub fn export_raw<'py>(
    py: Python<'py>,
    store: PyRef<'_, Store>,
    file: Py<PyAny>,
    format: &str,
    compression: u8,
    level: Option<i32>,
    types: Option<Vec<String>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let format = ExportFormat::parse(format).ok_or_else(|| PyValueError::new_err(format!("unknown export format {format:?}: use 'copal', 'json' or 'xml'")))?;
    let compression = checked_compression(compression, level)?;
    let raised = Raised::default();
    let mut out = compression.writer(BufWriter::with_capacity(CHUNK, PyFileWriter { file, raised: Arc::clone(&raised) }))?;
    let store = store.store.get()?;
    let result = py.detach(|| -> Result<TransferReport, TransferError> {
        let mut progress = reporter(progress.as_ref(), "export", &raised);
        let report = store.export(format, types.as_deref(), &mut out, &mut progress)?;
        out.finish()?;
        Ok(report)
    });
    let report = result.map_err(|e| transfer_error(e, &raised, false))?;
    report_dict(py, &report)
}

/// Reads an export (any format and compression, detected) from the binary file object `file`
/// into the database, which must be empty; no entry may be longer than `max_size` bytes.
#[pyfunction]
#[pyo3(signature = (store, file, max_size, progress))]
pub fn import_raw<'py>(
    py: Python<'py>,
    store: PyRef<'_, Store>,
    file: Py<PyAny>,
    max_size: &Bound<'py, PyAny>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let max_size = checked_max_size(max_size)?;
    let raised = Raised::default();
    let store = store.store.get()?;
    let result = py.detach(|| -> Result<TransferReport, TransferError> {
        let mut progress = reporter(progress.as_ref(), "import", &raised);
        let raw = BufReader::with_capacity(CHUNK, PyFileReader { file, raised: Arc::clone(&raised) });
        store.import(&mut detecting_reader(raw)?, max_size, &mut progress)
    });
    let report = result.map_err(|e| transfer_error(e, &raised, true))?;
    report_dict(py, &report)
}

/// The JSON document of the record of `oid` as an export writes it (None if absent).
#[pyfunction]
pub fn record_json<'py>(py: Python<'py>, store: PyRef<'_, Store>, oid: u64) -> PyResult<Bound<'py, PyAny>> {
    let store = store.store.get()?;
    py.detach(move || store.record_json(oid)).map_err(|e| transfer_error(e, &Raised::default(), false))?.to_python(py)
}

/// `(oid, type name, size)` of the records of `oids` (None for a missing one).
#[pyfunction]
pub fn record_summaries<'py>(py: Python<'py>, store: PyRef<'_, Store>, oids: Vec<u64>) -> PyResult<Bound<'py, PyAny>> {
    let store = store.store.get()?;
    let summaries = py.detach(move || store.summaries(&oids)).py_err()?;
    summaries.into_iter().map(|s| s.map(|s| (s.oid, s.type_name, s.size))).collect::<Vec<_>>().to_python(py)
}

/// `(table, entries, bytes)` of each class's records and each index's entries
/// (`copal_core::store::TableSpace`).
#[pyfunction]
pub fn table_space<'py>(py: Python<'py>, store: PyRef<'_, Store>) -> PyResult<Bound<'py, PyAny>> {
    let store = store.store.get()?;
    let space = py.detach(move || store.space()).py_err()?;
    space.into_iter().map(|t| (t.table, t.entries, t.bytes)).collect::<Vec<_>>().to_python(py)
}

/// `(oid, type name, size)` of the first `limit` objects of `type_name`'s extent (None if the
/// database stores no such type).
#[pyfunction]
pub fn extent_summaries<'py>(py: Python<'py>, store: PyRef<'_, Store>, type_name: String, limit: usize) -> PyResult<Bound<'py, PyAny>> {
    let store = store.store.get()?;
    let summaries = py.detach(move || store.extent_summaries(&type_name, limit)).py_err()?;
    summaries.map(|list| list.into_iter().map(|s| (s.oid, s.type_name, s.size)).collect::<Vec<_>>()).to_python(py)
}
