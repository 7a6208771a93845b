//! The format test vectors (docs/FORMAT.md section 12) against copal's Rust codec.
//!
//! Every valid vector must decode (`decode_value`, `decode_record_state`, `Descriptor::decode`)
//! to its tagged JSON and re-encode (`Value::encode`, `RecordHeader::write`, `Descriptor::encode`)
//! to its bytes; every invalid vector must fail with its `DecodeError` kind. The vectors are read
//! from `tests/vectors/vectors.txt`, the tab-separated form of `tests/vectors/vectors.json`, so
//! that this test needs no JSON parser: it serializes decoded values to the same compact JSON
//! (sorted keys, ASCII escapes, as Python's `json.dumps(sort_keys=True, ensure_ascii=True)`)
//! and compares text.
//!
//! A vector with a Rust `known_issue` (FORMAT.md section 11) must still fail its check; when it
//! passes, this test fails so that the marker is removed from vectors.json.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use copal_core::format::{
    decode_record_state, decode_value, oid_class, oid_seq, Descriptor, DescriptorSource, Reader, RecordHeader, TzInfo,
    Writer, FORMAT_VERSION,
};
use copal_core::{DecodeError, Value};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/vectors.txt");

/// One line of vectors.txt: `kind name hex expected reencoded rust_known_issue`.
struct Vector {
    kind: String,
    name: String,
    bytes: Vec<u8>,
    expected: String,
    reencoded: Option<Vec<u8>>,
    known_issue: Option<String>,
}

fn load() -> Vec<Vector> {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("cannot read {VECTORS}: {e}"));
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let columns: Vec<&str> = line.split('\t').collect();
            assert_eq!(columns.len(), 6, "malformed vector line: {line}");
            let optional = |c: &str| (c != "-").then(|| c.to_owned());
            Vector {
                kind: columns[0].to_owned(),
                name: columns[1].to_owned(),
                bytes: from_hex(columns[2]),
                expected: columns[3].to_owned(),
                reencoded: optional(columns[4]).map(|h| from_hex(&h)),
                known_issue: optional(columns[5]),
            }
        })
        .collect()
}

fn from_hex(text: &str) -> Vec<u8> {
    assert_eq!(text.len() % 2, 0, "odd hex length: {text}");
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digit")).collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The descriptor table of the vector file (descriptor id -> field count).
struct Table(HashMap<u32, usize>);

impl DescriptorSource for Table {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        self.0.get(&id).copied().ok_or(DecodeError::UnknownDescriptor { id })
    }
}

fn table(vectors: &[Vector]) -> Table {
    let descriptors = vectors.iter().filter(|v| v.kind == "descriptor");
    Table(
        descriptors
            .map(|v| {
                let id: u32 = v.name.parse().expect("descriptor id");
                (id, Descriptor::decode(id, &v.bytes).expect("descriptor vectors are valid").fields.len())
            })
            .collect(),
    )
}

/// The error kind of FORMAT.md section 1.
fn kind(error: &DecodeError) -> String {
    error.kind().to_owned()
}

/// What decoding produced: the JSON of the decoded value and its re-encoding, or an error kind
/// ("panic" if the decoder panicked).
type Outcome = Result<(String, Vec<u8>), String>;

fn decode_standalone(bytes: &[u8], table: &Table) -> Outcome {
    guarded(|| {
        let mut r = Reader::new(bytes);
        let value = decode_value(&mut r, table).map_err(|e| kind(&e))?;
        if !r.is_empty() {
            return Err("TrailingBytes".to_owned());
        }
        let mut w = Writer::new();
        value.encode(&mut w);
        Ok((json(&value), w.buf))
    })
}

fn decode_record(bytes: &[u8], table: &Table) -> Outcome {
    guarded(|| {
        let (header, fields) = decode_record_state(bytes, table).map_err(|e| kind(&e))?;
        let mut w = Writer::new();
        header.write(&mut w);
        fields.iter().for_each(|f| f.encode(&mut w));
        Ok((record_json(&header, &fields), w.buf))
    })
}

thread_local! {
    static IN_DECODER: Cell<bool> = const { Cell::new(false) };
}

/// Runs a decoder, turning a panic into the outcome "panic" (corrupt input must never panic,
/// FORMAT.md section 9). Such panics are reported in one line instead of a backtrace; panics of
/// the test's own assertions keep the default report.
fn guarded(f: impl FnOnce() -> Outcome) -> Outcome {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_DECODER.with(Cell::get) {
                eprintln!("decoder panicked: {info}");
            } else {
                default(info);
            }
        }));
    });
    IN_DECODER.with(|flag| flag.set(true));
    let outcome = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err("panic".to_owned()));
    IN_DECODER.with(|flag| flag.set(false));
    outcome
}

// -- the tagged JSON form of FORMAT.md section 12, keys sorted ---------------------------------

fn json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn record_json(header: &RecordHeader, fields: &[Value]) -> String {
    let mut out = String::from("{\"fields\":");
    write_list(&mut out, fields);
    let _ = write!(
        out,
        ",\"header\":{{\"descriptor\":{},\"flags\":{},\"tid\":{},\"version\":{}}}}}",
        header.descriptor, header.flags, header.tid, FORMAT_VERSION
    );
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::None => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{{\"int\":{i}}}");
        }
        Value::BigInt(bytes) => {
            let _ = write!(out, "{{\"bigint\":\"{}\"}}", bigint_decimal(bytes));
        }
        Value::Float(f) => {
            let _ = write!(out, "{{\"float\":\"{:016x}\"}}", f.to_bits());
        }
        Value::Complex(re, im) => {
            let _ = write!(out, "{{\"complex\":[\"{:016x}\",\"{:016x}\"]}}", re.to_bits(), im.to_bits());
        }
        Value::Str(s) => tagged(out, "str", |out| write_string(out, s)),
        Value::StrSurrogates(bytes) => {
            let points: Vec<String> = code_points(bytes).iter().map(u32::to_string).collect();
            let _ = write!(out, "{{\"str_surrogates\":[{}]}}", points.join(","));
        }
        Value::Bytes(b) => {
            let _ = write!(out, "{{\"bytes\":\"{}\"}}", to_hex(b));
        }
        Value::ByteArray(b) => {
            let _ = write!(out, "{{\"bytearray\":\"{}\"}}", to_hex(b));
        }
        Value::List(items) => tagged(out, "list", |out| write_list(out, items)),
        Value::Tuple(items) => tagged(out, "tuple", |out| write_list(out, items)),
        Value::Set(items) => tagged(out, "set", |out| write_list(out, items)),
        Value::FrozenSet(items) => tagged(out, "frozenset", |out| write_list(out, items)),
        Value::Dict(pairs) => tagged(out, "dict", |out| {
            out.push('[');
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('[');
                write_value(out, k);
                out.push(',');
                write_value(out, v);
                out.push(']');
            }
            out.push(']');
        }),
        Value::DateTime { micros, tz, fold } => clock(out, "datetime", *fold, i128::from(*micros), tz),
        Value::Date { days } => {
            let _ = write!(out, "{{\"date\":{{\"days\":{days}}}}}");
        }
        Value::Time { micros, tz, fold } => clock(out, "time", *fold, i128::from(*micros), tz),
        Value::TimeDelta { days, seconds, micros } => {
            let _ = write!(out, "{{\"timedelta\":{{\"days\":{days},\"micros\":{micros},\"seconds\":{seconds}}}}}");
        }
        Value::Decimal(text) => tagged(out, "decimal", |out| write_string(out, text)),
        Value::Uuid(b) => {
            let h = to_hex(b);
            let _ = write!(out, "{{\"uuid\":\"{}-{}-{}-{}-{}\"}}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]);
        }
        Value::Enum { descriptor, member } => {
            let _ = write!(out, "{{\"enum\":{{\"descriptor\":{descriptor},\"member\":");
            write_string(out, member);
            out.push_str("}}");
        }
        Value::Ref(oid) => {
            let _ = write!(out, "{{\"ref\":{{\"class\":{},\"seq\":{}}}}}", oid_class(*oid), oid_seq(*oid));
        }
        Value::Object { descriptor, fields } => {
            let _ = write!(out, "{{\"object\":{{\"descriptor\":{descriptor},\"fields\":");
            write_list(out, fields);
            out.push_str("}}");
        }
        Value::Subclass { descriptor, base, fields } => {
            out.push_str("{\"subclass\":{\"base\":");
            write_value(out, base);
            let _ = write!(out, ",\"descriptor\":{descriptor},\"fields\":");
            write_list(out, fields);
            out.push_str("}}");
        }
        Value::BackRef(index) => {
            let _ = write!(out, "{{\"backref\":{index}}}");
        }
        // `Value` is not `#[non_exhaustive]` today; this arm keeps a new variant from compiling
        // silently into a wrong comparison if it becomes so.
        #[allow(unreachable_patterns)]
        other => panic!("no tagged JSON form for {other:?}"),
    }
}

fn tagged(out: &mut String, tag: &str, body: impl FnOnce(&mut String)) {
    let _ = write!(out, "{{\"{tag}\":");
    body(out);
    out.push('}');
}

fn write_list(out: &mut String, items: &[Value]) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_value(out, item);
    }
    out.push(']');
}

fn clock(out: &mut String, tag: &str, fold: bool, micros: i128, tz: &TzInfo) {
    let _ = write!(out, "{{\"{tag}\":{{\"fold\":{fold},\"micros\":{micros},\"tz\":");
    match tz {
        TzInfo::Naive => out.push_str("null"),
        TzInfo::Offset(offset) => {
            let _ = write!(out, "{{\"offset\":{offset}}}");
        }
        TzInfo::Named(key) => {
            out.push_str("{\"zone\":");
            write_string(out, key);
            out.push('}');
        }
    }
    out.push_str("}}");
}

/// A JSON string as Python's `json.dumps(..., ensure_ascii=True)` writes it.
fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// The code points of generalized UTF-8 (FORMAT.md section 6.3), where each surrogate is its own
/// 3-byte sequence. Valid vectors only: malformed input yields U+FFFD, which no vector expects.
fn code_points(bytes: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let lead = bytes[i];
        let (len, initial) = match lead {
            0x00..=0x7f => (1, u32::from(lead)),
            0xc2..=0xdf => (2, u32::from(lead & 0x1f)),
            0xe0..=0xef => (3, u32::from(lead & 0x0f)),
            0xf0..=0xf4 => (4, u32::from(lead & 0x07)),
            _ => (1, 0xfffd),
        };
        let continuation = bytes.get(i + 1..i + len).unwrap_or(&[]);
        if continuation.len() + 1 != len || continuation.iter().any(|b| b & 0xc0 != 0x80) {
            out.push(0xfffd);
            i += 1;
            continue;
        }
        out.push(continuation.iter().fold(initial, |cp, b| (cp << 6) | u32::from(b & 0x3f)));
        i += len;
    }
    out
}

/// The decimal text of a little-endian two's complement integer.
fn bigint_decimal(le: &[u8]) -> String {
    let negative = le.last().is_some_and(|b| b & 0x80 != 0);
    // Magnitude, little-endian: negate two's complement (invert, add one) for negative values.
    let mut magnitude: Vec<u8> = le.iter().map(|b| if negative { !b } else { *b }).collect();
    if negative {
        for byte in magnitude.iter_mut() {
            let (sum, carry) = byte.overflowing_add(1);
            *byte = sum;
            if !carry {
                break;
            }
        }
    }
    // Repeated division by ten, most significant byte first.
    let mut digits = Vec::new();
    let mut number: Vec<u8> = magnitude.into_iter().rev().skip_while(|b| *b == 0).collect();
    while !number.is_empty() {
        let mut remainder = 0u32;
        for byte in number.iter_mut() {
            let current = (remainder << 8) | u32::from(*byte);
            *byte = (current / 10) as u8;
            remainder = current % 10;
        }
        digits.push(char::from(b'0' + remainder as u8));
        number = number.into_iter().skip_while(|b| *b == 0).collect();
    }
    if digits.is_empty() {
        return "0".to_owned();
    }
    let sign = if negative { "-" } else { "" };
    format!("{sign}{}", digits.into_iter().rev().collect::<String>())
}

// -- the checks ----------------------------------------------------------------------------------

/// Collects failures so that one run reports every vector that disagrees.
#[derive(Default)]
struct Report {
    failures: Vec<String>,
    checked: usize,
}

impl Report {
    /// Records the result of `vector`'s check. A vector with a known issue is expected to fail it.
    fn check(&mut self, vector: &Vector, ok: bool, detail: impl FnOnce() -> String) {
        self.checked += 1;
        match (&vector.known_issue, ok) {
            (None, true) => {}
            (None, false) => self.failures.push(format!("{}: {}", vector.name, detail())),
            (Some(issue), false) => eprintln!("known issue, still present: {}: {issue}", vector.name),
            (Some(issue), true) => self.failures.push(format!(
                "{}: passes now, although marked as a known issue ({issue}); remove the known_issue \
                 from tests/vectors/vectors.json and regenerate vectors.txt",
                vector.name
            )),
        }
    }

    fn finish(self, what: &str) {
        assert!(self.checked > 0, "no {what} vectors found in {VECTORS}");
        assert!(self.failures.is_empty(), "{} {what} vector(s) failed:\n{}", self.failures.len(), self.failures.join("\n"));
    }
}

fn check_valid(report: &mut Report, vector: &Vector, outcome: Outcome) {
    let expected_bytes = vector.reencoded.as_deref().unwrap_or(&vector.bytes);
    let ok = matches!(&outcome, Ok((text, bytes)) if *text == vector.expected && bytes == expected_bytes);
    report.check(vector, ok, || match &outcome {
        Err(kind) => format!("failed to decode: {kind}"),
        Ok((text, _)) if *text != vector.expected => format!("decoded to\n  {text}\nexpected\n  {}", vector.expected),
        Ok((_, bytes)) => format!("re-encoded to {}, expected {}", to_hex(bytes), to_hex(expected_bytes)),
    });
}

fn check_invalid(report: &mut Report, vector: &Vector, outcome: Outcome) {
    let ok = matches!(&outcome, Err(kind) if *kind == vector.expected);
    report.check(vector, ok, || match &outcome {
        Err(kind) => format!("failed with {kind}, expected {}", vector.expected),
        Ok((text, _)) => format!("decoded to {text}, expected {}", vector.expected),
    });
}

#[test]
fn descriptors_decode_and_reencode() {
    let vectors = load();
    let mut report = Report::default();
    for vector in vectors.iter().filter(|v| v.kind == "descriptor") {
        let id: u32 = vector.name.parse().expect("descriptor id");
        let outcome = guarded(|| {
            let d = Descriptor::decode(id, &vector.bytes).map_err(|e| kind(&e))?;
            let mut text = format!("{{\"class\":{},\"fields\":[", d.class_no);
            for (i, field) in d.fields.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                write_string(&mut text, field);
            }
            text.push_str("],\"type\":");
            write_string(&mut text, &d.type_name);
            text.push('}');
            Ok((text, d.encode()))
        });
        check_valid(&mut report, vector, outcome);
    }
    report.finish("descriptor");
}

#[test]
fn values_decode_to_their_json_and_reencode_to_their_bytes() {
    let vectors = load();
    let table = table(&vectors);
    let mut report = Report::default();
    for vector in vectors.iter().filter(|v| v.kind == "value") {
        check_valid(&mut report, vector, decode_standalone(&vector.bytes, &table));
    }
    report.finish("value");
}

#[test]
fn records_decode_to_their_json_and_reencode_to_their_bytes() {
    let vectors = load();
    let table = table(&vectors);
    let mut report = Report::default();
    for vector in vectors.iter().filter(|v| v.kind == "record") {
        check_valid(&mut report, vector, decode_record(&vector.bytes, &table));
    }
    report.finish("record");
}

#[test]
fn invalid_vectors_fail_with_their_error_kind() {
    let vectors = load();
    let table = table(&vectors);
    let mut report = Report::default();
    for vector in &vectors {
        let outcome = match vector.kind.as_str() {
            "invalid-value" => decode_standalone(&vector.bytes, &table),
            "invalid-record" => decode_record(&vector.bytes, &table),
            _ => continue,
        };
        check_invalid(&mut report, vector, outcome);
    }
    report.finish("invalid");
}

#[test]
fn every_line_has_a_known_kind() {
    let known = ["descriptor", "value", "record", "invalid-value", "invalid-record"];
    for vector in load() {
        assert!(known.contains(&vector.kind.as_str()), "unknown vector kind {:?} ({})", vector.kind, vector.name);
    }
}

/// Too large for the vector file: a BIGINT of 1 MiB is accepted, one byte more is not
/// (FORMAT.md section 6.1).
#[test]
fn bigint_size_limit() {
    let table = Table(HashMap::new());
    let limit = 1usize << 20;
    for (size, expected) in [(limit, Ok(())), (limit + 1, Err("OutOfRange".to_owned()))] {
        let mut w = Writer::new();
        w.bigint_le(&vec![0u8; size]);
        let result = decode_value(&mut Reader::new(&w.buf), &table).map(drop).map_err(|e| kind(&e));
        assert_eq!(result, expected, "BIGINT of {size} bytes");
    }
}

#[test]
fn bigint_decimal_conversion() {
    assert_eq!(bigint_decimal(&[]), "0");
    assert_eq!(bigint_decimal(&[0xff]), "-1");
    assert_eq!(bigint_decimal(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0]), "9223372036854775808");
    assert_eq!(bigint_decimal(&[0, 0, 0, 0, 0, 0, 0, 0, 0x80]), "-2361183241434822606848");
}
