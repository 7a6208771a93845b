//! Objects: plain and persistent instances, their fields, evolved layouts, Broken objects and
//! enum members, and the checks that a class's code never runs on decoded values.

use copal_core::format::{DecodeError, Reader};
use pyo3::prelude::*;
use pyo3::types::{
    PyString, PyTuple, PyType,
};
use pyo3::{ffi, PyTypeInfo};
use std::cell::OnceCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::allocation;
use crate::cpython::FieldSlots;
use crate::errors::SchemaError;
use crate::known_containers::KnownContainer;
use crate::pytypes;

use super::{allocated_instance, memory, DecodeInfo, Decoder, Fail, Out, Resolver, Target, MAX_REMEMBERED_TARGETS};

impl<'r, 'py, R: Resolver<'py>, const BOUNDED: bool> Decoder<'r, 'py, R, BOUNDED> {
    /// A superseded copy after its tag (docs/STREAM.md section 5): its items, read for the
    /// values they create and dropped, then the memo slot whose value it is. That slot must have
    /// been taken inside the copy and hold a value of exactly `class` (a finished tuple or
    /// frozenset, or an object of the SUBCLASS's class): a half-built value never escapes.
    pub(super) fn superseded_copy(&mut self, r: &mut Reader<'_>, class: &Bound<'py, PyType>, depth: usize) -> Out<'py> {
        let slot = self.memo.len();
        self.memo.push(None);
        self.items(r, depth)?;
        let offset = r.position();
        let index = r.varint()?;
        match self.memo.get(index as usize) {
            Some(Some(value)) if index > slot as u64 && value.get_type().is(class) => {
                let value = value.clone();
                self.memo[slot] = Some(value.clone());
                Ok(value)
            }
            _ => Err(DecodeError::BadBackRef { offset, index }.into()),
        }
    }

    /// The object of an OBJECT (`typed` false) or TYPED_OBJECT of descriptor `id`, from its
    /// fields on. It takes the next memo slot before its fields are read.
    pub(super) fn object(&mut self, r: &mut Reader<'_>, id: u32, typed: bool, depth: usize) -> Out<'py> {
        let target = self.object_target(id)?;
        self.object_of(r, id, &target, typed, depth)
    }

    /// The descriptor `id` and its class (see `Target`), looked up once per decoding.
    pub(super) fn object_target(&mut self, id: u32) -> Result<Rc<Target<'py>>, Fail> {
        if let Some(Some(target)) = self.targets.get(id as usize) {
            return Ok(Rc::clone(target));
        }
        let py = self.py;
        let info = self.resolver.descriptor(py, id)?;
        let class = match self.resolver.class_of(py, &info) {
            Ok(class) => Some(class),
            Err(e) if SchemaError::matches(py, &e) => None,
            Err(e) => return Err(e.into()),
        };
        let slots = OnceCell::new();
        if let Some(known) = class.as_ref().and_then(|class| self.resolver.known_slots(id, class)) {
            let _ = slots.set(Some(known));
        }
        let target = Rc::new(Target { info, class, slots });
        let index = id as usize;
        if index < MAX_REMEMBERED_TARGETS {
            if self.targets.len() <= index {
                self.targets.resize(index + 1, None);
            }
            self.targets[index] = Some(Rc::clone(&target));
        }
        Ok(target)
    }

    /// `object` with the descriptor and class looked up (`object_target`).
    pub(super) fn object_of(
        &mut self,
        r: &mut Reader<'_>,
        id: u32,
        Target { info, class, slots }: &Target<'py>,
        typed: bool,
        depth: usize,
    ) -> Out<'py> {
        let py = self.py;
        // Checked with its first field (an OBJECT_LIST's objects have one at least).
        self.charge(memory::OBJECT + memory::MEMO);
        let Some(class) = class else { return self.broken_object(r, info, typed, depth) };
        let obj = match self.resolver.instance(py, id, class)? {
            Some(obj) => obj,
            None => {
                // A class whose finalizer or property setters would run on values from the
                // data is not rebuilt: the object loads as a BrokenObject instead. A check that
                // ran out of memory says nothing about the class, and is not kept.
                let rebuildable = match info.rebuildable.get() {
                    Some(&rebuildable) => rebuildable,
                    None => match check_plain_class(class, info).and_then(|()| check_inert(class, info)) {
                        Ok(()) => *info.rebuildable.get_or_init(|| true),
                        Err(error) if allocation::is_memory_error(py, &error) => return Err(error.into()),
                        Err(_) => *info.rebuildable.get_or_init(|| false),
                    },
                };
                if !rebuildable {
                    return self.broken_object(r, info, typed, depth);
                }
                // object.__new__: `check_plain_class` (in `rebuildable`) made sure the class does
                // not override it.
                allocated_instance(class, std::ptr::addr_of_mut!(ffi::PyBaseObject_Type))?
            }
        };
        self.memo.push(Some(obj.clone()));
        let known_slots = slots.get();
        self.set_fields(r, &obj, info, known_slots.and_then(Option::as_deref), typed, depth + 1)?;
        if known_slots.is_none() {
            let learned = FieldSlots::of(class, &info.fields).map(Arc::new);
            if let Some(learned) = &learned {
                self.resolver.learned_slots(id, learned);
            }
            // Set by a nested object of the same descriptor meanwhile, `set` keeps that value.
            let _ = slots.set(learned);
        }
        Ok(obj)
    }

    /// Field `index` of `info` in an OBJECT (`typed` false) or a TYPED_OBJECT.
    pub(super) fn field(&mut self, r: &mut Reader<'_>, info: &DecodeInfo, index: usize, typed: bool, depth: usize) -> Out<'py> {
        match info.kinds.get(index) {
            Some(&kind) if typed => self.typed_field(r, kind, depth),
            _ => self.value(r, depth),
        }
    }

    /// Sets the descriptor's fields as attributes of `obj`, bypassing any `__setattr__` of its
    /// class. On a fresh instance CPython then stores them in the compact form it uses for
    /// objects built by `__init__` (values sharing the class's key table), about a third of the
    /// memory of a separate dict.
    /// An embedded object of a class that cannot be found: a `copal.evolution.BrokenObject`
    /// holding the type name and the fields, written back as it was.
    pub(super) fn broken_object(&mut self, r: &mut Reader<'_>, info: &DecodeInfo, typed: bool, depth: usize) -> Out<'py> {
        let py = self.py;
        self.charge(memory::DICT + memory::DICT_TABLE.max(info.fields.len() * memory::DICT_ITEM));
        let slot = self.memo.len();
        self.memo.push(None);
        let state = allocation::dict(py)?;
        for (index, field) in info.fields.iter().enumerate() {
            let value = self.field(r, info, index, typed, depth + 1)?;
            state.set_item(field.bind(py), value)?;
        }
        let obj = pytypes::broken_object_type(py)?.call1((allocation::str(py, &info.type_name)?, state))?;
        self.memo[slot] = Some(obj.clone());
        Ok(obj)
    }

    /// `depth` is the depth of the field values: 0 for the fields of a record. `slots`, where
    /// known, stores them without the lookups of `PyObject_GenericSetAttr` (crate::cpython).
    pub(super) fn set_fields(
        &mut self,
        r: &mut Reader<'_>,
        obj: &Bound<'py, PyAny>,
        info: &DecodeInfo,
        slots: Option<&FieldSlots>,
        typed: bool,
        depth: usize,
    ) -> Result<(), Fail> {
        if info.fixup.is_some() {
            if let Some(layout) = crate::slots::layout_of(&obj.get_type())? {
                return self.set_evolved_slots(r, obj, info, &layout, typed, depth);
            }
        }
        for (index, field) in info.fields.iter().enumerate() {
            let value = self.field(r, info, index, typed, depth)?;
            if slots.is_some_and(|slots| slots.store(obj, index, &value)) {
                continue;
            }
            // SAFETY: valid object, name and value pointers; the call takes its own references.
            let rc = unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), field.as_ptr(), value.as_ptr()) };
            if rc != 0 {
                return Err(PyErr::fetch(self.py).into());
            }
        }
        if let Some(fixup) = &info.fixup {
            fixup.bind(self.py).call1((obj, crate::persistent::instance_dict(obj)?))?;
        }
        Ok(())
    }

    /// `set_fields` for an object with slots and a fix-up: the fix-up edits the fields in a
    /// dict of their own, since slots are not in the instance dict, and the edited fields are
    /// then set (a field dropped by the fix-up is never set, which a class without `__dict__`
    /// would have no place for).
    pub(super) fn set_evolved_slots(
        &mut self,
        r: &mut Reader<'_>,
        obj: &Bound<'py, PyAny>,
        info: &DecodeInfo,
        layout: &crate::slots::SlotLayout,
        typed: bool,
        depth: usize,
    ) -> Result<(), Fail> {
        let state = allocation::dict(self.py)?;
        for (index, field) in info.fields.iter().enumerate() {
            let value = self.field(r, info, index, typed, depth)?;
            state.set_item(field.bind(self.py), value)?;
        }
        if let Some(fixup) = &info.fixup {
            fixup.bind(self.py).call1((obj, &state))?;
        }
        for (name, value) in state.iter() {
            let is_slot = layout.fields.iter().any(|slot| slot.name.bind(self.py).as_any().eq(&name).unwrap_or(false));
            if !is_slot && !layout.has_dict {
                return Err(Fail::Python(no_place_for(info, &name)));
            }
            // SAFETY: valid object, name and value pointers; the call takes its own references.
            if unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr()) } != 0 {
                return Err(PyErr::fetch(self.py).into());
            }
        }
        Ok(())
    }
}

/// The member `name` of enum `class`, looked up in its member map (a plain dict: no metaclass
/// code runs). A composite Flag is named "A|B" and is rebuilt by or-ing its members; the empty
/// Flag is named "".
pub(super) fn enum_member<'py>(class: &Bound<'py, PyType>, type_name: &str, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = class.py();
    let members = class.getattr(crate::allocation::interned!(py, "_member_map_")?)?;
    let member = |part: &str| match members.get_item(allocation::str(py, part)?) {
        Err(error) if allocation::is_memory_error(py, &error) => Err(error),
        Err(_) => Err(SchemaError::new_err(format!("enum {type_name} has no member {part:?}"))),
        found => found,
    };
    if !name.is_empty() && !name.contains('|') {
        return member(name);
    }
    if !class.is_subclass(pytypes::flag_type(class.py())?)? {
        return Err(SchemaError::new_err(format!("enum {type_name} has no member {name:?}")));
    }
    if name.is_empty() {
        return class.call1((0,));
    }
    let mut parts = name.split('|');
    let mut value = member(parts.next().unwrap_or_default())?;
    for part in parts {
        value = value.call_method1(crate::allocation::interned!(py, "__or__")?, (member(part)?,))?;
    }
    Ok(value)
}

/// Refuses a class whose instances would run its code with values from the stream: a
/// finalizer (`__del__` runs when the rebuilt object is collected, even if decoding fails later),
/// or a data descriptor (a property with a setter, `__class__`, `__dict__`) named like one of the
/// descriptor's fields, whose setter would run when the field is set; the class's own slots
/// (slots.rs) are where their fields go. Writers never produce
/// such streams: an instance's `__dict__` cannot hold an attribute that a data descriptor shadows.
/// The class's namespaces are read through `type`'s own descriptors, so no metaclass code runs.
pub fn check_inert<'py>(class: &Bound<'py, PyType>, info: &DecodeInfo) -> PyResult<()> {
    let py = class.py();
    let type_namespace = PyType::type_object(py).getattr(crate::allocation::interned!(py, "__dict__")?)?;
    let get = crate::allocation::interned!(py, "__get__")?;
    let mro = type_namespace.get_item(crate::allocation::interned!(py, "__mro__")?)?.call_method1(get, (class,))?;
    let namespace_of = type_namespace.get_item(crate::allocation::interned!(py, "__dict__")?)?;
    // A tuple, read as one: a Python iterator collected into a Vec asks for its length hint,
    // whose failure (out of memory) pyo3 prints as unraisable instead of returning it.
    let namespaces = mro.cast_into::<PyTuple>()?.iter().map(|base| namespace_of.call_method1(get, (base,))).collect::<PyResult<Vec<_>>>()?;
    let lookup = |name: &Bound<'py, PyAny>| -> PyResult<Option<Bound<'py, PyAny>>> {
        for namespace in &namespaces {
            if namespace.contains(name)? {
                return namespace.get_item(name).map(Some);
            }
        }
        Ok(None)
    };
    let refuse = |why: String| {
        Err(SchemaError::new_err(format!(
            "stored type {:?} {why}; copal does not rebuild it from data, where that code would run on \
             values chosen by the data",
            info.type_name
        )))
    };
    if lookup(crate::allocation::interned!(py, "__del__")?.as_any())?.is_some() {
        return refuse("has a finalizer (__del__)".into());
    }
    // A slot's member descriptor is where the field belongs: setting it runs no code of the class.
    let layout = crate::slots::layout_of(class)?;
    let is_slot = |attribute: &Bound<'py, PyAny>| layout.as_ref().is_some_and(|layout| layout.fields.iter().any(|slot| slot.member.is(attribute)));
    // The state of an OrderedDict, defaultdict or deque is no attribute: its C type sets it.
    let fields = &info.fields[KnownContainer::state_fields_of(class)?.min(info.fields.len())..];
    for field in fields {
        if let Some(attribute) = lookup(field.bind(py).as_any())? {
            // SAFETY: reading a slot of the live type object of `attribute`.
            let is_data_descriptor = unsafe { (*attribute.get_type().as_type_ptr()).tp_descr_set.is_some() };
            if is_data_descriptor && !is_slot(&attribute) {
                return refuse(format!("has a data descriptor (property, slot, ...) for its field {}", field.bind(py)));
            }
        }
    }
    // A class without `__dict__` has room for its slots only. (A fix-up may drop fields
    // first: `set_evolved_slots` checks what is left.)
    if let Some(layout) = layout.as_ref().filter(|layout| !layout.has_dict && info.fixup.is_none()) {
        let is_slot_name = |field: &Py<PyString>| layout.fields.iter().any(|slot| slot.name.bind(py).as_any().eq(field.bind(py)).unwrap_or(false));
        if let Some(field) = fields.iter().find(|field| !is_slot_name(field)) {
            return Err(no_place_for(info, field.bind(py)));
        }
    }
    Ok(())
}

/// A stored field that an object of a class with slots and no `__dict__` cannot hold.
fn no_place_for(info: &DecodeInfo, field: &Bound<'_, PyAny>) -> PyErr {
    SchemaError::new_err(format!(
        "stored type {:?} has a field {field} that its class has neither a slot nor a __dict__ for: add the \
         slot, or declare the field in __copal_removed__",
        info.type_name
    ))
}

pub fn check_plain_class(class: &Bound<'_, PyType>, info: &DecodeInfo) -> PyResult<()> {
    let persistent = class.is_subclass_of::<crate::persistent::PersistentBase>()?;
    if persistent || !crate::encode::is_python_class(class) || !crate::encode::new_is_object_new(class)? {
        return Err(SchemaError::new_err(format!(
            "stored type {:?} cannot be rebuilt by value (it is persistent, built in, or defines __new__)",
            info.type_name
        )));
    }
    Ok(())
}
