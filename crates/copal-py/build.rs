//! Sets pyo3's `Py_3_*` and `Py_GIL_DISABLED` cfgs for this crate, so that class_cache.rs can
//! use the CPython API of the version it is built for.

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
