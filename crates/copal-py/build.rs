//! Sets pyo3's `Py_3_*`, `Py_GIL_DISABLED`, `Py_LIMITED_API`, `PyPy` and `py_sys_config` cfgs
//! for this crate, so that it uses the C API of the interpreter it is built for, and
//! `cpython_3_11_layouts` when that interpreter is CPython 3.11 with its full API: the one cfg
//! under which src/cpython/v3_11 (CPython 3.11's private layouts) is compiled.

use pyo3_build_config::{PythonAbiKind, PythonImplementation, PythonVersion};

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
    println!("cargo:rustc-check-cfg=cfg(cpython_3_11_layouts)");
    // The ABI that pyo3's own cfgs come from: a version-specific one (not the limited API,
    // `Py_LIMITED_API`) of CPython (not PyPy or GraalPy) 3.11.
    let abi = pyo3_build_config::get().target_abi();
    if abi.implementation() == PythonImplementation::CPython
        && abi.version() == (PythonVersion { major: 3, minor: 11 })
        && matches!(abi.kind(), PythonAbiKind::VersionSpecific(_))
    {
        println!("cargo:rustc-cfg=cpython_3_11_layouts");
    }
}
