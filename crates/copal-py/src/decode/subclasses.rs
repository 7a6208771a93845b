//! SUBCLASS values: instances of subclasses of built-in scalars and containers, rebuilt by
//! their base's own constructor.

use copal_core::format::{tag, DecodeError, Reader};
use pyo3::prelude::*;
use pyo3::types::{
    PyByteArray, PyDict, PyFrozenSet, PyList, PySet, PyTuple, PyType,
};
use pyo3::{ffi, PyTypeInfo};
use std::sync::Arc;

use crate::allocation;
use crate::errors::SchemaError;
use crate::known_containers::KnownContainer;
use crate::list_builder::ListBuilder;

use super::{unhashable, DecodeInfo, Decoder, Fail, OrCorrupt, Out, Resolver};

impl<'r, 'py, R: Resolver<'py>, const BOUNDED: bool> Decoder<'r, 'py, R, BOUNDED> {
    pub(super) fn subclass(&mut self, r: &mut Reader<'_>, depth: usize) -> Out<'py> {
        let py = self.py;
        let mut info = self.resolver.descriptor(py, r.u32_varint()?)?;
        let class = self.resolver.class_of(py, &info)?;
        let offset = r.position();
        let base_tag = r.peek_u8()?;
        // A scalar base is read below as the value it is, from its tag on; a container's tag is
        // taken here.
        let scalar = crate::encode::scalar_base(py, base_tag).filter(|_| self.version_4_values);
        let is_scalar = scalar.is_some();
        let base: Bound<'py, PyType> = match scalar {
            Some(scalar) => scalar,
            None => match r.u8()? {
                tag::LIST => PyList::type_object(py),
                tag::DICT => PyDict::type_object(py),
                tag::SET => PySet::type_object(py),
                tag::TUPLE => PyTuple::type_object(py),
                tag::FROZENSET => PyFrozenSet::type_object(py),
                tag::SUPERSEDED_TUPLE if self.version_4_values => PyTuple::type_object(py),
                tag::SUPERSEDED_FROZENSET if self.version_4_values => PyFrozenSet::type_object(py),
                tag::BYTEARRAY if self.bytearray_bases => PyByteArray::type_object(py),
                other => return Err(DecodeError::UnknownTag { offset, tag: other }.into()),
            },
        };
        // An OrderedDict, defaultdict or deque (or a subclass) stored with its own base tag is
        // checked against, and rebuilt by, its C type (known_containers.rs).
        let known = KnownContainer::stored_as(base_tag, || self.known_container_of(&class))?;
        let base = match known {
            Some(known) => known.type_object(py)?.clone(),
            None => base,
        };
        let checked = (class.as_ptr() as usize, base.as_ptr() as usize, Arc::as_ptr(&info) as usize);
        let has_slots = match self.checked_subclasses.get(&checked) {
            Some(&has_slots) => has_slots,
            None => self.check_subclass(&class, &base, known, &info, checked)?,
        };
        let obj = if let Some(known) = known {
            self.known_container(r, known, &class, &mut info, depth)?
        } else if is_scalar {
            self.scalar_instance(r, &class, &base, depth)?
        } else if base_tag == tag::BYTEARRAY {
            self.bytearray_instance(r, &class, &base)?
        } else if base_tag == tag::SUPERSEDED_TUPLE || base_tag == tag::SUPERSEDED_FROZENSET {
            // The fields that follow are set on the value of the slot, as on any SUBCLASS value.
            self.superseded_copy(r, &class, depth)?
        } else if base_tag == tag::TUPLE || base_tag == tag::FROZENSET {
            let slot = self.memo.len();
            self.memo.push(None);
            let items = ListBuilder::of(py, self.items(r, depth)?)?;
            let obj = made_by_base(&class, base.as_type_ptr(), &(items,).into_pyobject(py)?).or_corrupt(py, || unhashable(offset))?;
            self.memo[slot] = Some(obj.clone());
            obj
        } else {
            let obj = allocated_instance(&class, base.as_type_ptr())?;
            self.memo.push(Some(obj.clone()));
            if base_tag == tag::DICT {
                // Into the instance's own table: `PyDict_SetItem` stores there without the
                // instance's `__setitem__`.
                self.fill_dict(r, obj.cast::<PyDict>().map_err(PyErr::from)?, depth)?;
            } else {
                let items = ListBuilder::of(py, self.items(r, depth)?)?;
                // The base's own C functions, as `list.extend(obj, items)` and
                // `set.update(obj, items)`: no method of the instance's class runs.
                // SAFETY: `obj` is an empty list or set (an instance of a subclass of one, made
                // by its constructor) and `items` a list; each call returns -1 with an exception
                // set on failure.
                let filled = unsafe {
                    if base_tag == tag::LIST {
                        ffi::PyList_SetSlice(obj.as_ptr(), 0, 0, items.as_ptr()) == 0
                    } else {
                        items.iter().all(|item| ffi::PySet_Add(obj.as_ptr(), item.as_ptr()) == 0)
                    }
                };
                if !filled {
                    return Err(PyErr::fetch(py)).or_corrupt(py, || unhashable(offset));
                }
            }
            obj
        };
        if has_slots || crate::encode::has_instance_dict(&obj) {
            self.set_fields(r, &obj, &info, None, false, depth + 1)?;
        } else if !info.fields.is_empty() {
            return Err(Fail::Python(SchemaError::new_err(format!(
                "stored type {:?} has fields but its class has neither __dict__ nor __slots__",
                info.type_name
            ))));
        }
        Ok(obj)
    }

    /// The class checks of a SUBCLASS value of `class` stored as `base` with descriptor `info`
    /// (`subclass`), remembered under `checked`; returns whether the class has slots.
    #[inline(never)]
    pub(super) fn check_subclass(
        &mut self,
        class: &Bound<'py, PyType>,
        base: &Bound<'py, PyType>,
        known: Option<KnownContainer>,
        info: &DecodeInfo,
        checked: (usize, usize, usize),
    ) -> Result<bool, Fail> {
        crate::class_cache::check_inert(class, info)?;
        if (known.is_none() && !crate::encode::is_python_class(class)) || !class.is_subclass(base)? {
            return Err(Fail::Python(SchemaError::new_err(format!(
                "stored type {:?} is not a subclass of {}",
                info.type_name,
                base.name()?
            ))));
        }
        if !crate::encode::rebuilt_by_base(class, base)? {
            return Err(Fail::Python(SchemaError::new_err(format!(
                "stored type {:?} cannot be rebuilt from the {} it is stored as: a class between them \
                 is not written in Python or makes its instances in its own __new__",
                info.type_name,
                base.name()?
            ))));
        }
        let has_slots = crate::slots::layout_of(class)?.is_some();
        self.checked_subclasses.insert(checked, has_slots);
        Ok(has_slots)
    }

    /// The instance of `class`, an OrderedDict, defaultdict or deque or a Python subclass of
    /// one, whose SUBCLASS base `r` is at (after its tag), in the SUBCLASS's memo slot; then
    /// its state field if it has one (known_containers.rs). `info` becomes the descriptor of
    /// the fields left, which are set as for any SUBCLASS.
    #[inline(never)]
    pub(super) fn known_container(&mut self, r: &mut Reader<'_>, known: KnownContainer, class: &Bound<'py, PyType>, info: &mut Arc<DecodeInfo>, depth: usize) -> Out<'py> {
        let py = self.py;
        let obj = known.new_instance(class)?;
        self.memo.push(Some(obj.clone()));
        let items = match known {
            // A defaultdict is a dict: its pairs go into its own table (`PyDict_SetItem`, no
            // `__setitem__` of a subclass).
            KnownContainer::DefaultDict => {
                self.fill_dict(r, obj.cast::<PyDict>().map_err(PyErr::from)?, depth)?;
                None
            }
            KnownContainer::OrderedDict => {
                let pairs = allocation::dict(py)?;
                self.fill_dict(r, &pairs, depth)?;
                Some(pairs.into_any())
            }
            KnownContainer::Deque => Some(ListBuilder::of(py, self.items(r, depth)?)?.into_any()),
        };
        let (state, offset) = match known.state_field(py)? {
            Some(name) => {
                // Both are exact strs: comparing them runs no Python code.
                if !info.fields.first().is_some_and(|field| field.bind(py).as_any().eq(name).unwrap_or(false)) {
                    return Err(Fail::Python(SchemaError::new_err(format!(
                        "stored type {:?} does not have {name} as its first field, where its state is stored",
                        info.type_name
                    ))));
                }
                let offset = r.position();
                let state = self.value(r, depth + 1)?;
                let after_state = Arc::clone(info.after_state.get_or_init(|| {
                    let fields = info.fields[1..].iter().map(|field| field.clone_ref(py)).collect();
                    let fixup = info.fixup.as_ref().map(|fixup| fixup.clone_ref(py));
                    Arc::new(DecodeInfo::new(info.type_name.clone(), fields, fixup))
                }));
                *info = after_state;
                (state, offset)
            }
            None => (py.None().into_bound(py), r.position()),
        };
        known.fill(&obj, items.as_ref(), &state, offset)?;
        Ok(obj)
    }

    /// `KnownContainer::of(class)`, remembered for the decoding (`known_containers`).
    pub(super) fn known_container_of(&mut self, class: &Bound<'py, PyType>) -> PyResult<Option<KnownContainer>> {
        let address = class.as_ptr() as usize;
        if let Some(&(_, known)) = self.known_containers.iter().find(|(known_class, _)| *known_class == address) {
            return Ok(known);
        }
        let known = KnownContainer::of(class)?;
        self.known_containers.push((address, known));
        Ok(known)
    }

    /// The instance of `class`, a subclass of scalar built-in `base`, whose value is the
    /// SUBCLASS base that `r` is at (docs/STREAM.md section 5), in the SUBCLASS's memo slot.
    /// Kept out of `subclass` (and `value_inner` read through `value`, its one caller, in which
    /// it stays inlined): streams without such values decode as fast as before they existed.
    #[inline(never)]
    pub(super) fn scalar_instance(&mut self, r: &mut Reader<'_>, class: &Bound<'py, PyType>, base: &Bound<'py, PyType>, depth: usize) -> Out<'py> {
        // Not a STR value of the stream: a string base takes no string slot.
        let string_slots = self.string_slots.take();
        let value = self.value(r, depth);
        self.string_slots = string_slots;
        // The built-in's constructor copies the value into the new instance; no method of the
        // class runs.
        let obj = made_by_base(class, base.as_type_ptr(), &(value?,).into_pyobject(self.py)?)?;
        self.memo.push(Some(obj.clone()));
        Ok(obj)
    }

    /// The instance of `class`, a subclass of `bytearray` (`base`), whose SUBCLASS base blob `r`
    /// is at (after the BYTEARRAY byte; docs/STREAM.md section 5), in the SUBCLASS's memo slot.
    /// Out of line for the reason `scalar_instance` is.
    #[inline(never)]
    pub(super) fn bytearray_instance(&mut self, r: &mut Reader<'_>, class: &Bound<'py, PyType>, base: &Bound<'py, PyType>) -> Out<'py> {
        let bytes = r.length_prefixed()?;
        // bytearray's own `__new__` makes it empty and its buffer is filled in place: no method
        // of the class runs, and a failed allocation is a MemoryError.
        let obj = allocated_instance(class, base.as_type_ptr())?;
        let buffer = obj.cast::<PyByteArray>().map_err(PyErr::from)?;
        buffer.resize(bytes.len())?;
        // SAFETY: the buffer was just made `bytes.len()` long, and no Python code runs while it
        // is written.
        unsafe { buffer.as_bytes_mut() }.copy_from_slice(bytes);
        self.memo.push(Some(obj.clone()));
        Ok(obj)
    }
}

/// A new, empty instance of `class` made by the constructor of `base` (`object`, PersistentBase,
/// or the built-in base of a SUBCLASS value) with no arguments, called directly: no `__new__` or
/// `__init__` of `class` runs, and no Python call is made (records called
/// `object.__new__(class)`: a method lookup, an argument tuple and the wrapper's checks per
/// embedded object). See `made_by_base`.
pub(crate) fn allocated_instance<'py>(class: &Bound<'py, PyType>, base: *mut ffi::PyTypeObject) -> PyResult<Bound<'py, PyAny>> {
    made_by_base(class, base, &PyTuple::empty(class.py()))
}

/// `base.__new__(class, *args)`, by `base`'s constructor slot itself: through the attribute,
/// each value cost a method lookup, a wrapper that copies the arguments into a new tuple, and
/// its checks, which the callers make once per class instead: `class` is a subclass of `base`
/// whose classes between the two are written in Python and define no `__new__`
/// (`allocated_instance`'s callers, `encode::rebuilt_by_base`), so `base`'s constructor is the
/// one the wrapper would call.
pub(crate) fn made_by_base<'py>(class: &Bound<'py, PyType>, base: *mut ffi::PyTypeObject, args: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `base` is a live type object (a built-in type, or a class the caller holds), and
    // `class` a subtype of it as said above; the slot returns a new reference or null with an
    // exception set.
    unsafe {
        let tp_new = (*base).tp_new.ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("class cannot be instantiated"))?;
        Bound::from_owned_ptr_or_err(class.py(), tp_new(class.as_type_ptr(), args.as_ptr(), std::ptr::null_mut()))
    }
}
