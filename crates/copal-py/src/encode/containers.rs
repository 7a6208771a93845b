//! The built-in containers and the other built-in types of `Kind::Builtin`: lists (with their
//! lists of objects and runs of one item), tuples, dicts, sets and frozensets, and the known
//! containers of `collections`.

use std::rc::Rc;

use copal_core::format::calendar::{days_from_civil, MICROS_PER_DAY};
use copal_core::format::{repeat_tail, tag, FieldKind, StringForm, Writer};
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{
    PyByteArray, PyBytes, PyComplex, PyDate, PyDateAccess, PyDateTime, PyDelta, PyDeltaAccess, PyDict, PyFrozenSet, PyList,
    PySet, PyString, PyTime, PyTimeAccess, PyTuple, PyTzInfoAccess,
};
use pyo3::PyTypeInfo;

use crate::known_containers::{Items, KnownContainer};
use crate::persistent::instance_dict;
use crate::prefetch;
use crate::slots::SlotFields;

use super::classify::{has_instance_dict, Builtin, Kind};
use super::fields::FieldSource;
use super::scalars::{time_of_day_micros, tz_info};
use super::{at, list_changed_size, short_repr, Encoder, Failure, Mark, Step, Unfinished, MAX_DEPTH};

impl<'s> Encoder<'s> {
    /// Writes the items of tuple or frozenset `v` (or of a subclass of one), whose memo slot
    /// `slot` was just taken and whose TUPLE or FROZENSET tag (or SUBCLASS base) is at `tag_at`.
    /// If a copy of `v` written inside them finished first, this copy is superseded by it: its
    /// tag becomes SUPERSEDED_TUPLE or SUPERSEDED_FROZENSET (of the same length, so that no
    /// position written since moves) and that copy's slot follows the items (docs/STREAM.md
    /// section 5).
    pub(super) fn immutable_items<'py>(
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

    /// A value of `builtin`, the exact type of `v` (`Kind::Builtin`): one test of the class's
    /// kind, instead of a failed cast per type tested before it.
    pub(super) fn builtin(&mut self, v: &Bound<'_, PyAny>, builtin: Builtin, depth: usize) -> Step {
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
    pub(super) fn bytearray_blob(&mut self, bytearray: &Bound<'_, PyByteArray>) {
        // SAFETY: the buffer is only copied into the writer, which runs no Python code that could
        // resize it meanwhile.
        self.w.length_prefixed(unsafe { bytearray.as_bytes() });
    }

    /// Set elements sorted by their encoding: a set rebuilt from its record may iterate in
    /// another order, and an unchanged set must re-encode to the same bytes (commit-time change
    /// detection compares bytes). Each element is encoded once on trial, then the trial is undone.
    pub(super) fn canonical_order<'py>(&mut self, items: Vec<Bound<'py, PyAny>>, depth: usize) -> Result<Vec<Bound<'py, PyAny>>, Failure> {
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

    pub(super) fn list(&mut self, list: &Bound<'_, PyList>, depth: usize) -> Step {
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
    pub(super) fn object_list(&mut self, list: &Bound<'_, PyList>, depth: usize, head: impl Fn(&mut Writer, u64)) -> Result<bool, Failure> {
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
                if !this.fits_kinds(fields.py(), held, &kinds) {
                    return Ok(false);
                }
                if typed.is_none() {
                    head(&mut this.w, count as u64);
                    this.w.varint(u64::from(descriptor));
                    typed = Some((descriptor, Rc::clone(&kinds)));
                }
                // It takes its memo slot, without an identity-map entry: nothing else holds it.
                this.next_memo += 1;
                at(this.typed_fields(descriptor, &fields, held, &kinds, depth + 1), || format!("[{written}]"))
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

    pub(super) fn tuple(&mut self, t: &Bound<'_, PyTuple>, depth: usize) -> Step {
        if self.backref_or_slot(t.as_any())? {
            return Ok(());
        }
        let copy = (self.next_memo - 1, self.w.buf.len());
        self.w.u8(tag::TUPLE);
        self.immutable_items(t.as_any(), copy, t.len(), t.iter(), depth)
    }

    pub(super) fn dict(&mut self, dict: &Bound<'_, PyDict>, depth: usize) -> Step {
        self.mutable |= !(self.tracks_own && depth == 0);
        if self.backref_or_slot(dict.as_any())? {
            return Ok(());
        }
        self.w.u8(tag::DICT);
        self.pairs(dict, depth)
    }

    pub(super) fn items<'py>(&mut self, len: usize, items: impl Iterator<Item = Bound<'py, PyAny>>, depth: usize) -> Step {
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
    pub(super) fn list_values(&mut self, list: &Bound<'_, PyList>, len: usize, depth: usize) -> Step {
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
        // SAFETY: `ptr` is a live object; only its type is read (see `has_type_of_kind`).
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

    pub(super) fn pairs(&mut self, dict: &Bound<'_, PyDict>, depth: usize) -> Step {
        self.w.varint(dict.len() as u64);
        each_item(dict, |key, value| {
            at(self.value(&key, depth + 1), || format!("<key {}>", short_repr(&key)))?;
            at(self.value(&value, depth + 1), || format!("[{}]", short_repr(&key)))
        })?
        .map_err(Failure::Python)
    }

    /// An instance of a known container of `collections` (known_containers.rs): a SUBCLASS of
    /// its base tag with its items in its own order, then its state and its own fields.
    pub(super) fn known_container(&mut self, v: &Bound<'_, PyAny>, known: KnownContainer, depth: usize) -> Step {
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

pub(super) fn builtin_iter<'py>(v: &Bound<'py, PyAny>, base: u8) -> PyResult<Vec<Bound<'py, PyAny>>> {
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

/// Calls `each` with the items of `dict`, which Python code run by `each` (an enum's `_name_`,
/// say) may change: pyo3's iterator would panic then, and a count written before the items would
/// no longer match, so a dict whose size changed is refused after its last item. Items are read
/// with `PyDict_Next`, which checks its bounds at each call.
pub(super) fn each_item<'py, E>(
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
