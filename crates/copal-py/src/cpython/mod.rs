//! The binding's only home for CPython's private layouts: the internal structures of dicts,
//! instances and reference counts that the public and `PyUnstable_` C API do not expose, read
//! or written directly where a benchmark showed the API too slow.
//!
//! Each CPython version whose private layouts are used has one module, compiled only for that
//! version by a cfg that build.rs sets (`v3_11`, under `cfg(cpython_3_11_layouts)`). On every
//! other interpreter (other CPython versions, the limited API, PyPy, GraalPy) `portable` stands
//! in, with the public API only. Both implement this interface, which the rest of the binding
//! calls without cfgs of its own:
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
//! A new version's module implements the same items, tested on that version, and takes its own
//! cfg from build.rs; `portable` stays the fallback for the rest.

#[cfg(cpython_3_11_layouts)]
mod v3_11;
#[cfg(cpython_3_11_layouts)]
use v3_11 as version;

#[cfg(not(cpython_3_11_layouts))]
mod portable;
#[cfg(not(cpython_3_11_layouts))]
use portable as version;

pub use version::{
    add_references, class_attribute, hints, made_dict, Changed, DictTable, FieldSlots, Holder, InstanceValues, MadeDict, OwnArray, ValuesFields,
    ADDS_REFERENCES_AT_ONCE,
};
