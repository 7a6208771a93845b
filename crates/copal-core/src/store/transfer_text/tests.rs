//! The byte path of records' documents (transfer_record.rs) against the value-tree path of
//! this file: the same bodies on export, the same records on import, and on damaged input the
//! byte path answers only where the tree path gives the same result.

use std::io::Cursor;

use super::*;
use crate::format::{make_oid, TzInfo};
use crate::store::test_support::record;
use crate::store::transfer_record::{body_record, record_document, DocumentTables};
use crate::text::body_of;

const PERSON: u32 = 3;

/// Enum types whose ids follow the others', enough for a document to name more types than the
/// writers and readers search (past `text::SEARCHED`, they index them).
const SHADES: std::ops::Range<u32> = 10..22;

fn descriptors() -> Vec<Descriptor> {
    let d = |id: u32, type_name: &str, fields: &[&str]| Descriptor { id, class_no: id as u16, type_name: type_name.into(), fields: fields.iter().map(|f| f.to_string()).collect() };
    let mut all = vec![d(PERSON, "app.Person", &["name", "friends", "extra"]), d(4, "app.Point", &["x", "y"]), d(5, "app.Color", &[]), d(6, "app.Tags", &["label"])];
    all.extend(SHADES.map(|id| d(id, &format!("app.Shade{id}"), &[])));
    all
}

/// Records of `app.Person` (oid, record with tid 0) holding every kind of value, references,
/// shared values, and objects of its own type stored by value.
fn records() -> Vec<(Oid, Vec<u8>)> {
    let point = |x: Value| Value::Object { descriptor: 4, fields: vec![x, Value::Float(-0.5)] };
    let s = |text: &str| Value::Str(text.into());
    let people = [
        [s("ann"), Value::List(vec![Value::Ref(make_oid(3, 1)), Value::Ref(make_oid(3, 0x1234_5678_9abc))]), Value::None],
        // Slot 0 is the list, 1 the point in it: both are shared.
        [s("bob\n\"é"), Value::List(vec![point(Value::Int(-7)), Value::BackRef(0)]), Value::BackRef(1)],
        [
            Value::Enum { descriptor: 5, member: "RED".into() },
            Value::Subclass { descriptor: 6, base: Box::new(Value::List(vec![Value::Int(1)])), fields: vec![s("tags")] },
            Value::Object { descriptor: PERSON, fields: vec![Value::Bool(true), Value::Bool(false), Value::Ref(make_oid(4, 0))] },
        ],
        [
            Value::Dict(vec![(Value::Tuple(vec![Value::Int(1), s("k")]), Value::FrozenSet(vec![Value::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 1])])), (s("$x"), Value::Set(vec![Value::Complex(1.0, 2.0)]))]),
            Value::Tuple(vec![Value::StrSurrogates(vec![0xED, 0xA0, 0x80]), Value::Bytes(vec![0, 255]), Value::ByteArray(vec![7]), Value::BackRef(0)]),
            Value::List(vec![
                Value::DateTime { micros: 1_700_000_000_000_000, tz: TzInfo::Offset(3_600_000_000), fold: false },
                Value::DateTime { micros: -5, tz: TzInfo::Named("Europe/Paris".into()), fold: true },
                Value::Date { days: 19_000 },
                Value::Time { micros: 5, tz: TzInfo::Naive, fold: false },
                Value::TimeDelta { days: -1, seconds: 3, micros: 4 },
                Value::Decimal("1.50".into()),
                Value::Uuid([9; 16]),
                Value::Float(f64::NAN),
            ]),
        ],
    ];
    let shades = (0..3 * SHADES.len() as u32).map(|i| Value::Enum { descriptor: SHADES.start + i % SHADES.len() as u32, member: format!("m{i}") });
    let many_types = [Value::List(shades.collect()), Value::Ref(make_oid(3, 0)), Value::None];
    people.iter().chain([&many_types]).enumerate().map(|(i, fields)| (make_oid(3, i as u64), record(PERSON, 0, fields))).collect()
}

fn writer(sink: &mut Vec<u8>, xml: bool) -> TextWriter<'_> {
    let mut writer = TextWriter::new(sink, xml).unwrap();
    for d in descriptors() {
        writer.write_entry(&Entry::Descriptor(d)).unwrap();
    }
    writer
}

fn reader(input: &mut Cursor<Vec<u8>>, xml: bool) -> TextReader<'_> {
    let mut reader = TextReader::new(input, xml, usize::MAX);
    for d in descriptors() {
        reader.ids.insert((d.type_name, d.fields), d.id);
    }
    reader
}

/// The body of a record's document as the byte path makes it, with the tables it made before.
fn record_body(writer: &TextWriter<'_>, tables: &mut DocumentTables, oid: Oid, record: &[u8]) -> Option<Vec<u8>> {
    let mut value = Vec::new();
    let table = record_document(&writer.known.0, oid, record, tables, &mut value)?;
    Some(body_of(table, &value))
}

fn tree_body(writer: &mut TextWriter<'_>, oid: Oid, record: &[u8]) -> Option<Vec<u8>> {
    writer.record(oid, record).ok().map(|body| body.encode())
}

fn tree_record(reader: &mut TextReader<'_>, body: Body) -> Option<(Oid, Vec<u8>)> {
    match reader.entry(body) {
        Ok(Entry::Record { oid, record }) => Some((oid, record.into_owned())),
        _ => None,
    }
}

#[test]
fn records_take_the_byte_path_both_ways_and_match_the_tree_path() {
    for xml in [false, true] {
        let (mut sink, mut input) = (Vec::new(), Cursor::new(Vec::new()));
        let (mut writer, mut reader, mut tables) = (writer(&mut sink, xml), reader(&mut input, xml), DocumentTables::default());
        // Twice: the second time, both ways find the tables they made the first.
        for (oid, stored) in records().into_iter().chain(records()) {
            let body = record_body(&writer, &mut tables, oid, &stored).expect("read by the byte path");
            assert_eq!(Some(&body), tree_body(&mut writer, oid, &stored).as_ref(), "{oid:#x}");
            let text = if xml { xml::to_xml(&body) } else { json::to_json(&body) }.unwrap();
            if !xml {
                // What an export writes: the value beside its kept table.
                let descriptors: Vec<Arc<Descriptor>> = descriptors().into_iter().map(Arc::new).collect();
                assert_eq!(TextWriter::record_json(&descriptors, oid, &stored).unwrap(), text);
            }
            let (table, value) = if xml { xml::table_and_value_from_xml(&text, usize::MAX) } else { json::table_and_value_from_json(&text, usize::MAX) }.unwrap();
            let read = body_record(&table, &value, &reader.ids, &mut reader.tables).expect("read by the byte path");
            assert_eq!(read, (oid, stored.clone()), "{text}");
            let tree = if xml { xml::from_xml(&text, usize::MAX) } else { json::from_json(&text, usize::MAX) }.unwrap();
            assert_eq!(tree_record(&mut reader, tree), Some(read), "{text}");
        }
    }
}

#[test]
fn a_record_laid_out_otherwise_goes_through_the_tree_path() {
    let (oid, stored) = records().swap_remove(1);
    let mut sink = Vec::new();
    let mut writer = writer(&mut sink, false);
    writer.write_entry(&Entry::Record { oid, record: stored.as_slice().into() }).unwrap();
    let text = String::from_utf8(sink).unwrap();
    let line = text.lines().last().unwrap();
    // The flags after the record: the members in another order than an export writes them.
    let without_flags = line.replacen(r#""flags":0,"#, "", 1);
    let reordered = format!(r#"{},"flags":0}}}}"#, without_flags.strip_suffix("}}").unwrap());
    assert_eq!(reordered.len(), line.len());
    let mut input = Cursor::new(format!("{text}{reordered}\n").into_bytes());
    let mut reader = TextReader::new(&mut input, false, usize::MAX);
    let mut records = Vec::new();
    while let Some(entry) = reader.next_entry().unwrap() {
        if let Entry::Record { oid, record } = entry {
            records.push((oid, record.into_owned()));
        }
    }
    let (table, value) = json::table_and_value_from_json(&reordered, usize::MAX).unwrap();
    assert!(body_record(&table, &value, &reader.ids, &mut reader.tables).is_none());
    assert_eq!(records, [(oid, stored.clone()), (oid, stored)]);
}

#[test]
fn a_damaged_record_is_exported_by_the_byte_path_only_as_the_tree_path_exports_it() {
    let mut sink = Vec::new();
    let mut writer = writer(&mut sink, false);
    let mut read = 0;
    for (oid, stored) in records() {
        let mut damaged: Vec<Vec<u8>> = (0..stored.len()).map(|end| stored[..end].to_vec()).collect();
        for at in 0..stored.len() {
            for byte in [0x00, 0x01, 0x03, 0x07, 0x0B, 0x0C, 0x16, 0x17, 0x18, 0x1A, 0x1B, 0x40, 0x7F, 0x80, 0xFF] {
                let mut bytes = stored.clone();
                bytes[at] = byte;
                damaged.push(bytes);
            }
        }
        // Nested as deep as a record may be, and one level deeper.
        for levels in [256, 257] {
            let nested = (0..levels).fold(Value::None, |inner, _| Value::List(vec![inner]));
            damaged.push(record(PERSON, 0, &[nested, Value::None, Value::None]));
        }
        for bytes in damaged {
            if let Some(body) = record_body(&writer, &mut DocumentTables::default(), oid, &bytes) {
                read += 1;
                assert_eq!(Some(body), tree_body(&mut writer, oid, &bytes), "{bytes:02x?}");
            }
        }
    }
    assert!(read > 100, "{read}");
}

#[test]
fn a_damaged_document_is_imported_by_the_byte_path_only_as_the_tree_path_imports_it() {
    let mut input = Cursor::new(Vec::new());
    let mut reader = reader(&mut input, false);
    let mut read = 0;
    for (oid, stored) in records() {
        let mut sink = Vec::new();
        writer(&mut sink, false).write_entry(&Entry::Record { oid, record: stored.as_slice().into() }).unwrap();
        let line = String::from_utf8(sink).unwrap().lines().last().unwrap().to_owned();
        for at in (0..line.len()).filter(|&at| line.is_char_boundary(at)) {
            for replacement in ["0", "1", "9", "x", "\"", "]", "}", ""] {
                let end = (at + 1..=line.len()).find(|&end| line.is_char_boundary(end)).unwrap_or(at);
                let damaged = format!("{}{replacement}{}", &line[..at], &line[end..]);
                let Ok((table, value)) = json::table_and_value_from_json(&damaged, usize::MAX) else { continue };
                if let Some(fast) = body_record(&table, &value, &reader.ids, &mut reader.tables) {
                    read += 1;
                    assert_eq!(Some(fast), tree_record(&mut reader, json::from_json(&damaged, usize::MAX).unwrap()), "{damaged}");
                }
            }
        }
    }
    assert!(read > 100, "{read}");
}

#[test]
fn oids_are_written_as_format_writes_them() {
    for oid in [0, 1, 0xF, 0x10, make_oid(3, 0), make_oid(u16::MAX, crate::format::MAX_SEQ), u64::MAX] {
        assert_eq!(super::super::transfer_record::oid_text(oid, &mut [0; 18]), format!("{oid:#x}").as_bytes());
    }
}

#[test]
fn lines_are_read_up_to_their_limit_without_room_beyond_it() {
    let text = format!("short\n{}\nlast", "x".repeat(100_000));
    let mut input = std::io::BufReader::with_capacity(1000, text.as_bytes());
    let mut line = Vec::new();
    assert!(read_line(&mut input, &mut line, 50_001).unwrap());
    assert_eq!(line, b"short\n");
    assert!(read_line(&mut input, &mut line, 50_001).unwrap());
    assert_eq!((line.len(), line.capacity()), (50_001, 50_001));
    let mut input = std::io::BufReader::with_capacity(7, text.as_bytes());
    let lines: Vec<Vec<u8>> = std::iter::from_fn(|| read_line(&mut input, &mut line, usize::MAX).unwrap().then(|| line.clone())).collect();
    assert_eq!(lines.concat(), text.as_bytes());
    assert_eq!(lines.len(), 3);
}
