//! New Python objects whose failed allocation is a MemoryError.
//!
//! pyo3's infallible constructors (`PyString::new`, `PyBytes::new`, `PyFloat::new`, an `i64` or
//! a `&str` converted for a call, ...) panic when CPython cannot allocate, after printing the
//! MemoryError as unraisable: a caller of `copal.loads` got a `PanicException`. Decoding makes
//! its objects with these instead, so that running out of memory reaches the caller as the
//! MemoryError CPython raised (tests/test_memory_errors.py fails one allocation at a time).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString, PyTuple};

use crate::list_builder::ListBuilder;

/// The object CPython returned from a constructor (a new reference), or the error it set.
fn made<'py>(py: Python<'py>, object: *mut ffi::PyObject) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `object` is what a CPython constructor returned: a new reference, or null with an
    // exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, object) }
}

pub fn int(py: Python<'_>, value: i64) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: no preconditions beyond the GIL, which `py` witnesses.
    made(py, unsafe { ffi::PyLong_FromLongLong(value) })
}

pub fn unsigned_int(py: Python<'_>, value: u64) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: as in `int`.
    made(py, unsafe { ffi::PyLong_FromUnsignedLongLong(value) })
}

pub fn float(py: Python<'_>, value: f64) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: as in `int`.
    made(py, unsafe { ffi::PyFloat_FromDouble(value) })
}

pub fn complex(py: Python<'_>, real: f64, imaginary: f64) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: as in `int`.
    made(py, unsafe { ffi::PyComplex_FromDoubles(real, imaginary) })
}

pub fn bytes<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `data` is valid for its length, which a slice keeps below isize::MAX.
    made(py, unsafe { ffi::PyBytes_FromStringAndSize(data.as_ptr().cast(), data.len() as ffi::Py_ssize_t) })
}

pub fn bytearray<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: as in `bytes`.
    made(py, unsafe { ffi::PyByteArray_FromStringAndSize(data.as_ptr().cast(), data.len() as ffi::Py_ssize_t) })
}

pub fn str<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyString>> {
    // SAFETY: `text` is valid UTF-8 for its length; the result is a str or null.
    let string = made(py, unsafe { ffi::PyUnicode_FromStringAndSize(text.as_ptr().cast(), text.len() as ffi::Py_ssize_t) })?;
    // SAFETY: PyUnicode_FromStringAndSize returns a str.
    Ok(unsafe { string.cast_into_unchecked() })
}

/// `text` as an interned str (the one str of that text that attribute names share), as
/// `PyString::intern` makes it.
pub fn interned_str<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyString>> {
    let mut string = str(py, text)?.into_ptr();
    // SAFETY: PyUnicode_InternInPlace takes the reference to a str it is given and leaves a
    // reference to the interned str in its place (the same str if interning it failed: CPython
    // then clears the error, and the str is only not shared).
    unsafe {
        ffi::PyUnicode_InternInPlace(&mut string);
        Ok(Bound::from_owned_ptr(py, string).cast_into_unchecked())
    }
}

/// `pyo3::intern!` whose failure to make the string, on its first use in the process, is the
/// MemoryError CPython raised (pyo3's panics): `interned!(py, "name")?` is the interned str, a
/// `&Bound<'py, PyString>` made once.
macro_rules! interned {
    ($py:expr, $text:expr) => {{
        static INTERNED: pyo3::sync::PyOnceLock<pyo3::Py<pyo3::types::PyString>> = pyo3::sync::PyOnceLock::new();
        let py: pyo3::Python<'_> = $py;
        INTERNED.get_or_try_init(py, || $crate::allocation::interned_str(py, $text).map(pyo3::Bound::unbind)).map(|name| name.bind(py))
    }};
}
pub(crate) use interned;

/// `PyOnceLock::import`: `module.name`, imported once per interpreter into `cell`, with the two
/// names made by `str` (pyo3's own `import` makes them with its panicking conversion, on the
/// first use of each cell: a decoding's first Decimal, say).
pub fn imported<'py, T: pyo3::type_object::PyTypeCheck>(cell: &'py pyo3::sync::PyOnceLock<Py<T>>, py: Python<'py>, module: &str, name: &str) -> PyResult<&'py Bound<'py, T>> {
    cell.get_or_try_init(py, || Ok(py.import(str(py, module)?)?.getattr(str(py, name)?)?.cast_into::<T>()?.unbind()))
        .map(|object| object.bind(py))
}

/// A tuple of `items`, which it takes.
pub fn tuple<'py>(py: Python<'py>, items: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyTuple>> {
    // SAFETY: as in `int`; PyTuple_New returns a tuple of `len` empty items (a Vec's length is
    // below isize::MAX), and each item's reference is moved into its own slot.
    unsafe {
        let tuple = made(py, ffi::PyTuple_New(items.len() as ffi::Py_ssize_t))?;
        for (index, item) in items.into_iter().enumerate() {
            ffi::PyTuple_SET_ITEM(tuple.as_ptr(), index as ffi::Py_ssize_t, item.into_ptr());
        }
        Ok(tuple.cast_into_unchecked())
    }
}

pub fn dict(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    // SAFETY: as in `int`; the result is a dict or null.
    Ok(unsafe { made(py, ffi::PyDict_New())?.cast_into_unchecked() })
}

/// A Rust value as a new Python object, a failed allocation raising MemoryError: what the
/// functions and methods called from Python return goes through it, where pyo3's conversions of
/// ints above 256, strs and lists would panic.
pub trait ToPython<'py> {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

impl<'py> ToPython<'py> for u64 {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        unsigned_int(py, self)
    }
}

impl<'py> ToPython<'py> for u32 {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        unsigned_int(py, self.into())
    }
}

impl<'py> ToPython<'py> for u16 {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        unsigned_int(py, self.into())
    }
}

impl<'py> ToPython<'py> for usize {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // usize is 64 bits at most on every platform CPython supports.
        unsigned_int(py, self as u64)
    }
}

impl<'py> ToPython<'py> for i64 {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        int(py, self)
    }
}

impl<'py> ToPython<'py> for bool {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // True and False are never allocated.
        Ok(PyBool::new(py, self).to_owned().into_any())
    }
}

impl<'py> ToPython<'py> for &str {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(str(py, self)?.into_any())
    }
}

impl<'py> ToPython<'py> for &String {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.as_str().to_python(py)
    }
}

impl<'py> ToPython<'py> for String {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.as_str().to_python(py)
    }
}

impl<'py, T> ToPython<'py> for Bound<'py, T> {
    fn to_python(self, _py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.into_any())
    }
}

impl<'py, T: ToPython<'py>> ToPython<'py> for Option<T> {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Some(value) => value.to_python(py),
            None => Ok(py.None().into_bound(py)),
        }
    }
}

/// A list (`Vec<u8>` is a list of ints too: bytes are made by `bytes`).
impl<'py, T: ToPython<'py>> ToPython<'py> for Vec<T> {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        list(py, self)
    }
}

impl<'py, 'a, T> ToPython<'py> for &'a [T]
where
    &'a T: ToPython<'py>,
{
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        list(py, self)
    }
}

impl<'py, 'a, T> ToPython<'py> for &'a Vec<T>
where
    &'a T: ToPython<'py>,
{
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        list(py, self)
    }
}

impl<'py, A: ToPython<'py>, B: ToPython<'py>> ToPython<'py> for (A, B) {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(tuple(py, vec![self.0.to_python(py)?, self.1.to_python(py)?])?.into_any())
    }
}

impl<'py, A: ToPython<'py>, B: ToPython<'py>, C: ToPython<'py>> ToPython<'py> for (A, B, C) {
    fn to_python(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(tuple(py, vec![self.0.to_python(py)?, self.1.to_python(py)?, self.2.to_python(py)?])?.into_any())
    }
}

fn list<'py, T: ToPython<'py>>(py: Python<'py>, items: impl IntoIterator<Item = T>) -> PyResult<Bound<'py, PyAny>> {
    let items = items.into_iter().map(|item| item.to_python(py)).collect::<PyResult<Vec<_>>>()?;
    Ok(ListBuilder::of(py, items)?.into_any())
}

/// Sets `dict[key] = value`, both made by `ToPython`.
pub fn set_item<'py>(dict: &Bound<'py, PyDict>, key: &str, value: impl ToPython<'py>) -> PyResult<()> {
    let py = dict.py();
    dict.set_item(str(py, key)?, value.to_python(py)?)
}

/// The int of `data`, a little-endian two's-complement integer.
pub fn int_from_le_bytes<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    // CPython 3.13 made the conversion public; before it, `int.from_bytes` (ints past 64 bits
    // are rare enough in records not to need the private function of 3.11 and 3.12).
    #[cfg(all(Py_3_13, not(any(Py_LIMITED_API, PyPy))))]
    {
        // SAFETY: `data` is valid for its length; the buffer is read as a little-endian signed
        // integer (no Py_ASNATIVEBYTES_UNSIGNED_BUFFER flag).
        made(py, unsafe { ffi::PyLong_FromNativeBytes(data.as_ptr().cast(), data.len(), ffi::Py_ASNATIVEBYTES_LITTLE_ENDIAN) })
    }
    #[cfg(not(all(Py_3_13, not(any(Py_LIMITED_API, PyPy)))))]
    {
        let kwargs = dict(py)?;
        kwargs.set_item(str(py, "signed")?, true)?;
        let name = str(py, "from_bytes")?;
        let args = (bytes(py, data)?, str(py, "little")?);
        use pyo3::PyTypeInfo;
        pyo3::types::PyInt::type_object(py).call_method(name, args, Some(&kwargs))
    }
}

/// Whether `error` is a MemoryError, which decoding passes on as it is: the input may be fine.
pub fn is_memory_error(py: Python<'_>, error: &PyErr) -> bool {
    error.is_instance_of::<pyo3::exceptions::PyMemoryError>(py)
}
