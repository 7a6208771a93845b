//! Round trips through the writer and both readers, the writer's numbers, pieces and strings
//! against the standard library's text, and damaged bodies and documents.

use super::strings::{append_plain, escape_into};
use super::*;
use crate::format::{TzInfo, Value};
use crate::text::{Body, TableEntry, TextError};

fn round_trip(value: Value, table: Vec<TableEntry>) -> String {
    let body = Body { table, value };
    let bytes = body.encode();
    assert_eq!(Body::decode(&bytes).unwrap(), body);
    let text = to_json(&bytes).unwrap();
    assert_eq!(from_json(&text, usize::MAX).unwrap(), body, "{text}");
    // The one-pass reader may number descriptors in another order: the graph is the same
    // when the document written back is.
    let direct = super::super::json_body::transcode(&text).expect("copal's own documents are read in one pass");
    assert_eq!(to_json(&direct).unwrap(), text);
    text
}

/// `float` writes what Debug writes, the text it had before it used zmij: over random bit
/// patterns (every magnitude), random magnitudes around the bounds of `PLAIN_FLOATS`,
/// decimal fractions, whose shortest digits are short, and values in [2^43, 2^51), where
/// ties between two shortest texts are frequent.
#[test]
fn floats_are_written_as_debug_writes_them() {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        // xorshift64*: a fixed sequence, so that a failure is reproducible.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut values = vec![0.0, -0.0, 1e-4, -1e-4, 1e16, 1e15, 9_999_999_999_999_998.0, 1_825_382_308_105_347.2, 0.1, 0.375, 5e-324, f64::MAX, f64::MIN_POSITIVE];
    for _ in 0..200_000 {
        let bits = next();
        values.push(f64::from_bits(bits));
        // Uniform in [1e-6, 1e18): both sides of both bounds.
        values.push(10f64.powf(-6.0 + 24.0 * (bits >> 11) as f64 / (1u64 << 53) as f64));
        values.push((bits % 1_000_000_007) as f64 / 10f64.powi((bits % 20) as i32));
        // Just below 1e16, where ulps are fractions of a unit and ties are frequent.
        values.push(f64::from_bits((0x42A + bits % 8) << 52 | bits & ((1 << 52) - 1)));
    }
    for value in values.into_iter().filter(|v| v.is_finite()) {
        let mut out = String::new();
        float(&mut out, value);
        assert_eq!(out, format!("{value:?}"), "bits {:#x}", value.to_bits());
    }
}

#[test]
fn pieces_of_every_length_are_appended_whole() {
    let text = "0123456789abcdefghijé😀";
    for end in 0..=text.len() {
        let Some(piece) = text.get(..end) else { continue };
        for before in ["", "x", "{\"$copal\":"] {
            let mut out = String::from(before);
            push_piece(&mut out, piece);
            assert_eq!(out, format!("{before}{piece}"));
        }
    }
}

#[test]
fn kept_pieces_of_every_length_are_appended_whole() {
    let text = ",\"0123456789abcdefghijklmnopqrstuvwxyzé😀\":";
    for end in 0..=text.len() {
        let Some(piece) = text.get(..end) else { continue };
        let kept = Piece::new(piece.to_owned());
        assert_eq!(kept.as_str(), piece);
        for before in ["", "x", "{\"$copal\":"] {
            let mut out = String::from(before);
            kept.write(&mut out);
            kept.write(&mut out);
            push_piece(&mut out, "}");
            assert_eq!(out, format!("{before}{piece}{piece}}}"));
        }
    }
}

#[test]
fn an_output_with_room_for_the_text_alone_is_not_grown() {
    for n in [0, 7, 42, 12_345_678, 100_000_000] {
        let text = n.to_string();
        let mut out = String::with_capacity(text.len());
        let capacity = out.capacity();
        push_u64(&mut out, n);
        assert_eq!((out.as_str(), out.capacity()), (text.as_str(), capacity));
    }
    for text in ["", ",\"a\":", "{\"$type\":12,\"name\":"] {
        let mut out = String::with_capacity(text.len());
        let capacity = out.capacity();
        Piece::new(text.to_owned()).write(&mut out);
        assert_eq!((out.as_str(), out.capacity()), (text, capacity));
    }
}

#[test]
fn integers_are_written_as_display_writes_them() {
    let mut values = vec![0, 1, -1, 9, 10, 99, 100, 101, 999, 1000, i64::MAX, i64::MIN, i64::MIN + 1];
    values.extend((0..19).flat_map(|power| {
        let n = 10i64.pow(power);
        [n - 1, n, n + 1, -n, -(n - 1)]
    }));
    for &n in &values {
        let mut out = String::new();
        push_i64(&mut out, n);
        assert_eq!(out, n.to_string());
    }
    // One after another, each written past the text before it (the short ones store a
    // whole word, beyond their digits).
    let mut out = String::new();
    for &n in &values {
        push_i64(&mut out, n);
        out.push(',');
    }
    assert_eq!(out, values.iter().map(|n| format!("{n},")).collect::<String>());
    let mut out = String::new();
    push_u64(&mut out, u64::MAX);
    assert_eq!(out, u64::MAX.to_string());
}

/// JSON string contents as `escape_into` must write them, one character at a time.
fn escaped_slowly(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' => "\\\"".to_string(),
            '\\' => "\\\\".to_string(),
            '\n' => "\\n".to_string(),
            '\r' => "\\r".to_string(),
            '\t' => "\\t".to_string(),
            c if u32::from(c) < 0x20 => format!("\\u{:04x}", u32::from(c)),
            c => c.to_string(),
        })
        .collect()
}

/// Every byte that needs escaping, at every position of strings longer and shorter than the
/// eight bytes `copy_plain` reads at a time (and of the four to seven it reads as one
/// word), after bytes close to it in value, and after text already in the buffer; and
/// strings with nothing to escape, of every length.
#[test]
fn escapes_are_found_anywhere() {
    let special: Vec<char> = (0u8..0x20).map(char::from).chain(['"', '\\']).collect();
    for len in 1..20 {
        for at in 0..len {
            for &c in &special {
                for filler in ['a', '!', '#', '[', ']', ' ', '\u{7f}', 'é'] {
                    let text: String = (0..len).map(|i| if i == at { c } else { filler }).collect();
                    let mut out = String::from("x");
                    escape_into(&mut out, &text);
                    assert_eq!(out, format!("x{}", escaped_slowly(&text)), "{text:?}");
                    let mut out = String::from("x");
                    string(&mut out, &text);
                    escaped_key(&mut out, &text);
                    let escaped = escaped_slowly(&text);
                    assert_eq!(out, format!("x\"{escaped}\"\"{escaped}\":"), "{text:?}");
                }
            }
        }
        let plain = "!#[]é\u{7f}~ 😀".repeat(len);
        for end in (0..=plain.len()).filter(|&end| plain.is_char_boundary(end)) {
            let mut out = String::from("{");
            assert_eq!(append_plain(&mut out, &plain.as_bytes()[..end]), end);
            assert_eq!(out, format!("{{{}", &plain[..end]));
            let mut out = String::from("{");
            string(&mut out, &plain[..end]);
            escaped_key(&mut out, &format!("${}", &plain[..end]));
            assert_eq!(out, format!("{{\"{0}\"\"$${0}\":", &plain[..end]));
        }
    }
    let mut out = String::new();
    escape_into(&mut out, "a\"b\\c\nd\re\tf\u{1}g\u{1f}");
    assert_eq!(out, r#"a\"b\\c\nd\re\tf\u0001g\u001f"#);
}

#[test]
fn plain_json_where_it_fits() {
    let value = Value::Dict(vec![
        (Value::Str("a".into()), Value::List(vec![Value::Int(1), Value::Float(1.0), Value::None, Value::Bool(true)])),
        (Value::Str("$b".into()), Value::Str("x\"\n\u{1}é".into())),
    ]);
    let text = round_trip(value, vec![]);
    assert_eq!(text, r#"{"$copal":2,"value":{"a":[1,1.0,null,true],"$$b":"x\"\n\u0001é"}}"#);
}

#[test]
fn tagged_values_and_shared_references() {
    let table = vec![TableEntry { persistent: false, type_name: "m.P".into(), fields: vec!["x".into()] }];
    let value = Value::List(vec![
        Value::Object { descriptor: 0, fields: vec![Value::BackRef(0)] },
        Value::Tuple(vec![Value::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 1])]),
        Value::Dict(vec![]),
        Value::BackRef(3),
        Value::Set(vec![Value::Bytes(b"hi".to_vec())]),
        Value::Dict(vec![(Value::Int(1), Value::Float(f64::INFINITY))]),
        Value::DateTime { micros: 0, tz: TzInfo::Named("Europe/Paris".into()), fold: true },
        Value::Time { micros: 1, tz: TzInfo::Offset(-3_600_000_000), fold: false },
        Value::TimeDelta { days: -1, seconds: 5, micros: 6 },
        Value::Uuid([0xAB; 16]),
        Value::BackRef(1),
    ]);
    let text = round_trip(value, table);
    assert!(text.starts_with(r#"{"$copal":2,"value":{"$id":0,"$list":[{"$id":1,"$type":"m.P","x":{"$ref":0}},"#), "{text}");
    assert!(text.contains(r#"{"$datetime":"1970-01-01T00:00:00","$zone":"Europe/Paris","$fold":1}"#), "{text}");
    assert!(text.contains(r#"{"$time":"00:00:00.000001-01:00"}"#), "{text}");
    assert!(text.contains("18446744073709551616"), "{text}");
}

#[test]
fn dicts_with_other_keys_are_rewritten_with_the_same_ids() {
    // The object form is abandoned at key 2, after a nested dict and a list were written
    // (and counted memo slots 1 and 2); the rewrite must count them again from the same slot.
    let inner = Value::Dict(vec![(Value::Int(1), Value::Dict(vec![(Value::Str("x".into()), Value::List(vec![]))]))]);
    let value = Value::List(vec![
        Value::Dict(vec![(Value::Str("a".into()), inner.clone()), (Value::Int(2), Value::BackRef(2))]),
        Value::BackRef(4),
        inner,
    ]);
    let text = round_trip(value, vec![]);
    assert!(text.contains(r#"{"$dict":[["a",{"$id":2,"$dict":[[1,{"x":{"$id":4,"$list":[]}}]]}],[2,{"$ref":2}]]}"#), "{text}");
}

/// The second object of a class, and every value naming a class named before (objects,
/// persistent objects, subclass instances, enums share the numbering), names it by number;
/// two classes with the same unqualified name are two classes.
#[test]
fn classes_named_before_are_named_by_number() {
    let entry = |persistent, type_name: &str, fields: &[&str]| TableEntry { persistent, type_name: type_name.into(), fields: fields.iter().map(|f| f.to_string()).collect() };
    let table = vec![
        entry(false, "a.Foo", &["x"]),
        entry(false, "b.Foo", &["x"]),
        entry(false, "a.Foo", &["x", "y"]),
        entry(false, "m.Color", &[]),
        entry(true, "b.Foo", &[]),
        entry(false, "m.Tags", &[]),
    ];
    let foo = |descriptor, x| Value::Object { descriptor, fields: vec![Value::Int(x)] };
    let value = Value::List(vec![
        foo(0, 1),
        foo(1, 2),
        Value::Object { descriptor: 2, fields: vec![Value::Enum { descriptor: 3, member: "RED".into() }, foo(1, 3)] },
        Value::Enum { descriptor: 3, member: "BLUE".into() },
        Value::Object { descriptor: 4, fields: vec![] },
        Value::Subclass { descriptor: 5, base: Box::new(Value::List(vec![foo(0, 4)])), fields: vec![] },
        Value::Subclass { descriptor: 5, base: Box::new(Value::Dict(vec![])), fields: vec![] },
    ]);
    let text = round_trip(value, table);
    let expected = concat!(
        r#"{"$copal":2,"value":[{"$type":"a.Foo","x":1},{"$type":"b.Foo","x":2},"#,
        r#"{"$type":0,"x":{"$enum":"m.Color","$member":"RED"},"y":{"$type":1,"x":3}},{"$enum":2,"$member":"BLUE"},"#,
        r#"{"$persistent":1},{"$subclass":"m.Tags","$base":[{"$type":0,"x":4}]},{"$subclass":3,"$base":{}}]}"#,
    );
    assert_eq!(text, expected);
}

/// A dict written as an object until a key that is not a string turns it into `$dict`
/// form: the classes named in the text taken back are numbered again in the new order.
#[test]
fn classes_are_numbered_in_the_order_of_the_final_text() {
    let table = vec![TableEntry { persistent: false, type_name: "m.A".into(), fields: vec![] }, TableEntry { persistent: false, type_name: "m.B".into(), fields: vec![] }];
    let object = |descriptor| Value::Object { descriptor, fields: vec![] };
    let value = Value::List(vec![
        Value::Dict(vec![(Value::Str("k".into()), object(0)), (object(1), Value::None)]),
        object(0),
    ]);
    let text = round_trip(value, table);
    assert_eq!(text, r#"{"$copal":2,"value":[{"$dict":[["k",{"$type":"m.A"}],[{"$type":"m.B"},null]]},{"$type":0}]}"#);
}

/// Version 1 named every class in full; its documents read as they always did.
#[test]
fn version_1_documents_are_read() {
    let text = r#"{"$copal":1,"value":[{"$type":"m.A","x":1},{"$type":"m.A","x":2},{"$enum":"m.A","$member":"B"}]}"#;
    let body = from_json(text, usize::MAX).unwrap();
    let table = vec![TableEntry { persistent: false, type_name: "m.A".into(), fields: vec!["x".into()] }, TableEntry { persistent: false, type_name: "m.A".into(), fields: vec![] }];
    let value = Value::List(vec![
        Value::Object { descriptor: 0, fields: vec![Value::Int(1)] },
        Value::Object { descriptor: 0, fields: vec![Value::Int(2)] },
        Value::Enum { descriptor: 1, member: "B".into() },
    ]);
    assert_eq!(body, Body { table, value });
}

#[test]
fn subclass_bases_take_no_memo_slot() {
    let table = vec![TableEntry { persistent: false, type_name: "m.Tags".into(), fields: vec!["n".into()] }];
    let value = Value::List(vec![
        Value::Subclass { descriptor: 0, base: Box::new(Value::List(vec![Value::BackRef(1)])), fields: vec![Value::Int(1)] },
        Value::Subclass { descriptor: 0, base: Box::new(Value::Dict(vec![])), fields: vec![Value::List(vec![])] },
        Value::BackRef(2),
        Value::BackRef(1),
    ]);
    let text = round_trip(value, table);
    assert!(text.contains(r#"{"$id":1,"$subclass":"m.Tags","$base":[{"$ref":1}],"n":1}"#), "{text}");
    assert!(text.contains(r#"{"$id":2,"$subclass":0,"$base":{},"n":[]}"#), "{text}");
}

#[test]
fn damaged_bodies_are_errors_not_panics() {
    let table = vec![TableEntry { persistent: true, type_name: "m.P".into(), fields: vec!["x".into(), "$y".into()] }];
    let value = Value::List(vec![
        Value::Object { descriptor: 0, fields: vec![Value::BackRef(0), Value::Decimal("1.5".into())] },
        Value::Dict(vec![(Value::Int(1), Value::DateTime { micros: 5, tz: TzInfo::Offset(60_000_000), fold: false })]),
        Value::Time { micros: 7, tz: TzInfo::Named("UTC".into()), fold: true },
        Value::BigInt(vec![1, 2, 3, 4, 5, 6, 7, 8, 0x80]),
        Value::Enum { descriptor: 0, member: "A".into() },
    ]);
    let bytes = Body { table, value }.encode();
    for at in 0..bytes.len() {
        for b in [0x00, 0x01, 0x0b, 0x0d, 0x10, 0x12, 0x18, 0x19, 0x1a, 0x7f, 0x80, 0xff] {
            let mut damaged = bytes.clone();
            damaged[at] = b;
            let _ = to_json(&damaged);
        }
        let _ = to_json(&bytes[..at]);
    }
}

/// Every byte of a document naming classes by number, replaced by bytes that change its
/// structure or its numbers, and every prefix: errors, never panics; a number changed to
/// another class's is read as that class.
#[test]
fn damaged_documents_are_errors_not_panics() {
    let text = r#"{"$copal":2,"value":[{"$type":"m.A","x":1},{"$enum":"m.B","$member":"C"},{"$type":0,"x":{"$id":5,"$list":[{"$enum":1,"$member":"D"}]}},{"$subclass":"m.C","$base":[]},{"$ref":5},{"$subclass":2,"$base":{}}]}"#;
    for at in 0..text.len() {
        for b in [b'0', b'1', b'3', b'9', b'-', b'.', b'"', b'{', b'}', b'[', b']', b',', b':', b'$', b'x'] {
            let mut damaged = text.as_bytes().to_vec();
            damaged[at] = b;
            if let Ok(damaged) = std::str::from_utf8(&damaged) {
                let _ = from_json(damaged, usize::MAX);
            }
        }
        let _ = from_json(&text[..at], usize::MAX);
    }
    let swapped = from_json(&text.replace(r#"{"$type":0,"#, r#"{"$type":1,"#), usize::MAX).unwrap();
    assert_eq!(swapped.table[2].type_name, "m.B");
}

#[test]
fn malformed_documents_are_errors() {
    for bad in [
        "", "[1]", "{\"value\":1}", "{\"$copal\":3,\"value\":1}", "{\"$copal\":0,\"value\":1}",
        "{\"$copal\":1,\"value\":{\"$type\":0}}", "{\"$copal\":2,\"value\":{\"$type\":0}}",
        "{\"$copal\":2,\"value\":[{\"$type\":\"m.A\"},{\"$type\":1}]}", "{\"$copal\":2,\"value\":[{\"$type\":\"m.A\"},{\"$enum\":-0,\"$member\":\"X\"}]}",
        "{\"$copal\":2,\"value\":{\"$type\":[\"m.A\"]}}", "{\"$copal\":1,\"value\":{\"$ref\":0}}",
        "{\"$copal\":1,\"value\":{\"$bytes\":\"A\"}}", "{\"$copal\":1,\"value\":{\"$tuple\":[],\"a\":1}}",
        "{\"$copal\":1,\"value\":{\"$nope\":1}}", "{\"$copal\":1,\"value\":01}", "{\"$copal\":1,\"value\":\"\\ud800\"}",
        "{\"$copal\":1,\"value\":1} x", "{\"$copal\":1,\"value\":{\"$date\":\"2024-13-01\"}}",
    ] {
        assert!(from_json(bad, usize::MAX).is_err(), "{bad}");
    }
    let deep = format!("{{\"$copal\":1,\"value\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(matches!(from_json(&deep, usize::MAX), Err(TextError::Syntax { .. })));
}

#[test]
fn trees_are_held_to_their_limit() {
    // Laid out as copal writes it, a document is read without trees, whatever the limit; laid out
    // otherwise (the version last), or holding a tagged value, through trees the limit bounds.
    let items = "[],".repeat(10_000);
    let canonical = format!("{{\"$copal\":2,\"value\":[{items}[]]}}");
    let reordered = format!("{{\"value\":[{items}[]],\"$copal\":2}}");
    let tagged = format!("{{\"$copal\":2,\"value\":{{\"$tuple\":[{items}[]]}}}}");
    assert!(table_and_value_from_json(&canonical, 1000).is_ok());
    for text in [&reordered, &tagged] {
        let body = table_and_value_from_json(text, usize::MAX).unwrap();
        assert_eq!(table_and_value_from_json(text, 10_010 * super::parser::JSON_NODE).unwrap(), body);
        assert_eq!(table_and_value_from_json(text, 1 << 20), Err(TextError::TooLarge { limit: 1 << 20 }));
        assert_eq!(from_json(text, 1 << 20), Err(TextError::TooLarge { limit: 1 << 20 }));
    }
}
