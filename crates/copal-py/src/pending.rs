//! The running transaction's changes as the query engine reads them: the records its changed,
//! new and changed-in-place objects would be written as, and the objects it deletes
//! (`copal_core::query::Pending`). Queries thus see the transaction's own writes through the one
//! evaluator in copal-core. The work is proportional to what the transaction used: the objects
//! it changed, added and deleted, and the watched objects it loaded or touched.

use std::collections::VecDeque;

use copal_core::format::{decode_value, DecodeError, DescriptorSource, Reader, Value};
use copal_core::query::Pending;
use copal_core::store::Catalog;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::classes::{field_names, ClassShape};
use crate::connection::Connection;
use crate::encode::{Encoder, Sink};
use crate::hashing::IntMap;
use crate::persistent::{PersistentBase, CHANGED, UNSAVED, UP_TO_DATE};
use crate::query::OperandSink;

/// A transaction's changes as records, and the new objects behind the provisional ids that
/// those records give them.
#[derive(Default)]
pub(crate) struct Overlay {
    pub pending: Pending,
    /// The new (unsaved) objects, by provisional id.
    pub new_objects: IntMap<u64, Py<PyAny>>,
    /// Provisional ids of the new objects, by object address.
    ids: IntMap<usize, u64>,
}

/// What an overlay is built from: the running transaction's state, as the connection holds it.
pub(crate) struct TransactionChanges<'py> {
    pub changed: Vec<Bound<'py, PyAny>>,
    /// Watched objects with the state bytes they were loaded or last written with.
    pub watched: Vec<(Bound<'py, PyAny>, Vec<u8>)>,
    pub added: Vec<Bound<'py, PyAny>>,
    pub deleted: Vec<Bound<'py, PyAny>>,
}

/// Encodes the transaction's changes into an overlay (None when nothing differs from the
/// snapshot). Nothing is registered in the store: classes and field layouts it has never
/// stored get provisional numbers, and new objects provisional ids.
pub(crate) fn overlay<'py>(py: Python<'py>, conn: &Connection, jar: &Py<Connection>, changes: TransactionChanges<'py>) -> PyResult<Option<Overlay>> {
    let mut overlay = Overlay::default();
    let mut sink = OverlaySink { conn, jar, overlay: &mut overlay, to_encode: VecDeque::new() };
    for obj in &changes.changed {
        let p = PersistentBase::of(obj)?;
        if let (CHANGED, Some(oid)) = (p.state(), p.oid()) {
            let (record, _, _) = Encoder::new(&mut sink).record(obj, 0, None)?;
            sink.overlay.pending.put(oid, record);
        }
    }
    for (obj, saved) in &changes.watched {
        let p = PersistentBase::of(obj)?;
        if let (UP_TO_DATE, Some(oid)) = (p.state(), p.oid()) {
            let (record, state_start, _) = Encoder::new(&mut sink).record(obj, 0, None)?;
            if record[state_start..] != saved[..] {
                sink.overlay.pending.put(oid, record);
            }
        }
    }
    for obj in &changes.added {
        sink.reference(obj)?;
    }
    while let Some((obj, oid, shape)) = sink.to_encode.pop_front() {
        let obj = obj.into_bound(py);
        let (record, _, _) = Encoder::new(&mut sink).record(&obj, 0, Some(shape))?;
        sink.overlay.pending.put(oid, record);
    }
    for obj in &changes.deleted {
        if let Some(oid) = PersistentBase::of(obj)?.oid() {
            sink.overlay.pending.delete(oid);
        }
    }
    drop(sink);
    if overlay.pending.is_empty() {
        return Ok(None);
    }
    Ok(Some(overlay))
}

impl Overlay {
    /// The sink that converts a query's operands in the terms of this overlay: a new object is
    /// its provisional id, a class or field layout it made has its provisional descriptor.
    pub(crate) fn operand_sink<'c>(&'c mut self, conn: &'c Connection, jar: &'c Py<Connection>) -> OverlaySink<'c> {
        OverlaySink { conn, jar, overlay: self, to_encode: VecDeque::new() }
    }
}

/// The sink of an overlay: descriptors from the class cache or the catalog, else provisional;
/// ids of stored objects as they are, provisional ids for new ones (each encoded once).
pub(crate) struct OverlaySink<'c> {
    conn: &'c Connection,
    jar: &'c Py<Connection>,
    overlay: &'c mut Overlay,
    /// New objects met and not encoded yet.
    to_encode: VecDeque<(Py<PyAny>, u64, ClassShape)>,
}

impl Sink for OverlaySink<'_> {
    fn descriptor_named(&mut self, type_name: &str, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let (fields, _) = field_names(dict)?;
        let store = self.conn.store()?;
        let d = self.overlay.pending.descriptor(&store.catalog(), type_name, &fields);
        Ok(ClassShape { descriptor: d.id, class_no: d.class_no, tracks_own: false })
    }

    fn descriptor(&mut self, class: &Bound<'_, PyType>, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let (type_name, tracks_own) = {
            let mut classes = self.conn.classes()?;
            let entry = classes.entry(class)?;
            if let Some(shape) = entry.find_shape(dict) {
                return Ok(shape);
            }
            (entry.type_name.clone(), entry.tracks_own)
        };
        let (fields, _) = field_names(dict)?;
        let store = self.conn.store()?;
        let d = self.overlay.pending.descriptor(&store.catalog(), &type_name, &fields);
        Ok(ClassShape { descriptor: d.id, class_no: d.class_no, tracks_own })
    }

    fn enum_descriptor(&mut self, class: &Bound<'_, PyType>) -> PyResult<u32> {
        Ok(self.descriptor(class, &crate::allocation::dict(class.py())?)?.descriptor)
    }

    fn reference(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
        let p = PersistentBase::of(obj)?;
        p.check_own(self.jar, "referenced")?;
        if p.state() != UNSAVED {
            return p.oid().ok_or_else(|| PyRuntimeError::new_err("stored object without oid"));
        }
        let address = obj.as_ptr() as usize;
        if let Some(oid) = self.overlay.ids.get(&address) {
            return Ok(*oid);
        }
        let dict = crate::encode::stored_state(obj)?;
        let shape = self.descriptor(&obj.get_type(), &dict)?;
        let oid = self.overlay.pending.new_oid(shape.class_no);
        self.overlay.ids.insert(address, oid);
        self.overlay.new_objects.insert(oid, obj.clone().unbind());
        self.to_encode.push_back((obj.clone().unbind(), oid, shape));
        Ok(oid)
    }
}

impl OperandSink for OverlaySink<'_> {
    fn take_unknown_class(&mut self) -> bool {
        false
    }

    fn decode(&self, bytes: &[u8]) -> PyResult<Value> {
        let store = self.conn.store()?;
        let catalog = store.catalog();
        let source = PendingDescriptors { catalog: &catalog, pending: &self.overlay.pending };
        decode_value(&mut Reader::new(bytes), &source).map_err(|e| crate::errors::corrupt("query operand", e))
    }

    fn classes(&self, type_names: &[String]) -> PyResult<Vec<u16>> {
        let mut classes = self.conn.resolve_classes(type_names)?;
        classes.extend(type_names.iter().filter_map(|name| self.overlay.pending.provisional_class(name)));
        Ok(classes)
    }
}

/// The catalog's descriptors and those an overlay made, for decoding operands.
struct PendingDescriptors<'a> {
    catalog: &'a Catalog,
    pending: &'a Pending,
}

impl DescriptorSource for PendingDescriptors<'_> {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        match self.pending.provisional_descriptor(id) {
            Some(d) => Ok(d.fields.len()),
            None => self.catalog.field_count(id),
        }
    }
}
