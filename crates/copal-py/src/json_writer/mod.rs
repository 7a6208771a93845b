//! `copal.dumps(obj, format="json")` written straight from the Python objects, without the
//! binary body in between (docs/TEXT_FORMATS.md section 5).
//!
//! The document must be byte for byte the one the transcoder (`copal_core::text::json::to_json`
//! of the body encode/ writes) gives, so this writer follows the encoder's rules wherever they
//! show in the text: the same memo slot numbering (the `$id`s are slot numbers), the same
//! identity test for shared values, sets in the same canonical order, and the value pieces
//! (strings, keys, floats, dates) written by the same core functions. Values whose text depends
//! on more of the encoder than that (persistent objects, subclasses of builtins, BrokenObjects,
//! sets of values that take memo slots or descriptors) and every value the encoder refuses are
//! left to the transcoder: `write` then returns `None`, and the caller takes the transcoder path,
//! which writes the same document, or raises the encoder's error with its path.
//!
//! The document's grammar (`{"$ref":n}`, `"$id"`, the tagged objects) is the core's
//! (`copal_core::text::json::grammar`), which the transcoder writes with too; this writer
//! converts the Python values and calls it. `containers` writes lists, tuples, dicts and sets;
//! `objects` the instances of Python classes, with their cached openings, and class names.

mod containers;
mod objects;

use std::cell::Cell;
use std::rc::Rc;

use copal_core::format::calendar::{days_from_civil, MICROS_PER_DAY};
use copal_core::format::{is_decimal_text, TzInfo};
use copal_core::text::json::grammar::{self, Tag};
use copal_core::text::json::{float, push_i64, string};
use copal_core::text::{ClassNumbers, TextOut};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{
    PyByteArray, PyBytes, PyComplex, PyDate, PyDateAccess, PyDateTime, PyDelta, PyDeltaAccess, PyInt, PyString, PyTime,
    PyTimeAccess, PyTzInfo, PyTzInfoAccess, PyType,
};

use crate::bytes_output::BytesOutput;
use crate::encode::{generalized_utf8, time_of_day_micros, tz_info, utf8_text, Builtin};
use crate::gc::GcPause;
use crate::hashing::{IntMap, IntSet};
use crate::json_keys::KeyCache;
use crate::pytypes;
use objects::{classify, ClassName, Form};

/// Deepest nesting written; encode/mod.rs's limit, so that deeper values go to the encoder, which
/// refuses them.
const MAX_DEPTH: usize = 256;

/// The longest int written with CPython's decimal conversion: 4,214 digits, below CPython's
/// default limit of 4,300 (`sys.get_int_max_str_digits()`).
const LONGEST_INT_BITS: usize = 14_000;

/// Entries of `JsonWriter::recent_forms`: documents rarely hold objects of more classes than this
/// in one stretch.
const RECENT_FORMS: usize = 8;

/// The document of `obj`, or `None` if it holds a value this writer leaves to the transcoder
/// (see the module comment).
pub fn write<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    // Reading an instance dict that CPython has not made makes it (one allocation per object,
    // where the inline values cannot be read), and nothing made here can become cyclic garbage
    // before the end: collections meanwhile would be waste.
    let _gc = GcPause::new(py);
    // Documents written one after another are usually alike: room for the last one's length
    // mostly spares growing the buffer. Not more: glibc's malloc maps fresh pages for a request
    // as large as the last mapped block it freed (the last document, say), and serves smaller
    // ones from its heap, whose pages are in memory. Asking for an eighth more than the last
    // document did the former at every call: faulting the pages in took a fifth of the time
    // of writing 200,000 floats.
    let mut writer = JsonWriter::new(obj, BytesOutput::with_capacity(py, LAST_LENGTH.get())?);
    let written = writer.document(obj).is_ok() && {
        // Which values get an `"$id"` is known only once their back-references are met: write
        // the document again with the ids (only graphs with shared values or cycles pay this).
        writer.referenced.is_empty() || {
            writer.targets = std::mem::take(&mut writer.referenced);
            writer.document(obj).is_ok()
        }
    };
    if !written {
        return Ok(None);
    }
    LAST_LENGTH.set(writer.out.len());
    writer.out.finish().map(Some)
}

thread_local! {
    /// The length of the last document written on this thread.
    static LAST_LENGTH: Cell<usize> = const { Cell::new(0) };
}

/// A value the writer leaves to the transcoder (and a Python error met on the way, which the
/// encoder meets again and reports).
struct Unhandled;

impl From<PyErr> for Unhandled {
    fn from(_: PyErr) -> Self {
        Unhandled
    }
}

type Step = Result<(), Unhandled>;

struct JsonWriter<'py> {
    out: BytesOutput<'py>,
    /// The memo slot (docs/FORMAT.md section 7) of each value that may be met again, by
    /// address (see `slot_or_ref`).
    seen: IntMap<usize, u64>,
    /// The next memo slot, counted as encode/mod.rs counts them.
    next_slot: u64,
    /// Slots that `$ref`s point to, as they are met.
    referenced: IntSet<u64>,
    /// The slots that get an `"$id"` (the second pass of `write`).
    targets: IntSet<u64>,
    /// Tuples and frozensets being written: meeting one of them again is a tuple containing
    /// itself, which the encoder refuses.
    unfinished: Vec<usize>,
    /// The root, which the caller may hold by a borrowed reference (see `may_be_met_again`).
    root: usize,
    forms: IntMap<usize, Form>,
    /// The addresses of the classes met last, searched in turn before `forms`: a few compares,
    /// where the map's probe of its control bytes took a tenth of writing seed 001. (Placed by
    /// a hash of the address, two classes met in turn could share one place: one run in eight
    /// then found its forms in the map.)
    recent_classes: [usize; RECENT_FORMS],
    /// The form of each class of `recent_classes`, at the same index.
    recent_forms: [Form; RECENT_FORMS],
    /// The entry of `recent_classes` that the next class found in `forms` replaces.
    next_recent: usize,
    /// Keeps the classes of `forms` alive, so that their addresses cannot be reused.
    form_classes: Vec<Py<PyType>>,
    /// The numbers of the class names written in the document so far, by name: two classes
    /// can have the same name, and then share its number.
    class_numbers: ClassNumbers,
    /// The classes whose `number` is set, to forget at the start of a document.
    named: Vec<Rc<ClassName>>,
    keys: KeyCache,
}

impl<'py> JsonWriter<'py> {
    fn new(root: &Bound<'py, PyAny>, out: BytesOutput<'py>) -> Self {
        JsonWriter {
            out,
            seen: IntMap::default(),
            next_slot: 0,
            referenced: IntSet::default(),
            targets: IntSet::default(),
            unfinished: Vec::new(),
            root: root.as_ptr() as usize,
            forms: IntMap::default(),
            // No class lies at address 0.
            recent_classes: [0; RECENT_FORMS],
            recent_forms: std::array::from_fn(|_| Form::Transcoded),
            next_recent: 0,
            form_classes: Vec::new(),
            class_numbers: ClassNumbers::default(),
            named: Vec::new(),
            keys: KeyCache::default(),
        }
    }

    fn document(&mut self, obj: &Bound<'py, PyAny>) -> Step {
        self.out.truncate(0);
        self.seen.clear();
        self.next_slot = 0;
        self.class_numbers.truncate(0);
        for class in self.named.drain(..) {
            class.number.set(None);
        }
        grammar::open_document(&mut self.out);
        self.value(obj.as_borrowed(), 0)?;
        grammar::close_document(&mut self.out);
        Ok(())
    }

    /// Whether `value` may be reached again in the graph: the test of encode/mod.rs's `is_unshared`,
    /// whose reasoning holds here too. Every value but the root is held by its container and by
    /// one owned reference of this writer (iteration takes a new reference to each item), so a
    /// count of 2 means nothing else can lead to it.
    fn may_be_met_again(&self, value: &Bound<'_, PyAny>) -> bool {
        // SAFETY: `value` is a live object; only its reference count is read.
        let references = unsafe { ffi::Py_REFCNT(value.as_ptr()) };
        references > 2 || value.as_ptr() as usize == self.root || pytypes::FREE_THREADED
    }

    /// For a value that takes a memo slot: writes `{"$ref":n}` and returns true if it was
    /// written before, else takes its slot and returns false.
    #[inline(always)]
    fn slot_or_ref(&mut self, value: &Bound<'_, PyAny>) -> Result<bool, Unhandled> {
        if self.may_be_met_again(value) {
            return self.shared_slot_or_ref(value);
        }
        self.next_slot += 1;
        Ok(false)
    }

    /// `slot_or_ref` of a value that may be met again: looked up among those met before.
    #[inline(never)]
    fn shared_slot_or_ref(&mut self, value: &Bound<'_, PyAny>) -> Result<bool, Unhandled> {
        let key = value.as_ptr() as usize;
        if let Some(&slot) = self.seen.get(&key) {
            if self.unfinished.contains(&key) {
                return Err(Unhandled);
            }
            self.referenced.insert(slot);
            grammar::reference(&mut self.out, slot);
            return Ok(true);
        }
        self.seen.insert(key, self.next_slot);
        self.next_slot += 1;
        Ok(false)
    }

    /// The `"$id"` of the memo-taking value whose slot was just taken: its slot, if something
    /// refers to it.
    #[inline]
    fn id(&self) -> Option<u64> {
        let slot = self.next_slot - 1;
        (!self.targets.is_empty() && self.targets.contains(&slot)).then_some(slot)
    }

    /// Opens the tagged object of the memo-taking value whose slot was just taken, its `"$id"`
    /// first when something refers to it.
    #[inline]
    fn open_tagged(&mut self, tag: Tag) {
        let id = self.id();
        grammar::open_tagged(&mut self.out, id, tag);
    }

    /// Writes `v`, borrowed from its holder: scalars are written from the borrowed reference
    /// (no Python code runs meanwhile, so the holder keeps them alive), and the writer takes its
    /// own reference to anything else first, as writing it may run Python code (an enum's
    /// `_name_`) that could drop the holder's. Strs, ints and floats, the most frequent values,
    /// are tested here, inlined into each loop over items; the rest is `other_value`.
    #[inline(always)]
    fn value(&mut self, v: Borrowed<'_, 'py, PyAny>, depth: usize) -> Step {
        if depth > MAX_DEPTH {
            return Err(Unhandled);
        }
        // Each test is an exact type-pointer comparison by the C API's checks, which only read
        // the object's type: pyo3's `cast_exact` takes and drops a reference to the type object
        // it compares with, two writes per test and value.
        let ptr = v.as_ptr();
        // SAFETY: `ptr` is a live object; each unchecked cast follows the check of its type.
        unsafe {
            if ffi::PyUnicode_CheckExact(ptr) != 0 {
                self.string(v.cast_unchecked())
            } else if ffi::PyLong_CheckExact(ptr) != 0 {
                self.int(v.cast_unchecked())
            } else if ffi::PyFloat_CheckExact(ptr) != 0 {
                float(&mut self.out, ffi::PyFloat_AS_DOUBLE(ptr));
                Ok(())
            } else {
                self.other_value(v, depth)
            }
        }
    }

    #[inline(never)]
    fn other_value(&mut self, v: Borrowed<'_, 'py, PyAny>, depth: usize) -> Step {
        let ptr = v.as_ptr();
        // SAFETY: `ptr` is a live object; each unchecked cast follows the check of its type.
        unsafe {
            if ptr == ffi::Py_None() {
                self.out.push_str("null");
            } else if ptr == ffi::Py_True() {
                self.out.push_str("true");
            } else if ptr == ffi::Py_False() {
                self.out.push_str("false");
            } else {
                let v = v.to_owned();
                if ffi::PyList_CheckExact(ptr) != 0 {
                    self.list(v.cast_unchecked(), depth)?;
                } else if ffi::PyDict_CheckExact(ptr) != 0 {
                    self.dict(v.cast_unchecked(), depth)?;
                } else if ffi::PyTuple_CheckExact(ptr) != 0 {
                    self.tuple(v.cast_unchecked(), depth)?;
                } else {
                    self.by_class(&v, depth)?;
                }
            }
        }
        Ok(())
    }

    fn by_class(&mut self, v: &Bound<'py, PyAny>, depth: usize) -> Step {
        // The class by address: a new reference to it would cost two writes to a shared line.
        let key = v.get_type_ptr() as usize;
        let entry = match self.recent_classes.iter().position(|&class| class == key) {
            Some(entry) => entry,
            None => {
                let form = self.form_of(v, key)?;
                let entry = self.next_recent;
                self.next_recent = (entry + 1) % RECENT_FORMS;
                self.recent_classes[entry] = key;
                self.recent_forms[entry] = form;
                entry
            }
        };
        if let Form::Object(object) = &self.recent_forms[entry] {
            let object = Rc::as_ptr(object);
            // SAFETY: `forms` holds every form found for the writer's whole life, so the object
            // form outlives this call even if its entry here is replaced meanwhile (by a class
            // met in a field). Not cloning the `Rc` spares two writes to it per object.
            return self.object(v, unsafe { &*object }, depth);
        }
        match self.recent_forms[entry].clone() {
            // Taken above, without the clone.
            Form::Object(object) => self.object(v, &object, depth)?,
            Form::Enum(class) => {
                // A composite Flag is named "A|B"; an empty Flag has no name and is written as "".
                let name: Option<String> = v.getattr(crate::allocation::interned!(v.py(), "_name_")?)?.extract()?;
                grammar::enum_opening(&mut self.out);
                self.class_name(&class);
                grammar::enum_member(&mut self.out, name.as_deref().unwrap_or_default());
            }
            Form::Builtin(Builtin::DateTime) => {
                let dt = v.cast::<PyDateTime>().map_err(PyErr::from)?;
                let days = days_from_civil(i64::from(dt.get_year()), u32::from(dt.get_month()), u32::from(dt.get_day()));
                let micros = days * MICROS_PER_DAY + time_of_day_micros(dt.get_hour(), dt.get_minute(), dt.get_second(), dt.get_microsecond());
                let zone = zone_of(dt.get_tzinfo())?;
                grammar::datetime(&mut self.out, micros, &zone, dt.get_fold());
            }
            Form::Builtin(Builtin::Date) => {
                let d = v.cast::<PyDate>().map_err(PyErr::from)?;
                grammar::date(&mut self.out, days_from_civil(i64::from(d.get_year()), u32::from(d.get_month()), u32::from(d.get_day())));
            }
            Form::Builtin(Builtin::Time) => {
                let t = v.cast::<PyTime>().map_err(PyErr::from)?;
                let micros = time_of_day_micros(t.get_hour(), t.get_minute(), t.get_second(), t.get_microsecond());
                let zone = zone_of(t.get_tzinfo())?;
                grammar::time(&mut self.out, micros as u64, &zone, t.get_fold());
            }
            Form::Builtin(Builtin::Delta) => {
                let td = v.cast::<PyDelta>().map_err(PyErr::from)?;
                let (days, seconds, micros) = (td.get_days(), td.get_seconds(), td.get_microseconds());
                // Python's normalized form: the seconds and microseconds are not negative.
                let (seconds, micros) = (u64::try_from(seconds).map_err(|_| Unhandled)?, u64::try_from(micros).map_err(|_| Unhandled)?);
                grammar::timedelta(&mut self.out, i64::from(days), seconds, micros);
            }
            Form::Builtin(Builtin::Bytes) => {
                let bytes = v.cast::<PyBytes>().map_err(PyErr::from)?;
                grammar::bytes(&mut self.out, bytes.as_bytes());
            }
            Form::Builtin(Builtin::ByteArray) => {
                if !self.slot_or_ref(v)? {
                    let bytes = v.cast::<PyByteArray>().map_err(PyErr::from)?.to_vec();
                    let id = self.id();
                    grammar::bytearray(&mut self.out, id, &bytes);
                }
            }
            Form::Builtin(Builtin::Set) => self.set(v, Tag::Set, depth)?,
            Form::Builtin(Builtin::FrozenSet) => self.set(v, Tag::FrozenSet, depth)?,
            Form::Builtin(Builtin::Complex) => {
                let c = v.cast::<PyComplex>().map_err(PyErr::from)?;
                grammar::complex(&mut self.out, c.real(), c.imag());
            }
            Form::Decimal => {
                let text = v.str()?;
                let text = text.to_str()?;
                if !is_decimal_text(text) {
                    return Err(Unhandled);
                }
                grammar::decimal(&mut self.out, text);
            }
            Form::Uuid => {
                let bytes = v.getattr(crate::allocation::interned!(v.py(), "bytes")?)?;
                let bytes: [u8; 16] = bytes.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes().try_into().map_err(|_| Unhandled)?;
                grammar::uuid(&mut self.out, &bytes);
            }
            Form::Transcoded => return Err(Unhandled),
        }
        Ok(())
    }

    /// The form of `v`'s class, whose address is `key`.
    #[inline(never)]
    fn form_of(&mut self, v: &Bound<'py, PyAny>, key: usize) -> PyResult<Form> {
        if let Some(form) = self.forms.get(&key) {
            return Ok(form.clone());
        }
        let class = v.get_type();
        let form = classify(&class)?;
        self.forms.insert(key, form.clone());
        self.form_classes.push(class.unbind());
        Ok(form)
    }

    #[inline(always)]
    fn string(&mut self, s: Borrowed<'_, 'py, PyString>) -> Step {
        match utf8_text(&s)? {
            Some(text) => string(&mut self.out, text),
            None => self.surrogates(s)?,
        }
        Ok(())
    }

    /// A str with lone surrogates, which are not UTF-8: the generalized UTF-8 of encode/scalars.rs, in base64.
    #[cold]
    fn surrogates(&mut self, s: Borrowed<'_, 'py, PyString>) -> Step {
        let bytes = generalized_utf8(&s.to_owned())?;
        grammar::surrogates(&mut self.out, bytes.as_bytes());
        Ok(())
    }

    #[inline]
    fn int(&mut self, i: Borrowed<'_, 'py, PyInt>) -> Step {
        let mut overflow = 0;
        // SAFETY: `i` is an int; the call sets no exception for an int (overflow is reported in
        // `overflow`).
        let small = unsafe { ffi::PyLong_AsLongLongAndOverflow(i.as_ptr(), &mut overflow) };
        if overflow == 0 {
            push_i64(&mut self.out, small);
        } else {
            // Python's decimal text of an int is the transcoder's (bigint::to_decimal). Past
            // some 4,000 digits CPython's conversion, quadratic in the length, raises by default
            // (`sys.get_int_max_str_digits()`), or is slower than the transcoder's, which splits
            // long numbers: those ints are left to it.
            let bits: usize = i.call_method0(crate::allocation::interned!(i.py(), "bit_length")?)?.extract()?;
            if bits > LONGEST_INT_BITS {
                return Err(Unhandled);
            }
            self.out.push_str(i.str()?.to_str()?);
        }
        Ok(())
    }
}


/// The time zone of a datetime or time, as encode/scalars.rs stores it; offsets of a day or more (which
/// the transcoder refuses) are left to it.
fn zone_of(tz: Option<Bound<'_, PyTzInfo>>) -> Result<TzInfo, Unhandled> {
    match tz_info(tz) {
        Ok(TzInfo::Offset(micros)) if micros.unsigned_abs() >= MICROS_PER_DAY as u64 => Err(Unhandled),
        Ok(zone) => Ok(zone),
        Err(_) => Err(Unhandled),
    }
}
