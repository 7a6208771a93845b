//! Standalone streams (docs/STREAM.md): one object graph as a self-contained byte string, with
//! its class descriptors inline, for `copal.dumps` / `copal.loads` (python/copal/serialize.py).
//!
//! The value is written and read by the record codec (encode/, decode/); this module adds
//! the stream header, the inline descriptor table (a `Sink` that collects it while encoding and
//! a `Resolver` that serves it while decoding) and the optional compression of the payload.
//! Persistent objects are written by value, so a stream never refers to a database.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::rc::Rc;
use std::sync::{Arc, OnceLock};

use copal_core::format::{DecodeError, FieldKind, Reader, TzInfo, ValueForms, Writer};
use copal_core::stream::{compression, value_forms, Compression, Container, Frame, Header, StreamTable, COPIES_AND_SCALAR_SUBCLASSES_VERSION, STREAM, TYPED_OBJECTS_VERSION};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyTzInfo, PyType};
use pyo3::PyTypeInfo;

use crate::class_cache::Stamp;
use crate::classes::{ClassCache, ClassName, ClassShape};
use crate::cpython::FieldSlots;
use crate::decode::{check_plain_class, DecodeInfo, Decoder, Resolver};
use crate::encode::{field_kind_of, is_python_class, Encoder, Sink};
use crate::errors::{corrupt, stream_error, CorruptRecordError, SchemaError};
use crate::gc::GcPause;
use crate::hashing::IntMap;
use crate::persistent::PersistentBase;
use crate::strings::{StringCache, StringTable};

/// Descriptor-entry flags: the descriptor is a persistent class stored by value.
use copal_core::text::PERSISTENT as DESCRIPTOR_PERSISTENT;

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
#[pyo3(signature = (obj, compression = compression::NONE, level = None))]
pub fn dumps_raw<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    compression: u8,
    level: Option<i32>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut body = encode_body(py, obj, true)?;
    let parts: Vec<&[u8]> = body.parts.iter().map(Vec::as_slice).collect();
    let stream = framed(py, &STREAM, body.version, 0, &parts, checked_compression(compression, level)?);
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

/// The compression of `code` at `level` (the codec's default if None), checked.
pub(crate) fn checked_compression(code: u8, level: Option<i32>) -> PyResult<Compression> {
    Compression::new(code, level).map_err(|e| PyValueError::new_err(e.0))
}

/// A stream or archive of `version` in a new bytes object: the header, then `parts`
/// concatenated as the payload, compressed (without the GIL) with `compression`. `flags` holds
/// the container's own flag bits.
pub(crate) fn framed<'py>(
    py: Python<'py>,
    kind: &Container,
    version: u8,
    flags: u8,
    parts: &[&[u8]],
    compression: Compression,
) -> PyResult<Bound<'py, PyBytes>> {
    let frame = |()| Frame::new(kind, version, flags, parts, compression);
    let frame = if compression.codec.is_some() { py.detach(|| frame(())) } else { frame(()) };
    let frame = frame.map_err(|e| PyRuntimeError::new_err(format!("{} compression failed: {e}", kind.name)))?;
    PyBytes::new_with(py, frame.len(), |buf| {
        frame.write_into(buf);
        Ok(())
    })
}

/// `payload` decompressed (without the GIL) with the codec of compression `code`, never more
/// than `max_size` bytes.
pub(crate) fn decompress<'a>(py: Python<'_>, code: u8, payload: &'a [u8], max_size: usize) -> PyResult<Cow<'a, [u8]>> {
    let inflate = |()| copal_core::stream::compression::decompress(code, payload, max_size);
    let body = if code & compression::CODE_MASK == compression::NONE { inflate(()) } else { py.detach(|| inflate(())) };
    body.map_err(|e| stream_error(e.into()))
}

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

    // Called for every object: inlined into both variants of the decoder (bounded or not),
    // which LLVM no longer does by itself once there are two (1.3% of loading seed 001).
    #[inline(always)]
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
    let StreamTable { entries: table, kinds } = StreamTable::read(r, version).map_err(|e| corrupt(what, e))?;
    let mut kinds = kinds.into_iter();
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

/// `copal.loads`: the object graph of `data`, a stream or document in bytes, bytearray,
/// memoryview or str (text.rs `loads_other` tells the forms apart).
#[pyfunction]
pub fn loads<'py>(py: Python<'py>, data: &Bound<'py, PyAny>, max_size: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(bytes) = data.cast_exact::<PyBytes>() {
        if bytes.as_bytes().starts_with(&STREAM.magic) {
            return loads_raw(py, bytes.as_bytes(), max_size);
        }
    }
    crate::text::loads_other(py, data, max_size)
}

/// `copal.loads` of a stream: the object graph of stream `data`, whose payload,
/// if compressed, may inflate to at most `max_size` bytes, and its objects take about as much
/// memory (decode/memory.rs).
#[pyfunction]
pub fn loads_raw<'py>(py: Python<'py>, data: &[u8], max_size: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    loads_stream(py, data, checked_max_size(max_size)?, None)
}

/// The object graph of stream `data`, with the bounds of `loads_raw`; `memory` holds its
/// objects to that many bytes even if the payload is not compressed (the stream was).
pub(crate) fn loads_stream<'py>(py: Python<'py>, data: &[u8], max_size: usize, memory: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
    let header = Header::read(data, &STREAM).map_err(stream_error)?;
    let body = decompress(py, header.flags, header.payload, max_size)?;
    let memory = memory.or(matches!(body, Cow::Owned(_)).then_some(max_size));
    decode_body_of(py, &body, header.version, value_forms(header.version).bytearray_bases, memory)
}

/// The object graph of the body a text document transcodes to (docs/TEXT_FORMATS.md section 3),
/// its descriptor `table` and its `value` apart (joining them copied the value): a version 1
/// body whose SUBCLASS values may also have a BYTEARRAY base.
/// `memory`, if given, bounds the memory of its objects (decode/memory.rs).
pub(crate) fn decode_document_body<'py>(
    py: Python<'py>,
    table: &[copal_core::text::TableEntry],
    value: &[u8],
    memory: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    // Read as a stream's table, from its bytes: the remembered tables (`recent_table`), found
    // by their bytes, spare documents loaded one after another the interning of their field
    // names and the lookup of their classes.
    let mut table_bytes = Writer::new();
    copal_core::text::write_table(&mut table_bytes, table);
    let entries = read_table(&mut Reader::new(&table_bytes.buf), py, 1, "document descriptor table")?;
    decode_value(py, &entries, &mut Reader::new(value), 1, true, memory)
}

/// The object graph of a stream body (docs/STREAM.md section 4) of stream `version`, reading
/// SUBCLASS bases BYTEARRAY if `bytearray_bases`.
fn decode_body_of<'py>(py: Python<'py>, body: &[u8], version: u8, bytearray_bases: bool, memory: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
    let mut r = Reader::new(body);
    let entries = read_table(&mut r, py, version, "stream descriptor table")?;
    decode_value(py, &entries, &mut r, version, bytearray_bases, memory)
}

/// The value of a stream body of `version` after its table, whose `entries` were read; its
/// objects are held to `memory` bytes if given.
fn decode_value<'py>(
    py: Python<'py>,
    entries: &[Entry],
    r: &mut Reader<'_>,
    version: u8,
    bytearray_bases: bool,
    memory: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let forms = value_forms(version);
    let shares_strings = forms.shared_strings;
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
    match memory {
        None => read_value(Decoder::new(py, &resolver, &what), cache.as_mut(), forms, bytearray_bases, r),
        Some(max_size) => read_value(Decoder::bounded(py, &resolver, &what, max_size), cache.as_mut(), forms, bytearray_bases, r),
    }
}

/// `decoder`, set up for a stream body of `forms`, reading its value from `r`.
fn read_value<'r, 'py, const BOUNDED: bool>(
    mut decoder: Decoder<'r, 'py, StreamResolver<'py, '_>, BOUNDED>,
    strings: Option<&'r mut StringCache>,
    forms: ValueForms,
    bytearray_bases: bool,
    r: &mut Reader<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    decoder.strings = strings;
    if forms.shared_strings {
        decoder.share_strings();
    }
    decoder.typed_objects = forms.typed_objects;
    decoder.version_4_values = forms.copies_and_scalar_bases;
    decoder.bytearray_bases = bytearray_bases;
    decoder.standalone(r)
}
