use std::sync::atomic::AtomicU64;

/// Counters kept by the binding (the store keeps the storage counters), shared by the
/// connections of one Database.
#[derive(Debug, Default)]
pub struct SharedStats {
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
}
