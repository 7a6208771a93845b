//! The binding's use of CPython 3.12's private layouts, compiled only when the target
//! interpreter is CPython 3.12 with its full (not limited) API (`cfg(cpython_3_12_layouts)`,
//! set by build.rs): where an instance keeps its values (`instance`), read by
//! `cpython::tables` and `cpython::hints`.

pub mod instance;
