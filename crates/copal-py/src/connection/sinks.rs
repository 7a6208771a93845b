//! What the encoder asks of a connection: descriptors and object ids, either read-only (query
//! operands, index keys) or registered and allocated by a commit.

use std::collections::VecDeque;

use copal_core::Commit;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};

use super::Connection;
use crate::classes::{field_names, keys_are, ClassShape};
use crate::decode::DecodeInfo;
use crate::encode::Sink;
use crate::errors::{IntoPyResult, SchemaError};
use crate::persistent::{PersistentBase, CHANGED, UNSAVED};
use crate::query::OperandSink;

/// Encodes query operands: references and known classes only, nothing registered.
pub(super) struct ReadOnlySink<'c> {
    pub(super) conn: &'c Connection,
    /// Set when an operand's class has no descriptor with its fields: no record can equal it.
    pub(super) unknown_class: bool,
}

impl OperandSink for ReadOnlySink<'_> {
    fn take_unknown_class(&mut self) -> bool {
        std::mem::take(&mut self.unknown_class)
    }

    fn decode(&self, bytes: &[u8]) -> PyResult<copal_core::Value> {
        crate::query::decode_operand(bytes, &self.conn.store.get()?.catalog())
    }

    fn classes(&self, type_names: &[String]) -> PyResult<Vec<u16>> {
        self.conn.resolve_classes(type_names)
    }
}

impl Sink for ReadOnlySink<'_> {
    fn descriptor_named(&mut self, type_name: &str, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let (fields, _) = field_names(dict)?;
        let store = self.conn.store.get()?;
        let catalog = store.catalog();
        let Some(d) = catalog.find(type_name, &fields) else {
            self.unknown_class = true;
            return Err(SchemaError::new_err(format!("no stored {type_name} has these fields")));
        };
        Ok(ClassShape { descriptor: d.id, class_no: d.class_no, tracks_own: false })
    }

    fn descriptor(&mut self, class: &Bound<'_, PyType>, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let (fields, _) = field_names(dict)?;
        let type_name = crate::classes::type_name_of(class)?;
        let store = self.conn.store.get()?;
        let catalog = store.catalog();
        let Some(d) = catalog.find(&type_name, &fields) else {
            self.unknown_class = true;
            return Err(SchemaError::new_err(format!("no stored {type_name} has these fields")));
        };
        Ok(ClassShape { descriptor: d.id, class_no: d.class_no, tracks_own: false })
    }

    fn enum_descriptor(&mut self, class: &Bound<'_, PyType>) -> PyResult<u32> {
        Ok(self.descriptor(class, &crate::allocation::dict(class.py())?)?.descriptor)
    }

    fn reference(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
        let p = PersistentBase::of(obj)?;
        p.check_own(&self.conn.self_ref(obj.py())?, "a query operand")?;
        p.oid().ok_or_else(|| {
            PyTypeError::new_err("a query cannot compare with an object that is not stored yet")
        })
    }
}

/// The sink of a commit: registers descriptors and gives ids to newly reachable objects.
pub(super) struct CommitSink<'c, 's> {
    pub(super) conn: &'c Connection,
    pub(super) jar: Py<Connection>,
    pub(super) commit: Commit<'s>,
    /// Shapes registered by this commit, merged into the class cache once it succeeds.
    pub(super) new_shapes: Vec<(usize, Vec<Py<PyString>>, ClassShape)>,
    /// Objects that became persistent in this commit and still have to be written.
    pub(super) to_write: VecDeque<(Py<PyAny>, ClassShape)>,
    pub(super) persisted: Vec<Py<PyAny>>,
}

impl Sink for CommitSink<'_, '_> {
    fn descriptor_named(&mut self, type_name: &str, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let (fields, _) = field_names(dict)?;
        let d = self.commit.descriptor(type_name, &fields).py_err()?;
        Ok(ClassShape { descriptor: d.id, class_no: d.class_no, tracks_own: false })
    }

    fn descriptor(&mut self, class: &Bound<'_, PyType>, dict: &Bound<'_, PyDict>) -> PyResult<ClassShape> {
        let mut classes = self.conn.classes.lock()?;
        let entry = classes.entry(class)?;
        if let Some(shape) = entry.find_shape(dict) {
            return Ok(shape);
        }
        let key = class.as_ptr() as usize;
        if let Some((_, _, shape)) = self.new_shapes.iter().find(|(k, fields, _)| *k == key && keys_are(dict, fields)) {
            return Ok(*shape);
        }
        let (fields, interned) = field_names(dict)?;
        if !class.is_subclass_of::<PersistentBase>()? {
            // Refused at write time what would be refused at read time: a by-value class whose
            // finalizer or property setters would run on stored values.
            let info = DecodeInfo::plain(entry.type_name.clone(), interned.iter().map(|f| f.clone_ref(class.py())).collect());
            crate::decode::check_inert(class, &info).map_err(|e| {
                if crate::allocation::is_memory_error(class.py(), &e) {
                    return e;
                }
                PyTypeError::new_err(format!("cannot store a {} by value: {}; make it a copal.Persistent", entry.type_name, e.value(class.py())))
            })?;
        }
        let descriptor = self.commit.descriptor(&entry.type_name, &fields).py_err()?;
        let shape = ClassShape { descriptor: descriptor.id, class_no: descriptor.class_no, tracks_own: entry.tracks_own };
        self.new_shapes.push((key, interned, shape));
        Ok(shape)
    }

    fn enum_descriptor(&mut self, class: &Bound<'_, PyType>) -> PyResult<u32> {
        Ok(self.descriptor(class, &crate::allocation::dict(class.py())?)?.descriptor)
    }

    fn reference(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
        let py = obj.py();
        let p = PersistentBase::of(obj)?;
        p.check_own(&self.jar, "referenced")?;
        if p.state() != UNSAVED {
            return p.oid().ok_or_else(|| PyRuntimeError::new_err("stored object without oid"));
        }
        let dict = crate::encode::stored_state(obj)?;
        let shape = self.descriptor(&obj.get_type(), &dict)?;
        let oid = self.commit.allocate_oid(shape.class_no).py_err()?;
        p.attach(oid, self.jar.clone_ref(py), CHANGED);
        self.to_write.push_back((obj.clone().unbind(), shape));
        self.persisted.push(obj.clone().unbind());
        Ok(oid)
    }
}
