//! Archives (docs/STREAM.md section 10): many independent values in one buffer or file, with
//! one descriptor table for all of them and an offset index, so that value `k` is decoded
//! without reading any other (`copal.pack_many`, `copal.Archive`).
//!
//! The header, descriptor table and compression are those of streams (standalone.rs); each value
//! is a standalone value with its own memo.

use std::ops::Range;

use copal_core::format::{DecodeError, Reader, Writer};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PySlice};

use crate::allocation::{self, interned, ToPython};
use crate::decode::Decoder;
use crate::encode::Encoder;
use crate::errors::{corrupt, CorruptRecordError};
use crate::gc::GcPause;
use crate::list_builder::ListBuilder;
use crate::standalone::{checked_max_size, decompress, DEFAULT_MAX_SIZE, framed, read_header, read_table, Body, Container, Header, Entry, StreamResolver, StreamSink};

/// Archives have one version; their values never share strings (docs/STREAM.md section 10).
const ARCHIVE_VERSION: u8 = 1;
const ARCHIVE: Container = Container { name: "archive", magic: *b"CPA1", newest_version: ARCHIVE_VERSION, extra_flags: WIDE_OFFSETS };

/// Archive flag: index offsets are u64 (else u32).
const WIDE_OFFSETS: u8 = 0x04;
/// The section ends with the value count as a u64.
const COUNT_SIZE: usize = size_of::<u64>();

/// `copal.pack_many` without the argument handling: the archive of the values of `objects`.
#[pyfunction]
#[pyo3(signature = (objects, compression = 0, level = None))]
pub fn pack_many_raw<'py>(
    py: Python<'py>,
    objects: &Bound<'py, PyAny>,
    compression: u8,
    level: Option<i32>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut sink = StreamSink::default();
    let mut values = Vec::new();
    // Offsets of the values relative to the first one; the table's size is known only at the end.
    let mut ends = Vec::new();
    {
        // As in dumps_raw: nothing encoding creates can become garbage before it ends.
        let _gc = GcPause::new(py);
        // One encoder for all values (it keeps what it learnt about their classes);
        // `standalone` gives each value its own memo, so that it decodes alone.
        let mut encoder = Encoder::new(&mut sink);
        for obj in objects.try_iter()? {
            let value = encoder.standalone(&obj?)?;
            values.extend_from_slice(&value);
            ends.push(values.len());
        }
    }
    let mut head = Writer::new();
    head.varint(u64::from(sink.count));
    let first = head.buf.len() + sink.table.buf.len();
    let index_start = first + values.len();
    let wide = u32::try_from(index_start).is_err();
    let mut index = Writer::new();
    for offset in std::iter::once(0).chain(ends).map(|end| (first + end) as u64) {
        if wide {
            index.bytes(&offset.to_le_bytes());
        } else {
            index.bytes(&(offset as u32).to_le_bytes());
        }
    }
    let count = (index.buf.len() / if wide { 8 } else { 4 } - 1) as u64;
    let flags = if wide { WIDE_OFFSETS } else { 0 };
    let parts: [&[u8]; 5] = [&head.buf, &sink.table.buf, &values, &index.buf, &count.to_le_bytes()];
    framed(py, &ARCHIVE, ARCHIVE_VERSION, flags, &parts, compression, level)
}

/// Where an archive's bytes live. Fields are never mutated after construction.
enum Data {
    /// An uncompressed archive given as bytes: the section is a range of them.
    Bytes(Py<PyBytes>),
    /// An uncompressed archive file, memory-mapped read-only: pages are read when touched.
    Mapped { buffer: PyBuffer<u8>, _map: Py<PyAny> },
    /// The decompressed section of a compressed archive.
    Owned(Vec<u8>),
}

/// The values of an archive written by ``copal.pack_many``, read one at a time.
///
/// ``len(archive)`` is the number of values; ``archive[k]`` decodes value ``k`` alone (negative
/// indexes count from the end; ``IndexError`` out of range); ``archive[i:j:s]`` is a list of
/// values; iteration decodes them in order. Values are rebuilt as by ``copal.loads`` (classes
/// resolved among imported modules, no code of theirs run), and each call builds new objects.
///
/// Args:
///     source: The archive as bytes (bytearray and memoryview are copied), or the path of an
///         archive file. An uncompressed file is memory-mapped read-only and its pages are read
///         when touched; a compressed archive is decompressed as a whole when opened.
///     max_size: The most bytes a compressed archive may inflate to (``copal.serialize.
///         DEFAULT_MAX_SIZE``, 256 MiB, by default).
///
/// Raises:
///     CorruptRecordError: The archive is malformed (checked when opened for its header,
///         descriptor table and index bounds, and when a value is read for that value).
///     SchemaError: A value names a class that is not imported or may not be rebuilt.
///
/// Example:
///     >>> import copal
///     >>> archive = copal.Archive(copal.pack_many(["a", ("b", 2), {"c"}]))
///     >>> archive[-2], list(archive)
///     (('b', 2), ['a', ('b', 2), {'c'}])
//
// Invariants, established by `open`: `section` lies within the data; the descriptor table
// ends at `values_start`; the index of `len + 1` offsets of `width` bytes starts at
// `index_start` and ends 8 bytes before the section; its last offset is `index_start`. The
// other offsets are only checked when read (`value_range`), so opening costs O(table), not
// O(values).
#[pyclass(module = "copal", name = "Archive", frozen, sequence)]
pub struct Archive {
    data: Data,
    section: Range<usize>,
    entries: Vec<Entry>,
    registry: Py<PyDict>,
    values_start: usize,
    index_start: usize,
    width: usize,
    len: usize,
}

impl Archive {
    /// The section (decompressed if the archive is compressed).
    fn bytes<'a>(&'a self, py: Python<'a>) -> &'a [u8] {
        &self.bytes_all(py)[self.section.clone()]
    }

    fn offset(&self, section: &[u8], i: usize) -> u64 {
        let at = self.index_start + i * self.width;
        let raw = &section[at..at + self.width];
        if self.width == 8 {
            u64::from_le_bytes(raw.try_into().expect("8 bytes"))
        } else {
            u64::from(u32::from_le_bytes(raw.try_into().expect("4 bytes")))
        }
    }

    /// The bytes of value `k` (`k < len`), checked against the section's layout.
    fn value_range(&self, section: &[u8], k: usize) -> PyResult<Range<usize>> {
        let (start, end) = (self.offset(section, k), self.offset(section, k + 1));
        let bounds = self.values_start as u64..=self.index_start as u64;
        if !bounds.contains(&start) || !bounds.contains(&end) || start > end {
            return Err(CorruptRecordError::new_err(format!(
                "corrupt archive: the index gives value {k} the bytes {start}..{end}, outside the values \
                 ({}..{})",
                self.values_start, self.index_start
            )));
        }
        Ok(start as usize..end as usize)
    }

    fn get<'py>(&self, py: Python<'py>, k: usize) -> PyResult<Bound<'py, PyAny>> {
        let section = self.bytes(py);
        let range = self.value_range(section, k)?;
        let resolver = StreamResolver::new(self.registry.bind(py).clone(), &self.entries);
        let what = || format!("archive value {k}");
        let mut r = Reader::new(&section[range]);
        let value = Decoder::new(py, &resolver, &what).standalone(&mut r);
        value
    }

    fn open(py: Python<'_>, data: Data, max_size: usize) -> PyResult<Archive> {
        let registry = crate::hooks::registry_for_decoding(py)?.unbind();
        let mut archive = Archive { data, section: 0..0, entries: Vec::new(), registry, values_start: 0, index_start: 0, width: 0, len: 0 };
        let whole = archive.bytes_all(py);
        let Header { flags, payload, .. } = read_header(whole, &ARCHIVE)?;
        let payload_at = whole.len() - payload.len();
        let (section_range, owned) = match decompress(py, flags, payload, max_size)? {
            Body::Borrowed(_) => (payload_at..whole.len(), None),
            Body::Owned(v) => (0..v.len(), Some(v)),
            Body::Python(b) => (0..b.as_bytes().len(), Some(b.as_bytes().to_vec())),
        };
        if let Some(section) = owned {
            archive.data = Data::Owned(section);
        }
        archive.section = section_range;
        archive.width = if flags & WIDE_OFFSETS != 0 { 8 } else { 4 };
        let section = archive.bytes(py);
        let mut r = Reader::new(section);
        let entries = read_table(&mut r, py, ARCHIVE_VERSION, "archive descriptor table")?;
        let values_start = r.position();
        let layout = layout(section, values_start, archive.width).map_err(|e| corrupt("archive index", e))?;
        archive.entries = entries;
        archive.values_start = values_start;
        (archive.index_start, archive.len) = layout;
        let section = archive.bytes(py);
        if archive.offset(section, archive.len) != archive.index_start as u64 {
            return Err(corrupt("archive index", DecodeError::OutOfRange { offset: archive.index_start, what: "last offset" }));
        }
        Ok(archive)
    }

    /// All the bytes held: the whole archive, or the decompressed section.
    fn bytes_all<'a>(&'a self, py: Python<'a>) -> &'a [u8] {
        match &self.data {
            Data::Bytes(bytes) => bytes.bind(py).as_bytes(),
            // SAFETY: the buffer is a read-only mapping held (with its mmap object) as long as
            // `self`, so the pointer stays valid for `len_bytes` bytes; it is C-contiguous
            // (checked in `new`). Another process truncating the file while it is mapped would
            // fault on access, as with any memory-mapped file (LMDB has the same rule).
            Data::Mapped { buffer, .. } => unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) },
            Data::Owned(section) => section,
        }
    }
}

/// The start of the index and the value count of a section whose values start at
/// `values_start`, from the count at its end (docs/STREAM.md section 10).
fn layout(section: &[u8], values_start: usize, width: usize) -> Result<(usize, usize), DecodeError> {
    let trailer = section.len().checked_sub(COUNT_SIZE).filter(|&at| at >= values_start);
    let Some(trailer) = trailer else {
        return Err(DecodeError::Truncated { offset: section.len(), needed: values_start + COUNT_SIZE - section.len() });
    };
    let count = u64::from_le_bytes(section[trailer..].try_into().expect("8 bytes"));
    let room = ((trailer - values_start) / width) as u64;
    if count >= room {
        return Err(DecodeError::LengthTooLarge { offset: trailer, length: count });
    }
    let count = count as usize;
    Ok((trailer - (count + 1) * width, count))
}

#[pymethods]
impl Archive {
    #[new]
    #[pyo3(signature = (source, *, max_size = None))]
    fn new(py: Python<'_>, source: &Bound<'_, PyAny>, max_size: Option<&Bound<'_, PyAny>>) -> PyResult<Archive> {
        let max_size = max_size.map_or(Ok(DEFAULT_MAX_SIZE), checked_max_size)?;
        let data = if let Ok(bytes) = source.cast::<PyBytes>() {
            Data::Bytes(bytes.clone().unbind())
        } else if source.hasattr(interned!(py, "__fspath__")?)? || source.is_instance_of::<pyo3::types::PyString>() {
            let mmap = py.import(interned!(py, "mmap")?)?;
            let file = py.import(interned!(py, "builtins")?)?.call_method1(interned!(py, "open")?, (source, interned!(py, "rb")?, 0))?;
            // Unbuffered: only its descriptor is used. The mapping keeps its own handle of the
            // file, so the file is closed once it is made (or failed to be).
            let map = (|| {
                let fileno = file.call_method0(interned!(py, "fileno")?)?;
                let stat = py.import(interned!(py, "os")?)?.call_method1(interned!(py, "fstat")?, (&fileno,))?;
                if stat.getattr(interned!(py, "st_size")?)?.extract::<u64>()? == 0 {
                    return Err(CorruptRecordError::new_err("corrupt archive: the file is empty"));
                }
                let kwargs = allocation::dict(py)?;
                kwargs.set_item(interned!(py, "access")?, mmap.getattr(interned!(py, "ACCESS_READ")?)?)?;
                mmap.getattr(interned!(py, "mmap")?)?.call((fileno, 0), Some(&kwargs))
            })();
            file.call_method0(interned!(py, "close")?)?;
            let map = map?;
            let buffer = PyBuffer::<u8>::get(&map)?;
            if !buffer.is_c_contiguous() {
                return Err(PyTypeError::new_err("the memory map is not contiguous"));
            }
            Data::Mapped { buffer, _map: map.unbind() }
        } else if let Ok(buffer) = PyBuffer::<u8>::get(source) {
            // A mutable buffer (bytearray, memoryview) is copied: Python code running during
            // decoding (hashes of keys) could otherwise change the bytes being decoded.
            Data::Bytes(allocation::bytes(py, &buffer.to_vec(py)?)?.cast_into::<PyBytes>()?.unbind())
        } else {
            return Err(PyTypeError::new_err(format!(
                "copal.Archive needs bytes or a file path, not {}",
                source.get_type().name()?
            )));
        };
        Archive::open(py, data, max_size)
    }

    fn __len__(&self) -> usize {
        self.len
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if key.is_instance_of::<PyInt>() {
            let len = self.len as i128;
            // An int beyond i128 is out of range like any other.
            let k = key.extract::<i128>().unwrap_or(i128::MAX);
            let k = if k < 0 { k + len } else { k };
            if !(0..len).contains(&k) {
                return Err(PyIndexError::new_err(format!("archive index out of range (the archive holds {len} values)")));
            }
            return self.get(py, k as usize);
        }
        if let Ok(slice) = key.cast::<PySlice>() {
            let indices = slice.indices(self.len as isize)?;
            let _gc = GcPause::new(py);
            let mut values = Vec::with_capacity(indices.slicelength);
            let mut k = indices.start;
            for _ in 0..indices.slicelength {
                values.push(self.get(py, k as usize)?);
                k += indices.step;
            }
            return Ok(ListBuilder::of(py, values)?.into_any());
        }
        Err(PyTypeError::new_err(format!("archive indices must be integers or slices, not {}", key.get_type().name()?)))
    }

    fn __iter__(slf: Py<Self>) -> ArchiveIter {
        ArchiveIter { archive: slf, next: std::sync::atomic::AtomicUsize::new(0) }
    }

    fn __repr__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        format!("<copal.Archive of {} values>", self.len).to_python(py)
    }
}

/// Iterates over an archive's values in order, decoding each when it is reached.
#[pyclass(module = "copal", frozen)]
pub struct ArchiveIter {
    archive: Py<Archive>,
    next: std::sync::atomic::AtomicUsize,
}

#[pymethods]
impl ArchiveIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let archive = self.archive.get();
        let k = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if k >= archive.len {
            self.next.store(archive.len, std::sync::atomic::Ordering::Relaxed);
            return Ok(None);
        }
        archive.get(py, k).map(Some)
    }
}
