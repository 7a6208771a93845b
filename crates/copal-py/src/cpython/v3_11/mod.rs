//! The binding's use of CPython 3.11's private layouts, compiled only when the target
//! interpreter is CPython 3.11 with its full (not limited) API (`cfg(cpython_3_11_layouts)`,
//! set by build.rs). It implements the interface of `crate::cpython`; `cpython::portable`
//! implements it elsewhere with the public API.
//!
//! - `layout`: mirrors of the private structures (pycore_dict.h, pycore_object.h) and their
//!   offsets, which only this module reads.
//! - `field_slots`: the decoder's stores of fields into an instance's values array.
//! - `tables`: the JSON writer's and the encoder's reads of instance values and dict tables.
//! - `hints`: cache hints for the fields of instances read a few items ahead.
//! - `refcounts`: references counted several at a time, for the list builder.
//! - `lookup`: attributes of classes along their MRO, by the type lookup 3.11 keeps private.

mod field_slots;
pub mod hints;
mod layout;
mod lookup;
mod refcounts;
mod tables;

pub use field_slots::FieldSlots;
pub use lookup::class_attribute;
pub use refcounts::{add_references, ADDS_REFERENCES_AT_ONCE};
pub use tables::{made_dict, Changed, DictTable, Holder, InstanceValues, MadeDict, OwnArray, ValuesFields};
