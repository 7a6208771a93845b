//! Integration tests of the stores through their public Rust API (no Python). Each scenario
//! runs against both stores: a fresh LMDB directory, and a fresh database on the PostgreSQL
//! server named by the COPAL_TEST_POSTGRES_URL environment variable (the Python test session
//! sets it when it runs these tests against its throwaway cluster; without it the PostgreSQL
//! variants pass after printing that they were skipped).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use copal_core::format::{make_oid, Reader, RecordHeader, Writer, ROOT_OID};
use copal_core::query::{self, CmpOp, Expr, Query};
use copal_core::store::DeclaredIndex;
use copal_core::{Commit, Snapshot, Store, StoreError, StoreOptions, Value};

const POSTGRES_URL_VAR: &str = "COPAL_TEST_POSTGRES_URL";

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("copal-core-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn lmdb_store(name: &str) -> Arc<Store> {
    Store::lmdb(&temp_dir(name), StoreOptions::default()).unwrap()
}

/// The URL of a new, empty database on the test server (None, with a message, without one).
fn postgres_url(name: &str) -> Option<String> {
    static CREATED: AtomicUsize = AtomicUsize::new(0);
    let Ok(server) = std::env::var(POSTGRES_URL_VAR) else {
        eprintln!("{name}: PostgreSQL variant skipped: set {POSTGRES_URL_VAR} to the URL of a throwaway server");
        return None;
    };
    let database = format!("copal_rs_{}_{}", std::process::id(), CREATED.fetch_add(1, Ordering::Relaxed));
    let mut admin = postgres::Client::connect(&server, postgres::NoTls).expect("connect to the test server");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {database}")).unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {database}")).unwrap();
    let base = server.rsplit_once('/').map_or(server.as_str(), |(base, _)| base);
    Some(format!("{base}/{database}"))
}

fn postgres_store(name: &str) -> Option<Arc<Store>> {
    postgres_url(name).map(|url| Store::open(&url, StoreOptions::default()).unwrap())
}

/// Makes a test module per scenario with one test per store.
macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {
        $(mod $scenario {
            #[test]
            fn lmdb() {
                super::$scenario(super::lmdb_store(stringify!($scenario)));
            }

            #[test]
            fn postgresql() {
                if let Some(store) = super::postgres_store(stringify!($scenario)) {
                    super::$scenario(store);
                }
            }
        })*
    };
}

on_every_store!(
    new_store_has_an_empty_root,
    commit_is_visible_to_new_snapshots_only_and_conflicts_are_detected,
    dropped_commit_changes_nothing,
    equality_scan_reads_only_the_class_extent,
    get_many_visits_sorted_ids_and_reports_missing_ones,
    ids_of_deleted_objects_are_never_reused,
    indexes_are_built_maintained_and_used_by_the_planner,
    indexes_key_missing_fields_as_their_defaults_and_serve_only_queries_reading_the_same,
    verify_reports_dangling_references_and_undecodable_records,
);

fn record(descriptor: u32, tid: u64, fields: &[Value]) -> Vec<u8> {
    let mut w = Writer::new();
    RecordHeader { flags: 0, descriptor, tid }.write(&mut w);
    fields.iter().for_each(|f| f.encode(&mut w));
    w.buf
}

fn new_store_has_an_empty_root(store: Arc<Store>) {
    let snapshot = Snapshot::new(&store).unwrap();
    let root = snapshot.get(ROOT_OID).unwrap().expect("root record");
    let (header, _) = RecordHeader::parse(&root).unwrap();
    assert_eq!(header.tid, 0);
    assert_eq!(snapshot.descriptor(header.descriptor).unwrap().type_name, "copal.PersistentDict");
}

fn commit_is_visible_to_new_snapshots_only_and_conflicts_are_detected(store: Arc<Store>) {
    let before = Snapshot::new(&store).unwrap();

    let mut commit = Commit::begin(&store).unwrap();
    let person = commit.descriptor("app.Person", &["name".into(), "age".into()]).unwrap();
    let oid = commit.allocate_oid(person.class_no).unwrap();
    assert_eq!(oid, make_oid(person.class_no, 0));
    let tid = commit.tid();
    commit.put(oid, &record(person.id, tid, &[Value::Str("ann".into()), Value::Int(40)])).unwrap();
    assert_eq!(commit.finish().unwrap(), tid);

    assert!(before.get(oid).unwrap().is_none(), "an older snapshot must not see the commit");
    let after = Snapshot::new(&store).unwrap();
    assert!(after.get(oid).unwrap().is_some());
    assert_eq!(after.changes_since(before.tid()).unwrap(), Some(vec![oid]));

    // A writer that read the object at `tid` wins; one that read it earlier conflicts.
    let mut first = Commit::begin(&store).unwrap();
    first.check_unchanged(oid, tid).unwrap();
    let new_tid = first.tid();
    first.put(oid, &record(person.id, new_tid, &[Value::Str("ann".into()), Value::Int(41)])).unwrap();
    first.finish().unwrap();
    let second = Commit::begin(&store).unwrap();
    assert!(matches!(second.check_unchanged(oid, tid), Err(StoreError::Conflict { .. })));
}

fn dropped_commit_changes_nothing(store: Arc<Store>) {
    {
        let mut commit = Commit::begin(&store).unwrap();
        let d = commit.descriptor("app.Thing", &[]).unwrap();
        let oid = commit.allocate_oid(d.class_no).unwrap();
        commit.put(oid, &record(d.id, commit.tid(), &[])).unwrap();
    }
    let snapshot = Snapshot::new(&store).unwrap();
    assert_eq!(snapshot.tid(), 0);
    assert!(store.catalog().class_no("app.Thing").is_none());
}

fn equality_scan_reads_only_the_class_extent(store: Arc<Store>) {
    let mut commit = Commit::begin(&store).unwrap();
    let person = commit.descriptor("app.Person", &["name".into(), "age".into()]).unwrap();
    let other = commit.descriptor("app.Other", &["age".into()]).unwrap();
    let tid = commit.tid();
    for age in 0..100 {
        let oid = commit.allocate_oid(person.class_no).unwrap();
        commit.put(oid, &record(person.id, tid, &[Value::Str(format!("p{age}")), Value::Int(age)])).unwrap();
        let oid = commit.allocate_oid(other.class_no).unwrap();
        commit.put(oid, &record(other.id, tid, &[Value::Int(age)])).unwrap();
    }
    commit.finish().unwrap();
    let snapshot = Snapshot::new(&store).unwrap();
    let eq = |classes: Vec<u16>, field: &str, value| {
        Query::new(classes, Expr::Cmp { path: vec![field.into()], op: CmpOp::Eq, value })
    };
    let found = query::run(&snapshot, &eq(vec![person.class_no], "age", Value::Float(42.0))).unwrap();
    assert_eq!(found.len(), 1);
    let (oid, bytes) = &found[0];
    assert_eq!(*oid, make_oid(person.class_no, 42));
    let mut r = Reader::new(bytes);
    RecordHeader::read(&mut r).unwrap();
    assert_eq!(copal_core::format::decode_value(&mut r, &*store.catalog()).unwrap(), Value::Str("p42".into()));
    assert!(query::run(&snapshot, &eq(vec![person.class_no], "missing", Value::Int(1))).unwrap().is_empty());
    let both = eq(vec![person.class_no, other.class_no], "age", Value::Int(7));
    assert_eq!(query::count(&snapshot, &both).unwrap(), 2);

    let mut older = Query::new(vec![person.class_no], Expr::Cmp { path: vec!["age".into()], op: CmpOp::Ge, value: Value::Int(90) });
    older.order = vec![(vec!["age".into()], true)];
    older.limit = Some(3);
    older.offset = 1;
    let ages: Vec<u64> = query::run(&snapshot, &older).unwrap().iter().map(|(oid, _)| copal_core::format::oid_seq(*oid)).collect();
    assert_eq!(ages, vec![98, 97, 96]);
}

#[test]
fn map_full_is_a_storage_error_and_keeps_committed_data() {
    let dir = temp_dir("full");
    let store = Store::lmdb(&dir, StoreOptions { map_size: 1 << 20, ..StoreOptions::default() }).unwrap();
    let mut commit = Commit::begin(&store).unwrap();
    let blob = commit.descriptor("app.Blob", &["data".into()]).unwrap();
    let tid = commit.tid();
    let oid = commit.allocate_oid(blob.class_no).unwrap();
    commit.put(oid, &record(blob.id, tid, &[Value::Bytes(vec![1; 1000])])).unwrap();
    commit.finish().unwrap();

    let mut commit = Commit::begin(&store).unwrap();
    let tid2 = commit.tid();
    let result = (0..100).try_for_each(|_| {
        let oid = commit.allocate_oid(blob.class_no)?;
        commit.put(oid, &record(blob.id, tid2, &[Value::Bytes(vec![2; 100_000])]))
    });
    let result = result.and_then(|_| commit.finish().map(drop));
    assert!(matches!(result, Err(StoreError::Storage { .. })), "{result:?}");
    let snapshot = Snapshot::new(&store).unwrap();
    assert_eq!(snapshot.tid(), tid);
    assert!(snapshot.get(oid).unwrap().is_some());
}

fn get_many_visits_sorted_ids_and_reports_missing_ones(store: Arc<Store>) {
    let mut commit = Commit::begin(&store).unwrap();
    let d = commit.descriptor("app.N", &["n".into()]).unwrap();
    let tid = commit.tid();
    let mut oids = Vec::new();
    for n in 0..200 {
        let oid = commit.allocate_oid(d.class_no).unwrap();
        commit.put(oid, &record(d.id, tid, &[Value::Int(n)])).unwrap();
        oids.push(oid);
    }
    commit.finish().unwrap();
    let snapshot = Snapshot::new(&store).unwrap();
    let wanted = vec![oids[3], oids[3], oids[4], oids[90], oids[199]];
    let mut seen = Vec::new();
    snapshot
        .get_many(&wanted, |oid| Err(StoreError::Storage { message: format!("missing {oid}") }), |e| e, |i, record| {
            seen.push((i, record.len()));
            Ok::<(), StoreError>(())
        })
        .unwrap();
    assert_eq!(seen.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    let absent = vec![oids[5], oids[199] + 1];
    let err = snapshot.get_many(&absent, |oid| Err(StoreError::Storage { message: format!("missing {oid}") }), |e| e, |_, _| Ok(()));
    assert!(matches!(err, Err(StoreError::Storage { message }) if message == format!("missing {}", oids[199] + 1)));
}

fn ids_of_deleted_objects_are_never_reused(store: Arc<Store>) {
    let mut commit = Commit::begin(&store).unwrap();
    let d = commit.descriptor("app.N", &[]).unwrap();
    let newest = commit.allocate_oid(d.class_no).unwrap();
    commit.put(newest, &record(d.id, commit.tid(), &[])).unwrap();
    commit.finish().unwrap();

    let mut commit = Commit::begin(&store).unwrap();
    commit.delete(newest).unwrap();
    commit.finish().unwrap();

    let mut commit = Commit::begin(&store).unwrap();
    assert_ne!(commit.allocate_oid(d.class_no).unwrap(), newest);
}

fn people(store: &Arc<Store>, n: i64) -> (u16, Vec<u64>) {
    let mut commit = Commit::begin(store).unwrap();
    let d = commit.descriptor("app.Person", &["email".into(), "age".into()]).unwrap();
    let tid = commit.tid();
    let mut oids = Vec::new();
    for i in 0..n {
        let oid = commit.allocate_oid(d.class_no).unwrap();
        commit.put(oid, &record(d.id, tid, &[Value::Str(format!("p{i}@x")), Value::Int(i % 50)])).unwrap();
        oids.push(oid);
    }
    commit.finish().unwrap();
    (d.class_no, oids)
}

fn indexes_are_built_maintained_and_used_by_the_planner(store: Arc<Store>) {
    let (class, oids) = people(&store, 500);
    let mut commit = Commit::begin(&store).unwrap();
    let (person, age, email) = (["app.Person".to_owned()], ["age".to_owned()], ["email".to_owned()]);
    let by_age = DeclaredIndex { type_name: "app.Person", covered: &person, fields: &age, unique: false, renamed: &[], defaults: &[] };
    commit.ensure_index(&by_age, &mut |_, _| {}).unwrap();
    commit.ensure_index(&DeclaredIndex { fields: &email, unique: true, ..by_age }, &mut |_, _| {}).unwrap();
    commit.finish().unwrap();

    let snapshot = Snapshot::new(&store).unwrap();
    let age = |op, v| Expr::Cmp { path: vec!["age".into()], op, value: Value::Int(v) };
    let q = Query::new(vec![class], age(CmpOp::Eq, 7));
    assert!(query::explain(&snapshot, &q).unwrap().contains("index app.Person(age)"));
    assert_eq!(query::count(&snapshot, &q).unwrap(), 10);
    let mut range = Query::new(vec![class], Expr::And(vec![age(CmpOp::Gt, 45), age(CmpOp::Le, 47)]));
    assert_eq!(query::count(&snapshot, &range).unwrap(), 20);
    range.order = vec![(vec!["age".into()], true)];
    range.limit = Some(3);
    assert!(query::explain(&snapshot, &range).unwrap().contains("top-k"));
    let found = query::run(&snapshot, &range).unwrap();
    assert_eq!(found.len(), 3);
    assert!(found.iter().all(|(oid, _)| oid_age(*oid, &oids) == 47));

    // Updating a record moves its entry; a duplicate in a unique index changes nothing.
    let d = store.catalog().find("app.Person", &["email".into(), "age".into()]).unwrap().clone();
    let mut commit = Commit::begin(&store).unwrap();
    let tid = commit.tid();
    commit.put(oids[7], &record(d.id, tid, &[Value::Str("p7@x".into()), Value::Int(99)])).unwrap();
    commit.finish().unwrap();
    let snapshot = Snapshot::new(&store).unwrap();
    assert_eq!(query::count(&snapshot, &Query::new(vec![class], age(CmpOp::Eq, 7))).unwrap(), 9);
    assert_eq!(query::count(&snapshot, &Query::new(vec![class], age(CmpOp::Eq, 99))).unwrap(), 1);

    let mut commit = Commit::begin(&store).unwrap();
    let tid = commit.tid();
    let dup = commit.put(oids[8], &record(d.id, tid, &[Value::Str("p9@x".into()), Value::Int(1)]));
    assert!(matches!(dup, Err(StoreError::UniqueViolation { .. })), "{dup:?}");
}

fn indexes_key_missing_fields_as_their_defaults_and_serve_only_queries_reading_the_same(store: Arc<Store>) {
    // The people's records have no `tier` (a field their class gained later, default "gold").
    let (class, _) = people(&store, 30);
    let gold = {
        let mut key = Vec::new();
        copal_core::format::index_key::push_key(&mut key, Some(&Value::Str("gold".into())));
        key
    };
    let (person, tier) = (["app.Person".to_owned()], ["tier".to_owned()]);
    let defaults = [("app.Person".to_owned(), "tier".to_owned(), gold)];
    let by_tier = DeclaredIndex { type_name: "app.Person", covered: &person, fields: &tier, unique: false, renamed: &[], defaults: &defaults };
    let mut commit = Commit::begin(&store).unwrap();
    commit.ensure_index(&by_tier, &mut |_, _| {}).unwrap();
    commit.finish().unwrap();
    assert!(store.verify().unwrap().ok());

    let snapshot = Snapshot::new(&store).unwrap();
    let is_gold = Expr::Cmp { path: vec!["tier".into()], op: CmpOp::Eq, value: Value::Str("gold".into()) };
    let mut reading_defaults = Query::new(vec![class], is_gold.clone());
    reading_defaults.defaults.insert("app.Person".into(), vec![("tier".into(), Value::Str("gold".into()))]);
    let explained = query::explain(&snapshot, &reading_defaults).unwrap();
    assert!(explained.contains("index app.Person(tier)") && explained.contains("from the index alone"), "{explained}");
    assert_eq!(query::count(&snapshot, &reading_defaults).unwrap(), 30);
    assert_eq!(query::run(&snapshot, &reading_defaults).unwrap().len(), 30);
    // A query reading another default (or none) must not use the index: it scans, and finds
    // what its own defaults say.
    let without_defaults = Query::new(vec![class], is_gold);
    assert!(query::explain(&snapshot, &without_defaults).unwrap().starts_with("scan"));
    assert_eq!(query::count(&snapshot, &without_defaults).unwrap(), 0);
}

fn verify_reports_dangling_references_and_undecodable_records(store: Arc<Store>) {
    let (class, oids) = people(&store, 20);
    assert!(store.verify().unwrap().ok());
    let mut commit = Commit::begin(&store).unwrap();
    let d = commit.descriptor("app.Holder", &["target".into()]).unwrap();
    let tid = commit.tid();
    let holder = commit.allocate_oid(d.class_no).unwrap();
    commit.put(holder, &record(d.id, tid, &[Value::Ref(make_oid(class, 999))])).unwrap();
    commit.put(oids[3], &[0x11, 0x7f]).unwrap();
    commit.finish().unwrap();
    let report = store.verify().unwrap();
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(report.problems.iter().any(|p| p.contains("does not exist")));
    assert!(report.problems.iter().any(|p| p.contains("does not decode")));
}

fn oid_age(oid: u64, oids: &[u64]) -> i64 {
    (oids.iter().position(|o| *o == oid).unwrap() as i64) % 50
}

#[test]
fn postgresql_statement_timeout_is_a_storage_error_and_the_next_commit_works() {
    let Some(url) = postgres_url("statement_timeout") else { return };
    let holder = Store::open(&url, StoreOptions::default()).unwrap();
    let impatient = Store::open(&format!("{url}?options=-c%20statement_timeout%3D300"), StoreOptions::default()).unwrap();
    // A commit in progress holds the commit lock; the other store's commit waits for it in vain.
    let running = Commit::begin(&holder).unwrap();
    let result = Commit::begin(&impatient).map(|commit| commit.tid());
    match result {
        Err(StoreError::Storage { message }) => assert!(message.contains("57014"), "{message}"),
        other => panic!("expected a statement timeout, got {other:?}"),
    }
    drop(running);
    let mut commit = Commit::begin(&impatient).unwrap();
    let d = commit.descriptor("app.Note", &["text".into()]).unwrap();
    let oid = commit.allocate_oid(d.class_no).unwrap();
    let tid = commit.tid();
    commit.put(oid, &record(d.id, tid, &[Value::Str("after".into())])).unwrap();
    assert_eq!(commit.finish().unwrap(), 1);
    assert!(Snapshot::new(&holder).unwrap().get(oid).unwrap().is_some());
}

#[test]
fn postgresql_databases_on_one_server_are_independent() {
    let (Some(first), Some(second)) = (postgres_store("first"), postgres_store("second")) else { return };
    let mut commit = Commit::begin(&first).unwrap();
    let d = commit.descriptor("app.Note", &["text".into()]).unwrap();
    let oid = commit.allocate_oid(d.class_no).unwrap();
    let tid = commit.tid();
    commit.put(oid, &record(d.id, tid, &[Value::Str("only here".into())])).unwrap();
    commit.finish().unwrap();
    let other = Snapshot::new(&second).unwrap();
    assert_eq!(other.tid(), 0);
    assert!(other.get(oid).unwrap().is_none());
    assert!(second.catalog().class_no("app.Note").is_none());
}
