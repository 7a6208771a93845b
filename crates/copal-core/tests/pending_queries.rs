//! Queries that see a running transaction's uncommitted changes (`query::Pending`): changed,
//! new and deleted objects, provisional classes and descriptors, through scans, indexes, counts,
//! ordering and paths through references. Each scenario runs on a fresh LMDB store.

use std::sync::Arc;

use copal_core::format::{make_oid, oid_class, Descriptor, RecordHeader, Writer};
use copal_core::query::{self, CmpOp, Expr, Path, Pending, Query};
use copal_core::store::DeclaredIndex;
use copal_core::{Commit, Oid, Snapshot, Store, StoreOptions, Value};

fn lmdb_store(name: &str) -> Arc<Store> {
    let dir = std::env::temp_dir().join(format!("copal-core-pending-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Store::lmdb(&dir, StoreOptions::default()).unwrap()
}

fn record(descriptor: u32, fields: &[Value]) -> Vec<u8> {
    let mut w = Writer::new();
    RecordHeader { flags: 0, descriptor, tid: 0 }.write(&mut w);
    fields.iter().for_each(|f| f.encode(&mut w));
    w.buf
}

fn path(dotted: &str) -> Path {
    dotted.split('.').map(str::to_owned).collect()
}

fn cmp(dotted: &str, op: CmpOp, value: Value) -> Expr {
    Expr::Cmp { path: path(dotted), op, value }
}

fn oids(found: &[(Oid, Vec<u8>)]) -> Vec<Oid> {
    found.iter().map(|(oid, _)| *oid).collect()
}

/// Ten people `p0` … `p9`: person i is i years old and the friend of person i - 1 (the last
/// one's friend is the first).
struct People {
    store: Arc<Store>,
    person: Arc<Descriptor>,
    oids: Vec<Oid>,
}

impl People {
    fn new(name: &str, indexed: bool) -> People {
        let store = lmdb_store(name);
        let mut commit = Commit::begin(&store).unwrap();
        let fields = ["name", "age", "friend"].map(str::to_owned);
        let person = commit.descriptor("app.Person", &fields).unwrap();
        let oids: Vec<Oid> = (0..10).map(|_| commit.allocate_oid(person.class_no).unwrap()).collect();
        for (i, oid) in oids.iter().enumerate() {
            let friend = oids[(i + 1) % oids.len()];
            commit.put(*oid, &record(person.id, &[Value::Str(format!("p{i}")), Value::Int(i as i64), Value::Ref(friend)])).unwrap();
        }
        commit.finish().unwrap();
        if indexed {
            // Built from the committed records.
            let mut commit = Commit::begin(&store).unwrap();
            let (types, age) = (["app.Person".to_owned()], ["age".to_owned()]);
            let by_age = DeclaredIndex { type_name: "app.Person", covered: &types, fields: &age, unique: false, renamed: &[], defaults: &[] };
            commit.ensure_index(&by_age, &mut |_, _| {}).unwrap();
            commit.finish().unwrap();
        }
        People { store, person, oids }
    }

    fn class(&self) -> u16 {
        self.person.class_no
    }

    /// A record of a person as the stored ones are.
    fn person(&self, name: &str, age: Value, friend: Oid) -> Vec<u8> {
        record(self.person.id, &[Value::Str(name.to_owned()), age, Value::Ref(friend)])
    }

    fn query(&self, filter: Expr) -> Query {
        Query::new(vec![self.class()], filter)
    }
}

#[test]
fn a_changed_record_replaces_the_stored_one_in_results_and_counts() {
    let people = People::new("changed", false);
    let snapshot = Snapshot::new(&people.store).unwrap();
    let mut pending = Pending::default();
    let changed = people.person("p3", Value::Int(100), people.oids[4]);
    pending.put(people.oids[3], changed.clone());

    let old = people.query(cmp("age", CmpOp::Eq, Value::Int(3)));
    assert_eq!(query::run(&snapshot, &old).unwrap().len(), 1, "the stored record matches");
    assert!(query::run_pending(&snapshot, &pending, &old).unwrap().is_empty(), "its pending state no longer does");
    assert_eq!(query::count_pending(&snapshot, &pending, &old).unwrap(), 0);

    let new = people.query(cmp("age", CmpOp::Ge, Value::Int(50)));
    let found = query::run_pending(&snapshot, &pending, &new).unwrap();
    assert_eq!(found, vec![(people.oids[3], changed)], "the overlay's record is returned");
    assert_eq!(query::count_pending(&snapshot, &pending, &new).unwrap(), 1);
    // Results stay in object-id order, the changed record in its place.
    let young = people.query(Expr::Or(vec![cmp("age", CmpOp::Lt, Value::Int(5)), cmp("age", CmpOp::Eq, Value::Int(100))]));
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &young).unwrap()), people.oids[..5].to_vec());
    assert!(query::explain_pending(&snapshot, &pending, &new).unwrap().contains("plus 1 pending record"));
}

#[test]
fn a_deleted_object_is_no_result_and_is_not_counted() {
    let people = People::new("deleted", false);
    let snapshot = Snapshot::new(&people.store).unwrap();
    let mut pending = Pending::default();
    pending.delete(people.oids[4]);

    let everyone = people.query(Expr::True);
    assert_eq!(query::count_pending(&snapshot, &pending, &everyone).unwrap(), 9, "whole-extent count");
    let found = oids(&query::run_pending(&snapshot, &pending, &everyone).unwrap());
    assert_eq!(found.len(), 9);
    assert!(!found.contains(&people.oids[4]));
    let four = people.query(cmp("age", CmpOp::Eq, Value::Int(4)));
    assert_eq!(query::count_pending(&snapshot, &pending, &four).unwrap(), 0);
    // A query of another class does not see the deletion.
    let other = Query::new(vec![people.class() + 1], Expr::True);
    assert_eq!(query::count_pending(&snapshot, &pending, &other).unwrap(), 0);
}

#[test]
fn a_new_object_of_a_stored_class_sorts_after_the_stored_ones() {
    let people = People::new("new_object", false);
    let snapshot = Snapshot::new(&people.store).unwrap();
    let mut pending = Pending::default();
    let newcomer = pending.new_oid(people.class());
    assert_eq!(newcomer, make_oid(people.class(), copal_core::query::FIRST_NEW_SEQ));
    pending.put(newcomer, people.person("newcomer", Value::Float(5.0), people.oids[0]));

    let five = people.query(cmp("age", CmpOp::Eq, Value::Int(5)));
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &five).unwrap()), vec![people.oids[5], newcomer]);
    let everyone = people.query(Expr::True);
    assert_eq!(query::count_pending(&snapshot, &pending, &everyone).unwrap(), 11, "whole-extent count");
    let mut last = people.query(Expr::True);
    last.offset = 10;
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &last).unwrap()), vec![newcomer]);
    // Excluded ids stay excluded.
    let mut excluding = people.query(Expr::True);
    excluding.exclude.insert(newcomer);
    assert_eq!(query::count_pending(&snapshot, &pending, &excluding).unwrap(), 10);
}

#[test]
fn new_classes_and_field_layouts_are_read_through_provisional_descriptors() {
    let people = People::new("provisional", false);
    let snapshot = Snapshot::new(&people.store).unwrap();
    let mut pending = Pending::default();
    let (pet, wider, address) = {
        let catalog = people.store.catalog();
        let pet = pending.descriptor(&catalog, "app.Pet", &["name".to_owned(), "owner".to_owned()]);
        // A stored class gains a field: a new layout of its class.
        let fields = ["name", "age", "friend", "address"].map(str::to_owned);
        let wider = pending.descriptor(&catalog, "app.Person", &fields);
        let address = pending.descriptor(&catalog, "app.Address", &["city".to_owned()]);
        assert!(catalog.get(pet.id).is_none() && catalog.class_no("app.Pet").is_none());
        (pet, wider, address)
    };
    assert_eq!(wider.class_no, people.class());
    assert!(pet.class_no > people.class() && address.class_no != pet.class_no);

    let rex = pending.new_oid(pet.class_no);
    pending.put(rex, record(pet.id, &[Value::Str("rex".into()), Value::Ref(people.oids[2])]));
    let paris = Value::Object { descriptor: address.id, fields: vec![Value::Str("Paris".into())] };
    pending.put(people.oids[6], record(wider.id, &[Value::Str("p6".into()), Value::Int(6), Value::Ref(people.oids[7]), paris]));

    let pets_of_p2 = Query::new(vec![pet.class_no], cmp("owner.name", CmpOp::Eq, Value::Str("p2".into())));
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &pets_of_p2).unwrap()), vec![rex]);
    assert_eq!(query::count_pending(&snapshot, &pending, &Query::new(vec![pet.class_no], Expr::True)).unwrap(), 1);
    let in_paris = people.query(cmp("address.city", CmpOp::Eq, Value::Str("Paris".into())));
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &in_paris).unwrap()), vec![people.oids[6]]);
    // Both classes: the new class's objects come after the stored class's.
    let both = Query::new(vec![pet.class_no, people.class()], cmp("name", CmpOp::Ge, Value::Str("p9".into())));
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &both).unwrap()), vec![people.oids[9], rex]);
    assert_eq!(oid_class(rex), pet.class_no);
}

#[test]
fn index_accesses_test_the_overlay_records_directly() {
    let people = People::new("indexed", true);
    let snapshot = Snapshot::new(&people.store).unwrap();
    let mut pending = Pending::default();
    // p3 turns 7: the index still files it under 3.
    pending.put(people.oids[3], people.person("p3", Value::Int(7), people.oids[4]));
    let newcomer = pending.new_oid(people.class());
    pending.put(newcomer, people.person("newcomer", Value::Int(7), people.oids[0]));
    pending.delete(people.oids[8]);

    let seven = people.query(cmp("age", CmpOp::Eq, Value::Int(7)));
    let explained = query::explain_pending(&snapshot, &pending, &seven).unwrap();
    assert!(explained.contains("index app.Person(age)") && explained.contains("plus 2 pending record"), "{explained}");
    assert!(explained.contains("from the index alone"), "{explained}");
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &seven).unwrap()), vec![people.oids[3], people.oids[7], newcomer]);
    assert_eq!(query::count_pending(&snapshot, &pending, &seven).unwrap(), 3, "exact index count");
    let three = people.query(cmp("age", CmpOp::Eq, Value::Int(3)));
    assert!(query::run_pending(&snapshot, &pending, &three).unwrap().is_empty());
    assert_eq!(query::count_pending(&snapshot, &pending, &three).unwrap(), 0);
    let eight = people.query(cmp("age", CmpOp::Eq, Value::Int(8)));
    assert_eq!(query::count_pending(&snapshot, &pending, &eight).unwrap(), 0, "deleted");
    // A range the index does not answer alone (the name is tested on the records).
    let range = people.query(Expr::And(vec![
        cmp("age", CmpOp::Ge, Value::Int(6)),
        Expr::StartsWith { path: path("name"), prefix: Value::Str("p".into()) },
    ]));
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &range).unwrap()), vec![people.oids[3], people.oids[6], people.oids[7], people.oids[9]]);
    assert_eq!(query::count_pending(&snapshot, &pending, &range).unwrap(), 4);
}

/// The results of `run_pending` for `age >= 5` ordered by age, offset 1, limit 3.
fn oldest(people: &People, pending: &Pending, descending: bool) -> Vec<Oid> {
    let snapshot = Snapshot::new(&people.store).unwrap();
    let mut q = people.query(cmp("age", CmpOp::Ge, Value::Int(5)));
    q.order = vec![(path("age"), descending)];
    q.offset = 1;
    q.limit = Some(3);
    oids(&query::run_pending(&snapshot, pending, &q).unwrap())
}

#[test]
fn order_offset_and_limit_apply_to_stored_and_pending_matches_together() {
    for indexed in [false, true] {
        let people = People::new(if indexed { "ordered_index" } else { "ordered_scan" }, indexed);
        let mut pending = Pending::default();
        // p0 becomes the oldest, a newcomer sits between p8 and p9, p9 is deleted, and a
        // newcomer as old as p7 follows p7 (a larger id breaks the tie).
        pending.put(people.oids[0], people.person("p0", Value::Int(20), people.oids[1]));
        let between = pending.new_oid(people.class());
        pending.put(between, people.person("between", Value::Float(8.5), people.oids[0]));
        pending.delete(people.oids[9]);
        let twin = pending.new_oid(people.class());
        pending.put(twin, people.person("twin", Value::Int(7), people.oids[0]));

        let o = &people.oids;
        // Descending: 20 (p0), 8.5, 8, 7, 7 (twin: ties keep id order in both directions), 6, 5.
        assert_eq!(oldest(&people, &pending, true), vec![between, o[8], o[7]], "indexed: {indexed}");
        // Ascending: 5, 6, 7, 7 (twin), 8, 8.5, 20.
        assert_eq!(oldest(&people, &pending, false), vec![o[6], o[7], twin], "indexed: {indexed}");
        if indexed {
            let snapshot = Snapshot::new(&people.store).unwrap();
            let mut q = people.query(cmp("age", CmpOp::Ge, Value::Int(5)));
            q.order = vec![(path("age"), true)];
            q.limit = Some(3);
            let explained = query::explain_pending(&snapshot, &pending, &q).unwrap();
            assert!(explained.contains("read in descending order") && explained.contains("sorted into the results"), "{explained}");
        }
        // Without overlay records of the class, an ordered index still streams.
        let mut only_deleted = Pending::default();
        only_deleted.delete(people.oids[9]);
        assert_eq!(oldest(&people, &only_deleted, true), vec![o[7], o[6], o[5]], "indexed: {indexed}");
    }
}

#[test]
fn paths_through_references_read_pending_and_deleted_objects() {
    let people = People::new("references", false);
    let snapshot = Snapshot::new(&people.store).unwrap();
    let mut pending = Pending::default();
    // p5 (the friend of p4) changes; p7 (the friend of p6) is deleted.
    pending.put(people.oids[5], people.person("p5", Value::Int(50), people.oids[6]));
    pending.delete(people.oids[7]);

    let friend_50 = people.query(cmp("friend.age", CmpOp::Eq, Value::Int(50)));
    assert!(query::run(&snapshot, &friend_50).unwrap().is_empty());
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &friend_50).unwrap()), vec![people.oids[4]]);
    let friend_5 = people.query(cmp("friend.age", CmpOp::Eq, Value::Int(5)));
    assert!(query::run_pending(&snapshot, &pending, &friend_5).unwrap().is_empty());

    // A reference to a deleted object reads as missing, like a dangling one.
    let friend_7 = people.query(cmp("friend.age", CmpOp::Eq, Value::Int(7)));
    assert_eq!(query::count(&snapshot, &friend_7).unwrap(), 1);
    assert_eq!(query::count_pending(&snapshot, &pending, &friend_7).unwrap(), 0);
    let friendless = people.query(Expr::IsNone { path: path("friend.name") });
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &friendless).unwrap()), vec![people.oids[6]]);
    // Two hops: the friend of p3 is p4, whose friend p5 changed.
    let second_hop = people.query(cmp("friend.friend.age", CmpOp::Gt, Value::Int(40)));
    assert_eq!(oids(&query::run_pending(&snapshot, &pending, &second_hop).unwrap()), vec![people.oids[3]]);
}

#[test]
fn in_with_many_values_matches_as_equality_with_any_of_them() {
    let store = lmdb_store("many_values");
    let mut commit = Commit::begin(&store).unwrap();
    let d = commit.descriptor("app.N", &["n".to_owned()]).unwrap();
    for n in 0..30_000i64 {
        let oid = commit.allocate_oid(d.class_no).unwrap();
        // Every third value is a float: `in_` matches numbers by value.
        let value = if n % 3 == 0 { Value::Float(n as f64) } else { Value::Int(n) };
        commit.put(oid, &record(d.id, &[value])).unwrap();
    }
    commit.finish().unwrap();
    let snapshot = Snapshot::new(&store).unwrap();
    // 10,000 values: the even numbers below 20,000, as ints, floats and bools, and some that
    // match nothing (NaN, strings, fractions).
    let mut values: Vec<Value> = (0..10_000i64)
        .map(|i| match i % 4 {
            0 => Value::Int(2 * i),
            1 => Value::Float((2 * i) as f64),
            2 => Value::BigInt((2 * i).to_le_bytes().to_vec()),
            _ => Value::Decimal(format!("{}.0", 2 * i)),
        })
        .collect();
    values.extend([Value::Float(f64::NAN), Value::Str("4".into()), Value::Float(0.5), Value::Bool(true)]);
    let q = Query::new(vec![d.class_no], Expr::In { path: path("n"), values });
    // 10,000 even numbers, and 1 (True). The values are hashed (value_set.rs): membership is
    // tested in constant time per record.
    assert_eq!(query::count(&snapshot, &q).unwrap(), 10_001);
}

#[test]
fn ids_from_an_exact_index_are_those_run_returns() {
    let people = People::new("ids_from_index", true);
    let o = &people.oids;
    let snapshot = Snapshot::new(&people.store).unwrap();
    let mut only_deleted = Pending::default();
    only_deleted.delete(o[6]);
    let mut with_records = Pending::default();
    with_records.put(o[1], people.person("p1", Value::Int(9), o[2]));
    let ranges = [
        cmp("age", CmpOp::Ge, Value::Int(4)),
        Expr::Or(vec![cmp("age", CmpOp::Lt, Value::Int(2)), cmp("age", CmpOp::Gt, Value::Int(7))]),
        cmp("age", CmpOp::Eq, Value::Float(5.0)),
    ];
    for pending in [Pending::default(), only_deleted, with_records] {
        for filter in &ranges {
            for (order, limit, offset) in [(None, None, 0), (Some(false), Some(3), 1), (Some(true), Some(2), 0), (Some(true), None, 2)] {
                let mut q = people.query(filter.clone());
                if let Some(descending) = order {
                    q.order = vec![(path("age"), descending)];
                }
                q.limit = limit;
                q.offset = offset;
                let expected = oids(&query::run_pending(&snapshot, &pending, &q).unwrap());
                assert_eq!(query::oids_pending(&snapshot, &pending, &q).unwrap(), expected, "{filter:?} {order:?} {limit:?} {offset}");
            }
        }
    }
    // Without a record of the class in the overlay, the index alone answers (no record read).
    let q = people.query(cmp("age", CmpOp::Ge, Value::Int(4)));
    assert!(query::explain(&snapshot, &q).unwrap().contains("from the index alone"));
}
