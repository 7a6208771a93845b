//! The items of a dict, or the attributes of an instance, in the order `PyDict_Next` gives them,
//! as the JSON writer (json_writer.rs) reads them: on CPython 3.11 an instance's inline values
//! and the tables of dicts of str keys straight from CPython's structures (compact_layout.rs);
//! elsewhere, an instance's `__dict__` once made, and tables of keys of any type with
//! `PyDict_Next`.
//!
//! Reading the structures spares the writer an instance's `__dict__`, which CPython 3.11 makes
//! on first request (an allocation per object, and a larger object from then on; the first
//! call on seed 003 took a quarter longer for it), and a `PyDict_Next` call per item of a
//! plain dict, in both the pass that tests its keys and the one that writes them.
//!
//! Python code run while a value is written (an enum's `_name_`, say) may change the dict or
//! the instance being read. `PyDict_Next` checks its bounds at each call; the direct reads
//! check instead, before each item, that what they read is unchanged (the dict's version tag,
//! the instance's values array), and report `Next::Changed` if not.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::encode::{object_dict, FieldSource};
use crate::slots::SlotFields;

use compact::CompactItems;

/// What `Items::next` found.
pub enum Next<'a, 'py> {
    /// A key (borrowed: the caller reads it before any Python code runs) and its value (a new
    /// reference, so that Python code run while it is written cannot free it).
    Item(Borrowed<'a, 'py, PyAny>, Bound<'py, PyAny>),
    End,
    /// The dict or instance changed since reading began.
    Changed,
}

/// A cursor over the items of one dict or instance.
pub struct Items<'py>(Cursor<'py>);

enum Cursor<'py> {
    Compact(CompactItems<'py>),
    Generic { dict: Bound<'py, PyDict>, position: ffi::Py_ssize_t },
    Slots { fields: SlotFields<'py>, position: ffi::Py_ssize_t },
}

impl<'py> Items<'py> {
    /// The attributes of `obj`, whose class gives its instances a `__dict__`: its inline values
    /// if it has them (its `__dict__` is then not made), else its `__dict__`'s items.
    /// A made `__dict__` is read with `PyDict_Next`: measured on seed 001's, that was faster than
    /// reading its split table, whose guard tests outweighed the calls saved.
    #[inline]
    pub fn of_instance(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        match CompactItems::of_instance(obj) {
            Some(items) => Ok(Items(Cursor::Compact(items))),
            None => Ok(Items(Cursor::Generic { dict: object_dict(obj)?, position: 0 })),
        }
    }

    /// The fields of an object of a class with slots (`SlotFields`), read one by one, so that
    /// a slot changed meanwhile is read as it is then.
    pub fn of_slots(fields: SlotFields<'py>) -> Self {
        Items(Cursor::Slots { fields, position: 0 })
    }

    pub fn of_dict(dict: Bound<'py, PyDict>) -> Self {
        match CompactItems::of_dict(&dict) {
            Some(items) => Items(Cursor::Compact(items)),
            None => Items(Cursor::Generic { dict, position: 0 }),
        }
    }

    #[inline]
    pub fn next(&mut self) -> Next<'_, 'py> {
        match &mut self.0 {
            Cursor::Compact(items) => items.next(),
            Cursor::Generic { dict, position } => next_item(dict, position).map_or(Next::End, |(k, v)| Next::Item(k, v)),
            Cursor::Slots { fields, position } => match fields.next_field(position) {
                // SAFETY: borrowed references to live objects: the name held by the slot layout,
                // which `fields` keeps alive, and the value, made owned at once.
                Some((key, value)) => unsafe { Next::Item(Borrowed::from_ptr(fields.py(), key), Bound::from_borrowed_ptr(fields.py(), value)) },
                None => Next::End,
            },
        }
    }
}

/// The item of `dict` at `position` (which it advances), as `PyDict_Next` gives it, with the
/// references of `Next::Item`. A dict changed meanwhile is still read safely by `PyDict_Next`
/// (its entries are bounds-checked).
fn next_item<'a, 'py>(
    dict: &'a Bound<'py, PyDict>,
    position: &mut ffi::Py_ssize_t,
) -> Option<(Borrowed<'a, 'py, PyAny>, Bound<'py, PyAny>)> {
    let (mut key, mut value) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: `dict` is a dict and the GIL is held; on success both pointers are borrowed
    // references to live objects, held by the dict, which `'a` keeps alive.
    unsafe {
        (ffi::PyDict_Next(dict.as_ptr(), position, &mut key, &mut value) != 0)
            .then(|| (Borrowed::from_ptr(dict.py(), key), Bound::from_borrowed_ptr(dict.py(), value)))
    }
}

#[cfg(not(all(Py_3_11, not(Py_3_12), not(PyPy), not(Py_LIMITED_API))))]
mod compact {
    use pyo3::prelude::*;
    use pyo3::types::PyDict;

    use super::Next;

    /// Never made: this CPython's tables are not known (see compact_layout.rs).
    pub struct CompactItems<'py>(std::convert::Infallible, std::marker::PhantomData<Python<'py>>);

    impl<'py> CompactItems<'py> {
        pub fn of_instance(_obj: &Bound<'py, PyAny>) -> Option<Self> {
            None
        }

        pub fn of_dict(_dict: &Bound<'py, PyDict>) -> Option<Self> {
            None
        }

        pub fn next(&mut self) -> Next<'_, 'py> {
            match self.0 {}
        }
    }
}

#[cfg(all(Py_3_11, not(Py_3_12), not(PyPy), not(Py_LIMITED_API)))]
mod compact {
    use pyo3::ffi;
    use pyo3::prelude::*;
    use pyo3::types::PyDict;

    use super::Next;
    use crate::compact_layout::{self as layout, DictKeys, UnicodeEntry};

    /// The items of a table of str keys, read directly.
    pub struct CompactItems<'py> {
        table: Table,
        /// What keeps `table` valid, tested before each item.
        guard: Guard<'py>,
        /// The next position in the insertion order (split tables) or in the entries.
        position: usize,
    }

    enum Table {
        /// A values array with its insertion order, indexed like the entries of a shared key
        /// table (`entry_count` of them when reading began).
        Split { values: *mut *mut ffi::PyObject, entries: *const UnicodeEntry, entry_count: usize },
        /// The entries of a combined table, in insertion order; a deleted one has no value.
        Combined { entries: *const UnicodeEntry, entry_count: usize },
    }

    enum Guard<'py> {
        /// An instance and its inline values: the array is valid while the instance still points
        /// to it. It is freed only after the instance has handed it to a dict made for it (which
        /// nulls the pointer first), so a pointer still equal cannot be a new array at the same
        /// address.
        Instance(Bound<'py, PyAny>, *mut *mut ffi::PyObject),
        /// A dict, unchanged while its version tag is: PEP 509 (in force up to 3.11) has every
        /// change of a dict give it a new version, from a counter that never repeats.
        Dict(Bound<'py, PyDict>, u64),
    }

    impl<'py> CompactItems<'py> {
        #[inline]
        pub fn of_instance(obj: &Bound<'py, PyAny>) -> Option<Self> {
            let ptr = obj.as_ptr();
            // SAFETY: `obj` is live and the GIL is held. The values pointer is read only once the
            // type has a managed dict; the key table is read while the type holds it.
            unsafe {
                let ty = ffi::Py_TYPE(ptr);
                let flags = (*ty).tp_flags;
                if flags & ffi::Py_TPFLAGS_MANAGED_DICT == 0 || flags & ffi::Py_TPFLAGS_HEAPTYPE == 0 {
                    return None;
                }
                let values = *layout::values_pointer(ptr);
                let keys = (*ty.cast::<ffi::PyHeapTypeObject>()).ht_cached_keys.cast::<DictKeys>();
                if values.is_null() || keys.is_null() || (*keys).kind != layout::KEYS_SPLIT {
                    return None;
                }
                Some(CompactItems {
                    table: split(values, keys),
                    guard: Guard::Instance(obj.clone(), values),
                    position: 0,
                })
            }
        }

        pub fn of_dict(dict: &Bound<'py, PyDict>) -> Option<Self> {
            let mp = dict.as_ptr().cast::<ffi::PyDictObject>();
            // SAFETY: `dict` is a live dict and the GIL is held; its key table (never null) and
            // values array (null for a combined table) are live while it holds them.
            unsafe {
                let keys = (*mp).ma_keys.cast::<DictKeys>();
                let values = (*mp).ma_values.cast::<*mut ffi::PyObject>();
                let table = if !values.is_null() && (*keys).kind == layout::KEYS_SPLIT {
                    split(values, keys)
                } else if values.is_null() && (*keys).kind == layout::KEYS_UNICODE {
                    Table::Combined { entries: layout::unicode_entries(keys), entry_count: entry_count(keys) }
                } else {
                    return None;
                };
                Some(CompactItems { table, guard: Guard::Dict(dict.clone(), (*mp).ma_version_tag), position: 0 })
            }
        }

        #[inline]
        pub fn next(&mut self) -> Next<'_, 'py> {
            let unchanged = match &self.guard {
                // SAFETY: `of_instance` found that the type has a managed dict, and an instance
                // with inline values cannot change type (assigning `__class__` makes its dict
                // first, which this test then sees).
                Guard::Instance(obj, values) => unsafe { *layout::values_pointer(obj.as_ptr()) == *values },
                // SAFETY: a live dict; only its version tag is read.
                Guard::Dict(dict, version) => unsafe {
                    (*dict.as_ptr().cast::<ffi::PyDictObject>()).ma_version_tag == *version
                },
            };
            if !unchanged {
                return Next::Changed;
            }
            let py = match &self.guard {
                Guard::Instance(obj, _) => obj.py(),
                Guard::Dict(dict, _) => dict.py(),
            };
            // SAFETY: the guard holds, so the table is the live one `of_*` found: for a split
            // table, the values array and the shared key table (whose entries are only ever
            // added to, while the class holds it); for a combined one, the dict's unchanged key
            // table. Positions are bounded by the current insertion count or the entry count,
            // and indices by the entry count, so every read is within them. A key and a value in
            // the table are live objects held by it.
            unsafe {
                let (key, value) = match self.table {
                    Table::Split { values, entries, entry_count } => {
                        if self.position >= layout::inserted_count(values) {
                            return Next::End;
                        }
                        let index = layout::inserted_index(values, self.position);
                        if index >= entry_count {
                            // A name added to the class's key table since reading began.
                            return Next::Changed;
                        }
                        self.position += 1;
                        ((*entries.add(index)).key, *values.add(index))
                    }
                    Table::Combined { entries, entry_count } => loop {
                        if self.position >= entry_count {
                            return Next::End;
                        }
                        let entry = entries.add(self.position);
                        self.position += 1;
                        if !(*entry).value.is_null() {
                            break ((*entry).key, (*entry).value);
                        }
                    },
                };
                // CPython's invariants say neither is null; a null would make the cast below panic.
                if key.is_null() || value.is_null() {
                    return Next::Changed;
                }
                Next::Item(Borrowed::from_ptr(py, key), Bound::from_borrowed_ptr(py, value))
            }
        }
    }

    /// The table of a values array indexed like the split key table `keys`.
    ///
    /// # Safety
    /// `values` and `keys` must be live, `keys` a split table.
    unsafe fn split(values: *mut *mut ffi::PyObject, keys: *const DictKeys) -> Table {
        // SAFETY: the caller's guarantee.
        unsafe { Table::Split { values, entries: layout::unicode_entries(keys), entry_count: entry_count(keys) } }
    }

    /// # Safety
    /// `keys` must be a live key table.
    unsafe fn entry_count(keys: *const DictKeys) -> usize {
        // SAFETY: the caller's guarantee; the count is never negative.
        unsafe { usize::try_from((*keys).nentries).unwrap_or(0) }
    }
}
