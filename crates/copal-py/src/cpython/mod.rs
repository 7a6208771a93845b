//! The binding's only home for CPython's private layouts: the internal structures of dicts,
//! instances and reference counts that the public and `PyUnstable_` C API do not expose, read
//! or written directly where a benchmark showed the API too slow.
//!
//! Each CPython version whose private layouts are used has one module, compiled only for that
//! version (with the GIL and its full API) by a cfg that build.rs sets: `v3_11`
//! (`cpython_3_11_layouts`), `v3_12` (`cpython_3_12_layouts`), `v3_13`
//! (`cpython_3_13_layouts`); build.rs also sets `cpython_instance_layouts` with any of them.
//! Each version module has an `instance` module: where an instance keeps its values and its
//! dict. What 3.11 to 3.13 lay out alike (the key tables, `dict_layout`) and what reads through
//! `instance` (`tables`, `hints`) is written once. On every other interpreter (3.14 and later,
//! free-threaded builds, the limited API, PyPy, GraalPy) `no_tables` stands in, and everywhere
//! but 3.11 `portable` gives the rest with the public API only. Together they implement this
//! interface, which the rest of the binding calls without cfgs of its own:
//!
//! - `FieldSlots`: where the decoder stores each field of a descriptor in the instances of a
//!   class (`of`, `is_for`, `store`). `of` gives None where the layout is not known, and every
//!   field then goes through `PyObject_GenericSetAttr`.
//! - `InstanceValues`, `ValuesFields`, `DictTable` (cursors of dict_items.rs over an instance's
//!   values array and a dict's table), with `Holder` (`OwnArray`, `MadeDict`: where the array
//!   is kept), `Changed` (what was read changed) and `made_dict` (an instance's dict once made,
//!   read in place). Their `of` gives None where the layout is not known, and the readers use
//!   `PyDict_Next`.
//! - `hints`: cache hints for the fields of an instance read a few items ahead
//!   (crate::prefetch); none where the layout is not known.
//! - `ADDS_REFERENCES_AT_ONCE` and `add_references`: whether a run of references to one object
//!   is counted in one write, and the count itself (list_builder.rs).
//! - `class_attribute`: an attribute of a class along its MRO, without running code; on 3.11
//!   through the type lookup it keeps private, which also assigns the class a version tag.
//!
//! A new version's module implements `instance`, tested on that version, and takes its own cfg
//! from build.rs; `no_tables` and `portable` stay the fallback for the rest.

#[cfg(cpython_3_11_layouts)]
mod v3_11;
#[cfg(cpython_3_11_layouts)]
use v3_11::instance;
#[cfg(cpython_3_12_layouts)]
mod v3_12;
#[cfg(cpython_3_12_layouts)]
use v3_12::instance;
#[cfg(cpython_3_13_layouts)]
mod v3_13;
#[cfg(cpython_3_13_layouts)]
use v3_13::instance;

#[cfg(cpython_instance_layouts)]
mod dict_layout;
#[cfg(cpython_instance_layouts)]
pub mod hints;
#[cfg(cpython_instance_layouts)]
mod tables;
#[cfg(any(cpython_3_11_layouts, cpython_3_12_layouts))]
mod values_prefix;
#[cfg(cpython_instance_layouts)]
pub use tables::{made_dict, Changed, DictTable, Holder, InstanceValues, MadeDict, OwnArray, ValuesFields};

#[cfg(not(cpython_instance_layouts))]
mod no_tables;
#[cfg(not(cpython_instance_layouts))]
pub use no_tables::{hints, made_dict, Changed, DictTable, Holder, InstanceValues, MadeDict, OwnArray, ValuesFields};

#[cfg(cpython_3_11_layouts)]
pub use v3_11::{add_references, class_attribute, FieldSlots, ADDS_REFERENCES_AT_ONCE};

#[cfg(not(cpython_3_11_layouts))]
mod portable;
#[cfg(not(cpython_3_11_layouts))]
pub use portable::{add_references, class_attribute, FieldSlots, ADDS_REFERENCES_AT_ONCE};
