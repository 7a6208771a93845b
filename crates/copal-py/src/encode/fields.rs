//! The fields of an object: where they are read from (`FieldSource`: an instance dict, inline
//! values, slots), the kinds of typed fields, and the `Encoder` methods that write the fields of
//! an OBJECT or TYPED_OBJECT.

use copal_core::format::{tag, FieldKind, ListHead, ObjectField, StringForm, Writer};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::cpython::{made_dict, Changed, DictTable, Holder, MadeDict, OwnArray, ValuesFields};
use crate::dict_items::{Cursor, Next};
use crate::persistent::instance_dict;
use crate::slots::SlotFields;

use super::scalars::utf8_text;
use super::{at, Encoder, Failure, Step, MAX_DEPTH};

/// The kind of field that `v` can be written in without a tag (docs/STREAM.md section 5):
/// exact types only, since a subclass would be read back as its base type.
pub fn field_kind_of(v: &Bound<'_, PyAny>) -> PyResult<FieldKind> {
    for kind in [FieldKind::Str, FieldKind::Int, FieldKind::Float, FieldKind::List] {
        if has_type_of_kind(v.as_ptr(), kind) && has_form_of_kind(v, kind)? {
            return Ok(kind);
        }
    }
    Ok(FieldKind::Any)
}

/// Whether the type of `v` is the exact type of the values of `kind` (a kind other than
/// `Any`), compared by type pointer as the C API's exact checks do: the test of every value of
/// an object written as a TYPED_OBJECT. pyo3's `cast_exact` would take and drop a reference to
/// the type object it compares with when the test fails, two writes to a shared line per test.
#[inline]
fn has_type_of_kind(v: *mut ffi::PyObject, kind: FieldKind) -> bool {
    // SAFETY: `v` is a live object; only its type is read.
    unsafe {
        match kind {
            FieldKind::Str => ffi::PyUnicode_CheckExact(v) != 0,
            FieldKind::Int => ffi::PyLong_CheckExact(v) != 0,
            FieldKind::Float => ffi::PyFloat_CheckExact(v) != 0,
            FieldKind::List => ffi::PyList_CheckExact(v) != 0,
            FieldKind::Any => false,
        }
    }
}

/// Whether `v`, whose type is that of `kind`'s values, has the form of `kind`: the values of
/// those types that do not are strs with lone surrogates (they are STR_SURROGATES) and ints
/// beyond 64 bits (also when the OverflowError saying so could not be made).
fn has_form_of_kind(v: &Bound<'_, PyAny>, kind: FieldKind) -> PyResult<bool> {
    Ok(match kind {
        // SAFETY: the caller checked that `v` is a str.
        FieldKind::Str => utf8_text(unsafe { v.cast_unchecked::<PyString>() })?.is_some(),
        FieldKind::Int => v.extract::<i64>().is_ok(),
        FieldKind::Float | FieldKind::List | FieldKind::Any => true,
    })
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

/// The fields of the object being written, read once (`Encoder::with_fields`): `len` entries of
/// `Encoder::held` from `base`, and the position of the field source after the last of them.
#[derive(Clone, Copy)]
pub(super) struct Held {
    pub(super) base: usize,
    pub(super) len: usize,
    after_last: ffi::Py_ssize_t,
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

impl<'s> Encoder<'s> {
    /// The fields of an object, `held`, as an OBJECT, or as a TYPED_OBJECT when its descriptor
    /// has field kinds that its values fit.
    pub(super) fn object_fields<'py>(&mut self, descriptor: u32, fields: &impl FieldSource<'py>, held: Held, depth: usize) -> Step {
        if let Some(kinds) = self.sink.field_kinds(descriptor).filter(|kinds| self.fits_kinds(fields.py(), held, kinds)) {
            let mark = self.mark();
            self.w.u8(tag::TYPED_OBJECT);
            self.w.varint(u64::from(descriptor));
            if self.typed_fields(descriptor, fields, held, &kinds, depth)? {
                return Ok(());
            }
            self.rewind(mark);
        }
        self.w.u8(tag::OBJECT);
        self.w.varint(u64::from(descriptor));
        self.held_fields(fields, held, depth)
    }

    /// The fields `held` of a TYPED_OBJECT of `descriptor`, whose values have the types of
    /// `kinds` (`fits_kinds`), each in the form of its kind. False, with the fields before it
    /// written, at a value that has its kind's type but not its form (`has_form_of_kind`): the
    /// caller undoes the object and writes it otherwise.
    pub(super) fn typed_fields<'py>(
        &mut self,
        descriptor: u32,
        fields: &impl FieldSource<'py>,
        held: Held,
        kinds: &[FieldKind],
        depth: usize,
    ) -> Result<bool, Failure> {
        let py = fields.py();
        for (index, &kind) in kinds.iter().enumerate().take(held.len) {
            let (name, value) = self.held_field(py, held, index);
            let field = ObjectField { descriptor, index: index as u32 };
            if !at(self.typed_value(&value, kind, field, depth + 1), || format!(".{}", &*name))? {
                return Ok(false);
            }
        }
        // Writing strs, ints and floats of exact types runs no Python code that could change
        // the object (nor does reading their UTF-8 form, or a failed conversion, which
        // returned above).
        if kinds.iter().any(|kind| matches!(kind, FieldKind::Any | FieldKind::List)) {
            self.check_unchanged(fields, held)?;
        }
        Ok(true)
    }

    /// Reads the fields of `fields` once, holding a reference to each name and value, and
    /// calls `body` with them; the references are dropped when it returns. The values are then
    /// the same objects however Python code run while they are written changes the object:
    /// `each_held` refuses an object whose attributes were added or removed meanwhile.
    pub(super) fn with_fields<'py, R>(&mut self, fields: &impl FieldSource<'py>, body: impl FnOnce(&mut Self, Held) -> R) -> R {
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

    /// Whether every value of `held` has the type of its field's kind, so that the object can be
    /// written as a TYPED_OBJECT of these `kinds` (`typed_fields` checks their forms).
    pub(super) fn fits_kinds(&self, py: Python<'_>, held: Held, kinds: &[FieldKind]) -> bool {
        held.len == kinds.len()
            && kinds.iter().enumerate().all(|(index, &kind)| kind == FieldKind::Any || has_type_of_kind(self.held_field(py, held, index).1.as_ptr(), kind))
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
        self.check_unchanged(fields, held)
    }

    /// Refuses an object whose attributes were added or removed since `held` was read from
    /// `fields` (by Python code run while its values were written).
    fn check_unchanged<'py>(&self, fields: &impl FieldSource<'py>, held: Held) -> Step {
        let mut after_last = held.after_last;
        if fields.count() != held.len || fields.next_field(&mut after_last).is_some() {
            return Err(Failure::Unsupported { path: vec![], reason: "its attributes changed while it was being written".into() });
        }
        Ok(())
    }

    /// `v`, the value of `field`, in the form of its kind: false, with nothing written, if it
    /// has its kind's type but not its form (`has_form_of_kind`).
    fn typed_value(&mut self, v: &Bound<'_, PyAny>, kind: FieldKind, field: ObjectField, depth: usize) -> Result<bool, Failure> {
        if depth > MAX_DEPTH {
            return Err(Failure::Unsupported { path: vec![], reason: format!("values nested deeper than {MAX_DEPTH} levels") });
        }
        match kind {
            FieldKind::Any => self.value(v, depth)?,
            FieldKind::Int => match v.extract::<i64>() {
                Ok(int) => self.w.zigzag(int),
                Err(_) => return Ok(false),
            },
            FieldKind::Float => self.w.f64(v.extract::<f64>()?),
            FieldKind::Str => return Ok(self.shared_string(v.cast::<PyString>().map_err(PyErr::from)?, StringForm::Typed, Some(field))?),
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
        Ok(true)
    }

    /// The fields of `fields` as the values of an OBJECT (or a SUBCLASS).
    pub(super) fn fields<'py>(&mut self, fields: &impl FieldSource<'py>, depth: usize) -> Step {
        self.with_fields(fields, |this, held| this.held_fields(fields, held, depth))
    }

    /// The fields `held`, read from `fields`, as the values of an OBJECT.
    fn held_fields<'py>(&mut self, fields: &impl FieldSource<'py>, held: Held, depth: usize) -> Step {
        self.each_held(fields, held, |this, _, key, value| at(this.value(value, depth + 1), || format!(".{key}")))
    }
}
