//! Sets pyo3's `Py_3_*`, `Py_GIL_DISABLED`, `Py_LIMITED_API`, `PyPy` and `py_sys_config` cfgs
//! for this crate, so that it uses the C API of the interpreter it is built for, and the cfg
//! under which the module of that interpreter's private layouts is compiled
//! (src/cpython/mod.rs): `cpython_3_11_layouts`, `cpython_3_12_layouts` or
//! `cpython_3_13_layouts` when it is that CPython with the GIL and its full API, with
//! `cpython_instance_layouts` for any of them.

use pyo3_build_config::{GilUsed, PythonAbiKind, PythonImplementation, PythonVersion};

/// The CPython versions whose layouts src/cpython has a module for.
const LAYOUT_VERSIONS: [u8; 3] = [11, 12, 13];

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
    for minor in LAYOUT_VERSIONS {
        println!("cargo:rustc-check-cfg=cfg(cpython_3_{minor}_layouts)");
    }
    println!("cargo:rustc-check-cfg=cfg(cpython_instance_layouts)");
    // The ABI that pyo3's own cfgs come from: a version-specific one with the GIL (not the
    // limited API, `Py_LIMITED_API`, nor the free-threaded build) of CPython (not PyPy or
    // GraalPy).
    let abi = pyo3_build_config::get().target_abi();
    if abi.implementation() != PythonImplementation::CPython || abi.kind() != PythonAbiKind::VersionSpecific(GilUsed::GilEnabled) {
        return;
    }
    if let Some(minor) = LAYOUT_VERSIONS.into_iter().find(|&minor| abi.version() == (PythonVersion { major: 3, minor })) {
        println!("cargo:rustc-cfg=cpython_3_{minor}_layouts");
        println!("cargo:rustc-cfg=cpython_instance_layouts");
    }
}
