use super::*;
use crate::format::{make_oid, Value, ROOT_DESCRIPTOR};
use crate::store::anchors::ANCHORS_RECORDED;
use crate::store::test_support::{record, temp_store};

/// Writes a node (one field: the list of what it refers to) in `commit`, returning its oid.
fn node(commit: &mut Commit<'_>, refs: &[Oid]) -> Oid {
    let descriptor = commit.descriptor("app.Node", &["refs".into()]).unwrap();
    let oid = commit.allocate_oid(descriptor.class_no).unwrap();
    let refs = Value::List(refs.iter().map(|&oid| Value::Ref(oid)).collect());
    commit.put(oid, &record(descriptor.id, commit.tid(), &[refs])).unwrap();
    oid
}

/// Rewrites node `oid` to refer to `refs`.
fn relink(commit: &mut Commit<'_>, oid: Oid, refs: &[Oid]) {
    let descriptor = commit.descriptor("app.Node", &["refs".into()]).unwrap();
    let refs = Value::List(refs.iter().map(|&oid| Value::Ref(oid)).collect());
    commit.put(oid, &record(descriptor.id, commit.tid(), &[refs])).unwrap();
}

/// Makes the root mapping hold `named` (name, oid).
fn set_root(commit: &mut Commit<'_>, named: &[(&str, Oid)]) {
    let pairs = named.iter().map(|&(name, oid)| (Value::Str(name.into()), Value::Ref(oid))).collect();
    commit.put(ROOT_OID, &record(ROOT_DESCRIPTOR, commit.tid(), &[Value::Dict(pairs)])).unwrap();
}

fn exists(store: &Arc<Store>, oid: Oid) -> bool {
    Snapshot::new(store).unwrap().get(oid).unwrap().is_some()
}

fn collect(store: &Arc<Store>, batch: usize) -> GcReport {
    store.collect_garbage(GcOptions { batch, ..GcOptions::default() }, &mut |_| ControlFlow::Continue(())).unwrap()
}

#[test]
fn objects_no_root_or_anchor_reaches_are_removed_and_the_rest_kept() {
    let store = temp_store("gc-reach");
    let mut commit = Commit::begin(&store).unwrap();
    let leaf = node(&mut commit, &[]);
    let kept = node(&mut commit, &[leaf, make_oid(40, 7)]);
    let anchored_leaf = node(&mut commit, &[]);
    let anchored = node(&mut commit, &[anchored_leaf]);
    commit.anchor(anchored).unwrap();
    let garbage_leaf = node(&mut commit, &[kept]);
    let garbage = node(&mut commit, &[garbage_leaf]);
    let (cycle_a, cycle_b) = (node(&mut commit, &[]), node(&mut commit, &[]));
    relink(&mut commit, cycle_a, &[cycle_b]);
    relink(&mut commit, cycle_b, &[cycle_a]);
    set_root(&mut commit, &[("kept", kept)]);
    commit.finish().unwrap();

    let report = collect(&store, 2);
    for oid in [ROOT_OID, leaf, kept, anchored_leaf, anchored] {
        assert!(exists(&store, oid), "{oid:#x} is reachable");
    }
    for oid in [garbage_leaf, garbage, cycle_a, cycle_b] {
        assert!(!exists(&store, oid), "{oid:#x} is garbage");
    }
    assert_eq!((report.objects, report.reachable, report.removed), (9, 5, 4));
    assert_eq!(report.removed_by_type, vec![("app.Node".to_owned(), 4)]);
    assert!(report.removed_bytes > 0);
    // Two removals per commit.
    assert_eq!(report.commits, 2);
    // The one problem is the dangling reference the test wrote.
    let problems = store.verify().unwrap().problems;
    assert!(problems.len() == 1 && problems[0].contains("0x28000000000007, which does not exist"), "{problems:?}");
    assert_eq!(collect(&store, 2).removed, 0);
}

#[test]
fn a_candidate_made_reachable_while_the_sweep_runs_is_kept() {
    let store = temp_store("gc-concurrent");
    let mut commit = Commit::begin(&store).unwrap();
    let garbage: Vec<Oid> = (0..4).map(|_| node(&mut commit, &[])).collect();
    let saved_child = node(&mut commit, &[]);
    let saved = node(&mut commit, &[saved_child]);
    commit.finish().unwrap();
    let mut linked = false;
    let report = store
        .collect_garbage(GcOptions { batch: 1, ..GcOptions::default() }, &mut |progress| {
            // Between the sweep's first and second commits, another transaction links `saved`
            // (a candidate: unreachable when marked) to the root.
            if matches!(progress, GcProgress::Sweep { removed: 1, .. }) && !linked {
                let mut commit = Commit::begin(&store).unwrap();
                set_root(&mut commit, &[("saved", saved)]);
                commit.finish().unwrap();
                linked = true;
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    assert!(linked);
    assert!(exists(&store, saved) && exists(&store, saved_child));
    assert!(garbage.iter().all(|&oid| !exists(&store, oid)));
    assert_eq!(report.removed, 4);
}

#[test]
fn a_commit_that_read_before_a_collection_may_not_refer_to_a_collected_object() {
    let store = temp_store("gc-stale-reference");
    let mut commit = Commit::begin(&store).unwrap();
    let doomed = node(&mut commit, &[]);
    let holder = node(&mut commit, &[]);
    commit.anchor(holder).unwrap();
    let read_tid = commit.finish().unwrap();
    assert_eq!(collect(&store, 10).removed, 1);

    let mut commit = Commit::begin(&store).unwrap();
    commit.check_references_since(read_tid).unwrap();
    relink(&mut commit, holder, &[doomed]);
    let error = commit.finish().unwrap_err();
    assert!(matches!(error, StoreError::Conflict { oid, stored_tid: None, .. } if oid == doomed), "{error}");
    assert!(!exists(&store, doomed));

    // A transaction that read after the collection is not checked; nor is one whose targets exist.
    let mut commit = Commit::begin(&store).unwrap();
    commit.check_references_since(read_tid).unwrap();
    let fresh = node(&mut commit, &[]);
    relink(&mut commit, holder, &[fresh]);
    commit.finish().unwrap();
}

#[test]
fn a_database_without_recorded_anchors_keeps_what_nothing_refers_to() {
    let store = temp_store("gc-derive");
    let mut commit = Commit::begin(&store).unwrap();
    commit.put_setting(ANCHORS_RECORDED, None).unwrap();
    let child = node(&mut commit, &[]);
    let added = node(&mut commit, &[child]);
    let (cycle_a, cycle_b) = (node(&mut commit, &[]), node(&mut commit, &[]));
    relink(&mut commit, cycle_a, &[cycle_b]);
    relink(&mut commit, cycle_b, &[cycle_a]);
    commit.finish().unwrap();

    let report = collect(&store, 10);
    assert_eq!((report.anchors_derived, report.removed), (1, 2));
    assert!(exists(&store, added) && exists(&store, child));
    assert!(Snapshot::new(&store).unwrap().has_setting(ANCHORS_RECORDED).unwrap());
    let mut anchors = Vec::new();
    Snapshot::new(&store)
        .unwrap()
        .scan_anchors(|oid| {
            anchors.push(oid);
            Ok(())
        })
        .unwrap();
    assert_eq!(anchors, [added]);
    assert!(store.verify().unwrap().ok());
}

#[test]
fn deleting_an_object_removes_its_anchor() {
    let store = temp_store("gc-delete-anchor");
    let mut commit = Commit::begin(&store).unwrap();
    let added = node(&mut commit, &[]);
    commit.anchor(added).unwrap();
    commit.finish().unwrap();
    let mut commit = Commit::begin(&store).unwrap();
    commit.delete(added).unwrap();
    commit.finish().unwrap();
    let mut anchors = 0;
    Snapshot::new(&store)
        .unwrap()
        .scan_anchors(|_| {
            anchors += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(anchors, 0);
}

#[test]
fn oid_sets_yield_their_members_in_order_across_blocks() {
    let mut set = OidSet::default();
    let members = [make_oid(3, 1 << 20), 5, make_oid(2, 0), 64, 63, make_oid(2, 65_535), make_oid(2, 65_536)];
    for oid in members {
        assert!(set.insert(oid));
    }
    assert!(!set.insert(64));
    set.remove(63);
    let mut expected: Vec<Oid> = members.iter().copied().filter(|&oid| oid != 63).collect();
    expected.sort_unstable();
    assert_eq!(set.iter().collect::<Vec<_>>(), expected);
    assert_eq!(set.len(), 6);
    assert!(set.contains(5) && !set.contains(63));
}

#[test]
fn a_stopped_collection_ends_after_the_commit_it_is_in() {
    let store = temp_store("gc-stop");
    let mut commit = Commit::begin(&store).unwrap();
    let garbage: Vec<Oid> = (0..5).map(|_| node(&mut commit, &[])).collect();
    commit.finish().unwrap();
    let report = store.collect_garbage(GcOptions { batch: 2, ..GcOptions::default() }, &mut |_| ControlFlow::Break(())).unwrap();
    // Marking reports nothing for so few objects; the first sweep commit reports and is stopped.
    assert!(report.stopped);
    assert_eq!((report.removed, report.commits), (2, 1));
    assert_eq!(garbage.iter().filter(|&&oid| exists(&store, oid)).count(), 3);
    let report = collect(&store, 2);
    assert!(!report.stopped);
    assert_eq!(report.removed, 3);
}

#[test]
fn objects_linked_back_while_snapshots_are_renewed_are_never_removed() {
    let store = temp_store("gc-renewals");
    // A root list of 50 holders, each holding a chain of 200 nodes; 10,000 garbage nodes.
    let mut commit = Commit::begin(&store).unwrap();
    let mut holders = Vec::new();
    for _ in 0..50 {
        let mut next = Vec::new();
        for _ in 0..200 {
            next = vec![node(&mut commit, &next)];
        }
        holders.push(node(&mut commit, &next));
    }
    let list = node(&mut commit, &holders);
    set_root(&mut commit, &[("holders", list)]);
    (0..10_000).for_each(|_| {
        node(&mut commit, &[]);
    });
    commit.finish().unwrap();

    // A writer moves chains between holders and the void: unlinks one, links back one it
    // unlinked before (refused with a conflict if the chain's head was collected meanwhile).
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (linked_back, refused) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let (mut unlinked, mut linked_back, mut refused) = (Vec::new(), 0, 0);
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let read_tid = Snapshot::new(&store).unwrap().tid();
                let holder = holders[i % holders.len()];
                let mut commit = Commit::begin(&store).unwrap();
                commit.check_references_since(read_tid).unwrap();
                let mut refs = Vec::new();
                commit.stored_references(holder, &mut refs).unwrap();
                let back = if i % 2 == 1 { unlinked.pop() } else { None };
                relink(&mut commit, holder, back.as_slice());
                match commit.finish() {
                    Ok(_) => {
                        unlinked.extend(refs);
                        linked_back += u32::from(back.is_some());
                    }
                    Err(StoreError::Conflict { .. }) => refused += 1,
                    Err(other) => panic!("{other}"),
                }
                i += 1;
            }
            (linked_back, refused)
        });
        let options = GcOptions { batch: 100, snapshot_age: std::time::Duration::ZERO };
        for _ in 0..3 {
            store.collect_garbage(options, &mut |_| ControlFlow::Continue(())).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap()
    });
    assert!(linked_back + refused > 0);
    // Nothing reachable was removed: no reference dangles.
    let report = store.verify().unwrap();
    assert!(report.ok(), "{:?}", &report.problems[..report.problems.len().min(5)]);
}
