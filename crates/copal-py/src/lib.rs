//! PyO3 bindings of copal: the `copal._core` module. Thin by design: objects <-> records
//! (encode/, decode/), the persistent base class, connections and error mapping. The public
//! API is the Python package in python/copal.

mod allocation;
mod archive;
mod arrow_stream;
mod bytes_output;
mod class_cache;
mod classes;
mod connection;
mod cpython;
mod database;
mod decode;
mod dict_items;
mod encode;
mod errors;
mod filter;
mod gc;
mod hashing;
mod hooks;
mod json_keys;
mod json_writer;
mod known_containers;
mod list_builder;
mod pending;
mod persistent;
mod prefetch;
mod query;
mod query_object;
mod query_scope;
mod slots;
mod pytypes;
mod stats;
mod standalone;
mod strings;
mod text;
mod transfer;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    import_datetime_api(m.py())?;
    pytypes::learn_class_statement_dealloc(m.py())?;
    m.add_function(wrap_pyfunction!(hooks::install_hooks, m)?)?;
    m.add_class::<persistent::PersistentBase>()?;
    m.add_class::<connection::Connection>()?;
    m.add_class::<filter::Filter>()?;
    m.add_class::<query_scope::QueryScope>()?;
    m.add_class::<query_object::QueryObject>()?;
    m.add_class::<query_object::Results>()?;
    m.add_class::<query_object::GroupedQuery>()?;
    m.add_class::<arrow_stream::ArrowStream>()?;
    m.add_class::<database::Store>()?;
    m.add("ROOT_OID", copal_core::format::ROOT_OID)?;
    m.add("DEFAULT_MAX_SIZE", copal_core::stream::DEFAULT_MAX_SIZE)?;
    m.add_function(wrap_pyfunction!(standalone::dumps_raw, m)?)?;
    m.add_function(wrap_pyfunction!(standalone::loads, m)?)?;
    m.add_function(wrap_pyfunction!(text::payload_kind, m)?)?;
    m.add_function(wrap_pyfunction!(standalone::loads_raw, m)?)?;
    m.add_function(wrap_pyfunction!(archive::pack_many_raw, m)?)?;
    m.add_class::<archive::Archive>()?;
    m.add_function(wrap_pyfunction!(text::dumps_text_raw, m)?)?;
    m.add_function(wrap_pyfunction!(text::dumps_json_raw, m)?)?;
    m.add_function(wrap_pyfunction!(text::compress_text_raw, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::export_raw, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::import_raw, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::record_json, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::record_summaries, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::extent_summaries, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::table_space, m)?)?;
    Ok(())
}

/// pyo3 imports the datetime C API when it first checks a value's type against a date or time
/// class, and panics if that import fails (out of memory, say): done once here, where a failure
/// is an exception of `import copal`.
fn import_datetime_api(py: Python<'_>) -> PyResult<()> {
    // SAFETY: the GIL is held; PyDateTime_IMPORT sets the API pointer or leaves it null with an
    // exception set.
    unsafe {
        pyo3::ffi::PyDateTime_IMPORT();
        if pyo3::ffi::PyDateTimeAPI().is_null() {
            return Err(PyErr::fetch(py));
        }
    }
    Ok(())
}
