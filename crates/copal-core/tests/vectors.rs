//! The format test vectors (docs/FORMAT.md section 12) and the stream test vectors
//! (docs/STREAM.md section 9) against copal's Rust codec.
//!
//! Every valid vector must decode (`decode_value`, `decode_record_state`, `Descriptor::decode`)
//! to its tagged JSON and re-encode (`Value::encode`, `RecordHeader::write`, `Descriptor::encode`)
//! to its bytes; every invalid vector must fail with its `DecodeError` kind. The vectors are read
//! from `tests/vectors/vectors.txt`, the tab-separated form of `tests/vectors/vectors.json`: this
//! test serializes decoded values to the same compact JSON (sorted keys, ASCII escapes, as
//! Python's `json.dumps(sort_keys=True, ensure_ascii=True)`) and compares text.
//!
//! Every valid stream vector (`tests/vectors/stream_vectors*.json`, versions 1 to 4) must read
//! (`Stream::read`) to its version, descriptor table and body, and its value decode
//! (`Stream::decode_value`) to its tagged JSON; every invalid one must fail with its error kind,
//! in the container or in the value. Those files are read with `JsonText`, which writes their
//! members back in the compact form above.
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
use copal_core::format::decode_value_with;
use copal_core::stream::{value_forms, Stream, DEFAULT_MAX_SIZE};
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
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
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
        Value::StrRef(slot) => {
            let _ = write!(out, "{{\"strref\":{slot}}}");
        }
        Value::SupersededTuple { items, by } => superseded(out, "superseded_tuple", items, *by),
        Value::SupersededFrozenSet { items, by } => superseded(out, "superseded_frozenset", items, *by),
        // `Value` is not `#[non_exhaustive]` today; this arm keeps a new variant from compiling
        // silently into a wrong comparison if it becomes so.
        #[allow(unreachable_patterns)]
        other => panic!("no tagged JSON form for {other:?}"),
    }
}

/// A superseded copy: `{"superseded_tuple": {"by": k, "items": [...]}}` (docs/STREAM.md section 5).
fn superseded(out: &mut String, tag: &str, items: &[Value], by: u32) {
    let _ = write!(out, "{{\"{tag}\":{{\"by\":{by},\"items\":");
    write_list(out, items);
    out.push_str("}}");
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

// -- the stream vectors (docs/STREAM.md section 9) --------------------------------------------------

const STREAM_VECTOR_FILES: [&str; 3] = ["stream_vectors.json", "stream_vectors_v1.json", "stream_vectors_v2.json"];

/// Invalid vectors of the frozen files that newer readers read: streams of `None` in the next
/// version (docs/STREAM.md section 9).
const READ_BY_NEWER_READERS: [(&str, &str); 2] = [("stream_vectors_v1.json", "version_2"), ("stream_vectors_v2.json", "version_3")];

/// A JSON value of a vector file, as Python's `json` wrote it: numbers, `true`, `false` and
/// `null` are kept as their text.
enum Json {
    Literal(String),
    Str(String),
    List(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> &Json {
        let Json::Object(members) = self else { panic!("not an object: {key}") };
        members.iter().find(|(k, _)| k == key).map(|(_, v)| v).unwrap_or_else(|| panic!("no member {key}"))
    }

    fn text(&self) -> &str {
        match self {
            Json::Str(text) | Json::Literal(text) => text,
            _ => panic!("not a string or a literal"),
        }
    }

    fn items(&self) -> &[Json] {
        let Json::List(items) = self else { panic!("not a list") };
        items
    }

    /// The compact JSON of this value with sorted keys, as `json` writes a decoded value.
    fn compact(&self, out: &mut String) {
        match self {
            Json::Literal(text) => out.push_str(text),
            Json::Str(text) => write_string(out, text),
            Json::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.compact(out);
                }
                out.push(']');
            }
            Json::Object(members) => {
                let mut sorted: Vec<&(String, Json)> = members.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                out.push('{');
                for (i, (key, value)) in sorted.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, key);
                    out.push(':');
                    value.compact(out);
                }
                out.push('}');
            }
        }
    }
}

/// A reader of the JSON of the vector files (well-formed, written by Python's `json`).
/// Panics on anything else: it reads the test's own data.
struct JsonText<'a> {
    text: &'a [u8],
    at: usize,
}

impl JsonText<'_> {
    fn parse(text: &str) -> Json {
        let mut reader = JsonText { text: text.as_bytes(), at: 0 };
        let value = reader.value();
        reader.ws();
        assert_eq!(reader.at, text.len(), "text after the JSON value");
        value
    }

    fn ws(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    /// Past `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        self.ws();
        let found = self.text.get(self.at) == Some(&byte);
        self.at += usize::from(found);
        found
    }

    /// The items or members up to `close`, each read by `item`.
    fn sequence<T>(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> T) -> Vec<T> {
        let mut out = Vec::new();
        if self.eat(close) {
            return out;
        }
        loop {
            out.push(item(self));
            if self.eat(close) {
                return out;
            }
            assert!(self.eat(b','), "malformed JSON at byte {}", self.at);
        }
    }

    fn value(&mut self) -> Json {
        self.ws();
        if self.eat(b'{') {
            return Json::Object(self.sequence(b'}', |r| {
                let key = r.string();
                assert!(r.eat(b':'), "no colon at byte {}", r.at);
                (key, r.value())
            }));
        }
        if self.eat(b'[') {
            return Json::List(self.sequence(b']', Self::value));
        }
        if self.text[self.at] == b'"' {
            return Json::Str(self.string());
        }
        let start = self.at;
        while self.text.get(self.at).is_some_and(|b| !b",]} \n".contains(b)) {
            self.at += 1;
        }
        Json::Literal(String::from_utf8(self.text[start..self.at].to_vec()).expect("ASCII"))
    }

    fn string(&mut self) -> String {
        assert!(self.eat(b'"'), "no string at byte {}", self.at);
        let mut units: Vec<u16> = Vec::new();
        loop {
            let byte = self.text[self.at];
            self.at += 1;
            let unit = match byte {
                b'"' => return String::from_utf16(&units).expect("valid UTF-16"),
                b'\\' => {
                    let escape = self.text[self.at];
                    self.at += 1;
                    match escape {
                        b'u' => {
                            let hex = std::str::from_utf8(&self.text[self.at..self.at + 4]).expect("ASCII");
                            self.at += 4;
                            u16::from_str_radix(hex, 16).expect("hex escape")
                        }
                        b'n' => 0x0a,
                        b'r' => 0x0d,
                        b't' => 0x09,
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        other => u16::from(other),
                    }
                }
                b' '..=b'~' => u16::from(byte),
                // A character beyond ASCII, as UTF-8 (the file is written without `ensure_ascii`).
                _ => {
                    let text = std::str::from_utf8(&self.text[self.at - 1..]).expect("UTF-8");
                    let c = text.chars().next().expect("a character");
                    self.at += c.len_utf8() - 1;
                    units.extend(c.encode_utf16(&mut [0; 2]).iter());
                    continue;
                }
            };
            units.push(unit);
        }
    }
}

fn stream_vectors(file: &str) -> Json {
    let path = format!("{}/../../tests/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
    JsonText::parse(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}")))
}

/// The descriptor table of a stream as the vector files list it (kinds from version 3 on).
fn table_json(stream: &Stream<'_>) -> String {
    let mut out = String::from("[");
    for (id, entry) in stream.table.entries.iter().enumerate() {
        if id > 0 {
            out.push(',');
        }
        out.push_str("{\"fields\":[");
        for (i, field) in entry.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_string(&mut out, field);
        }
        let _ = write!(out, "],\"flags\":{}", u8::from(entry.persistent));
        if let Some(kinds) = stream.table.kinds.get(id) {
            let kinds: Vec<String> = kinds.iter().map(|kind| kind.byte().to_string()).collect();
            let _ = write!(out, ",\"kinds\":[{}]", kinds.join(","));
        }
        out.push_str(",\"type\":");
        write_string(&mut out, &entry.type_name);
        out.push('}');
    }
    out.push(']');
    out
}

/// What reading stream `bytes` gives: its version, table and tagged JSON value, or the error
/// kind of the container or the value ("panic" if a reader panicked). A value read must
/// re-encode (typed objects as the tagged values they stand for) to bytes that decode, with the
/// forms of its version, to the same value.
fn read_stream(bytes: &[u8]) -> Result<(u8, String, String), String> {
    guarded(|| {
        let stream = Stream::read(bytes, DEFAULT_MAX_SIZE).map_err(|e| e.kind().to_owned())?;
        let value = stream.decode_value().map_err(|e| e.kind().to_owned())?;
        let mut w = Writer::new();
        value.encode(&mut w);
        let mut r = Reader::new(&w.buf);
        let again = decode_value_with(&mut r, &stream.table, value_forms(stream.version));
        if again.as_ref() != Ok(&value) || !r.is_empty() {
            return Err(format!("re-encoded as {}, which decodes to {again:?}", to_hex(&w.buf)));
        }
        Ok((stream.version, table_json(&stream), json(&value)))
    })
}

#[test]
fn stream_vectors_decode_to_their_json_or_fail_with_their_kind() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in STREAM_VECTOR_FILES {
        let vectors = stream_vectors(file);
        for vector in vectors.get("valid").items() {
            let name = vector.get("name").text();
            let outcome = read_stream(&from_hex(vector.get("hex").text()));
            // The frozen file of version 1 names no version.
            let version = if let Json::Object(members) = vector { members.iter().find(|(k, _)| k == "version") } else { None };
            let version = version.map_or(1, |(_, v)| v.text().parse().expect("a version"));
            let (mut table, mut value) = (String::new(), String::new());
            vector.get("descriptors").compact(&mut table);
            vector.get("value").compact(&mut value);
            if outcome != Ok((version, table.clone(), value.clone())) {
                failures.push(format!("{file} {name}: read as {outcome:?}\n  expected version {version}, table {table}, value {value}"));
            }
            checked += 1;
        }
        for vector in vectors.get("invalid").items() {
            let name = vector.get("name").text();
            let outcome = read_stream(&from_hex(vector.get("hex").text()));
            let expected = if READ_BY_NEWER_READERS.contains(&(file, name)) { Ok("null") } else { Err(vector.get("error").text()) };
            let ok = match (&outcome, expected) {
                (Ok((_, _, value)), Ok(expected)) => value == expected,
                (Err(kind), Err(expected)) => kind == expected,
                _ => false,
            };
            if !ok {
                failures.push(format!("{file} {name}: read as {outcome:?}, expected {expected:?}"));
            }
            checked += 1;
        }
    }
    assert!(checked > 150, "only {checked} stream vectors read");
    assert!(failures.is_empty(), "{} stream vector(s) failed:\n{}", failures.len(), failures.join("\n"));
}
