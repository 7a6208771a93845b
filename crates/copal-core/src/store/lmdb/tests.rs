//! Tests of the per-class record tables: appends, limits, tables created behind this process's
//! back, and the migration of format-1 stores.

use std::sync::Arc;

use heed::types::Bytes;
use heed::{Database, EnvOpenOptions};

use super::*;
use crate::format::{
    class_extent, encode_root_record, make_oid, Descriptor, ROOT_CLASS, ROOT_DESCRIPTOR, ROOT_OID, ROOT_TYPE_NAME,
};
use crate::store::checksum::seal;
use crate::store::{Commit, Snapshot};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("copal-lmdb-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn backend(store: &Store) -> &LmdbBackend {
    match &store.backend {
        Backend::Lmdb(lmdb) => lmdb,
        Backend::Postgres(_) => unreachable!("these tests open LMDB stores"),
    }
}

/// Names of the environment's tables.
fn table_names(store: &Store) -> Vec<String> {
    let backend = backend(store);
    let txn = backend.env.read_txn().unwrap();
    let names = backend.tables.main.iter(&txn).unwrap().map(|e| String::from_utf8(e.unwrap().0.to_vec()).unwrap()).collect();
    names
}

fn stored_values(store: &Arc<Store>) -> Vec<(Oid, Vec<u8>)> {
    let snapshot = Snapshot::new(store).unwrap();
    let mut values = Vec::new();
    snapshot
        .scan_all_values(|oid, value| {
            values.push((oid, value.to_vec()));
            Ok(())
        })
        .unwrap();
    values
}

/// Commits `batches` commits, each adding `per_batch` records of every class in `classes`.
fn add_records(store: &Store, classes: &[ClassNo], batches: usize, per_batch: usize) {
    for _ in 0..batches {
        let mut commit = Commit::begin(store).unwrap();
        for _ in 0..per_batch {
            for &class in classes {
                let oid = commit.allocate_oid(class).unwrap();
                commit.put(oid, &[7; 100]).unwrap();
            }
        }
        commit.finish().unwrap();
    }
}

#[test]
fn interleaved_classes_fill_their_pages() {
    let store = open(&temp_dir("fill"), StoreOptions::default()).unwrap();
    add_records(&store, &[2, 3], 20, 500);
    let backend = backend(&store);
    let txn = backend.env.read_txn().unwrap();
    let records = backend.record_tables();
    for class in [2, 3] {
        let stat = records.get(class).unwrap().stat(&txn).unwrap();
        assert_eq!(stat.entries, 10_000);
        // 10,000 records of 8 + 102 bytes and 10 bytes of node overhead fill 295 pages of
        // 4,080 usable bytes; in one table shared by both classes, pages split in the middle
        // and the same records take about 450.
        assert!(stat.leaf_pages <= 310, "class {class}: {} leaf pages", stat.leaf_pages);
    }
}

#[test]
fn fresh_ids_written_out_of_order_are_all_stored() {
    let store = open(&temp_dir("out-of-order"), StoreOptions::default()).unwrap();
    let mut commit = Commit::begin(&store).unwrap();
    let (first, second) = (commit.allocate_oid(2).unwrap(), commit.allocate_oid(2).unwrap());
    commit.put(second, b"second").unwrap();
    commit.put(first, b"first").unwrap();
    commit.finish().unwrap();
    let oids: Vec<Oid> = stored_values(&store).into_iter().map(|(oid, _)| oid).collect();
    assert_eq!(oids, [ROOT_OID, first, second]);
}

#[test]
fn a_class_past_the_bound_is_refused_and_nothing_is_written() {
    let store = open(&temp_dir("bound"), StoreOptions::default()).unwrap();
    let classes: Vec<ClassNo> = (2..=MAX_RECORD_TABLES as ClassNo).collect();
    add_records(&store, &classes, 1, 1);
    let mut commit = Commit::begin(&store).unwrap();
    let oid = commit.allocate_oid(MAX_RECORD_TABLES as ClassNo + 1).unwrap();
    let error = commit.put_raw(oid, b"one too many", true).unwrap_err();
    assert!(matches!(error, StoreError::Exhausted { .. }), "{error}");
    assert!(error.to_string().contains("more than 1000 classes; store the objects"), "{error}");
    drop(commit);
    assert_eq!(stored_values(&store).len(), MAX_RECORD_TABLES);
}

#[test]
fn tables_created_behind_the_store_are_found_by_snapshots_and_commits() {
    let store = open(&temp_dir("behind"), StoreOptions::default()).unwrap();
    let backend = backend(&store);
    // As another process would: a table and a record this process's handle set does not know.
    let oid = make_oid(9, 0);
    let mut wtxn = backend.env.write_txn().unwrap();
    let table: Table = backend.env.create_database(&mut wtxn, Some(&record_table_name(9))).unwrap();
    table.put(&mut wtxn, &oid.to_be_bytes(), &seal(b"from elsewhere")).unwrap();
    wtxn.commit().unwrap();
    assert!(backend.record_tables().get(9).is_none());

    assert_eq!(stored_values(&store), [(ROOT_OID, seal(&encode_root_record(0))), (oid, seal(b"from elsewhere"))]);
    let mut commit = Commit::begin(&store).unwrap();
    assert_eq!(commit.allocate_oid(9).unwrap(), make_oid(9, 1));
    commit.delete(oid).unwrap();
    commit.finish().unwrap();
    assert_eq!(stored_values(&store).len(), 1);
}

#[test]
fn a_snapshot_does_not_see_a_class_table_created_after_it_began() {
    let store = open(&temp_dir("later-table"), StoreOptions::default()).unwrap();
    let before = Snapshot::new(&store).unwrap();
    add_records(&store, &[4], 1, 3);
    let (first, end) = class_extent(4);
    assert_eq!(before.count_extent(4, &Default::default()).unwrap(), 0);
    let mut seen = 0;
    before.scan_extent_unverified(4, |_, _, _| { seen += 1; Ok(true) }).unwrap();
    assert_eq!(seen, 0);
    let after = Snapshot::new(&store).unwrap();
    assert_eq!(after.count_extent(4, &Default::default()).unwrap(), 3);
    assert!(after.get(first).unwrap().is_some() && first < end);
}

/// Writes a format-1 store as copal 0.1 did: every record in one `records` table.
fn write_format_1(path: &Path, records: &[(Oid, Vec<u8>)]) {
    std::fs::create_dir_all(path).unwrap();
    let mut options = EnvOpenOptions::new();
    options.max_dbs(8);
    // SAFETY: a fresh directory that nothing else opens until this environment is closed.
    let env = unsafe { options.open(path) }.unwrap();
    let mut wtxn = env.write_txn().unwrap();
    let shared: Database<Bytes, Bytes> = env.create_database(&mut wtxn, Some(SHARED_RECORDS)).unwrap();
    let descriptors: Database<Bytes, Bytes> = env.create_database(&mut wtxn, Some("descriptors")).unwrap();
    let meta: Database<Bytes, Bytes> = env.create_database(&mut wtxn, Some("meta")).unwrap();
    for name in ["log", "index_defs", "index_entries"] {
        env.create_database::<Bytes, Bytes>(&mut wtxn, Some(name)).unwrap();
    }
    let root = Descriptor { id: ROOT_DESCRIPTOR, class_no: ROOT_CLASS, type_name: ROOT_TYPE_NAME.to_owned(), fields: vec!["data".to_owned()] };
    descriptors.put(&mut wtxn, &ROOT_DESCRIPTOR.to_be_bytes(), &root.encode()).unwrap();
    meta.put(&mut wtxn, META_FORMAT, &SHARED_RECORDS_FORMAT.to_be_bytes()).unwrap();
    meta.put(&mut wtxn, META_TID, &7u64.to_be_bytes()).unwrap();
    for (oid, value) in records {
        shared.put(&mut wtxn, &oid.to_be_bytes(), value).unwrap();
    }
    wtxn.commit().unwrap();
    env.prepare_for_closing().wait();
}

#[test]
fn a_format_1_store_is_migrated_when_opened() {
    let path = temp_dir("format-1");
    let mut records = vec![(ROOT_OID, seal(&encode_root_record(0)))];
    // More than one migration batch, in two classes whose ids interleave in commit order.
    for seq in 0..12_000 {
        records.push((make_oid(2, seq), seal(format!("person {seq}").as_bytes())));
        records.push((make_oid(3, seq / 2), seal(format!("address {seq}").as_bytes())));
    }
    records.sort();
    records.dedup_by_key(|(oid, _)| *oid);
    write_format_1(&path, &records);

    let store = open(&path, StoreOptions::default()).unwrap();
    assert_eq!(stored_values(&store), records);
    assert_eq!(table_names(&store), ["descriptors", "index_defs", "index_entries", "log", "meta", "records/1", "records/2", "records/3"]);
    let backend = backend(&store);
    let txn = backend.env.read_txn().unwrap();
    assert_eq!(backend.tables.meta.get(&txn, META_FORMAT).unwrap(), Some(&STORE_FORMAT.to_be_bytes()[..]));
    drop(txn);
    assert_eq!(Snapshot::new(&store).unwrap().tid(), 7);
    let mut commit = Commit::begin(&store).unwrap();
    assert_eq!(commit.allocate_oid(2).unwrap(), make_oid(2, 12_000));
    commit.finish().unwrap();
}

#[test]
fn a_store_of_an_unknown_format_is_refused_untouched() {
    let path = temp_dir("format-9");
    write_format_1(&path, &[(make_oid(2, 0), seal(b"kept"))]);
    {
        let mut options = EnvOpenOptions::new();
        options.max_dbs(8);
        // SAFETY: as in `write_format_1`.
        let env = unsafe { options.open(&path) }.unwrap();
        let mut wtxn = env.write_txn().unwrap();
        let meta: Database<Bytes, Bytes> = env.open_database(&wtxn, Some("meta")).unwrap().unwrap();
        meta.put(&mut wtxn, META_FORMAT, &9u32.to_be_bytes()).unwrap();
        wtxn.commit().unwrap();
        env.prepare_for_closing().wait();
    }
    let error = open(&path, StoreOptions::default()).err().expect("a format-9 store is refused");
    assert!(matches!(error, StoreError::Incompatible { .. }), "{error}");
}

/// Opens the store at `path`, commits a record, and then removes the table `name` as damage to
/// LMDB's list of tables would: the list no longer holds its name.
fn store_without_table(path: &Path, name: &str) {
    let store = open(path, StoreOptions::default()).unwrap();
    add_records(&store, &[2], 1, 1);
    let env = &backend(&store).env;
    let mut wtxn = env.write_txn().unwrap();
    let table: Table = env.open_database(&wtxn, Some(name)).unwrap().unwrap();
    // SAFETY: no transaction of the store runs, and the store is dropped before it opens again.
    unsafe { table.remove(&mut wtxn) }.unwrap();
    wtxn.commit().unwrap();
}

#[test]
fn a_store_missing_a_table_is_reported_damaged_and_left_unwritten() {
    for name in ["meta", "descriptors", "records/1"] {
        let path = temp_dir(&format!("damaged-{}", name.replace('/', "-")));
        store_without_table(&path, name);
        let before = std::fs::read(path.join("data.mdb")).unwrap();
        let error = open(&path, StoreOptions::default()).err().expect("a damaged store is refused");
        assert!(matches!(error, StoreError::Damaged { .. }), "{name}: {error}");
        assert!(error.to_string().contains(&format!("no table {name}")), "{error}");
        assert!(std::fs::read(path.join("data.mdb")).unwrap() == before, "{name}: the open wrote to the store");
    }
}
