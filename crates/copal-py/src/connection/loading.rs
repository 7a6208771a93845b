//! Objects of a connection: the identity map's lookups, ghosts, and loading records into them
//! (one at a time, or in sweeps in id order), with the decoder's resolver of classes,
//! descriptors, references and zones.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use copal_core::format::{oid_class, TzInfo, FLAG_MUTABLE_STATE};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyTzInfo, PyType};

use super::thread::{without_gil, SameThread};
use super::Connection;
use crate::classes::resolve;
use crate::decode::{DecodeInfo, Decoder, Resolver};
use crate::encode::FieldSource;
use crate::errors::{dangling, IntoPyResult, SchemaError};
use crate::list_builder::ListBuilder;
use crate::persistent::{PersistentBase, GHOST};
use crate::pytypes;

impl Connection {
    /// Loads the record of ghost `obj` and fills its state.
    pub fn activate(&self, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        let oid = PersistentBase::of(obj)?.oid().ok_or_else(|| PyRuntimeError::new_err("ghost without oid"))?;
        let record = self.record_of(oid)?;
        self.load_from(obj, oid, &record)
    }

    /// The record of `oid` in the transaction's snapshot (DanglingReference if there is none).
    pub(super) fn record_of(&self, oid: u64) -> PyResult<Vec<u8>> {
        let record = self.with_snapshot(|snapshot| Ok(snapshot.get(oid).py_err()?.map(std::borrow::Cow::into_owned)))?;
        record.ok_or_else(|| dangling(oid))
    }

    /// Loads the ghost `obj` from its `record`.
    pub(super) fn load_from(&self, obj: &Bound<'_, PyAny>, oid: u64, record: &[u8]) -> PyResult<()> {
        self.stats.cache_misses.fetch_add(1, Ordering::Relaxed);
        self.set_state(obj, oid, record, None)
    }

    /// Fills `obj` from `record`; with `ghost_refs`, collects the ghosts it references.
    pub(super) fn set_state<'py>(
        &self,
        obj: &Bound<'py, PyAny>,
        oid: u64,
        record: &[u8],
        ghost_refs: Option<&mut Vec<Bound<'py, PyAny>>>,
    ) -> PyResult<()> {
        let py = obj.py();
        let what = || format!("record of object {oid:#x}");
        let mut strings = self.strings.lock()?;
        let mut decoder = Decoder::new(py, self, &what);
        decoder.strings = Some(&mut strings);
        let collect = ghost_refs.is_some();
        if collect {
            decoder.ghost_refs = Some(Vec::new());
        }
        let (header, state_start) = decoder.record_into(obj, record)?;
        if let (Some(out), Some(found)) = (ghost_refs, decoder.ghost_refs.take()) {
            out.extend(found);
        }
        let p = PersistentBase::of(obj)?;
        p.set_loaded(header.tid);
        // A Broken object is read-only and must keep its record: never re-encoded.
        if header.flags & FLAG_MUTABLE_STATE != 0 && !obj.is_instance(pytypes::broken_type(py)?)? {
            self.saved_states.lock()?.insert(oid, record[state_start..].to_vec());
            p.set_holds_containers(true);
            self.watch(oid);
        }
        self.loaded.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The object for `oid`: from the identity map, or a new ghost.
    pub(super) fn object_for<'py>(&self, py: Python<'py>, oid: u64) -> PyResult<Bound<'py, PyAny>> {
        if let Some(obj) = self.cached(py, oid)? {
            return Ok(obj);
        }
        let class = self.class_for(py, oid_class(oid))?;
        let obj = new_instance(&class)?;
        PersistentBase::of(&obj)?.attach(oid, self.self_ref(py)?, GHOST);
        if class.is(pytypes::broken_type(py)?) {
            let type_name = self.store.get()?.catalog().type_name(oid_class(oid)).unwrap_or("?").to_owned();
            let name = crate::allocation::interned!(py, "_v_copal_type")?;
            // SAFETY: valid object, name and value; bypasses Broken's read-only __setattr__.
            let rc = unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), crate::allocation::str(py, &type_name)?.as_ptr()) };
            if rc != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        self.cache.lock()?.insert(oid, obj.clone().unbind());
        Ok(obj)
    }

    /// `object_for` of each of `oids`, the cached ones found under one lock of the cache.
    pub(super) fn objects_for<'py>(&self, py: Python<'py>, oids: &[u64]) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut found = Vec::with_capacity(oids.len());
        {
            let cache = self.cache.lock()?;
            found.extend(oids.iter().map(|oid| cache.get(oid).map(|o| o.bind(py).clone())));
        }
        oids.iter().zip(found).map(|(oid, cached)| cached.map_or_else(|| self.object_for(py, *oid), Ok)).collect()
    }

    pub(super) fn cached<'py>(&self, py: Python<'py>, oid: u64) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(self.cache.lock()?.get(&oid).map(|o| o.bind(py).clone()))
    }

    pub(super) fn class_for<'py>(&self, py: Python<'py>, class_no: u16) -> PyResult<Bound<'py, PyType>> {
        if let Some(class) = self.classes.lock()?.by_class_no.get(&class_no) {
            return Ok(class.bind(py).clone());
        }
        let type_name = {
            let store = self.store.get()?;
            let known = store.catalog().type_name(class_no).map(str::to_owned);
            match known {
                Some(name) => name,
                None => {
                    self.with_snapshot(|s| s.refresh_catalog().py_err())?;
                    store.catalog().type_name(class_no).map(str::to_owned).ok_or_else(|| {
                        crate::errors::CorruptRecordError::new_err(format!("reference to unknown class number {class_no}"))
                    })?
                }
            }
        };
        // Objects of a class that cannot be found, or that names something other than a
        // persistent class, load as read-only Broken objects: nothing named by data is called.
        let class = match resolve(py, self.registry.bind(py), &type_name) {
            Ok(class) if class.is_subclass_of::<PersistentBase>()? => class,
            Ok(_) => pytypes::broken_type(py)?.clone(),
            Err(e) if SchemaError::matches(py, &e) => pytypes::broken_type(py)?.clone(),
            Err(e) => return Err(e),
        };
        self.classes.lock()?.by_class_no.insert(class_no, class.clone().unbind());
        Ok(class)
    }

    /// Loads `ghosts` (sorted and deduplicated here) reading their records in id order, in
    /// chunks: records are copied out so that decoding (which runs Python) happens with the
    /// snapshot unlocked, in bounded memory. With `next`, collects the ghosts they reference.
    pub(super) fn load_ghosts<'py>(
        &self,
        py: Python<'py>,
        ghosts: &mut Vec<(u64, Bound<'py, PyAny>)>,
        mut next: Option<&mut Vec<Bound<'py, PyAny>>>,
    ) -> PyResult<usize> {
        if ghosts.is_empty() {
            return Ok(0);
        }
        ghosts.sort_unstable_by_key(|(oid, _)| *oid);
        ghosts.dedup_by_key(|(oid, _)| *oid);
        const CHUNK: usize = 4096;
        let mut buffer = Vec::new();
        let mut spans = Vec::with_capacity(ghosts.len().min(CHUNK));
        for chunk in ghosts.chunks(CHUNK) {
            let oids: Vec<u64> = chunk.iter().map(|(oid, _)| *oid).collect();
            buffer.clear();
            spans.clear();
            self.with_snapshot(|snapshot| {
                let snapshot = SameThread(snapshot);
                let read = without_gil(py, || {
                    snapshot.0.get_many(&oids, |oid| Err(ReadFailure::Missing(oid)), ReadFailure::Store, |_, record| {
                        spans.push(buffer.len()..buffer.len() + record.len());
                        buffer.extend_from_slice(record);
                        Ok(())
                    })
                });
                read.map_err(|failure| match failure {
                    ReadFailure::Store(error) => crate::errors::store_error(error),
                    ReadFailure::Missing(oid) => dangling(oid),
                })
            })?;
            for ((oid, obj), span) in chunk.iter().zip(spans.drain(..)) {
                self.set_state(obj, *oid, &buffer[span], next.as_deref_mut())?;
            }
        }
        self.stats.cache_misses.fetch_add(ghosts.len() as u64, Ordering::Relaxed);
        Ok(ghosts.len())
    }
}

/// Why a batch read failed; converted to a Python error once the GIL is back.
enum ReadFailure {
    Missing(u64),
    Store(copal_core::StoreError),
}

/// A new, empty instance of persistent `class`, created by the base class's constructor only:
/// the class's own `__init__` is not called (its state comes from the record).
fn new_instance<'py>(class: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let py = class.py();
    let args = PyTuple::empty(py);
    // SAFETY: `class` is a subclass of PersistentBase (checked by `class_for`), whose tp_new is
    // PyO3's constructor wrapper accepting any arguments; it returns a new reference or null.
    unsafe {
        let tp_new = (*class.as_type_ptr()).tp_new.ok_or_else(|| PyTypeError::new_err("class cannot be instantiated"))?;
        Bound::from_owned_ptr_or_err(py, tp_new(class.as_type_ptr(), args.as_ptr(), std::ptr::null_mut()))
    }
}

impl<'py> Resolver<'py> for Connection {
    fn descriptor(&self, py: Python<'py>, id: u32) -> PyResult<Arc<DecodeInfo>> {
        if let Some(info) = self.decode_infos.lock()?.get(&id) {
            return Ok(Arc::clone(info));
        }
        let descriptor = self.with_snapshot(|s| s.descriptor(id).py_err())?;
        let interned = |names: &[String]| names.iter().map(|f| Ok(crate::allocation::interned_str(py, f)?.unbind())).collect::<PyResult<Vec<Py<PyString>>>>();
        let mut names = interned(&descriptor.fields)?;
        let mut fixup = None;
        let class = match resolve(py, self.registry.bind(py), &descriptor.type_name) {
            Err(e) if crate::allocation::is_memory_error(py, &e) => return Err(e),
            found => found.ok(),
        };
        if let Some(class) = class {
            let stored_names = ListBuilder::of(py, names.iter().map(|name| name.bind(py).clone().into_any()).collect())?;
            let plan = pytypes::evolution_plan(py)?.call1((class, stored_names))?;
            if !plan.is_none() {
                let (new_names, fix): (Vec<String>, Bound<'_, PyAny>) = plan.extract()?;
                names = interned(&new_names)?;
                fixup = (!fix.is_none()).then(|| fix.unbind());
            }
        }
        let info = Arc::new(DecodeInfo::new(descriptor.type_name.clone(), names, fixup));
        self.decode_infos.lock()?.insert(id, Arc::clone(&info));
        Ok(info)
    }

    fn class_of(&self, py: Python<'py>, info: &DecodeInfo) -> PyResult<Bound<'py, PyType>> {
        resolve(py, self.registry.bind(py), &info.type_name)
    }

    fn object(&self, py: Python<'py>, oid: u64) -> PyResult<Bound<'py, PyAny>> {
        self.object_for(py, oid)
    }

    fn zone(&self, py: Python<'py>, tz: &TzInfo) -> PyResult<Option<Bound<'py, PyTzInfo>>> {
        let key = match tz {
            TzInfo::Naive => return Ok(None),
            TzInfo::Offset(micros) => format!("{micros}"),
            TzInfo::Named(name) => name.clone(),
        };
        if let Some(zone) = self.zones.lock()?.get(&key) {
            return Ok(Some(zone.bind(py).clone()));
        }
        let Some(zone) = crate::decode::new_zone(py, tz)? else { return Ok(None) };
        self.zones.lock()?.insert(key, zone.clone().unbind());
        Ok(Some(zone))
    }
}

/// Appends every persistent object referenced from `value` (through plain containers and
/// plain objects, not through other persistent objects) to `out`.
pub(super) fn collect_references<'py>(value: &Bound<'py, PyAny>, out: &mut Vec<Bound<'py, PyAny>>, depth: usize) -> PyResult<()> {
    if depth > 256 {
        return Ok(());
    }
    if value.is_instance_of::<PersistentBase>() {
        out.push(value.clone());
    } else if let Ok(list) = value.cast::<PyList>() {
        for item in list.iter() {
            collect_references(&item, out, depth + 1)?;
        }
    } else if let Ok(dict) = value.cast::<PyDict>() {
        for (k, v) in dict.iter() {
            collect_references(&k, out, depth + 1)?;
            collect_references(&v, out, depth + 1)?;
        }
    } else if let Ok(tuple) = value.cast::<PyTuple>() {
        for item in tuple.iter() {
            collect_references(&item, out, depth + 1)?;
        }
    } else if value.is_instance_of::<pyo3::types::PySet>() || value.is_instance_of::<pyo3::types::PyFrozenSet>() {
        for item in value.try_iter()? {
            collect_references(&item?, out, depth + 1)?;
        }
    } else if !value.is_instance_of::<PyString>()
        && (crate::encode::has_instance_dict(value) || crate::encode::is_python_class(&value.get_type()))
        && !value.is_instance(pytypes::enum_type(value.py())?)?
    {
        // Plain objects stored by value, through their slots and instance dict; enum members
        // and objects of built-in types without an instance dict hold no references of their own.
        let fields = match crate::slots::layout_of(&value.get_type())? {
            Some(layout) => Some(crate::slots::SlotFields::of(value, &layout)?.to_dict()?),
            None => crate::persistent::instance_dict(value).ok(),
        };
        if let Some(fields) = fields {
            collect_references(&fields.into_any(), out, depth + 1)?;
        }
    }
    Ok(())
}
