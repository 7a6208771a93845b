//! Export and import round trips, from Rust alone (the Python tests compare object graphs).

use std::io::Cursor;

use super::*;
use crate::format::{make_oid, Value, ROOT_TYPE_NAME};
use crate::store::test_support::{record, temp_store};
use crate::store::transfer_binary::CopalReader;
use crate::store::DeclaredIndex;
use crate::stream::DEFAULT_MAX_SIZE;

/// A store with people referring to each other (one through a shared list), an index, a
/// removed-field declaration, a deleted object and a root naming the first person.
fn populated(name: &str, people: u64) -> Arc<Store> {
    let store = temp_store(name);
    let mut commit = Commit::begin(&store).unwrap();
    let person = commit.descriptor("app.Person", &["name".into(), "friends".into(), "also".into()]).unwrap();
    let point = commit.descriptor("app.Point", &["x".into()]).unwrap();
    let tid = commit.tid();
    let oids: Vec<Oid> = (0..people).map(|_| commit.allocate_oid(person.class_no).unwrap()).collect();
    for (i, &oid) in oids.iter().enumerate() {
        let friend = oids[(i + 1) % oids.len()];
        let friends = Value::List(vec![Value::Ref(friend), Value::Object { descriptor: point.id, fields: vec![Value::Float(0.5)] }]);
        commit.put(oid, &record(person.id, tid, &[Value::Str(format!("p{i}")), friends, Value::BackRef(0)])).unwrap();
    }
    let root = Value::Dict(vec![(Value::Str("first".into()), Value::Ref(oids[0]))]);
    commit.put(ROOT_OID, &record(ROOT_DESCRIPTOR, tid, &[root])).unwrap();
    commit.finish().unwrap();
    let mut commit = Commit::begin(&store).unwrap();
    let (person_type, name) = (["app.Person".to_owned()], ["name".to_owned()]);
    let by_name = DeclaredIndex { type_name: "app.Person", covered: &person_type, fields: &name, unique: true, renamed: &[], defaults: &[] };
    commit.ensure_index(&by_name, &mut |_, _| {}).unwrap();
    commit.declare_removed("app.Person", &["age".into()]).unwrap();
    let gone = commit.allocate_oid(person.class_no).unwrap();
    commit.put(gone, &record(person.id, commit.tid(), &[Value::Str("gone".into()), Value::None, Value::None])).unwrap();
    commit.finish().unwrap();
    let mut commit = Commit::begin(&store).unwrap();
    commit.delete(gone).unwrap();
    commit.finish().unwrap();
    store
}

fn export(store: &Arc<Store>, format: ExportFormat, types: Option<&[String]>) -> Vec<u8> {
    let mut out = Vec::new();
    store.export(format, types, &mut out, &mut |_, _| {}).unwrap();
    out
}

/// Every record's state (the record without its tid), in oid order.
fn states(store: &Arc<Store>) -> Vec<(Oid, Vec<u8>)> {
    let snapshot = Snapshot::new(store).unwrap();
    let mut out = Vec::new();
    snapshot
        .scan_all_values(|oid, value| {
            let record = unseal(oid, value)?;
            let (header, state) = RecordHeader::parse(record)?;
            out.push((oid, [&[header.flags], &header.descriptor.to_le_bytes()[..], &record[state..]].concat()));
            Ok(())
        })
        .unwrap();
    out
}

#[test]
fn copy_into_an_empty_store_keeps_everything_and_refuses_a_store_with_data() {
    let source = populated("copy-source", 30);
    let target = temp_store("copy-target");
    let mut copied = 0;
    let report = source.copy_into(&target, &mut |done, _| copied = done).unwrap();
    assert_eq!((report.records, report.indexes, copied), (31, 1, 31));
    assert_eq!(states(&target), states(&source));
    let (source_snapshot, target_snapshot) = (Snapshot::new(&source).unwrap(), Snapshot::new(&target).unwrap());
    assert_eq!(target_snapshot.all_descriptors().unwrap(), source_snapshot.all_descriptors().unwrap());
    assert_eq!(target_snapshot.removed_fields().unwrap(), source_snapshot.removed_fields().unwrap());
    assert!(unfinished_import(&target_snapshot).unwrap().is_none());
    assert!(target.verify().unwrap().ok());
    let again = source.copy_into(&target, &mut |_, _| {});
    assert!(matches!(again, Err(TransferError::NotEmpty { .. })), "{again:?}");
}

#[test]
fn every_format_round_trips_oids_descriptors_indexes_and_declarations() {
    let source = populated("source", 50);
    for format in [ExportFormat::Copal, ExportFormat::Json, ExportFormat::Xml] {
        let exported = export(&source, format, None);
        let target = temp_store(&format!("transfer-target-{format:?}"));
        let report = target.import(&mut Cursor::new(&exported), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap();
        assert_eq!((report.records, report.indexes), (51, 1), "{format:?}");
        assert_eq!(states(&target), states(&source), "{format:?}");
        let (source_snapshot, target_snapshot) = (Snapshot::new(&source).unwrap(), Snapshot::new(&target).unwrap());
        assert_eq!(target_snapshot.all_descriptors().unwrap(), source_snapshot.all_descriptors().unwrap());
        assert_eq!(target_snapshot.removed_fields().unwrap(), source_snapshot.removed_fields().unwrap());
        let verify = target.verify().unwrap();
        assert!(verify.ok(), "{format:?}: {:?}", verify.problems);
        assert_eq!(verify.index_entries, 50);
        // Exporting the import gives the same export (tids aside: the header names the snapshot).
        let again = export(&target, format, None);
        assert_eq!(again.len(), exported.len(), "{format:?}");
    }
}

#[test]
fn imported_classes_continue_their_oid_sequences() {
    let source = populated("sequence-source", 3);
    let target = temp_store("transfer-sequence-target");
    target.import(&mut Cursor::new(export(&source, ExportFormat::Copal, None)), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap();
    let class = Snapshot::new(&target).unwrap().all_descriptors().unwrap()[1].class_no;
    let mut commit = Commit::begin(&target).unwrap();
    // Three people, then a fourth deleted: its id is not given again.
    assert_eq!(commit.allocate_oid(class).unwrap(), make_oid(class, 4));
}

#[test]
fn a_class_export_holds_that_extent_and_every_descriptor() {
    let source = populated("class-source", 5);
    let exported = export(&source, ExportFormat::Json, Some(&["app.Person".to_owned()]));
    let text = String::from_utf8(exported.clone()).unwrap();
    assert_eq!(text.lines().filter(|l| l.contains("\"oid\"")).count(), 5, "the root is not exported");
    assert!(text.contains(r#"{"$enum":"copal.Oid","$member":"0x"#), "references are written as copal.Oid members");
    let target = temp_store("transfer-class-target");
    target.import(&mut Cursor::new(exported), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap();
    assert_eq!(states(&target)[1..], states(&source)[1..]);
    let unknown = source.export(ExportFormat::Json, Some(&["app.Nothing".to_owned()]), &mut Vec::new(), &mut |_, _| {});
    assert!(matches!(unknown, Err(TransferError::UnknownType { .. })));
}

#[test]
fn a_database_that_is_not_empty_is_refused_untouched() {
    let source = populated("busy-source", 2);
    let exported = export(&source, ExportFormat::Copal, None);
    let before = states(&source);
    let refused = source.import(&mut Cursor::new(&exported), DEFAULT_MAX_SIZE, &mut |_, _| {});
    assert!(matches!(refused, Err(TransferError::NotEmpty { .. })), "{refused:?}");
    assert_eq!(states(&source), before);
}

#[test]
fn truncated_and_damaged_input_is_a_typed_error_and_marks_a_partial_import() {
    let source = populated("damaged-source", 30);
    let exported = export(&source, ExportFormat::Copal, None);
    // Cut inside the header or the first entry: nothing is committed.
    for cut in [3, 10] {
        let target = temp_store(&format!("transfer-cut-{cut}"));
        let error = target.import(&mut Cursor::new(&exported[..cut]), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap_err();
        let truncated = matches!(error, TransferError::BadEntry { entry: 0, fault: EntryFault::Truncated, .. });
        assert!(matches!(error, TransferError::Malformed { .. }) || truncated, "{cut}: {error:?}");
        assert!(target.verify().unwrap().ok());
    }
    // Cut among the records: the descriptors were committed, so the import is partial and
    // `verify` says so.
    let target = temp_store("transfer-cut-records");
    let error = target.import(&mut Cursor::new(&exported[..exported.len() - 40]), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap_err();
    let TransferError::Partial { cause, .. } = &error else { panic!("{error:?}") };
    assert!(matches!(**cause, TransferError::BadEntry { fault: EntryFault::Truncated, .. }), "{error}");
    assert!(error.to_string().contains("partial import"));
    let problems = target.verify().unwrap().problems;
    assert!(problems.iter().any(|p| p.contains("did not finish")), "{problems:?}");
    // Not an export at all.
    let other = temp_store("transfer-not-export");
    assert!(matches!(other.import(&mut Cursor::new(b"hello"), DEFAULT_MAX_SIZE, &mut |_, _| {}), Err(TransferError::Malformed { .. })));
}

#[test]
fn text_entries_out_of_order_or_unknown_are_refused() {
    let source = populated("order-source", 2);
    let text = String::from_utf8(export(&source, ExportFormat::Json, None)).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let removed = lines.iter().position(|l| l.contains("\"removed\"")).unwrap();
    let declaration = lines.remove(removed);
    lines.insert(lines.len() - 1, declaration);
    let target = temp_store("transfer-order-target");
    let error = target.import(&mut Cursor::new(lines.join("\n")), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap_err();
    assert!(error.to_string().contains("high-water mark after a record"), "{error}");
    let unknown = text.replacen("\"end\"", "\"ending\"", 1);
    let error = temp_store("transfer-unknown-target").import(&mut Cursor::new(unknown), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap_err();
    assert!(error.to_string().contains("unknown kind"), "{error}");
}

#[test]
fn a_damaged_record_in_a_binary_export_fails_its_checksum() {
    let source = populated("transfer-crc-source", 3);
    let mut exported = export(&source, ExportFormat::Copal, None);
    let at = exported.windows(2).position(|w| w == b"p1").unwrap();
    exported[at + 1] = b'7';
    let target = temp_store("transfer-crc-target");
    let error = cause(target.import(&mut Cursor::new(exported), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap_err());
    assert!(matches!(error, TransferError::BadEntry { fault: EntryFault::BadChecksum, .. }), "{error:?}");
    assert!(error.to_string().contains("(record): its checksum does not match its bytes"), "{error}");
}

/// The entries of a binary export.
fn entries(exported: &[u8]) -> Vec<Entry<'static>> {
    let mut input = Cursor::new(exported);
    let mut reader = CopalReader::new(&mut input, DEFAULT_MAX_SIZE).unwrap();
    std::iter::from_fn(|| reader.next_entry().unwrap()).collect()
}

/// `entries` as a binary export.
fn binary(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = CopalWriter::new(&mut out).unwrap();
    entries.iter().for_each(|entry| writer.write_entry(entry).unwrap());
    out
}

/// What made an import fail (after its first commit too).
fn cause(error: TransferError) -> TransferError {
    match error {
        TransferError::Partial { cause, .. } => *cause,
        other => other,
    }
}

/// The error of importing `entries` into a new store.
fn import_error(name: &str, entries: &[Entry<'_>]) -> TransferError {
    cause(temp_store(name).import(&mut Cursor::new(binary(entries)), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap_err())
}

#[test]
fn records_of_undeclared_classes_or_descriptors_are_refused() {
    let source = populated("transfer-oid-source", 3);
    let exported = entries(&export(&source, ExportFormat::Copal, None));
    let first = exported.iter().position(|e| matches!(e, Entry::Record { .. })).unwrap();
    let Entry::Record { record, .. } = &exported[first + 1] else { panic!("a person follows the root") };
    let person_class = oid_class(match &exported[first + 1] {
        Entry::Record { oid, .. } => *oid,
        _ => unreachable!(),
    });
    let undeclared = exported.iter().filter_map(|e| if let Entry::Descriptor(d) = e { Some(d.class_no) } else { None }).max().unwrap() + 1;
    let record = record.clone().into_owned();
    let mut unknown_descriptor = record.clone();
    unknown_descriptor[1] = 9;
    for (case, oid, record) in [
        ("zero", 0, record.clone()),
        ("max", u64::MAX, record.clone()),
        ("class 0", make_oid(0, 7), record.clone()),
        ("undeclared class", make_oid(undeclared, 0), record.clone()),
        ("unknown descriptor", make_oid(person_class, 9), unknown_descriptor),
    ] {
        let mut changed = exported.clone();
        // Where its oid is in order: before the root, or after the people.
        let last_record = changed.iter().rposition(|e| matches!(e, Entry::Record { .. })).unwrap();
        let at = if oid_class(oid) == 0 { first } else { last_record + 1 };
        changed.insert(at, Entry::Record { oid, record: record.into() });
        let error = import_error(&format!("transfer-oid-{case}"), &changed);
        let TransferError::BadEntry { entry, what, fault: EntryFault::BadOid(_) } = &error else { panic!("{case}: {error:?}") };
        assert_eq!((*entry, what.as_str()), (at as u64, format!("record {oid:#x}").as_str()), "{case}: {error}");
    }
}

#[test]
fn records_out_of_oid_order_or_twice_are_refused() {
    let source = populated("transfer-order-source", 3);
    let exported = entries(&export(&source, ExportFormat::Copal, None));
    let first = exported.iter().position(|e| matches!(e, Entry::Record { .. })).unwrap();
    let mut swapped = exported.clone();
    swapped.swap(first + 1, first + 2);
    let mut twice = exported.clone();
    twice.insert(first + 2, exported[first + 1].clone());
    for (case, changed) in [("swapped", swapped), ("twice", twice)] {
        let error = import_error(&format!("transfer-order-{case}"), &changed);
        let TransferError::BadEntry { entry, fault: EntryFault::OutOfOrder(_), .. } = &error else { panic!("{case}: {error:?}") };
        assert_eq!(*entry, first as u64 + 2, "{case}: {error}");
        assert!(error.to_string().contains("ascending oid order"), "{error}");
    }
}

#[test]
fn a_class_export_of_several_types_writes_its_records_in_oid_order() {
    let source = populated("transfer-types-source", 3);
    let types = ["app.Person".to_owned(), ROOT_TYPE_NAME.to_owned(), "app.Person".to_owned()];
    let exported = export(&source, ExportFormat::Copal, Some(&types));
    let oids: Vec<Oid> = entries(&exported).iter().filter_map(|e| if let Entry::Record { oid, .. } = e { Some(*oid) } else { None }).collect();
    assert!(oids.is_sorted() && oids.len() == 4, "{oids:x?}");
    temp_store("transfer-types-target").import(&mut Cursor::new(exported), DEFAULT_MAX_SIZE, &mut |_, _| {}).unwrap();
}

#[test]
fn entries_longer_than_max_size_are_refused_before_they_are_read() {
    let source = populated("transfer-size-source", 3);
    for format in [ExportFormat::Copal, ExportFormat::Json, ExportFormat::Xml] {
        let exported = export(&source, format, None);
        let target = temp_store(&format!("transfer-size-{format:?}"));
        let error = cause(target.import(&mut Cursor::new(&exported), 30, &mut |_, _| {}).unwrap_err());
        let TransferError::BadEntry { fault: EntryFault::TooLarge { max_size: 30, .. }, .. } = &error else { panic!("{format:?}: {error:?}") };
        assert!(error.to_string().contains("more than max_size = 30"), "{error}");
    }
}

#[test]
fn a_text_entry_read_through_trees_larger_than_max_size_is_refused() {
    let source = populated("transfer-tree-source", 1);
    let text = String::from_utf8(export(&source, ExportFormat::Json, None)).unwrap();
    // A record laid out otherwise than copal writes it (the version last) is read through
    // trees: fine within max_size, refused beyond it.
    let record = text.lines().find(|l| l.contains("\"oid\":\"0x2")).unwrap();
    let reordered = format!("{{\"value\":{},\"$copal\":2}}", &record[record.find("\"value\":").unwrap() + 8..record.len() - 1]);
    let text = text.replace(record, &reordered);
    temp_store("transfer-tree-fits").import(&mut Cursor::new(&text), 4096, &mut |_, _| {}).unwrap();
    let error = temp_store("transfer-tree-large").import(&mut Cursor::new(&text), reordered.len() + 10, &mut |_, _| {}).unwrap_err();
    assert!(error.to_string().contains("reading it so would take more than"), "{error}");
}
