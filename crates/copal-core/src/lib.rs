//! copal core: the record format, the stores (LMDB), the commit protocol and query evaluation on raw
//! records. Nothing here knows Python; the `copal-py` crate converts between Python objects and the
//! bytes this crate reads and writes. The normative description of every byte is docs/FORMAT.md.

pub mod arrow;
pub mod format;
pub mod query;
pub mod store;
pub mod stream;
pub mod text;

pub use format::{DecodeError, Descriptor, Oid, Value};
pub use store::{Commit, PageCheck, Snapshot, Store, StoreError, StoreOptions, StoreStats};
