//! The binding's use of CPython 3.13's private layouts, compiled only when the target
//! interpreter is CPython 3.13 with the GIL and its full (not limited) API
//! (`cfg(cpython_3_13_layouts)`, set by build.rs): where an instance keeps its values
//! (`instance`), read by `cpython::tables` and `cpython::hints`.

pub mod instance;
