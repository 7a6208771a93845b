//! The tables part of the interface of `crate::cpython` on interpreters whose instance and dict
//! layouts the binding does not read (other than CPython 3.11, 3.12 and 3.13 with the GIL):
//! no instance values or dict tables read in place (the readers use `PyDict_Next`) and no cache
//! hints for instances.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dict_items::{Cursor, Next};

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
