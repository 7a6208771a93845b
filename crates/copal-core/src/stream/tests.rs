//! Streams and archives read and written from Rust alone: the stream test vectors
//! (tests/vectors/stream_vectors.json, docs/STREAM.md section 7) and archives round-tripped
//! through every codec.

use super::archive::{index_bytes, write_archive, Archive, ARCHIVE, WIDE_OFFSETS};
use super::compression::{GZIP, LZ4, NONE, ZSTD};
use super::*;
use crate::format::{decode_value, tag, DescriptorSource, Value};
use crate::text::{write_table, TableEntry};

const VECTORS: &str = include_str!("../../../../tests/vectors/stream_vectors.json");

/// One vector's top-level members, as their JSON text (strings without their quotes).
#[derive(Default)]
struct Vector {
    members: Vec<(String, String)>,
}

impl Vector {
    fn get(&self, key: &str) -> &str {
        self.members.iter().find(|(k, _)| k == key).map_or_else(|| panic!("vector without {key}"), |(_, v)| v.as_str())
    }

    fn bytes(&self, key: &str) -> Vec<u8> {
        let hex = self.get(key);
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect()
    }
}

/// The vectors of the `section` array ("valid" or "invalid"). The file is written by Python's
/// `json.dump(indent=1)`: a vector's own members are the lines indented by three spaces, so this
/// needs no JSON parser.
fn vectors(section: &str) -> Vec<Vector> {
    let mut out: Vec<Vector> = Vec::new();
    let mut inside = false;
    for line in VECTORS.lines() {
        if let Some(name) = line.strip_prefix(" \"").and_then(|rest| rest.strip_suffix("\": [")) {
            inside = name == section;
            continue;
        }
        let Some(member) = line.strip_prefix("   \"").filter(|_| inside) else { continue };
        let (key, value) = member.split_once("\": ").expect("a member line");
        let value = value.trim_end_matches(',').trim_matches('"').to_owned();
        if key == "name" {
            out.push(Vector::default());
        }
        out.last_mut().expect("name first").members.push((key.to_owned(), value));
    }
    assert!(out.len() > 20, "too few {section} vectors read: {}", out.len());
    out
}

#[test]
fn valid_vectors_read_to_their_body_and_write_back() {
    for vector in vectors("valid") {
        let name = vector.get("name");
        let bytes = vector.bytes("hex");
        let stream = Stream::read(&bytes, DEFAULT_MAX_SIZE).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(stream.version.to_string(), vector.get("version"), "{name}");
        assert_eq!(&stream.body[..], &vector.bytes("body")[..], "{name}");
        let header = Header::read(&bytes, &STREAM).unwrap();
        let codec = Codec::from_code(header.flags);
        assert_eq!(codec.map_or("none", Codec::name), vector.get("compression"), "{name}");
        let compression = Compression::new(header.flags, None).unwrap();
        let written = Frame::new(&STREAM, stream.version, 0, &[&stream.body], compression).unwrap().to_vec();
        if vector.get("canonical") == "true" {
            assert_eq!(written, bytes, "{name}");
        }
        assert_eq!(Stream::read(&written, DEFAULT_MAX_SIZE).unwrap().body, stream.body, "{name}");
    }
}

/// Kinds that only the container (header, compression) can produce.
const CONTAINER_KINDS: [&str; 4] = ["BadMagic", "UnsupportedVersion", "BadCompression", "TooLarge"];

#[test]
fn invalid_vectors_fail_with_their_kind_in_the_container_or_the_value() {
    let mut in_container = 0;
    for vector in vectors("invalid") {
        let (name, expected) = (vector.get("name"), vector.get("error"));
        match Stream::read(&vector.bytes("hex"), DEFAULT_MAX_SIZE) {
            Err(e) => {
                assert_eq!(e.kind(), expected, "{name}: {e}");
                in_container += 1;
            }
            // The error is in the value, which the value decoders check.
            Ok(_) => assert!(!CONTAINER_KINDS.contains(&expected), "{name}: read although it is {expected}"),
        }
    }
    assert!(in_container >= 15, "only {in_container} vectors fail in the container");
}

#[test]
fn a_bomb_stops_at_max_size() {
    let body = vec![0u8; 1 << 20];
    for code in [ZSTD, GZIP, LZ4] {
        let stream = Frame::new(&STREAM, 1, 0, &[&body], Compression::new(code, None).unwrap()).unwrap().to_vec();
        assert!(stream.len() < 8 << 10, "{code}: {}", stream.len());
        let error = Stream::read(&stream, 1000).unwrap_err();
        assert_eq!(error.kind(), "TooLarge");
        assert!(error.to_string().contains("more than max_size = 1000 bytes"), "{error}");
    }
}

#[test]
fn header_errors_name_the_container() {
    let error = Stream::read(b"CPA1\x01\x00\x00", DEFAULT_MAX_SIZE).unwrap_err();
    assert_eq!(error.to_string(), "corrupt stream: not a copal stream (it does not start with the magic bytes \"CPL1\")");
    let error = Archive::read(b"CPA1\x02\x00\x00", DEFAULT_MAX_SIZE).unwrap_err();
    assert_eq!(error.to_string(), "corrupt archive: archive version 2 is not supported by this copal (reads versions 1 to 1)");
    // WIDE_OFFSETS is an archive flag only.
    let error = Stream::read(&[b"CPL1".as_slice(), &[1, WIDE_OFFSETS, 0]].concat(), DEFAULT_MAX_SIZE).unwrap_err();
    assert_eq!(error.kind(), "OutOfRange");
}

struct NoDescriptors;

impl DescriptorSource for NoDescriptors {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        Err(DecodeError::UnknownDescriptor { id })
    }
}

fn encoded_values(values: &[Value]) -> (Vec<u8>, Vec<usize>) {
    let mut w = Writer::new();
    let ends = values
        .iter()
        .map(|value| {
            value.encode(&mut w);
            w.buf.len()
        })
        .collect();
    (w.buf, ends)
}

#[test]
fn archives_round_trip_through_every_codec() {
    let values = [Value::Int(7), Value::Str("copal".into()), Value::List(vec![Value::None, Value::Bool(true)]), Value::Str(String::new())];
    let (bytes, ends) = encoded_values(&values);
    let table = [0u8];
    for code in [NONE, ZSTD, GZIP, LZ4] {
        let archive = write_archive(&table, &bytes, &ends, Compression::new(code, None).unwrap()).unwrap();
        let read = Archive::read(&archive, DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(read.index.len(), values.len());
        assert!(read.table.entries.is_empty());
        for (k, expected) in values.iter().enumerate() {
            let mut r = Reader::new(read.value(k).unwrap());
            assert_eq!(&decode_value(&mut r, &NoDescriptors).unwrap(), expected, "{code}: value {k}");
            assert!(r.is_empty());
        }
    }
    let empty = write_archive(&table, &[], &[], Compression::NONE).unwrap();
    assert!(Archive::read(&empty, DEFAULT_MAX_SIZE).unwrap().index.is_empty());
}

#[test]
fn wide_offsets_are_read() {
    // A section past 4 GiB is not made here: the flag and width are checked on a small one.
    let (values, ends) = encoded_values(&[Value::Int(1), Value::Int(2)]);
    let (_, narrow) = index_bytes(1, values.len(), &ends);
    let mut wide = Writer::new();
    for chunk in narrow[..narrow.len() - 8].chunks(4) {
        wide.bytes(&u64::from(u32::from_le_bytes(chunk.try_into().unwrap())).to_le_bytes());
    }
    wide.bytes(&narrow[narrow.len() - 8..]);
    let parts: [&[u8]; 3] = [&[0], &values, &wide.buf];
    let archive = Frame::new(&ARCHIVE, 1, WIDE_OFFSETS, &parts, Compression::NONE).unwrap().to_vec();
    let read = Archive::read(&archive, DEFAULT_MAX_SIZE).unwrap();
    assert_eq!(read.value(1).unwrap(), &values[ends[0]..]);
}

#[test]
fn damaged_indexes_are_errors() {
    let (values, ends) = encoded_values(&[Value::Int(1), Value::Int(2)]);
    let section = |index: &[u8]| {
        let parts: [&[u8]; 3] = [&[0], &values, index];
        Frame::new(&ARCHIVE, 1, 0, &parts, Compression::NONE).unwrap().to_vec()
    };
    let (_, index) = index_bytes(1, values.len(), &ends);
    // A count larger than the index can hold.
    let mut count_too_large = index.clone();
    count_too_large.splice(index.len() - 8.., 99u64.to_le_bytes());
    assert_eq!(Archive::read(&section(&count_too_large), DEFAULT_MAX_SIZE).unwrap_err().kind(), "LengthTooLarge");
    // A last offset that is not the index's start.
    let mut last = index.clone();
    last[8] ^= 1;
    assert_eq!(Archive::read(&section(&last), DEFAULT_MAX_SIZE).unwrap_err().kind(), "OutOfRange");
    // A value offset inside the table: the archive opens, the value does not read.
    let mut first = index.clone();
    first[0] = 0;
    let archive = section(&first);
    let read = Archive::read(&archive, DEFAULT_MAX_SIZE).unwrap();
    assert!(read.value(1).is_ok());
    let error = read.value(0).unwrap_err();
    assert_eq!(error.to_string(), "corrupt archive: the index gives value 0 the bytes 0..3, outside the values (1..5)");
    // No room for the count.
    assert_eq!(Archive::read(&section(&[]), DEFAULT_MAX_SIZE).unwrap_err().kind(), "Truncated");
}

/// The stream of `version` whose table has the plain `entries` (type name and fields, every
/// field of kind ANY from version 3 on) and whose value is `value`.
fn stream_of(version: u8, entries: &[(&str, &[&str])], value: &[u8]) -> Vec<u8> {
    let table: Vec<TableEntry> = entries
        .iter()
        .map(|(type_name, fields)| TableEntry { persistent: false, type_name: (*type_name).to_owned(), fields: fields.iter().map(|f| (*f).to_owned()).collect() })
        .collect();
    let mut body = Writer::new();
    write_table(&mut body, &table);
    if version >= TYPED_OBJECTS_VERSION {
        table.iter().for_each(|entry| entry.fields.iter().for_each(|_| body.u8(FieldKind::Any.byte())));
    }
    body.bytes(value);
    Frame::new(&STREAM, version, 0, &[&body.buf], Compression::NONE).unwrap().to_vec()
}

fn decoded(stream: &[u8]) -> Result<Value, &'static str> {
    Stream::read(stream, DEFAULT_MAX_SIZE).unwrap().decode_value().map_err(|e| e.kind())
}

/// A superseded SUBCLASS copy stands for a SUBCLASS of its type: of another descriptor with the
/// same type name (one class, two field lists), not of another type.
#[test]
fn a_superseded_subclass_copy_stands_for_a_subclass_of_its_type_name() {
    // SUBCLASS 0 (slot 0), base SUPERSEDED_TUPLE of 1 item: a list (slot 1) holding SUBCLASS 1
    // (slot 2) of base TUPLE holding a BACKREF to the list; the copy is slot 2's; field `a` None.
    let value = [
        &[tag::SUBCLASS, 0, tag::SUPERSEDED_TUPLE, 1, tag::LIST, 1, tag::SUBCLASS, 1, tag::TUPLE, 1, tag::BACKREF, 1][..],
        &[tag::NONE, 2, tag::NONE],
    ]
    .concat();
    let same_type = stream_of(4, &[("m.T", &["a"]), ("m.T", &["b"])], &value);
    let Value::Subclass { base, .. } = decoded(&same_type).unwrap() else { panic!("not a subclass") };
    assert!(matches!(*base, Value::SupersededTuple { by: 2, .. }), "{base:?}");
    assert_eq!(decoded(&stream_of(4, &[("m.T", &["a"]), ("m.U", &["b"])], &value)), Err("BadBackRef"));
    // In version 3, the copy is an unknown SUBCLASS base.
    assert_eq!(decoded(&stream_of(3, &[("m.T", &["a"]), ("m.T", &["b"])], &value)), Err("UnknownTag"));
}

/// The STR base of a SUBCLASS is no STR value of the stream: it takes no string slot, so a
/// STRREF after it refers to none; a STR value does take one.
#[test]
fn a_str_base_takes_no_string_slot() {
    let base_then_strref = [tag::LIST, 2, tag::SUBCLASS, 0, tag::STR, 1, b's', tag::STRREF, 0];
    assert_eq!(decoded(&stream_of(4, &[("m.S", &[])], &base_then_strref)), Err("BadBackRef"));
    let str_then_strref = [tag::LIST, 2, tag::STR, 1, b's', tag::STRREF, 0];
    let expected = Value::List(vec![Value::Str("s".into()), Value::StrRef(0)]);
    assert_eq!(decoded(&stream_of(2, &[], &str_then_strref)), Ok(expected));
    assert_eq!(decoded(&stream_of(1, &[], &str_then_strref)), Err("UnknownTag"));
}

/// What follows the value, and a value that ends early, are errors of the value, with
/// offsets counted from the start of the body.
#[test]
fn a_stream_value_ends_the_body() {
    let error = Stream::read(&stream_of(4, &[], &[tag::NONE, tag::NONE]), DEFAULT_MAX_SIZE).unwrap().decode_value().unwrap_err();
    assert_eq!(error, StreamError::Body { part: "stream value", error: DecodeError::TrailingBytes { offset: 2 } });
    assert_eq!(decoded(&stream_of(4, &[], &[tag::SUPERSEDED_TUPLE, 0])), Err("Truncated"));
}
