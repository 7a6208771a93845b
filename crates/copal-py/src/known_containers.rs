//! `collections.OrderedDict`, `collections.defaultdict` and `collections.deque`, and their Python
//! subclasses: containers written in C that keep state outside their base, which the generic
//! SUBCLASS path (a base filled by the base's own methods) would lose. OrderedDict keeps its
//! order in a linked list beside the dict table (`move_to_end` changes one and not the other),
//! defaultdict keeps `default_factory` and deque, which is no list at all, keeps `maxlen`.
//!
//! They are SUBCLASS values all the same (docs/FORMAT.md section 6.7, "Containers of
//! collections"): the descriptor names the class, the base is a DICT (OrderedDict, defaultdict)
//! or a LIST (deque) of the items in the container's own iteration order, and the first field
//! is the state (`default_factory`, `maxlen`; OrderedDict has none), followed by the instance's
//! own fields. This module knows the three types by identity, reads them through their own
//! methods and rebuilds them with their own `__new__`, `__setitem__` and `__init__`, called on
//! the C type: no method of a Python subclass runs, and the only factories a reader sets are
//! the built-in types of `FACTORIES`, found by name in that table, never imported or called.

use copal_core::format::{tag, DecodeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString, PyTuple, PyType};
use pyo3::PyTypeInfo;

use crate::allocation;
use crate::decode::Fail;
use crate::encode::Failure;
use crate::errors::SchemaError;

/// One of the three containers of `collections` that copal stores with their state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum KnownContainer {
    OrderedDict,
    DefaultDict,
    Deque,
}

/// What a known container is written as besides its descriptor: its items as a SUBCLASS base
/// and its fields (state first).
pub(crate) struct Contents<'py> {
    pub items: Items<'py>,
    pub fields: Bound<'py, PyDict>,
}

pub(crate) enum Items<'py> {
    /// The pairs of a dict-based container, copied into a plain dict in the container's order.
    Pairs(Bound<'py, PyDict>),
    /// The items of a deque, in order.
    Values(Vec<Bound<'py, PyAny>>),
}

/// A built-in type, got from the interpreter (the containers of `collections` are imported).
type Factory = fn(Python<'_>) -> PyResult<Bound<'_, PyType>>;

/// The default factories a defaultdict may have to be stored, under the names they are stored
/// as: built-in types whose call makes an empty value and runs no code of the application.
const FACTORIES: [(&str, Factory); 13] = [
    ("list", |py| Ok(PyList::type_object(py))),
    ("dict", |py| Ok(PyDict::type_object(py))),
    ("set", |py| Ok(PySet::type_object(py))),
    ("int", |py| Ok(PyInt::type_object(py))),
    ("float", |py| Ok(PyFloat::type_object(py))),
    ("str", |py| Ok(PyString::type_object(py))),
    ("bytes", |py| Ok(PyBytes::type_object(py))),
    ("tuple", |py| Ok(PyTuple::type_object(py))),
    ("frozenset", |py| Ok(PyFrozenSet::type_object(py))),
    ("bool", |py| Ok(PyBool::type_object(py))),
    ("collections.OrderedDict", |py| Ok(KnownContainer::OrderedDict.type_object(py)?.clone())),
    ("collections.deque", |py| Ok(KnownContainer::Deque.type_object(py)?.clone())),
    ("collections.defaultdict", |py| Ok(KnownContainer::DefaultDict.type_object(py)?.clone())),
];

impl KnownContainer {
    const ALL: [KnownContainer; 3] = [KnownContainer::OrderedDict, KnownContainer::DefaultDict, KnownContainer::Deque];

    /// The known container `class` is or derives from, if any.
    pub(crate) fn of(class: &Bound<'_, PyType>) -> PyResult<Option<KnownContainer>> {
        for known in Self::ALL {
            let known_type = known.type_object(class.py())?;
            // SAFETY: both are live type objects and the GIL is held; PyType_IsSubtype reads
            // their MROs and runs no Python code (no `__subclasscheck__`).
            if unsafe { ffi::PyType_IsSubtype(class.as_type_ptr(), known_type.as_type_ptr()) } != 0 {
                return Ok(Some(known));
            }
        }
        Ok(None)
    }

    /// The known container a class is or derives from (`of`, the answer of `Self::of` for it), if
    /// a SUBCLASS of it has base tag `base_tag`, that container's own: `of` is not asked for
    /// other bases (the tuples of named tuples).
    pub(crate) fn stored_as(base_tag: u8, of: impl FnOnce() -> PyResult<Option<KnownContainer>>) -> PyResult<Option<KnownContainer>> {
        if base_tag != tag::DICT && base_tag != tag::LIST {
            return Ok(None);
        }
        Ok(of()?.filter(|known| known.base_tag() == base_tag))
    }

    /// The C type itself, imported once per interpreter.
    pub(crate) fn type_object(self, py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
        static ORDERED_DICT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static DEFAULT_DICT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static DEQUE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        match self {
            KnownContainer::OrderedDict => crate::allocation::imported(&ORDERED_DICT, py, "collections", "OrderedDict"),
            KnownContainer::DefaultDict => crate::allocation::imported(&DEFAULT_DICT, py, "collections", "defaultdict"),
            KnownContainer::Deque => crate::allocation::imported(&DEQUE, py, "collections", "deque"),
        }
    }

    /// The tag of the SUBCLASS base the container is written with.
    pub(crate) fn base_tag(self) -> u8 {
        match self {
            KnownContainer::OrderedDict | KnownContainer::DefaultDict => tag::DICT,
            KnownContainer::Deque => tag::LIST,
        }
    }

    /// The name of the field that holds the container's state, always its first field.
    pub(crate) fn state_field(self, py: Python<'_>) -> PyResult<Option<&Bound<'_, PyString>>> {
        Ok(match self {
            KnownContainer::OrderedDict => None,
            KnownContainer::DefaultDict => Some(crate::allocation::interned!(py, "default_factory")?),
            KnownContainer::Deque => Some(crate::allocation::interned!(py, "maxlen")?),
        })
    }

    /// How many of the fields of a stored instance of `class` hold state, which `decode::check_inert`
    /// leaves out: they are never set as attributes, and their names are the C type's own data
    /// descriptors.
    pub(crate) fn state_fields_of(class: &Bound<'_, PyType>) -> PyResult<usize> {
        match Self::of(class)? {
            Some(known) => Ok(usize::from(known.state_field(class.py())?.is_some())),
            None => Ok(0),
        }
    }

    /// The items and fields of `v`, an instance of this container or of a Python subclass of it,
    /// read with the C type's own methods: a subclass's overrides do not change what is stored.
    /// `instance_fields` are the instance's own fields (its slots and `__dict__`).
    pub(crate) fn contents<'py>(self, v: &Bound<'py, PyAny>, instance_fields: Option<Bound<'py, PyDict>>) -> Result<Contents<'py>, Failure> {
        let py = v.py();
        let known_type = self.type_object(py)?;
        let items = match self {
            KnownContainer::Deque => Items::Values(crate::encode::iterated(&known_type.call_method1(crate::allocation::interned!(py, "__iter__")?, (v,))?, 0)?),
            // A defaultdict's order is its table's, which the encoder reads in place (C-level
            // iteration, whatever the subclass overrides).
            KnownContainer::DefaultDict => Items::Pairs(v.cast::<PyDict>().map_err(PyErr::from)?.clone()),
            // An OrderedDict's own items(), not the dict table's order.
            KnownContainer::OrderedDict => {
                let pairs = allocation::dict(py)?;
                pairs.call_method1(crate::allocation::interned!(py, "update")?, (known_type.call_method1(crate::allocation::interned!(py, "items")?, (v,))?,))?;
                Items::Pairs(pairs)
            }
        };
        let fields = allocation::dict(py)?;
        let state_field = self.state_field(py)?;
        if let Some(name) = state_field {
            // The C type's own descriptor: a subclass may shadow the attribute.
            let state = own_attribute(known_type, name, v)?;
            let state = match self {
                KnownContainer::DefaultDict => factory_name(py, &state)?,
                _ => state,
            };
            fields.set_item(name, state)?;
        }
        for (name, value) in instance_fields.iter().flat_map(|dict| dict.iter()) {
            if let Some(state) = state_field.filter(|state| name.eq(state).unwrap_or(false)) {
                return Err(Failure::Unsupported {
                    path: vec![],
                    reason: format!("its __dict__ holds an attribute {state}, which is where copal stores the {state} of its {}", known_type.name()?),
                });
            }
            fields.set_item(name, value)?;
        }
        Ok(Contents { items, fields })
    }

    /// A new, empty instance of `class` (this container or a Python subclass of it), made by the
    /// C type's `__new__`: neither a `__new__` the class defines in Python (`encode::rebuilt_by_base`
    /// refuses classes whose instances a `__new__` written in C makes) nor its `__init__` runs,
    /// as for every SUBCLASS value.
    pub(crate) fn new_instance<'py>(self, class: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
        crate::decode::allocated_instance(class, self.type_object(class.py())?.as_type_ptr())
    }

    /// Fills `obj`, made by `new_instance`, with the decoded `items` (an OrderedDict's: a plain
    /// dict of the pairs in stored order; a deque's: a list; a defaultdict's pairs are decoded
    /// into it, and `items` is None) and sets its `state` (the value of its state field, read at
    /// byte `offset`; None for an OrderedDict, which has none), all through the C type's own
    /// functions.
    pub(crate) fn fill<'py>(self, obj: &Bound<'py, PyAny>, items: Option<&Bound<'py, PyAny>>, state: &Bound<'py, PyAny>, offset: usize) -> Result<(), Fail> {
        let py = obj.py();
        let known_type = self.type_object(py)?;
        match (self, items) {
            (KnownContainer::DefaultDict, _) => {
                let factory = stored_factory(py, state, offset)?;
                // The initializer given the factory alone sets it and leaves the pairs in place.
                init_by(known_type, obj, &(factory,).into_pyobject(py)?)?;
            }
            (KnownContainer::OrderedDict, Some(items)) => {
                // `OrderedDict.update` would call the instance's `__setitem__`, which a subclass
                // may override: the C type's own is called, pair by pair.
                for (key, value) in items.cast::<PyDict>().map_err(PyErr::from)?.iter() {
                    // SAFETY: `obj` is an OrderedDict (made by its constructor); the function
                    // returns -1 with an exception set on failure.
                    if unsafe { PyODict_SetItem(obj.as_ptr(), key.as_ptr(), value.as_ptr()) } < 0 {
                        return Err(PyErr::fetch(py).into());
                    }
                }
            }
            (KnownContainer::Deque, Some(items)) => {
                let count = items.len()?;
                let fits = state.is_none()
                    || state.cast_exact::<PyInt>().is_ok_and(|maxlen| maxlen.extract::<isize>().is_ok_and(|maxlen| maxlen >= 0 && count <= maxlen as usize));
                if !fits {
                    return Err(Fail::Decode(DecodeError::OutOfRange { offset, what: "deque maxlen (None or an int at least the number of items)" }));
                }
                init_by(known_type, obj, &(items, state).into_pyobject(py)?)?;
            }
            (_, None) => return Err(pyo3::exceptions::PyRuntimeError::new_err("the items of an OrderedDict or deque were not decoded").into()),
        }
        Ok(())
    }
}

extern "C" {
    /// CPython's (Objects/odictobject.c, declared in cpython/odictobject.h): stores the pair in
    /// the OrderedDict's table and at the end of its order, as `OrderedDict.__setitem__` does.
    fn PyODict_SetItem(od: *mut ffi::PyObject, key: *mut ffi::PyObject, value: *mut ffi::PyObject) -> std::ffi::c_int;
}

/// `known_type.__init__(obj, *args)` by the type's initializer slot itself: through the
/// attribute, each value cost a method lookup and a wrapper that copies the arguments into a
/// new tuple. `obj` was made by the type's constructor (`new_instance`), as the wrapper checks.
fn init_by<'py>(known_type: &Bound<'py, PyType>, obj: &Bound<'py, PyAny>, args: &Bound<'py, PyTuple>) -> PyResult<()> {
    // SAFETY: `known_type` is a live type object and `obj` an instance of it; the slot returns
    // 0, or -1 with an exception set.
    unsafe {
        let tp_init = (*known_type.as_type_ptr()).tp_init.ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("type has no __init__"))?;
        if tp_init(obj.as_ptr(), args.as_ptr(), std::ptr::null_mut()) < 0 {
            return Err(PyErr::fetch(obj.py()));
        }
    }
    Ok(())
}

/// The attribute `name` of `v` as `known_type`'s own descriptor gives it (`descriptor.__get__(v)`
/// by its slot, without a bound method and an argument tuple per value).
fn own_attribute<'py>(known_type: &Bound<'py, PyType>, name: &Bound<'py, PyString>, v: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let descriptor = known_type.getattr(name)?;
    // SAFETY: `descriptor` is a live object whose type's `tp_descr_get` slot, when set, takes
    // the descriptor, the instance and its type, and returns a new reference or null with an
    // exception set.
    unsafe {
        let get = (*ffi::Py_TYPE(descriptor.as_ptr())).tp_descr_get.ok_or_else(|| pyo3::exceptions::PyTypeError::new_err(format!("{name} is not a descriptor")))?;
        Bound::from_owned_ptr_or_err(v.py(), get(descriptor.as_ptr(), v.as_ptr(), known_type.as_ptr()))
    }
}

/// The stored name of defaultdict factory `factory` (None for None); any factory but the
/// built-in types of `FACTORIES` is refused, since a reader would have to import or call
/// something named by the data.
fn factory_name<'py>(py: Python<'py>, factory: &Bound<'py, PyAny>) -> Result<Bound<'py, PyAny>, Failure> {
    if factory.is_none() {
        return Ok(factory.clone());
    }
    for (name, factory_type) in FACTORIES {
        if factory.is(factory_type(py)?) {
            return Ok(allocation::str(py, name)?.into_any());
        }
    }
    let names: Vec<&str> = FACTORIES.iter().map(|(name, _)| *name).collect();
    let shown = factory.repr().map(|repr| repr.to_string()).unwrap_or_else(|_| "?".into());
    Err(Failure::Unsupported {
        path: vec![],
        reason: format!(
            "its default_factory {shown} cannot be stored: copal stores a defaultdict whose default_factory is None or \
             one of {} (a reader never imports or calls a factory named by data)",
            names.join(", ")
        ),
    })
}

/// The factory named by the stored `default_factory` value `stored`, read at byte `offset`.
fn stored_factory<'py>(py: Python<'py>, stored: &Bound<'py, PyAny>, offset: usize) -> Result<Bound<'py, PyAny>, Fail> {
    if stored.is_none() {
        return Ok(stored.clone());
    }
    let Ok(name) = stored.cast_exact::<PyString>() else {
        return Err(Fail::Decode(DecodeError::OutOfRange { offset, what: "defaultdict default_factory (None or a name)" }));
    };
    for (known, factory_type) in FACTORIES {
        if name.to_str().is_ok_and(|name| name == known) {
            return Ok(factory_type(py)?.into_any());
        }
    }
    Err(Fail::Python(SchemaError::new_err(format!(
        "stored defaultdict default_factory {name} is not a factory copal rebuilds (None, or a built-in type such as \
         list, dict, set or int); copal never imports or calls a factory named by data"
    ))))
}
