//! Python objects -> copal bytes (docs/FORMAT.md "Values"), written straight from the objects
//! with the core's `Writer` primitives.

use std::rc::Rc;
use std::sync::Arc;

use copal_core::format::calendar::{days_from_civil, MICROS_PER_DAY, MICROS_PER_SECOND};
use copal_core::format::{oid_class, oid_seq, repeat_tail, tag, FieldKind, ListHead, ObjectField, StringForm, StringsMark, TzInfo, Writer, FLAG_MUTABLE_STATE};
use copal_core::format::RecordHeader;
use pyo3::exceptions::{PyTypeError, PyUnicodeEncodeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{
    PyByteArray, PyBytes, PyComplex, PyDate, PyDateAccess, PyDateTime, PyDelta, PyDeltaAccess, PyDict, PyFloat,
    PyFrozenSet, PyInt, PyList, PySet, PyString, PyTime, PyTimeAccess, PyTuple, PyTzInfo, PyTzInfoAccess, PyType,
};

use crate::classes::{type_name_of, ClassShape};
use crate::dict_items::{made_dict, Changed, Cursor, DictTable, Holder, MadeDict, Next, OwnArray, ValuesFields};
use crate::hashing::IntMap;
use crate::prefetch;
use crate::strings::str_text;
use crate::known_containers::{Items, KnownContainer};
use crate::persistent::{instance_dict, PersistentBase};
use crate::pytypes;
use crate::slots::{SlotFields, SlotLayout};
use crate::strings::StringTable;

/// Deepest nesting the encoder writes; equal to the decoders' limit so that everything written
/// can be read back.
const MAX_DEPTH: usize = 256;

/// What the encoder needs from its surroundings: descriptor ids for classes and ids for objects
/// that become persistent during this encoding.
pub trait Sink {
    /// The descriptor for objects of `class` with the keys of `fields` as field names. It must
    /// depend on nothing else during one encoding: the encoder reuses it (`LastShape`).
    fn descriptor(&mut self, class: &Bound<'_, PyType>, fields: &Bound<'_, PyDict>) -> PyResult<ClassShape>;
    fn enum_descriptor(&mut self, class: &Bound<'_, PyType>) -> PyResult<u32>;
    /// The id to write for a reference to persistent `obj`; an object that has none yet
    /// becomes persistent here (persistence by reachability).
    fn reference(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<u64>;
    /// Whether persistent objects are written by value, as an OBJECT of their stored state,
    /// instead of as a REF (standalone streams, docs/STREAM.md). Records never do.
    fn persistent_by_value(&self) -> bool {
        false
    }
    /// The descriptor of an object known only by its stored type name (a BrokenObject, whose
    /// class is missing). Only the database can give one.
    fn descriptor_named(&mut self, type_name: &str, _fields: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        Err(PyTypeError::new_err(format!("an object of the missing class {type_name:?} can only be stored back into its database")))
    }
    /// The field kinds of `descriptor` when objects may be written as TYPED_OBJECT and lists of
    /// them as OBJECT_LIST (stream version 3, docs/STREAM.md section 5). Records never do.
    fn field_kinds(&self, _descriptor: u32) -> Option<Rc<[FieldKind]>> {
        None
    }
}

/// The kind of field that `v` can be written in without a tag (docs/STREAM.md section 5):
/// exact types only, since a subclass would be read back as its base type.
pub fn field_kind_of(v: &Bound<'_, PyAny>) -> PyResult<FieldKind> {
    for kind in [FieldKind::Str, FieldKind::Int, FieldKind::Float, FieldKind::List] {
        if has_kind(v, kind)? {
            return Ok(kind);
        }
    }
    Ok(FieldKind::Any)
}

/// Whether `v` can be written in a field of `kind` (a kind other than `Any`): `field_kind_of`'s
/// test of that one kind. Each test compares the value's type pointer by the C API's exact
/// checks: pyo3's `cast_exact` takes and drops a reference to the type object it compares
/// with when the test fails, two writes to a shared line per test and value.
fn has_kind(v: &Bound<'_, PyAny>, kind: FieldKind) -> PyResult<bool> {
    let ptr = v.as_ptr();
    // SAFETY: `ptr` is a live object; only its type is read, and the unchecked cast follows
    // the check of its type.
    unsafe {
        Ok(match kind {
            // Strings with lone surrogates have no UTF-8 form (they are STR_SURROGATES).
            FieldKind::Str => ffi::PyUnicode_CheckExact(ptr) != 0 && utf8_text(v.cast_unchecked::<PyString>())?.is_some(),
            // An int too big for i64 is Any, also when the OverflowError saying so could not be
            // made.
            FieldKind::Int => ffi::PyLong_CheckExact(ptr) != 0 && v.extract::<i64>().is_ok(),
            FieldKind::Float => ffi::PyFloat_CheckExact(ptr) != 0,
            FieldKind::List => ffi::PyList_CheckExact(ptr) != 0,
            FieldKind::Any => false,
        })
    }
}

/// The UTF-8 text of `s`, or None if it has none (lone surrogates). The UTF-8 form of a
/// non-ASCII str is made on first use (CPython keeps it in the str): that allocation failing is
/// a MemoryError, not a str without UTF-8, which would be written in another form.
/// The generalized UTF-8 of `s`, which has lone surrogates: each written as its own 3-byte
/// sequence ("surrogatepass", docs/FORMAT.md "Strings").
pub(crate) fn generalized_utf8<'py>(s: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyBytes>> {
    // SAFETY: `s` is a str; the codec and error handler names are NUL-terminated. The result is
    // a new reference to a bytes object, or null with an exception set.
    let bytes = unsafe {
        Bound::from_owned_ptr_or_err(s.py(), ffi::PyUnicode_AsEncodedString(s.as_ptr(), c"utf-8".as_ptr(), c"surrogatepass".as_ptr()))?
    };
    Ok(bytes.cast_into::<PyBytes>()?)
}

pub(crate) fn utf8_text<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Option<&'a str>> {
    match str_text(s) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.is_instance_of::<PyUnicodeEncodeError>(s.py()) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The fields of an object being written, in order: an instance dict (or a stored state), or
/// the slots and dict of an object with slots, read in place (slots.rs).
pub(crate) trait FieldSource<'py> {
    fn py(&self) -> Python<'py>;
    /// How many fields there are now.
    fn count(&self) -> usize;
    /// The name and value of the next field after `position` (0 for the first), which it
    /// advances, or None after the last. Borrowed references, valid while no Python code runs.
    fn next_field(&self, position: &mut ffi::Py_ssize_t) -> Option<(*mut ffi::PyObject, *mut ffi::PyObject)>;
    /// The fields as a dict of their own (for the sink, which names a descriptor's fields by
    /// the keys of a dict).
    fn to_dict(&self) -> PyResult<Bound<'py, PyDict>>;
    /// Pushes the name and value of every field onto `fields`, in `next_field`'s order, and
    /// returns the position after the last. Borrowed references, valid while no Python code
    /// runs.
    fn read_all(&self, fields: &mut Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>) -> ffi::Py_ssize_t {
        each_next_field(self, fields)
    }
}

/// `FieldSource::read_all` by `next_field`.
fn each_next_field<'py>(source: &(impl FieldSource<'py> + ?Sized), fields: &mut Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>) -> ffi::Py_ssize_t {
    let mut position = 0;
    while let Some(field) = source.next_field(&mut position) {
        fields.push(field);
    }
    position
}

impl<'py> FieldSource<'py> for Bound<'py, PyDict> {
    fn py(&self) -> Python<'py> {
        Bound::py(self)
    }

    fn count(&self) -> usize {
        self.len()
    }

    fn next_field(&self, position: &mut ffi::Py_ssize_t) -> Option<(*mut ffi::PyObject, *mut ffi::PyObject)> {
        let (mut key, mut value) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: `self` is a dict and the GIL is held; PyDict_Next returns borrowed references.
        (unsafe { ffi::PyDict_Next(self.as_ptr(), position, &mut key, &mut value) } != 0).then_some((key, value))
    }

    fn to_dict(&self) -> PyResult<Bound<'py, PyDict>> {
        Ok(self.clone())
    }

    /// A table of strs (an instance dict's) is read in place, as the JSON writer reads it
    /// (`DictTable`), without a call of `PyDict_Next` per field; it ends at the position
    /// `PyDict_Next` would (the insertion count of a split table, the entry count of another).
    fn read_all(&self, fields: &mut Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>) -> ffi::Py_ssize_t {
        if let Some(mut table) = DictTable::of(self.as_borrowed()) {
            let base = fields.len();
            loop {
                match table.next() {
                    Next::Item(name, value) => fields.push((name.as_ptr(), value.as_ptr())),
                    Next::End => return table.position(),
                    // A table not as `DictTable` expects it (no Python code runs while the
                    // fields are read, so it did not change): read it as any other dict.
                    Next::Changed => {
                        fields.truncate(base);
                        break;
                    }
                }
            }
        }
        each_next_field(self, fields)
    }
}

/// A dict of the fields of `source`, in `next_field`'s order (`FieldSource::to_dict` of the
/// sources that are not dicts).
pub(crate) fn fields_dict<'py>(source: &impl FieldSource<'py>) -> PyResult<Bound<'py, PyDict>> {
    let py = source.py();
    let state = crate::allocation::dict(py)?;
    let mut position: ffi::Py_ssize_t = 0;
    while let Some((name, value)) = source.next_field(&mut position) {
        // SAFETY: borrowed references from `next_field`, made owned before any Python code (a
        // key's hash) runs.
        let (name, value) = unsafe { (Bound::from_borrowed_ptr(py, name), Bound::from_borrowed_ptr(py, value)) };
        state.set_item(name, value)?;
    }
    Ok(state)
}

/// Inline values are read by their position in the insertion order. Once Python code run
/// meanwhile made the instance's dict (which takes the values over, in the same order, and
/// which `PyDict_Next` reads by the same positions), the rest is read from the dict, so that
/// `each_held`'s check after the last field still holds.
impl<'py, H: Holder> FieldSource<'py> for ValuesFields<'_, 'py, H> {
    fn py(&self) -> Python<'py> {
        ValuesFields::py(self)
    }

    fn count(&self) -> usize {
        match ValuesFields::count(self) {
            Ok(count) => count,
            Err(Changed) => made_dict(self.obj()).map_or(usize::MAX, |dict| dict.len()),
        }
    }

    fn next_field(&self, position: &mut ffi::Py_ssize_t) -> Option<(*mut ffi::PyObject, *mut ffi::PyObject)> {
        match self.at(usize::try_from(*position).ok()?) {
            Ok(field) => {
                *position += 1;
                field
            }
            Err(Changed) => made_dict(self.obj())?.next_field(position),
        }
    }

    fn to_dict(&self) -> PyResult<Bound<'py, PyDict>> {
        fields_dict(self)
    }

    #[inline]
    fn read_all(&self, fields: &mut Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>) -> ffi::Py_ssize_t {
        let base = fields.len();
        match ValuesFields::read_all(self, fields) {
            // At most the 30 entries of a shared key table.
            Ok(count) => count as ffi::Py_ssize_t,
            Err(Changed) => {
                fields.truncate(base);
                each_next_field(self, fields)
            }
        }
    }
}

/// The fields of a plain object (`Encoder::object_state`).
pub(crate) enum ObjectFields<'a, 'py> {
    Dict(Bound<'py, PyDict>),
    /// Kept inline by CPython 3.11, read without the dict it would make to give them.
    Values(ValuesFields<'a, 'py, OwnArray>),
    /// Kept in the values array of the dict CPython 3.11 made, read without a reference to it.
    MadeValues(ValuesFields<'a, 'py, MadeDict>),
    Slots(SlotFields<'py>),
}

impl<'py> FieldSource<'py> for ObjectFields<'_, 'py> {
    fn py(&self) -> Python<'py> {
        match self {
            ObjectFields::Dict(dict) => FieldSource::py(dict),
            ObjectFields::Values(values) => FieldSource::py(values),
            ObjectFields::MadeValues(values) => FieldSource::py(values),
            ObjectFields::Slots(slots) => slots.py(),
        }
    }

    fn count(&self) -> usize {
        match self {
            ObjectFields::Dict(dict) => dict.len(),
            ObjectFields::Values(values) => FieldSource::count(values),
            ObjectFields::MadeValues(values) => FieldSource::count(values),
            ObjectFields::Slots(slots) => slots.count(),
        }
    }

    fn next_field(&self, position: &mut ffi::Py_ssize_t) -> Option<(*mut ffi::PyObject, *mut ffi::PyObject)> {
        match self {
            ObjectFields::Dict(dict) => dict.next_field(position),
            ObjectFields::Values(values) => values.next_field(position),
            ObjectFields::MadeValues(values) => values.next_field(position),
            ObjectFields::Slots(slots) => slots.next_field(position),
        }
    }

    fn to_dict(&self) -> PyResult<Bound<'py, PyDict>> {
        match self {
            ObjectFields::Dict(dict) => Ok(dict.clone()),
            ObjectFields::Values(values) => values.to_dict(),
            ObjectFields::MadeValues(values) => values.to_dict(),
            ObjectFields::Slots(slots) => slots.to_dict(),
        }
    }

    fn read_all(&self, fields: &mut Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>) -> ffi::Py_ssize_t {
        match self {
            ObjectFields::Dict(dict) => dict.read_all(fields),
            ObjectFields::Values(values) => FieldSource::read_all(values, fields),
            ObjectFields::MadeValues(values) => FieldSource::read_all(values, fields),
            ObjectFields::Slots(slots) => slots.read_all(fields),
        }
    }
}

/// The fields of the object being written, read once (`Encoder::hold`): `len` entries of
/// `Encoder::held` from `base`, and the position of the field source after the last of them.
#[derive(Clone, Copy)]
struct Held {
    base: usize,
    len: usize,
    after_last: ffi::Py_ssize_t,
}

pub(crate) enum Failure {
    Python(PyErr),
    /// An unsupported value: its path (innermost segment first) and the reason.
    Unsupported { path: Vec<String>, reason: String },
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Failure::Python(e)
    }
}

type Step = Result<(), Failure>;

fn at<T>(result: Result<T, Failure>, segment: impl FnOnce() -> String) -> Result<T, Failure> {
    result.map_err(|failure| match failure {
        Failure::Unsupported { mut path, reason } => {
            path.push(segment());
            Failure::Unsupported { path, reason }
        }
        other => other,
    })
}

pub struct Encoder<'s> {
    pub w: Writer,
    sink: &'s mut dyn Sink,
    memo: IntMap<usize, u64>,
    /// Keys added to `memo`, in order, so that a trial encoding can be undone.
    memo_log: Vec<usize>,
    next_memo: u64,
    /// The tuples and frozensets (and subclasses of them) whose items are being written,
    /// innermost last.
    unfinished: Vec<Unfinished>,
    /// Set for binary streams (standalone.rs), which hold values that records, archives and
    /// text documents refuse (`only_in_streams`): a tuple or frozenset met again inside its own
    /// items is written again there (see `Unfinished`), and a subclass of a scalar built-in is a
    /// SUBCLASS value of a scalar base (docs/STREAM.md section 5).
    pub stream_only_values: bool,
    /// Set for binary streams and text documents (standalone.rs), which hold an instance of a
    /// subclass of `bytearray` as a SUBCLASS of base BYTEARRAY (docs/STREAM.md section 5, a
    /// value of stream version 4 that text documents carry too). Records and archives refuse it:
    /// their released format versions have no such base (docs/FORMAT.md section 6.7).
    pub bytearray_subclasses: bool,
    /// How many values of stream version 4 the value being written holds (copies superseded
    /// with SUPERSEDED_TUPLE and SUPERSEDED_FROZENSET, SUBCLASS values of scalar and BYTEARRAY
    /// bases): only a stream with some needs version 4.
    pub version_4_values: usize,
    mutable: bool,
    /// Encoding a PersistentList/PersistentDict: its own top-level container (depth 0) is
    /// watched by its methods and does not make the state "mutable".
    tracks_own: bool,
    /// The value passed to `standalone`: the caller may hold it by a borrowed reference, so its
    /// reference count says nothing about sharing (see `is_unshared`).
    root: usize,
    /// The item of a tuple or frozenset being written in a stream, by address (0: none), which
    /// `is_unshared` takes for shared: a copy of the tuple may meet it again (`immutable_items`).
    immutable_item: usize,
    /// How each class seen so far is written, keyed by the class object's address (see `Kind`).
    kinds: IntMap<usize, Kind>,
    /// Keeps the classes of `kinds` alive, so that their addresses cannot be reused.
    kind_classes: Vec<Py<PyType>>,
    /// For each `Kind::Object` class (indexed by `Kind::Object`'s number), the descriptor its
    /// last object was written with and that object's field names.
    object_shapes: Vec<Option<LastShape>>,
    /// For each `Kind::Object` class, its slots if it has any (slots.rs), indexed like
    /// `object_shapes`.
    object_layouts: Vec<Option<Arc<SlotLayout>>>,
    /// Set for streams of version 2 (standalone.rs): equal strings are written once. Records and
    /// archives never share strings.
    pub strings: Option<StringTable>,
    /// The lists of this value whose OBJECT_LIST was abandoned after some of its items were
    /// written (`object_list`), keyed by address and held so that the address is not reused:
    /// met again (inside another abandoned list, which is written anew), they are written as
    /// LISTs at once. Each list is thus abandoned once, which keeps the work linear in the
    /// nesting depth instead of exponential.
    mixed_lists: IntMap<usize, Py<PyList>>,
    /// The names and values of the fields of the objects being written, innermost last, each a
    /// new reference until the object is written (`Encoder::with_fields`). An object's fields
    /// are read from its dict or slots once, then matched with its class's last descriptor,
    /// tested against the field kinds and written from here: three walks of the dict before.
    held: Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>,
}

/// Where an encoding was, to go back to when an attempt is abandoned (`Encoder::rewind`).
struct Mark {
    len: usize,
    next_memo: u64,
    memo_logged: usize,
    mutable: bool,
    strings: Option<StringsMark>,
    version_4_values: usize,
}

/// A tuple or frozenset (or a subclass of one) whose items are being written. A reader builds it
/// only once its items are read (docs/FORMAT.md section 7), so its memo slot cannot be referred
/// to from inside them. Met there again (through a mutable container), it is written again in
/// full, in a slot of its own: that copy's items reach the containers on the cycle as
/// back-references, so it finishes first, and the copies around it are then superseded by it
/// (docs/STREAM.md section 5), as pickle discards the outer copy of a recursive tuple.
struct Unfinished {
    object: usize,
    /// The memo slot of the first copy of `object` whose items were all written, once one is:
    /// what `object` is written as from then on, while this copy is still unfinished.
    first_finished: Option<u64>,
}

/// The built-in types other than those `Encoder::value` tests first, each written by a tag of
/// its own (`Kind::Builtin`).
#[derive(Clone, Copy)]
pub(crate) enum Builtin {
    DateTime,
    Date,
    Time,
    Delta,
    Bytes,
    ByteArray,
    Set,
    FrozenSet,
    Complex,
}

/// How the values of one class (other than the builtin types `Encoder::value` tests first) are
/// written. It depends on the class only, so it is decided once per class and encoder instead
/// of by a chain of type checks and attribute lookups per value.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// One of the built-in types `Encoder::value` does not test first (exact types).
    Builtin(Builtin),
    Persistent,
    Decimal,
    Uuid,
    Broken,
    Enum,
    /// A Python subclass of list, dict, tuple, set, frozenset or bytearray, or of a scalar built-in
    /// (`SCALAR_BASES`), with the tag of its base (see `subclass_bases`).
    Subclass(u8),
    /// An OrderedDict, defaultdict or deque, or an instance of a Python subclass of one: a
    /// SUBCLASS with its state (known_containers.rs).
    Known(KnownContainer),
    /// A plain instance of a Python class (with a `__dict__`, slots or both), written by value
    /// as an OBJECT; the number of the class's entry in `Encoder::object_shapes`.
    Object(usize),
    Unsupported,
}

impl<'s> Encoder<'s> {
    pub fn new(sink: &'s mut dyn Sink) -> Self {
        Encoder {
            w: Writer::new(),
            sink,
            memo: IntMap::default(),
            memo_log: Vec::new(),
            next_memo: 0,
            unfinished: Vec::new(),
            stream_only_values: false,
            bytearray_subclasses: false,
            version_4_values: 0,
            mutable: false,
            tracks_own: false,
            root: 0,
            immutable_item: 0,
            kinds: IntMap::default(),
            kind_classes: Vec::new(),
            object_shapes: Vec::new(),
            object_layouts: Vec::new(),
            strings: None,
            mixed_lists: IntMap::default(),
            held: Vec::new(),
        }
    }

    /// Encodes the record of persistent `obj` with transaction id `tid`. Returns the record,
    /// the offset where its state starts, and whether the state holds mutable containers.
    /// `shape`, when given, is the descriptor the sink already chose for `obj` in this commit.
    pub fn record(&mut self, obj: &Bound<'_, PyAny>, tid: u64, shape: Option<ClassShape>) -> PyResult<(Vec<u8>, usize, bool)> {
        self.w.buf.clear();
        self.memo.clear();
        self.memo_log.clear();
        self.next_memo = 0;
        self.mutable = false;
        self.mixed_lists.clear();
        let dict = stored_state(obj)?;
        let shape = match shape {
            Some(shape) => shape,
            None => self.sink.descriptor(&obj.get_type(), &dict)?,
        };
        self.tracks_own = shape.tracks_own;
        RecordHeader { flags: 0, descriptor: shape.descriptor, tid }.write(&mut self.w);
        let state_start = self.w.buf.len();
        let type_name = || type_name_of(&obj.get_type()).unwrap_or_else(|_| "?".to_owned());
        each_item(&dict, |key, value| self.value(&value, 0).map_err(|f| into_pyerr(f, &format!("{}.{}", type_name(), key))))??;
        self.tracks_own = false;
        if self.mutable {
            self.w.buf[0] |= FLAG_MUTABLE_STATE;
        }
        Ok((std::mem::take(&mut self.w.buf), state_start, self.mutable))
    }

    /// Encodes one standalone value with its own memo (query operands, streams, each value of
    /// an archive). The encoder can be reused for the next value.
    pub fn standalone(&mut self, value: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
        self.w.buf.clear();
        self.memo.clear();
        self.memo_log.clear();
        self.next_memo = 0;
        self.version_4_values = 0;
        self.mixed_lists.clear();
        if let Some(strings) = &mut self.strings {
            strings.clear();
        }
        self.root = value.as_ptr() as usize;
        let result = self.value(value, 0).map_err(|f| into_pyerr(f, "value"));
        self.root = 0;
        result?;
        if let Some(strings) = &mut self.strings {
            strings.finish(&mut self.w.buf);
        }
        Ok(std::mem::take(&mut self.w.buf))
    }

    /// Whether `value` cannot be met again in the graph being encoded, so that it needs no entry
    /// in the identity map (a hash-map insert per container and object otherwise).
    ///
    /// Every value but the root reaches `value` as an owned reference taken from the container,
    /// instance dict or set it was read from (pyo3's iterators and `builtin_iter` return new
    /// references; copies such as `stored_state` or a dict subclass's `plain` add more). So a
    /// reference count of 2 means: one reference from the container being encoded, one held by
    /// the encoder, and no other anywhere in the process: no other container, attribute or
    /// variable can lead to it again, and it cannot be on a cycle. Extra references only make
    /// the test fail, which keeps identity tracking; the root is excluded because the caller may
    /// hold it by a borrowed reference. The only Python code that runs while a graph is encoded
    /// and can add references to objects of it is the loading of a ghost, which can only add
    /// references to persistent objects: those are always tracked (`persistent_by_value`). On
    /// the free-threaded build reference counts are split between threads and are not read.
    fn is_unshared(&mut self, value: &Bound<'_, PyAny>) -> bool {
        value.as_ptr() as usize != self.root && value.as_ptr() as usize != self.immutable_item && self.held_alone(value)
    }

    /// Whether nothing but the container `value` was read from and the encoder holds it: the
    /// reference count test of `is_unshared`, without its exceptions for the root and the items
    /// of tuples.
    fn held_alone(&self, value: &Bound<'_, PyAny>) -> bool {
        // SAFETY: `value` is a live object; only its reference count is read.
        let references = unsafe { ffi::Py_REFCNT(value.as_ptr()) };
        references <= 2 && !pytypes::FREE_THREADED
    }

    /// The memo slot of `value` if it was written before; otherwise it takes the next slot.
    /// `may_be_unshared`: whether `is_unshared` may spare the identity-map entry.
    fn memo_slot(&mut self, value: &Bound<'_, PyAny>, may_be_unshared: bool) -> Option<u64> {
        if may_be_unshared && self.is_unshared(value) {
            // It still takes its slot: the reader numbers every memo-taking tag.
            self.next_memo += 1;
            return None;
        }
        let key = value.as_ptr() as usize;
        if let Some(&index) = self.memo.get(&key) {
            return Some(index);
        }
        self.memo.insert(key, self.next_memo);
        self.memo_log.push(key);
        self.next_memo += 1;
        None
    }

    /// Writes a BACKREF if `value` was written before (true), else gives it its memo slot.
    fn backref_or_slot(&mut self, value: &Bound<'_, PyAny>) -> Result<bool, Failure> {
        self.backref_or_slot_of(value, true)
    }

    /// A tuple or frozenset met again inside its own items takes a new slot and is written
    /// again there (false; see `Unfinished`), or is refused where copies cannot be superseded.
    fn backref_or_slot_of(&mut self, value: &Bound<'_, PyAny>, may_be_unshared: bool) -> Result<bool, Failure> {
        let Some(index) = self.memo_slot(value, may_be_unshared) else { return Ok(false) };
        let key = value.as_ptr() as usize;
        let index = match self.unfinished.iter().rfind(|unfinished| unfinished.object == key) {
            None => index,
            Some(Unfinished { first_finished: Some(copy), .. }) => *copy,
            Some(_) if self.stream_only_values => {
                self.next_memo += 1;
                return Ok(false);
            }
            Some(_) => return Err(only_in_streams("a tuple or frozenset that contains itself (through a mutable container)")),
        };
        self.w.u8(tag::BACKREF);
        self.w.varint(index);
        Ok(true)
    }

    /// Writes the items of tuple or frozenset `v` (or of a subclass of one), whose memo slot
    /// `slot` was just taken and whose TUPLE or FROZENSET tag (or SUBCLASS base) is at `tag_at`.
    /// If a copy of `v` written inside them finished first, this copy is superseded by it: its
    /// tag becomes SUPERSEDED_TUPLE or SUPERSEDED_FROZENSET (of the same length, so that no
    /// position written since moves) and that copy's slot follows the items (docs/STREAM.md
    /// section 5).
    fn immutable_items<'py>(
        &mut self,
        v: &Bound<'py, PyAny>,
        (slot, tag_at): (u64, usize),
        len: usize,
        items: impl Iterator<Item = Bound<'py, PyAny>>,
        depth: usize,
    ) -> Step {
        self.unfinished.push(Unfinished { object: v.as_ptr() as usize, first_finished: None });
        // A copy of `v` would write these items again: in a stream, where copies are written,
        // each is kept out of `is_unshared`'s shortcut while it is written (`immutable_item`), so
        // that a container among them gets its identity-map entry and the copy refers back to
        // it instead of writing it (and what it holds) a second time.
        let marks_items = self.stream_only_values;
        let outer_item = self.immutable_item;
        self.w.varint(len as u64);
        let written = self.item_values_each(len, items, depth, |this, item| {
            if marks_items {
                this.immutable_item = item.as_ptr() as usize;
            }
        });
        self.immutable_item = outer_item;
        let Unfinished { object, first_finished } = self.unfinished.pop().expect("pushed above");
        written?;
        match first_finished {
            Some(copy) => {
                self.w.buf[tag_at] = tag::superseded(self.w.buf[tag_at]);
                self.w.varint(copy);
                self.version_4_values += 1;
            }
            None => {
                for outer in self.unfinished.iter_mut().filter(|outer| outer.object == object) {
                    outer.first_finished = Some(slot);
                }
            }
        }
        Ok(())
    }

    fn value(&mut self, v: &Bound<'_, PyAny>, depth: usize) -> Step {
        if depth > MAX_DEPTH {
            return Err(Failure::Unsupported { path: vec![], reason: format!("values nested deeper than {MAX_DEPTH} levels") });
        }
        // The most frequent types first, each an exact type-pointer comparison by the C API's
        // checks (see `has_kind`: a failed `cast_exact` writes to the type object twice).
        let ptr = v.as_ptr();
        let w = &mut self.w;
        // SAFETY: `ptr` is a live object; each unchecked cast follows the check of its type.
        unsafe {
            if ptr == ffi::Py_None() {
                w.u8(tag::NONE);
                return Ok(());
            } else if ffi::PyUnicode_CheckExact(ptr) != 0 {
                return self.string(v.cast_unchecked());
            } else if ffi::PyLong_CheckExact(ptr) != 0 {
                return self.int(v.cast_unchecked());
            } else if ffi::PyFloat_CheckExact(ptr) != 0 {
                w.u8(tag::FLOAT);
                w.f64(ffi::PyFloat_AS_DOUBLE(ptr));
                return Ok(());
            } else if ptr == ffi::Py_True() || ptr == ffi::Py_False() {
                w.u8(if ptr == ffi::Py_True() { tag::TRUE } else { tag::FALSE });
                return Ok(());
            } else if ffi::PyList_CheckExact(ptr) != 0 {
                return self.list(v.cast_unchecked(), depth);
            } else if ffi::PyDict_CheckExact(ptr) != 0 {
                return self.dict(v.cast_unchecked(), depth);
            } else if ffi::PyTuple_CheckExact(ptr) != 0 {
                return self.tuple(v.cast_unchecked(), depth);
            }
        }
        match self.kind_of(v)? {
            Kind::Object(class_index) => self.object(v, class_index, depth)?,
            Kind::Persistent if self.sink.persistent_by_value() => self.persistent_by_value(v, depth)?,
            Kind::Persistent => {
                let oid = self.sink.reference(v)?;
                self.w.reference(oid_class(oid), oid_seq(oid));
            }
            Kind::Builtin(builtin) => self.builtin(v, builtin, depth)?,
            Kind::Subclass(base) => self.subclass(v, base, depth)?,
            Kind::Known(known) => self.known_container(v, known, depth)?,
            Kind::Decimal => {
                let text: String = v.str()?.extract()?;
                self.w.u8(tag::DECIMAL);
                self.w.length_prefixed(text.as_bytes());
            }
            Kind::Uuid => {
                let bytes = v.getattr(crate::allocation::interned!(v.py(), "bytes")?)?;
                self.w.u8(tag::UUID);
                self.w.bytes(bytes.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes());
            }
            Kind::Broken => self.broken_object(v, depth)?,
            Kind::Enum => self.enum_member(v)?,
            Kind::Unsupported => return Err(unsupported_type(&v.get_type())),
        }
        Ok(())
    }

    /// How values of the class of `v` are written, decided on the first value of the class.
    fn kind_of(&mut self, v: &Bound<'_, PyAny>) -> PyResult<Kind> {
        // The class by address: a new reference to it would cost two writes to a shared line.
        let key = v.get_type_ptr() as usize;
        if let Some(&kind) = self.kinds.get(&key) {
            return Ok(kind);
        }
        let class = v.get_type();
        let class = &class;
        let kind = classify(class, self.object_shapes.len())?;
        if let Kind::Object(_) = kind {
            self.object_shapes.push(None);
            self.object_layouts.push(crate::slots::layout_of(class)?);
        }
        self.kinds.insert(key, kind);
        self.kind_classes.push(class.clone().unbind());
        Ok(kind)
    }

    /// A value of `builtin`, the exact type of `v` (`Kind::Builtin`): one test of the class's
    /// kind, instead of a failed cast per type tested before it.
    fn builtin(&mut self, v: &Bound<'_, PyAny>, builtin: Builtin, depth: usize) -> Step {
        match builtin {
            Builtin::DateTime => {
                // SAFETY: `builtin` is the exact type of `v` (`kind_of`).
                let dt = unsafe { v.cast_unchecked::<PyDateTime>() };
                let days = days_from_civil(i64::from(dt.get_year()), u32::from(dt.get_month()), u32::from(dt.get_day()));
                let micros = days * MICROS_PER_DAY + time_of_day_micros(dt.get_hour(), dt.get_minute(), dt.get_second(), dt.get_microsecond());
                let tz = tz_info(dt.get_tzinfo())?;
                self.w.datetime(micros, &tz, dt.get_fold());
            }
            Builtin::Date => {
                // SAFETY: `builtin` is the exact type of `v` (`kind_of`).
                let d = unsafe { v.cast_unchecked::<PyDate>() };
                self.w.u8(tag::DATE);
                self.w.zigzag(days_from_civil(i64::from(d.get_year()), u32::from(d.get_month()), u32::from(d.get_day())));
            }
            Builtin::Time => {
                // SAFETY: `builtin` is the exact type of `v` (`kind_of`).
                let t = unsafe { v.cast_unchecked::<PyTime>() };
                let micros = time_of_day_micros(t.get_hour(), t.get_minute(), t.get_second(), t.get_microsecond());
                let tz = tz_info(t.get_tzinfo())?;
                self.w.time(micros as u64, &tz, t.get_fold());
            }
            Builtin::Delta => {
                // SAFETY: `builtin` is the exact type of `v` (`kind_of`).
                let td = unsafe { v.cast_unchecked::<PyDelta>() };
                self.w.u8(tag::TIMEDELTA);
                self.w.zigzag(i64::from(td.get_days()));
                self.w.varint(td.get_seconds() as u64);
                self.w.varint(td.get_microseconds() as u64);
            }
            Builtin::Bytes => {
                self.w.u8(tag::BYTES);
                // SAFETY: `builtin` is the exact type of `v` (`kind_of`).
                self.w.length_prefixed(unsafe { v.cast_unchecked::<PyBytes>() }.as_bytes());
            }
            Builtin::ByteArray => {
                self.mutable = true;
                if !self.backref_or_slot(v)? {
                    self.w.u8(tag::BYTEARRAY);
                    // SAFETY: `builtin` is the exact type of `v` (`kind_of`).
                    self.bytearray_blob(unsafe { v.cast_unchecked::<PyByteArray>() });
                }
            }
            Builtin::Set => {
                self.mutable = true;
                if !self.backref_or_slot(v)? {
                    self.w.u8(tag::SET);
                    // SAFETY: `builtin` is the exact type of `v` (`kind_of`).
                    let items = self.canonical_order(set_items(unsafe { v.cast_unchecked::<PySet>() })?, depth)?;
                    self.items(items.len(), items.into_iter(), depth)?;
                }
            }
            Builtin::FrozenSet => {
                if !self.backref_or_slot(v)? {
                    let copy = (self.next_memo - 1, self.w.buf.len());
                    self.w.u8(tag::FROZENSET);
                    // SAFETY: `builtin` is the exact type of `v` (`kind_of`).
                    let items = self.canonical_order(set_items(unsafe { v.cast_unchecked::<PyFrozenSet>() })?, depth)?;
                    self.immutable_items(v, copy, items.len(), items.into_iter(), depth)?;
                }
            }
            Builtin::Complex => {
                // SAFETY: `builtin` is the exact type of `v` (`kind_of`).
                let c = unsafe { v.cast_unchecked::<PyComplex>() };
                self.w.u8(tag::COMPLEX);
                self.w.f64(c.real());
                self.w.f64(c.imag());
            }
        }
        Ok(())
    }

    /// The bytes of `bytearray` (or of an instance of a subclass of it) as a blob, read from its
    /// buffer: no method of a subclass runs.
    fn bytearray_blob(&mut self, bytearray: &Bound<'_, PyByteArray>) {
        // SAFETY: the buffer is only copied into the writer, which runs no Python code that could
        // resize it meanwhile.
        self.w.length_prefixed(unsafe { bytearray.as_bytes() });
    }

    /// Set elements sorted by their encoding: a set rebuilt from its record may iterate in
    /// another order, and an unchanged set must re-encode to the same bytes (commit-time change
    /// detection compares bytes). Each element is encoded once on trial, then the trial is undone.
    fn canonical_order<'py>(&mut self, items: Vec<Bound<'py, PyAny>>, depth: usize) -> Result<Vec<Bound<'py, PyAny>>, Failure> {
        if items.len() < 2 {
            return Ok(items);
        }
        let mut keyed = Vec::with_capacity(items.len());
        // Sort keys are the elements' plain encodings: sharing strings with what was written
        // before would make them depend on the context.
        let strings = self.strings.take();
        let trials = self.sort_keys(items, depth, &mut keyed);
        self.strings = strings;
        trials?;
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(keyed.into_iter().map(|(_, item)| item).collect())
    }

    /// Each of `items` with its encoding, which is undone.
    fn sort_keys<'py>(&mut self, items: Vec<Bound<'py, PyAny>>, depth: usize, keyed: &mut Vec<(Vec<u8>, Bound<'py, PyAny>)>) -> Step {
        for item in items {
            let mark = self.mark();
            let result = self.value(&item, depth + 1);
            let key = self.w.buf[mark.len..].to_vec();
            self.rewind(mark);
            result?;
            keyed.push((key, item));
        }
        Ok(())
    }

    /// Undoes what a trial encoding did to the copies of unfinished values (`Unfinished`): the
    /// copies from slot `next_memo` on were not written.
    fn forget_copies(&mut self, next_memo: u64) {
        for unfinished in &mut self.unfinished {
            if unfinished.first_finished.is_some_and(|copy| copy >= next_memo) {
                unfinished.first_finished = None;
            }
        }
    }

    /// The state that `rewind` goes back to.
    fn mark(&self) -> Mark {
        Mark {
            len: self.w.buf.len(),
            next_memo: self.next_memo,
            memo_logged: self.memo_log.len(),
            mutable: self.mutable,
            strings: self.strings.as_ref().map(StringTable::mark),
            version_4_values: self.version_4_values,
        }
    }

    /// Undoes everything written since `mark` was taken: its bytes, the memo slots and
    /// identity-map entries it took (the reader numbers the memo-taking tags actually written),
    /// its strings' slots, the copies of unfinished values it wrote and the version 4 values it
    /// counted. Descriptors the sink gave out meanwhile stay: whatever is written instead asks for
    /// them again, in the same order (`object_list`).
    fn rewind(&mut self, mark: Mark) {
        self.w.buf.truncate(mark.len);
        for key in self.memo_log.drain(mark.memo_logged..) {
            self.memo.remove(&key);
        }
        self.next_memo = mark.next_memo;
        self.mutable = mark.mutable;
        self.version_4_values = mark.version_4_values;
        self.forget_copies(mark.next_memo);
        if let (Some(strings), Some(strings_mark)) = (&mut self.strings, mark.strings) {
            strings.rewind(strings_mark);
        }
    }

    fn string(&mut self, s: &Bound<'_, PyString>) -> Step {
        if !self.shared_string(s, StringForm::Tagged, None)? {
            // Lone surrogates are not UTF-8.
            let bytes = generalized_utf8(s)?;
            self.w.u8(tag::STR_SURROGATES);
            self.w.length_prefixed(bytes.as_bytes());
        }
        Ok(())
    }

    /// Writes the string `s` in `form`, through the stream's string table if the stream shares
    /// strings (with the texts `field` wrote recently, if it is the value of an object's typed
    /// field). False, with nothing written, when `s` is not UTF-8 (lone surrogates).
    fn shared_string(&mut self, s: &Bound<'_, PyString>, form: StringForm, field: Option<ObjectField>) -> PyResult<bool> {
        // A string object that only its container and the encoder hold (the reference count
        // test of `is_unshared`) was not met before, as the string table would hold it too, and
        // cannot be met again: it is neither looked up nor remembered by address. Most strings
        // of records are such (made per record), and remembering each pushed a string that
        // does repeat out of the table and released that string's reference, a write to memory
        // long out of the cache. Either way the bytes are the same: `finish` finds the repeats
        // by content that the address missed.
        let may_repeat = !self.held_alone(s.as_any());
        if let Some(strings) = self.strings.as_mut().filter(|_| may_repeat) {
            // An object met again is found by address, before its text is read.
            if let Some(slot) = strings.reference_slot(s) {
                strings.write_references(&mut self.w.buf, form, slot, 1);
                return Ok(true);
            }
        }
        let Some(text) = utf8_text(s)? else { return Ok(false) };
        match &mut self.strings {
            Some(strings) => strings.write_new(&mut self.w.buf, form, s, text, field, may_repeat),
            None => form.write_new(&mut self.w.buf, text.as_bytes()),
        }
        Ok(true)
    }

    fn int(&mut self, i: &Bound<'_, PyInt>) -> Step {
        match i.extract::<i64>() {
            Ok(small) => self.w.int_i64(small),
            Err(_) => {
                // Minimal two's complement: n >= 0 needs bit_length(n) + 1 bits, n < 0 needs
                // bit_length(-n - 1) + 1 bits.
                let magnitude = if i.lt(0)? { i.add(1)?.neg()? } else { i.clone().into_any() };
                let py = i.py();
                let bits: usize = magnitude.call_method0(crate::allocation::interned!(py, "bit_length")?)?.extract()?;
                let length = crate::allocation::int(py, (bits / 8 + 1) as i64)?;
                // Made by calls that raise MemoryError where pyo3's conversions would panic.
                let kwargs = crate::allocation::dict(py)?;
                kwargs.set_item(crate::allocation::interned!(py, "signed")?, true)?;
                let bytes = i.call_method(crate::allocation::interned!(py, "to_bytes")?, (length, crate::allocation::interned!(py, "little")?), Some(&kwargs))?;
                self.w.bigint_le(bytes.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes());
            }
        }
        Ok(())
    }

    fn list(&mut self, list: &Bound<'_, PyList>, depth: usize) -> Step {
        self.mutable |= !(self.tracks_own && depth == 0);
        if self.backref_or_slot(list.as_any())? {
            return Ok(());
        }
        let objects_head = |w: &mut Writer, count: u64| {
            w.u8(tag::OBJECT_LIST);
            w.varint(count);
        };
        if self.object_list(list, depth, objects_head)? {
            return Ok(());
        }
        self.w.u8(tag::LIST);
        let len = list.len();
        self.w.varint(len as u64);
        self.list_values(list, len, depth)
    }

    /// Writes `list`, whose memo slot is taken, as a list of objects (docs/STREAM.md section 5:
    /// OBJECT_LIST, or the list head of a typed field) if its items qualify: at least one, all
    /// plain instances of one class with one descriptor whose field kinds they fit, none met
    /// elsewhere in the graph (an OBJECT_LIST has no place for a back-reference). `head` writes
    /// the form's head for that many objects. False, with nothing written, if they do not.
    ///
    /// One pass: each item is checked just before its body is written, while its dict and values
    /// are in the cache, instead of checking every item first and walking the list again to
    /// write it. An item that does not qualify makes the list abandoned: everything written for
    /// the items before it is undone (`rewind`) and the caller writes the list in its generic
    /// form, which writes those items again (their objects, typed one by one). The list is then
    /// remembered (`mixed_lists`), so that it is abandoned once however often it is written.
    fn object_list(&mut self, list: &Bound<'_, PyList>, depth: usize, head: impl Fn(&mut Writer, u64)) -> Result<bool, Failure> {
        // The first item is not held while the items are tested: its reference count must say
        // whether something else holds it (`is_unshared`).
        if list.is_empty() || depth >= MAX_DEPTH || self.mixed_lists.contains_key(&(list.as_ptr() as usize)) {
            return Ok(false);
        }
        let (class, kind) = {
            let first = list.get_item(0)?;
            // `kinds` keeps the class alive, so its address stays its own while compared.
            (first.get_type_ptr(), self.kind_of(&first)?)
        };
        let Kind::Object(class_index) = kind else { return Ok(false) };
        let count = list.len();
        let mark = self.mark();
        let mut typed: Option<(u32, Rc<[FieldKind]>)> = None;
        let mut written = 0;
        for (index, item) in list.iter().enumerate() {
            let len = list.len();
            // SAFETY: every index below the list's current length holds a live item.
            unsafe { prefetch::ahead(|k| ffi::PyList_GET_ITEM(list.as_ptr(), k as ffi::Py_ssize_t), len, index) };
            if item.get_type_ptr() != class || !self.is_unshared(&item) {
                return Ok(self.abandon(list, mark, written));
            }
            let fields = self.object_state(&item, class_index)?;
            let fitted = self.with_fields(&fields, |this, held| -> Result<bool, Failure> {
                let descriptor = this.shape_of(&item, class_index, &fields, held)?.descriptor;
                let kinds = match &typed {
                    Some((first, kinds)) => (*first == descriptor).then(|| Rc::clone(kinds)),
                    // A body of no fields is no bytes: the count could not be checked against
                    // the input when read (the length rule), so such lists stay LISTs.
                    None => this.sink.field_kinds(descriptor).filter(|kinds| !kinds.is_empty()),
                };
                let Some(kinds) = kinds else { return Ok(false) };
                if !this.fits_kinds(fields.py(), held, &kinds)? {
                    return Ok(false);
                }
                if typed.is_none() {
                    head(&mut this.w, count as u64);
                    this.w.varint(u64::from(descriptor));
                    typed = Some((descriptor, Rc::clone(&kinds)));
                }
                // It takes its memo slot, without an identity-map entry: nothing else holds it.
                this.next_memo += 1;
                at(this.typed_fields(descriptor, &fields, held, &kinds, depth + 1), || format!("[{written}]"))?;
                Ok(true)
            })?;
            if !fitted {
                return Ok(self.abandon(list, mark, written));
            }
            written += 1;
        }
        if written != count {
            return Err(list_changed_size());
        }
        Ok(true)
    }

    /// `object_list`'s way out when an item does not qualify, after `written` items: false.
    fn abandon(&mut self, list: &Bound<'_, PyList>, mark: Mark, written: usize) -> bool {
        self.rewind(mark);
        if written > 0 {
            self.mixed_lists.insert(list.as_ptr() as usize, list.clone().unbind());
        }
        false
    }

    /// The fields of an object, `held`, as an OBJECT, or as a TYPED_OBJECT when its descriptor
    /// has field kinds that its values fit.
    fn object_fields<'py>(&mut self, descriptor: u32, fields: &impl FieldSource<'py>, held: Held, depth: usize) -> Step {
        match self.sink.field_kinds(descriptor) {
            Some(kinds) if self.fits_kinds(fields.py(), held, &kinds)? => {
                self.w.u8(tag::TYPED_OBJECT);
                self.w.varint(u64::from(descriptor));
                self.typed_fields(descriptor, fields, held, &kinds, depth)
            }
            _ => {
                self.w.u8(tag::OBJECT);
                self.w.varint(u64::from(descriptor));
                self.held_fields(fields, held, depth)
            }
        }
    }

    /// The fields `held` of a TYPED_OBJECT of `descriptor`, whose values fit `kinds`
    /// (`fits_kinds`), each in the form of its kind.
    fn typed_fields<'py>(&mut self, descriptor: u32, fields: &impl FieldSource<'py>, held: Held, kinds: &[FieldKind], depth: usize) -> Step {
        self.each_held(fields, held, |this, index, key, value| {
            let field = ObjectField { descriptor, index: index as u32 };
            at(this.typed_value(value, kinds[index], field, depth + 1), || format!(".{key}"))
        })
    }

    /// Reads the fields of `fields` once, holding a reference to each name and value, and
    /// calls `body` with them; the references are dropped when it returns. The values are then
    /// the same objects however Python code run while they are written changes the object:
    /// `each_held` refuses an object whose attributes were added or removed meanwhile.
    fn with_fields<'py, R>(&mut self, fields: &impl FieldSource<'py>, body: impl FnOnce(&mut Self, Held) -> R) -> R {
        let base = self.held.len();
        let position = fields.read_all(&mut self.held);
        for &(name, value) in &self.held[base..] {
            // SAFETY: borrowed references to live objects, made owned before any Python code
            // runs (reading the fields runs none); dropped below.
            unsafe {
                ffi::Py_INCREF(name);
                ffi::Py_INCREF(value);
            }
        }
        let held = Held { base, len: self.held.len() - base, after_last: position };
        let result = body(self, held);
        for (name, value) in self.held.drain(base..) {
            // SAFETY: the references taken above, dropped once. Dropping one can run Python code
            // (a destructor), which cannot reach `self.held`.
            unsafe {
                ffi::Py_DECREF(name);
                ffi::Py_DECREF(value);
            }
        }
        result
    }

    /// The name and value of field `index` of `held`, borrowed from the references it holds:
    /// not a new reference, which would make an unshared value look shared (`is_unshared`).
    fn held_field<'a, 'py>(&self, py: Python<'py>, held: Held, index: usize) -> (Borrowed<'a, 'py, PyAny>, Borrowed<'a, 'py, PyAny>) {
        let (name, value) = self.held[held.base + index];
        // SAFETY: `with_fields` holds a reference to both while `held` is in use, which is
        // within the call that `'a` lives in.
        unsafe { (Borrowed::from_ptr(py, name), Borrowed::from_ptr(py, value)) }
    }

    /// Whether every value of `held` has the kind of its field, so that the object can be
    /// written as a TYPED_OBJECT of these `kinds`.
    fn fits_kinds(&self, py: Python<'_>, held: Held, kinds: &[FieldKind]) -> PyResult<bool> {
        if held.len != kinds.len() {
            return Ok(false);
        }
        for (index, &kind) in kinds.iter().enumerate() {
            if kind != FieldKind::Any && !has_kind(&self.held_field(py, held, index).1, kind)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Calls `write` with the index, name and value of each field of `held`, read from `fields`.
    /// Python code run while a value is written (an enum's `_name_`, a hash, the loading of a
    /// ghost) can change the object: one whose attributes were added or removed meanwhile is
    /// refused, its body having been written for the fields it had.
    fn each_held<'py>(
        &mut self,
        fields: &impl FieldSource<'py>,
        held: Held,
        mut write: impl FnMut(&mut Self, usize, &Bound<'py, PyAny>, &Bound<'py, PyAny>) -> Step,
    ) -> Step {
        let py = fields.py();
        for index in 0..held.len {
            let (name, value) = self.held_field(py, held, index);
            write(self, index, &name, &value)?;
        }
        let mut after_last = held.after_last;
        if fields.count() != held.len || fields.next_field(&mut after_last).is_some() {
            return Err(Failure::Unsupported { path: vec![], reason: "its attributes changed while it was being written".into() });
        }
        Ok(())
    }

    /// `v`, the value of `field`, in the form of its kind.
    fn typed_value(&mut self, v: &Bound<'_, PyAny>, kind: FieldKind, field: ObjectField, depth: usize) -> Step {
        if depth > MAX_DEPTH {
            return Err(Failure::Unsupported { path: vec![], reason: format!("values nested deeper than {MAX_DEPTH} levels") });
        }
        match kind {
            FieldKind::Any => self.value(v, depth)?,
            FieldKind::Int => self.w.zigzag(v.extract::<i64>()?),
            FieldKind::Float => self.w.f64(v.extract::<f64>()?),
            FieldKind::Str => {
                let s = v.cast::<PyString>().map_err(PyErr::from)?;
                // `fits_kinds` saw a UTF-8 str here, and the value is held (`with_fields`): this
                // only fails if a caller skipped the test.
                if !self.shared_string(s, StringForm::Typed, Some(field))? {
                    return Err(Failure::Unsupported { path: vec![], reason: "a string field changed while it was being written".into() });
                }
            }
            FieldKind::List => {
                let list = v.cast::<PyList>().map_err(PyErr::from)?;
                self.mutable = true;
                let objects_head = |w: &mut Writer, count: u64| w.varint(ListHead::Objects(count).encode());
                if let Some(slot) = self.memo_slot(v, true) {
                    self.w.varint(ListHead::Backref(slot).encode());
                } else if !self.object_list(list, depth, objects_head)? {
                    let len = list.len();
                    self.w.varint(ListHead::Items(len as u64).encode());
                    self.list_values(list, len, depth)?;
                }
            }
        }
        Ok(())
    }

    fn tuple(&mut self, t: &Bound<'_, PyTuple>, depth: usize) -> Step {
        if self.backref_or_slot(t.as_any())? {
            return Ok(());
        }
        let copy = (self.next_memo - 1, self.w.buf.len());
        self.w.u8(tag::TUPLE);
        self.immutable_items(t.as_any(), copy, t.len(), t.iter(), depth)
    }

    fn dict(&mut self, dict: &Bound<'_, PyDict>, depth: usize) -> Step {
        self.mutable |= !(self.tracks_own && depth == 0);
        if self.backref_or_slot(dict.as_any())? {
            return Ok(());
        }
        self.w.u8(tag::DICT);
        self.pairs(dict, depth)
    }

    fn items<'py>(&mut self, len: usize, items: impl Iterator<Item = Bound<'py, PyAny>>, depth: usize) -> Step {
        self.w.varint(len as u64);
        self.item_values(len, items, depth)
    }

    /// The `len` items of a container, after its count. A list can shrink while it is written
    /// (Python code run by the encoder, such as an enum's `_name_`, can remove items): fewer
    /// items than the count would make a stream that does not read back, so it is refused.
    fn item_values<'py>(&mut self, len: usize, items: impl Iterator<Item = Bound<'py, PyAny>>, depth: usize) -> Step {
        self.item_values_each(len, items, depth, |_, _| {})
    }

    /// `item_values`, calling `before` with each item before it is written.
    fn item_values_each<'py>(
        &mut self,
        len: usize,
        items: impl Iterator<Item = Bound<'py, PyAny>>,
        depth: usize,
        mut before: impl FnMut(&mut Self, &Bound<'py, PyAny>),
    ) -> Step {
        let mut written = 0;
        for item in items {
            before(self, &item);
            at(self.value(&item, depth + 1), || format!("[{written}]"))?;
            written += 1;
        }
        if written != len {
            return Err(list_changed_size());
        }
        Ok(())
    }

    /// The first `len` items of `list`, after its count, as `item_values` writes them, but with
    /// each run of the very same object that follows an item (`[0] * n`, one string object
    /// repeated: common in real data) found by comparing the pointers in the list's array and
    /// written at once (`Repeat`), instead of each item taken from the list and dispatched on its
    /// type again.
    fn list_values(&mut self, list: &Bound<'_, PyList>, len: usize, depth: usize) -> Step {
        let mut written = 0;
        let mut items = list.iter();
        while let Some(item) = items.next() {
            let start = self.w.buf.len();
            at(self.value(&item, depth + 1), || format!("[{written}]"))?;
            written += 1;
            // The pointer comparison first: most items are not followed by themselves, and
            // `repeat_of` looks a string up in the table of recent strings.
            let run = same_run(list, written, len, &item);
            if run == 0 {
                continue;
            }
            let Some(repeat) = self.repeat_of(&item) else { continue };
            match repeat {
                Repeat::Bytes => {
                    let item_len = self.w.buf.len() - start;
                    repeat_tail(&mut self.w.buf, item_len, run);
                }
                Repeat::Reference(slot) => {
                    let strings = self.strings.as_mut().expect("a reference is to a string of the table");
                    strings.write_references(&mut self.w.buf, StringForm::Tagged, slot, run);
                }
            }
            // The run's items are written: past them (the list cannot change meanwhile, as no
            // Python code ran since `same_run` saw them).
            items.nth(run - 1);
            written += run;
        }
        if written != len {
            return Err(list_changed_size());
        }
        Ok(())
    }

    /// How `item`, just written, is written again if it follows itself in a list; None: as any
    /// item (it takes a memo or string slot, or is a back-reference to one).
    fn repeat_of(&self, item: &Bound<'_, PyAny>) -> Option<Repeat> {
        let ptr = item.as_ptr();
        // SAFETY: `ptr` is a live object; only its type is read (see `has_kind`).
        if unsafe { ffi::PyUnicode_CheckExact(ptr) } != 0 {
            // SAFETY: checked just above.
            let s = unsafe { item.cast_unchecked::<PyString>() };
            return match &self.strings {
                // The next write of a string of the stream's table is a reference to its slot, if
                // shorter; otherwise it takes a slot of its own, and is written as usual.
                Some(strings) => strings.reference_slot(s).map(Repeat::Reference),
                None => Some(Repeat::Bytes),
            };
        }
        // The bytes of these depend on their value alone (no memo slot, no string slot).
        // SAFETY: as above.
        let stateless = unsafe {
            ptr == ffi::Py_None()
                || ffi::PyLong_CheckExact(ptr) != 0
                || ffi::PyFloat_CheckExact(ptr) != 0
                || ptr == ffi::Py_True()
                || ptr == ffi::Py_False()
        };
        stateless.then_some(Repeat::Bytes)
    }

    fn pairs(&mut self, dict: &Bound<'_, PyDict>, depth: usize) -> Step {
        self.w.varint(dict.len() as u64);
        each_item(dict, |key, value| {
            at(self.value(&key, depth + 1), || format!("<key {}>", short_repr(&key)))?;
            at(self.value(&value, depth + 1), || format!("[{}]", short_repr(&key)))
        })?
        .map_err(Failure::Python)
    }

    /// A BrokenObject, written back as it was read: same type name, same fields.
    fn broken_object(&mut self, v: &Bound<'_, PyAny>, depth: usize) -> Step {
        let type_name: String = v.getattr(crate::allocation::interned!(v.py(), "type_name")?)?.extract()?;
        let state = v.getattr(crate::allocation::interned!(v.py(), "state")?)?.cast_into::<PyDict>().map_err(PyErr::from)?;
        self.mutable = true;
        if self.backref_or_slot(v)? {
            return Ok(());
        }
        let shape = self.sink.descriptor_named(&type_name, &state)?;
        self.w.u8(tag::OBJECT);
        self.w.varint(u64::from(shape.descriptor));
        self.fields(&state, depth)
    }

    fn enum_member(&mut self, v: &Bound<'_, PyAny>) -> Step {
        let descriptor = self.sink.enum_descriptor(&v.get_type())?;
        // A composite Flag is named "A|B"; an empty Flag has no name and is written as "".
        let name: Option<String> = v.getattr(crate::allocation::interned!(v.py(), "_name_")?)?.extract()?;
        let name = name.unwrap_or_default();
        self.w.u8(tag::ENUM);
        self.w.varint(u64::from(descriptor));
        self.w.length_prefixed(name.as_bytes());
        Ok(())
    }

    fn object(&mut self, v: &Bound<'_, PyAny>, class_index: usize, depth: usize) -> Step {
        self.mutable = true;
        if self.backref_or_slot(v)? {
            return Ok(());
        }
        let fields = self.object_state(v, class_index)?;
        self.with_fields(&fields, |this, held| {
            let shape = this.shape_of(v, class_index, &fields, held)?;
            this.object_fields(shape.descriptor, &fields, held, depth)
        })
    }

    /// The fields of `v`, a plain object of the class numbered `class_index`: its inline values
    /// or its instance dict, or its slots (and dict) read in place if its class has slots.
    fn object_state<'a, 'py>(&self, v: &'a Bound<'py, PyAny>, class_index: usize) -> PyResult<ObjectFields<'a, 'py>> {
        Ok(match &self.object_layouts[class_index] {
            Some(layout) => ObjectFields::Slots(SlotFields::of(v, layout)?),
            None => match ValuesFields::<OwnArray>::of(v) {
                Some(values) => ObjectFields::Values(values),
                None => match ValuesFields::<MadeDict>::of(v) {
                    Some(values) => ObjectFields::MadeValues(values),
                    None => ObjectFields::Dict(object_dict(v)?),
                },
            },
        })
    }

    /// The shape the sink gives `v`, a plain object of the class numbered `class_index`, with
    /// `fields` (`held`): the last one of its class if they have the same name objects.
    fn shape_of<'py>(&mut self, v: &Bound<'py, PyAny>, class_index: usize, fields: &impl FieldSource<'py>, held: Held) -> PyResult<ClassShape> {
        let names = &self.held[held.base..held.base + held.len];
        if let Some(last) = self.object_shapes[class_index].as_ref().filter(|last| last.has_names(names)) {
            return Ok(last.shape);
        }
        let shape = self.sink.descriptor(&v.get_type(), &fields.to_dict()?)?;
        let names = &self.held[held.base..held.base + held.len];
        self.object_shapes[class_index] = Some(LastShape::new(fields.py(), names, shape));
        Ok(shape)
    }

    /// A persistent object written by value (standalone streams): an OBJECT of its stored
    /// state, with a descriptor that the sink marks as persistent. A ghost is loaded first.
    fn persistent_by_value(&mut self, v: &Bound<'_, PyAny>, depth: usize) -> Step {
        // Always in the identity map: loading a ghost met later can add references to this
        // object (from the connection's cache), so its reference count now proves nothing.
        if self.backref_or_slot_of(v, false)? {
            return Ok(());
        }
        if PersistentBase::of(v)?.state() == crate::persistent::GHOST {
            v.call_method0(crate::allocation::interned!(v.py(), "_p_activate")?)?;
        }
        let dict = stored_state(v)?;
        let shape = self.sink.descriptor(&v.get_type(), &dict)?;
        self.with_fields(&dict, |this, held| this.object_fields(shape.descriptor, &dict, held, depth))
    }

    /// The fields of `fields` as the values of an OBJECT (or a SUBCLASS).
    fn fields<'py>(&mut self, fields: &impl FieldSource<'py>, depth: usize) -> Step {
        self.with_fields(fields, |this, held| this.held_fields(fields, held, depth))
    }

    /// The fields `held`, read from `fields`, as the values of an OBJECT.
    fn held_fields<'py>(&mut self, fields: &impl FieldSource<'py>, held: Held, depth: usize) -> Step {
        self.each_held(fields, held, |this, _, key, value| at(this.value(value, depth + 1), || format!(".{key}")))
    }

    fn subclass(&mut self, v: &Bound<'_, PyAny>, base: u8, depth: usize) -> Step {
        if let Some(&(base_type, _, value_method)) = SCALAR_BASES.iter().find(|(_, scalar, _)| *scalar == base) {
            return self.scalar_subclass(v, &base_type(v.py()), value_method, depth);
        }
        if base == tag::BYTEARRAY && !self.bytearray_subclasses {
            let class = type_name_of(&v.get_type())?;
            return Err(only_in(
                &format!("a value of type {class}, a subclass of bytearray,"),
                "a binary stream or a text document (copal.dumps), not stored in a database or an archive",
            ));
        }
        if base != tag::TUPLE && base != tag::FROZENSET {
            self.mutable = true;
        }
        if self.backref_or_slot(v)? {
            return Ok(());
        }
        let fields = match crate::slots::layout_of(&v.get_type())? {
            Some(layout) => ObjectFields::Slots(SlotFields::of(v, &layout)?),
            None => ObjectFields::Dict(instance_dict(v)?),
        };
        let slot = self.next_memo - 1;
        let shape = self.sink.descriptor(&v.get_type(), &fields.to_dict()?)?;
        self.w.u8(tag::SUBCLASS);
        self.w.varint(u64::from(shape.descriptor));
        let base_at = self.w.buf.len();
        self.w.u8(base);
        if base == tag::DICT {
            // Read through dict's own methods: a subclass may override items() or __iter__.
            let pairs = pyo3::types::PyDict::type_object(v.py()).call_method1(crate::allocation::interned!(v.py(), "items")?, (v,))?;
            let plain = crate::allocation::dict(v.py())?;
            for pair in pairs.try_iter()? {
                let (k, val): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
                plain.set_item(k, val)?;
            }
            self.pairs(&plain, depth)?;
        } else if base == tag::BYTEARRAY {
            self.bytearray_blob(v.cast::<PyByteArray>().map_err(PyErr::from)?);
            self.version_4_values += 1;
        } else {
            let mut items: Vec<Bound<'_, PyAny>> = builtin_iter(v, base)?;
            if base == tag::SET || base == tag::FROZENSET {
                items = self.canonical_order(items, depth)?;
            }
            if base == tag::TUPLE || base == tag::FROZENSET {
                self.immutable_items(v, (slot, base_at), items.len(), items.into_iter(), depth)?;
            } else {
                self.items(items.len(), items.into_iter(), depth)?;
            }
        }
        self.fields(&fields, depth)
    }

    /// An instance of a known container of `collections` (known_containers.rs): a SUBCLASS of
    /// its base tag with its items in its own order, then its state and its own fields.
    fn known_container(&mut self, v: &Bound<'_, PyAny>, known: KnownContainer, depth: usize) -> Step {
        self.mutable = true;
        if self.backref_or_slot(v)? {
            return Ok(());
        }
        let class = v.get_type();
        let instance_fields = match crate::slots::layout_of(&class)? {
            Some(layout) => Some(SlotFields::of(v, &layout)?.to_dict()?),
            None if has_instance_dict(v) => Some(instance_dict(v)?),
            None => None,
        };
        let contents = known.contents(v, instance_fields)?;
        let shape = self.sink.descriptor(&class, &contents.fields)?;
        self.w.u8(tag::SUBCLASS);
        self.w.varint(u64::from(shape.descriptor));
        self.w.u8(known.base_tag());
        match contents.items {
            Items::Pairs(pairs) => self.pairs(&pairs, depth)?,
            Items::Values(values) => self.items(values.len(), values.into_iter(), depth)?,
        }
        self.fields(&contents.fields, depth)
    }

    /// An instance of a Python subclass of scalar built-in `base`: a SUBCLASS whose base is its
    /// value, written as a plain value of `base` is (docs/STREAM.md section 5). `value_method`
    /// is `base`'s own method that copies that value out of the instance.
    fn scalar_subclass(&mut self, v: &Bound<'_, PyAny>, base: &Bound<'_, PyType>, value_method: &str, depth: usize) -> Step {
        if !self.stream_only_values {
            let class = type_name_of(&v.get_type())?;
            return Err(only_in_streams(&format!("a value of type {class}, a subclass of {},", base.name()?)));
        }
        if self.backref_or_slot(v)? {
            return Ok(());
        }
        let dict = if has_instance_dict(v) { instance_dict(v)? } else { crate::allocation::dict(v.py())? };
        let shape = self.sink.descriptor(&v.get_type(), &dict)?;
        // Called on the base type, the method runs in C whatever the subclass overrides.
        let value = base.call_method1(crate::allocation::str(v.py(), value_method)?, (v,))?;
        self.w.u8(tag::SUBCLASS);
        self.w.varint(u64::from(shape.descriptor));
        // A base is no STR value of the stream: it takes no string slot and is never a STRREF.
        let strings = self.strings.take();
        let written = self.value(&value, depth);
        self.strings = strings;
        written?;
        self.version_4_values += 1;
        self.fields(&dict, depth)
    }
}

/// The descriptor the sink gave for the last object of a class, and the field names (the keys
/// of the object's dict, or its slots, in order) it was given for. The instances of a class usually share one
/// set of key objects (CPython's split dicts, interned attribute names), so the next object of
/// the class is checked by comparing addresses instead of asking the sink (a class lookup and a
/// comparison of names). The sink's answer depends only on the class and the field names, so
/// it is the same for every object that passes the check.
struct LastShape {
    /// References to the key objects, so that their addresses cannot be reused while they are
    /// compared against.
    fields: Vec<Py<PyAny>>,
    shape: ClassShape,
}

impl LastShape {
    /// The shape for the names of `fields` (names and values held by `Encoder::with_fields`).
    fn new(py: Python<'_>, fields: &[(*mut ffi::PyObject, *mut ffi::PyObject)], shape: ClassShape) -> Self {
        // SAFETY: names held by the caller, made owned at once.
        let names = fields.iter().map(|&(name, _)| unsafe { Bound::from_borrowed_ptr(py, name) }.unbind()).collect();
        LastShape { fields: names, shape }
    }

    /// Whether the names of `fields` are the objects of `self.fields`, in order (compared as
    /// addresses only).
    fn has_names(&self, fields: &[(*mut ffi::PyObject, *mut ffi::PyObject)]) -> bool {
        fields.len() == self.fields.len() && self.fields.iter().zip(fields).all(|(field, &(name, _))| name == field.as_ptr())
    }
}

/// The items of a set or frozenset (pyo3's iterator over one panics if it cannot be made).
pub(crate) fn set_items<'py>(set: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    iterated(set, set.len()?)
}

/// The items `iterable` iterates over, with room made for `capacity` of them. Not `collect`ed from pyo3's
/// iterator, whose size hint (`__length_hint__`) prints a failure to allocate as unraisable.
pub(crate) fn iterated<'py>(iterable: &Bound<'py, PyAny>, capacity: usize) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut items = Vec::with_capacity(capacity);
    for item in iterable.try_iter()? {
        items.push(item?);
    }
    Ok(items)
}

fn builtin_iter<'py>(v: &Bound<'py, PyAny>, base: u8) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = v.py();
    let base_type = match base {
        tag::LIST => PyList::type_object(py),
        tag::TUPLE => PyTuple::type_object(py),
        tag::SET => PySet::type_object(py),
        _ => PyFrozenSet::type_object(py),
    };
    // No room is made ahead: the subclass's own `__len__` is not asked.
    iterated(&base_type.call_method1(crate::allocation::interned!(py, "__iter__")?, (v,))?, 0)
}

use pyo3::PyTypeInfo;

/// The type object of a built-in type.
type BuiltinType = fn(Python<'_>) -> Bound<'_, PyType>;

/// The types of `Kind::Builtin`.
const BUILTINS: [(BuiltinType, Builtin); 9] = [
    (PyDateTime::type_object, Builtin::DateTime),
    (PyDate::type_object, Builtin::Date),
    (PyTime::type_object, Builtin::Time),
    (PyDelta::type_object, Builtin::Delta),
    (PyBytes::type_object, Builtin::Bytes),
    (PyByteArray::type_object, Builtin::ByteArray),
    (PySet::type_object, Builtin::Set),
    (PyFrozenSet::type_object, Builtin::FrozenSet),
    (PyComplex::type_object, Builtin::Complex),
];

/// The scalar built-ins whose Python subclasses streams hold as SUBCLASS values (docs/STREAM.md
/// section 5): each with the tag its base is classified under (an int's value is then written
/// as INT or BIGINT, a str's as STR or STR_SURROGATES), and the method of the built-in that
/// returns an instance's value as a plain object of the built-in. Records refuse them.
const SCALAR_BASES: [(BuiltinType, u8, &str); 5] = [
    (PyInt::type_object, tag::INT, "__int__"),
    (PyFloat::type_object, tag::FLOAT, "__float__"),
    (PyComplex::type_object, tag::COMPLEX, "__complex__"),
    (PyString::type_object, tag::STR, "__str__"),
    (PyBytes::type_object, tag::BYTES, "__bytes__"),
];

/// The built-in whose subclasses a SUBCLASS value of base tag `base` holds, if `base` is the tag
/// of a scalar value (`SCALAR_BASES`).
pub(crate) fn scalar_base(py: Python<'_>, base: u8) -> Option<Bound<'_, PyType>> {
    let classified_as = match base {
        tag::BIGINT => tag::INT,
        tag::STR_SURROGATES => tag::STR,
        other => other,
    };
    SCALAR_BASES.iter().find(|(_, scalar, _)| *scalar == classified_as).map(|(base_type, ..)| base_type(py))
}

/// The built-in containers whose Python subclasses are SUBCLASS values, with their tags: the
/// five of docs/FORMAT.md section 6.7, and `bytearray`, a mutable sequence of bytes whose
/// SUBCLASS base is a blob (streams and text documents only, `Encoder::bytearray_subclasses`).
const CONTAINER_BASES: [(BuiltinType, u8); 6] = [
    (PyList::type_object, tag::LIST),
    (PyDict::type_object, tag::DICT),
    (PyTuple::type_object, tag::TUPLE),
    (PySet::type_object, tag::SET),
    (PyFrozenSet::type_object, tag::FROZENSET),
    (PyByteArray::type_object, tag::BYTEARRAY),
];

/// The built-ins whose Python subclasses are SUBCLASS values, with the tag of their base.
fn subclass_bases(py: Python<'_>) -> impl Iterator<Item = (Bound<'_, PyType>, u8)> {
    let containers = CONTAINER_BASES.iter().map(move |&(base_type, base)| (base_type(py), base));
    containers.chain(SCALAR_BASES.iter().map(move |&(base_type, base, _)| (base_type(py), base)))
}

/// The built-in of `subclass_bases` that `class` is a subclass of, with its tag.
fn subclass_base<'py>(class: &Bound<'py, PyType>) -> PyResult<Option<(Bound<'py, PyType>, u8)>> {
    for (base, base_tag) in subclass_bases(class.py()) {
        if class.is_subclass(&base)? {
            return Ok(Some((base, base_tag)));
        }
    }
    Ok(None)
}

/// How values of `class` are written (see `Kind`). Everything here depends on the class alone;
/// `object_index` is the number a `Kind::Object` gets.
pub(crate) fn classify(class: &Bound<'_, PyType>, object_index: usize) -> PyResult<Kind> {
    let py = class.py();
    if let Some(&(_, builtin)) = BUILTINS.iter().find(|(builtin_type, _)| class.is(builtin_type(py))) {
        return Ok(Kind::Builtin(builtin));
    }
    if class.is_subclass_of::<PersistentBase>()? {
        return Ok(Kind::Persistent);
    }
    if class.is(pytypes::decimal_type(py)?) {
        return Ok(Kind::Decimal);
    }
    if class.is(pytypes::uuid_type(py)?) {
        return Ok(Kind::Uuid);
    }
    if class.is(pytypes::broken_object_type(py)?) {
        return Ok(Kind::Broken);
    }
    if class.is_subclass(pytypes::enum_type(py)?)? {
        return Ok(Kind::Enum);
    }
    if let Some(known) = KnownContainer::of(class)? {
        return Ok(if rebuilt_by_base(class, known.type_object(py)?)? { Kind::Known(known) } else { Kind::Unsupported });
    }
    if !is_python_class(class) {
        return Ok(Kind::Unsupported);
    }
    if let Some((base, base_tag)) = subclass_base(class)? {
        // A SUBCLASS holds the base and the instance dict: a subclass of a scalar built-in whose
        // instances keep values in slots is refused rather than written without them.
        let kept_whole = rebuilt_by_base(class, &base)? && (scalar_base(py, base_tag).is_none() || !has_slots(class)?);
        return Ok(if kept_whole { Kind::Subclass(base_tag) } else { Kind::Unsupported });
    }
    let state_known = class_has_instance_dict(class) || every_base_declares_slots(class)?;
    if state_known && new_is_object_new(class)? {
        return Ok(Kind::Object(object_index));
    }
    Ok(Kind::Unsupported)
}

/// Whether every class of `class`'s MRO but `object` declares `__slots__`: then its instances
/// hold nothing but those slots. (A class statement without `__slots__` gives its instances a
/// `__dict__`; a type without either, such as `_thread.lock`, keeps its state out of reach.)
fn every_base_declares_slots(class: &Bound<'_, PyType>) -> PyResult<bool> {
    let py = class.py();
    let object = pytypes::object_type(py)?;
    for ancestor in class.mro().iter().filter(|ancestor| !ancestor.is(object)) {
        if !ancestor.getattr(crate::allocation::interned!(py, "__dict__")?)?.contains(crate::allocation::interned!(py, "__slots__")?)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The instance dict of `v`, an instance of a `Kind::Object` class without slots (whose
/// instances have a `__dict__` slot), taken from the slot (CPython materializes it if it keeps the attributes
/// inline) instead of by looking `__dict__` up along the class's MRO for every object. It is
/// the dict the decoder sets the fields in.
pub(crate) fn object_dict<'py>(v: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    // A dict already made is read where CPython keeps it, without the call.
    if let Some(dict) = made_dict(v.as_borrowed()) {
        return Ok(dict);
    }
    // SAFETY: `v` is a live object whose type has a dict slot (checked by `classify`); the call
    // returns a new reference or null with an exception set.
    let dict = unsafe { Bound::from_owned_ptr_or_err(v.py(), ffi::PyObject_GenericGetDict(v.as_ptr(), std::ptr::null_mut()))? };
    Ok(dict.cast_into::<PyDict>()?)
}

/// Calls `each` with the items of `dict`, which Python code run by `each` (an enum's `_name_`,
/// say) may change: pyo3's iterator would panic then, and a count written before the items would
/// no longer match, so a dict whose size changed is refused after its last item. Items are read
/// with `PyDict_Next`, which checks its bounds at each call.
fn each_item<'py, E>(
    dict: &Bound<'py, PyDict>,
    mut each: impl FnMut(Bound<'py, PyAny>, Bound<'py, PyAny>) -> Result<(), E>,
) -> Result<PyResult<()>, E> {
    let len = dict.len();
    let (mut position, mut read) = (0, 0);
    while let Some((key, value)) = dict.next_field(&mut position) {
        // SAFETY: borrowed references to live objects held by `dict`, made owned at once.
        let (key, value) = unsafe { (Bound::from_borrowed_ptr(dict.py(), key), Bound::from_borrowed_ptr(dict.py(), value)) };
        each(key, value)?;
        read += 1;
    }
    Ok(if read == len && dict.len() == len {
        Ok(())
    } else {
        Err(PyTypeError::new_err("the dict changed size while it was being written"))
    })
}

/// How a list item that follows the very same object is written (`Encoder::list_values`).
enum Repeat {
    /// Its bytes again: they depend on its value alone.
    Bytes,
    /// A reference to this slot of the stream's string table.
    Reference(u64),
}

/// How many items of `list` from index `from` on (below `len`) are `item` itself.
fn same_run(list: &Bound<'_, PyList>, from: usize, len: usize, item: &Bound<'_, PyAny>) -> usize {
    pyo3::sync::critical_section::with_critical_section(list, || {
        let end = len.min(list.len());
        // SAFETY: indices below the list's length, read while no other thread changes it (its
        // critical section); the borrowed pointers are only compared.
        (from..end).take_while(|&index| unsafe { ffi::PyList_GET_ITEM(list.as_ptr(), index as ffi::Py_ssize_t) } == item.as_ptr()).count()
    })
}

fn list_changed_size() -> Failure {
    Failure::Unsupported { path: vec![], reason: "the list changed size while it was being written".into() }
}

fn unsupported_type(class: &Bound<'_, PyType>) -> Failure {
    let name = type_name_of(class).unwrap_or_else(|_| "?".into());
    let base_name = |base: &Bound<'_, PyType>| base.name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    // Only the message depends on this: an error from a class's `__subclasscheck__` gives the
    // general one.
    let reason = match subclass_base(class).ok().flatten().filter(|_| is_python_class(class)) {
        Some((base, _)) if has_slots(class).unwrap_or(false) => format!(
            "values of type {name} cannot be stored: they keep values in __slots__, and a subclass of {} is \
             stored as its {} value and its __dict__",
            base_name(&base),
            base_name(&base)
        ),
        // Refused by `rebuilt_by_base`.
        Some((base, _)) => format!(
            "values of type {name} cannot be stored: a reader rebuilds a subclass of {base} with {base}'s own \
             constructor, which cannot rebuild them (a class between them is not written in Python or makes \
             its instances in its own __new__)",
            base = base_name(&base)
        ),
        None => format!(
            "values of type {name} cannot be stored (see docs/FORMAT.md for the supported types; \
             make the class a copal.Persistent or a plain class with __dict__ or __slots__)"
        ),
    };
    Failure::Unsupported { path: vec![], reason }
}

/// The refusal of a value that only binary streams hold (`Encoder::stream_only_values`);
/// `what` describes it.
fn only_in_streams(what: &str) -> Failure {
    only_in(what, "a binary stream (copal.dumps), not stored in a database, an archive or a text document")
}

/// The refusal of the value `what` describes, which only `holders` hold.
fn only_in(what: &str, holders: &str) -> Failure {
    Failure::Unsupported { path: vec![], reason: format!("{what} can only be written to {holders}") }
}

/// The attributes of persistent `obj` that are stored: all but volatile (`_v_`) and
/// persistence (`_p_`) ones. The instance dict itself unless it has such attributes.
pub fn stored_state<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let dict = instance_dict(obj)?;
    let is_volatile = |key: &Bound<'py, PyAny>| -> PyResult<bool> {
        let Ok(key) = key.cast::<PyString>() else { return Ok(false) };
        Ok(utf8_text(key)?.is_some_and(|k| k.starts_with("_v_") || k.starts_with("_p_")))
    };
    let mut volatile = false;
    for (key, _) in dict.iter() {
        if is_volatile(&key)? {
            volatile = true;
            break;
        }
    }
    if !volatile {
        return Ok(dict);
    }
    let stored = crate::allocation::dict(obj.py())?;
    for (key, value) in dict.iter() {
        if !is_volatile(&key)? {
            stored.set_item(key, value)?;
        }
    }
    Ok(stored)
}

pub(crate) fn time_of_day_micros(hour: u8, minute: u8, second: u8, micro: u32) -> i64 {
    (i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second)) * MICROS_PER_SECOND + i64::from(micro)
}

pub(crate) fn tz_info(tz: Option<Bound<'_, PyTzInfo>>) -> Result<TzInfo, Failure> {
    let Some(tz) = tz else { return Ok(TzInfo::Naive) };
    let py = tz.py();
    if tz.get_type().is(pytypes::timezone_type(py)?) {
        let offset = tz.call_method1(crate::allocation::interned!(py, "utcoffset")?, (py.None(),))?;
        let delta = offset.cast::<PyDelta>().map_err(PyErr::from)?;
        let micros = i64::from(delta.get_days()) * MICROS_PER_DAY
            + i64::from(delta.get_seconds()) * MICROS_PER_SECOND
            + i64::from(delta.get_microseconds());
        return Ok(TzInfo::Offset(micros));
    }
    if tz.get_type().is(pytypes::zoneinfo_type(py)?) {
        return Ok(TzInfo::Named(tz.getattr(crate::allocation::interned!(py, "key")?)?.extract()?));
    }
    Err(Failure::Unsupported {
        path: vec![],
        reason: format!(
            "time zone {} is not supported: use datetime.timezone or zoneinfo.ZoneInfo",
            short_repr(&tz)
        ),
    })
}

fn into_pyerr(failure: Failure, root: &str) -> PyErr {
    match failure {
        Failure::Python(e) => e,
        Failure::Unsupported { path, reason } => {
            let mut where_ = root.to_owned();
            path.iter().rev().for_each(|segment| where_.push_str(segment));
            if reason.starts_with("values nested") {
                PyValueError::new_err(format!("cannot store {where_}: {reason}"))
            } else {
                PyTypeError::new_err(format!("cannot store {where_}: {reason}"))
            }
        }
    }
}

fn short_repr(v: &Bound<'_, PyAny>) -> String {
    let text = v.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into());
    if text.chars().count() > 40 { format!("{}...", text.chars().take(37).collect::<String>()) } else { text }
}

/// Whether `class` was made by Python code (a class statement or `type()`), not by C code:
/// only such classes keep all their instances' state in `__dict__` and `__slots__`, where the
/// codec reads and sets it. A heap type is not enough: since CPython 3.12 the `_io` classes are
/// heap types too (as are those of pyo3, Cython or `PyType_FromSpec`), with C state the codec
/// would drop. What Python code makes is mutable, freed by `subtype_dealloc`
/// (`pytypes::class_statement_dealloc`), and adds to its base's instances only what it declares
/// (`adds_only_declared_state`). A C class is immutable, or frees its state with a deallocator
/// of its own; one made by `PyType_FromSpec` without a deallocator gets `subtype_dealloc`, and
/// is then told apart by the C fields it adds.
pub fn is_python_class(class: &Bound<'_, PyType>) -> bool {
    // SAFETY: `class` is a valid type object; only its flags and deallocator are read, and its
    // layout once it is known to be a heap type.
    unsafe {
        let ty = class.as_type_ptr();
        (*ty).tp_flags & (ffi::Py_TPFLAGS_HEAPTYPE | ffi::Py_TPFLAGS_IMMUTABLETYPE) == ffi::Py_TPFLAGS_HEAPTYPE
            && (*ty).tp_dealloc.map(|dealloc| dealloc as usize) == Some(pytypes::class_statement_dealloc())
            && adds_only_declared_state(ty)
    }
}

/// Whether the instances of the heap type `ty` are those of its base plus one pointer for each
/// of its own `__slots__` names, and for the instance dict and weak reference list it adds
/// inside the object (CPython's `type_new`, which keeps the others before the object: managed
/// dicts since 3.11, managed weak references since 3.12).
///
/// # Safety
/// `ty` must be a live heap type.
unsafe fn adds_only_declared_state(ty: *mut ffi::PyTypeObject) -> bool {
    // SAFETY: the caller's guarantee: a heap type's object is a PyHeapTypeObject, whose
    // `ht_slots` is null or the tuple of the slot names `type_new` made (`__dict__` and
    // `__weakref__` taken out); a type's base is null or a live type.
    unsafe {
        let base = (*ty).tp_base;
        if base.is_null() {
            return false;
        }
        let slots = (*ty.cast::<ffi::PyHeapTypeObject>()).ht_slots;
        let mut declared = if slots.is_null() { 0 } else { ffi::PyTuple_GET_SIZE(slots) };
        if (*ty).tp_weaklistoffset > 0 && (*base).tp_weaklistoffset == 0 {
            declared += 1;
        }
        if (*ty).tp_flags & ffi::Py_TPFLAGS_MANAGED_DICT == 0 && (*ty).tp_dictoffset != 0 && (*base).tp_dictoffset == 0 {
            declared += 1;
        }
        let pointer = std::mem::size_of::<*mut ffi::PyObject>() as ffi::Py_ssize_t;
        (*ty).tp_basicsize == (*base).tp_basicsize + declared * pointer
    }
}

/// Whether `class` can still change: a class whose attributes may gain or lose a `__set__`
/// later (static types and immutable heap types cannot).
pub fn is_mutable_class(class: &Bound<'_, PyType>) -> bool {
    // SAFETY: `class` is a valid type object; only its flags are read.
    unsafe { (*class.as_type_ptr()).tp_flags & ffi::Py_TPFLAGS_IMMUTABLETYPE == 0 }
}

pub fn has_instance_dict(v: &Bound<'_, PyAny>) -> bool {
    class_has_instance_dict(&v.get_type())
}

pub(crate) fn class_has_instance_dict(class: &Bound<'_, PyType>) -> bool {
    // SAFETY: `class` is a valid type object; only its layout field is read.
    unsafe { (*class.as_type_ptr()).tp_dictoffset != 0 }
}

/// Whether the instances of `class`, a subclass of the built-in container or scalar `base`, are
/// rebuilt whole by `base`'s own constructor and methods, as the decoder rebuilds them: every class
/// between the two is a Python class (a heap type) whose `__new__`, if it has one, is written
/// in Python. Not so for struct sequences (`os.stat_result`, `time.struct_time`: `tuple.__new__`
/// refuses them, and their fields past the tuple would be lost) or subclasses of containers
/// written in C (`collections.OrderedDict` keeps its order outside the dict, so an instance
/// filled by `dict.update` looks empty; the C containers of known_containers.rs are therefore
/// checked with the C type itself as `base`). Kept per class (class_cache.rs): the answer reads only
/// the namespaces along the class's MRO.
pub(crate) fn rebuilt_by_base(class: &Bound<'_, PyType>, base: &Bound<'_, PyType>) -> PyResult<bool> {
    // A built-in type's address names it for the life of the process.
    let base_address = base.as_ptr() as usize;
    let (known_base, rebuilt) = crate::class_cache::remembered(
        class,
        |facts| &mut facts.rebuilt_by_base,
        || Ok((base_address, base_rebuilds(class, base)?)),
    )?;
    if known_base == base_address { Ok(rebuilt) } else { base_rebuilds(class, base) }
}

/// `rebuilt_by_base`, computed.
fn base_rebuilds(class: &Bound<'_, PyType>, base: &Bound<'_, PyType>) -> PyResult<bool> {
    let py = class.py();
    let staticmethod = py.import(crate::allocation::interned!(py, "builtins")?)?.getattr(crate::allocation::interned!(py, "staticmethod")?)?;
    for ancestor in class.mro().iter() {
        let ancestor = ancestor.cast_into::<PyType>()?;
        if ancestor.is(base) {
            return Ok(true);
        }
        if !is_python_class(&ancestor) {
            return Ok(false);
        }
        let namespace = ancestor.getattr(crate::allocation::interned!(py, "__dict__")?)?;
        let new = namespace.call_method1(crate::allocation::interned!(py, "get")?, (crate::allocation::interned!(py, "__new__")?,))?;
        if !new.is_none() && !new.is_instance(&staticmethod)? {
            return Ok(false);
        }
    }
    Ok(false)
}

/// Whether instances of `class` keep values in slots (the `__slots__` of its Python classes).
fn has_slots(class: &Bound<'_, PyType>) -> PyResult<bool> {
    let py = class.py();
    let member_descriptor = py.import(crate::allocation::interned!(py, "types")?)?.getattr(crate::allocation::interned!(py, "MemberDescriptorType")?)?;
    for ancestor in class.mro().iter() {
        let ancestor = ancestor.cast_into::<PyType>()?;
        if !is_python_class(&ancestor) {
            continue;
        }
        let namespace = ancestor.getattr(crate::allocation::interned!(py, "__dict__")?)?;
        for attribute in namespace.call_method0(crate::allocation::interned!(py, "values")?)?.try_iter()? {
            if attribute?.get_type().is(&member_descriptor) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Decoding creates plain instances with `object.__new__`, which runs no user code; classes
/// with their own `__new__` are therefore not stored by value.
pub fn new_is_object_new(class: &Bound<'_, PyType>) -> PyResult<bool> {
    let py = class.py();
    let name = crate::allocation::interned!(py, "__new__")?;
    Ok(class.getattr(name)?.is(pytypes::object_type(py)?.getattr(name)?))
}
