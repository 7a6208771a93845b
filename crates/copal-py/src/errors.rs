//! Maps core errors onto the Python exception hierarchy defined in python/copal/errors.py.

use copal_core::{DecodeError, StoreError};
use pyo3::prelude::*;

pyo3::import_exception!(copal.errors, CopalError);
pyo3::import_exception!(copal.errors, ConflictError);
pyo3::import_exception!(copal.errors, CorruptRecordError);
pyo3::import_exception!(copal.errors, SchemaError);
pyo3::import_exception!(copal.errors, DanglingReference);
pyo3::import_exception!(copal.errors, StorageError);
pyo3::import_exception!(copal.errors, UniqueViolation);
pyo3::import_exception!(copal.errors, DatabaseNotEmpty);

pub fn store_error(error: StoreError) -> PyErr {
    let message = error.to_string();
    match error {
        StoreError::Conflict { .. } => ConflictError::new_err(message),
        StoreError::Corrupt { .. } => CorruptRecordError::new_err(message),
        // A store layout this copal cannot use is about the database, not the application's
        // classes: StorageError on both stores (docs/reference/errors.md).
        StoreError::Storage { .. } | StoreError::Exhausted { .. } | StoreError::Incompatible { .. } => {
            StorageError::new_err(message)
        }
        StoreError::UniqueViolation { .. } => UniqueViolation::new_err(message),
        _ => CopalError::new_err(message),
    }
}

pub fn corrupt(what: impl std::fmt::Display, error: DecodeError) -> PyErr {
    CorruptRecordError::new_err(format!("corrupt {what}: {error}"))
}

pub trait IntoPyResult<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, StoreError> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(store_error)
    }
}
