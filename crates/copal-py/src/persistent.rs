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

use std::sync::atomic::{AtomicU32, Ordering};

use pyo3::exceptions::PyAttributeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use crate::connection::Connection;

pub const UP_TO_DATE: u8 = 0;
pub const CHANGED: u8 = 1;
pub const GHOST: u8 = 2;

/// Incremented at every transaction start; an object's `last_access` records the generation in
/// which it was last touched, so that cache eviction can ghostify the least recently used.
pub static GENERATION: AtomicU32 = AtomicU32::new(1);

#[pyclass(subclass, module = "copal._core", name = "PersistentBase")]
pub struct PersistentBase {
    pub oid: Option<u64>,
    pub jar: Option<Py<Connection>>,
    pub state: u8,
    /// The tid of the record this object's state came from (its serial).
    pub serial: u64,
    pub last_access: u32,
}

fn is_persistence_name(name: &str) -> bool {
    name.starts_with("_p_") || name.starts_with("_v_") || name == "__class__"
}

#[pymethods]
impl PersistentBase {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        PersistentBase { oid: None, jar: None, state: UP_TO_DATE, serial: 0, last_access: 0 }
    }

    fn __getattribute__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        // A failed borrow means the object is being updated by copal itself (loading, evicting):
        // then it is not a ghost that this access should load.
        let ghost = match slf.try_borrow_mut() {
            Ok(mut this) => {
                this.last_access = GENERATION.load(Ordering::Relaxed);
                this.state == GHOST
            }
            Err(_) => false,
        };
        if ghost && !is_persistence_name(name.to_str()?) {
            activate(slf.as_any())?;
        }
        generic_getattr(slf.as_any(), name)
    }

    fn __setattr__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let tracked = !is_persistence_name(name.to_str()?);
        if tracked && slf.borrow().state == GHOST {
            activate(slf.as_any())?;
        }
        // SAFETY: both pointers are valid borrowed references held by the caller.
        let rc = unsafe { ffi::PyObject_GenericSetAttr(slf.as_ptr(), name.as_ptr(), value.as_ptr()) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        if tracked {
            mark_changed(slf)?;
        }
        Ok(())
    }

    fn __delattr__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>) -> PyResult<()> {
        let tracked = !is_persistence_name(name.to_str()?);
        if tracked && slf.borrow().state == GHOST {
            activate(slf.as_any())?;
        }
        // SAFETY: a null value asks the generic implementation to delete the attribute.
        let rc = unsafe { ffi::PyObject_GenericSetAttr(slf.as_ptr(), name.as_ptr(), std::ptr::null_mut()) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        if tracked {
            mark_changed(slf)?;
        }
        Ok(())
    }

    #[getter]
    fn _p_oid(&self) -> Option<u64> {
        self.oid
    }

    #[getter]
    fn _p_jar(&self, py: Python<'_>) -> Option<Py<Connection>> {
        self.jar.as_ref().map(|j| j.clone_ref(py))
    }

    #[getter]
    fn _p_serial(&self) -> u64 {
        self.serial
    }

    /// "ghost", "saved" (up to date), "changed" or "unsaved" (not stored yet).
    #[getter]
    fn _p_status(&self) -> &'static str {
        match (self.jar.is_some(), self.state) {
            (false, _) => "unsaved",
            (true, GHOST) => "ghost",
            (true, CHANGED) => "changed",
            _ => "saved",
        }
    }

    /// True if changed since loaded, False if up to date, None for a ghost (as in ZODB).
    #[getter(_p_changed)]
    fn get_p_changed(&self) -> Option<bool> {
        match self.state {
            GHOST => None,
            state => Some(state == CHANGED),
        }
    }

    #[setter(_p_changed)]
    fn set_p_changed(slf: &Bound<'_, Self>, value: Option<bool>) -> PyResult<()> {
        match value {
            Some(true) => mark_changed(slf),
            Some(false) => {
                let mut this = slf.borrow_mut();
                if this.state == CHANGED {
                    this.state = UP_TO_DATE;
                }
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
        if slf.borrow().state == GHOST {
            activate(slf.as_any())?;
        }
        Ok(())
    }
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
    let name = pyo3::intern!(obj.py(), "__dict__");
    let dict = generic_getattr(obj, name)?.into_bound(obj.py());
    dict.cast_into::<PyDict>().map_err(|_| PyAttributeError::new_err("object has no instance __dict__"))
}

/// Replaces the instance `__dict__` of `obj` without going through the persistence hooks.
pub fn set_instance_dict(obj: &Bound<'_, PyAny>, dict: &Bound<'_, PyDict>) -> PyResult<()> {
    let name = pyo3::intern!(obj.py(), "__dict__");
    // SAFETY: valid borrowed pointers; the generic setter stores a new reference to `dict`.
    let rc = unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), dict.as_ptr()) };
    if rc != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    Ok(())
}

fn activate(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    let jar = obj.cast::<PersistentBase>()?.borrow().jar.as_ref().map(|j| j.clone_ref(obj.py()));
    match jar {
        Some(jar) => jar.get().activate(obj),
        None => Ok(()),
    }
}

fn mark_changed(slf: &Bound<'_, PersistentBase>) -> PyResult<()> {
    let jar = {
        let mut this = slf.borrow_mut();
        if this.state != UP_TO_DATE || this.jar.is_none() {
            return Ok(());
        }
        this.state = CHANGED;
        this.jar.as_ref().map(|j| j.clone_ref(slf.py()))
    };
    if let Some(jar) = jar {
        jar.get().register(slf.as_any().clone().unbind());
    }
    Ok(())
}

/// Ghostifies `obj` (unless it has unsaved changes and `force` is false).
pub fn deactivate(obj: &Bound<'_, PyAny>, force: bool) -> PyResult<()> {
    let this = obj.cast::<PersistentBase>()?;
    {
        let mut state = this.borrow_mut();
        if state.jar.is_none() || state.state == GHOST || (state.state == CHANGED && !force) {
            return Ok(());
        }
        state.state = GHOST;
    }
    set_instance_dict(obj, &PyDict::new(obj.py()))?;
    if let Some(jar) = this.borrow().jar.as_ref() {
        jar.get().forget_state(this.borrow().oid.unwrap_or(0));
    }
    Ok(())
}
