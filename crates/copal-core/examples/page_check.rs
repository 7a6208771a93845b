//! The cost of the page walk (`StoreOptions::check_pages`, docs/explanation/safety.md "Damaged
//! files"): a store of 200,000 records of 40 to 200 bytes in four classes (one in a hundred of
//! 3,000 bytes, on overflow pages), committed 1,000 at a time, opened with and without the walk
//! from the page cache. Run: `cargo run --release -p copal-core --example page_check`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use copal_core::{Commit, PageCheck, Store, StoreOptions};

const RECORDS: u64 = 200_000;
const BATCH: u64 = 1_000;

fn open(dir: &std::path::Path, check_pages: PageCheck) -> Arc<Store> {
    Store::lmdb(dir, StoreOptions { check_pages, durable: false, ..StoreOptions::default() }).unwrap()
}

/// The fastest of five opens (each closed before the next).
fn fastest_open(dir: &std::path::Path, check_pages: PageCheck) -> Duration {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            let store = open(dir, check_pages);
            let took = start.elapsed();
            drop(store);
            took
        })
        .min()
        .unwrap()
}

fn main() {
    let dir = std::env::temp_dir().join(format!("copal-page-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = open(&dir, PageCheck::Never);
    let mut seed = 7u64;
    for _ in 0..RECORDS / BATCH {
        let mut commit = Commit::begin(&store).unwrap();
        for _ in 0..BATCH {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let size = if (seed >> 33).is_multiple_of(100) { 3000 } else { 40 + (seed >> 40) as usize % 160 };
            let oid = commit.allocate_oid(2 + (seed >> 52) as u16 % 4).unwrap();
            commit.put(oid, &vec![(seed >> 56) as u8; size]).unwrap();
        }
        commit.finish().unwrap();
    }
    drop(store);
    let size = std::fs::metadata(dir.join("data.mdb")).unwrap().len();
    let (without, with) = (fastest_open(&dir, PageCheck::Never), fastest_open(&dir, PageCheck::Always));
    let walk = with.saturating_sub(without);
    println!(
        "{RECORDS} records, data.mdb {:.1} MB: open {:.2} ms, with the page walk {:.2} ms: the walk takes {:.2} ms \
         ({:.0} MB/s)",
        size as f64 / 1e6,
        without.as_secs_f64() * 1e3,
        with.as_secs_f64() * 1e3,
        walk.as_secs_f64() * 1e3,
        size as f64 / 1e6 / walk.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
