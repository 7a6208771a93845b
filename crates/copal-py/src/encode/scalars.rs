//! Strings (shared through the stream's string table, or in generalized UTF-8 when they have
//! lone surrogates), ints of any size, and the times of day and time zones of dates and times.

use copal_core::format::calendar::{MICROS_PER_DAY, MICROS_PER_SECOND};
use copal_core::format::{tag, ObjectField, StringForm, TzInfo};
use pyo3::exceptions::PyUnicodeEncodeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDelta, PyDeltaAccess, PyInt, PyString, PyTzInfo};

use crate::pytypes;
use crate::strings::str_text;

use super::{short_repr, Encoder, Failure, Step};

impl<'s> Encoder<'s> {
    pub(super) fn string(&mut self, s: &Bound<'_, PyString>) -> Step {
        if !self.shared_string(s, StringForm::Tagged, None)? {
            // Lone surrogates are not UTF-8.
            let bytes = generalized_utf8(s)?;
            self.w.u8(tag::STR_SURROGATES);
            self.w.length_prefixed(bytes.as_bytes());
        }
        Ok(())
    }

    /// Writes the string `s` in `form`, through the stream's string table if the stream shares
    /// strings (with the texts `field` wrote recently, if it is the value of an object's typed
    /// field). False, with nothing written, when `s` is not UTF-8 (lone surrogates).
    pub(super) fn shared_string(&mut self, s: &Bound<'_, PyString>, form: StringForm, field: Option<ObjectField>) -> PyResult<bool> {
        // A string object that only its container and the encoder hold (the reference count
        // test of `is_unshared`) was not met before, as the string table would hold it too, and
        // cannot be met again: it is neither looked up nor remembered by address. Most strings
        // of records are such (made per record), and remembering each pushed a string that
        // does repeat out of the table and released that string's reference, a write to memory
        // long out of the cache. Either way the bytes are the same: `finish` finds the repeats
        // by content that the address missed.
        let may_repeat = !self.held_alone(s.as_any());
        if let Some(strings) = self.strings.as_mut().filter(|_| may_repeat) {
            // An object met again is found by address, before its text is read.
            if let Some(slot) = strings.reference_slot(s) {
                strings.write_references(&mut self.w.buf, form, slot, 1);
                return Ok(true);
            }
        }
        let Some(text) = utf8_text(s)? else { return Ok(false) };
        match &mut self.strings {
            Some(strings) => strings.write_new(&mut self.w.buf, form, s, text, field, may_repeat),
            None => form.write_new(&mut self.w.buf, text.as_bytes()),
        }
        Ok(true)
    }

    pub(super) fn int(&mut self, i: &Bound<'_, PyInt>) -> Step {
        match i.extract::<i64>() {
            Ok(small) => self.w.int_i64(small),
            Err(_) => {
                // Minimal two's complement: n >= 0 needs bit_length(n) + 1 bits, n < 0 needs
                // bit_length(-n - 1) + 1 bits.
                let magnitude = if i.lt(0)? { i.add(1)?.neg()? } else { i.clone().into_any() };
                let py = i.py();
                let bits: usize = magnitude.call_method0(crate::allocation::interned!(py, "bit_length")?)?.extract()?;
                let length = crate::allocation::int(py, (bits / 8 + 1) as i64)?;
                // Made by calls that raise MemoryError where pyo3's conversions would panic.
                let kwargs = crate::allocation::dict(py)?;
                kwargs.set_item(crate::allocation::interned!(py, "signed")?, true)?;
                let bytes = i.call_method(crate::allocation::interned!(py, "to_bytes")?, (length, crate::allocation::interned!(py, "little")?), Some(&kwargs))?;
                self.w.bigint_le(bytes.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes());
            }
        }
        Ok(())
    }
}

/// The generalized UTF-8 of `s`, which has lone surrogates: each written as its own 3-byte
/// sequence ("surrogatepass", docs/FORMAT.md "Strings").
pub(crate) fn generalized_utf8<'py>(s: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyBytes>> {
    // SAFETY: `s` is a str; the codec and error handler names are NUL-terminated. The result is
    // a new reference to a bytes object, or null with an exception set.
    let bytes = unsafe {
        Bound::from_owned_ptr_or_err(s.py(), ffi::PyUnicode_AsEncodedString(s.as_ptr(), c"utf-8".as_ptr(), c"surrogatepass".as_ptr()))?
    };
    Ok(bytes.cast_into::<PyBytes>()?)
}

/// The UTF-8 text of `s`, or None if it has none (lone surrogates). The UTF-8 form of a
/// non-ASCII str is made on first use (CPython keeps it in the str): that allocation failing is
/// a MemoryError, not a str without UTF-8, which would be written in another form.
pub(crate) fn utf8_text<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Option<&'a str>> {
    match str_text(s) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.is_instance_of::<PyUnicodeEncodeError>(s.py()) => Ok(None),
        Err(error) => Err(error),
    }
}

pub(crate) fn time_of_day_micros(hour: u8, minute: u8, second: u8, micro: u32) -> i64 {
    (i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second)) * MICROS_PER_SECOND + i64::from(micro)
}

pub(crate) fn tz_info(tz: Option<Bound<'_, PyTzInfo>>) -> Result<TzInfo, Failure> {
    let Some(tz) = tz else { return Ok(TzInfo::Naive) };
    let py = tz.py();
    if tz.get_type().is(pytypes::timezone_type(py)?) {
        let offset = tz.call_method1(crate::allocation::interned!(py, "utcoffset")?, (py.None(),))?;
        let delta = offset.cast::<PyDelta>().map_err(PyErr::from)?;
        let micros = i64::from(delta.get_days()) * MICROS_PER_DAY
            + i64::from(delta.get_seconds()) * MICROS_PER_SECOND
            + i64::from(delta.get_microseconds());
        return Ok(TzInfo::Offset(micros));
    }
    if tz.get_type().is(pytypes::zoneinfo_type(py)?) {
        return Ok(TzInfo::Named(tz.getattr(crate::allocation::interned!(py, "key")?)?.extract()?));
    }
    Err(Failure::Unsupported {
        path: vec![],
        reason: format!(
            "time zone {} is not supported: use datetime.timezone or zoneinfo.ZoneInfo",
            short_repr(&tz)
        ),
    })
}
