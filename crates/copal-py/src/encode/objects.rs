//! Values written with a descriptor from the sink: plain objects (and the reuse of a class's
//! last descriptor, `LastShape`), BrokenObjects, enum members, persistent objects written by
//! value, and instances of Python subclasses of built-ins (SUBCLASS values).

use copal_core::format::tag;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict, PyType};
use pyo3::PyTypeInfo;

use crate::classes::{type_name_of, ClassShape};
use crate::cpython::{MadeDict, OwnArray, ValuesFields};
use crate::persistent::{instance_dict, PersistentBase};
use crate::slots::SlotFields;

use super::classify::{has_instance_dict, SCALAR_BASES};
use super::containers::builtin_iter;
use super::fields::{object_dict, stored_state, FieldSource, Held, ObjectFields};
use super::{only_in, only_in_streams, Encoder, Step};

impl<'s> Encoder<'s> {
    /// A BrokenObject, written back as it was read: same type name, same fields.
    pub(super) fn broken_object(&mut self, v: &Bound<'_, PyAny>, depth: usize) -> Step {
        let type_name: String = v.getattr(crate::allocation::interned!(v.py(), "type_name")?)?.extract()?;
        let state = v.getattr(crate::allocation::interned!(v.py(), "state")?)?.cast_into::<PyDict>().map_err(PyErr::from)?;
        self.mutable = true;
        if self.backref_or_slot(v)? {
            return Ok(());
        }
        let shape = self.sink.descriptor_named(&type_name, &state)?;
        self.w.u8(tag::OBJECT);
        self.w.varint(u64::from(shape.descriptor));
        self.fields(&state, depth)
    }

    pub(super) fn enum_member(&mut self, v: &Bound<'_, PyAny>) -> Step {
        let descriptor = self.sink.enum_descriptor(&v.get_type())?;
        // A composite Flag is named "A|B"; an empty Flag has no name and is written as "".
        let name: Option<String> = v.getattr(crate::allocation::interned!(v.py(), "_name_")?)?.extract()?;
        let name = name.unwrap_or_default();
        self.w.u8(tag::ENUM);
        self.w.varint(u64::from(descriptor));
        self.w.length_prefixed(name.as_bytes());
        Ok(())
    }

    pub(super) fn object(&mut self, v: &Bound<'_, PyAny>, class_index: usize, depth: usize) -> Step {
        self.mutable = true;
        if self.backref_or_slot(v)? {
            return Ok(());
        }
        let fields = self.object_state(v, class_index)?;
        self.with_fields(&fields, |this, held| {
            let shape = this.shape_of(v, class_index, &fields, held)?;
            this.object_fields(shape.descriptor, &fields, held, depth)
        })
    }

    /// The fields of `v`, a plain object of the class numbered `class_index`: its inline values
    /// or its instance dict, or its slots (and dict) read in place if its class has slots.
    pub(super) fn object_state<'a, 'py>(&self, v: &'a Bound<'py, PyAny>, class_index: usize) -> PyResult<ObjectFields<'a, 'py>> {
        Ok(match &self.object_layouts[class_index] {
            Some(layout) => ObjectFields::Slots(SlotFields::of(v, layout)?),
            None => match ValuesFields::<OwnArray>::of(v) {
                Some(values) => ObjectFields::Values(values),
                None => match ValuesFields::<MadeDict>::of(v) {
                    Some(values) => ObjectFields::MadeValues(values),
                    None => ObjectFields::Dict(object_dict(v)?),
                },
            },
        })
    }

    /// The shape the sink gives `v`, a plain object of the class numbered `class_index`, with
    /// `fields` (`held`): the last one of its class if they have the same name objects.
    pub(super) fn shape_of<'py>(&mut self, v: &Bound<'py, PyAny>, class_index: usize, fields: &impl FieldSource<'py>, held: Held) -> PyResult<ClassShape> {
        let names = &self.held[held.base..held.base + held.len];
        if let Some(last) = self.object_shapes[class_index].as_ref().filter(|last| last.has_names(names)) {
            return Ok(last.shape);
        }
        let shape = self.sink.descriptor(&v.get_type(), &fields.to_dict()?)?;
        let names = &self.held[held.base..held.base + held.len];
        self.object_shapes[class_index] = Some(LastShape::new(fields.py(), names, shape));
        Ok(shape)
    }

    /// A persistent object written by value (standalone streams): an OBJECT of its stored
    /// state, with a descriptor that the sink marks as persistent. A ghost is loaded first.
    pub(super) fn persistent_by_value(&mut self, v: &Bound<'_, PyAny>, depth: usize) -> Step {
        // Always in the identity map: loading a ghost met later can add references to this
        // object (from the connection's cache), so its reference count now proves nothing.
        if self.backref_or_slot_of(v, false)? {
            return Ok(());
        }
        if PersistentBase::of(v)?.state() == crate::persistent::GHOST {
            v.call_method0(crate::allocation::interned!(v.py(), "_p_activate")?)?;
        }
        let dict = stored_state(v)?;
        let shape = self.sink.descriptor(&v.get_type(), &dict)?;
        self.with_fields(&dict, |this, held| this.object_fields(shape.descriptor, &dict, held, depth))
    }

    pub(super) fn subclass(&mut self, v: &Bound<'_, PyAny>, base: u8, depth: usize) -> Step {
        if let Some(&(base_type, _, value_method)) = SCALAR_BASES.iter().find(|(_, scalar, _)| *scalar == base) {
            return self.scalar_subclass(v, &base_type(v.py()), value_method, depth);
        }
        if base == tag::BYTEARRAY && !self.bytearray_subclasses {
            let class = type_name_of(&v.get_type())?;
            return Err(only_in(
                &format!("a value of type {class}, a subclass of bytearray,"),
                "a binary stream or a text document (copal.dumps), not stored in a database or an archive",
            ));
        }
        if base != tag::TUPLE && base != tag::FROZENSET {
            self.mutable = true;
        }
        if self.backref_or_slot(v)? {
            return Ok(());
        }
        let fields = match crate::slots::layout_of(&v.get_type())? {
            Some(layout) => ObjectFields::Slots(SlotFields::of(v, &layout)?),
            None => ObjectFields::Dict(instance_dict(v)?),
        };
        let slot = self.next_memo - 1;
        let shape = self.sink.descriptor(&v.get_type(), &fields.to_dict()?)?;
        self.w.u8(tag::SUBCLASS);
        self.w.varint(u64::from(shape.descriptor));
        let base_at = self.w.buf.len();
        self.w.u8(base);
        if base == tag::DICT {
            // Read through dict's own methods: a subclass may override items() or __iter__.
            let pairs = pyo3::types::PyDict::type_object(v.py()).call_method1(crate::allocation::interned!(v.py(), "items")?, (v,))?;
            let plain = crate::allocation::dict(v.py())?;
            for pair in pairs.try_iter()? {
                let (k, val): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
                plain.set_item(k, val)?;
            }
            self.pairs(&plain, depth)?;
        } else if base == tag::BYTEARRAY {
            self.bytearray_blob(v.cast::<PyByteArray>().map_err(PyErr::from)?);
            self.version_4_values += 1;
        } else {
            let mut items: Vec<Bound<'_, PyAny>> = builtin_iter(v, base)?;
            if base == tag::SET || base == tag::FROZENSET {
                items = self.canonical_order(items, depth)?;
            }
            if base == tag::TUPLE || base == tag::FROZENSET {
                self.immutable_items(v, (slot, base_at), items.len(), items.into_iter(), depth)?;
            } else {
                self.items(items.len(), items.into_iter(), depth)?;
            }
        }
        self.fields(&fields, depth)
    }

    /// An instance of a Python subclass of scalar built-in `base`: a SUBCLASS whose base is its
    /// value, written as a plain value of `base` is (docs/STREAM.md section 5). `value_method`
    /// is `base`'s own method that copies that value out of the instance.
    fn scalar_subclass(&mut self, v: &Bound<'_, PyAny>, base: &Bound<'_, PyType>, value_method: &str, depth: usize) -> Step {
        if !self.stream_only_values {
            let class = type_name_of(&v.get_type())?;
            return Err(only_in_streams(&format!("a value of type {class}, a subclass of {},", base.name()?)));
        }
        if self.backref_or_slot(v)? {
            return Ok(());
        }
        let dict = if has_instance_dict(v) { instance_dict(v)? } else { crate::allocation::dict(v.py())? };
        let shape = self.sink.descriptor(&v.get_type(), &dict)?;
        // Called on the base type, the method runs in C whatever the subclass overrides.
        let value = base.call_method1(crate::allocation::str(v.py(), value_method)?, (v,))?;
        self.w.u8(tag::SUBCLASS);
        self.w.varint(u64::from(shape.descriptor));
        // A base is no STR value of the stream: it takes no string slot and is never a STRREF.
        let strings = self.strings.take();
        let written = self.value(&value, depth);
        self.strings = strings;
        written?;
        self.version_4_values += 1;
        self.fields(&dict, depth)
    }
}

/// The descriptor the sink gave for the last object of a class, and the field names (the keys
/// of the object's dict, or its slots, in order) it was given for. The instances of a class usually share one
/// set of key objects (CPython's split dicts, interned attribute names), so the next object of
/// the class is checked by comparing addresses instead of asking the sink (a class lookup and a
/// comparison of names). The sink's answer depends only on the class and the field names, so
/// it is the same for every object that passes the check.
pub(super) struct LastShape {
    /// References to the key objects, so that their addresses cannot be reused while they are
    /// compared against.
    fields: Vec<Py<PyAny>>,
    shape: ClassShape,
}

impl LastShape {
    /// The shape for the names of `fields` (names and values held by `Encoder::with_fields`).
    fn new(py: Python<'_>, fields: &[(*mut ffi::PyObject, *mut ffi::PyObject)], shape: ClassShape) -> Self {
        // SAFETY: names held by the caller, made owned at once.
        let names = fields.iter().map(|&(name, _)| unsafe { Bound::from_borrowed_ptr(py, name) }.unbind()).collect();
        LastShape { fields: names, shape }
    }

    /// Whether the names of `fields` are the objects of `self.fields`, in order (compared as
    /// addresses only).
    fn has_names(&self, fields: &[(*mut ffi::PyObject, *mut ffi::PyObject)]) -> bool {
        fields.len() == self.fields.len() && self.fields.iter().zip(fields).all(|(field, &(name, _))| name == field.as_ptr())
    }
}
