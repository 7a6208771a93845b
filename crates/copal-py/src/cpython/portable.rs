//! The interface of `crate::cpython` on interpreters whose private layouts the binding does not
//! use (every one but CPython 3.11), with the public API only: no field slots for the
//! decoder (every field goes through `PyObject_GenericSetAttr`), no instance values or dict
//! tables read in place (the readers use `PyDict_Next`), no cache hints for instances, and
//! references counted one `Py_INCREF` at a time.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};

use crate::dict_items::{Cursor, Next};

/// Nothing: this interpreter's instance layout is not known.
pub struct FieldSlots;

impl FieldSlots {
    pub fn of(_class: &Bound<'_, PyType>, _fields: &[Py<PyString>]) -> Option<Self> {
        None
    }

    pub fn store(&self, _obj: &Bound<'_, PyAny>, _index: usize, _value: &Bound<'_, PyAny>) -> bool {
        false
    }

    pub fn is_for(&self, _class: &Bound<'_, PyType>) -> bool {
        false
    }
}

/// Where an instance keeps its values array: nowhere known on this interpreter.
pub trait Holder {}

/// Never made, as `Holder` says.
pub struct OwnArray(std::convert::Infallible);

/// Never made, as `OwnArray`.
pub struct MadeDict(std::convert::Infallible);

impl Holder for OwnArray {}
impl Holder for MadeDict {}

/// Never made: this interpreter's layouts are not known.
pub struct InstanceValues<'a, 'py, H: Holder>(std::convert::Infallible, std::marker::PhantomData<(Borrowed<'a, 'py, PyAny>, H)>);

/// Never made, as `InstanceValues`.
pub struct DictTable<'a, 'py>(std::convert::Infallible, std::marker::PhantomData<Borrowed<'a, 'py, PyDict>>);

impl<'a, 'py, H: Holder> InstanceValues<'a, 'py, H> {
    pub fn of(_obj: Borrowed<'a, 'py, PyAny>) -> Option<Self> {
        None
    }
}

/// Never made, as `InstanceValues`.
pub struct ValuesFields<'a, 'py, H: Holder>(std::convert::Infallible, std::marker::PhantomData<(Borrowed<'a, 'py, PyAny>, H)>);

/// Never made: no `ValuesFields` reads anything.
pub struct Changed;

impl<'a, 'py, H: Holder> ValuesFields<'a, 'py, H> {
    pub fn of(_obj: &'a Bound<'py, PyAny>) -> Option<Self> {
        None
    }

    pub fn py(&self) -> Python<'py> {
        match self.0 {}
    }

    pub fn obj(&self) -> Borrowed<'a, 'py, PyAny> {
        match self.0 {}
    }

    pub fn count(&self) -> Result<usize, Changed> {
        match self.0 {}
    }

    pub fn at(&self, _position: usize) -> Result<Option<(*mut ffi::PyObject, *mut ffi::PyObject)>, Changed> {
        match self.0 {}
    }

    pub fn read_all(&self, _fields: &mut Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>) -> Result<usize, Changed> {
        match self.0 {}
    }
}

/// Never found: this interpreter's layouts are not known.
pub fn made_dict<'py>(_obj: Borrowed<'_, 'py, PyAny>) -> Option<Bound<'py, PyDict>> {
    None
}

impl<'a, 'py> DictTable<'a, 'py> {
    pub fn of(_dict: Borrowed<'a, 'py, PyDict>) -> Option<Self> {
        None
    }

    pub fn position(&self) -> ffi::Py_ssize_t {
        match self.0 {}
    }
}

impl<'py, H: Holder> Cursor<'py> for InstanceValues<'_, 'py, H> {
    fn next(&mut self) -> Next<'_, 'py> {
        match self.0 {}
    }
}

impl<'py> Cursor<'py> for DictTable<'_, 'py> {
    fn next(&mut self) -> Next<'_, 'py> {
        match self.0 {}
    }
}

/// No cache hints: where an instance keeps its fields is not known on this interpreter.
pub mod hints {
    use pyo3::ffi;

    /// Nothing (see the module comment).
    pub unsafe fn dict_or_values(_obj: *mut ffi::PyObject) {}

    /// Nothing, as `dict_or_values`.
    pub unsafe fn dict_values(_obj: *mut ffi::PyObject) {}

    /// Nothing, as `dict_or_values`.
    pub unsafe fn field_values(_obj: *mut ffi::PyObject) {}
}

/// False: references are added one `Py_INCREF` at a time (`add_references`), since later
/// CPythons make some objects immortal and their counts must not be written.
pub const ADDS_REFERENCES_AT_ONCE: bool = false;

/// Adds `count` references to `object`'s reference count with `count` calls of `Py_INCREF`.
/// Unused in practice: with `ADDS_REFERENCES_AT_ONCE` false, no caller leaves references
/// uncounted.
///
/// # Safety
/// `object` must be a live object, the GIL held, and `count` references to it held by the
/// caller without being counted yet.
#[inline]
pub unsafe fn add_references(object: *mut ffi::PyObject, count: ffi::Py_ssize_t) {
    for _ in 0..count {
        // SAFETY: the caller's guarantee, one reference at a time.
        unsafe { ffi::Py_INCREF(object) };
    }
}

/// The attribute `name` of `class` as found along its MRO, without calling anything (no
/// metaclass `__getattribute__`, no descriptor): the first dict of the MRO's classes that has
/// it, read through `PyType_GetDict` (which also gives the dicts of static types).
pub fn class_attribute<'py>(class: &Bound<'py, PyType>, name: &Bound<'py, PyString>) -> Option<Bound<'py, PyAny>> {
    let py = class.py();
    // SAFETY: `class` is a live type, whose `tp_mro` is null (not ready) or a tuple of types it
    // holds; each dict is a new reference. A failed item lookup (an error from the hash of
    // `name`, a str, cannot happen) counts as not found.
    unsafe {
        let mro = (*class.as_type_ptr()).tp_mro;
        if mro.is_null() {
            return None;
        }
        let mro = Bound::from_borrowed_ptr(py, mro).cast_into_unchecked::<PyTuple>();
        for base in mro.iter() {
            let dict = Bound::from_owned_ptr_or_opt(py, ffi::PyType_GetDict(base.as_ptr().cast()))?;
            let mut found = std::ptr::null_mut();
            if ffi::compat::PyDict_GetItemRef(dict.as_ptr(), name.as_ptr(), &mut found) > 0 {
                return Some(Bound::from_owned_ptr(py, found));
            }
        }
        None
    }
}
