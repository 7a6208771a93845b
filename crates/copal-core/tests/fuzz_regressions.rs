//! Hostile inputs of the Rust decoders (docs/FUZZING.md), as ordinary `cargo test` tests on the
//! stable toolchain:
//!
//! - the committed fuzz corpora (`fuzz/corpus/record`, `value`, `text`, `stream`, `archive`)
//!   are replayed with the checks of the fuzz targets: no panic, and whatever decodes
//!   round-trips through the encoders (floats compared bit for bit) to no more bytes,
//!   canonically; whatever text document is read writes back and reads back to the same body;
//!   whatever stream or archive is read writes back and reads back the same;
//! - inputs that stress one check each (huge counts and lengths, extreme numbers, surrogates,
//!   unfinished back-references, reserved bits, ...) must fail with their `DecodeError` kind;
//! - every crasher, timeout or excessive allocation found by fuzzing or review is kept here; one
//!   that is not fixed yet is `#[ignore = "bug: ..."]` and states the expected behaviour.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;

use copal_core::format::{
    decode_record_state, decode_value, decode_value_with, Descriptor, DescriptorSource, FieldReader, Reader, RecordHeader, ValueForms,
    Writer,
};
use copal_core::stream::value_forms;
use copal_core::text::{json, xml, Body, TableEntry, TextError};
use copal_core::{DecodeError, Value};

// -- a per-thread allocation meter (tests run on parallel threads) ------------------------------

struct Metered;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the bookkeeping touches only const-initialized
// thread-locals of plain integers, which never allocate.
unsafe impl GlobalAlloc for Metered {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|live| {
            live.set(live.get() + layout.size());
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
        });
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(layout.size())));
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static METERED: Metered = Metered;

/// The result of `f` and the peak of bytes it had allocated at once (on this thread).
fn peak_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    (out, PEAK.with(Cell::get) - base)
}

// -- the descriptor table and checks of the fuzz targets (fuzz/src/lib.rs) ----------------------

/// The descriptor table of the test vectors, id -> field count (as in the fuzz targets).
struct Table;

const FIELD_COUNTS: [(u32, usize); 8] = [(1, 1), (2, 1), (3, 2), (4, 0), (5, 1), (6, 3), (7, 0), (8, 0)];

impl DescriptorSource for Table {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        FIELD_COUNTS.iter().find(|(k, _)| *k == id).map(|(_, n)| *n).ok_or(DecodeError::UnknownDescriptor { id })
    }
}

fn from_hex(text: &str) -> Vec<u8> {
    let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    assert_eq!(text.len() % 2, 0, "odd hex length: {text}");
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digit")).collect()
}

fn same_all(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
}

/// `Value` equality with floats compared bit for bit (NaN == NaN).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        (Value::Complex(a, b), Value::Complex(c, d)) => a.to_bits() == c.to_bits() && b.to_bits() == d.to_bits(),
        (Value::List(x), Value::List(y))
        | (Value::Tuple(x), Value::Tuple(y))
        | (Value::Set(x), Value::Set(y))
        | (Value::FrozenSet(x), Value::FrozenSet(y)) => same_all(x, y),
        (Value::Dict(x), Value::Dict(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((a, b), (c, d))| same(a, c) && same(b, d))
        }
        (Value::Object { descriptor: a, fields: x }, Value::Object { descriptor: b, fields: y }) => {
            a == b && same_all(x, y)
        }
        (
            Value::Subclass { descriptor: a, base: x, fields: f },
            Value::Subclass { descriptor: b, base: y, fields: g },
        ) => a == b && same(x, y) && same_all(f, g),
        _ => a == b,
    }
}

fn encode(value: &Value) -> Vec<u8> {
    let mut w = Writer::new();
    value.encode(&mut w);
    w.buf
}

/// The checks of fuzz target `value`.
fn check_value(data: &[u8]) {
    check_value_against(data, &Table, ValueForms::RECORD);
}

/// The checks of fuzz target `value`, against the descriptors of `table`, reading `forms`
/// (typed objects re-encode as the longer tagged values they stand for).
fn check_value_against(data: &[u8], table: &dyn DescriptorSource, forms: ValueForms) {
    let mut r = Reader::new(data);
    let Ok(value) = decode_value_with(&mut r, table, forms) else { return };
    let bytes = encode(&value);
    assert!(forms.typed_objects || bytes.len() <= r.position(), "re-encoding grew");
    let mut r2 = Reader::new(&bytes);
    let again = decode_value_with(&mut r2, table, forms).expect("re-encoded value decodes");
    assert!(r2.is_empty() && same(&value, &again), "round trip changed {value:?} into {again:?}");
    assert_eq!(encode(&again), bytes, "encoding is not canonical");
}

fn encode_record(header: &RecordHeader, fields: &[Value]) -> Vec<u8> {
    let mut w = Writer::new();
    header.write(&mut w);
    fields.iter().for_each(|f| f.encode(&mut w));
    w.buf
}

/// The checks of fuzz target `record`.
fn check_record(data: &[u8]) {
    let parsed = RecordHeader::parse(data);
    let decoded = decode_record_state(data, &Table);
    if let Ok((header, start)) = parsed {
        if let Ok(count) = Table.field_count(header.descriptor) {
            let mut reader = FieldReader::new(data, start, &Table).expect("header fits");
            let fields: Result<Vec<Value>, DecodeError> = (0..count).map(|_| reader.next_value()).collect();
            match (&fields, &decoded) {
                (Ok(a), Ok((_, b))) => assert!(same_all(a, b), "FieldReader disagrees"),
                (Ok(_), Err(e)) => assert!(matches!(e, DecodeError::TrailingBytes { .. }), "{e:?}"),
                (Err(a), Err(b)) => assert_eq!(a, b),
                (Err(a), Ok(_)) => panic!("FieldReader failed with {a:?} on a valid record"),
            }
        }
    }
    if let Ok((header, fields)) = decoded {
        assert_eq!(parsed.map(|(h, _)| h), Ok(header));
        let bytes = encode_record(&header, &fields);
        assert!(bytes.len() <= data.len(), "re-encoding grew");
        let (header2, fields2) = decode_record_state(&bytes, &Table).expect("re-encoded record decodes");
        assert!(header2 == header && same_all(&fields, &fields2), "record round trip");
        assert_eq!(encode_record(&header2, &fields2), bytes, "record encoding is not canonical");
    }
    if let Ok(descriptor) = Descriptor::decode(9, data) {
        let bytes = descriptor.encode();
        assert!(bytes.len() <= data.len());
        assert_eq!(Descriptor::decode(9, &bytes), Ok(descriptor));
    }
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    files.sort();
    files.into_iter().map(|path| (path.display().to_string(), std::fs::read(&path).expect("corpus file"))).collect()
}

fn replay(target: &str, check: fn(&[u8])) {
    let inputs = corpus(target);
    assert!(inputs.len() >= 50, "the {target} corpus has only {} inputs", inputs.len());
    for (name, data) in inputs {
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            panic!("corpus input {name} ({}) fails the {target} target's checks", hex(&data));
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn value_corpus_replays() {
    replay("value", check_value);
}

#[test]
fn record_corpus_replays() {
    replay("record", check_record);
}

// -- the checks of fuzz targets `stream` and `archive`, from their own file --------------------

#[path = "../fuzz/src/containers.rs"]
mod containers;

/// What a container check hands each value it reads, with the container's table and the value
/// forms it reads.
type ValueCheck<'a> = &'a dyn Fn(&[u8], &copal_core::stream::StreamTable, ValueForms);

/// A container check within the targets' allocation bound.
fn check_container(data: &[u8], check: fn(&[u8], ValueCheck<'_>)) {
    let ((), peak) = peak_allocation(|| check(data, &|bytes, table, forms| check_value_against(bytes, table, forms)));
    let bound = containers::container_bound(data.len());
    assert!(peak <= bound, "reading {} bytes allocated {peak} bytes at once (bound {bound})", data.len());
}

#[test]
fn stream_corpus_replays() {
    replay("stream", |data| check_container(data, |data, value| containers::check_stream(data, value)));
}

#[test]
fn archive_corpus_replays() {
    replay("archive", |data| check_container(data, |data, value| containers::check_archive(data, value)));
}

/// A frame of LZ4's legacy format (magic 02 21 4c 18) in a stream: its decoder's two 8 MiB
/// block buffers are the most an LZ4 payload makes copal allocate, whatever its size.
#[test]
fn legacy_lz4_frames_stay_within_the_codec_bound() {
    let stream = from_hex(concat!(
        "43504c310303850102214c1868407d00000000000000d46e000000c143504c31010005000b011a000100f10a0c40",
        "000b03030203040b0103060d010701610c42030203040e0600f1080f01070178090562797465731198b4021404312e",
        "3235153a00060200f20580ffffffffffffffed7446d09c2c9f0c030102061e0022f03f08006000400a02616200000000",
    ));
    check_container(&stream, |data, value| containers::check_stream(data, value));
}

// -- the checks of fuzz target `text` (fuzz/fuzz_targets/text.rs) -----------------------------

/// A stream body with its descriptor table renumbered in the order the value first uses each
/// entry, unused entries dropped (`canonical_body` of fuzz/src/lib.rs): the one-pass and tree
/// text readers may list a body's descriptors in different orders.
fn canonical_body(body: &[u8]) -> Option<Vec<u8>> {
    fn renumber(value: &mut Value, old: &[TableEntry], new: &mut Body, map: &mut Vec<Option<u32>>) {
        let mut id = |descriptor: &mut u32, new: &mut Body| {
            let slot = &mut map[*descriptor as usize];
            *descriptor = *slot.get_or_insert_with(|| {
                new.table.push(old[*descriptor as usize].clone());
                (new.table.len() - 1) as u32
            });
        };
        match value {
            Value::Enum { descriptor, .. } => id(descriptor, new),
            Value::Object { descriptor, fields } => {
                id(descriptor, new);
                fields.iter_mut().for_each(|f| renumber(f, old, new, map));
            }
            Value::Subclass { descriptor, base, fields } => {
                id(descriptor, new);
                renumber(base, old, new, map);
                fields.iter_mut().for_each(|f| renumber(f, old, new, map));
            }
            Value::List(items) | Value::Tuple(items) | Value::Set(items) | Value::FrozenSet(items) => {
                items.iter_mut().for_each(|v| renumber(v, old, new, map));
            }
            Value::Dict(pairs) => pairs.iter_mut().for_each(|(k, v)| {
                renumber(k, old, new, map);
                renumber(v, old, new, map);
            }),
            _ => {}
        }
    }
    let Body { table, mut value } = Body::decode(body).ok()?;
    let mut new = Body { table: Vec::new(), value: Value::None };
    let mut map = vec![None; table.len()];
    renumber(&mut value, &table, &mut new, &mut map);
    new.value = value;
    Some(new.encode())
}

type TextReader = fn(&str) -> Result<Vec<u8>, TextError>;
type TextWriter = fn(&[u8]) -> Result<String, TextError>;

/// The reader and writer the first byte of a `text` input chooses (even: JSON, odd: XML).
fn text_format(selector: u8) -> (TextReader, TextWriter) {
    match selector & 1 {
        0 => (json::body_from_json, json::to_json),
        _ => (xml::body_from_xml, xml::to_xml),
    }
}

/// The checks of fuzz target `text`: an accepted document's body writes back, reads back to the
/// same graph, and from there writing and reading are stable byte for byte.
fn check_text(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let (read, write) = text_format(selector);
    let Ok(body) = read(text) else { return };
    let written = write(&body).expect("the body of an accepted document writes back");
    let again = read(&written).expect("a written document reads back");
    assert!(again == body || canonical_body(&body).is_some_and(|c| Some(c) == canonical_body(&again)), "round trip changed the body");
    assert_eq!(write(&again).expect("writes again"), written, "written twice differs");
}

#[test]
fn text_corpus_replays() {
    replay("text", check_text);
}

// -- hostile inputs, one check each ------------------------------------------------------------

/// `decode_value` on `hex` must fail with an error of the given kind (compared by variant).
fn value_fails(hex: &str, expected: fn(&DecodeError) -> bool, what: &str) {
    let data = from_hex(hex);
    match decode_value(&mut Reader::new(&data), &Table) {
        Err(e) if expected(&e) => {}
        other => panic!("value {hex}: expected {what}, got {other:?}"),
    }
}

fn record_fails(hex: &str, expected: fn(&DecodeError) -> bool, what: &str) {
    let data = from_hex(hex);
    match decode_record_state(&data, &Table) {
        Err(e) if expected(&e) => {}
        other => panic!("record {hex}: expected {what}, got {other:?}"),
    }
    check_record(&data);
}

macro_rules! fails {
    ($f:ident, $hex:expr, $kind:ident) => {
        $f($hex, |e| matches!(e, DecodeError::$kind { .. }), stringify!($kind))
    };
}

#[test]
fn huge_counts_and_lengths_are_refused_before_allocating() {
    fails!(value_fails, "0b ffffffffffffffffff01", LengthTooLarge); // list of 2^64-1 items
    fails!(value_fails, "0c ffffffffffffffffff01", LengthTooLarge);
    fails!(value_fails, "0e ffffffff0f 00", LengthTooLarge);
    fails!(value_fails, "0d 01 00", LengthTooLarge); // one pair needs two bytes
    fails!(value_fails, "0d ffffffffffffffff7f 0000", LengthTooLarge); // 2n overflows u64
    fails!(value_fails, "04 ffffffffffffffffff01", LengthTooLarge); // BIGINT
    fails!(value_fails, "09 ffffffffffffffffff01", LengthTooLarge); // BYTES
    fails!(value_fails, "07 80808080808080808001", LengthTooLarge); // STR, 2^63
    fails!(value_fails, "19 05 0b ffffffff0f", LengthTooLarge); // SUBCLASS base
    fails!(value_fails, "0b ffffffffffffffffff02", BadVarint);
    fails!(value_fails, "0b 8080808080808080808000", BadVarint);
    // A length just fitting, then nothing to read.
    fails!(value_fails, "0b 01", LengthTooLarge);
    fails!(value_fails, "0b 02 00", LengthTooLarge);
}

#[test]
fn oversized_bigint_is_out_of_range() {
    let mut data = vec![0x04, 0x81, 0x80, 0x40]; // length 2^20 + 1
    data.resize(4 + (1 << 20) + 1, 0xff);
    assert!(matches!(
        decode_value(&mut Reader::new(&data), &Table),
        Err(DecodeError::OutOfRange { what: "integer size", .. })
    ));
    let mut data = vec![0x04, 0x80, 0x80, 0x40]; // exactly 1 MiB: allowed
    data.resize(4 + (1 << 20), 0xff);
    check_value(&data);
    assert!(decode_value(&mut Reader::new(&data), &Table).is_ok());
}

#[test]
fn extreme_numbers_are_out_of_range_not_overflows() {
    fails!(value_fails, "10 00 ffffffffffffffffff01", OutOfRange); // DATETIME micros i64::MIN
    fails!(value_fails, "10 00 feffffffffffffffff01", OutOfRange); // DATETIME micros i64::MAX
    fails!(value_fails, "10 02 00 ffffffffffffffffff01", OutOfRange); // UTC offset i64::MIN
    fails!(value_fails, "12 02 00 ffffffffffffffffff01", OutOfRange); // TIME, same offset
    fails!(value_fails, "12 00 ffffffffffffffffff01", OutOfRange); // TIME micros u64::MAX
    fails!(value_fails, "11 ffffffffffffffffff01", OutOfRange); // DATE days i64::MIN
    fails!(value_fails, "11 feffffffffffffffff01", OutOfRange); // DATE days i64::MAX
    fails!(value_fails, "13 ffffffffffffffffff01 00 00", OutOfRange); // TIMEDELTA days i64::MIN
    fails!(value_fails, "13 00 ffffffffffffffffff01 00", OutOfRange); // seconds u64::MAX
    fails!(value_fails, "13 00 00 ffffffffffffffffff01", OutOfRange); // micros u64::MAX
    check_value(&from_hex("17 ffff03 ffffffffffff3f")); // REF class 65535, seq 2^48-1: fine...
    fails!(value_fails, "17 808004 00", OutOfRange); // ...class 65536 is not
    fails!(value_fails, "17 02 8080808080808001", OutOfRange); // ...nor seq 2^48
    fails!(value_fails, "17 02 ffffffffffffffffff01", OutOfRange); // seq u64::MAX
    fails!(value_fails, "18 ffffffff0f", UnknownDescriptor); // descriptor u32::MAX
    fails!(value_fails, "18 8080808010", OutOfRange); // descriptor 2^32
    fails!(value_fails, "16 ffffffffffffffffff01 00", OutOfRange);
    fails!(value_fails, "10 ff 00", OutOfRange); // all tz flags
    fails!(value_fails, "14 00", OutOfRange); // empty decimal
    fails!(value_fails, "14 02 3165", OutOfRange); // "1e"
    fails!(value_fails, "14 03 2d2e65", OutOfRange); // "-.e"
}

#[test]
fn invalid_generalized_utf8_is_bad_utf8() {
    fails!(value_fails, "08 04 f4908080", BadUtf8); // above U+10FFFF
    fails!(value_fails, "08 03 e08080", BadUtf8); // overlong
    fails!(value_fails, "08 02 e0a0", BadUtf8); // truncated sequence
    fails!(value_fails, "08 01 80", BadUtf8); // lone continuation byte
    fails!(value_fails, "08 02 c0af", BadUtf8); // overlong '/'
    fails!(value_fails, "08 01 f8", BadUtf8);
    check_value(&from_hex("08 06 eda080 edbfbf")); // lone surrogates are fine
    fails!(value_fails, "07 03 eda080", BadUtf8); // ...but not in STR
    fails!(value_fails, "16 04 02 c328", BadUtf8); // enum member name
    fails!(value_fails, "10 04 00 01 ff", BadUtf8); // zone key
}

#[test]
fn back_references_must_name_finished_slots() {
    fails!(value_fails, "1a ffffffffffffffffff01", BadBackRef); // u64::MAX, no truncation to u32
    fails!(value_fails, "1a 8080808010", BadBackRef); // 2^32 would truncate to slot 0
    fails!(value_fails, "0b 01 1a 8080808010", BadBackRef);
    fails!(value_fails, "19 07 0c 01 1a 00", BadBackRef); // tuple subclass holding itself
    fails!(value_fails, "19 07 0f 01 1a 00", BadBackRef); // frozenset subclass holding itself
    fails!(value_fails, "0c 01 19 05 0b 01 1a 00 00", BadBackRef); // tuple via list subclass
    check_value(&from_hex("19 05 0b 01 1a 00 00")); // a list subclass may hold itself
    check_value(&from_hex("0b 02 0c 00 1a 01")); // a finished tuple may be shared
    assert!(decode_value(&mut Reader::new(&from_hex("0b 02 0c 00 1a 01")), &Table).is_ok());
}

/// 256 levels of every kind of nesting (LIST, TUPLE, SET, FROZENSET, DICT value, OBJECT field,
/// SUBCLASS base item) around NONE, and 300 levels, which must fail with TooDeep. Run on a thread
/// with an 8 MiB stack (a main thread's): see `deep_nesting_fits_a_default_thread_stack`.
#[test]
fn nesting_limits_hold_for_every_container() {
    on_stack(8 << 20, || {
        for open in NESTINGS {
            let depth_ok = from_hex(&(open.repeat(256) + &"00".repeat(4 * 256 + 1)));
            let _ = decode_value(&mut Reader::new(&depth_ok), &Table); // may fail (field counts), must return
            let too_deep = from_hex(&(open.repeat(300) + &"00".repeat(4 * 300 + 1)));
            let result = decode_value(&mut Reader::new(&too_deep), &Table);
            assert!(matches!(result, Err(DecodeError::TooDeep { limit: 256 })), "{open}: {result:?}");
        }
    });
}

const NESTINGS: [&str; 8] = ["0b01", "0c01", "0e01", "0f01", "0d0100", "1803", "19050b01", "1806"];

/// Nestings of stream values (version 4, fields of kind ANY): TYPED_OBJECTs of descriptor 2,
/// OBJECT_LISTs of one object of it, superseded tuples, SUBCLASS values of superseded bases.
const STREAM_NESTINGS: [&str; 4] = ["1c02", "1d0102", "1e01", "19021e01"];

fn on_stack(bytes: usize, f: impl FnOnce() + Send + 'static) {
    let thread = std::thread::Builder::new().stack_size(bytes).spawn(f).expect("spawn");
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn record_headers_are_checked_in_order() {
    fails!(record_fails, "", Truncated);
    fails!(record_fails, "10", Truncated);
    fails!(record_fails, "1001", Truncated); // no tid
    fails!(record_fails, "00 01 00 00", UnsupportedVersion);
    fails!(record_fails, "f1 01 00 00", UnsupportedVersion);
    fails!(record_fails, "1f 01 00 00", OutOfRange); // reserved flags
    fails!(record_fails, "18 01 00 00", OutOfRange);
    fails!(record_fails, "10 8080808010 00 00", OutOfRange); // descriptor 2^32
    fails!(record_fails, "10 ffffffff0f 00 00", UnknownDescriptor);
    fails!(record_fails, "10 01 ffffffffffffffffff02 00", BadVarint); // tid
    fails!(record_fails, "10 04 00 00", TrailingBytes); // descriptor 4 has no fields
    fails!(record_fails, "10 06 00 00 00", Truncated); // descriptor 6 has three
                                                       // FieldReader refuses a state start past the end instead of slicing out of bounds.
    assert!(matches!(FieldReader::new(&[0x10], 5, &Table), Err(DecodeError::Truncated { .. })));
}

#[test]
fn descriptors_are_checked() {
    let descriptor = |hex: &str| Descriptor::decode(1, &from_hex(hex));
    assert!(matches!(descriptor("808004 01 41 00"), Err(DecodeError::OutOfRange { .. }))); // class 65536
    assert!(matches!(descriptor("ffffffffffffffffff02"), Err(DecodeError::BadVarint { .. })));
    assert!(matches!(descriptor("01 01 ff 00"), Err(DecodeError::BadUtf8 { .. })));
    assert!(matches!(descriptor("01 01 41 ffffffff0f"), Err(DecodeError::LengthTooLarge { .. })));
    assert!(matches!(descriptor("01 01 41 02 01 61"), Err(DecodeError::Truncated { .. })));
    assert!(matches!(descriptor("01 01 41 00 00"), Err(DecodeError::TrailingBytes { .. })));
    assert!(matches!(descriptor(""), Err(DecodeError::Truncated { .. })));
    assert!(descriptor("01 01 41 02 01 61 00").is_ok()); // an empty field name is well formed
}

// -- found by fuzzing or review -----------------------------------------------------------------

/// F1 (docs/FUZZING.md, fixed by `PREALLOCATE_MAX`): 256 nested LISTs (or TUPLEs, SETs, DICTs),
/// each claiming as many items as bytes remain, then padding. Every level passes the length rule;
/// when each pre-allocated `count` values (`Vec::with_capacity(count)` in `Walk::items` and
/// `Walk::pairs`, value.rs) before its first item failed, all levels being live at once, the
/// decoder requested depth x input x size_of::<Value>() = 256 x 40 = 10,000 bytes per input byte:
/// 664 MB for this 64 KiB value, 10.7 GB for 1 MiB, 172 GB for 16 MiB, and under an address-space
/// limit (`ulimit -v`, `vm.overcommit_memory=2`) the allocation failed and aborted the process
/// ("memory allocation of ... bytes failed"). The memory a failing input makes the decoder
/// request must stay proportional to the input.
#[test]
fn nested_count_claims_do_not_multiply_allocation() {
    for open in [0x0b, 0x0c, 0x0e, 0x0d] {
        let data = nested_claims(open, 1 << 16);
        let (result, peak) = peak_allocation(|| decode_value(&mut Reader::new(&data), &Table));
        assert!(result.is_err());
        assert!(
            peak <= 64 * data.len(),
            "tag {open:#04x}: a {}-byte input made the decoder allocate {peak} bytes at once ({}x)",
            data.len(),
            peak / data.len()
        );
    }
}

/// `levels` = 256 containers with tag `open`, each claiming all remaining bytes as items (4-byte
/// varints), then zero padding to `size` bytes.
fn nested_claims(open: u8, size: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(size);
    for _ in 0..256 {
        data.push(open);
        let remaining = (size - data.len() - 4) as u32;
        let claim = if open == 0x0d { remaining / 2 } else { remaining };
        data.extend((0..4).map(|i| ((claim >> (7 * i)) & 0x7f) as u8 | if i < 3 { 0x80 } else { 0 }));
    }
    data.resize(size, 0);
    data
}

/// Objects of a descriptor without fields take no bytes, so OBJECT_LISTs of them (stream
/// version 3), each claiming all the input left, described objects quadratic in the input: a
/// list of 16,000 such lists in 64 KiB would have been a billion objects. Each list is refused
/// (`LengthTooLarge`) before any of its objects is made (found by review, docs/FUZZING.md F9).
#[test]
fn object_lists_of_objects_without_fields_are_refused() {
    let forms = ValueForms { typed_objects: true, ..ValueForms::RECORD };
    let size = 1 << 16;
    let varint4 = |n: usize| (0..4).map(move |i| ((n >> (7 * i)) & 0x7f) as u8 | if i < 3 { 0x80 } else { 0 });
    // A LIST of as many OBJECT_LISTs (tag, count, descriptor 7) as fit, each claiming the rest.
    let lists = (size - 5) / 6;
    let mut data = vec![0x0b];
    data.extend(varint4(lists));
    for _ in 0..lists {
        data.push(0x1d);
        data.extend(varint4(size - data.len() - 4));
        data.push(7);
    }
    data.resize(size, 0);
    let (result, peak) = peak_allocation(|| decode_value_with(&mut Reader::new(&data), &Table, forms));
    assert!(matches!(result, Err(DecodeError::LengthTooLarge { offset: 6, .. })), "{result:?}");
    assert!(peak <= 64 * data.len(), "{peak} bytes for a {}-byte value", data.len());
}

/// The same input through a record (its one field), which `decode_record_state` reads the same
/// way.
#[test]
fn nested_count_claims_in_a_record_do_not_multiply_allocation() {
    let mut data = from_hex("10 02 00");
    data.extend(nested_claims(0x0c, 1 << 16));
    let (result, peak) = peak_allocation(|| decode_record_state(&data, &Table));
    assert!(result.is_err());
    assert!(peak <= 64 * data.len(), "{peak} bytes for a {}-byte record", data.len());
}

/// F1 as found by `cargo fuzz run --features alloc-bound value` in 16 s (288,001 executions),
/// minimized by `cargo fuzz tmin` to 310 bytes: FROZENSETs of 15 items nested about 250 deep
/// (`0f 0f 0f ...`); each level pre-allocated 15 values that the input cannot hold, 126 KB in all
/// where the fuzz bound (64 KiB + 128 bytes per input byte) is 104 KB.
const FUZZ_VALUE_ALLOC: &str = concat!(
    "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",
    "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",
    "0f720f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",
    "0f0f0f0f0f0f0f720f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f72000f0f0f0f0f",
    "0f0f720f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f00000f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",
    "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",
    "0f0f0f0f0f0f0f312e32650f0f0f0f0f0f0f0f0f0f72",
);

/// F1 as found by `cargo fuzz run --features alloc-bound record` in 3 s (47,943 executions),
/// minimized to 252 bytes: a record whose field nests DICTs of 13 pairs (`0d 0d ...`) and lists.
const FUZZ_RECORD_ALLOC: &str = concat!(
    "1102010d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0b01010d0d0d0d0d0d0d0d0d56000d0d0d0d0d0d0d0d0d0d0d0d0d0d",
    "0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d570d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0b01",
    "0b010b110b01010b0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d050d0d0d",
    "0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0b010b010b010b2d000b0b010b010b3d0b010b010b010b0b0b0b0101",
    "0b37010000000000000b0b010b010b050b010b010b010b05ff0100000000010bffffff01010bffffff0100000000010b",
    "ffffff01010bffffff01ff01",
);

/// Within the allocation bound of the fuzz targets' `alloc-bound` feature.
#[test]
fn fuzz_found_allocation_crashers() {
    let bound = |len: usize| (64 << 10) + 128 * len;
    let data = from_hex(FUZZ_VALUE_ALLOC);
    let (_, peak) = peak_allocation(|| decode_value(&mut Reader::new(&data), &Table));
    assert!(peak <= bound(data.len()), "value: {peak} bytes for {} input bytes", data.len());
    let data = from_hex(FUZZ_RECORD_ALLOC);
    let (_, peak) = peak_allocation(|| decode_record_state(&data, &Table));
    assert!(peak <= bound(data.len()), "record: {peak} bytes for {} input bytes", data.len());
}

#[test]
fn fuzz_found_allocation_crashers_fail_with_their_error() {
    let data = from_hex(FUZZ_VALUE_ALLOC);
    assert_eq!(decode_value(&mut Reader::new(&data), &Table), Err(DecodeError::UnknownTag { offset: 295, tag: 0x31 }));
    check_value(&data);
    let data = from_hex(FUZZ_RECORD_ALLOC);
    assert_eq!(decode_record_state(&data, &Table), Err(DecodeError::UnknownTag { offset: 216, tag: 0xff }));
    check_record(&data);
}

/// What a legitimate large value costs: the meter itself is sound (not ignored).
#[test]
fn allocation_meter_sees_proportional_use_for_valid_input() {
    let mut data = vec![0x0b, 0x80, 0x80, 0x04]; // a list of 65536 NONEs
    data.resize(4 + 65536, 0);
    let (result, peak) = peak_allocation(|| decode_value(&mut Reader::new(&data), &Table));
    assert!(result.is_ok());
    assert!(peak >= 65536 * std::mem::size_of::<Value>(), "meter undercounts: {peak}");
    assert!(peak <= 64 * data.len(), "{peak}");
}

/// Nesting to the depth limit, decoded on a thread with Rust's default 2 MiB stack (what
/// `std::thread::spawn` and the test harness give), in whatever build `cargo test` makes. F3 in
/// docs/FUZZING.md: the recursion of `Walk::value` (value.rs) took 7.1 to 8.3 KB of stack per
/// level in an unoptimized build, so 256 levels of SUBCLASS-of-list nesting (`19 05 0b 01` x 256,
/// then NONEs) overflowed the stack and aborted the process. Values without contents are now read
/// outside the recursive frames (2.5 to 4 KB per level unoptimized: the test passes on a 1 MiB
/// stack, not on 640 KiB). The nestings of stream values (`STREAM_NESTINGS`, through typed
/// objects, object lists and superseded copies) recurse through more functions per level and are
/// held to the same stack. Runs itself in a child process, so that an overflow fails this test
/// only instead of aborting the whole test binary.
#[test]
fn deep_nesting_fits_a_default_thread_stack() {
    if std::env::var_os("COPAL_FUZZ_STACK_CHILD").is_some() {
        on_stack(2 << 20, || {
            for open in NESTINGS {
                let data = from_hex(&(open.repeat(256) + &"00".repeat(4 * 256 + 1)));
                let _ = decode_value(&mut Reader::new(&data), &Table);
            }
            for open in STREAM_NESTINGS {
                let data = from_hex(&(open.repeat(256) + &"00".repeat(4 * 256 + 1)));
                let _ = decode_value_with(&mut Reader::new(&data), &Table, value_forms(4));
            }
        });
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "deep_nesting_fits_a_default_thread_stack", "--nocapture", "--test-threads=1"])
        .env("COPAL_FUZZ_STACK_CHILD", "1")
        .output()
        .expect("run the test binary");
    assert!(
        out.status.success(),
        "decoding 256 nested values on a 2 MiB stack failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The child must really have run the decoding (a filter matching nothing also succeeds).
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"), "the child process ran no test");
}

/// F6 (docs/FUZZING.md): the text readers accepted leaf values that no body can hold, so that
/// the body of an accepted document failed to decode (`to_json`, `to_xml` and `copal.loads`
/// raised "corrupt stream body" for a document that had been read). Found by fuzz target `text`
/// in seconds: decimal text that is not what `str(Decimal)` writes (`is_decimal_text`), and
/// `$surrogates` / `<surrogates>` bytes that are not generalized UTF-8; by review: timedeltas
/// outside Python's normalized range (seconds below a day, microseconds below a second, at most
/// 999,999,999 days either way). The readers now refuse them as mapping errors, and `to_json`
/// checks a body's timedelta range as the binary decoder does.
#[test]
fn text_readers_refuse_leaf_values_no_body_can_hold() {
    let refused = [
        (0u8, r#"{"$copal":2,"value":{"$decimal":"1.-2"}}"#, "$decimal is not decimal text (what str(Decimal) writes)"),
        (0, r#"{"$copal":2,"value":[{"$decimal":""}]}"#, "$decimal is not decimal text (what str(Decimal) writes)"),
        (0, r#"{"$copal":2,"value":{"$surrogates":"7aty"}}"#, "$surrogates is not the base64 of generalized UTF-8"),
        (0, r#"{"$copal":2,"value":{"$surrogates":"0aCA"}}"#, "$surrogates is not the base64 of generalized UTF-8"),
        (0, r#"{"$copal":2,"value":{"$timedelta":[0,86400,0]}}"#, "$timedelta must be [days, seconds, microseconds], normalized as Python's"),
        (0, r#"{"$copal":2,"value":{"$timedelta":[0,0,1000000]}}"#, "$timedelta must be [days, seconds, microseconds], normalized as Python's"),
        (0, r#"{"$copal":2,"value":{"$timedelta":[-1000000000,0,0]}}"#, "$timedelta must be [days, seconds, microseconds], normalized as Python's"),
        (1, r#"<copal version="1"><decimal>1e</decimal></copal>"#, "<decimal> does not hold decimal text (what str(Decimal) writes)"),
        (1, r#"<copal version="1"><surrogates>7aty</surrogates></copal>"#, "<surrogates> does not hold the base64 of generalized UTF-8"),
        (1, r#"<copal version="1"><surrogates>0aCA</surrogates></copal>"#, "<surrogates> does not hold the base64 of generalized UTF-8"),
        (
            1,
            r#"<copal version="1"><timedelta days="0" seconds="86400" microseconds="0"/></copal>"#,
            "<timedelta> does not hold days, seconds and microseconds, normalized as Python's",
        ),
    ];
    for (selector, text, message) in refused {
        let (read, _) = text_format(selector);
        assert_eq!(read(text), Err(TextError::Mapping { message: message.to_owned() }), "{text}");
        let mut data = vec![selector];
        data.extend_from_slice(text.as_bytes());
        check_text(&data);
    }
    // Their neighbours that bodies do hold still read and round-trip.
    for (selector, text) in [
        (0u8, r#"{"$copal":2,"value":[{"$decimal":"-1.50"},{"$decimal":"sNaN12"},{"$decimal":"1E+400"}]}"#),
        (0, r#"{"$copal":2,"value":[{"$surrogates":"7aCA"},{"$surrogates":"YQ=="}]}"#),
        (0, r#"{"$copal":2,"value":[{"$timedelta":[-999999999,86399,999999]},{"$timedelta":[999999999,0,0]}]}"#),
        (1, r#"<copal version="1"><list><decimal>Infinity</decimal><surrogates>7aCA</surrogates><timedelta days="-1" seconds="86399" microseconds="999999"/></list></copal>"#),
    ] {
        let (read, _) = text_format(selector);
        assert!(read(text).is_ok(), "{text}");
        let mut data = vec![selector];
        data.extend_from_slice(text.as_bytes());
        check_text(&data);
    }
    // A body holding an out-of-range timedelta is refused by the JSON writer, as by the decoder.
    let body = from_hex("00 13 00 80 a3 05 00");
    assert!(matches!(json::to_json(&body), Err(TextError::Body(DecodeError::OutOfRange { what: "timedelta", .. }))));
}

/// F7 (docs/FUZZING.md): the XML tree reader dropped the text of a `<field>` and of `<copal>`
/// (`<field name="x">\u{1}/<int>2</int></field>` read as the field's int alone), where text
/// between elements may only be whitespace (TEXT_FORMATS.md section 6) and containers refused
/// it. Seen in the failing input of the `text` target's first round-trip finding.
#[test]
fn xml_text_between_elements_is_refused() {
    for (text, message) in [
        ("<copal version=\"1\"><object type=\"m.P\"><field name=\"x\">\u{1}/<int>2</int></field></object></copal>", "<object> holds <field name=\"...\"> elements of one value each"),
        ("<copal version=\"1\"><object type=\"m.P\"><field name=\"x\"><int>2</int>x</field></object></copal>", "<object> holds <field name=\"...\"> elements of one value each"),
        ("<copal version=\"1\">x<none/></copal>", "<copal> cannot hold text"),
        ("<copal version=\"1\"><none/>&amp;</copal>", "<copal> cannot hold text"),
    ] {
        assert_eq!(xml::body_from_xml(text), Err(TextError::Mapping { message: message.to_owned() }), "{text}");
    }
    let spaced = "<copal version=\"1\">\n <object type=\"m.P\">\n  <field name=\"x\">\r\n\t<int>2</int> </field>\n </object><!-- c -->\n</copal>";
    assert!(xml::body_from_xml(spaced).is_ok());
}
