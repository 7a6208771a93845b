use std::sync::atomic::{AtomicU64, Ordering};

/// Counters since the store was opened in this process, shared by every connection.
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
