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

use std::cell::{Cell, RefCell};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use copal_core::format::calendar::{days_from_civil, MICROS_PER_DAY};
use copal_core::format::{is_decimal_text, TzInfo};
use copal_core::text::json::{escaped_key, float, push_i64, push_piece, push_u64, string, Piece, DOCUMENT_OPENING};
use copal_core::text::{base64, clock, TextOut};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyComplex, PyDate, PyDateAccess, PyDateTime, PyDelta, PyDeltaAccess, PyDict, PyFloat,
    PyFrozenSet, PyInt, PyList, PyString, PyTime, PyTimeAccess, PyTuple, PyTzInfo, PyTzInfoAccess, PyType,
};
use pyo3::PyTypeInfo;

use crate::bytes_output::BytesOutput;
use crate::classes::type_name_of;
use crate::cpython::{made_dict, DictTable, InstanceValues, MadeDict, OwnArray};
use crate::dict_items::{Cursor, DictNext, Next, SlotItems};
use crate::encode::{self, generalized_utf8, object_dict, time_of_day_micros, tz_info, utf8_text, Builtin, Encoder, Kind};
use crate::slots::SlotLayout;
use crate::gc::GcPause;
use crate::hashing::{IntMap, IntSet};
use crate::json_keys::KeyCache;
use crate::prefetch;
use crate::pytypes;
use crate::standalone::StreamSink;
use crate::strings::str_text;

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

/// How the values of one class (other than the builtin types `JsonWriter::value` tests first)
/// are written, decided once per class as encode/classify.rs's `classify` does. Cloned out of the map
/// for each value (the object of a class can hold objects of the same class).
#[derive(Clone)]
enum Form {
    Builtin(Builtin),
    Decimal,
    Uuid,
    /// An enum member: `{"$enum":<class>,"$member":` is written ahead of its name.
    Enum(Rc<ClassName>),
    /// A plain instance of a Python class, written as `{"$type":"<type>"` and its fields.
    Object(Rc<ObjectForm>),
    /// Persistent classes, subclasses of builtins, BrokenObject and the unsupported.
    Transcoded,
}

/// A class as a document names it: by its name the first time, by its number after
/// (docs/TEXT_FORMATS.md section 2.1).
struct ClassName {
    name: String,
    /// The name as a JSON string.
    quoted: String,
    /// The class's number in the document being written, once it is named there.
    number: Cell<Option<u64>>,
}

impl ClassName {
    fn new(name: String) -> Rc<Self> {
        let mut quoted = String::new();
        string(&mut quoted, &name);
        Rc::new(ClassName { name, quoted, number: Cell::new(None) })
    }
}

struct ObjectForm {
    class: Rc<ClassName>,
    /// The slots of the class, if it has any (its instances may have an instance dict too).
    slots: Option<Arc<SlotLayout>>,
    /// The `,"name":` of each field, by position, with the field name it was made from: the
    /// objects of a class almost always have the same interned names, so an identity test
    /// replaces escaping the name.
    fields: RefCell<Vec<(Py<PyString>, Piece)>>,
    /// The text an object of the class opens with, when it has no `"$id"`: one piece where its
    /// parts (`{`, the tag, the class number, the first field's name) cost a call each.
    opening: RefCell<Option<Opening>>,
}

/// `{"$type":<number>,"<first field>":` of a class whose number in the document is `number`
/// and whose first field is `first` (held, so that its address cannot be another name's).
struct Opening {
    number: u64,
    first: Py<PyString>,
    text: Piece,
}

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
    class_numbers: HashMap<String, u64>,
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
            class_numbers: HashMap::new(),
            named: Vec::new(),
            keys: KeyCache::default(),
        }
    }

    fn document(&mut self, obj: &Bound<'py, PyAny>) -> Step {
        self.out.truncate(0);
        self.seen.clear();
        self.next_slot = 0;
        self.class_numbers.clear();
        for class in self.named.drain(..) {
            class.number.set(None);
        }
        self.out.push_str(DOCUMENT_OPENING);
        self.value(obj.as_borrowed(), 0)?;
        self.out.push('}');
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
            self.out.push_str("{\"$ref\":");
            push_u64(&mut self.out, slot);
            self.out.push('}');
            return Ok(true);
        }
        self.seen.insert(key, self.next_slot);
        self.next_slot += 1;
        Ok(false)
    }

    /// Opens the object of a memo-taking value whose slot was just taken, with its `"$id"`
    /// first when something refers to it. Returns whether the id was written.
    fn open_with_id(&mut self) -> bool {
        self.out.push('{');
        let slot = self.next_slot - 1;
        if self.targets.is_empty() || !self.targets.contains(&slot) {
            return false;
        }
        self.out.push_str("\"$id\":");
        push_u64(&mut self.out, slot);
        true
    }

    /// `open_with_id`, then `tag` as the first member (after the id, if any).
    fn open_tagged(&mut self, tag: &str) {
        if self.open_with_id() {
            self.out.push(',');
        }
        self.out.push_str(tag);
    }

    /// A class name, or its number if the document named it before (as the transcoder's
    /// `class_name`).
    #[inline]
    fn class_name(&mut self, class: &Rc<ClassName>) {
        match class.number.get() {
            Some(number) => push_u64(&mut self.out, number),
            None => self.name_class(class),
        }
    }

    /// A class not named yet in this document by way of this form: its name, or the number of
    /// another class of the same name.
    fn name_class(&mut self, class: &Rc<ClassName>) {
        let next = self.class_numbers.len() as u64;
        let number = match self.class_numbers.entry(class.name.clone()) {
            Entry::Occupied(known) => {
                push_u64(&mut self.out, *known.get());
                *known.get()
            }
            Entry::Vacant(new) => {
                push_piece(&mut self.out, &class.quoted);
                *new.insert(next)
            }
        };
        class.number.set(Some(number));
        self.named.push(Rc::clone(class));
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
                self.out.push_str("{\"$enum\":");
                self.class_name(&class);
                self.out.push_str(",\"$member\":");
                self.text(name.as_deref().unwrap_or_default());
                self.out.push('}');
            }
            Form::Builtin(Builtin::DateTime) => {
                let dt = v.cast::<PyDateTime>().map_err(PyErr::from)?;
                let days = days_from_civil(i64::from(dt.get_year()), u32::from(dt.get_month()), u32::from(dt.get_day()));
                let micros = days * MICROS_PER_DAY + time_of_day_micros(dt.get_hour(), dt.get_minute(), dt.get_second(), dt.get_microsecond());
                let zone = zone_of(dt.get_tzinfo())?;
                self.clock_value("{\"$datetime\":\"", |out| clock::write_datetime(micros, out), &zone, dt.get_fold());
            }
            Form::Builtin(Builtin::Date) => {
                let d = v.cast::<PyDate>().map_err(PyErr::from)?;
                self.out.push_str("{\"$date\":\"");
                clock::write_date(days_from_civil(i64::from(d.get_year()), u32::from(d.get_month()), u32::from(d.get_day())), &mut self.out);
                self.out.push_str("\"}");
            }
            Form::Builtin(Builtin::Time) => {
                let t = v.cast::<PyTime>().map_err(PyErr::from)?;
                let micros = time_of_day_micros(t.get_hour(), t.get_minute(), t.get_second(), t.get_microsecond());
                let zone = zone_of(t.get_tzinfo())?;
                self.clock_value("{\"$time\":\"", |out| clock::write_clock(micros as u64, out), &zone, t.get_fold());
            }
            Form::Builtin(Builtin::Delta) => {
                let td = v.cast::<PyDelta>().map_err(PyErr::from)?;
                let (days, seconds, micros) = (td.get_days(), td.get_seconds(), td.get_microseconds());
                self.out.push_fmt(format_args!("{{\"$timedelta\":[{days},{seconds},{micros}]}}"));
            }
            Form::Builtin(Builtin::Bytes) => {
                let bytes = v.cast::<PyBytes>().map_err(PyErr::from)?;
                self.out.push_str("{\"$bytes\":");
                self.base64(bytes.as_bytes());
            }
            Form::Builtin(Builtin::ByteArray) => {
                if !self.slot_or_ref(v)? {
                    let bytes = v.cast::<PyByteArray>().map_err(PyErr::from)?.to_vec();
                    self.open_tagged("\"$bytearray\":");
                    self.base64(&bytes);
                }
            }
            Form::Builtin(Builtin::Set) => self.set(v, "\"$set\":", depth)?,
            Form::Builtin(Builtin::FrozenSet) => self.set(v, "\"$frozenset\":", depth)?,
            Form::Builtin(Builtin::Complex) => {
                let c = v.cast::<PyComplex>().map_err(PyErr::from)?;
                self.out.push_str("{\"$complex\":[");
                float(&mut self.out, c.real());
                self.out.push(',');
                float(&mut self.out, c.imag());
                self.out.push_str("]}");
            }
            Form::Decimal => {
                let text = v.str()?;
                let text = text.to_str()?;
                if !is_decimal_text(text) {
                    return Err(Unhandled);
                }
                self.out.push_str("{\"$decimal\":");
                self.text(text);
                self.out.push('}');
            }
            Form::Uuid => {
                let bytes = v.getattr(crate::allocation::interned!(v.py(), "bytes")?)?;
                let bytes: [u8; 16] = bytes.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes().try_into().map_err(|_| Unhandled)?;
                self.out.push_str("{\"$uuid\":\"");
                clock::write_uuid(&bytes, &mut self.out);
                self.out.push_str("\"}");
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

    /// A JSON string of text taken from Python.
    fn text(&mut self, text: &str) {
        string(&mut self.out, text);
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
        self.out.push_str("{\"$surrogates\":");
        self.base64(bytes.as_bytes());
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

    fn base64(&mut self, bytes: &[u8]) {
        self.out.push('"');
        base64::encode(bytes, &mut self.out);
        self.out.push_str("\"}");
    }

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

    fn list(&mut self, list: &Bound<'py, PyList>, depth: usize) -> Step {
        if self.slot_or_ref(list.as_any())? {
            return Ok(());
        }
        let slot = self.next_slot - 1;
        if !self.targets.is_empty() && self.targets.contains(&slot) {
            self.open_tagged("\"$list\":");
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

    fn tuple(&mut self, tuple: &Bound<'py, PyTuple>, depth: usize) -> Step {
        if self.slot_or_ref(tuple.as_any())? {
            return Ok(());
        }
        self.open_tagged("\"$tuple\":");
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
    fn dict(&mut self, dict: &Bound<'py, PyDict>, depth: usize) -> Step {
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
        let mut first = !self.open_with_id();
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
        self.open_tagged("\"$dict\":[");
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
    fn set(&mut self, v: &Bound<'py, PyAny>, tag: &str, depth: usize) -> Step {
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

    fn object(&mut self, v: &Bound<'py, PyAny>, form: &ObjectForm, depth: usize) -> Step {
        if self.slot_or_ref(v)? {
            return Ok(());
        }
        let obj = v.as_borrowed();
        match &form.slots {
            Some(layout) => self.fields(SlotItems::of(obj, layout)?, form, depth)?,
            None => match InstanceValues::<OwnArray>::of(obj) {
                Some(values) => self.fields(values, form, depth)?,
                None => match InstanceValues::<MadeDict>::of(obj) {
                    Some(values) => self.fields(values, form, depth)?,
                    None => {
                        let dict = match made_dict(obj) {
                            Some(dict) => dict,
                            None => object_dict(v)?,
                        };
                        match DictTable::of(dict.as_borrowed()) {
                            Some(table) => self.fields(table, form, depth)?,
                            None => self.fields(DictNext::new(dict.clone()), form, depth)?,
                        }
                    }
                },
            },
        }
        self.out.push('}');
        Ok(())
    }

    /// The opening of an object (its `"$id"` if it has one, its `"$type"`), then the
    /// `,"name":value` of each of its fields.
    fn fields(&mut self, mut items: impl Cursor<'py>, form: &ObjectForm, depth: usize) -> Step {
        match items.next() {
            Next::Item(key, value) => {
                if !self.cached_opening(form, key) {
                    self.open_object(form);
                    self.field_name(form, 0, key)?;
                    self.keep_opening(form, key);
                }
                self.value(value, depth + 1)?;
            }
            Next::End => {
                self.open_object(form);
                return Ok(());
            }
            Next::Changed => return Err(Unhandled),
        }
        let mut index = 1;
        loop {
            let (key, value) = match items.next() {
                Next::Item(key, value) => (key, value),
                Next::End => return Ok(()),
                Next::Changed => return Err(Unhandled),
            };
            self.field_name(form, index, key)?;
            self.value(value, depth + 1)?;
            index += 1;
        }
    }

    fn open_object(&mut self, form: &ObjectForm) {
        self.open_tagged("\"$type\":");
        self.class_name(&form.class);
    }

    /// Writes the opening of an object of `form`'s class whose first field is `first`, if it
    /// is the one cached; false if it is not (the object has an `"$id"`, the class has no
    /// number yet in this document, or another number or first field than the cached ones).
    #[inline(always)]
    fn cached_opening(&mut self, form: &ObjectForm, first: Borrowed<'_, 'py, PyAny>) -> bool {
        let slot = self.next_slot - 1;
        if !self.targets.is_empty() && self.targets.contains(&slot) {
            return false;
        }
        let opening = form.opening.borrow();
        match (&*opening, form.class.number.get()) {
            (Some(opening), Some(number)) if opening.number == number && opening.first.as_ptr() == first.as_ptr() => {
                opening.text.write(&mut self.out);
                true
            }
            _ => false,
        }
    }

    /// Caches the opening just written (by `open_object` and `field_name` of the first field,
    /// `first`) for the next objects of `form`'s class, unless it is cached already (the
    /// object had an `"$id"`).
    #[cold]
    #[inline(never)]
    fn keep_opening(&mut self, form: &ObjectForm, first: Borrowed<'_, 'py, PyAny>) {
        let Some(number) = form.class.number.get() else { return };
        if form.opening.borrow().as_ref().is_some_and(|opening| opening.number == number && opening.first.as_ptr() == first.as_ptr()) {
            return;
        }
        let fields = form.fields.borrow();
        let Some((name, member)) = fields.first().filter(|(name, _)| name.as_ptr() == first.as_ptr()) else { return };
        let mut text = String::from("{\"$type\":");
        push_u64(&mut text, number);
        text.push_str(member.as_str());
        *form.opening.borrow_mut() = Some(Opening { number, first: name.clone_ref(first.py()), text: Piece::new(text) });
    }

    /// `,"name":` of the field at `index` of an object of `form`'s class.
    #[inline(always)]
    fn field_name(&mut self, form: &ObjectForm, index: usize, key: Borrowed<'_, 'py, PyAny>) -> Step {
        if let Some((known, member)) = form.fields.borrow().get(index) {
            if known.as_ptr() == key.as_ptr() {
                member.write(&mut self.out);
                return Ok(());
            }
        }
        self.new_field_name(form, index, key)
    }

    /// `field_name` of a name not in the cache at `index`, which it then holds.
    #[cold]
    #[inline(never)]
    fn new_field_name(&mut self, form: &ObjectForm, index: usize, key: Borrowed<'_, 'py, PyAny>) -> Step {
        let name = key.cast_exact::<PyString>().map_err(PyErr::from)?;
        let mut member = String::from(",");
        // A name found in the cache was written by this branch before.
        escaped_key(&mut member, str_text(&name)?);
        self.out.push_str(&member);
        let mut members = form.fields.borrow_mut();
        members.truncate(index);
        members.push((name.to_owned().unbind(), Piece::new(member)));
        Ok(())
    }

    /// `{"$datetime"|"$time":"<iso><offset>","$zone":"<key>","$fold":1}`, the last two when they
    /// apply; `opening` is the text up to the ISO text.
    fn clock_value(&mut self, opening: &str, iso: impl FnOnce(&mut BytesOutput<'py>), zone: &TzInfo, fold: bool) {
        self.out.push_str(opening);
        iso(&mut self.out);
        if let TzInfo::Offset(micros) = zone {
            clock::write_offset(*micros, &mut self.out);
        }
        self.out.push('"');
        if let TzInfo::Named(key) = zone {
            self.out.push_str(",\"$zone\":");
            self.text(key);
        }
        if fold {
            self.out.push_str(",\"$fold\":1");
        }
        self.out.push('}');
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

/// How values of `class` are written: encode/classify.rs's `classify`, mapped to the forms of this writer
/// (what it does not write itself goes to the transcoder).
fn classify(class: &Bound<'_, PyType>) -> PyResult<Form> {
    Ok(match encode::classify(class, 0)? {
        Kind::Builtin(builtin) => Form::Builtin(builtin),
        Kind::Decimal => Form::Decimal,
        Kind::Uuid => Form::Uuid,
        Kind::Enum => Form::Enum(ClassName::new(type_name_of(class)?)),
        Kind::Object(_) => {
            let slots = crate::slots::layout_of(class)?;
            Form::Object(Rc::new(ObjectForm { class: ClassName::new(type_name_of(class)?), slots, fields: RefCell::default(), opening: RefCell::default() }))
        }
        Kind::Persistent | Kind::Broken | Kind::Subclass(_) | Kind::Known(_) | Kind::Unsupported => Form::Transcoded,
    })
}

