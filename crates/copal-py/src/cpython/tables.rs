//! The items of a dict, or the fields of an instance, read straight from the tables of CPython
//! 3.11, 3.12 and 3.13 (the key tables of `dict_layout`, the values arrays of the version's
//! `instance`): an instance's values array (its own, or its made dict's) and the tables of
//! dicts of str keys, in the order `PyDict_Next` gives them. The JSON writer (json_writer.rs)
//! and the binary encoder (encode/fields.rs) read them through the cursors of dict_items.rs;
//! elsewhere `cpython::no_tables` finds none of these, and they read `PyDict_Next`.
//!
//! Reading the structures spares the readers an instance's `__dict__`, which CPython makes on
//! first request (an allocation per object, a separate object to fetch from memory for every
//! read from then on), and a `PyDict_Next` call per item of a plain dict.
//!
//! Python code run while a value is written (an enum's `_name_`, say) may change the dict or
//! the instance being read. Before each item, the reads check that what they read is unchanged
//! (the dict's version tag, the instance's values array), and report `Next::Changed` if not.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::dict_layout::{self, DictKeys, UnicodeEntry};
use super::instance;
use crate::dict_items::{Cursor, Next};

/// The values array of an instance with a managed dict, kept as `H` says (`Holder`),
/// indexed like the entries of its key table, read in the order they were set.
pub struct InstanceValues<'a, 'py, H: Holder> {
    obj: Borrowed<'a, 'py, PyAny>,
    inline: Inline<H>,
    /// The next position in the insertion order.
    position: usize,
}

/// The fields of an instance with a values array kept as `H` says, as the binary encoder
/// reads them (encode/fields.rs `FieldSource`), without the dict CPython would make to give them
/// (or, once made, without a reference to it). The instance is borrowed: a reference taken
/// and dropped per object cost 6% of writing 1,000 `Foo` (and more at 100,000, where the
/// stores miss the cache).
pub struct ValuesFields<'a, 'py, H: Holder> {
    obj: Borrowed<'a, 'py, PyAny>,
    inline: Inline<H>,
}

/// A field was not read: the instance's values array is no longer the one found first (its
/// dict was made, or the array replaced), its made dict changed, or the key table holds
/// names added since.
pub struct Changed;

/// An instance's values array, the key table that indexes it, and what shows that the
/// array is still the one found.
#[derive(Clone, Copy)]
pub struct Inline<H> {
    holder: H,
    values: *mut *mut ffi::PyObject,
    keys: SharedKeys,
}

/// The entries of a key table, as many as it had when reading began.
#[derive(Clone, Copy)]
struct SharedKeys {
    entries: *const UnicodeEntry,
    count: usize,
}

impl SharedKeys {
    /// # Safety
    /// `keys` must be a live table of unicode entries (`KEYS_UNICODE` or `KEYS_SPLIT`).
    unsafe fn of(keys: *const DictKeys) -> Self {
        // SAFETY: the caller's guarantee; the count is never negative.
        unsafe { SharedKeys { entries: dict_layout::unicode_entries(keys), count: usize::try_from((*keys).nentries).unwrap_or(0) } }
    }
}

/// Where an instance's values array is, and how it is known to be still the one found: in
/// the instance itself (`OwnArray`), or in the dict made for it, which took the array over
/// (`MadeDict`). Both are read the same way. Two types, not one with a flag, so that the
/// test made before each field is one branch-free comparison or two: with a flag the loop
/// over seed 001's fields took 74 more instructions per `Foo`.
pub trait Holder: Copy {
    /// The values array of `ptr` and the key table that indexes it, if kept this way.
    ///
    /// # Safety
    /// `ptr` must be a live object, and the GIL held.
    unsafe fn find(ptr: *mut ffi::PyObject) -> Option<Inline<Self>>;

    /// Whether `values`, the array `find` found for `obj`, is still its array: for a made
    /// dict, whether it is still the dict found, unchanged (then its array and key table
    /// are those found too).
    ///
    /// # Safety
    /// `obj` must be the live object `find` was given.
    unsafe fn holds(&self, obj: *mut ffi::PyObject, values: *mut *mut ffi::PyObject) -> bool;
}

/// The instance keeps its values array: its dict was never made. The array is valid while
/// the instance still points to it. It is freed only after the instance has handed it to a
/// dict made for it (which nulls the pointer first), so a pointer still equal cannot be a
/// new array at the same address. Values added to it meanwhile are read too.
#[derive(Clone, Copy)]
pub struct OwnArray;

/// The instance's dict was made and holds the array, with a split key table. Read without
/// a reference to the dict: while the instance still points to the dict, the dict is live
/// (the instance holds it), and while its version tag is unchanged it is the dict found,
/// unchanged (PEP 509: each change, and each new dict, takes a new version from a counter
/// that never repeats). Objects whose `__dict__` other libraries asked for (seed 001 in the
/// codec suite) took 135 more instructions per `Foo` through `DictTable` and a reference.
#[derive(Clone, Copy)]
pub struct MadeDict {
    dict: *mut ffi::PyObject,
    version: u64,
}

impl Holder for OwnArray {
    #[inline]
    unsafe fn find(ptr: *mut ffi::PyObject) -> Option<Inline<Self>> {
        // SAFETY: the caller's guarantee. The values pointer is read only once the type
        // has a managed dict (`shared_keys`); the key table is read while the type holds it.
        unsafe {
            let keys = dict_layout::shared_keys(ffi::Py_TYPE(ptr))?;
            let values = instance::own_values(ptr)?;
            Some(Inline { holder: OwnArray, values, keys: SharedKeys::of(keys) })
        }
    }

    #[inline(always)]
    unsafe fn holds(&self, obj: *mut ffi::PyObject, values: *mut *mut ffi::PyObject) -> bool {
        // SAFETY: `find` found `values` in `obj` (see `instance::holds_own_values`).
        unsafe { instance::holds_own_values(obj, values) }
    }
}

impl Holder for MadeDict {
    #[inline]
    unsafe fn find(ptr: *mut ffi::PyObject) -> Option<Inline<Self>> {
        // SAFETY: the caller's guarantee. The dict pointer is read only once the type has a
        // managed dict; the dict is live while the instance holds it, and its tables while
        // it holds them.
        unsafe {
            if !instance::VERSIONED_DICTS || !dict_layout::has_managed_dict(ffi::Py_TYPE(ptr)) {
                return None;
            }
            let dict = instance::made_dict_pointer(ptr);
            if dict.is_null() || ffi::PyDict_CheckExact(dict) == 0 {
                return None;
            }
            let mp = dict.cast::<ffi::PyDictObject>();
            let (keys, values) = ((*mp).ma_keys.cast::<DictKeys>(), (*mp).ma_values);
            (!values.is_null() && (*keys).kind == dict_layout::KEYS_SPLIT).then(|| Inline {
                holder: MadeDict { dict, version: version_tag(mp) },
                values: instance::array_of(values),
                keys: SharedKeys::of(keys),
            })
        }
    }

    #[inline(always)]
    unsafe fn holds(&self, obj: *mut ffi::PyObject, _values: *mut *mut ffi::PyObject) -> bool {
        // SAFETY: the instance's type has a managed dict (`find`), and a type assigned to
        // `__class__` since has the same layout (`compatible_for_assignment`), so the dict
        // pointer is where it was; a dict it still points to is live.
        unsafe { instance::made_dict_pointer(obj) == self.dict && version_tag(self.dict.cast()) == self.version }
    }
}

impl<H: Holder> Inline<H> {
    /// How many fields `obj`, the instance the array was found in, has set.
    ///
    /// # Safety
    /// `obj` must be that instance, and the GIL held.
    #[inline]
    unsafe fn count(&self, obj: *mut ffi::PyObject) -> Result<usize, Changed> {
        // SAFETY: the caller's guarantee; an array its holder still holds is live.
        unsafe {
            if !self.holder.holds(obj, self.values) {
                return Err(Changed);
            }
            Ok(instance::inserted_count(self.values))
        }
    }

    /// The name and value of the field set `position`-th in `obj`, or None after the last:
    /// borrowed, valid while no Python code runs.
    ///
    /// # Safety
    /// As for `count`.
    #[inline]
    unsafe fn at(&self, obj: *mut ffi::PyObject, position: usize) -> Result<Option<(*mut ffi::PyObject, *mut ffi::PyObject)>, Changed> {
        // SAFETY: while its holder holds it (`count`) the array is the live one `find`
        // found, and so is the key table: a class's shared table is only ever added to
        // while the class holds it, and an unchanged made dict still holds the table found.
        // The position is bounded by the insertion count, the index by the entry count
        // found, so every read is within them.
        unsafe {
            if position >= self.count(obj)? {
                return Ok(None);
            }
            let index = instance::inserted_index(self.values, position);
            if index >= self.keys.count {
                // A name added to the class's key table since reading began.
                return Err(Changed);
            }
            Ok(Some(((*self.keys.entries.add(index)).key, *self.values.add(index))))
        }
    }
}

impl<'a, 'py, H: Holder> InstanceValues<'a, 'py, H> {
    #[inline]
    pub fn of(obj: Borrowed<'a, 'py, PyAny>) -> Option<Self> {
        // SAFETY: `obj` is live and the GIL is held.
        let inline = unsafe { H::find(obj.as_ptr())? };
        Some(InstanceValues { obj, inline, position: 0 })
    }
}

impl<'a, 'py, H: Holder> ValuesFields<'a, 'py, H> {
    /// The fields of `obj` if it keeps them in a values array held as `H` says.
    pub fn of(obj: &'a Bound<'py, PyAny>) -> Option<Self> {
        // SAFETY: `obj` is live and the GIL is held.
        let inline = unsafe { H::find(obj.as_ptr())? };
        Some(ValuesFields { obj: obj.as_borrowed(), inline })
    }

    pub fn py(&self) -> Python<'py> {
        self.obj.py()
    }

    /// The instance.
    pub fn obj(&self) -> Borrowed<'a, 'py, PyAny> {
        self.obj
    }

    /// How many fields are set.
    pub fn count(&self) -> Result<usize, Changed> {
        // SAFETY: `obj` is the live instance the array was found in (borrowed by `self`).
        unsafe { self.inline.count(self.obj.as_ptr()) }
    }

    /// The name and value of the field set `position`-th, or None after the last: borrowed,
    /// valid while no Python code runs.
    pub fn at(&self, position: usize) -> Result<Option<(*mut ffi::PyObject, *mut ffi::PyObject)>, Changed> {
        // SAFETY: as in `count`.
        unsafe { self.inline.at(self.obj.as_ptr(), position) }
    }

    /// Pushes the name and value of every field onto `fields`, in the order they were set,
    /// and returns how many (the position after the last): `at` for each position, with
    /// the array checked once.
    #[inline]
    pub fn read_all(&self, fields: &mut Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>) -> Result<usize, Changed> {
        let Inline { values, keys, .. } = self.inline;
        // SAFETY: as in `Inline::at`: the array and key table are the live ones `find`
        // found (`count`), no Python code runs meanwhile, and every index is checked against
        // the entry count.
        unsafe {
            let count = self.count()?;
            fields.reserve(count);
            for position in 0..count {
                let index = instance::inserted_index(values, position);
                if index >= keys.count {
                    return Err(Changed);
                }
                fields.push(((*keys.entries.add(index)).key, *values.add(index)));
            }
            Ok(count)
        }
    }
}

/// The dict of an instance with a managed dict, once made: read where CPython keeps it,
/// without the call `PyObject_GenericGetDict` costs.
pub fn made_dict<'py>(obj: Borrowed<'_, 'py, PyAny>) -> Option<Bound<'py, PyDict>> {
    let ptr = obj.as_ptr();
    // SAFETY: `obj` is live and the GIL is held; the dict pointer is read only once the type
    // has a managed dict, and is null or the instance's dict, which it holds.
    unsafe {
        if (*ffi::Py_TYPE(ptr)).tp_flags & ffi::Py_TPFLAGS_MANAGED_DICT == 0 {
            return None;
        }
        let dict = instance::made_dict_pointer(ptr);
        (!dict.is_null() && ffi::PyDict_CheckExact(dict) != 0).then(|| Bound::from_borrowed_ptr(obj.py(), dict).cast_into_unchecked())
    }
}

impl<'py, H: Holder> Cursor<'py> for InstanceValues<'_, 'py, H> {
    #[inline]
    fn next(&mut self) -> Next<'_, 'py> {
        // SAFETY: `obj` is the live instance the array was found in.
        match unsafe { self.inline.at(self.obj.as_ptr(), self.position) } {
            Err(Changed) => Next::Changed,
            Ok(None) => Next::End,
            Ok(Some((key, value))) => {
                self.position += 1;
                // SAFETY: both read from the live array and key table that hold them.
                unsafe { item(self.obj.py(), key, value) }
            }
        }
    }
}

/// A plain dict whose table holds strs only (`DICT_KEYS_UNICODE`, which `insertdict` turns
/// into `DICT_KEYS_GENERAL` before taking any other key, or a split table), read entry by
/// entry. Its keys are exact strs.
pub struct DictTable<'a, 'py> {
    dict: Borrowed<'a, 'py, PyDict>,
    /// The dict is unchanged while its version tag is (`instance::VERSIONED_DICTS`).
    version: u64,
    table: Table,
    /// The next position in the insertion order (split tables) or in the entries.
    position: usize,
}

enum Table {
    /// A values array with its insertion order, indexed like the entries of a split table.
    Split { values: *mut *mut ffi::PyObject, keys: SharedKeys },
    /// The entries of a combined table, in insertion order; a deleted one has no value.
    Combined(SharedKeys),
}

impl<'a, 'py> DictTable<'a, 'py> {
    pub fn of(dict: Borrowed<'a, 'py, PyDict>) -> Option<Self> {
        if !instance::VERSIONED_DICTS {
            return None;
        }
        let mp = dict.as_ptr().cast::<ffi::PyDictObject>();
        // SAFETY: `dict` is a live dict and the GIL is held; its key table (never null) and
        // values array (null for a combined table) are live while it holds them.
        unsafe {
            let keys = (*mp).ma_keys.cast::<DictKeys>();
            let values = (*mp).ma_values;
            let table = if !values.is_null() && (*keys).kind == dict_layout::KEYS_SPLIT {
                Table::Split { values: instance::array_of(values), keys: SharedKeys::of(keys) }
            } else if values.is_null() && (*keys).kind == dict_layout::KEYS_UNICODE {
                Table::Combined(SharedKeys::of(keys))
            } else {
                return None;
            };
            Some(DictTable { dict, version: version_tag(mp), table, position: 0 })
        }
    }

    /// The position that `PyDict_Next` gives after the items read so far (its
    /// insertion-order index in a split table, its entry index in another).
    pub fn position(&self) -> ffi::Py_ssize_t {
        // Below the table's entry count, which is a `Py_ssize_t`.
        self.position as ffi::Py_ssize_t
    }
}

impl<'py> Cursor<'py> for DictTable<'_, 'py> {
    #[inline]
    fn next(&mut self) -> Next<'_, 'py> {
        // SAFETY: while the version tag is unchanged the tables are the live ones `of` found:
        // for a split table, the values array and the shared key table (whose entries are
        // only ever added to); for a combined one, the dict's unchanged key table. Positions
        // are bounded by the current insertion count or the entry count, and indices by the
        // entry count, so every read is within them.
        unsafe {
            if version_tag(self.dict.as_ptr().cast()) != self.version {
                return Next::Changed;
            }
            let (key, value) = match self.table {
                Table::Split { values, keys } => {
                    if self.position >= instance::inserted_count(values) {
                        return Next::End;
                    }
                    let index = instance::inserted_index(values, self.position);
                    if index >= keys.count {
                        return Next::Changed;
                    }
                    self.position += 1;
                    ((*keys.entries.add(index)).key, *values.add(index))
                }
                Table::Combined(keys) => loop {
                    if self.position >= keys.count {
                        return Next::End;
                    }
                    let entry = keys.entries.add(self.position);
                    self.position += 1;
                    if !(*entry).value.is_null() {
                        break ((*entry).key, (*entry).value);
                    }
                },
            };
            item(self.dict.py(), key, value)
        }
    }
}

/// The version tag of `dict` (PEP 509), read only where `instance::VERSIONED_DICTS` says each
/// change of a dict, and each new dict, takes a new one.
///
/// # Safety
/// `dict` must be a live dict.
#[inline(always)]
unsafe fn version_tag(dict: *const ffi::PyDictObject) -> u64 {
    // SAFETY: the caller's guarantee.
    #[allow(deprecated)]
    unsafe {
        (*dict).ma_version_tag
    }
}

/// The item of `key` and `value`, read from a live table that holds them.
///
/// # Safety
/// Both must be null or live objects that the table holds.
#[inline]
unsafe fn item<'c, 'py>(py: Python<'py>, key: *mut ffi::PyObject, value: *mut ffi::PyObject) -> Next<'c, 'py> {
    // CPython's invariants say neither is null; a null would be an object that is not there.
    if key.is_null() || value.is_null() {
        return Next::Changed;
    }
    // SAFETY: the caller's guarantee.
    unsafe { Next::Item(Borrowed::from_ptr(py, key), Borrowed::from_ptr(py, value)) }
}
