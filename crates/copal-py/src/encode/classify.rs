//! How the values of a class are written (`Kind`), decided once per class from the class alone,
//! and the tests of a class's layout and constructors that decision rests on (which the decoder
//! and the JSON writer share).

use copal_core::format::tag;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyComplex, PyDate, PyDateTime, PyDelta, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString, PyTime, PyTuple, PyType};
use pyo3::PyTypeInfo;

use crate::known_containers::KnownContainer;
use crate::persistent::PersistentBase;
use crate::pytypes;

/// The built-in types other than those `Encoder::value` tests first, each written by a tag of
/// its own (`Kind::Builtin`).
#[derive(Clone, Copy)]
pub(crate) enum Builtin {
    DateTime,
    Date,
    Time,
    Delta,
    Bytes,
    ByteArray,
    Set,
    FrozenSet,
    Complex,
}

/// How the values of one class (other than the builtin types `Encoder::value` tests first) are
/// written. It depends on the class only, so it is decided once per class and encoder instead
/// of by a chain of type checks and attribute lookups per value.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// One of the built-in types `Encoder::value` does not test first (exact types).
    Builtin(Builtin),
    Persistent,
    Decimal,
    Uuid,
    Broken,
    Enum,
    /// A Python subclass of list, dict, tuple, set, frozenset or bytearray, or of a scalar built-in
    /// (`SCALAR_BASES`), with the tag of its base (see `subclass_bases`).
    Subclass(u8),
    /// An OrderedDict, defaultdict or deque, or an instance of a Python subclass of one: a
    /// SUBCLASS with its state (known_containers.rs).
    Known(KnownContainer),
    /// A plain instance of a Python class (with a `__dict__`, slots or both), written by value
    /// as an OBJECT; the number of the class's entry in `Encoder::object_shapes`.
    Object(usize),
    Unsupported,
}

/// The type object of a built-in type.
type BuiltinType = fn(Python<'_>) -> Bound<'_, PyType>;

/// The types of `Kind::Builtin`.
const BUILTINS: [(BuiltinType, Builtin); 9] = [
    (PyDateTime::type_object, Builtin::DateTime),
    (PyDate::type_object, Builtin::Date),
    (PyTime::type_object, Builtin::Time),
    (PyDelta::type_object, Builtin::Delta),
    (PyBytes::type_object, Builtin::Bytes),
    (PyByteArray::type_object, Builtin::ByteArray),
    (PySet::type_object, Builtin::Set),
    (PyFrozenSet::type_object, Builtin::FrozenSet),
    (PyComplex::type_object, Builtin::Complex),
];

/// The scalar built-ins whose Python subclasses streams hold as SUBCLASS values (docs/STREAM.md
/// section 5): each with the tag its base is classified under (an int's value is then written
/// as INT or BIGINT, a str's as STR or STR_SURROGATES), and the method of the built-in that
/// returns an instance's value as a plain object of the built-in. Records refuse them.
pub(super) const SCALAR_BASES: [(BuiltinType, u8, &str); 5] = [
    (PyInt::type_object, tag::INT, "__int__"),
    (PyFloat::type_object, tag::FLOAT, "__float__"),
    (PyComplex::type_object, tag::COMPLEX, "__complex__"),
    (PyString::type_object, tag::STR, "__str__"),
    (PyBytes::type_object, tag::BYTES, "__bytes__"),
];

/// The built-in whose subclasses a SUBCLASS value of base tag `base` holds, if `base` is the tag
/// of a scalar value (`SCALAR_BASES`).
pub(crate) fn scalar_base(py: Python<'_>, base: u8) -> Option<Bound<'_, PyType>> {
    let classified_as = match base {
        tag::BIGINT => tag::INT,
        tag::STR_SURROGATES => tag::STR,
        other => other,
    };
    SCALAR_BASES.iter().find(|(_, scalar, _)| *scalar == classified_as).map(|(base_type, ..)| base_type(py))
}

/// The built-in containers whose Python subclasses are SUBCLASS values, with their tags: the
/// five of docs/FORMAT.md section 6.7, and `bytearray`, a mutable sequence of bytes whose
/// SUBCLASS base is a blob (streams and text documents only, `Encoder::bytearray_subclasses`).
const CONTAINER_BASES: [(BuiltinType, u8); 6] = [
    (PyList::type_object, tag::LIST),
    (PyDict::type_object, tag::DICT),
    (PyTuple::type_object, tag::TUPLE),
    (PySet::type_object, tag::SET),
    (PyFrozenSet::type_object, tag::FROZENSET),
    (PyByteArray::type_object, tag::BYTEARRAY),
];

/// The built-ins whose Python subclasses are SUBCLASS values, with the tag of their base.
fn subclass_bases(py: Python<'_>) -> impl Iterator<Item = (Bound<'_, PyType>, u8)> {
    let containers = CONTAINER_BASES.iter().map(move |&(base_type, base)| (base_type(py), base));
    containers.chain(SCALAR_BASES.iter().map(move |&(base_type, base, _)| (base_type(py), base)))
}

/// The built-in of `subclass_bases` that `class` is a subclass of, with its tag.
pub(super) fn subclass_base<'py>(class: &Bound<'py, PyType>) -> PyResult<Option<(Bound<'py, PyType>, u8)>> {
    for (base, base_tag) in subclass_bases(class.py()) {
        if class.is_subclass(&base)? {
            return Ok(Some((base, base_tag)));
        }
    }
    Ok(None)
}

/// How values of `class` are written (see `Kind`). Everything here depends on the class alone;
/// `object_index` is the number a `Kind::Object` gets.
pub(crate) fn classify(class: &Bound<'_, PyType>, object_index: usize) -> PyResult<Kind> {
    let py = class.py();
    if let Some(&(_, builtin)) = BUILTINS.iter().find(|(builtin_type, _)| class.is(builtin_type(py))) {
        return Ok(Kind::Builtin(builtin));
    }
    if class.is_subclass_of::<PersistentBase>()? {
        return Ok(Kind::Persistent);
    }
    if class.is(pytypes::decimal_type(py)?) {
        return Ok(Kind::Decimal);
    }
    if class.is(pytypes::uuid_type(py)?) {
        return Ok(Kind::Uuid);
    }
    // Before copal.evolution hands BrokenObject over, no object can be one.
    if pytypes::broken_object_type(py).is_ok_and(|broken| class.is(broken)) {
        return Ok(Kind::Broken);
    }
    if class.is_subclass(pytypes::enum_type(py)?)? {
        return Ok(Kind::Enum);
    }
    if let Some(known) = KnownContainer::of(class)? {
        return Ok(if rebuilt_by_base(class, known.type_object(py)?)? { Kind::Known(known) } else { Kind::Unsupported });
    }
    if !is_python_class(class) {
        return Ok(Kind::Unsupported);
    }
    if let Some((base, base_tag)) = subclass_base(class)? {
        // A SUBCLASS holds the base and the instance dict: a subclass of a scalar built-in whose
        // instances keep values in slots is refused rather than written without them.
        let kept_whole = rebuilt_by_base(class, &base)? && (scalar_base(py, base_tag).is_none() || !has_slots(class)?);
        return Ok(if kept_whole { Kind::Subclass(base_tag) } else { Kind::Unsupported });
    }
    let state_known = class_has_instance_dict(class) || every_base_declares_slots(class)?;
    if state_known && new_is_object_new(class)? {
        return Ok(Kind::Object(object_index));
    }
    Ok(Kind::Unsupported)
}

/// Whether every class of `class`'s MRO but `object` declares `__slots__`: then its instances
/// hold nothing but those slots. (A class statement without `__slots__` gives its instances a
/// `__dict__`; a type without either, such as `_thread.lock`, keeps its state out of reach.)
fn every_base_declares_slots(class: &Bound<'_, PyType>) -> PyResult<bool> {
    let py = class.py();
    let object = pytypes::object_type(py)?;
    for ancestor in class.mro().iter().filter(|ancestor| !ancestor.is(object)) {
        if !ancestor.getattr(crate::allocation::interned!(py, "__dict__")?)?.contains(crate::allocation::interned!(py, "__slots__")?)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether `class` was made by Python code (a class statement or `type()`), not by C code:
/// only such classes keep all their instances' state in `__dict__` and `__slots__`, where the
/// codec reads and sets it. A heap type is not enough: since CPython 3.12 the `_io` classes are
/// heap types too (as are those of pyo3, Cython or `PyType_FromSpec`), with C state the codec
/// would drop. What Python code makes is mutable, freed by `subtype_dealloc`
/// (`pytypes::class_statement_dealloc`), and adds to its base's instances only what it declares
/// (`adds_only_declared_state`). A C class is immutable, or frees its state with a deallocator
/// of its own; one made by `PyType_FromSpec` without a deallocator gets `subtype_dealloc`, and
/// is then told apart by the C fields it adds.
pub fn is_python_class(class: &Bound<'_, PyType>) -> bool {
    // SAFETY: `class` is a valid type object; only its flags and deallocator are read, and its
    // layout once it is known to be a heap type.
    unsafe {
        let ty = class.as_type_ptr();
        (*ty).tp_flags & (ffi::Py_TPFLAGS_HEAPTYPE | ffi::Py_TPFLAGS_IMMUTABLETYPE) == ffi::Py_TPFLAGS_HEAPTYPE
            && (*ty).tp_dealloc.map(|dealloc| dealloc as usize) == Some(pytypes::class_statement_dealloc())
            && adds_only_declared_state(ty)
    }
}

/// Whether the instances of the heap type `ty` are those of its base plus one pointer for each
/// of its own `__slots__` names, and for the instance dict and weak reference list it adds
/// inside the object (CPython's `type_new`, which keeps the others before the object: managed
/// dicts since 3.11, managed weak references since 3.12).
///
/// # Safety
/// `ty` must be a live heap type.
unsafe fn adds_only_declared_state(ty: *mut ffi::PyTypeObject) -> bool {
    // SAFETY: the caller's guarantee: a heap type's object is a PyHeapTypeObject, whose
    // `ht_slots` is null or the tuple of the slot names `type_new` made (`__dict__` and
    // `__weakref__` taken out); a type's base is null or a live type.
    unsafe {
        let base = (*ty).tp_base;
        if base.is_null() {
            return false;
        }
        let slots = (*ty.cast::<ffi::PyHeapTypeObject>()).ht_slots;
        let mut declared = if slots.is_null() { 0 } else { ffi::PyTuple_GET_SIZE(slots) };
        if (*ty).tp_weaklistoffset > 0 && (*base).tp_weaklistoffset == 0 {
            declared += 1;
        }
        if (*ty).tp_flags & ffi::Py_TPFLAGS_MANAGED_DICT == 0 && (*ty).tp_dictoffset != 0 && (*base).tp_dictoffset == 0 {
            declared += 1;
        }
        let pointer = std::mem::size_of::<*mut ffi::PyObject>() as ffi::Py_ssize_t;
        (*ty).tp_basicsize == (*base).tp_basicsize + declared * pointer
    }
}

/// Whether `class` can still change: a class whose attributes may gain or lose a `__set__`
/// later (static types and immutable heap types cannot).
pub fn is_mutable_class(class: &Bound<'_, PyType>) -> bool {
    // SAFETY: `class` is a valid type object; only its flags are read.
    unsafe { (*class.as_type_ptr()).tp_flags & ffi::Py_TPFLAGS_IMMUTABLETYPE == 0 }
}

pub fn has_instance_dict(v: &Bound<'_, PyAny>) -> bool {
    class_has_instance_dict(&v.get_type())
}

pub(crate) fn class_has_instance_dict(class: &Bound<'_, PyType>) -> bool {
    // SAFETY: `class` is a valid type object; only its layout field is read.
    unsafe { (*class.as_type_ptr()).tp_dictoffset != 0 }
}

/// Whether the instances of `class`, a subclass of the built-in container or scalar `base`, are
/// rebuilt whole by `base`'s own constructor and methods, as the decoder rebuilds them: every class
/// between the two is a Python class (a heap type) whose `__new__`, if it has one, is written
/// in Python. Not so for struct sequences (`os.stat_result`, `time.struct_time`: `tuple.__new__`
/// refuses them, and their fields past the tuple would be lost) or subclasses of containers
/// written in C (`collections.OrderedDict` keeps its order outside the dict, so an instance
/// filled by `dict.update` looks empty; the C containers of known_containers.rs are therefore
/// checked with the C type itself as `base`). Kept per class (class_cache.rs): the answer reads only
/// the namespaces along the class's MRO.
pub(crate) fn rebuilt_by_base(class: &Bound<'_, PyType>, base: &Bound<'_, PyType>) -> PyResult<bool> {
    // A built-in type's address names it for the life of the process.
    let base_address = base.as_ptr() as usize;
    let (known_base, rebuilt) = crate::class_cache::remembered(
        class,
        |facts| &mut facts.rebuilt_by_base,
        || Ok((base_address, base_rebuilds(class, base)?)),
    )?;
    if known_base == base_address { Ok(rebuilt) } else { base_rebuilds(class, base) }
}

/// `rebuilt_by_base`, computed.
fn base_rebuilds(class: &Bound<'_, PyType>, base: &Bound<'_, PyType>) -> PyResult<bool> {
    let py = class.py();
    let staticmethod = py.import(crate::allocation::interned!(py, "builtins")?)?.getattr(crate::allocation::interned!(py, "staticmethod")?)?;
    for ancestor in class.mro().iter() {
        let ancestor = ancestor.cast_into::<PyType>()?;
        if ancestor.is(base) {
            return Ok(true);
        }
        if !is_python_class(&ancestor) {
            return Ok(false);
        }
        let namespace = ancestor.getattr(crate::allocation::interned!(py, "__dict__")?)?;
        let new = namespace.call_method1(crate::allocation::interned!(py, "get")?, (crate::allocation::interned!(py, "__new__")?,))?;
        if !new.is_none() && !new.is_instance(&staticmethod)? {
            return Ok(false);
        }
    }
    Ok(false)
}

/// Whether instances of `class` keep values in slots (the `__slots__` of its Python classes).
pub(super) fn has_slots(class: &Bound<'_, PyType>) -> PyResult<bool> {
    let py = class.py();
    let member_descriptor = py.import(crate::allocation::interned!(py, "types")?)?.getattr(crate::allocation::interned!(py, "MemberDescriptorType")?)?;
    for ancestor in class.mro().iter() {
        let ancestor = ancestor.cast_into::<PyType>()?;
        if !is_python_class(&ancestor) {
            continue;
        }
        let namespace = ancestor.getattr(crate::allocation::interned!(py, "__dict__")?)?;
        for attribute in namespace.call_method0(crate::allocation::interned!(py, "values")?)?.try_iter()? {
            if attribute?.get_type().is(&member_descriptor) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Decoding creates plain instances with `object.__new__`, which runs no user code; classes
/// with their own `__new__` are therefore not stored by value. Read from the type's `tp_new`
/// slot (a `__new__` in a class statement sets it; one that is `object.__new__` leaves the
/// inherited one), not by attribute lookup, so that no metaclass code runs.
pub fn new_is_object_new(class: &Bound<'_, PyType>) -> PyResult<bool> {
    // SAFETY: reading the `tp_new` slot of two live type objects. Both are CPython's own
    // function addresses, compared as addresses.
    let (new, object_new) = unsafe { ((*class.as_type_ptr()).tp_new, (*std::ptr::addr_of!(ffi::PyBaseObject_Type)).tp_new) };
    Ok(new.map(|f| f as usize) == object_new.map(|f| f as usize))
}
