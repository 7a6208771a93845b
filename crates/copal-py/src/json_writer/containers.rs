//! Lists, tuples, dicts and sets: their items, in place where CPython's layout allows, and their
//! memo slots and tagged forms as the encoder and the transcoder have them.

use copal_core::text::json::grammar::{self, Tag};
use copal_core::text::TextOut;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyComplex, PyDate, PyDateTime, PyDelta, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PyString, PyTime, PyTuple};
use pyo3::PyTypeInfo;

use super::{JsonWriter, Step, Unhandled};
use crate::cpython::DictTable;
use crate::dict_items::{Cursor, DictNext, Next};
use crate::encode::Encoder;
use crate::prefetch;
use crate::pytypes;
use crate::standalone::StreamSink;
use crate::strings::str_text;

impl<'py> JsonWriter<'py> {
    /// `[...]` of `items`, held by the caller.
    fn items<'v>(&mut self, items: impl Iterator<Item = Borrowed<'v, 'py, PyAny>>, depth: usize) -> Step
    where
        'py: 'v,
    {
        self.out.push('[');
        for (index, item) in items.enumerate() {
            if index > 0 {
                self.out.push(',');
            }
            self.value(item, depth + 1)?;
        }
        self.out.push(']');
        Ok(())
    }

    pub(super) fn list(&mut self, list: &Bound<'py, PyList>, depth: usize) -> Step {
        if self.slot_or_ref(list.as_any())? {
            return Ok(());
        }
        if let Some(id) = self.id() {
            grammar::open_tagged(&mut self.out, Some(id), Tag::List);
            self.list_items(list, depth)?;
            self.out.push('}');
        } else {
            self.list_items(list, depth)?;
        }
        Ok(())
    }

    /// `[...]` of a list's items, read in place. A list whose length changes meanwhile (by
    /// Python code run while an item is written) is left to the transcoder.
    fn list_items(&mut self, list: &Bound<'py, PyList>, depth: usize) -> Step {
        let ptr = list.as_ptr();
        // SAFETY: `list` is a live list, and its length is tested before each item, so every
        // index read is within it; an item is a live object the list holds (borrowed as
        // `value` asks).
        unsafe {
            let len = ffi::PyList_GET_SIZE(ptr);
            let item_at = |index| (ffi::PyList_GET_SIZE(ptr) == len).then(|| ffi::PyList_GET_ITEM(ptr, index));
            if holds_a_run(len, |index| ffi::PyList_GET_ITEM(ptr, index)) {
                self.items_with_runs(list.py(), len, &item_at, depth)?;
            } else {
                self.items((0..len).map_while(|index| {
                    let item = item_at(index)?;
                    // The length is unchanged (`item_at`), so every item after is live.
                    prefetch::ahead(|k| ffi::PyList_GET_ITEM(ptr, k as ffi::Py_ssize_t), len as usize, index as usize);
                    Some(Borrowed::from_ptr(list.py(), item))
                }), depth)?;
            }
            if ffi::PyList_GET_SIZE(ptr) != len {
                return Err(Unhandled);
            }
        }
        Ok(())
    }

    pub(super) fn tuple(&mut self, tuple: &Bound<'py, PyTuple>, depth: usize) -> Step {
        if self.slot_or_ref(tuple.as_any())? {
            return Ok(());
        }
        self.open_tagged(Tag::Tuple);
        self.unfinished.push(tuple.as_ptr() as usize);
        let ptr = tuple.as_ptr();
        // SAFETY: `tuple` is a live tuple, whose length never changes, so every index read is
        // within it.
        unsafe {
            let len = ffi::PyTuple_GET_SIZE(ptr);
            if holds_a_run(len, |index| ffi::PyTuple_GET_ITEM(ptr, index)) {
                self.items_with_runs(tuple.py(), len, &|index| Some(ffi::PyTuple_GET_ITEM(ptr, index)), depth)?;
            } else {
                self.items((0..len).map(|index| {
                    prefetch::ahead(|k| ffi::PyTuple_GET_ITEM(ptr, k as ffi::Py_ssize_t), len as usize, index as usize);
                    Borrowed::from_ptr(tuple.py(), ffi::PyTuple_GET_ITEM(ptr, index))
                }), depth)?;
            }
        }
        self.unfinished.pop();
        self.out.push('}');
        Ok(())
    }

    /// `[...]` of the `len` items of a list or tuple that holds the same object twice in a row
    /// (`holds_a_run`), read in place by `item_at`, which returns `None` once the container
    /// changed (the caller tests for that after). A run of one scalar (`[0] * n`) is written by
    /// `run`. Only such containers are written by this loop: with its test for runs, the loop
    /// over the 100,000 objects of seed 001 took a quarter longer (the same instructions, but
    /// the objects' first reads then missed the cache far more often), and scanning the item
    /// pointers first costs a few microseconds.
    ///
    /// # Safety
    /// `item_at(index)`, for `index < len`, must return `None` or a live object the container
    /// holds (borrowed as `value` asks).
    #[inline(never)]
    unsafe fn items_with_runs(&mut self, py: Python<'py>, len: ffi::Py_ssize_t, item_at: &impl Fn(ffi::Py_ssize_t) -> Option<*mut ffi::PyObject>, depth: usize) -> Step {
        self.out.push('[');
        let mut index = 0;
        while index < len {
            // A list changed by Python code run meanwhile ends here (the caller tests it).
            let Some(item) = item_at(index) else { break };
            if index > 0 {
                self.out.push(',');
                if index + 1 < len && item_at(index + 1) == Some(item) && text_repeats(item) {
                    // SAFETY: the caller's guarantee.
                    index = unsafe { self.run(py, item, index, len, item_at, depth) }?;
                    continue;
                }
            }
            // SAFETY: the caller's guarantee.
            self.value(unsafe { Borrowed::from_ptr(py, item) }, depth + 1)?;
            index += 1;
        }
        self.out.push(']');
        Ok(())
    }

    /// The run of `item`, a scalar whose text is the same wherever it is written, from `index`
    /// (after the first item, its comma written) on: its `,<text>` written once, then copied for
    /// each item after it that is the same object. Returns the index past the run.
    ///
    /// # Safety
    /// As `items_with_runs`, whose `item_at` and `len` these are; `item` is the item at `index`.
    unsafe fn run(
        &mut self,
        py: Python<'py>,
        item: *mut ffi::PyObject,
        index: ffi::Py_ssize_t,
        len: ffi::Py_ssize_t,
        item_at: &impl Fn(ffi::Py_ssize_t) -> Option<*mut ffi::PyObject>,
        depth: usize,
    ) -> Result<ffi::Py_ssize_t, Unhandled> {
        let comma = self.out.len() - 1;
        // SAFETY: the caller's guarantee.
        self.value(unsafe { Borrowed::from_ptr(py, item) }, depth + 1)?;
        // Writing a scalar runs no Python code, so the container is as it was.
        let mut end = index + 1;
        while end < len && item_at(end) == Some(item) {
            end += 1;
        }
        self.out.repeat(comma, (end - index - 1) as usize);
        Ok(end)
    }

    /// A dict: a JSON object when every key is a str (and UTF-8: a key with lone surrogates is
    /// not a STR in the body), else `{"$dict": [[k, v], ...]}`.
    pub(super) fn dict(&mut self, dict: &Bound<'py, PyDict>, depth: usize) -> Step {
        if self.slot_or_ref(dict.as_any())? {
            return Ok(());
        }
        // A table of strs only is written in one pass, as an object until a key is found not
        // to be UTF-8 (rare: lone surrogates); the dict is then written again as pairs, if
        // what was written of it is the same in both forms: nothing that took a memo slot or a
        // class number (else the transcoder writes the document).
        let (start, next_slot, named) = (self.out.len(), self.next_slot, self.named.len());
        let complete = match DictTable::of(dict.as_borrowed()) {
            Some(table) => self.members(table, depth)?,
            None if self.keys_are_plain_strings(dict) => self.members(DictNext::new(dict.clone()), depth)?,
            None => false,
        };
        if !complete {
            if self.next_slot != next_slot || self.named.len() != named {
                return Err(Unhandled);
            }
            self.out.truncate(start);
            self.pairs(dict, depth)?;
        }
        Ok(())
    }

    /// `{"key":value,...}` of the items of a dict whose keys are strs; false, with the object
    /// unfinished, if a key is not UTF-8.
    fn members(&mut self, mut items: impl Cursor<'py>, depth: usize) -> Result<bool, Unhandled> {
        let id = self.id();
        let mut first = !grammar::open_with_id(&mut self.out, id);
        loop {
            let (key, value) = match items.next() {
                Next::Item(key, value) => (key, value),
                Next::End => break,
                Next::Changed => return Err(Unhandled),
            };
            if !first {
                self.out.push(',');
            }
            first = false;
            // Tested again for a table read with `PyDict_Next`: the values written meanwhile
            // may have changed the dict. (A table of strs holds nothing else.)
            // SAFETY: `key` is a live object; only its type is read, and it is cast once known to be a str.
            if unsafe { ffi::PyUnicode_CheckExact(key.as_ptr()) } == 0 {
                return Err(Unhandled);
            }
            if self.keys.write(&mut self.out, unsafe { key.cast_unchecked::<PyString>() }).is_err() {
                return Ok(false);
            }
            self.value(value, depth + 1)?;
        }
        self.out.push('}');
        Ok(true)
    }

    /// `{"$dict":[[k,v],...]}`. A dict whose size changes meanwhile is left to the encoder,
    /// which refuses it.
    fn pairs(&mut self, dict: &Bound<'py, PyDict>, depth: usize) -> Step {
        self.open_tagged(Tag::Dict);
        self.out.push('[');
        let len = dict.len();
        let mut items = DictNext::new(dict.clone());
        let mut first = true;
        loop {
            // Both are held while they are written: writing the key may run Python code.
            let (key, value) = match items.next() {
                Next::Item(key, value) => (key.to_owned(), value.to_owned()),
                Next::End => break,
                Next::Changed => return Err(Unhandled),
            };
            self.out.push_str(if first { "[" } else { ",[" });
            first = false;
            self.value(key.as_borrowed(), depth + 1)?;
            self.out.push(',');
            self.value(value.as_borrowed(), depth + 1)?;
            self.out.push(']');
            if dict.len() != len {
                return Err(Unhandled);
            }
        }
        self.out.push_str("]}");
        Ok(())
    }

    /// Whether every key of `dict` is an exact str that is UTF-8 (no lone surrogates): the body
    /// holds such keys as STR, and the transcoder then writes the dict as a JSON object. Keys
    /// in the key cache were found so when they were written.
    fn keys_are_plain_strings(&mut self, dict: &Bound<'py, PyDict>) -> bool {
        let mut items = DictNext::new(dict.clone());
        loop {
            // No Python code runs in this loop, so the dict cannot change.
            let key = match items.next() {
                Next::Item(key, _) => key,
                Next::End => return true,
                Next::Changed => return false,
            };
            // SAFETY: `key` is a live object (the dict holds it), cast once known to be a str.
            unsafe {
                if ffi::PyUnicode_CheckExact(key.as_ptr()) == 0 {
                    return false;
                }
                if !self.keys.holds(key.as_ptr()) && str_text(&key.cast_unchecked()).is_err() {
                    return false;
                }
            }
        }
    }

    /// A set or frozenset, its elements in encode/containers.rs's canonical order: sorted by their binary
    /// encoding. That encoding is taken from the encoder itself, for elements whose encoding
    /// does not depend on what was written before (`sorts_alone`); other sets are left to the
    /// transcoder.
    pub(super) fn set(&mut self, v: &Bound<'py, PyAny>, tag: Tag, depth: usize) -> Step {
        if self.slot_or_ref(v)? {
            return Ok(());
        }
        let mut items = crate::encode::set_items(v)?;
        if items.len() > 1 {
            if !items.iter().all(|item| self.sorts_alone(item)) {
                return Err(Unhandled);
            }
            let mut sink = StreamSink::default();
            let mut encoder = Encoder::new(&mut sink);
            let mut keyed = items.into_iter().map(|item| Ok((encoder.standalone(&item)?, item))).collect::<PyResult<Vec<_>>>()?;
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            items = keyed.into_iter().map(|(_, item)| item).collect();
        }
        self.open_tagged(tag);
        // Only a frozenset can hold itself (through a mutable container); sets are unhashable.
        self.unfinished.push(v.as_ptr() as usize);
        self.items(items.iter().map(Bound::as_borrowed), depth)?;
        self.unfinished.pop();
        self.out.push('}');
        Ok(())
    }

    /// Whether the binary encoding of set element `item` here is its encoding alone, which
    /// encode/containers.rs sorts the set by: a value of `encodes_alone`, or a tuple or frozenset of such
    /// values not met before in the document (met before, it is a back-reference to its memo
    /// slot; met first here, its slot does not show in its bytes).
    fn sorts_alone(&self, item: &Bound<'_, PyAny>) -> bool {
        if encodes_alone(item) {
            return true;
        }
        let container = item.is_exact_instance_of::<PyTuple>() || item.is_exact_instance_of::<PyFrozenSet>();
        container
            && !self.seen.contains_key(&(item.as_ptr() as usize))
            && item.try_iter().is_ok_and(|mut elements| elements.all(|element| element.is_ok_and(|element| encodes_alone(&element))))
    }
}

/// Whether the `len` items that `item_at` reads hold the same object twice in a row: a scan of
/// the item pointers alone.
///
/// # Safety
/// `item_at(index)` must be readable for every `index < len`.
unsafe fn holds_a_run(len: ffi::Py_ssize_t, item_at: impl Fn(ffi::Py_ssize_t) -> *mut ffi::PyObject) -> bool {
    (1..len).any(|index| item_at(index) == item_at(index - 1))
}

/// Whether the text of `item` is the same wherever it is written: the values `JsonWriter::value`
/// writes without a memo slot or a class number and without running Python code.
fn text_repeats(item: *mut ffi::PyObject) -> bool {
    // SAFETY: `item` is a live object; only its type is read.
    unsafe {
        ffi::PyUnicode_CheckExact(item) != 0
            || ffi::PyLong_CheckExact(item) != 0
            || ffi::PyFloat_CheckExact(item) != 0
            || item == ffi::Py_None()
            || item == ffi::Py_True()
            || item == ffi::Py_False()
    }
}

/// Whether the binary encoding of set element `item` is the same wherever it is written: it
/// takes no memo slot and names no class.
fn encodes_alone(item: &Bound<'_, PyAny>) -> bool {
    let py = item.py();
    let class = item.get_type();
    item.is_none()
        || [
            PyString::type_object(py),
            PyInt::type_object(py),
            PyFloat::type_object(py),
            PyBool::type_object(py),
            PyBytes::type_object(py),
            PyComplex::type_object(py),
            PyDateTime::type_object(py),
            PyDate::type_object(py),
            PyTime::type_object(py),
            PyDelta::type_object(py),
        ]
        .iter()
        .any(|simple| class.is(simple))
        || pytypes::decimal_type(py).is_ok_and(|decimal| class.is(decimal))
        || pytypes::uuid_type(py).is_ok_and(|uuid| class.is(uuid))
}
