//! copal bytes -> Python objects, directly (no intermediate tree). Only the value types of
//! docs/FORMAT.md and classes resolved by `classes::resolve` are ever instantiated, and plain
//! instances are created with `object.__new__`: decoding runs no code named by the data.

use copal_core::format::calendar::{civil_from_days, MICROS_PER_DAY, MICROS_PER_SECOND};
use copal_core::format::{tag, DecodeError, FieldKind, Limits, Reader, RecordHeader, TzInfo};
use copal_core::format::make_oid;
use pyo3::prelude::*;
use pyo3::types::{
    PyDate, PyDateTime, PyDelta, PyFrozenSet, PySet,
    PyString, PyTime, PyTuple, PyTzInfo, PyType,
};
use pyo3::{ffi, IntoPyObjectExt, PyTypeInfo};
use std::cell::{Cell, OnceCell};
use std::rc::Rc;
use std::sync::Arc;

use crate::hashing::IntMap;
use crate::allocation;
use crate::cpython::FieldSlots;
use crate::errors::{corrupt, SchemaError};
use crate::known_containers::KnownContainer;
use crate::list_builder::ListBuilder;
use crate::pytypes;
use crate::strings::new_string;

mod containers;
mod memory;
mod objects;
mod subclasses;

pub(crate) use subclasses::allocated_instance;
pub use objects::{check_inert, check_plain_class};
use objects::enum_member;

/// What a decoder needs from the connection: descriptors and objects for references.
pub trait Resolver<'py> {
    fn descriptor(&self, py: Python<'py>, id: u32) -> PyResult<Arc<DecodeInfo>>;
    fn class_of(&self, py: Python<'py>, info: &DecodeInfo) -> PyResult<Bound<'py, PyType>>;
    fn object(&self, py: Python<'py>, oid: u64) -> PyResult<Bound<'py, PyAny>>;
    fn zone(&self, py: Python<'py>, tz: &TzInfo) -> PyResult<Option<Bound<'py, PyTzInfo>>>;
    /// The new, empty instance for an OBJECT of descriptor `id` and class `class`, or `None` for
    /// the default: a plain instance made with `object.__new__` after `check_plain_class`.
    /// Standalone streams (standalone.rs) rebuild persistent objects stored by value here.
    fn instance(&self, _py: Python<'py>, _id: u32, _class: &Bound<'py, PyType>) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(None)
    }
    /// Where the fields of descriptor `id` go in the instances of `class`, if an earlier
    /// decoding learned it (`learned_slots`).
    fn known_slots(&self, _id: u32, _class: &Bound<'py, PyType>) -> Option<Arc<FieldSlots>> {
        None
    }
    /// Offers `slots`, learned for descriptor `id` from its first object, to later decodings.
    fn learned_slots(&self, _id: u32, _slots: &Arc<FieldSlots>) {}
}

/// A descriptor prepared for decoding: the attribute names its fields load into (interned;
/// the stored names, or their new names after `__copal_renamed__`) and, for classes that changed
/// since the record was written, a fix-up `(obj, state)` applying defaults and conversions
/// (python/copal/evolution.py).
pub struct DecodeInfo {
    pub type_name: String,
    pub fields: Vec<Py<PyString>>,
    pub fixup: Option<Py<PyAny>>,
    /// The kind of each field in a TYPED_OBJECT (stream version 3, docs/STREAM.md section 5);
    /// empty where there are none (records, older streams).
    pub kinds: Vec<FieldKind>,
    /// Whether the class may be rebuilt by value (`check_plain_class` and `check_inert`),
    /// decided on first use.
    pub rebuildable: std::sync::OnceLock<bool>,
    /// For the descriptor of a known container with a state field (known_containers.rs): the
    /// descriptor of the fields after it, which `Decoder::known_container` sets as any
    /// SUBCLASS's. Made on first use and kept, not once per value; it depends on this
    /// descriptor alone, so a stream table shared between decodings may share it too.
    pub after_state: std::sync::OnceLock<Arc<DecodeInfo>>,
}

impl DecodeInfo {
    pub fn new(type_name: String, fields: Vec<Py<PyString>>, fixup: Option<Py<PyAny>>) -> Self {
        DecodeInfo { type_name, fields, fixup, kinds: Vec::new(), rebuildable: std::sync::OnceLock::new(), after_state: std::sync::OnceLock::new() }
    }

    /// A descriptor whose fields load under their stored names, with no fix-up.
    pub fn plain(type_name: String, fields: Vec<Py<PyString>>) -> Self {
        Self::new(type_name, fields, None)
    }
}

/// `BOUNDED`: the decoder holds its objects to a memory budget (memory.rs); an unbounded one
/// has no accounting to do, so the decoding of records and uncompressed streams pays none.
pub struct Decoder<'r, 'py, R: Resolver<'py>, const BOUNDED: bool = false> {
    py: Python<'py>,
    resolver: &'r R,
    memo: Vec<Option<Bound<'py, PyAny>>>,
    limits: Limits,
    what: &'r dyn Fn() -> String,
    /// When set, every referenced persistent object that is still a ghost is collected here
    /// (`load_closure` loads them next).
    pub ghost_refs: Option<Vec<Bound<'py, PyAny>>>,
    pub strings: Option<&'r mut crate::strings::StringCache>,
    /// Set for streams of version 2 and 3 (`share_strings`): every STR decoded so far, in
    /// order, for STRREF (docs/STREAM.md section 5). STRREF is an unknown tag elsewhere.
    string_slots: Option<Vec<Bound<'py, PyAny>>>,
    /// The spare buffer `share_strings` makes `string_slots` of.
    spare_strings: Vec<Bound<'py, PyAny>>,
    /// Set for streams of version 3: TYPED_OBJECT and OBJECT_LIST are read (docs/STREAM.md
    /// section 5); they are unknown tags elsewhere.
    pub typed_objects: bool,
    /// Set for streams of version 4: SUPERSEDED_TUPLE and SUPERSEDED_FROZENSET are read, as
    /// values and as SUBCLASS bases, and so are SUBCLASS bases of scalar tags (docs/STREAM.md
    /// section 5); they are unknown tags elsewhere.
    pub version_4_values: bool,
    /// Set for streams of version 4 and the bodies of text documents: a SUBCLASS may have a
    /// BYTEARRAY base (docs/STREAM.md section 5), an unknown base tag elsewhere.
    pub bytearray_bases: bool,
    /// How many values the decoding would have visited with back-references expanded, and the
    /// same count per memo slot: a set element or dict key whose expansion exceeds
    /// `hash_budget` is refused, since hashing it would visit every expanded value (a record
    /// can describe 2^60 tuples in 400 bytes by sharing; docs/FUZZING.md F2).
    expanded: u64,
    slot_weights: Vec<u64>,
    hash_budget: u64,
    /// How many more list items may be reserved room for before they are read. A list's count
    /// is only bounded by the input left, so nested lists each claiming it would reserve depth
    /// x input; every item of every list is a value of at least one byte, so the input's length
    /// in all covers every list of a well-formed input (the others grow as items come).
    preallocation_budget: usize,
    /// With `BOUNDED`, the bytes of memory the decoded objects take, estimated (memory.rs), and
    /// the most they may take.
    memory_used: usize,
    memory_limit: usize,
    /// The objects of the ints in `SMALL_INTS`, or none if they could not be made.
    small_ints: &'static [Py<PyAny>],
    /// The target of each descriptor id below `MAX_REMEMBERED_TARGETS` met so far, so that the
    /// resolver is asked once per decoding and not once per object (seed 003 has one embedded
    /// Address per Person and one OBJECT_LIST of Phones each).
    targets: Vec<Option<Rc<Target<'py>>>>,
    /// The SUBCLASS values' classes, bases and descriptors (by address) that passed the class
    /// checks of `subclass` in this decoding (inert fields, a subclass of the base, rebuildable
    /// by it), with whether the class has slots: a stream of many named tuples walks their
    /// class's MRO and takes the class cache's lock once, not per value.
    checked_subclasses: IntMap<(usize, usize, usize), bool>,
    /// The classes of SUBCLASS values of a DICT or LIST base met in this decoding, with the
    /// known container of `collections` each is or derives from (`KnownContainer::of`, three
    /// subtype tests): asked once per class, not per value. Addresses, as in
    /// `checked_subclasses`: the resolver keeps the classes alive while it decodes.
    known_containers: Vec<(usize, Option<KnownContainer>)>,
}

/// A descriptor and its class, None for a class that cannot be found (its objects load as
/// BrokenObjects).
pub(super) struct Target<'py> {
    info: Arc<DecodeInfo>,
    class: Option<Bound<'py, PyType>>,
    /// Where the fields go in the class's instances, from the resolver or read after the first
    /// object has been built: a class no instance of which was made yet in this process has an
    /// empty key table, which setting that first object's attributes fills.
    slots: OnceCell<Option<Arc<FieldSlots>>>,
}

/// Descriptor ids come from the data: only small ones index `Decoder::targets`, so that a
/// corrupt id cannot make it allocate (larger ones are looked up every time, as valid ids of a
/// database with many classes may be).
pub(super) const MAX_REMEMBERED_TARGETS: usize = 1024;

pub(crate) enum Fail {
    Decode(DecodeError),
    Python(PyErr),
}

impl From<DecodeError> for Fail {
    fn from(e: DecodeError) -> Self {
        Fail::Decode(e)
    }
}

impl From<PyErr> for Fail {
    fn from(e: PyErr) -> Self {
        Fail::Python(e)
    }
}

pub(super) type Out<'py> = Result<Bound<'py, PyAny>, Fail>;

impl<'r, 'py, R: Resolver<'py>> Decoder<'r, 'py, R> {
    pub fn new(py: Python<'py>, resolver: &'r R, what: &'r dyn Fn() -> String) -> Self {
        Self::with_limit(py, resolver, what, usize::MAX)
    }
}

impl<'r, 'py, R: Resolver<'py>> Decoder<'r, 'py, R, true> {
    /// A decoder whose objects may take about `max_size` bytes of memory beyond their bytes
    /// and characters (memory.rs): decoding fails with CorruptRecordError past that.
    pub fn bounded(py: Python<'py>, resolver: &'r R, what: &'r dyn Fn() -> String, max_size: usize) -> Self {
        Self::with_limit(py, resolver, what, max_size)
    }
}

impl<'r, 'py, R: Resolver<'py>, const BOUNDED: bool> Decoder<'r, 'py, R, BOUNDED> {
    fn with_limit(py: Python<'py>, resolver: &'r R, what: &'r dyn Fn() -> String, memory_limit: usize) -> Self {
        let spare = SPARE.with(Cell::take).unwrap_or_default();
        Decoder {
            py,
            resolver,
            memo: from_spare(spare.memo),
            limits: Limits::default(),
            what,
            ghost_refs: None,
            strings: None,
            string_slots: None,
            spare_strings: from_spare(spare.strings),
            typed_objects: false,
            version_4_values: false,
            bytearray_bases: false,
            expanded: 0,
            slot_weights: spare.weights,
            hash_budget: u64::MAX,
            preallocation_budget: 0,
            memory_used: 0,
            memory_limit,
            small_ints: small_ints(py),
            targets: Vec::new(),
            checked_subclasses: IntMap::default(),
            known_containers: Vec::new(),
        }
    }

    /// Reads STR and STRREF as streams of version 2 and 3 have them.
    pub fn share_strings(&mut self) {
        self.string_slots = Some(std::mem::take(&mut self.spare_strings));
    }

    /// The budgets of decoding an input of `len` bytes. Room reserved for list items counts
    /// against the memory budget only as the items come, so it is held to that budget too.
    pub(super) fn set_budgets(&mut self, len: usize) {
        self.hash_budget = expansion_budget(len);
        self.preallocation_budget = len.min(self.memory_limit.saturating_sub(self.memory_used) / memory::SLOT);
    }

    /// An empty list with room for `count` items, within `preallocation_budget`.
    pub(super) fn new_list(&mut self, count: usize) -> Result<ListBuilder<'py>, Fail> {
        let room = if count <= self.preallocation_budget { count } else { 0 };
        self.preallocation_budget -= room;
        Ok(ListBuilder::with_capacity(self.py, room)?)
    }

    /// The int `value`: one of the shared objects of small ints, or a new int.
    #[inline]
    pub(super) fn int(&mut self, value: i64) -> PyResult<Bound<'py, PyAny>> {
        match self.small_int(value) {
            Some(int) => Ok(int.clone()),
            None => {
                self.charge(memory::INT);
                allocation::int(self.py, value)
            }
        }
    }

    /// The shared object of `value` if it is in `SMALL_INTS`.
    #[inline]
    pub(super) fn small_int(&self, value: i64) -> Option<&Bound<'py, PyAny>> {
        small_int(self.small_ints, value).map(|int| int.bind(self.py))
    }

    pub(super) fn finish<T>(&self, result: Result<T, Fail>) -> PyResult<T> {
        result.map_err(|fail| match fail {
            Fail::Decode(e) => corrupt((self.what)(), e),
            Fail::Python(e) => e,
        })
    }

    /// Decodes a record into the attributes of `obj`, which must have none. Returns the header
    /// and the offset where the state starts. On error `obj` is left without attributes.
    pub fn record_into(&mut self, obj: &Bound<'py, PyAny>, record: &[u8]) -> PyResult<(RecordHeader, usize)> {
        self.set_budgets(record.len());
        let result = (|| {
            let mut r = Reader::new(record);
            let header = RecordHeader::read(&mut r)?;
            let state_start = r.position();
            let info = self.resolver.descriptor(self.py, header.descriptor)?;
            self.set_fields(&mut r, obj, &info, None, false, 0)?;
            r.expect_end()?;
            Ok((header, state_start))
        })();
        if result.is_err() {
            crate::persistent::set_instance_dict(obj, &allocation::dict(self.py)?)?;
        }
        self.finish(result)
    }

    pub(super) fn value(&mut self, r: &mut Reader<'_>, depth: usize) -> Out<'py> {
        let (start, own_slot) = (self.expanded, self.memo.len());
        let value = self.value_inner(r, depth)?;
        self.count_expanded(start, own_slot);
        Ok(value)
    }

    /// Counts a value just read (that started when `expanded` was `start` and the memo had
    /// `own_slot` slots) for `hash_budget`.
    pub(super) fn count_expanded(&mut self, start: u64, own_slot: usize) {
        self.expanded = self.expanded.saturating_add(1);
        // A value that takes a memo slot takes it before its children do.
        if self.memo.len() > own_slot {
            self.slot_weights.resize(self.memo.len(), 0);
            self.slot_weights[own_slot] = self.expanded - start;
        }
    }

    pub(super) fn backref(&mut self, index: u64, offset: usize) -> Out<'py> {
        let weight = self.slot_weights.get(index as usize).copied().unwrap_or(0);
        self.expanded = self.expanded.saturating_add(weight);
        match self.memo.get(index as usize) {
            Some(Some(value)) => Ok(value.clone()),
            _ => Err(DecodeError::BadBackRef { offset, index }.into()),
        }
    }

    /// A value that will be hashed (set element, dict key, frozenset item).
    pub(super) fn hashed_value(&mut self, r: &mut Reader<'_>, depth: usize) -> Out<'py> {
        let (offset, start) = (r.position(), self.expanded);
        let value = self.value(r, depth)?;
        if self.expanded - start > self.hash_budget {
            return Err(DecodeError::OutOfRange { offset, what: "shared values expanding beyond what can be hashed" }.into());
        }
        Ok(value)
    }

    pub(super) fn value_inner(&mut self, r: &mut Reader<'_>, depth: usize) -> Out<'py> {
        if depth > self.limits.max_depth {
            return Err(DecodeError::TooDeep { limit: self.limits.max_depth }.into());
        }
        let py = self.py;
        let offset = r.position();
        let t = r.u8()?;
        self.charge(memory::OF_TAG[usize::from(t)]);
        self.check_memory()?;
        Ok(match t {
            tag::NONE => py.None().into_bound(py),
            tag::FALSE => false.into_bound_py_any(py)?,
            tag::TRUE => true.into_bound_py_any(py)?,
            tag::INT => self.int(r.zigzag()?)?,
            tag::BIGINT => {
                let bytes = r.length_prefixed()?;
                if bytes.len() > self.limits.max_bigint_bytes {
                    return Err(DecodeError::OutOfRange { offset, what: "integer size" }.into());
                }
                allocation::int_from_le_bytes(py, bytes)?
            }
            tag::FLOAT => allocation::float(py, r.f64()?)?,
            tag::COMPLEX => {
                let (re, im) = (r.f64()?, r.f64()?);
                allocation::complex(py, re, im)?
            }
            tag::STR => {
                let text = r.length_prefixed()?;
                let (value, new) = match self.strings.as_deref_mut() {
                    Some(cache) if text.len() <= crate::strings::MAX_CACHED_LEN => cache.get(py, text)?,
                    _ => new_string(py, text)?.map(|value| (value, true)),
                }
                .ok_or(DecodeError::BadUtf8 { offset: offset + 1 })?;
                let shared = self.string_slots.is_some();
                self.charge(if new { memory::STR } else { 0 } + if shared { memory::SLOT } else { 0 });
                if let Some(slots) = self.string_slots.as_mut() {
                    slots.push(value.clone());
                }
                value
            }
            tag::STRREF if self.string_slots.is_some() => {
                let index = r.varint()?;
                let slots = self.string_slots.as_ref().expect("checked by the match guard");
                match slots.get(index as usize) {
                    Some(value) => value.clone(),
                    None => return Err(DecodeError::BadBackRef { offset, index }.into()),
                }
            }
            tag::STR_SURROGATES => {
                let text = r.length_prefixed()?;
                // SAFETY: `text` is valid for its length; the call returns a new str, or null
                // with an exception set.
                let decoded = unsafe {
                    Bound::from_owned_ptr_or_err(
                        py,
                        ffi::PyUnicode_DecodeUTF8(text.as_ptr().cast(), text.len() as ffi::Py_ssize_t, c"surrogatepass".as_ptr()),
                    )
                };
                decoded.or_corrupt(py, || DecodeError::BadUtf8 { offset })?
            }
            tag::BYTES => allocation::bytes(py, r.length_prefixed()?)?,
            tag::BYTEARRAY => {
                let value = allocation::bytearray(py, r.length_prefixed()?)?;
                self.memo.push(Some(value.clone()));
                value
            }
            tag::LIST => {
                let count = r.length(1)?;
                self.list_items(r, count, depth)?
            }
            tag::OBJECT_LIST if self.typed_objects => {
                let count = r.length(1)?;
                self.object_list(r, count, offset + 1, depth)?
            }
            tag::DICT => {
                let dict = allocation::dict(py)?;
                self.memo.push(Some(dict.clone().into_any()));
                self.fill_dict(r, &dict, depth)?;
                dict.into_any()
            }
            tag::SET => {
                let set = PySet::empty(py)?;
                self.memo.push(Some(set.clone().into_any()));
                let count = r.length(1)?;
                self.charge(count * memory::SET_ITEM);
                for _ in 0..count {
                    let item = self.hashed_value(r, depth + 1)?;
                    set.add(item).or_corrupt(py, || unhashable(offset))?;
                }
                set.into_any()
            }
            tag::TUPLE | tag::FROZENSET => {
                let slot = self.memo.len();
                self.memo.push(None);
                let items = if t == tag::TUPLE { self.items(r, depth)? } else { self.hashed_items(r, depth)? };
                let value = if t == tag::TUPLE {
                    allocation::tuple(py, items)?.into_any()
                } else {
                    PyFrozenSet::new(py, items).or_corrupt(py, || unhashable(offset))?.into_any()
                };
                self.memo[slot] = Some(value.clone());
                value
            }
            tag::SUPERSEDED_TUPLE if self.version_4_values => self.superseded_copy(r, &PyTuple::type_object(py), depth)?,
            tag::SUPERSEDED_FROZENSET if self.version_4_values => self.superseded_copy(r, &PyFrozenSet::type_object(py), depth)?,
            tag::DATETIME => {
                let flags = r.tz_flags()?;
                let micros = r.zigzag()?;
                let tz = r.tz_suffix(flags)?;
                let days = micros.div_euclid(MICROS_PER_DAY);
                if !(copal_core::format::MIN_DAY..=copal_core::format::MAX_DAY).contains(&days) {
                    return Err(DecodeError::OutOfRange { offset, what: "datetime" }.into());
                }
                let (year, month, day) = civil_from_days(days);
                let (h, m, s, us) = clock(micros.rem_euclid(MICROS_PER_DAY));
                let year = i32::try_from(year).map_err(|_| DecodeError::OutOfRange { offset, what: "datetime" })?;
                let zone = self.zone(&tz, offset)?;
                PyDateTime::new_with_fold(py, year, month as u8, day as u8, h, m, s, us, zone.as_ref(), flags & tag::TZ_FOLD != 0)
                    .or_corrupt(py, || DecodeError::OutOfRange { offset, what: "datetime" })?
                    .into_any()
            }
            tag::DATE => {
                let days = r.zigzag()?;
                if !(copal_core::format::MIN_DAY..=copal_core::format::MAX_DAY).contains(&days) {
                    return Err(DecodeError::OutOfRange { offset, what: "date" }.into());
                }
                let (year, month, day) = civil_from_days(days);
                let year = i32::try_from(year).map_err(|_| DecodeError::OutOfRange { offset, what: "date" })?;
                PyDate::new(py, year, month as u8, day as u8)
                    .or_corrupt(py, || DecodeError::OutOfRange { offset, what: "date" })?
                    .into_any()
            }
            tag::TIME => {
                let flags = r.tz_flags()?;
                let micros = r.varint()?;
                let tz = r.tz_suffix(flags)?;
                if micros >= MICROS_PER_DAY as u64 {
                    return Err(DecodeError::OutOfRange { offset, what: "time of day" }.into());
                }
                let (h, m, s, us) = clock(micros as i64);
                let zone = self.zone(&tz, offset)?;
                PyTime::new_with_fold(py, h, m, s, us, zone.as_ref(), flags & tag::TZ_FOLD != 0)?.into_any()
            }
            tag::TIMEDELTA => {
                let days = r.zigzag()?;
                let seconds = r.varint()?;
                let micros = r.varint()?;
                let bad = || DecodeError::OutOfRange { offset, what: "timedelta" };
                let days = i32::try_from(days).map_err(|_| bad())?;
                if seconds >= 86_400 || micros >= 1_000_000 {
                    return Err(bad().into());
                }
                PyDelta::new(py, days, seconds as i32, micros as i32, false).or_corrupt(py, bad)?.into_any()
            }
            tag::DECIMAL => {
                let text = r.str()?;
                if !copal_core::format::is_decimal_text(text) {
                    return Err(DecodeError::OutOfRange { offset, what: "decimal" }.into());
                }
                pytypes::decimal_type(py)?
                    .call1((allocation::str(py, text)?,))
                    .or_corrupt(py, || DecodeError::OutOfRange { offset, what: "decimal" })?
            }
            tag::UUID => {
                let bytes = allocation::bytes(py, &r.array::<16>()?)?;
                let kwargs = allocation::dict(py)?;
                kwargs.set_item(crate::allocation::interned!(py, "bytes")?, bytes)?;
                pytypes::uuid_type(py)?.call((), Some(&kwargs))?
            }
            tag::ENUM => {
                let info = self.resolver.descriptor(py, r.u32_varint()?)?;
                let name = r.str()?;
                let class = self.resolver.class_of(py, &info)?;
                if !class.is_subclass(pytypes::enum_type(py)?)? {
                    return Err(Fail::Python(SchemaError::new_err(format!("stored enum type {:?} is not an Enum", info.type_name))));
                }
                enum_member(&class, &info.type_name, name)?
            }
            tag::REF => {
                let class = r.varint()?;
                let seq = r.varint()?;
                let class = u16::try_from(class).map_err(|_| DecodeError::OutOfRange { offset, what: "class number" })?;
                if seq > copal_core::format::MAX_SEQ {
                    return Err(DecodeError::OutOfRange { offset, what: "object sequence number" }.into());
                }
                let obj = self.resolver.object(py, make_oid(class, seq))?;
                if let Some(refs) = self.ghost_refs.as_mut() {
                    if crate::persistent::PersistentBase::of(&obj).is_ok_and(|p| p.state() == crate::persistent::GHOST) {
                        refs.push(obj.clone());
                    }
                }
                obj
            }
            tag::OBJECT => {
                let id = r.u32_varint()?;
                self.object(r, id, false, depth)?
            }
            tag::TYPED_OBJECT if self.typed_objects => {
                let id = r.u32_varint()?;
                self.object(r, id, true, depth)?
            }
            tag::SUBCLASS => self.subclass(r, depth)?,
            tag::BACKREF => {
                let index = r.varint()?;
                self.backref(index, offset)?
            }
            other => return Err(DecodeError::UnknownTag { offset, tag: other }.into()),
        })
    }

    pub(super) fn zone(&self, tz: &TzInfo, offset: usize) -> Result<Option<Bound<'py, PyTzInfo>>, Fail> {
        self.resolver.zone(self.py, tz).or_corrupt(self.py, || DecodeError::OutOfRange { offset, what: "time zone" })
    }

    /// Decodes one standalone value at depth 0 from `r`, which must hold nothing after it
    /// (standalone streams, docs/STREAM.md).
    pub fn standalone(&mut self, r: &mut Reader<'_>) -> PyResult<Bound<'py, PyAny>> {
        self.set_budgets(r.remaining());
        let result = self.value(r, 0).and_then(|value| {
            r.expect_end()?;
            self.check_memory()?;
            Ok(value)
        });
        self.finish(result)
    }
}

impl<'py, R: Resolver<'py>, const BOUNDED: bool> Drop for Decoder<'_, 'py, R, BOUNDED> {
    fn drop(&mut self) {
        let strings = self.string_slots.take().unwrap_or_else(|| std::mem::take(&mut self.spare_strings));
        let mut weights = std::mem::take(&mut self.slot_weights);
        weights.clear();
        // Emptying the buffers releases the decoded values they hold, which may run Python code
        // (even a nested decoding, which takes and gives back its own buffers first).
        let spare = Spare {
            memo: to_spare(std::mem::take(&mut self.memo)),
            strings: to_spare(strings),
            weights: if weights.capacity() <= MAX_SPARE_SLOTS { weights } else { Vec::new() },
        };
        SPARE.with(|cell| cell.set(Some(spare)));
    }
}

/// The buffers of the last decoder dropped on this thread, empty but keeping their capacity,
/// for the next one. A large `loads` fills its memo, string slots and slot weights page by
/// page; with fresh buffers every call paid those page faults again (1,400 pages for seed 003,
/// at 2 to 7 µs each on a virtual machine), and a small one allocated them each time.
/// The memo and the strings hold Python objects only while a decoder uses them: kept here they
/// are empty, and stored as `usize`s (the same size and alignment) since they outlive the GIL
/// token their elements were bound to.
#[derive(Default)]
struct Spare {
    memo: Vec<usize>,
    strings: Vec<usize>,
    weights: Vec<u64>,
}

thread_local! {
    static SPARE: Cell<Option<Spare>> = const { Cell::new(None) };
}

/// The most slots a spare buffer keeps (4 MiB each): enough for a stream of 500,000 objects
/// and strings, without holding the memory of the largest stream a thread ever read.
const MAX_SPARE_SLOTS: usize = 1 << 19;

/// `buffer` emptied, as a spare (its capacity, if not above MAX_SPARE_SLOTS).
fn to_spare<T>(mut buffer: Vec<T>) -> Vec<usize> {
    assert!(size_of::<T>() == size_of::<usize>() && align_of::<T>() == align_of::<usize>());
    buffer.clear();
    if buffer.capacity() > MAX_SPARE_SLOTS {
        return Vec::new();
    }
    let mut buffer = std::mem::ManuallyDrop::new(buffer);
    // SAFETY: an empty buffer whose allocation is handed over whole, to a Vec of a type of the
    // same size and alignment (asserted above), so the allocation's layout is unchanged.
    unsafe { Vec::from_raw_parts(buffer.as_mut_ptr().cast::<usize>(), 0, buffer.capacity()) }
}

/// A spare buffer as an empty Vec of `T`.
fn from_spare<T>(spare: Vec<usize>) -> Vec<T> {
    assert!(size_of::<T>() == size_of::<usize>() && align_of::<T>() == align_of::<usize>());
    let mut spare = std::mem::ManuallyDrop::new(spare);
    // SAFETY: as in `to_spare`: empty, same layout; no element of `T` is read from it.
    unsafe { Vec::from_raw_parts(spare.as_mut_ptr().cast::<T>(), 0, spare.capacity()) }
}

/// A new Python time zone for `tz` (None when naive): `timezone.utc`, a fixed-offset
/// `datetime.timezone`, or a `zoneinfo.ZoneInfo` (resolvers cache them by key).
pub fn new_zone<'py>(py: Python<'py>, tz: &TzInfo) -> PyResult<Option<Bound<'py, PyTzInfo>>> {
    Ok(Some(match tz {
        TzInfo::Naive => return Ok(None),
        TzInfo::Offset(0) => PyTzInfo::utc(py)?.to_owned(),
        TzInfo::Offset(micros) => {
            let days = micros.div_euclid(86_400_000_000) as i32;
            let rest = micros.rem_euclid(86_400_000_000);
            let delta = PyDelta::new(py, days, (rest / 1_000_000) as i32, (rest % 1_000_000) as i32, true)?;
            pytypes::timezone_type(py)?.call1((delta,))?.cast_into::<PyTzInfo>()?
        }
        TzInfo::Named(name) => pytypes::zoneinfo_type(py)?.call1((allocation::str(py, name)?,))?.cast_into::<PyTzInfo>()?,
    }))
}

/// The ints whose objects `Decoder::int` shares: those CPython keeps one object of (its small
/// ints), so that they are the same objects as elsewhere in the process.
const SMALL_INTS: std::ops::RangeInclusive<i64> = -5..=256;

/// The objects of the ints in `SMALL_INTS`, made once; empty if they could not be made (ints are
/// then made one by one).
pub(super) fn small_ints(py: Python<'_>) -> &'static [Py<PyAny>] {
    static CELL: pyo3::sync::PyOnceLock<Box<[Py<PyAny>]>> = pyo3::sync::PyOnceLock::new();
    CELL.get_or_try_init(py, || SMALL_INTS.map(|value| value.into_py_any(py)).collect::<PyResult<Box<[_]>>>())
        .map_or(&[], |ints| ints)
}

/// The object of `value` among `small_ints` (the objects of `SMALL_INTS`), if it is there.
#[inline]
pub(super) fn small_int(small_ints: &'static [Py<PyAny>], value: i64) -> Option<&'static Py<PyAny>> {
    small_ints.get(usize::try_from(value.wrapping_sub(*SMALL_INTS.start()) as u64).ok()?)
}

/// How many expanded values a hashed value of an input of `len` bytes may hold: proportional to
/// the input, so hashing costs at most a constant factor more than reading it.
pub(super) fn expansion_budget(len: usize) -> u64 {
    16 * len as u64 + 1024
}

pub(super) fn unhashable(offset: usize) -> DecodeError {
    DecodeError::OutOfRange { offset, what: "unhashable set element or dict key" }
}

/// A Python error that stands for corrupt input (a value out of range, an unhashable key), as
/// the corruption it stands for, unless it is a MemoryError: that is passed on, since the
/// input may be fine.
pub(super) trait OrCorrupt<T> {
    fn or_corrupt(self, py: Python<'_>, corruption: impl FnOnce() -> DecodeError) -> Result<T, Fail>;
}

impl<T> OrCorrupt<T> for PyResult<T> {
    fn or_corrupt(self, py: Python<'_>, corruption: impl FnOnce() -> DecodeError) -> Result<T, Fail> {
        self.map_err(|error| if allocation::is_memory_error(py, &error) { Fail::Python(error) } else { Fail::Decode(corruption()) })
    }
}

pub(super) fn clock(micros_of_day: i64) -> (u8, u8, u8, u32) {
    let seconds = micros_of_day / MICROS_PER_SECOND;
    (
        (seconds / 3600) as u8,
        ((seconds / 60) % 60) as u8,
        (seconds % 60) as u8,
        (micros_of_day % MICROS_PER_SECOND) as u32,
    )
}
