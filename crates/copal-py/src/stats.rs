use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use copal_core::store::StoreStats;

/// The counters of one Database, shared by its connections: the binding's own (cache) and the
/// storage counters its snapshots and commits count into (`Snapshot::count_into`), so that two
/// Database objects on one directory, which share one store, count apart.
#[derive(Debug, Default)]
pub struct SharedStats {
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    /// Objects whose state a commit encoded (to write it, or to compare it with the state it
    /// was loaded with): the measure of a commit's work.
    pub objects_encoded: AtomicU64,
    pub storage: Arc<StoreStats>,
}
