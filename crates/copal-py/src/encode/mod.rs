//! Python objects -> copal bytes (docs/FORMAT.md "Values"), written straight from the objects
//! with the core's `Writer` primitives.
//!
//! This module holds the `Encoder` itself: its state, the entry points (`record`, `standalone`),
//! the memo and identity map, the dispatch of a value on its type (`value`) and the errors. The
//! values are written by its submodules: `classify` decides once per class how its values are
//! written, `scalars` writes strings and ints, `containers` the built-in containers, `objects`
//! plain objects, subclasses of built-ins and other values written with a descriptor, and
//! `fields` the fields of an object.

mod classify;
mod containers;
mod fields;
mod objects;
mod scalars;

use std::rc::Rc;
use std::sync::Arc;

use copal_core::format::{oid_class, oid_seq, tag, FieldKind, StringsMark, Writer, FLAG_MUTABLE_STATE};
use copal_core::format::RecordHeader;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyType};

use crate::classes::{type_name_of, ClassShape};
use crate::hashing::IntMap;
use crate::pytypes;
use crate::slots::SlotLayout;
use crate::strings::StringTable;

pub use classify::{has_instance_dict, is_mutable_class, is_python_class, new_is_object_new};
pub(crate) use classify::{class_has_instance_dict, classify, rebuilt_by_base, scalar_base, Builtin, Kind};
pub(crate) use containers::{iterated, set_items};
pub use fields::{field_kind_of, stored_state};
pub(crate) use fields::{fields_dict, object_dict, FieldSource};
pub(crate) use scalars::{generalized_utf8, time_of_day_micros, tz_info, utf8_text};

use classify::{has_slots, subclass_base};
use containers::each_item;
use objects::LastShape;

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

    fn value(&mut self, v: &Bound<'_, PyAny>, depth: usize) -> Step {
        if depth > MAX_DEPTH {
            return Err(Failure::Unsupported { path: vec![], reason: format!("values nested deeper than {MAX_DEPTH} levels") });
        }
        // The most frequent types first, each an exact type-pointer comparison by the C API's
        // checks (see `has_type_of_kind`: a failed `cast_exact` writes to the type object twice).
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
