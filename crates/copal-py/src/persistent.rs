//! The `Persistent` base class and its state machine (the Python docstring in
//! python/copal/persistent.py documents it for users):
//!
//! ```text
//!   new (no jar) --commit--> UP_TO_DATE <--load-- GHOST
//!                            |   ^                 ^
//!            setattr / _p_changed=True   commit    | invalidate / evict / abort
//!                            v   |                 |
//!                           CHANGED ---------------+
//! ```
//! A ghost has an oid and a jar but an empty `__dict__`; touching any attribute other than the
//! `_p_` ones loads its record. Assigning an attribute of an up-to-date object registers it with
//! its connection as changed.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::{PyAttributeError, PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use crate::allocation::{interned, ToPython};
use crate::connection::Connection;

pub const UP_TO_DATE: u8 = 0;
pub const CHANGED: u8 = 1;
pub const GHOST: u8 = 2;
/// Not stored yet: no oid, no jar.
pub const UNSAVED: u8 = 3;

const NO_OID: u64 = u64::MAX;

/// Incremented at every transaction start; an object's `last_access` records the generation in
/// which it was last touched, so that cache eviction can ghostify the least recently used, and so
/// that the first touch of an object in a transaction is seen (see `holds_containers`).
pub static GENERATION: AtomicU32 = AtomicU32::new(1);

/// The persistence fields of every persistent object. The class is frozen (no borrow flag):
/// attribute access, the hottest path of the database, costs two relaxed atomic loads. Fields
/// change only on state transitions, made by the thread that owns the object's connection.
#[pyclass(subclass, frozen, module = "copal._core", name = "PersistentBase")]
pub struct PersistentBase {
    oid: AtomicU64,
    state: AtomicU8,
    /// The tid of the record this object's state came from (its serial).
    serial: AtomicU64,
    last_access: AtomicU32,
    /// Whether the loaded state holds plain mutable containers, which may change in place
    /// unseen: the first touch of such an object in a generation tells its connection, whose
    /// running transaction then compares the object's state at commit (and only then).
    holds_containers: AtomicBool,
    jar: Mutex<Option<Py<Connection>>>,
}

impl PersistentBase {
    pub fn of<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a PersistentBase> {
        Ok(obj.cast::<PersistentBase>()?.get())
    }

    pub fn oid(&self) -> Option<u64> {
        match self.oid.load(Ordering::Relaxed) {
            NO_OID => None,
            oid => Some(oid),
        }
    }

    pub fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    pub fn serial(&self) -> u64 {
        self.serial.load(Ordering::Relaxed)
    }

    pub fn last_access(&self) -> u32 {
        self.last_access.load(Ordering::Relaxed)
    }

    pub fn jar(&self, py: Python<'_>) -> Option<Py<Connection>> {
        self.jar.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|j| j.clone_ref(py))
    }

    pub fn is_jar(&self, jar: &Py<Connection>) -> bool {
        self.jar.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|j| j.is(jar))
    }

    /// Refuses a stored object of a connection other than `jar` (of this database or another):
    /// its oid names an unrelated object there. `what` completes "cannot be": what the caller
    /// does with it. A new object belongs to no connection yet and passes.
    pub fn check_own(&self, jar: &Py<Connection>, what: &str) -> PyResult<()> {
        if self.state() == UNSAVED || self.is_jar(jar) {
            return Ok(());
        }
        Err(PyTypeError::new_err(format!(
            "a persistent object of another connection or database cannot be {what}; \
             load it in this transaction or copy it"
        )))
    }

    pub fn set_state(&self, state: u8) {
        self.state.store(state, Ordering::Relaxed);
    }

    pub fn holds_containers(&self) -> bool {
        self.holds_containers.load(Ordering::Relaxed)
    }

    pub fn set_holds_containers(&self, holds: bool) {
        self.holds_containers.store(holds, Ordering::Relaxed);
    }

    /// Makes the object loaded from (or written as) the record with `serial`.
    pub fn set_loaded(&self, serial: u64) {
        self.serial.store(serial, Ordering::Relaxed);
        self.touch();
        self.set_state(UP_TO_DATE);
    }

    /// Attaches the object to `jar` under `oid` in `state`.
    pub fn attach(&self, oid: u64, jar: Py<Connection>, state: u8) {
        self.oid.store(oid, Ordering::Relaxed);
        *self.jar.lock().unwrap_or_else(|p| p.into_inner()) = Some(jar);
        self.set_state(state);
    }

    /// Makes the object unsaved again (after a failed commit, or after its deletion).
    pub fn detach(&self) {
        *self.jar.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.oid.store(NO_OID, Ordering::Relaxed);
        self.set_state(UNSAVED);
    }

    /// Records an access in the current generation; returns whether it is the first one.
    fn touch(&self) -> bool {
        let generation = GENERATION.load(Ordering::Relaxed);
        let first = self.last_access.load(Ordering::Relaxed) != generation;
        if first {
            self.last_access.store(generation, Ordering::Relaxed);
        }
        first
    }

    /// Records an access by the application; the first one in a generation of an object whose
    /// state holds plain containers puts it among the objects its connection's running
    /// transaction watches for changes in place.
    fn touch_by_application(&self) {
        if self.touch() && self.holds_containers() {
            if let (Some(oid), Ok(jar)) = (self.oid(), self.jar.lock()) {
                if let Some(jar) = jar.as_ref() {
                    jar.get().watch(oid);
                }
            }
        }
    }
}

fn is_persistence_name(name: &str) -> bool {
    name.starts_with("_p_") || name.starts_with("_v_") || name == "__class__"
}

#[pymethods]
impl PersistentBase {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        PersistentBase {
            oid: AtomicU64::new(NO_OID),
            state: AtomicU8::new(UNSAVED),
            serial: AtomicU64::new(0),
            last_access: AtomicU32::new(0),
            holds_containers: AtomicBool::new(false),
            jar: Mutex::new(None),
        }
    }

    fn __getattribute__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        let this = slf.get();
        match this.state() {
            UNSAVED => {}
            GHOST if !is_persistence_name(name.to_str()?) => activate(slf.as_any())?,
            _ => this.touch_by_application(),
        }
        generic_getattr(slf.as_any(), name)
    }

    fn __setattr__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        set_or_delete(slf, name, value.as_ptr())
    }

    fn __delattr__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>) -> PyResult<()> {
        // A null value asks the generic implementation to delete the attribute.
        set_or_delete(slf, name, std::ptr::null_mut())
    }

    #[getter]
    fn _p_oid<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.oid().to_python(py)
    }

    #[getter]
    fn _p_jar(&self, py: Python<'_>) -> Option<Py<Connection>> {
        self.jar(py)
    }

    #[getter]
    fn _p_serial<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.serial().to_python(py)
    }

    /// "ghost", "saved" (up to date), "changed" or "unsaved" (not stored yet).
    #[getter]
    fn _p_status<'py>(&self, py: Python<'py>) -> PyResult<&'py Bound<'py, PyString>> {
        match self.state() {
            UNSAVED => interned!(py, "unsaved"),
            GHOST => interned!(py, "ghost"),
            CHANGED => interned!(py, "changed"),
            _ => interned!(py, "saved"),
        }
    }

    /// True if changed since loaded, False if up to date, None for a ghost (as in ZODB).
    #[getter(_p_changed)]
    fn get_p_changed(&self) -> Option<bool> {
        match self.state() {
            GHOST => None,
            state => Some(state == CHANGED),
        }
    }

    #[setter(_p_changed)]
    fn set_p_changed(slf: &Bound<'_, Self>, value: Option<bool>) -> PyResult<()> {
        match value {
            Some(true) => {
                check_in_transaction(slf)?;
                mark_changed(slf)
            }
            Some(false) => {
                let _ = slf.get().state.compare_exchange(CHANGED, UP_TO_DATE, Ordering::Relaxed, Ordering::Relaxed);
                Ok(())
            }
            None => deactivate(slf.as_any(), false),
        }
    }

    /// Turns an up-to-date object back into a ghost, releasing its state.
    fn _p_deactivate(slf: &Bound<'_, Self>) -> PyResult<()> {
        deactivate(slf.as_any(), false)
    }

    /// Turns the object into a ghost even if it has unsaved changes (they are discarded).
    fn _p_invalidate(slf: &Bound<'_, Self>) -> PyResult<()> {
        deactivate(slf.as_any(), true)
    }

    /// Loads the object's state if it is a ghost.
    fn _p_activate(slf: &Bound<'_, Self>) -> PyResult<()> {
        if slf.get().state() == GHOST {
            activate(slf.as_any())?;
        }
        Ok(())
    }
}

fn set_or_delete(slf: &Bound<'_, PersistentBase>, name: &Bound<'_, PyString>, value: *mut ffi::PyObject) -> PyResult<()> {
    let state = slf.get().state();
    let tracked = state != UNSAVED && !is_persistence_name(name.to_str()?);
    if tracked {
        // A changed object is registered with the running transaction: checked once per object
        // and transaction, when it first changes, not at every assignment.
        if state != CHANGED {
            check_in_transaction(slf)?;
        }
        if state == GHOST {
            activate(slf.as_any())?;
        }
    }
    // SAFETY: `slf` and `name` are valid; `value` is a valid borrowed object or null (delete).
    let rc = unsafe { ffi::PyObject_GenericSetAttr(slf.as_ptr(), name.as_ptr(), value) };
    if rc != 0 {
        return Err(PyErr::fetch(slf.py()));
    }
    if tracked {
        mark_changed(slf)?;
    }
    Ok(())
}

pub fn generic_getattr(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
    // SAFETY: both pointers are valid; the result is a new reference or null with an exception set.
    unsafe {
        Bound::from_owned_ptr_or_err(obj.py(), ffi::PyObject_GenericGetAttr(obj.as_ptr(), name.as_ptr()))
            .map(Bound::unbind)
    }
}

/// The instance `__dict__` of `obj`, read without going through the persistence hooks.
pub fn instance_dict<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let name = crate::allocation::interned!(obj.py(), "__dict__")?;
    let dict = generic_getattr(obj, name)?.into_bound(obj.py());
    dict.cast_into::<PyDict>().map_err(|_| PyAttributeError::new_err("object has no instance __dict__"))
}

/// Replaces the instance `__dict__` of `obj` without going through the persistence hooks.
pub fn set_instance_dict(obj: &Bound<'_, PyAny>, dict: &Bound<'_, PyDict>) -> PyResult<()> {
    let name = crate::allocation::interned!(obj.py(), "__dict__")?;
    // SAFETY: valid borrowed pointers; the generic setter stores a new reference to `dict`.
    let rc = unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), dict.as_ptr()) };
    if rc != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    Ok(())
}

fn activate(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    match PersistentBase::of(obj)?.jar(obj.py()) {
        Some(jar) => jar.get().activate(obj),
        None => Ok(()),
    }
}

/// Refuses to change a stored object while no transaction runs on its connection (the change
/// would wait there, unseen, and be committed by whichever transaction takes the connection
/// next, another thread's perhaps) or while a read-only one does.
fn check_in_transaction(slf: &Bound<'_, PersistentBase>) -> PyResult<()> {
    match slf.get().jar(slf.py()) {
        Some(jar) if !jar.get().in_transaction() => Err(PyRuntimeError::new_err(format!(
            "cannot change {}: the transaction that loaded it has ended; change it in a transaction (with db.transaction() as tx: ...)",
            slf.repr()?
        ))),
        Some(jar) if jar.get().is_readonly() => {
            Err(crate::errors::ReadOnlyError::new_err(format!("cannot change {}: {}", slf.repr()?, jar.get().why_readonly())))
        }
        _ => Ok(()),
    }
}

fn mark_changed(slf: &Bound<'_, PersistentBase>) -> PyResult<()> {
    let this = slf.get();
    if this.state.compare_exchange(UP_TO_DATE, CHANGED, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        if let Some(jar) = this.jar(slf.py()) {
            jar.get().register(slf.as_any().clone().unbind());
        }
    }
    Ok(())
}

/// Ghostifies `obj` (unless it has unsaved changes and `force` is false).
pub fn deactivate(obj: &Bound<'_, PyAny>, force: bool) -> PyResult<()> {
    let this = PersistentBase::of(obj)?;
    match this.state() {
        UNSAVED | GHOST => return Ok(()),
        CHANGED if !force => return Ok(()),
        _ => {}
    }
    this.set_state(GHOST);
    this.set_holds_containers(false);
    set_instance_dict(obj, &crate::allocation::dict(obj.py())?)?;
    if let (Some(jar), Some(oid)) = (this.jar(obj.py()), this.oid()) {
        jar.get().forget_state(oid);
    }
    Ok(())
}
