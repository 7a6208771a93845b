//! Objects whose classes declare `__slots__`: their fields are the slots that are set, in MRO
//! order with bases first, then their `__dict__` if they have one (docs/FORMAT.md "Values",
//! OBJECT). Which slots a class has is decided by `copal.slots.stored_slots`; this module reads
//! and writes them.
//!
//! A slot of a Python class is a `T_OBJECT_EX` member at a fixed offset in every instance of the
//! class and of its subclasses: the encoder reads it there, as the member descriptor's `__get__`
//! would, without a call per slot. The decoder sets slots by their names through
//! `PyObject_GenericSetAttr`, which finds the member descriptor and runs its `__set__` (never a
//! `__setattr__` of the class: a frozen dataclass raises in its own).

use std::sync::Arc;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyType};

use crate::encode::FieldSource;

/// One slot of a class: its attribute name, its member descriptor and where the descriptor
/// keeps the value in an instance.
pub struct SlotField {
    pub name: Py<PyString>,
    pub member: Py<PyAny>,
    /// Offset of the slot's object pointer from the start of an instance.
    offset: usize,
}

impl SlotField {
    /// The value in this slot of `obj`, null if it is unset. A borrowed reference.
    ///
    /// # Safety
    /// `obj` must be a live instance of the class of the field's layout, or of a subclass, and
    /// the GIL must be held.
    pub unsafe fn value_in(&self, obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
        // SAFETY: the offset lies inside such an object (`SlotLayout`'s invariant) and holds an
        // object pointer or null, read with the GIL held as the member's `__get__` reads it.
        unsafe { *obj.cast::<u8>().add(self.offset).cast::<*mut ffi::PyObject>() }
    }
}

/// The slots of a class's instances and whether they also have a `__dict__`.
///
/// Invariant: every `offset` is that of a `T_OBJECT_EX` member of the class (or of one of its
/// bases) that the class's own attribute lookup finds by the field's name, so it lies inside
/// every instance of the class and of its subclasses.
pub struct SlotLayout {
    pub fields: Vec<SlotField>,
    pub has_dict: bool,
}

/// The slot layout of `class`, or None when its instances keep every attribute in their
/// `__dict__` (no slots that hold values). Kept per class (class_cache.rs).
pub fn layout_of(class: &Bound<'_, PyType>) -> PyResult<Option<Arc<SlotLayout>>> {
    crate::class_cache::remembered(class, |facts| &mut facts.slots, || compute_layout(class))
}

fn compute_layout(class: &Bound<'_, PyType>) -> PyResult<Option<Arc<SlotLayout>>> {
    let py = class.py();
    let has_dict = crate::encode::class_has_instance_dict(class);
    let slots = stored_slots(py)?.call1((class,))?;
    let mut fields = Vec::new();
    for slot in slots.try_iter()? {
        let (name, member): (Bound<'_, PyString>, Bound<'_, PyAny>) = slot?.extract()?;
        let offset = member_offset(&member).ok_or_else(|| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "cannot store instances of {}: its slot {name} is not a plain object slot",
                crate::classes::type_name_of(class).unwrap_or_else(|_| "?".into())
            ))
        })?;
        fields.push(SlotField { name: crate::allocation::interned_str(py, name.to_str()?)?.unbind(), member: member.unbind(), offset });
    }
    Ok((!fields.is_empty() || !has_dict).then(|| Arc::new(SlotLayout { fields, has_dict })))
}

/// Where `member`, a member descriptor, keeps its value: None unless it is the kind the class
/// statement makes for a slot (a writable `T_OBJECT_EX` at an absolute offset).
fn member_offset(member: &Bound<'_, PyAny>) -> Option<usize> {
    let py = member.py();
    let member_type = MEMBER_DESCRIPTOR.get(py)?;
    if !member.get_type().is(member_type.bind(py)) {
        return None;
    }
    // SAFETY: `member` is exactly a member descriptor (checked above), whose object is a
    // PyMemberDescrObject pointing to its static or class-owned PyMemberDef; both live as long
    // as the descriptor, which is held.
    let definition = unsafe { &*(*member.as_ptr().cast::<ffi::PyMemberDescrObject>()).d_member };
    (definition.type_code == ffi::Py_T_OBJECT_EX && definition.flags == 0).then_some(definition.offset).and_then(|offset| usize::try_from(offset).ok())
}

/// `types.MemberDescriptorType`, filled by `stored_slots` (which gives copal.slots's function).
static MEMBER_DESCRIPTOR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn stored_slots(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    crate::allocation::imported(&MEMBER_DESCRIPTOR, py, "types", "MemberDescriptorType")?;
    crate::hooks::stored_slots(py)
}

/// The fields of one object with slots, read in place: its slots that are set, then the items
/// of its `__dict__` (encode/fields.rs `FieldSource`).
pub struct SlotFields<'py> {
    obj: Bound<'py, PyAny>,
    layout: Arc<SlotLayout>,
    /// The instance dict, when the class has one.
    dict: Option<Bound<'py, PyDict>>,
}

impl<'py> SlotFields<'py> {
    /// The fields of `obj`, whose type is the class `layout` was made for or a subclass of it.
    pub fn of(obj: &Bound<'py, PyAny>, layout: &Arc<SlotLayout>) -> PyResult<Self> {
        let dict = if layout.has_dict {
            // SAFETY: the class has a dict slot (`has_dict`); the call returns a new reference
            // (the dict, made now if the attributes were kept inline) or null with an exception.
            let dict = unsafe { Bound::from_owned_ptr_or_err(obj.py(), ffi::PyObject_GenericGetDict(obj.as_ptr(), std::ptr::null_mut()))? };
            Some(dict.cast_into::<PyDict>()?)
        } else {
            None
        };
        Ok(SlotFields { obj: obj.clone(), layout: Arc::clone(layout), dict })
    }

    /// The value in slot `field` of the object, null if it is unset. A borrowed reference.
    fn value(&self, field: &SlotField) -> *mut ffi::PyObject {
        // SAFETY: the object is an instance of the layout's class or a subclass (`of`).
        unsafe { field.value_in(self.obj.as_ptr()) }
    }
}

impl<'py> FieldSource<'py> for SlotFields<'py> {
    fn py(&self) -> Python<'py> {
        self.obj.py()
    }

    fn count(&self) -> usize {
        let slots = self.layout.fields.iter().filter(|field| !self.value(field).is_null()).count();
        slots + self.dict.as_ref().map_or(0, |dict| dict.len())
    }

    /// Positions below the number of slots are slots; the dict's own positions follow.
    fn next_field(&self, position: &mut ffi::Py_ssize_t) -> Option<(*mut ffi::PyObject, *mut ffi::PyObject)> {
        let slots = self.layout.fields.len() as ffi::Py_ssize_t;
        while let Some(field) = usize::try_from(*position).ok().and_then(|index| self.layout.fields.get(index)) {
            *position += 1;
            let value = self.value(field);
            if !value.is_null() {
                return Some((field.name.as_ptr(), value));
            }
        }
        let dict = self.dict.as_ref()?;
        let mut dict_position = *position - slots;
        let found = dict.next_field(&mut dict_position);
        *position = dict_position + slots;
        found
    }

    fn to_dict(&self) -> PyResult<Bound<'py, PyDict>> {
        let state = crate::encode::fields_dict(self)?;
        if state.len() != self.count() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "cannot store an object of type {}: its __dict__ holds an attribute named like one of its slots",
                crate::classes::type_name_of(&self.obj.get_type()).unwrap_or_else(|_| "?".into())
            )));
        }
        Ok(state)
    }
}
