//! The items of a dict, or the fields of an instance, in the order `PyDict_Next` gives them,
//! as the JSON writer (json_writer.rs) reads them: cursors over a dict with `PyDict_Next`
//! (`DictNext`) and over an object's slots at their offsets then its instance dict
//! (`SlotItems`). Where CPython's private layouts are known, crate::cpython adds cursors that
//! read an instance's values array and the tables of dicts of str keys in place
//! (`InstanceValues`, `DictTable`); elsewhere those find nothing and the readers fall back to
//! these.
//!
//! Python code run while a value is written (an enum's `_name_`, say) may change the dict or
//! the instance being read. `PyDict_Next` checks its bounds at each call; the direct reads
//! check instead, before each item, that what they read is unchanged, and report
//! `Next::Changed` if not. Items are borrowed: the writer takes its own reference to a value
//! before it runs any Python code.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::cpython::{InstanceValues, OwnArray};
use crate::encode::object_dict;
use crate::strings::str_text;
use crate::slots::SlotLayout;

/// What a cursor found next.
pub enum Next<'c, 'py> {
    /// A key and its value, borrowed from the dict or instance: valid until Python code runs.
    Item(Borrowed<'c, 'py, PyAny>, Borrowed<'c, 'py, PyAny>),
    End,
    /// The dict or instance changed since reading began, or holds what only the transcoder
    /// writes (an instance dict key named like a slot).
    Changed,
}

/// The items of one dict or the fields of one instance, one at a time.
pub trait Cursor<'py> {
    fn next(&mut self) -> Next<'_, 'py>;
}

/// The items of a dict read with `PyDict_Next`, which checks its bounds at each call, so a dict
/// changed meanwhile is still read safely.
pub struct DictNext<'py> {
    dict: Bound<'py, PyDict>,
    position: ffi::Py_ssize_t,
}

impl<'py> DictNext<'py> {
    pub fn new(dict: Bound<'py, PyDict>) -> Self {
        DictNext { dict, position: 0 }
    }
}

impl<'py> Cursor<'py> for DictNext<'py> {
    #[inline]
    fn next(&mut self) -> Next<'_, 'py> {
        let (mut key, mut value) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: `dict` is a dict and the GIL is held; on success both pointers are borrowed
        // references to live objects held by the dict, which the cursor holds.
        unsafe {
            if ffi::PyDict_Next(self.dict.as_ptr(), &mut self.position, &mut key, &mut value) == 0 {
                return Next::End;
            }
            Next::Item(Borrowed::from_ptr(self.dict.py(), key), Borrowed::from_ptr(self.dict.py(), value))
        }
    }
}

/// The fields of an object of a class with slots: its slots that are set, in the layout's
/// order, then the items of its instance dict if it has one (encode/fields.rs reads them in this
/// order too).
pub struct SlotItems<'a, 'py> {
    obj: Borrowed<'a, 'py, PyAny>,
    layout: &'a SlotLayout,
    /// The next slot to read.
    position: usize,
    dict: Option<InstanceDict<'a, 'py>>,
}

/// An instance dict as a cursor: its inline values while it has them, else the dict.
enum InstanceDict<'a, 'py> {
    Values(InstanceValues<'a, 'py, OwnArray>),
    Dict(DictNext<'py>),
}

impl<'a, 'py> SlotItems<'a, 'py> {
    /// The fields of `obj`, an instance of exactly the class `layout` was made for.
    pub fn of(obj: Borrowed<'a, 'py, PyAny>, layout: &'a SlotLayout) -> PyResult<Self> {
        let dict = match layout.has_dict {
            false => None,
            true => Some(match InstanceValues::of(obj) {
                Some(values) => InstanceDict::Values(values),
                None => InstanceDict::Dict(DictNext::new(object_dict(&obj)?)),
            }),
        };
        Ok(SlotItems { obj, layout, position: 0, dict })
    }
}

impl<'py> Cursor<'py> for SlotItems<'_, 'py> {
    fn next(&mut self) -> Next<'_, 'py> {
        let py = self.obj.py();
        while let Some(field) = self.layout.fields.get(self.position) {
            self.position += 1;
            // SAFETY: `obj` is an instance of the layout's class (`of`), and the GIL is held.
            let value = unsafe { field.value_in(self.obj.as_ptr()) };
            if !value.is_null() {
                // SAFETY: the slot holds a reference to `value`, and the layout to the name.
                return unsafe { Next::Item(Borrowed::from_ptr(py, field.name.as_ptr()), Borrowed::from_ptr(py, value)) };
            }
        }
        let next = match &mut self.dict {
            None => return Next::End,
            Some(InstanceDict::Values(values)) => values.next(),
            Some(InstanceDict::Dict(dict)) => dict.next(),
        };
        match next {
            Next::Item(key, _) if names_a_set_slot(self.obj, self.layout, key) => Next::Changed,
            next => next,
        }
    }
}

/// Whether instance dict key `key` has the name of a slot of `obj` that is set: the encoder
/// refuses such an object (its fields would have one name twice), so it is left to it.
fn names_a_set_slot(obj: Borrowed<'_, '_, PyAny>, layout: &SlotLayout, key: Borrowed<'_, '_, PyAny>) -> bool {
    let Ok(key) = key.cast_exact::<PyString>() else { return false };
    let Ok(text) = str_text(&key) else { return false };
    layout.fields.iter().any(|field| {
        let name = field.name.bind_borrowed(obj.py());
        // SAFETY: as in `SlotItems::next`.
        let set = unsafe { !field.value_in(obj.as_ptr()).is_null() };
        set && (name.as_ptr() == key.as_ptr() || str_text(&name).is_ok_and(|name| name == text))
    })
}
