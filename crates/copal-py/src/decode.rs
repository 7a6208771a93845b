//! copal bytes -> Python objects, directly (no intermediate tree). Only the value types of
//! docs/FORMAT.md and classes resolved by `classes::resolve` are ever instantiated, and plain
//! instances are created with `object.__new__`: decoding runs no code named by the data.

use copal_core::format::calendar::{civil_from_days, MICROS_PER_DAY, MICROS_PER_SECOND};
use copal_core::format::{tag, DecodeError, FieldKind, Limits, ListHead, Reader, RecordHeader, StrHead, TzInfo};
use copal_core::format::{make_oid, zigzag_decode};
use pyo3::prelude::*;
use pyo3::types::{
    PyByteArray, PyDate, PyDateTime, PyDelta, PyDict, PyFrozenSet, PyList, PySet,
    PyString, PyTime, PyTuple, PyTzInfo, PyType,
};
use pyo3::{ffi, IntoPyObjectExt, PyTypeInfo};
use std::cell::{Cell, OnceCell};
use std::rc::Rc;
use std::sync::Arc;

use crate::hashing::IntMap;
use crate::allocation;
use crate::errors::{corrupt, SchemaError};
use crate::instance_values::FieldSlots;
use crate::known_containers::KnownContainer;
use crate::list_builder::ListBuilder;
use crate::pytypes;
use crate::strings::new_string;

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

pub struct Decoder<'r, 'py, R: Resolver<'py>> {
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
struct Target<'py> {
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
const MAX_REMEMBERED_TARGETS: usize = 1024;

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

type Out<'py> = Result<Bound<'py, PyAny>, Fail>;

impl<'r, 'py, R: Resolver<'py>> Decoder<'r, 'py, R> {
    pub fn new(py: Python<'py>, resolver: &'r R, what: &'r dyn Fn() -> String) -> Self {
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

    /// The budgets of decoding an input of `len` bytes.
    fn set_budgets(&mut self, len: usize) {
        self.hash_budget = expansion_budget(len);
        self.preallocation_budget = len;
    }

    /// An empty list with room for `count` items, within `preallocation_budget`.
    fn new_list(&mut self, count: usize) -> Result<ListBuilder<'py>, Fail> {
        let room = if count <= self.preallocation_budget { count } else { 0 };
        self.preallocation_budget -= room;
        Ok(ListBuilder::with_capacity(self.py, room)?)
    }

    /// The int `value`: one of the shared objects of small ints, or a new int.
    #[inline]
    fn int(&self, value: i64) -> PyResult<Bound<'py, PyAny>> {
        match self.small_int(value) {
            Some(int) => Ok(int.clone()),
            None => allocation::int(self.py, value),
        }
    }

    /// The shared object of `value` if it is in `SMALL_INTS`.
    #[inline]
    fn small_int(&self, value: i64) -> Option<&Bound<'py, PyAny>> {
        small_int(self.small_ints, value).map(|int| int.bind(self.py))
    }

    fn finish<T>(&self, result: Result<T, Fail>) -> PyResult<T> {
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

    fn value(&mut self, r: &mut Reader<'_>, depth: usize) -> Out<'py> {
        let (start, own_slot) = (self.expanded, self.memo.len());
        let value = self.value_inner(r, depth)?;
        self.count_expanded(start, own_slot);
        Ok(value)
    }

    /// Counts a value just read (that started when `expanded` was `start` and the memo had
    /// `own_slot` slots) for `hash_budget`.
    fn count_expanded(&mut self, start: u64, own_slot: usize) {
        self.expanded = self.expanded.saturating_add(1);
        // A value that takes a memo slot takes it before its children do.
        if self.memo.len() > own_slot {
            self.slot_weights.resize(self.memo.len(), 0);
            self.slot_weights[own_slot] = self.expanded - start;
        }
    }

    /// A field of a TYPED_OBJECT, written in the form of its `kind` (docs/STREAM.md section 5).
    fn typed_field(&mut self, r: &mut Reader<'_>, kind: FieldKind, depth: usize) -> Out<'py> {
        if kind == FieldKind::Any {
            return self.value(r, depth);
        }
        // Untagged values nest like tagged ones (FORMAT.md's depth limit counts values).
        if depth > self.limits.max_depth {
            return Err(DecodeError::TooDeep { limit: self.limits.max_depth }.into());
        }
        let py = self.py;
        let (start, own_slot) = (self.expanded, self.memo.len());
        let value = match kind {
            FieldKind::Int => self.int(r.zigzag()?)?,
            FieldKind::Float => allocation::float(py, r.f64()?)?,
            FieldKind::Str => {
                let offset = r.position();
                let slots = self.string_slots.get_or_insert_with(Vec::new);
                match StrHead::decode(r.varint()?) {
                    StrHead::New(len) => {
                        let len = r.fitting_length(offset, len, 1)?;
                        let text = r.bytes(len)?;
                        let value = new_string(py, text)?.ok_or(DecodeError::BadUtf8 { offset })?;
                        slots.push(value.clone());
                        value
                    }
                    StrHead::Slot(index) => match slots.get(index as usize) {
                        Some(value) => value.clone(),
                        None => return Err(DecodeError::BadBackRef { offset, index }.into()),
                    },
                }
            }
            FieldKind::List => {
                let offset = r.position();
                match ListHead::read(r)? {
                    ListHead::Items(count) => {
                        let count = r.fitting_length(offset, count, 1)?;
                        self.list_items(r, count, depth)?
                    }
                    ListHead::Objects(count) => {
                        let count = r.fitting_length(offset, count, 1)?;
                        self.object_list(r, count, depth)?
                    }
                    ListHead::Backref(index) => self.backref(index, offset)?,
                }
            }
            FieldKind::Any => return self.value(r, depth),
        };
        self.count_expanded(start, own_slot);
        Ok(value)
    }

    /// A LIST of `count` tagged items (the count already read and checked).
    fn list_items(&mut self, r: &mut Reader<'_>, count: usize, depth: usize) -> Out<'py> {
        let mut list = self.new_list(count)?;
        self.memo.push(Some(list.list().clone().into_any()));
        // Items nest one level deeper; scalars no further, so past the limit only `value`
        // (which refuses them) reads them.
        let scalars_fit = depth < self.limits.max_depth;
        let mut left = count;
        while left > 0 {
            if scalars_fit {
                left -= self.shared_scalars(r, &mut list, left)?;
                if left == 0 {
                    break;
                }
            }
            list.push(self.value(r, depth + 1)?)?;
            left -= 1;
        }
        Ok(list.into_any())
    }

    /// Reads into `list` the run of at most `max` items at `r` that are objects the decoder
    /// already has (INTs of `SMALL_INTS`, and in a stream with shared strings STRREFs), with
    /// varints of one or two bytes, and returns how many it read. They are what lists of numbers
    /// and of repeated strings are made of; read by `value`, each cost a call, a large stack
    /// frame and a jump over every tag, and was half the time of decoding such lists. Other
    /// items (and errors) are left to `value`.
    fn shared_scalars(&mut self, r: &mut Reader<'_>, list: &mut ListBuilder<'py>, max: usize) -> Result<usize, Fail> {
        let data = r.rest();
        let slots: &[Bound<'py, PyAny>] = self.string_slots.as_deref().unwrap_or_default();
        let shares_strings = self.string_slots.is_some();
        let (small_ints, py) = (self.small_ints, self.py);
        let mut position = 0;
        let mut left = max;
        let next = || {
            if left == 0 {
                return None;
            }
            let (tag, first) = (*data.get(position)?, *data.get(position + 1)?);
            let (operand, length) = if first < 0x80 {
                (u64::from(first), 2)
            } else {
                let second = *data.get(position + 2)?;
                if second >= 0x80 {
                    return None;
                }
                (u64::from(first & 0x7f) | u64::from(second) << 7, 3)
            };
            let item = match tag {
                tag::INT => {
                    small_int(small_ints, zigzag_decode(operand))?.bind(py)
                }
                tag::STRREF if shares_strings => slots.get(operand as usize)?,
                _ => return None,
            };
            position += length;
            left -= 1;
            Some(item)
        };
        // SAFETY: a small int lives as long as the process (`small_ints`), a string of
        // `string_slots` as long as the decoder, and `next` runs no Python code.
        let read = unsafe { list.extend_shared(next)? };
        r.bytes(position)?;
        self.expanded = self.expanded.saturating_add(read as u64);
        Ok(read)
    }

    /// The body of an OBJECT_LIST after its count: the descriptor id, then `count` TYPED_OBJECT
    /// bodies, each taking its memo slot after the list's.
    fn object_list(&mut self, r: &mut Reader<'_>, count: usize, depth: usize) -> Out<'py> {
        let mut list = self.new_list(count)?;
        self.memo.push(Some(list.list().clone().into_any()));
        let id = r.u32_varint()?;
        if depth + 1 > self.limits.max_depth && count > 0 {
            return Err(DecodeError::TooDeep { limit: self.limits.max_depth }.into());
        }
        // The descriptor and class are looked up once for all the objects (and checked even
        // for none, as the id of an OBJECT is).
        let target = self.object_target(id)?;
        for _ in 0..count {
            let (start, own_slot) = (self.expanded, self.memo.len());
            let item = self.object_of(r, id, &target, true, depth + 1)?;
            self.count_expanded(start, own_slot);
            list.push(item)?;
        }
        Ok(list.into_any())
    }

    fn backref(&mut self, index: u64, offset: usize) -> Out<'py> {
        let weight = self.slot_weights.get(index as usize).copied().unwrap_or(0);
        self.expanded = self.expanded.saturating_add(weight);
        match self.memo.get(index as usize) {
            Some(Some(value)) => Ok(value.clone()),
            _ => Err(DecodeError::BadBackRef { offset, index }.into()),
        }
    }

    /// A value that will be hashed (set element, dict key, frozenset item).
    fn hashed_value(&mut self, r: &mut Reader<'_>, depth: usize) -> Out<'py> {
        let (offset, start) = (r.position(), self.expanded);
        let value = self.value(r, depth)?;
        if self.expanded - start > self.hash_budget {
            return Err(DecodeError::OutOfRange { offset, what: "shared values expanding beyond what can be hashed" }.into());
        }
        Ok(value)
    }

    fn value_inner(&mut self, r: &mut Reader<'_>, depth: usize) -> Out<'py> {
        if depth > self.limits.max_depth {
            return Err(DecodeError::TooDeep { limit: self.limits.max_depth }.into());
        }
        let py = self.py;
        let offset = r.position();
        let t = r.u8()?;
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
                let value = match self.strings.as_deref_mut() {
                    Some(cache) if text.len() <= crate::strings::MAX_CACHED_LEN => cache.get(py, text)?,
                    _ => new_string(py, text)?,
                };
                let value = value.ok_or(DecodeError::BadUtf8 { offset: offset + 1 })?;
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
                self.object_list(r, count, depth)?
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

    /// A superseded copy after its tag (docs/STREAM.md section 5): its items, read for the
    /// values they create and dropped, then the memo slot whose value it is. That slot must have
    /// been taken inside the copy and hold a value of exactly `class` (a finished tuple or
    /// frozenset, or an object of the SUBCLASS's class): a half-built value never escapes.
    fn superseded_copy(&mut self, r: &mut Reader<'_>, class: &Bound<'py, PyType>, depth: usize) -> Out<'py> {
        let slot = self.memo.len();
        self.memo.push(None);
        self.items(r, depth)?;
        let offset = r.position();
        let index = r.varint()?;
        match self.memo.get(index as usize) {
            Some(Some(value)) if index > slot as u64 && value.get_type().is(class) => {
                let value = value.clone();
                self.memo[slot] = Some(value.clone());
                Ok(value)
            }
            _ => Err(DecodeError::BadBackRef { offset, index }.into()),
        }
    }

    fn zone(&self, tz: &TzInfo, offset: usize) -> Result<Option<Bound<'py, PyTzInfo>>, Fail> {
        self.resolver.zone(self.py, tz).or_corrupt(self.py, || DecodeError::OutOfRange { offset, what: "time zone" })
    }

    /// The object of an OBJECT (`typed` false) or TYPED_OBJECT of descriptor `id`, from its
    /// fields on. It takes the next memo slot before its fields are read.
    fn object(&mut self, r: &mut Reader<'_>, id: u32, typed: bool, depth: usize) -> Out<'py> {
        let target = self.object_target(id)?;
        self.object_of(r, id, &target, typed, depth)
    }

    /// The descriptor `id` and its class (see `Target`), looked up once per decoding.
    fn object_target(&mut self, id: u32) -> Result<Rc<Target<'py>>, Fail> {
        if let Some(Some(target)) = self.targets.get(id as usize) {
            return Ok(Rc::clone(target));
        }
        let py = self.py;
        let info = self.resolver.descriptor(py, id)?;
        let class = match self.resolver.class_of(py, &info) {
            Ok(class) => Some(class),
            Err(e) if e.is_instance_of::<SchemaError>(py) => None,
            Err(e) => return Err(e.into()),
        };
        let slots = OnceCell::new();
        if let Some(known) = class.as_ref().and_then(|class| self.resolver.known_slots(id, class)) {
            let _ = slots.set(Some(known));
        }
        let target = Rc::new(Target { info, class, slots });
        let index = id as usize;
        if index < MAX_REMEMBERED_TARGETS {
            if self.targets.len() <= index {
                self.targets.resize(index + 1, None);
            }
            self.targets[index] = Some(Rc::clone(&target));
        }
        Ok(target)
    }

    /// `object` with the descriptor and class looked up (`object_target`).
    fn object_of(
        &mut self,
        r: &mut Reader<'_>,
        id: u32,
        Target { info, class, slots }: &Target<'py>,
        typed: bool,
        depth: usize,
    ) -> Out<'py> {
        let py = self.py;
        let Some(class) = class else { return self.broken_object(r, info, typed, depth) };
        let obj = match self.resolver.instance(py, id, class)? {
            Some(obj) => obj,
            None => {
                // A class whose finalizer or property setters would run on values from the
                // data is not rebuilt: the object loads as a BrokenObject instead. A check that
                // ran out of memory says nothing about the class, and is not kept.
                let rebuildable = match info.rebuildable.get() {
                    Some(&rebuildable) => rebuildable,
                    None => match check_plain_class(class, info).and_then(|()| check_inert(class, info)) {
                        Ok(()) => *info.rebuildable.get_or_init(|| true),
                        Err(error) if allocation::is_memory_error(py, &error) => return Err(error.into()),
                        Err(_) => *info.rebuildable.get_or_init(|| false),
                    },
                };
                if !rebuildable {
                    return self.broken_object(r, info, typed, depth);
                }
                // object.__new__: `check_plain_class` (in `rebuildable`) made sure the class does
                // not override it.
                allocated_instance(class, std::ptr::addr_of_mut!(ffi::PyBaseObject_Type))?
            }
        };
        self.memo.push(Some(obj.clone()));
        let known_slots = slots.get();
        self.set_fields(r, &obj, info, known_slots.and_then(Option::as_deref), typed, depth + 1)?;
        if known_slots.is_none() {
            let learned = FieldSlots::of(class, &info.fields).map(Arc::new);
            if let Some(learned) = &learned {
                self.resolver.learned_slots(id, learned);
            }
            // Set by a nested object of the same descriptor meanwhile, `set` keeps that value.
            let _ = slots.set(learned);
        }
        Ok(obj)
    }

    /// Field `index` of `info` in an OBJECT (`typed` false) or a TYPED_OBJECT.
    fn field(&mut self, r: &mut Reader<'_>, info: &DecodeInfo, index: usize, typed: bool, depth: usize) -> Out<'py> {
        match info.kinds.get(index) {
            Some(&kind) if typed => self.typed_field(r, kind, depth),
            _ => self.value(r, depth),
        }
    }

    fn items(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<Vec<Bound<'py, PyAny>>, Fail> {
        let count = r.length(1)?;
        let mut items = Vec::with_capacity(count.min(copal_core::format::PREALLOCATE_MAX));
        for _ in 0..count {
            items.push(self.value(r, depth + 1)?);
        }
        Ok(items)
    }

    fn hashed_items(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<Vec<Bound<'py, PyAny>>, Fail> {
        let count = r.length(1)?;
        let mut items = Vec::with_capacity(count.min(copal_core::format::PREALLOCATE_MAX));
        for _ in 0..count {
            items.push(self.hashed_value(r, depth + 1)?);
        }
        Ok(items)
    }

    fn fill_dict(&mut self, r: &mut Reader<'_>, dict: &Bound<'py, PyDict>, depth: usize) -> Result<(), Fail> {
        let offset = r.position();
        let count = r.length(2)?;
        for _ in 0..count {
            let key = self.hashed_value(r, depth + 1)?;
            let value = self.value(r, depth + 1)?;
            dict.set_item(key, value).or_corrupt(self.py, || unhashable(offset))?;
        }
        Ok(())
    }

    /// Decodes one standalone value at depth 0 from `r`, which must hold nothing after it
    /// (standalone streams, docs/STREAM.md).
    pub fn standalone(&mut self, r: &mut Reader<'_>) -> PyResult<Bound<'py, PyAny>> {
        self.set_budgets(r.remaining());
        let result = self.value(r, 0).and_then(|value| {
            r.expect_end()?;
            Ok(value)
        });
        self.finish(result)
    }

    /// Sets the descriptor's fields as attributes of `obj`, bypassing any `__setattr__` of its
    /// class. On a fresh instance CPython then stores them in the compact form it uses for
    /// objects built by `__init__` (values sharing the class's key table), about a third of the
    /// memory of a separate dict.
    /// An embedded object of a class that cannot be found: a `copal.evolution.BrokenObject`
    /// holding the type name and the fields, written back as it was.
    fn broken_object(&mut self, r: &mut Reader<'_>, info: &DecodeInfo, typed: bool, depth: usize) -> Out<'py> {
        let py = self.py;
        let slot = self.memo.len();
        self.memo.push(None);
        let state = allocation::dict(py)?;
        for (index, field) in info.fields.iter().enumerate() {
            let value = self.field(r, info, index, typed, depth + 1)?;
            state.set_item(field.bind(py), value)?;
        }
        let obj = pytypes::broken_object_type(py)?.call1((allocation::str(py, &info.type_name)?, state))?;
        self.memo[slot] = Some(obj.clone());
        Ok(obj)
    }

    /// `depth` is the depth of the field values: 0 for the fields of a record. `slots`, where
    /// known, stores them without the lookups of `PyObject_GenericSetAttr` (instance_values.rs).
    fn set_fields(
        &mut self,
        r: &mut Reader<'_>,
        obj: &Bound<'py, PyAny>,
        info: &DecodeInfo,
        slots: Option<&FieldSlots>,
        typed: bool,
        depth: usize,
    ) -> Result<(), Fail> {
        if info.fixup.is_some() {
            if let Some(layout) = crate::slots::layout_of(&obj.get_type())? {
                return self.set_evolved_slots(r, obj, info, &layout, typed, depth);
            }
        }
        for (index, field) in info.fields.iter().enumerate() {
            let value = self.field(r, info, index, typed, depth)?;
            if slots.is_some_and(|slots| slots.store(obj, index, &value)) {
                continue;
            }
            // SAFETY: valid object, name and value pointers; the call takes its own references.
            let rc = unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), field.as_ptr(), value.as_ptr()) };
            if rc != 0 {
                return Err(PyErr::fetch(self.py).into());
            }
        }
        if let Some(fixup) = &info.fixup {
            fixup.bind(self.py).call1((obj, crate::persistent::instance_dict(obj)?))?;
        }
        Ok(())
    }

    /// `set_fields` for an object with slots and a fix-up: the fix-up edits the fields in a
    /// dict of their own, since slots are not in the instance dict, and the edited fields are
    /// then set (a field dropped by the fix-up is never set, which a class without `__dict__`
    /// would have no place for).
    fn set_evolved_slots(
        &mut self,
        r: &mut Reader<'_>,
        obj: &Bound<'py, PyAny>,
        info: &DecodeInfo,
        layout: &crate::slots::SlotLayout,
        typed: bool,
        depth: usize,
    ) -> Result<(), Fail> {
        let state = allocation::dict(self.py)?;
        for (index, field) in info.fields.iter().enumerate() {
            let value = self.field(r, info, index, typed, depth)?;
            state.set_item(field.bind(self.py), value)?;
        }
        if let Some(fixup) = &info.fixup {
            fixup.bind(self.py).call1((obj, &state))?;
        }
        for (name, value) in state.iter() {
            let is_slot = layout.fields.iter().any(|slot| slot.name.bind(self.py).as_any().eq(&name).unwrap_or(false));
            if !is_slot && !layout.has_dict {
                return Err(Fail::Python(no_place_for(info, &name)));
            }
            // SAFETY: valid object, name and value pointers; the call takes its own references.
            if unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr()) } != 0 {
                return Err(PyErr::fetch(self.py).into());
            }
        }
        Ok(())
    }

    fn subclass(&mut self, r: &mut Reader<'_>, depth: usize) -> Out<'py> {
        let py = self.py;
        let mut info = self.resolver.descriptor(py, r.u32_varint()?)?;
        let class = self.resolver.class_of(py, &info)?;
        let offset = r.position();
        let base_tag = r.peek_u8()?;
        // A scalar base is read below as the value it is, from its tag on; a container's tag is
        // taken here.
        let scalar = crate::encode::scalar_base(py, base_tag).filter(|_| self.version_4_values);
        let is_scalar = scalar.is_some();
        let base: Bound<'py, PyType> = match scalar {
            Some(scalar) => scalar,
            None => match r.u8()? {
                tag::LIST => PyList::type_object(py),
                tag::DICT => PyDict::type_object(py),
                tag::SET => PySet::type_object(py),
                tag::TUPLE => PyTuple::type_object(py),
                tag::FROZENSET => PyFrozenSet::type_object(py),
                tag::SUPERSEDED_TUPLE if self.version_4_values => PyTuple::type_object(py),
                tag::SUPERSEDED_FROZENSET if self.version_4_values => PyFrozenSet::type_object(py),
                tag::BYTEARRAY if self.bytearray_bases => PyByteArray::type_object(py),
                other => return Err(DecodeError::UnknownTag { offset, tag: other }.into()),
            },
        };
        // An OrderedDict, defaultdict or deque (or a subclass) stored with its own base tag is
        // checked against, and rebuilt by, its C type (known_containers.rs).
        let known = KnownContainer::stored_as(base_tag, || self.known_container_of(&class))?;
        let base = match known {
            Some(known) => known.type_object(py)?.clone(),
            None => base,
        };
        let checked = (class.as_ptr() as usize, base.as_ptr() as usize, Arc::as_ptr(&info) as usize);
        let has_slots = match self.checked_subclasses.get(&checked) {
            Some(&has_slots) => has_slots,
            None => self.check_subclass(&class, &base, known, &info, checked)?,
        };
        let obj = if let Some(known) = known {
            self.known_container(r, known, &class, &mut info, depth)?
        } else if is_scalar {
            self.scalar_instance(r, &class, &base, depth)?
        } else if base_tag == tag::BYTEARRAY {
            self.bytearray_instance(r, &class, &base)?
        } else if base_tag == tag::SUPERSEDED_TUPLE || base_tag == tag::SUPERSEDED_FROZENSET {
            // The fields that follow are set on the value of the slot, as on any SUBCLASS value.
            self.superseded_copy(r, &class, depth)?
        } else if base_tag == tag::TUPLE || base_tag == tag::FROZENSET {
            let slot = self.memo.len();
            self.memo.push(None);
            let items = ListBuilder::of(py, self.items(r, depth)?)?;
            let obj = made_by_base(&class, base.as_type_ptr(), &(items,).into_pyobject(py)?).or_corrupt(py, || unhashable(offset))?;
            self.memo[slot] = Some(obj.clone());
            obj
        } else {
            let obj = allocated_instance(&class, base.as_type_ptr())?;
            self.memo.push(Some(obj.clone()));
            if base_tag == tag::DICT {
                // Into the instance's own table: `PyDict_SetItem` stores there without the
                // instance's `__setitem__`.
                self.fill_dict(r, obj.cast::<PyDict>().map_err(PyErr::from)?, depth)?;
            } else {
                let items = ListBuilder::of(py, self.items(r, depth)?)?;
                // The base's own C functions, as `list.extend(obj, items)` and
                // `set.update(obj, items)`: no method of the instance's class runs.
                // SAFETY: `obj` is an empty list or set (an instance of a subclass of one, made
                // by its constructor) and `items` a list; each call returns -1 with an exception
                // set on failure.
                let filled = unsafe {
                    if base_tag == tag::LIST {
                        ffi::PyList_SetSlice(obj.as_ptr(), 0, 0, items.as_ptr()) == 0
                    } else {
                        items.iter().all(|item| ffi::PySet_Add(obj.as_ptr(), item.as_ptr()) == 0)
                    }
                };
                if !filled {
                    return Err(PyErr::fetch(py)).or_corrupt(py, || unhashable(offset));
                }
            }
            obj
        };
        if has_slots || crate::encode::has_instance_dict(&obj) {
            self.set_fields(r, &obj, &info, None, false, depth + 1)?;
        } else if !info.fields.is_empty() {
            return Err(Fail::Python(SchemaError::new_err(format!(
                "stored type {:?} has fields but its class has neither __dict__ nor __slots__",
                info.type_name
            ))));
        }
        Ok(obj)
    }
}

impl<'r, 'py, R: Resolver<'py>> Decoder<'r, 'py, R> {
    /// The class checks of a SUBCLASS value of `class` stored as `base` with descriptor `info`
    /// (`subclass`), remembered under `checked`; returns whether the class has slots.
    #[inline(never)]
    fn check_subclass(
        &mut self,
        class: &Bound<'py, PyType>,
        base: &Bound<'py, PyType>,
        known: Option<KnownContainer>,
        info: &DecodeInfo,
        checked: (usize, usize, usize),
    ) -> Result<bool, Fail> {
        crate::class_cache::check_inert(class, info)?;
        if (known.is_none() && !crate::encode::is_python_class(class)) || !class.is_subclass(base)? {
            return Err(Fail::Python(SchemaError::new_err(format!(
                "stored type {:?} is not a subclass of {}",
                info.type_name,
                base.name()?
            ))));
        }
        if !crate::encode::rebuilt_by_base(class, base)? {
            return Err(Fail::Python(SchemaError::new_err(format!(
                "stored type {:?} cannot be rebuilt from the {} it is stored as: a class between them \
                 is not written in Python or makes its instances in its own __new__",
                info.type_name,
                base.name()?
            ))));
        }
        let has_slots = crate::slots::layout_of(class)?.is_some();
        self.checked_subclasses.insert(checked, has_slots);
        Ok(has_slots)
    }

    /// The instance of `class`, an OrderedDict, defaultdict or deque or a Python subclass of
    /// one, whose SUBCLASS base `r` is at (after its tag), in the SUBCLASS's memo slot; then
    /// its state field if it has one (known_containers.rs). `info` becomes the descriptor of
    /// the fields left, which are set as for any SUBCLASS.
    #[inline(never)]
    fn known_container(&mut self, r: &mut Reader<'_>, known: KnownContainer, class: &Bound<'py, PyType>, info: &mut Arc<DecodeInfo>, depth: usize) -> Out<'py> {
        let py = self.py;
        let obj = known.new_instance(class)?;
        self.memo.push(Some(obj.clone()));
        let items = match known {
            // A defaultdict is a dict: its pairs go into its own table (`PyDict_SetItem`, no
            // `__setitem__` of a subclass).
            KnownContainer::DefaultDict => {
                self.fill_dict(r, obj.cast::<PyDict>().map_err(PyErr::from)?, depth)?;
                None
            }
            KnownContainer::OrderedDict => {
                let pairs = allocation::dict(py)?;
                self.fill_dict(r, &pairs, depth)?;
                Some(pairs.into_any())
            }
            KnownContainer::Deque => Some(ListBuilder::of(py, self.items(r, depth)?)?.into_any()),
        };
        let (state, offset) = match known.state_field(py)? {
            Some(name) => {
                // Both are exact strs: comparing them runs no Python code.
                if !info.fields.first().is_some_and(|field| field.bind(py).as_any().eq(name).unwrap_or(false)) {
                    return Err(Fail::Python(SchemaError::new_err(format!(
                        "stored type {:?} does not have {name} as its first field, where its state is stored",
                        info.type_name
                    ))));
                }
                let offset = r.position();
                let state = self.value(r, depth + 1)?;
                let after_state = Arc::clone(info.after_state.get_or_init(|| {
                    let fields = info.fields[1..].iter().map(|field| field.clone_ref(py)).collect();
                    let fixup = info.fixup.as_ref().map(|fixup| fixup.clone_ref(py));
                    Arc::new(DecodeInfo::new(info.type_name.clone(), fields, fixup))
                }));
                *info = after_state;
                (state, offset)
            }
            None => (py.None().into_bound(py), r.position()),
        };
        known.fill(&obj, items.as_ref(), &state, offset)?;
        Ok(obj)
    }

    /// `KnownContainer::of(class)`, remembered for the decoding (`known_containers`).
    fn known_container_of(&mut self, class: &Bound<'py, PyType>) -> PyResult<Option<KnownContainer>> {
        let address = class.as_ptr() as usize;
        if let Some(&(_, known)) = self.known_containers.iter().find(|(known_class, _)| *known_class == address) {
            return Ok(known);
        }
        let known = KnownContainer::of(class)?;
        self.known_containers.push((address, known));
        Ok(known)
    }

    /// The instance of `class`, a subclass of scalar built-in `base`, whose value is the
    /// SUBCLASS base that `r` is at (docs/STREAM.md section 5), in the SUBCLASS's memo slot.
    /// Kept out of `subclass` (and `value_inner` read through `value`, its one caller, in which
    /// it stays inlined): streams without such values decode as fast as before they existed.
    #[inline(never)]
    fn scalar_instance(&mut self, r: &mut Reader<'_>, class: &Bound<'py, PyType>, base: &Bound<'py, PyType>, depth: usize) -> Out<'py> {
        // Not a STR value of the stream: a string base takes no string slot.
        let string_slots = self.string_slots.take();
        let value = self.value(r, depth);
        self.string_slots = string_slots;
        // The built-in's constructor copies the value into the new instance; no method of the
        // class runs.
        let obj = made_by_base(class, base.as_type_ptr(), &(value?,).into_pyobject(self.py)?)?;
        self.memo.push(Some(obj.clone()));
        Ok(obj)
    }

    /// The instance of `class`, a subclass of `bytearray` (`base`), whose SUBCLASS base blob `r`
    /// is at (after the BYTEARRAY byte; docs/STREAM.md section 5), in the SUBCLASS's memo slot.
    /// Out of line for the reason `scalar_instance` is.
    #[inline(never)]
    fn bytearray_instance(&mut self, r: &mut Reader<'_>, class: &Bound<'py, PyType>, base: &Bound<'py, PyType>) -> Out<'py> {
        let bytes = r.length_prefixed()?;
        // bytearray's own `__new__` makes it empty and its buffer is filled in place: no method
        // of the class runs, and a failed allocation is a MemoryError.
        let obj = allocated_instance(class, base.as_type_ptr())?;
        let buffer = obj.cast::<PyByteArray>().map_err(PyErr::from)?;
        buffer.resize(bytes.len())?;
        // SAFETY: the buffer was just made `bytes.len()` long, and no Python code runs while it
        // is written.
        unsafe { buffer.as_bytes_mut() }.copy_from_slice(bytes);
        self.memo.push(Some(obj.clone()));
        Ok(obj)
    }
}

impl<'py, R: Resolver<'py>> Drop for Decoder<'_, 'py, R> {
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

/// The member `name` of enum `class`, looked up in its member map (a plain dict: no metaclass
/// code runs). A composite Flag is named "A|B" and is rebuilt by or-ing its members; the empty
/// Flag is named "".
fn enum_member<'py>(class: &Bound<'py, PyType>, type_name: &str, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = class.py();
    let members = class.getattr(crate::allocation::interned!(py, "_member_map_")?)?;
    let member = |part: &str| match members.get_item(allocation::str(py, part)?) {
        Err(error) if allocation::is_memory_error(py, &error) => Err(error),
        Err(_) => Err(SchemaError::new_err(format!("enum {type_name} has no member {part:?}"))),
        found => found,
    };
    if !name.is_empty() && !name.contains('|') {
        return member(name);
    }
    if !class.is_subclass(pytypes::flag_type(class.py())?)? {
        return Err(SchemaError::new_err(format!("enum {type_name} has no member {name:?}")));
    }
    if name.is_empty() {
        return class.call1((0,));
    }
    let mut parts = name.split('|');
    let mut value = member(parts.next().unwrap_or_default())?;
    for part in parts {
        value = value.call_method1(crate::allocation::interned!(py, "__or__")?, (member(part)?,))?;
    }
    Ok(value)
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
fn small_ints(py: Python<'_>) -> &'static [Py<PyAny>] {
    static CELL: pyo3::sync::PyOnceLock<Box<[Py<PyAny>]>> = pyo3::sync::PyOnceLock::new();
    CELL.get_or_try_init(py, || SMALL_INTS.map(|value| value.into_py_any(py)).collect::<PyResult<Box<[_]>>>())
        .map_or(&[], |ints| ints)
}

/// The object of `value` among `small_ints` (the objects of `SMALL_INTS`), if it is there.
#[inline]
fn small_int(small_ints: &'static [Py<PyAny>], value: i64) -> Option<&'static Py<PyAny>> {
    small_ints.get(usize::try_from(value.wrapping_sub(*SMALL_INTS.start()) as u64).ok()?)
}

/// How many expanded values a hashed value of an input of `len` bytes may hold: proportional to
/// the input, so hashing costs at most a constant factor more than reading it.
fn expansion_budget(len: usize) -> u64 {
    16 * len as u64 + 1024
}

/// A new, empty instance of `class` made by the constructor of `base` (`object`, PersistentBase,
/// or the built-in base of a SUBCLASS value) with no arguments, called directly: no `__new__` or
/// `__init__` of `class` runs, and no Python call is made (records called
/// `object.__new__(class)`: a method lookup, an argument tuple and the wrapper's checks per
/// embedded object). See `made_by_base`.
pub(crate) fn allocated_instance<'py>(class: &Bound<'py, PyType>, base: *mut ffi::PyTypeObject) -> PyResult<Bound<'py, PyAny>> {
    made_by_base(class, base, &PyTuple::empty(class.py()))
}

/// `base.__new__(class, *args)`, by `base`'s constructor slot itself: through the attribute,
/// each value cost a method lookup, a wrapper that copies the arguments into a new tuple, and
/// its checks, which the callers make once per class instead: `class` is a subclass of `base`
/// whose classes between the two are written in Python and define no `__new__`
/// (`allocated_instance`'s callers, `encode::rebuilt_by_base`), so `base`'s constructor is the
/// one the wrapper would call.
pub(crate) fn made_by_base<'py>(class: &Bound<'py, PyType>, base: *mut ffi::PyTypeObject, args: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `base` is a live type object (a built-in type, or a class the caller holds), and
    // `class` a subtype of it as said above; the slot returns a new reference or null with an
    // exception set.
    unsafe {
        let tp_new = (*base).tp_new.ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("class cannot be instantiated"))?;
        Bound::from_owned_ptr_or_err(class.py(), tp_new(class.as_type_ptr(), args.as_ptr(), std::ptr::null_mut()))
    }
}

fn unhashable(offset: usize) -> DecodeError {
    DecodeError::OutOfRange { offset, what: "unhashable set element or dict key" }
}

/// A Python error that stands for corrupt input (a value out of range, an unhashable key), as
/// the corruption it stands for, unless it is a MemoryError: that is passed on, since the
/// input may be fine.
trait OrCorrupt<T> {
    fn or_corrupt(self, py: Python<'_>, corruption: impl FnOnce() -> DecodeError) -> Result<T, Fail>;
}

impl<T> OrCorrupt<T> for PyResult<T> {
    fn or_corrupt(self, py: Python<'_>, corruption: impl FnOnce() -> DecodeError) -> Result<T, Fail> {
        self.map_err(|error| if allocation::is_memory_error(py, &error) { Fail::Python(error) } else { Fail::Decode(corruption()) })
    }
}

fn clock(micros_of_day: i64) -> (u8, u8, u8, u32) {
    let seconds = micros_of_day / MICROS_PER_SECOND;
    (
        (seconds / 3600) as u8,
        ((seconds / 60) % 60) as u8,
        (seconds % 60) as u8,
        (micros_of_day % MICROS_PER_SECOND) as u32,
    )
}

/// Refuses a class whose instances would run its code with values from the stream: a
/// finalizer (`__del__` runs when the rebuilt object is collected, even if decoding fails later),
/// or a data descriptor (a property with a setter, `__class__`, `__dict__`) named like one of the
/// descriptor's fields, whose setter would run when the field is set; the class's own slots
/// (slots.rs) are where their fields go. Writers never produce
/// such streams: an instance's `__dict__` cannot hold an attribute that a data descriptor shadows.
/// The class's namespaces are read through `type`'s own descriptors, so no metaclass code runs.
pub fn check_inert<'py>(class: &Bound<'py, PyType>, info: &DecodeInfo) -> PyResult<()> {
    let py = class.py();
    let type_namespace = PyType::type_object(py).getattr(crate::allocation::interned!(py, "__dict__")?)?;
    let get = crate::allocation::interned!(py, "__get__")?;
    let mro = type_namespace.get_item(crate::allocation::interned!(py, "__mro__")?)?.call_method1(get, (class,))?;
    let namespace_of = type_namespace.get_item(crate::allocation::interned!(py, "__dict__")?)?;
    // A tuple, read as one: a Python iterator collected into a Vec asks for its length hint,
    // whose failure (out of memory) pyo3 prints as unraisable instead of returning it.
    let namespaces = mro.cast_into::<PyTuple>()?.iter().map(|base| namespace_of.call_method1(get, (base,))).collect::<PyResult<Vec<_>>>()?;
    let lookup = |name: &Bound<'py, PyAny>| -> PyResult<Option<Bound<'py, PyAny>>> {
        for namespace in &namespaces {
            if namespace.contains(name)? {
                return namespace.get_item(name).map(Some);
            }
        }
        Ok(None)
    };
    let refuse = |why: String| {
        Err(SchemaError::new_err(format!(
            "stored type {:?} {why}; copal does not rebuild it from data, where that code would run on \
             values chosen by the data",
            info.type_name
        )))
    };
    if lookup(crate::allocation::interned!(py, "__del__")?.as_any())?.is_some() {
        return refuse("has a finalizer (__del__)".into());
    }
    // A slot's member descriptor is where the field belongs: setting it runs no code of the class.
    let layout = crate::slots::layout_of(class)?;
    let is_slot = |attribute: &Bound<'py, PyAny>| layout.as_ref().is_some_and(|layout| layout.fields.iter().any(|slot| slot.member.is(attribute)));
    // The state of an OrderedDict, defaultdict or deque is no attribute: its C type sets it.
    let fields = &info.fields[KnownContainer::state_fields_of(class)?.min(info.fields.len())..];
    for field in fields {
        if let Some(attribute) = lookup(field.bind(py).as_any())? {
            // SAFETY: reading a slot of the live type object of `attribute`.
            let is_data_descriptor = unsafe { (*attribute.get_type().as_type_ptr()).tp_descr_set.is_some() };
            if is_data_descriptor && !is_slot(&attribute) {
                return refuse(format!("has a data descriptor (property, slot, ...) for its field {}", field.bind(py)));
            }
        }
    }
    // A class without `__dict__` has room for its slots only. (A fix-up may drop fields
    // first: `set_evolved_slots` checks what is left.)
    if let Some(layout) = layout.as_ref().filter(|layout| !layout.has_dict && info.fixup.is_none()) {
        let is_slot_name = |field: &Py<PyString>| layout.fields.iter().any(|slot| slot.name.bind(py).as_any().eq(field.bind(py)).unwrap_or(false));
        if let Some(field) = fields.iter().find(|field| !is_slot_name(field)) {
            return Err(no_place_for(info, field.bind(py)));
        }
    }
    Ok(())
}

/// A stored field that an object of a class with slots and no `__dict__` cannot hold.
fn no_place_for(info: &DecodeInfo, field: &Bound<'_, PyAny>) -> PyErr {
    SchemaError::new_err(format!(
        "stored type {:?} has a field {field} that its class has neither a slot nor a __dict__ for: add the \
         slot, or declare the field in __copal_removed__",
        info.type_name
    ))
}

pub fn check_plain_class(class: &Bound<'_, PyType>, info: &DecodeInfo) -> PyResult<()> {
    let persistent = class.is_subclass_of::<crate::persistent::PersistentBase>()?;
    if persistent || !crate::encode::is_python_class(class) || !crate::encode::new_is_object_new(class)? {
        return Err(SchemaError::new_err(format!(
            "stored type {:?} cannot be rebuilt by value (it is persistent, built in, or defines __new__)",
            info.type_name
        )));
    }
    Ok(())
}

