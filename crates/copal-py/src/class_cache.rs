//! What copal learns about a Python class, kept across calls for as long as the class is
//! unchanged.
//!
//! `copal.dumps` and `copal.loads` of a small object spent most of their time learning about its
//! classes, once per call: its stored type name, the interned names of its fields, and on loading whether it may be rebuilt from data
//! (`decode::check_inert`, `decode::check_plain_class`). Each of these reads only the class's
//! own namespace, its MRO (the namespaces of its bases) and its metaclass, so it is kept here,
//! per class, for the process.
//!
//! Invalidation rule (docs/ARCHITECTURE.md "Class facts across calls"): a fact is reused only
//! while the class's `Stamp` is the one it was computed under. The stamp holds CPython's type
//! version tag of the class and of its metaclass: CPython clears the tag of a type, and of every
//! subclass, whenever an attribute of it is set or deleted or its bases or MRO change, and never
//! gives the same tag to two types (the tags come from one counter per interpreter), so a valid
//! tag equal to the stored one proves that the class is the same class, with the same MRO and
//! the same namespaces all along it. The stamp also holds the metaclass and the `__qualname__`
//! object, which can be replaced without changing the tag. A type without a valid tag (none can
//! be assigned, or too many modifications) is never cached: every call learns afresh, as before.
//! The stamp is read before a fact is computed and the fact is stored under it, so a class that
//! changes while the fact is being computed (Python code runs then) leaves a fact that never
//! matches. Free-threaded builds keep no cache.
//!
//! Classes are keyed by address and not kept alive: a dead class's address can be reused only
//! by a type with another version tag, whose stamp does not match. The table is bounded, since
//! every class encoded or loaded in the process takes an entry (test suites define thousands).

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};

use crate::classes::keys_are;
use crate::cpython::class_attribute;
use crate::decode::DecodeInfo;
use crate::hashing::IntMap;

/// How many classes the table holds before it is emptied and refilled by use.
const MAX_CLASSES: usize = 4096;
/// How many field lists are kept per class. Stored field lists come from the data being loaded,
/// so they must not grow the table without bound.
const MAX_FIELD_LISTS: usize = 16;

/// What is known about one class. Every fact is None until first computed.
#[derive(Default)]
pub(crate) struct ClassFacts {
    pub type_name: Option<String>,
    pub tracks_own: Option<bool>,
    /// The field lists written for instances of the class, as `classes::field_names` returns
    /// them. Shared so that they are matched against an instance dict outside the lock (the
    /// match may call a key's `__eq__`).
    field_lists: Arc<[Arc<FieldNames>]>,
    /// Field lists for which `decode::check_inert` passed and whose outcome cannot change while
    /// the stamp holds (see `check_inert`). Names are compared by identity (the decoder interns
    /// them) and held, so that a dead name's address cannot come back as another name.
    inert_fields: Vec<Vec<Py<PyString>>>,
    /// Whether `check_plain_class` passed: instances may be made with `object.__new__`.
    pub plain_instances: Option<()>,
    /// The slots of the class's instances (`slots::layout_of`).
    pub slots: Option<Option<Arc<crate::slots::SlotLayout>>>,
    /// The address of a built-in base of the class and whether the class's instances are
    /// rebuilt by that base (`encode::rebuilt_by_base`).
    pub rebuilt_by_base: Option<(usize, bool)>,
}

/// A class's field names, as strings and interned.
pub struct FieldNames {
    pub names: Vec<String>,
    pub interned: Vec<Py<PyString>>,
}

/// What a cached fact depends on besides the class's address (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    version_tag: u32,
    metaclass: usize,
    metaclass_version_tag: u32,
    qualname: usize,
}

struct Cached {
    stamp: Stamp,
    /// Keeps the `__qualname__` of the stamp alive, so that its address names that string.
    _qualname: Option<Py<PyAny>>,
    facts: ClassFacts,
}

static CLASSES: Mutex<Option<IntMap<usize, Cached>>> = Mutex::new(None);

fn classes() -> MutexGuard<'static, Option<IntMap<usize, Cached>>> {
    // Nothing panics while the lock is held; a poisoned table is still consistent.
    CLASSES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The fact selected by `slot`, computed by `compute` if it is not known for the class as it is
/// now. Only successes are kept: a failing `compute` runs again on the next call.
pub(crate) fn remembered<T: Clone>(
    class: &Bound<'_, PyType>,
    slot: impl Fn(&mut ClassFacts) -> &mut Option<T>,
    compute: impl FnOnce() -> PyResult<T>,
) -> PyResult<T> {
    let Some(stamp) = stamp(class) else { return compute() };
    if let Some(known) = read(class, stamp, |facts| slot(facts).clone()).flatten() {
        return Ok(known);
    }
    let value = compute()?;
    write(class, stamp, |facts| *slot(facts) = Some(value.clone()));
    Ok(value)
}

/// The field names of `dict`, an instance dict of `class`, reusing the interned names found for
/// an earlier instance with the same keys.
pub fn field_names(class: &Bound<'_, PyType>, dict: &Bound<'_, PyDict>) -> PyResult<Arc<FieldNames>> {
    let Some(stamp) = stamp(class) else { return fresh_field_names(dict) };
    let known = read(class, stamp, |facts| Arc::clone(&facts.field_lists)).unwrap_or_else(|| Arc::new([]));
    if let Some(fields) = known.iter().find(|fields| keys_are(dict, &fields.interned)) {
        return Ok(Arc::clone(fields));
    }
    let fields = fresh_field_names(dict)?;
    write(class, stamp, |facts| {
        if facts.field_lists.len() < MAX_FIELD_LISTS {
            facts.field_lists = facts.field_lists.iter().cloned().chain([Arc::clone(&fields)]).collect();
        }
    });
    Ok(fields)
}

fn fresh_field_names(dict: &Bound<'_, PyDict>) -> PyResult<Arc<FieldNames>> {
    let (names, interned) = crate::classes::field_names(dict)?;
    Ok(Arc::new(FieldNames { names, interned }))
}

/// `decode::check_inert`, skipped for a class and field list that passed it before. Returns the
/// stamp the class had when the check began if the pass holds for as long as the class keeps
/// that stamp, else None.
///
/// The check reads the class's MRO and namespaces, which the stamp covers, and the type of each
/// attribute named like a field (whether it is a data descriptor). An immutable type's slots
/// are fixed, but a mutable one (a Python class, or a C class not marked immutable) can gain a
/// `__set__` later without any change to `class`, so a pass is kept only if no field names an
/// attribute whose type is mutable.
pub fn check_inert(class: &Bound<'_, PyType>, info: &DecodeInfo) -> PyResult<Option<Stamp>> {
    let Some(stamp) = stamp(class) else { return crate::decode::check_inert(class, info).map(|()| None) };
    let same = |passed: &Vec<Py<PyString>>| passed.iter().map(Py::as_ptr).eq(info.fields.iter().map(Py::as_ptr));
    if read(class, stamp, |facts| facts.inert_fields.iter().any(same)) == Some(true) {
        return Ok(Some(stamp));
    }
    crate::decode::check_inert(class, info)?;
    let py = class.py();
    let outcome_is_fixed = info.fields.iter().all(|field| match class_attribute(class, field.bind(py)) {
        Some(attribute) => !crate::encode::is_mutable_class(&attribute.get_type()),
        None => true,
    });
    if outcome_is_fixed {
        // A list the table has no room for is dropped after the lock is released (see `write`).
        let mut unfiled = Some(info.fields.iter().map(|field| field.clone_ref(py)).collect());
        write(class, stamp, |facts| {
            if facts.inert_fields.len() < MAX_FIELD_LISTS {
                facts.inert_fields.extend(unfiled.take());
            }
        });
        drop(unfiled);
    }
    Ok(outcome_is_fixed.then_some(stamp))
}

#[cfg(Py_3_12)]
extern "C" {
    fn PyUnstable_Type_AssignVersionTag(class: *mut ffi::PyTypeObject) -> std::os::raw::c_int;
}

/// Runs `f` on the facts of `class` if they were computed under `stamp`.
fn read<R>(class: &Bound<'_, PyType>, stamp: Stamp, f: impl FnOnce(&mut ClassFacts) -> R) -> Option<R> {
    let mut table = classes();
    let cached = table.as_mut()?.get_mut(&(class.as_ptr() as usize))?;
    (cached.stamp == stamp).then(|| f(&mut cached.facts))
}

/// Runs `f` on the facts of `class` under `stamp`, which replace any computed under another.
fn write(class: &Bound<'_, PyType>, stamp: Stamp, f: impl FnOnce(&mut ClassFacts)) {
    let mut qualname = heap_qualname(class).map(|qualname| qualname.clone().unbind());
    // Replaced entries are dropped after the lock is released: dropping them releases Python
    // objects (a `__qualname__` may be a str subclass with a finalizer), and no Python code may
    // run under the lock.
    let mut replaced = Vec::new();
    {
        let mut guard = classes();
        let table = guard.get_or_insert_with(IntMap::default);
        let key = class.as_ptr() as usize;
        if table.len() >= MAX_CLASSES && !table.contains_key(&key) {
            replaced.extend(table.drain().map(|(_, cached)| cached));
        }
        let cached = match table.entry(key) {
            std::collections::hash_map::Entry::Occupied(entry) if entry.get().stamp == stamp => entry.into_mut(),
            entry => {
                let fresh = Cached { stamp, _qualname: qualname.take(), facts: ClassFacts::default() };
                match entry {
                    std::collections::hash_map::Entry::Occupied(mut entry) => {
                        replaced.push(std::mem::replace(entry.get_mut(), fresh));
                        entry.into_mut()
                    }
                    std::collections::hash_map::Entry::Vacant(entry) => entry.insert(fresh),
                }
            }
        };
        f(&mut cached.facts);
    }
    drop((replaced, qualname));
}

/// The stamp of `class` as it is now, or None if it cannot be cached.
#[cfg(not(Py_GIL_DISABLED))]
pub(crate) fn stamp(class: &Bound<'_, PyType>) -> Option<Stamp> {
    let metaclass = class.get_type();
    Some(Stamp {
        version_tag: version_tag(class)?,
        metaclass: metaclass.as_ptr() as usize,
        metaclass_version_tag: version_tag(&metaclass)?,
        qualname: heap_qualname(class).map_or(0, |qualname| qualname.as_ptr() as usize),
    })
}

/// On the free-threaded build another thread could change a class between the reading of its
/// stamp and of its namespaces, without the GIL to order them: nothing is cached there.
#[cfg(Py_GIL_DISABLED)]
pub(crate) fn stamp(_class: &Bound<'_, PyType>) -> Option<Stamp> {
    None
}

/// The `__qualname__` object of a heap type (static types have none: their name is fixed).
fn heap_qualname<'py>(class: &Bound<'py, PyType>) -> Option<Bound<'py, PyAny>> {
    // SAFETY: `class` is a valid type object; only its flags are read.
    if unsafe { (*class.as_type_ptr()).tp_flags } & ffi::Py_TPFLAGS_HEAPTYPE == 0 {
        return None;
    }
    // SAFETY: a heap type's object is a PyHeapTypeObject; ht_qualname is always a str.
    unsafe {
        let qualname = (*class.as_type_ptr().cast::<ffi::PyHeapTypeObject>()).ht_qualname;
        Bound::from_borrowed_ptr_or_opt(class.py(), qualname)
    }
}

/// The valid version tag of `class`, assigned now if it has none.
fn version_tag(class: &Bound<'_, PyType>) -> Option<u32> {
    let ty = class.as_type_ptr();
    // SAFETY: `ty` is a live type object and the GIL is held; only its flags and tag are read,
    // and the assignment below is CPython's own.
    unsafe {
        if !has_valid_tag(ty) {
            assign_version_tag(class);
        }
        has_valid_tag(ty).then(|| (*ty).tp_version_tag)
    }
}

/// # Safety
/// `ty` must be a live type object, read with the GIL held.
unsafe fn has_valid_tag(ty: *mut ffi::PyTypeObject) -> bool {
    // SAFETY: as the caller promises.
    unsafe { (*ty).tp_flags & ffi::Py_TPFLAGS_VALID_VERSION_TAG != 0 && (*ty).tp_version_tag != 0 }
}

#[cfg(Py_3_12)]
fn assign_version_tag(class: &Bound<'_, PyType>) {
    // SAFETY: a live type object with the GIL held. A failure (no tag left) only leaves the
    // flag unset, which `version_tag` reads.
    unsafe { PyUnstable_Type_AssignVersionTag(class.as_type_ptr()) };
}

/// Python 3.11 has no function for it: a lookup through the type's method cache assigns the tag.
#[cfg(not(Py_3_12))]
fn assign_version_tag(class: &Bound<'_, PyType>) {
    // Without the name (no memory for it) the tag stays unassigned, which `version_tag` reads.
    if let Ok(name) = crate::allocation::interned!(class.py(), "__del__") {
        class_attribute(class, name);
    }
}
