use std::sync::atomic::{AtomicU64, Ordering};

/// Storage counters of one database handle (a Python `copal.Database`): the snapshots and
/// commits started for it count into its own, which `Snapshot::count_into` and
/// `Commit::count_into` set (a snapshot or commit without them counts nowhere). Not kept per
/// store: every open of one LMDB directory in a process shares one store.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub records_read: AtomicU64,
    pub records_written: AtomicU64,
    pub commits: AtomicU64,
    pub conflicts: AtomicU64,
}

impl StoreStats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
