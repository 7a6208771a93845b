//! Storage: the embedded LMDB store, its snapshots and its commit protocol (DESIGN.md §4,
//! docs/ARCHITECTURE.md "Storage").

mod backup;
mod catalog;
mod checksum;
mod commit;
mod error;
mod index;
mod lmdb;
mod schema;
mod snapshot;
mod stats;
mod verify;

pub use catalog::Catalog;
pub use checksum::unseal;
pub use commit::Commit;
pub use error::StoreError;
pub use index::{entry_oid, prefix_end, IndexDef};
pub use lmdb::{LmdbStore, StoreOptions};
pub use schema::{DescriptorUse, RemovedValues, SchemaGcReport, SchemaSummary};
pub use snapshot::Snapshot;
pub use stats::StoreStats;
pub use verify::VerifyReport;
