//! Export and import of whole databases (docs/EXPORT.md) over Python file objects, and the
//! record views of `copal ls` / `copal show`. The core does the work with the GIL released; the
//! adapters here take it back only to call the file's `read`/`write` (a megabyte at a time) and
//! the progress callback. Compression wraps the whole export: zstd with the crate that
//! compresses streams (standalone.rs), gzip with Python's zlib as streams do.

use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::sync::{Arc, Mutex};

use copal_core::store::{ExportFormat, TransferError, TransferReport};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::allocation::{self, interned, set_item, ToPython};
use crate::database::Store;
use crate::errors::{self, IntoPyResult};
use crate::standalone::{checked_level, COMPRESSION_GZIP, COMPRESSION_NONE, COMPRESSION_ZSTD, GZIP_WBITS};

/// Bytes moved per call of the Python file's `read` or `write`.
const CHUNK: usize = 1 << 20;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

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

/// gzip compression through a `zlib.compressobj` (one gzip member, as streams write).
struct GzipWriter<W: Write> {
    inner: W,
    compressor: Py<PyAny>,
    raised: Raised,
}

impl<W: Write> GzipWriter<W> {
    fn new(inner: W, level: i32, raised: Raised) -> PyResult<Self> {
        let compressor = Python::attach(|py| -> PyResult<Py<PyAny>> {
            let zlib = py.import(interned!(py, "zlib")?)?;
            let deflated = zlib.getattr(interned!(py, "DEFLATED")?)?;
            Ok(zlib.call_method1(interned!(py, "compressobj")?, (level, deflated, GZIP_WBITS))?.unbind())
        })?;
        Ok(GzipWriter { inner, compressor, raised })
    }

    fn finish(mut self) -> io::Result<W> {
        let tail = Python::attach(|py| -> PyResult<Vec<u8>> { self.compressor.bind(py).call_method0(interned!(py, "flush")?)?.extract() });
        let tail = tail.map_err(|e| keep(&self.raised, e))?;
        self.inner.write_all(&tail)?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for GzipWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let out = call(&self.raised, &self.compressor, |py| interned!(py, "compress"), |py| allocation::bytes(py, buf))?;
        let out: Vec<u8> = Python::attach(|py| out.extract(py)).map_err(|e| keep(&self.raised, e))?;
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// gzip decompression through a `zlib.decompressobj`, a bounded chunk at a time (the output of
/// one call is limited, so a small input cannot inflate into memory at once).
struct GzipReader<R: BufRead> {
    inner: R,
    decompressor: Py<PyAny>,
    pending: Vec<u8>,
    at: usize,
    raised: Raised,
}

impl<R: BufRead> GzipReader<R> {
    fn new(inner: R, raised: Raised) -> PyResult<Self> {
        let decompressor = Python::attach(|py| -> PyResult<Py<PyAny>> {
            Ok(py.import(interned!(py, "zlib")?)?.call_method1(interned!(py, "decompressobj")?, (GZIP_WBITS,))?.unbind())
        })?;
        Ok(GzipReader { inner, decompressor, pending: Vec::new(), at: 0, raised })
    }
}

impl<R: BufRead> Read for GzipReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.pending.len() {
            let input = self.inner.fill_buf()?.to_vec();
            let consumed = input.len();
            let step = Python::attach(|py| -> PyResult<(Vec<u8>, Vec<u8>, bool, usize)> {
                let d = self.decompressor.bind(py);
                let tail: Vec<u8> = d.getattr(interned!(py, "unconsumed_tail")?)?.extract()?;
                let data = if tail.is_empty() { input } else { [tail, input].concat() };
                let out: Vec<u8> = d.call_method1(interned!(py, "decompress")?, (allocation::bytes(py, &data)?, CHUNK.to_python(py)?))?.extract()?;
                let unused: Vec<u8> = d.getattr(interned!(py, "unused_data")?)?.extract()?;
                Ok((out, unused, d.getattr(interned!(py, "eof")?)?.extract()?, data.len()))
            });
            // Running out of memory says nothing about the data: the MemoryError is raised as it is.
            let step = step.map_err(|e| if Python::attach(|py| allocation::is_memory_error(py, &e)) { keep(&self.raised, e) } else { io::Error::new(io::ErrorKind::InvalidData, format!("damaged gzip data: {e}")) });
            let (out, unused, eof, fed) = step?;
            self.inner.consume(consumed);
            if !unused.is_empty() {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "bytes follow the gzip member"));
            }
            if out.is_empty() {
                if eof {
                    return Ok(0);
                }
                if fed == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the gzip data is truncated"));
                }
            }
            (self.pending, self.at) = (out, 0);
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Where an export's bytes go: the file, through a compressor or not.
enum Output {
    Plain(BufWriter<PyFileWriter>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<PyFileWriter>>),
    Gzip(GzipWriter<BufWriter<PyFileWriter>>),
}

impl Output {
    /// Ends the compressed data and sends everything to the file.
    fn finish(self) -> io::Result<()> {
        let mut file = match self {
            Output::Plain(file) => file,
            Output::Zstd(zstd) => zstd.finish()?,
            Output::Gzip(gzip) => gzip.finish()?,
        };
        file.flush()
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Output::Plain(w) => w.write(buf),
            Output::Zstd(w) => w.write(buf),
            Output::Gzip(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::Plain(w) => w.flush(),
            Output::Zstd(w) => w.flush(),
            Output::Gzip(w) => w.flush(),
        }
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
/// "json" or "xml"; `compression` a stream compression code (none, zstd or gzip).
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
    let level = checked_level(compression, level)?;
    if ![COMPRESSION_NONE, COMPRESSION_ZSTD, COMPRESSION_GZIP].contains(&compression) {
        return Err(PyValueError::new_err("exports are compressed with zstd or gzip"));
    }
    let raised = Raised::default();
    let out = BufWriter::with_capacity(CHUNK, PyFileWriter { file, raised: Arc::clone(&raised) });
    let mut out = match compression {
        COMPRESSION_ZSTD => {
            let mut encoder = zstd::stream::write::Encoder::new(out, level)?;
            // Without the frame checksum a damaged byte could decompress to a different record.
            encoder.include_checksum(true)?;
            Output::Zstd(encoder)
        }
        COMPRESSION_GZIP => Output::Gzip(GzipWriter::new(out, level, Arc::clone(&raised))?),
        _ => Output::Plain(out),
    };
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
/// into the database, which must be empty.
#[pyfunction]
#[pyo3(signature = (store, file, progress))]
pub fn import_raw<'py>(py: Python<'py>, store: PyRef<'_, Store>, file: Py<PyAny>, progress: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyDict>> {
    let raised = Raised::default();
    let store = store.store.get()?;
    let result = py.detach(|| -> Result<TransferReport, TransferError> {
        let mut progress = reporter(progress.as_ref(), "import", &raised);
        let mut raw = BufReader::with_capacity(CHUNK, PyFileReader { file, raised: Arc::clone(&raised) });
        let head = raw.fill_buf()?;
        let mut input: Box<dyn BufRead> = if head.starts_with(&ZSTD_MAGIC) {
            Box::new(BufReader::with_capacity(CHUNK, zstd::stream::read::Decoder::with_buffer(raw)?))
        } else if head.starts_with(&GZIP_MAGIC) {
            let gzip = GzipReader::new(raw, Arc::clone(&raised)).map_err(|e| keep(&raised, e))?;
            Box::new(BufReader::with_capacity(CHUNK, gzip))
        } else {
            Box::new(raw)
        };
        store.import(&mut input, &mut progress)
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

/// `(oid, type name, size)` of the first `limit` objects of `type_name`'s extent (None if the
/// database stores no such type).
#[pyfunction]
pub fn extent_summaries<'py>(py: Python<'py>, store: PyRef<'_, Store>, type_name: String, limit: usize) -> PyResult<Bound<'py, PyAny>> {
    let store = store.store.get()?;
    let summaries = py.detach(move || store.extent_summaries(&type_name, limit)).py_err()?;
    summaries.map(|list| list.into_iter().map(|s| (s.oid, s.type_name, s.size)).collect::<Vec<_>>()).to_python(py)
}
