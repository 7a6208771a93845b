//! Archives (docs/STREAM.md section 10): many independent values in one buffer or file, with
//! one descriptor table for all of them and an offset index, so that value `k` is decoded
//! without reading any other (`copal.pack_many`, `copal.Archive`).
//!
//! The container (header, compression, index) is copal_core::stream::archive's; the table is read
//! as streams read theirs (standalone.rs), and each value is a standalone value with its own memo.

use std::borrow::Cow;
use std::ops::Range;

use copal_core::format::{Reader, Writer};
use copal_core::stream::archive::{index_bytes, ArchiveIndex, ARCHIVE, ARCHIVE_VERSION};
use copal_core::stream::{Header, DEFAULT_MAX_SIZE};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PySlice};

use crate::allocation::{self, interned, ToPython};
use crate::decode::Decoder;
use crate::encode::Encoder;
use crate::errors::{stream_error, CorruptRecordError};
use crate::gc::GcPause;
use crate::list_builder::ListBuilder;
use crate::standalone::{checked_compression, checked_max_size, decompress, framed, read_table, Entry, StreamResolver, StreamSink};

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
    let compression = checked_compression(compression, level)?;
    let mut head = Writer::new();
    head.varint(u64::from(sink.count));
    let (flags, index) = index_bytes(head.buf.len() + sink.table.buf.len(), values.len(), &ends);
    let parts: [&[u8]; 4] = [&head.buf, &sink.table.buf, &values, &index];
    framed(py, &ARCHIVE, ARCHIVE_VERSION, flags, &parts, compression)
}

/// Where an archive's bytes live. Fields are never mutated after construction.
enum Data {
    /// An uncompressed archive given as bytes: the section is a range of them.
    Bytes(Py<PyBytes>),
    /// An uncompressed archive file, memory-mapped read-only: pages are read when touched.
    Mapped { buffer: PyBuffer<u8>, _map: Py<PyAny>, file: MappedFile },
    /// The decompressed section of a compressed archive.
    Owned(Vec<u8>),
}

/// Archive files up to this size are read into memory when opened rather than mapped: a read
/// of the whole file costs less than the check of a mapped file's size before every value
/// (an `fstat`, about 0.5 µs, twice the decoding of a small value), and a file cut meanwhile
/// cannot harm a copy.
const READ_WHOLE_UP_TO: u64 = 4 << 20;

/// The file behind a mapping, for the check of its size before each read.
///
/// A page of the mapping past the end of a file that another process truncated is not an
/// error but a SIGBUS that kills the process. So each read first compares the size of the file
/// (fstat on a duplicate of the descriptor the map was made from: the same file, even if
/// its path now names another) with the mapping's; a file cut while a value is being decoded
/// still faults. Windows refuses to truncate a mapped file, so there is nothing to check.
struct MappedFile {
    #[cfg(unix)]
    file: std::fs::File,
}

impl MappedFile {
    /// The file open as descriptor `fd` (which the caller keeps open during the call).
    fn new(fd: i32) -> PyResult<MappedFile> {
        #[cfg(unix)]
        {
            use std::os::fd::BorrowedFd;
            // SAFETY: `fd` is open for the duration of this call (the caller's file object
            // holds it), and the borrow ends with the duplicate made from it.
            let owned = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
            Ok(MappedFile { file: std::fs::File::from(owned) })
        }
        #[cfg(not(unix))]
        {
            let _ = fd;
            Ok(MappedFile {})
        }
    }

    /// Fails with CorruptRecordError when the file is now shorter than the `mapped` bytes.
    fn check(&self, mapped: usize) -> PyResult<()> {
        #[cfg(unix)]
        {
            let size = self.file.metadata()?.len();
            if size < mapped as u64 {
                return Err(CorruptRecordError::new_err(format!(
                    "corrupt archive: its file was cut to {size} bytes while it was open (it had {mapped}): \
                     values can no longer be read from it"
                )));
            }
        }
        #[cfg(not(unix))]
        let _ = mapped;
        Ok(())
    }
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
///         archive file. An uncompressed file of more than 4 MiB is memory-mapped read-only and
///         its pages are read when touched (each read first checks that the file was not cut
///         meanwhile); a smaller one is read when opened; a compressed archive is decompressed
///         as a whole when opened.
///     max_size: The most bytes a compressed archive may inflate to (``copal.serialize.
///         DEFAULT_MAX_SIZE``, 256 MiB, by default).
///
/// Raises:
///     CorruptRecordError: The archive is malformed (checked when opened for its header,
///         descriptor table and index bounds, and when a value is read for that value), or its
///         file was truncated while it was open (checked before each read).
///     SchemaError: A value names a class that is not imported or may not be rebuilt.
///
/// Example:
///     >>> import copal
///     >>> archive = copal.Archive(copal.pack_many(["a", ("b", 2), {"c"}]))
///     >>> archive[-2], list(archive)
///     (('b', 2), ['a', ('b', 2), {'c'}])
//
// Invariant, established by `open`: `section` lies within the data, and `index` is its index
// (`ArchiveIndex::new`).
#[pyclass(module = "copal", name = "Archive", frozen, sequence)]
pub struct Archive {
    data: Data,
    section: Range<usize>,
    entries: Vec<Entry>,
    registry: Py<PyDict>,
    index: ArchiveIndex,
    /// The memory budget of each value's objects when the archive was compressed (its
    /// `max_size`, as `copal.loads` bounds a compressed stream's); None for an uncompressed one,
    /// whose values are bounded by their bytes.
    bound: Option<usize>,
}

impl Archive {
    /// The section (decompressed if the archive is compressed).
    fn bytes<'a>(&'a self, py: Python<'a>) -> &'a [u8] {
        &bytes_of(&self.data, py)[self.section.clone()]
    }

    fn get<'py>(&self, py: Python<'py>, k: usize) -> PyResult<Bound<'py, PyAny>> {
        self.check_file()?;
        self.decode(py, k)
    }

    /// Fails if a mapped file was cut since it was opened (`MappedFile`).
    fn check_file(&self) -> PyResult<()> {
        match &self.data {
            Data::Mapped { buffer, file, .. } => file.check(buffer.len_bytes()),
            _ => Ok(()),
        }
    }

    /// Value `k`, read without `check_file`.
    fn decode<'py>(&self, py: Python<'py>, k: usize) -> PyResult<Bound<'py, PyAny>> {
        let section = self.bytes(py);
        let range = self.index.value_range(section, k).map_err(|e| CorruptRecordError::new_err(e.to_string()))?;
        let resolver = StreamResolver::new(self.registry.bind(py).clone(), &self.entries);
        let what = || format!("archive value {k}");
        let mut r = Reader::new(&section[range]);
        match self.bound {
            None => Decoder::new(py, &resolver, &what).standalone(&mut r),
            Some(max_size) => Decoder::bounded(py, &resolver, &what, max_size).standalone(&mut r),
        }
    }

    fn open(py: Python<'_>, data_given: Data, max_size: usize) -> PyResult<Archive> {
        let registry = crate::hooks::registry_for_decoding(py)?.unbind();
        let whole = bytes_of(&data_given, py);
        let Header { flags, payload, .. } = Header::read(whole, &ARCHIVE).map_err(stream_error)?;
        let (payload_at, whole_len) = (whole.len() - payload.len(), whole.len());
        let (data, section) = match decompress(py, flags, payload, max_size)? {
            Cow::Borrowed(_) => (None, payload_at..whole_len),
            Cow::Owned(section) => {
                let len = section.len();
                (Some(Data::Owned(section)), 0..len)
            }
        };
        let bound = data.is_some().then_some(max_size);
        let data = data.unwrap_or(data_given);
        let bytes = &bytes_of(&data, py)[section.clone()];
        let mut r = Reader::new(bytes);
        let entries = read_table(&mut r, py, ARCHIVE_VERSION, "archive descriptor table")?;
        let index = ArchiveIndex::new(bytes, r.position(), flags).map_err(stream_error)?;
        Ok(Archive { data, section, entries, registry, index, bound })
    }
}

/// All the bytes held: the whole archive, or the decompressed section.
fn bytes_of<'a>(data: &'a Data, py: Python<'a>) -> &'a [u8] {
    match data {
        Data::Bytes(bytes) => bytes.bind(py).as_bytes(),
        // SAFETY: the buffer is a read-only mapping held (with its mmap object) as long as
        // `data`, so the pointer stays valid for `len_bytes` bytes; it is C-contiguous
        // (checked in `new`). Another process truncating the file while it is mapped would
        // fault on access to the pages cut off: reads check the file's size first
        // (`MappedFile`).
        Data::Mapped { buffer, .. } => unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) },
        Data::Owned(section) => section,
    }
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
            let data = (|| {
                let fileno = file.call_method0(interned!(py, "fileno")?)?;
                let stat = py.import(interned!(py, "os")?)?.call_method1(interned!(py, "fstat")?, (&fileno,))?;
                let size = stat.getattr(interned!(py, "st_size")?)?.extract::<u64>()?;
                if size == 0 {
                    return Err(CorruptRecordError::new_err("corrupt archive: the file is empty"));
                }
                if size <= READ_WHOLE_UP_TO {
                    // Read at once: no mapping, so nothing to check before each read.
                    return Ok(Data::Bytes(file.call_method0(interned!(py, "read")?)?.cast_into::<PyBytes>()?.unbind()));
                }
                let kwargs = allocation::dict(py)?;
                kwargs.set_item(interned!(py, "access")?, mmap.getattr(interned!(py, "ACCESS_READ")?)?)?;
                let map = mmap.getattr(interned!(py, "mmap")?)?.call((&fileno, 0), Some(&kwargs))?;
                let mapped = MappedFile::new(fileno.extract()?)?;
                let buffer = PyBuffer::<u8>::get(&map)?;
                if !buffer.is_c_contiguous() {
                    return Err(PyTypeError::new_err("the memory map is not contiguous"));
                }
                Ok(Data::Mapped { buffer, _map: map.unbind(), file: mapped })
            })();
            file.call_method0(interned!(py, "close")?)?;
            data?
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
        self.index.len()
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if key.is_instance_of::<PyInt>() {
            let len = self.index.len() as i128;
            // An int beyond i128 is out of range like any other.
            let k = key.extract::<i128>().unwrap_or(i128::MAX);
            let k = if k < 0 { k + len } else { k };
            if !(0..len).contains(&k) {
                return Err(PyIndexError::new_err(format!("archive index out of range (the archive holds {len} values)")));
            }
            return self.get(py, k as usize);
        }
        if let Ok(slice) = key.cast::<PySlice>() {
            let indices = slice.indices(self.index.len() as isize)?;
            let _gc = GcPause::new(py);
            let mut values = Vec::with_capacity(indices.slicelength);
            let mut k = indices.start;
            // The file's size is checked once for the slice (a file cut while values are being
            // read faults, as one cut while a single value is).
            self.check_file()?;
            for _ in 0..indices.slicelength {
                values.push(self.decode(py, k as usize)?);
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
        format!("<copal.Archive of {} values>", self.index.len()).to_python(py)
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
        let len = archive.index.len();
        if k >= len {
            self.next.store(len, std::sync::atomic::Ordering::Relaxed);
            return Ok(None);
        }
        archive.get(py, k).map(Some)
    }
}
