//! The binding's use of CPython 3.11's private layouts, compiled only when the target
//! interpreter is CPython 3.11 with its full (not limited) API (`cfg(cpython_3_11_layouts)`,
//! set by build.rs). With `cpython::tables` and `cpython::hints` (which read through
//! `instance`), it implements the interface of `crate::cpython`.
//!
//! - `instance`: where an instance keeps its values array and its dict.
//! - `field_slots`: the decoder's stores of fields into an instance's values array.
//! - `refcounts`: references counted several at a time, for the list builder.
//! - `lookup`: attributes of classes along their MRO, by the type lookup 3.11 keeps private.

mod field_slots;
pub mod instance;
mod lookup;
mod refcounts;

pub use field_slots::FieldSlots;
pub use lookup::class_attribute;
pub use refcounts::{add_references, ADDS_REFERENCES_AT_ONCE};
