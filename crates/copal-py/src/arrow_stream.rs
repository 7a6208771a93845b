//! `Query.to_arrow(...)`'s result: columns built in Rust (copal_core::arrow) that Arrow readers
//! take through the Arrow PyCapsule interface (`__arrow_c_stream__`): `pyarrow.table(x)`,
//! `polars.DataFrame(x)` or DuckDB read them without a Python object per value.

use std::sync::Arc;

use copal_core::arrow::{array_stream, ArrowArrayStream, Column};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// Columns of a query's results in Arrow's layout, read by Arrow readers (pyarrow, polars,
/// DuckDB, ...) through the Arrow PyCapsule interface: ``pyarrow.table(stream)``.
#[pyclass(frozen, module = "copal", name = "ArrowStream")]
pub struct ArrowStream {
    columns: Arc<Vec<Column>>,
    rows: usize,
}

impl ArrowStream {
    pub(crate) fn new(columns: Vec<Column>, rows: usize) -> Self {
        ArrowStream { columns: Arc::new(columns), rows }
    }
}

/// An `ArrowArrayStream` in a capsule (transparent: the capsule's pointer is the stream's, as
/// readers expect): only raw pointers to what the stream owns, which its
/// release frees; whichever thread drops the capsule may release it.
#[repr(transparent)]
struct SendStream(ArrowArrayStream);
// SAFETY: the stream's private data is plain Rust data (shared, immutable columns), not tied to
// a thread.
unsafe impl Send for SendStream {}

#[pymethods]
impl ArrowStream {
    /// How many rows the columns hold.
    #[getter]
    fn num_rows(&self) -> usize {
        self.rows
    }

    /// The columns as an `ArrowArrayStream` in a capsule named "arrow_array_stream" (the Arrow
    /// PyCapsule interface); every call gives a stream over the same columns, without copying
    /// them. `requested_schema` is not used: the columns keep the types their values have.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(&self, py: Python<'py>, requested_schema: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let stream = array_stream(Arc::clone(&self.columns), self.rows);
        PyCapsule::new_with_value_and_destructor(py, SendStream(stream), c"arrow_array_stream", |mut stream, _| {
            // A reader that took the stream nulled `release` in the capsule's copy.
            if let Some(release) = stream.0.release {
                // SAFETY: the stream was made by `array_stream` and not released.
                unsafe { release(&mut stream.0) };
            }
        })
    }
}
