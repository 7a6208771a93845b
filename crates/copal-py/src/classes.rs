//! Python classes <-> stored type names and descriptors.
//!
//! Resolution of a stored type name never imports anything: it looks in the registry of
//! `copal.Persistent` subclasses (filled as classes are defined) and then in modules the
//! application has already imported (`sys.modules`). A name that resolves to something other than
//! a class of the expected kind is refused, so data cannot make copal call `os.system`.


use copal_core::format::ClassNo;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};

use crate::errors::SchemaError;
use crate::hashing::IntMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassShape {
    pub descriptor: u32,
    pub class_no: ClassNo,
    /// See `tracks_own_mutations`.
    pub tracks_own: bool,
}

pub fn type_name_of(class: &Bound<'_, PyType>) -> PyResult<String> {
    crate::class_cache::remembered(class, |facts| &mut facts.type_name, || stored_type_name(class))
}

fn stored_type_name(class: &Bound<'_, PyType>) -> PyResult<String> {
    let py = class.py();
    match class.getattr(crate::allocation::interned!(py, "__dict__")?)?.get_item(crate::allocation::interned!(py, "__copal_type__")?) {
        Ok(name) => return name.extract(),
        Err(error) if !error.is_instance_of::<pyo3::exceptions::PyKeyError>(py) => return Err(error),
        Err(_) => {}
    }
    let module: String = class.getattr(crate::allocation::interned!(py, "__module__")?)?.extract()?;
    let qualname: String = class.getattr(crate::allocation::interned!(py, "__qualname__")?)?.extract()?;
    if module == "builtins" { Ok(qualname) } else { Ok(format!("{module}.{qualname}")) }
}

/// Whether instances mark themselves changed on every mutation of their top-level container
/// (PersistentList, PersistentDict): then only values nested inside need commit-time checks.
pub fn tracks_own_mutations(class: &Bound<'_, PyType>) -> PyResult<bool> {
    crate::class_cache::remembered(class, |facts| &mut facts.tracks_own, || declares_tracking(class))
}

/// A class without the attribute, or whose attribute fails to answer, does not track; running
/// out of memory while asking is passed on, since the answer is kept for the class.
fn declares_tracking(class: &Bound<'_, PyType>) -> PyResult<bool> {
    match class.getattr(crate::allocation::interned!(class.py(), "_p_tracks_mutations")?).and_then(|v| v.is_truthy()) {
        Ok(tracks) => Ok(tracks),
        Err(error) if crate::allocation::is_memory_error(class.py(), &error) => Err(error),
        Err(_) => Ok(false),
    }
}

/// Field lists already registered for a class, keyed by the class object's address.
pub struct ClassEntry {
    /// Keeps the class alive while its address is a key of `ClassCache::by_type`, so the address
    /// cannot be reused by another class.
    _class: Py<PyType>,
    pub type_name: String,
    pub tracks_own: bool,
    pub shapes: Vec<(Vec<Py<PyString>>, ClassShape)>,
}

impl ClassEntry {
    pub fn new(class: &Bound<'_, PyType>) -> PyResult<ClassEntry> {
        Ok(ClassEntry {
            _class: class.clone().unbind(),
            type_name: type_name_of(class)?,
            tracks_own: tracks_own_mutations(class)?,
            shapes: Vec::new(),
        })
    }

    /// The registered shape whose field names are exactly the keys of `dict`, in order.
    pub fn find_shape(&self, dict: &Bound<'_, PyDict>) -> Option<ClassShape> {
        self.shapes.iter().find(|(fields, _)| keys_are(dict, fields)).map(|(_, shape)| *shape)
    }
}

/// Whether the keys of `dict` are exactly `fields`, in order. Attribute names are interned, so
/// the identity test almost always decides; it runs on borrowed keys, without the reference
/// counting of an iterator (this is checked for every object encoded). Only a key of type str
/// is compared by value: a subclass's `__eq__` could call a key of other text equal to a field
/// name, and its object would be written under the other name.
pub fn keys_are(dict: &Bound<'_, PyDict>, fields: &[Py<PyString>]) -> bool {
    if dict.len() != fields.len() {
        return false;
    }
    let py = dict.py();
    let mut position: ffi::Py_ssize_t = 0;
    let (mut key, mut value) = (std::ptr::null_mut(), std::ptr::null_mut());
    fields.iter().all(|field| {
        // SAFETY: `dict` is a dict and the GIL is held. PyDict_Next returns borrowed references.
        if unsafe { ffi::PyDict_Next(dict.as_ptr(), &mut position, &mut key, &mut value) } == 0 {
            return false;
        }
        // SAFETY: `key` was just returned by PyDict_Next: a live object. str's own comparison
        // runs no Python code.
        key == field.as_ptr()
            || (unsafe { ffi::PyUnicode_CheckExact(key) } != 0 && unsafe { Bound::from_borrowed_ptr(py, key) }.eq(field).unwrap_or(false))
    })
}

pub fn field_names(dict: &Bound<'_, PyDict>) -> PyResult<(Vec<String>, Vec<Py<PyString>>)> {
    let py = dict.py();
    let mut names = Vec::with_capacity(dict.len());
    let mut interned = Vec::with_capacity(dict.len());
    for (key, _) in dict.iter() {
        let name: String = key.extract().map_err(|error| {
            if crate::allocation::is_memory_error(py, &error) {
                return error;
            }
            pyo3::exceptions::PyTypeError::new_err(format!("attribute names must be str, not {}", key.get_type()))
        })?;
        interned.push(crate::allocation::interned_str(py, &name)?.unbind());
        names.push(name);
    }
    Ok((names, interned))
}

#[derive(Default)]
pub struct ClassCache {
    pub by_type: IntMap<usize, ClassEntry>,
    pub by_class_no: IntMap<ClassNo, Py<PyType>>,
}

impl ClassCache {
    pub fn entry(&mut self, class: &Bound<'_, PyType>) -> PyResult<&mut ClassEntry> {
        Ok(match self.by_type.entry(class.as_ptr() as usize) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => entry.insert(ClassEntry::new(class)?),
        })
    }
}

/// The class stored under `type_name`, without importing anything.
pub fn resolve<'py>(py: Python<'py>, registry: &Bound<'py, PyDict>, type_name: &str) -> PyResult<Bound<'py, PyType>> {
    ClassName::new(py, type_name)?.resolve(py, registry)
}

/// A stored type name with the strs that `resolve` looks it up by, made once. A stream's
/// descriptor table keeps them across calls (standalone.rs), so that resolving its classes
/// again, as every call does, makes no str: a small `loads` spent a sixth of its time making,
/// hashing and looking up (in CPython's method cache too) new strs of the same names.
pub struct ClassName {
    text: String,
    /// The whole name: the registry's key.
    key: Py<PyString>,
    /// The name's dot-separated parts.
    parts: Vec<Py<PyString>>,
    /// Each module name the name may start with, longest first, and where the attribute path
    /// after it starts in `parts`.
    modules: Vec<(Py<PyString>, usize)>,
}

impl ClassName {
    // Names are made with `allocation::str`: decoding passes a failed allocation on as MemoryError.
    pub fn new(py: Python<'_>, text: &str) -> PyResult<ClassName> {
        let str = |text: &str| Ok(crate::allocation::str(py, text)?.unbind());
        let parts = text.split('.').map(str).collect::<PyResult<Vec<_>>>()?;
        let modules = text.match_indices('.').rev().zip((1..parts.len()).rev()).map(|((dot, _), first)| Ok((str(&text[..dot])?, first))).collect::<PyResult<_>>()?;
        Ok(ClassName { text: text.to_owned(), key: str(text)?, parts, modules })
    }

    /// The class of this name in the registry, or else in the first module already imported
    /// (`sys.modules`) whose name the name starts with.
    pub fn resolve<'py>(&self, py: Python<'py>, registry: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyType>> {
        if let Some(class) = registry.get_item(self.key.bind(py))? {
            return class.cast_into::<PyType>().map_err(|_| not_a_class(&self.text));
        }
        let modules = sys_modules(py);
        for (module_name, first) in &self.modules {
            if let Some(module) = modules.get_item(module_name.bind(py))? {
                let mut target = module;
                for part in &self.parts[*first..] {
                    target = match target.getattr(part.bind(py)) {
                        Ok(t) => t,
                        Err(e) if crate::allocation::is_memory_error(py, &e) => return Err(e),
                        Err(_) => return Err(unknown_class(&self.text)),
                    };
                }
                return target.cast_into::<PyType>().map_err(|_| not_a_class(&self.text));
            }
        }
        Err(unknown_class(&self.text))
    }
}

/// The interpreter's `sys.modules`, as the import machinery finds it, without the lookup of
/// `import sys; sys.modules` (most of the time of resolving a class) and without allocating
/// (`PySys_GetObject` makes a str of its name, and reports a failure as a missing attribute).
fn sys_modules(py: Python<'_>) -> Bound<'_, PyDict> {
    // SAFETY: the GIL is held; PyImport_GetModuleDict returns a borrowed reference to the
    // interpreter's module dict, which exists while the interpreter runs.
    unsafe { Bound::from_borrowed_ptr(py, ffi::PyImport_GetModuleDict()).cast_into_unchecked() }
}

fn unknown_class(type_name: &str) -> PyErr {
    SchemaError::new_err(format!(
        "no class for stored type {type_name:?}: import the module that defines it before loading \
         (copal never imports modules named by data), or set __copal_type__ on the class"
    ))
}

fn not_a_class(type_name: &str) -> PyErr {
    SchemaError::new_err(format!("stored type {type_name:?} names something that is not a class; refusing to use it"))
}
