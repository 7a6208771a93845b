//! Maps core errors onto the Python exception hierarchy defined in python/copal/errors.py: one
//! match per core error enum, the class chosen by the variant (never by the message), with a
//! fallback to the parent class for variants added later. The facts a variant carries become
//! the exception's attributes (`ConflictError.oids`, `UniqueViolation.index`, ...): they are
//! passed as constructor arguments, in the order of the Python class's `__init__`; the exception
//! object itself is made only when Python sees it.

use copal_core::store::TransferError;
use copal_core::text::TextError;
use copal_core::{DecodeError, StoreError};
use pyo3::prelude::*;

/// The exception classes of python/copal/errors.py, as the package hands them over
/// (`crate::hooks`): `X::new_err(args)` makes the error lazily, `X::matches` tests one.
macro_rules! handed_exception {
    ($($name:ident),* $(,)?) => {
        handed_exception!(@each 0usize, $($name,)*);
    };
    (@each $index:expr, $name:ident, $($rest:ident,)*) => {
        pub struct $name;

        impl $name {
            pub fn new_err<A: pyo3::PyErrArguments + Send + Sync + 'static>(args: A) -> PyErr {
                new_err($index, args)
            }

            #[allow(dead_code)]
            pub fn matches(py: Python<'_>, error: &PyErr) -> bool {
                crate::hooks::error_class(py, $index).is_ok_and(|class| error.is_instance(py, class))
            }
        }

        handed_exception!(@each $index + 1usize, $($rest,)*);
    };
    (@each $index:expr,) => {};
}

// In the order of `crate::hooks::ERROR_NAMES`.
handed_exception!(
    CopalError,
    ConflictError,
    CorruptRecordError,
    SchemaError,
    DanglingReference,
    StorageError,
    UniqueViolation,
    DatabaseNotEmpty,
    ReadOnlyError,
);

/// The exception `crate::hooks::ERROR_NAMES[index]` with `args`; a RuntimeError that says so
/// (with the message it would have had) when copal.errors has not handed its classes over.
fn new_err<A: pyo3::PyErrArguments + Send + Sync + 'static>(index: usize, args: A) -> PyErr {
    Python::attach(|py| match crate::hooks::error_class(py, index) {
        Ok(class) => PyErr::from_type(class.clone(), args),
        Err(missing) => {
            let value = args.arguments(py);
            pyo3::exceptions::PyRuntimeError::new_err(format!("{}: {}", missing.value(py), value.bind(py)))
        }
    })
}

/// The Python exception of a store error, with the error's own message.
pub fn store_error(error: StoreError) -> PyErr {
    let message = error.to_string();
    store_error_with(error, message)
}

/// The Python exception of a store error, with `message` in place of the error's own (a caller
/// that adds context, such as a partial import, keeps the class and the attributes).
pub fn store_error_with(error: StoreError, message: String) -> PyErr {
    match error {
        StoreError::Conflict { oid, .. } => ConflictError::new_err((message, (oid,))),
        // The object being written first, then the one already holding the key.
        StoreError::UniqueViolation { index, oid, other } => UniqueViolation::new_err((message, index, (oid, other))),
        StoreError::Corrupt { .. } | StoreError::Damaged { .. } => CorruptRecordError::new_err(message),
        StoreError::ReadOnly { .. } => ReadOnlyError::new_err(message),
        // A store layout this copal cannot use is about the database, not the application's
        // classes: StorageError on both stores (docs/reference/errors.md).
        StoreError::Storage { .. } | StoreError::Exhausted { .. } | StoreError::Incompatible { .. } => {
            StorageError::new_err(message)
        }
        _ => CopalError::new_err(message),
    }
}

/// `ConflictError` for a commit whose objects `oids` (the first one's conflict is `first`) were
/// changed or deleted by other transactions since this one read them: `.oids` has them all.
pub fn conflicts(first: StoreError, oids: Vec<u64>) -> PyErr {
    if oids.len() < 2 {
        return store_error(first);
    }
    let others: Vec<String> = oids[1..].iter().map(|oid| format!("{oid:#x}")).collect();
    let message = format!("{first}; also changed or deleted by other transactions: {}", others.join(", "));
    ConflictError::new_err((message, oids))
}

/// `DanglingReference` for an object id without a record, with the id as `.oid`.
pub fn dangling(oid: u64) -> PyErr {
    DanglingReference::new_err((format!("object {oid:#x} does not exist (deleted, or never committed)"), oid))
}

/// `CorruptRecordError` for bytes that did not decode. Every kind of decode error is damaged
/// input, so the class does not depend on the variant; `what` names the bytes ("record 0x...").
pub fn corrupt(what: impl std::fmt::Display, error: DecodeError) -> PyErr {
    CorruptRecordError::new_err(format!("corrupt {what}: {error}"))
}

/// The Python exception of a stream or archive that does not read: damaged or foreign input.
pub fn stream_error(error: copal_core::stream::StreamError) -> PyErr {
    CorruptRecordError::new_err(error.to_string())
}

/// The Python exception of a text document (`format`: "JSON" or "XML") that does not read:
/// every kind of `TextError` is damaged or foreign input.
pub fn text_error(format: &str, error: TextError) -> PyErr {
    match error {
        TextError::Body(e) => corrupt(format!("{format} document"), e),
        e @ TextError::TooLarge { .. } => CorruptRecordError::new_err(format!(
            "corrupt {format} document: {e}; pass a larger max_size to loads/load if the document is trusted"
        )),
        other => CorruptRecordError::new_err(format!("corrupt {format} document: {other}")),
    }
}

/// The Python exception of a failed export or import. `reading`: an I/O error comes from
/// reading (and decompressing) the export, so the input is damaged. A store error keeps its
/// class and attributes, with the whole message (a partial import says what it left behind).
pub fn transfer_error(error: TransferError, reading: bool) -> PyErr {
    let message = error.to_string();
    let cause = match error {
        TransferError::Partial { cause, .. } => *cause,
        other => other,
    };
    match cause {
        TransferError::Store(e) => store_error_with(e, message),
        TransferError::Io(e) if reading => CorruptRecordError::new_err(format!("not a valid copal export: {e}")),
        TransferError::Io(_) => pyo3::exceptions::PyOSError::new_err(message),
        TransferError::NotEmpty { .. } => DatabaseNotEmpty::new_err(message),
        TransferError::UnknownType { .. } => SchemaError::new_err(message),
        TransferError::Malformed { .. } | TransferError::BadEntry { .. } => CorruptRecordError::new_err(message),
        _ => CopalError::new_err(message),
    }
}

pub trait IntoPyResult<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, StoreError> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(store_error)
    }
}
