//! The experiment behind the per-class record tables (docs/ARCHITECTURE.md "Storage layout"):
//! 1M records of ~100 bytes in two interleaved classes, committed in batches of 1,000, stored
//! either in one shared table keyed by `class << 48 | seq` (plain puts) or in one table per
//! class keyed by `seq` (appends). Prints file size, full-scan time per record and leaf fill.
//! Also times read-transaction begins for several `max_dbs`, since LMDB sizes every
//! transaction by that bound. Run: `cargo run --release -p copal-core --example record_layout`.

use std::time::Instant;

use heed::types::Bytes;
use heed::{Database, EnvOpenOptions, PutFlags};

const RECORDS: u64 = 1_000_000;
const BATCH: u64 = 1_000;
const VALUE: [u8; 100] = [7; 100];

fn env(dir: &std::path::Path, max_dbs: u32) -> heed::Env {
    std::fs::create_dir_all(dir).unwrap();
    let mut options = EnvOpenOptions::new();
    options.map_size(1 << 34).max_dbs(max_dbs);
    // SAFETY: a fresh directory used by this process only.
    unsafe { options.flags(heed::EnvFlags::NO_SYNC) };
    // SAFETY: as above.
    unsafe { options.open(dir) }.unwrap()
}

fn report(name: &str, env: &heed::Env, tables: &[Database<Bytes, Bytes>]) {
    let rtxn = env.read_txn().unwrap();
    let start = Instant::now();
    let mut n = 0u64;
    let mut bytes = 0usize;
    for table in tables {
        for entry in table.iter(&rtxn).unwrap() {
            let (k, v) = entry.unwrap();
            n += 1;
            bytes += k.len() + v.len();
        }
    }
    let scan = start.elapsed();
    let (mut leaves, mut entries) = (0, 0);
    for table in tables {
        let stat = table.stat(&rtxn).unwrap();
        leaves += stat.leaf_pages;
        entries += stat.entries;
    }
    // Each leaf node carries an 8-byte header and a 2-byte slot; a page has a 16-byte header.
    let used = bytes + entries * 10;
    let fill = used as f64 / (leaves * (4096 - 16)) as f64;
    println!(
        "{name:<22} size {:>4} MB  scan {:>5.1} ns/record  leaf pages {leaves:>6}  fill {:>3.0}%  ({n} records)",
        env.real_disk_size().unwrap() / 1_000_000,
        scan.as_nanos() as f64 / n as f64,
        fill * 100.0
    );
}

fn main() {
    let root = std::env::temp_dir().join(format!("copal-record-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);

    let shared_env = env(&root.join("shared"), 8);
    let mut wtxn = shared_env.write_txn().unwrap();
    let shared: Database<Bytes, Bytes> = shared_env.create_database(&mut wtxn, Some("records")).unwrap();
    wtxn.commit().unwrap();
    for batch in 0..RECORDS / BATCH {
        let mut wtxn = shared_env.write_txn().unwrap();
        for i in 0..BATCH {
            let seq = batch * BATCH / 2 + i / 2;
            let class = 1 + i % 2;
            shared.put(&mut wtxn, &(class << 48 | seq).to_be_bytes(), &VALUE).unwrap();
        }
        wtxn.commit().unwrap();
    }
    report("shared table, put", &shared_env, &[shared]);

    let split_env = env(&root.join("per-class"), 8);
    let mut wtxn = split_env.write_txn().unwrap();
    let per_class: Vec<Database<Bytes, Bytes>> = (1..=2)
        .map(|class| split_env.create_database(&mut wtxn, Some(&format!("records/{class}"))).unwrap())
        .collect();
    wtxn.commit().unwrap();
    for batch in 0..RECORDS / BATCH {
        let mut wtxn = split_env.write_txn().unwrap();
        for i in 0..BATCH {
            let seq = batch * BATCH / 2 + i / 2;
            let table = per_class[(i % 2) as usize];
            table.put_with_flags(&mut wtxn, PutFlags::APPEND, &seq.to_be_bytes(), &VALUE).unwrap();
        }
        wtxn.commit().unwrap();
    }
    report("per-class tables, append", &split_env, &per_class);

    let compact = root.join("shared-compacted");
    std::fs::create_dir_all(&compact).unwrap();
    shared_env.copy_to_path(compact.join("data.mdb"), heed::CompactionOption::Enabled).unwrap();
    drop(shared_env);
    let compact_env = env(&compact, 8);
    let rtxn = compact_env.read_txn().unwrap();
    let compacted: Database<Bytes, Bytes> = compact_env.open_database(&rtxn, Some("records")).unwrap().unwrap();
    // Committed, not dropped: LMDB closes handles opened in a transaction that aborts.
    rtxn.commit().unwrap();
    report("shared table, compacted", &compact_env, &[compacted]);

    for max_dbs in [8u32, 256, 1024, 4096, 65_544] {
        let env = env(&root.join(format!("dbs-{max_dbs}")), max_dbs);
        let rounds = 200_000;
        let start = Instant::now();
        for _ in 0..rounds {
            drop(env.read_txn().unwrap());
        }
        println!("max_dbs {max_dbs:>6}: read txn begin+end {:.2} µs", start.elapsed().as_nanos() as f64 / rounds as f64 / 1000.0);
    }
    let _ = std::fs::remove_dir_all(&root);
}
