//! Standalone streams (docs/STREAM.md): one object graph as a self-contained byte string, with
//! its class descriptors inline, for `copal.dumps` / `copal.loads` (python/copal/serialize.py).
//!
//! The value is written and read by the record codec (encode/, decode/); this module adds
//! the stream header, the inline descriptor table (a `Sink` that collects it while encoding and
//! a `Resolver` that serves it while decoding) and the optional compression of the payload.
//! Persistent objects are written by value, so a stream never refers to a database.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::rc::Rc;
use std::sync::{Arc, OnceLock};

use copal_core::format::{read_field_kinds, DecodeError, FieldKind, Reader, TzInfo, Writer};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyTzInfo, PyType};
use pyo3::PyTypeInfo;

use crate::allocation::{self, interned, ToPython};
use crate::class_cache::Stamp;
use crate::classes::{ClassCache, ClassName, ClassShape};
use crate::cpython::FieldSlots;
use crate::decode::{check_plain_class, DecodeInfo, Decoder, Resolver};
use crate::encode::{field_kind_of, is_python_class, Encoder, Sink};
use crate::errors::{corrupt, CorruptRecordError, SchemaError};
use crate::gc::GcPause;
use crate::hashing::IntMap;
use crate::persistent::PersistentBase;
use crate::strings::{StringCache, StringTable};

/// The first bytes of every stream (docs/STREAM.md section 2).
pub const MAGIC: [u8; 4] = *b"CPL1";
/// The newest stream version this build reads and writes: version 1 with shared strings (STRREF,
/// since version 2), objects with untagged fields (TYPED_OBJECT and OBJECT_LIST, since version
/// 3), superseded copies of tuples and frozensets that contain themselves (SUPERSEDED_TUPLE
/// and SUPERSEDED_FROZENSET) and SUBCLASS values of scalar bases (both since version 4;
/// docs/STREAM.md section 5). Older versions are read too.
const STREAM_VERSION: u8 = COPIES_AND_SCALAR_SUBCLASSES_VERSION;
/// The first version whose values share strings.
const SHARED_STRINGS_VERSION: u8 = 2;
/// The first version whose descriptors have field kinds and whose values have typed objects.
const TYPED_OBJECTS_VERSION: u8 = 3;
/// The first version whose values may have superseded copies and SUBCLASS values of scalar
/// bases. A stream without either is written as version 3, which copal releases before version
/// 4 read (docs/STREAM.md section 8).
const COPIES_AND_SCALAR_SUBCLASSES_VERSION: u8 = 4;
const VERSION_OFFSET: usize = MAGIC.len();
const FLAGS_OFFSET: usize = VERSION_OFFSET + 1;

/// Stream flags: the low two bits name the compression of the payload, the others are reserved.
const COMPRESSION_MASK: u8 = 0x03;
pub const COMPRESSION_NONE: u8 = 0;
pub const COMPRESSION_ZSTD: u8 = 1;
pub const COMPRESSION_GZIP: u8 = 2;
pub const COMPRESSION_LZ4: u8 = 3;

/// Descriptor-entry flags: the descriptor is a persistent class stored by value.
use copal_core::text::PERSISTENT as DESCRIPTOR_PERSISTENT;

const DEFAULT_ZSTD_LEVEL: i32 = 3;
const DEFAULT_GZIP_LEVEL: i32 = 6;
/// zlib's window-bits value selecting the gzip container (RFC 1952) with a 32 KiB window.
pub(crate) const GZIP_WBITS: i32 = 31;

// -- writing ------------------------------------------------------------------------------------

/// Collects the descriptor table of one stream while its value is encoded. Descriptor ids are
/// table positions, allocated in the order the encoder first asks for each (class, fields).
#[derive(Default)]
pub(crate) struct StreamSink {
    classes: ClassCache,
    enums: IntMap<usize, u32>,
    /// The encoded entries (docs/STREAM.md section 4), without their count.
    pub(crate) table: Writer,
    pub(crate) count: u32,
    /// Set for stream version 3: each descriptor's field kinds, by id, taken from the first
    /// object written with it; `kinds_bytes` is their part of the body (docs/STREAM.md section 4).
    typed_objects: bool,
    kinds: Vec<Rc<[FieldKind]>>,
    kinds_bytes: Writer,
}

impl Sink for StreamSink {
    fn descriptor(&mut self, class: &Bound<'_, PyType>, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let entry = self.classes.entry(class)?;
        if let Some(shape) = entry.find_shape(dict) {
            return Ok(shape);
        }
        let fields = crate::class_cache::field_names(class, dict)?;
        let (names, interned) = (&fields.names, fields.interned.iter().map(|name| name.clone_ref(class.py())).collect());
        let flags = if class.is_subclass_of::<PersistentBase>()? { DESCRIPTOR_PERSISTENT } else { 0 };
        let id = self.count;
        self.count = id.checked_add(1).ok_or_else(|| PyValueError::new_err("too many classes in one stream"))?;
        self.table.u8(flags);
        self.table.length_prefixed(entry.type_name.as_bytes());
        self.table.varint(names.len() as u64);
        for name in names {
            self.table.length_prefixed(name.as_bytes());
        }
        if self.typed_objects {
            let kinds: Rc<[FieldKind]> = dict.iter().map(|(_, value)| field_kind_of(&value)).collect::<PyResult<_>>()?;
            kinds.iter().for_each(|kind| self.kinds_bytes.u8(kind.byte()));
            self.kinds.push(kinds);
        }
        let shape = ClassShape { descriptor: id, class_no: 0, tracks_own: false };
        entry.shapes.push((interned, shape));
        Ok(shape)
    }

    fn enum_descriptor(&mut self, class: &Bound<'_, PyType>) -> PyResult<u32> {
        let key = class.as_ptr() as usize;
        if let Some(&id) = self.enums.get(&key) {
            return Ok(id);
        }
        let id = self.descriptor(class, &crate::allocation::dict(class.py())?)?.descriptor;
        // `classes` keeps the class alive, so its address stays a valid key.
        self.enums.insert(key, id);
        Ok(id)
    }

    fn reference(&mut self, _obj: &Bound<'_, PyAny>) -> PyResult<u64> {
        Err(PyRuntimeError::new_err("a stream writes persistent objects by value, never as references"))
    }

    fn persistent_by_value(&self) -> bool {
        true
    }

    fn field_kinds(&self, descriptor: u32) -> Option<Rc<[FieldKind]>> {
        self.kinds.get(descriptor as usize).cloned()
    }
}

/// `copal.dumps` without the argument handling: `obj` as a stream whose payload is compressed
/// with `compression` (0 none, 1 zstd, 2 gzip) at `level` (the codec's default if None).
#[pyfunction]
#[pyo3(signature = (obj, compression = COMPRESSION_NONE, level = None))]
pub fn dumps_raw<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    compression: u8,
    level: Option<i32>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut body = encode_body(py, obj, true)?;
    let parts: Vec<&[u8]> = body.parts.iter().map(Vec::as_slice).collect();
    let stream = framed(py, &STREAM, body.version, 0, &parts, compression, level);
    // The value's buffer came from `Writer::reusing` (`encode_body`).
    Writer::recycle(body.parts.pop().unwrap_or_default());
    stream
}

/// The body of a stream (docs/STREAM.md section 4) in parts, and the stream version it needs.
pub(crate) struct EncodedBody {
    pub(crate) version: u8,
    pub(crate) parts: Vec<Vec<u8>>,
}

/// The body of the stream of `obj` in parts: the descriptor count, the descriptor entries, then,
/// if `newest` (the body of a stream of this build's versions), the field kinds, and the value,
/// which then has shared strings, typed objects, superseded copies and subclasses of scalar
/// built-ins (section 5); its version is 4 if it has either of the last two or a subclass of
/// bytearray, else 3. Without `newest` it is a version 1 body, which may hold subclasses of
/// bytearray too (text documents transcode those).
pub(crate) fn encode_body(py: Python<'_>, obj: &Bound<'_, PyAny>, newest: bool) -> PyResult<EncodedBody> {
    // Encoding allocates containers (materialized instance dicts) that cannot become garbage
    // before it ends: collections meanwhile would only walk the growing heap.
    let _gc = GcPause::new(py);
    let mut sink = StreamSink { typed_objects: newest, ..StreamSink::default() };
    let mut encoder = Encoder::new(&mut sink);
    // In a stream's body a subclass of bytearray needs version 4; a text document carries it
    // in its version 1 body (docs/TEXT_FORMATS.md section 3).
    encoder.bytearray_subclasses = true;
    if newest {
        // Copied out by `dumps_raw`, which gives the buffer back.
        encoder.w = Writer::reusing();
        encoder.strings = Some(StringTable::default());
        encoder.stream_only_values = true;
    }
    let value = encoder.standalone(obj)?;
    let version = match (newest, encoder.version_4_values) {
        (false, _) => 1,
        (true, 0) => TYPED_OBJECTS_VERSION,
        (true, _) => COPIES_AND_SCALAR_SUBCLASSES_VERSION,
    };
    drop(encoder);
    let mut count = Writer::new();
    count.varint(u64::from(sink.count));
    let mut parts = vec![count.buf, std::mem::take(&mut sink.table.buf)];
    if newest {
        parts.push(std::mem::take(&mut sink.kinds_bytes.buf));
    }
    parts.push(value);
    Ok(EncodedBody { version, parts })
}

/// The concatenation of `parts` compressed with `compression` (a level checked by
/// `checked_level`), or None for no compression.
pub(crate) fn compress(py: Python<'_>, parts: &[&[u8]], compression: u8, level: i32) -> PyResult<Option<Vec<u8>>> {
    let len: usize = parts.iter().map(|part| part.len()).sum();
    match compression {
        COMPRESSION_NONE => Ok(None),
        COMPRESSION_ZSTD => {
            let source = parts.iter().fold(Box::new(std::io::empty()) as Box<dyn Read + Send + '_>, |acc, part| Box::new(acc.chain(*part)));
            let out = py.detach(|| zstd::stream::compress_sized(source, level, len as u64));
            Ok(Some(out.map_err(|e| PyRuntimeError::new_err(format!("zstd compression failed: {e}")))?))
        }
        COMPRESSION_LZ4 => {
            let out = py.detach(|| {
                // The frame records the content size, as copal's zstd frames do.
                let info = lz4_flex::frame::FrameInfo::new().content_size(Some(len as u64));
                let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::with_capacity(len / 2));
                parts.iter().try_for_each(|part| encoder.write_all(part))?;
                encoder.finish().map_err(std::io::Error::other)
            });
            Ok(Some(out.map_err(|e| PyRuntimeError::new_err(format!("lz4 compression failed: {e}")))?))
        }
        _ => {
            let joined = PyBytes::new_with(py, len, |buf| {
                fill(buf, parts);
                Ok(())
            })?;
            let out = py.import(interned!(py, "zlib")?)?.call_method1(interned!(py, "compress")?, (joined, level, GZIP_WBITS))?;
            Ok(Some(out.cast_into::<PyBytes>()?.as_bytes().to_vec()))
        }
    }
}

fn fill(buf: &mut [u8], parts: &[&[u8]]) {
    let mut at = 0;
    for part in parts {
        buf[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
}

pub(crate) fn checked_level(compression: u8, level: Option<i32>) -> PyResult<i32> {
    match compression {
        COMPRESSION_NONE if level.is_none() => Ok(0),
        COMPRESSION_NONE => Err(PyValueError::new_err("a compression level needs a compression")),
        COMPRESSION_ZSTD => {
            let level = level.unwrap_or(DEFAULT_ZSTD_LEVEL);
            let range = zstd::compression_level_range();
            if range.contains(&level) {
                Ok(level)
            } else {
                Err(PyValueError::new_err(format!(
                    "zstd compression level {level} is outside {}..={}",
                    range.start(),
                    range.end()
                )))
            }
        }
        COMPRESSION_GZIP => {
            let level = level.unwrap_or(DEFAULT_GZIP_LEVEL);
            if (0..=9).contains(&level) {
                Ok(level)
            } else {
                Err(PyValueError::new_err(format!("gzip compression level {level} is outside 0..=9")))
            }
        }
        COMPRESSION_LZ4 if level.is_none() => Ok(0),
        COMPRESSION_LZ4 => Err(PyValueError::new_err("lz4 has no compression levels: use compress=\"lz4\"")),
        other => Err(PyValueError::new_err(format!("unknown compression code {other}"))),
    }
}

// -- reading ------------------------------------------------------------------------------------

/// One entry of the stream's descriptor table, with what decoding learns about it on first use.
pub(crate) struct Entry {
    table: Arc<TableEntry>,
    class: OnceLock<Py<PyType>>,
    /// The stamp under which the class passed `check_inert`, if that pass lasts while the
    /// stamp does (`class_cache::check_inert`).
    inert_under: OnceLock<Stamp>,
    /// Set once the class has passed the checks for building OBJECT instances of it.
    instance_checked: AtomicBool,
}

/// Serves a stream's descriptor table to the decoder. A descriptor's class is resolved the first
/// time the decoder asks for the descriptor, by `classes::resolve` (never by importing), and
/// checked once (`check_inert`); a failure is a SchemaError raised by `descriptor` itself, so
/// that it reaches the caller whatever the decoder does with errors of `class_of`.
pub(crate) struct StreamResolver<'py, 'e> {
    registry: Bound<'py, PyDict>,
    entries: &'e [Entry],
    /// The entry `descriptor` returned last: the decoder asks `class_of` for its class next.
    last: Cell<usize>,
    zones: RefCell<HashMap<String, Py<PyTzInfo>>>,
}

impl<'py, 'e> StreamResolver<'py, 'e> {
    pub(crate) fn new(registry: Bound<'py, PyDict>, entries: &'e [Entry]) -> Self {
        StreamResolver { registry, entries, last: Cell::new(0), zones: RefCell::new(HashMap::new()) }
    }

    fn class(&self, py: Python<'py>, entry: &Entry) -> PyResult<Bound<'py, PyType>> {
        if let Some(class) = entry.class.get() {
            return Ok(class.bind(py).clone());
        }
        let table = &entry.table;
        let class = table.name.resolve(py, &self.registry)?;
        if table.passed(&class) {
            entry.instance_checked.store(true, Ordering::Relaxed);
        } else if let Some(stamp) = crate::class_cache::check_inert(&class, &table.info)? {
            let _ = entry.inert_under.set(stamp);
        }
        let _ = entry.class.set(class.clone().unbind());
        Ok(class)
    }
}

impl<'py> Resolver<'py> for StreamResolver<'py, '_> {
    fn descriptor(&self, py: Python<'py>, id: u32) -> PyResult<Arc<DecodeInfo>> {
        let Some(entry) = self.entries.get(id as usize) else {
            return Err(corrupt("stream", DecodeError::UnknownDescriptor { id }));
        };
        self.class(py, entry)?;
        self.last.set(id as usize);
        Ok(Arc::clone(&entry.table.info))
    }

    fn class_of(&self, py: Python<'py>, info: &DecodeInfo) -> PyResult<Bound<'py, PyType>> {
        let is_info = |entry: &&Entry| std::ptr::eq(Arc::as_ptr(&entry.table.info), info);
        let entry = match self.entries.get(self.last.get()).filter(is_info) {
            Some(entry) => entry,
            None => self.entries.iter().find(is_info).ok_or_else(|| PyRuntimeError::new_err("descriptor of another stream"))?,
        };
        self.class(py, entry)
    }

    fn object(&self, _py: Python<'py>, oid: u64) -> PyResult<Bound<'py, PyAny>> {
        Err(CorruptRecordError::new_err(format!(
            "corrupt stream: unknown tag 0x17 (a reference to stored object {oid:#x}); a stream \
             holds persistent objects by value, never references"
        )))
    }

    fn zone(&self, py: Python<'py>, tz: &TzInfo) -> PyResult<Option<Bound<'py, PyTzInfo>>> {
        let key = match tz {
            TzInfo::Naive => return Ok(None),
            TzInfo::Offset(micros) => format!("{micros}"),
            TzInfo::Named(name) => name.clone(),
        };
        if let Some(zone) = self.zones.borrow().get(&key) {
            return Ok(Some(zone.bind(py).clone()));
        }
        let Some(zone) = crate::decode::new_zone(py, tz)? else { return Ok(None) };
        self.zones.borrow_mut().insert(key, zone.clone().unbind());
        Ok(Some(zone))
    }

    fn instance(&self, py: Python<'py>, id: u32, class: &Bound<'py, PyType>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let entry = &self.entries[id as usize];
        let (info, persistent) = (&entry.table.info, entry.table.persistent);
        if !entry.instance_checked.load(Ordering::Relaxed) {
            if persistent {
                if !is_python_class(class) || !class.is_subclass_of::<PersistentBase>()? {
                    return Err(SchemaError::new_err(format!(
                        "stream type {:?} is marked persistent but is not a copal.Persistent class",
                        info.type_name
                    )));
                }
            } else {
                crate::class_cache::remembered(class, |facts| &mut facts.plain_instances, || check_plain_class(class, info))?;
            }
            entry.instance_checked.store(true, Ordering::Relaxed);
            if let Some(&stamp) = entry.inert_under.get() {
                let _ = entry.table.checked.set((class.as_ptr() as usize, stamp));
            }
        }
        let base = if persistent {
            // PersistentBase's constructor makes an unsaved persistent object (no oid, no jar).
            PersistentBase::type_object(py).as_type_ptr()
        } else {
            // object.__new__: `check_plain_class` made sure the class does not override it.
            std::ptr::addr_of_mut!(ffi::PyBaseObject_Type)
        };
        crate::decode::allocated_instance(class, base).map(Some)
    }

    fn known_slots(&self, id: u32, class: &Bound<'py, PyType>) -> Option<Arc<FieldSlots>> {
        self.entries.get(id as usize)?.table.slots.get().filter(|slots| slots.is_for(class)).cloned()
    }

    fn learned_slots(&self, id: u32, slots: &Arc<FieldSlots>) {
        if let Some(entry) = self.entries.get(id as usize) {
            let _ = entry.table.slots.set(Arc::clone(slots));
        }
    }
}


/// What distinguishes the two containers that share the header layout of docs/STREAM.md
/// section 2: streams and archives (section 10).
pub(crate) struct Container {
    pub(crate) name: &'static str,
    pub(crate) magic: [u8; 4],
    /// The versions this build reads, all of them from 1.
    pub(crate) newest_version: u8,
    /// Flag bits beyond the compression code that this container defines.
    pub(crate) extra_flags: u8,
}

pub(crate) const STREAM: Container = Container { name: "stream", magic: MAGIC, newest_version: STREAM_VERSION, extra_flags: 0 };

/// A container's header (docs/STREAM.md section 2).
pub(crate) struct Header<'a> {
    pub(crate) version: u8,
    pub(crate) flags: u8,
    pub(crate) payload: &'a [u8],
}

/// Reads a stream or archive header, checking its fields in the order of docs/STREAM.md section
/// 2; the payload must end the input.
pub(crate) fn read_header<'a>(data: &'a [u8], kind: &Container) -> PyResult<Header<'a>> {
    let name = kind.name;
    let magic = &data[..data.len().min(kind.magic.len())];
    if magic != &kind.magic[..magic.len()] {
        let expected = String::from_utf8_lossy(&kind.magic);
        return Err(CorruptRecordError::new_err(format!(
            "corrupt {name}: not a copal {name} (it does not start with the magic bytes \"{expected}\")"
        )));
    }
    let bad = |e| corrupt(format!("{name} header"), e);
    let mut r = Reader::new(data);
    r.bytes(kind.magic.len()).map_err(bad)?;
    let version = r.u8().map_err(bad)?;
    if !(1..=kind.newest_version).contains(&version) {
        return Err(CorruptRecordError::new_err(format!(
            "corrupt {name}: {name} version {version} is not supported by this copal (reads versions 1 to {})",
            kind.newest_version
        )));
    }
    let flags = r.u8().map_err(bad)?;
    if flags & !(COMPRESSION_MASK | kind.extra_flags) != 0 {
        return Err(bad(DecodeError::OutOfRange { offset: FLAGS_OFFSET, what: "flags" }));
    }
    let length = r.varint().map_err(bad)?;
    let remaining = r.remaining() as u64;
    if length > remaining {
        return Err(bad(DecodeError::Truncated { offset: data.len(), needed: (length - remaining) as usize }));
    }
    if length < remaining {
        return Err(bad(DecodeError::TrailingBytes { offset: r.position() + length as usize }));
    }
    Ok(Header { version, flags, payload: &data[r.position()..] })
}

/// A stream or archive of `version`: the header, then `parts` concatenated as the payload,
/// compressed with `compression` at `level` (the codec's default if None). `flags` holds the
/// container's own flag bits.
pub(crate) fn framed<'py>(
    py: Python<'py>,
    kind: &Container,
    version: u8,
    flags: u8,
    parts: &[&[u8]],
    compression: u8,
    level: Option<i32>,
) -> PyResult<Bound<'py, PyBytes>> {
    let level = checked_level(compression, level)?;
    let compressed = compress(py, parts, compression, level)?;
    let payload_len = compressed.as_ref().map_or_else(|| parts.iter().map(|part| part.len()).sum(), Vec::len);
    let mut header = Writer::new();
    header.bytes(&kind.magic);
    header.u8(version);
    header.u8(flags | compression);
    header.varint(payload_len as u64);
    PyBytes::new_with(py, header.buf.len() + payload_len, |buf| {
        let (head, rest) = buf.split_at_mut(header.buf.len());
        head.copy_from_slice(&header.buf);
        match &compressed {
            Some(payload) => rest.copy_from_slice(payload),
            None => fill(rest, parts),
        }
        Ok(())
    })
}

/// The body of a stream: the payload, decompressed if the flags say so.
pub(crate) enum Body<'py, 'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
    Python(Bound<'py, PyBytes>),
}

impl Body<'_, '_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Body::Borrowed(b) => b,
            Body::Owned(v) => v,
            Body::Python(b) => b.as_bytes(),
        }
    }
}

fn bad_compression(what: &str, detail: impl std::fmt::Display) -> PyErr {
    CorruptRecordError::new_err(format!("corrupt stream: the {what} payload does not decompress ({detail})"))
}

/// How many bytes a compressed payload may inflate to unless the caller says otherwise
/// (`max_size` of `copal.loads`, `copal.load` and `copal.Archive`; docs/STREAM.md section 3).
/// Large enough for any graph that fits comfortably in memory as Python objects, small enough
/// that a decompression bomb cannot exhaust a process.
pub const DEFAULT_MAX_SIZE: usize = 256 << 20;

/// The `max_size` argument: a non-negative int (bools are refused, as everywhere in copal).
pub(crate) fn checked_max_size(value: &Bound<'_, PyAny>) -> PyResult<usize> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!("max_size must be an int, not {}", value.get_type().name()?)));
    }
    // An i64 is read directly; an i128 is read through a conversion to bytes, which every
    // `loads` paid for the default bound. Only a larger int needs it.
    let size: i128 = match value.extract::<i64>() {
        Ok(size) => size.into(),
        Err(_) => value.extract().map_err(|_| PyValueError::new_err("max_size is too large"))?,
    };
    if size < 0 {
        return Err(PyValueError::new_err(format!("max_size must not be negative, not {size}")));
    }
    Ok(usize::try_from(size).unwrap_or(usize::MAX))
}

/// The error of a payload that inflates beyond the caller's `max_size`.
fn too_large(what: &str, max_size: usize) -> PyErr {
    CorruptRecordError::new_err(format!(
        "corrupt stream: the {what} payload inflates to more than max_size = {max_size} bytes; \
         pass a larger max_size to loads/load if the stream is trusted"
    ))
}

/// The body of a compressed payload, never more than `max_size` bytes (docs/FUZZING.md F5: a
/// few kilobytes of compressed data can claim gigabytes, so inflating whole before decoding
/// let any caller of `loads` be made to allocate without bound).
pub(crate) fn decompress<'py, 'a>(py: Python<'py>, flags: u8, payload: &'a [u8], max_size: usize) -> PyResult<Body<'py, 'a>> {
    match flags & COMPRESSION_MASK {
        COMPRESSION_NONE => Ok(Body::Borrowed(payload)),
        COMPRESSION_ZSTD | COMPRESSION_LZ4 => {
            let name = if flags & COMPRESSION_MASK == COMPRESSION_ZSTD { "zstd" } else { "lz4" };
            let body = py.detach(|| {
                if name == "zstd" {
                    inflate(zstd::stream::read::Decoder::with_buffer(payload).map_err(Inflate::Invalid)?, max_size)
                } else {
                    inflate(lz4_flex::frame::FrameDecoder::new(payload), max_size)
                }
            });
            match body {
                Ok(body) => Ok(Body::Owned(body)),
                Err(Inflate::TooLarge) => Err(too_large(name, max_size)),
                Err(Inflate::Invalid(e)) => Err(bad_compression(name, e)),
            }
        }
        _ => {
            // A decompression object, unlike zlib.decompress, bounds its output (`max_length`)
            // and reports data after the gzip member (`unused_data`), which a stream must not
            // have. Asking for one byte more than allowed tells "exactly max_size" from "more".
            let d = py.import(interned!(py, "zlib")?)?.call_method1(interned!(py, "decompressobj")?, (GZIP_WBITS,))?;
            let limit = max_size.saturating_add(1).min(isize::MAX as usize);
            let out = d
                .call_method1(interned!(py, "decompress")?, (allocation::bytes(py, payload)?, limit.to_python(py)?))
                .map_err(|e| if allocation::is_memory_error(py, &e) { e } else { bad_compression("gzip", e) })?;
            if out.len()? > max_size {
                return Err(too_large("gzip", max_size));
            }
            let complete: bool = d.getattr(interned!(py, "eof")?)?.extract()?;
            let unused: usize = d.getattr(interned!(py, "unused_data")?)?.len()?;
            if !complete {
                return Err(bad_compression("gzip", "the gzip data is truncated"));
            }
            if unused != 0 {
                return Err(bad_compression("gzip", "bytes follow the gzip member"));
            }
            Ok(Body::Python(out.cast_into::<PyBytes>()?))
        }
    }
}

enum Inflate {
    TooLarge,
    Invalid(std::io::Error),
}

/// How much decompressed data is read at a time.
const INFLATE_CHUNK: usize = 128 << 10;

/// Reads everything a streaming decompressor produces. The output buffer grows with the data
/// actually produced (never from a size the frame declares) and never past `max_size`: the
/// error comes before the allocation would.
fn inflate(mut decoder: impl Read, max_size: usize) -> Result<Vec<u8>, Inflate> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; INFLATE_CHUNK];
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Inflate::Invalid(e)),
        };
        let needed = out.len() + n;
        if needed > max_size {
            return Err(Inflate::TooLarge);
        }
        if needed > out.capacity() {
            // Doubling as Vec would, but capped at max_size so capacity obeys the bound too.
            let target = (out.capacity() * 2).max(needed).min(max_size);
            out.reserve_exact(target - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Reads the descriptor table at the start of the body (docs/STREAM.md section 4), with field
/// names interned as the decoder sets them, and the field kinds that follow it in version 3.
///
/// A table read before (`RECENT_TABLES`) is not parsed or interned again: a small `loads` spent
/// a fifth of its time making and interning the same field names call after call, and then
/// copying its entries.
pub(crate) fn read_table(r: &mut Reader<'_>, py: Python<'_>, version: u8, what: &str) -> PyResult<Vec<Entry>> {
    let (start, rest) = (r.position(), r.rest());
    if let Some((len, entries)) = recent_table(version, rest) {
        r.bytes(len).map_err(|e| corrupt(what, e))?;
        return Ok(entries.iter().map(Entry::new).collect());
    }
    let table = copal_core::text::read_table(r).map_err(|e| corrupt(what, e))?;
    let mut kinds = if version >= TYPED_OBJECTS_VERSION {
        read_field_kinds(r, table.iter().map(|entry| entry.fields.len())).map_err(|e| corrupt(what, e))?
    } else {
        Vec::new()
    }
    .into_iter();
    let parsed = table
        .into_iter()
        .map(|entry| {
            let fields = entry
                .fields
                .iter()
                .map(|name| Ok(crate::allocation::interned_str(py, name)?.unbind()))
                .collect::<PyResult<_>>()?;
            let name = ClassName::new(py, &entry.type_name)?;
            let mut info = DecodeInfo::plain(entry.type_name, fields);
            info.kinds = kinds.next().unwrap_or_default();
            let (checked, slots) = (OnceLock::new(), OnceLock::new());
            Ok(Arc::new(TableEntry { info: Arc::new(info), name, persistent: entry.persistent, checked, slots }))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let entries = parsed.iter().map(Entry::new).collect();
    remember_table(version, &rest[..r.position() - start], parsed);
    Ok(entries)
}

/// A descriptor entry as read from a table, before any class is resolved for it: what every
/// decoding of a table with these bytes shares (`RECENT_TABLES`).
///
/// `info` is shared too: the stream resolver always makes its objects' instances itself, so the
/// decoder never fills in `DecodeInfo::rebuildable`, which would be a fact of one class.
struct TableEntry {
    info: Arc<DecodeInfo>,
    name: ClassName,
    persistent: bool,
    /// The address of the class the name resolved to when a decoding first checked it (found
    /// inert for these fields, and fit for `StreamResolver::instance` to make its instances),
    /// and its stamp then: the same class with the same stamp needs neither check again
    /// (class_cache.rs; an address reused by another class comes with another version tag, and
    /// the class is not kept alive). A class found later under the name is checked every time.
    checked: OnceLock<(usize, Stamp)>,
    /// Where the fields go in the instances of the class the first decoding found
    /// (crate::cpython), offered to the decoder for that class only (`FieldSlots::is_for`).
    slots: OnceLock<Arc<FieldSlots>>,
}

impl TableEntry {
    /// Whether `class` is the class this entry's checks passed for, unchanged since.
    fn passed(&self, class: &Bound<'_, PyType>) -> bool {
        self.checked.get().is_some_and(|&(address, stamp)| {
            address == class.as_ptr() as usize && crate::class_cache::stamp(class) == Some(stamp)
        })
    }
}

impl Entry {
    /// A new `Entry` of `table`: classes are resolved again by every decoding that uses it, since
    /// a name may resolve to another class by then.
    fn new(table: &Arc<TableEntry>) -> Entry {
        Entry { table: Arc::clone(table), class: OnceLock::new(), inert_under: OnceLock::new(), instance_checked: AtomicBool::new(false) }
    }
}

/// A table read recently: its bytes (table and field kinds) and version, and its entries.
struct RecentTable {
    version: u8,
    bytes: Vec<u8>,
    entries: Arc<[Arc<TableEntry>]>,
}

/// How many tables are kept, and the largest kept (in bytes): a program loading streams of a
/// few shapes finds them all, and tables read from data cannot grow the process.
const RECENT_TABLES: usize = 8;
const MAX_REMEMBERED_TABLE: usize = 4096;

static TABLES: std::sync::Mutex<Vec<RecentTable>> = std::sync::Mutex::new(Vec::new());

/// The length and entries of the remembered table that `rest` (the body from its table on)
/// starts with. Reading a table looks at its bytes in order and stops at its end, so a body that
/// starts with the bytes of a table read before holds that same table.
fn recent_table(version: u8, rest: &[u8]) -> Option<(usize, Arc<[Arc<TableEntry>]>)> {
    let tables = TABLES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let found = tables.iter().find(|table| table.version == version && rest.starts_with(&table.bytes))?;
    Some((found.bytes.len(), Arc::clone(&found.entries)))
}

fn remember_table(version: u8, bytes: &[u8], entries: Vec<Arc<TableEntry>>) {
    if bytes.len() > MAX_REMEMBERED_TABLE {
        return;
    }
    let table = RecentTable { version, bytes: bytes.to_vec(), entries: entries.into() };
    let evicted = {
        let mut tables = TABLES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let evicted = if tables.len() >= RECENT_TABLES { Some(tables.remove(0)) } else { None };
        tables.push(table);
        evicted
    };
    // Released after the lock, as class_cache.rs releases replaced entries.
    drop(evicted);
}

/// `copal.loads` without the keyword argument: the object graph of `data` if it is bytes that
/// start like a stream, else whatever `copal.serialize._loads_other` (which detects the other
/// forms) makes of it.
#[pyfunction]
pub fn loads<'py>(py: Python<'py>, data: &Bound<'py, PyAny>, max_size: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(bytes) = data.cast_exact::<PyBytes>() {
        if bytes.as_bytes().starts_with(&MAGIC) {
            return loads_raw(py, bytes.as_bytes(), max_size);
        }
    }
    crate::pytypes::loads_other(py)?.call1((data, max_size))
}

/// `copal.loads` of a stream: the object graph of stream `data`, whose payload,
/// if compressed, may inflate to at most `max_size` bytes.
#[pyfunction]
pub fn loads_raw<'py>(py: Python<'py>, data: &[u8], max_size: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let max_size = checked_max_size(max_size)?;
    let header = read_header(data, &STREAM)?;
    let body = decompress(py, header.flags, header.payload, max_size)?;
    decode_body(py, body.bytes(), header.version)
}

/// The object graph of a stream body (docs/STREAM.md section 4) of stream `version`.
pub(crate) fn decode_body<'py>(py: Python<'py>, body: &[u8], version: u8) -> PyResult<Bound<'py, PyAny>> {
    decode_body_of(py, body, version, version >= COPIES_AND_SCALAR_SUBCLASSES_VERSION)
}

/// The object graph of the body a text document transcodes to (docs/TEXT_FORMATS.md section 3),
/// its descriptor `table` and its `value` apart (joining them copied the value): a version 1
/// body whose SUBCLASS values may also have a BYTEARRAY base.
pub(crate) fn decode_document_body<'py>(py: Python<'py>, table: &[copal_core::text::TableEntry], value: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    // Read as a stream's table, from its bytes: the remembered tables (`recent_table`), found
    // by their bytes, spare documents loaded one after another the interning of their field
    // names and the lookup of their classes.
    let mut table_bytes = Writer::new();
    copal_core::text::write_table(&mut table_bytes, table);
    let entries = read_table(&mut Reader::new(&table_bytes.buf), py, 1, "document descriptor table")?;
    decode_value(py, &entries, &mut Reader::new(value), 1, true)
}

/// `decode_body`, reading SUBCLASS bases BYTEARRAY if `bytearray_bases`.
fn decode_body_of<'py>(py: Python<'py>, body: &[u8], version: u8, bytearray_bases: bool) -> PyResult<Bound<'py, PyAny>> {
    let mut r = Reader::new(body);
    let entries = read_table(&mut r, py, version, "stream descriptor table")?;
    decode_value(py, &entries, &mut r, version, bytearray_bases)
}

/// The value of a stream body of `version` after its table, whose `entries` were read.
fn decode_value<'py>(py: Python<'py>, entries: &[Entry], r: &mut Reader<'_>, version: u8, bytearray_bases: bool) -> PyResult<Bound<'py, PyAny>> {
    let shares_strings = version >= SHARED_STRINGS_VERSION;
    let registry = crate::hooks::registry_for_decoding(py)?;
    let resolver = StreamResolver::new(registry, entries);
    let what = || "stream".to_owned();
    // Equal strings come back as one object. A body with shared strings has each distinct
    // string once; in others (version 1, text documents) repeated short strings are found by
    // the decoder's cache, as from the database (strings.rs): 1-3% of reading a JSON document
    // of all-distinct strings (seed 001), and 12-14% faster where strings repeat (seed 003).
    let mut cache = (!shares_strings).then(|| StringCache::for_input(r.remaining()));
    // Nothing the decoder creates can become garbage before it returns (see gc.rs).
    let _gc = GcPause::new(py);
    let mut decoder = Decoder::new(py, &resolver, &what);
    decoder.strings = cache.as_mut();
    if shares_strings {
        decoder.share_strings();
    }
    decoder.typed_objects = version >= TYPED_OBJECTS_VERSION;
    decoder.version_4_values = version >= COPIES_AND_SCALAR_SUBCLASSES_VERSION;
    decoder.bytearray_bases = bytearray_bases;
    decoder.standalone(r)
}
