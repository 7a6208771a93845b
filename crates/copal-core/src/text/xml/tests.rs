//! Round trips through the writer and both readers, escapes, and malformed documents.

use super::*;
use crate::format::{TzInfo, Value};
use crate::text::{xml_body, Body, TableEntry, TextError};

fn round_trip(value: Value, table: Vec<TableEntry>) -> String {
    let body = Body { table, value };
    let text = to_xml(&body.encode()).unwrap();
    assert_eq!(from_xml(&text, usize::MAX).unwrap(), body, "{text}");
    // The one-pass reader may number descriptors in another order: the graph is the same
    // when the document written back is.
    let direct = xml_body::transcode(&text).expect("copal's own documents are read in one pass");
    assert_eq!(to_xml(&direct).unwrap(), text);
    text
}

#[test]
fn values_shared_references_and_escapes() {
    let table = vec![
        TableEntry { persistent: true, type_name: "m.P".into(), fields: vec!["x".into()] },
        TableEntry { persistent: false, type_name: "m.T".into(), fields: vec!["y".into()] },
    ];
    let value = Value::List(vec![
        Value::Object { descriptor: 0, fields: vec![Value::BackRef(0)] },
        Value::Dict(vec![(Value::Int(1), Value::Str("<a & \"b\">\r\n\t".into())), (Value::Str("\u{1}".into()), Value::None)]),
        Value::Subclass { descriptor: 1, base: Box::new(Value::List(vec![Value::BackRef(3)])), fields: vec![Value::Float(f64::NAN)] },
        Value::DateTime { micros: 0, tz: TzInfo::Offset(3_600_000_000), fold: true },
        Value::BackRef(1),
    ]);
    let body = Body { table: table.clone(), value: value.clone() };
    let text = to_xml(&body.encode()).unwrap();
    let back = from_xml(&text, usize::MAX).unwrap();
    assert_eq!(back.table, table);
    // NaN != NaN: compare the encodings.
    assert_eq!(back.encode(), body.encode(), "{text}");
    assert!(text.starts_with(r#"<copal version="1"><list id="0"><object id="1" type="m.P" persistent="1"><field name="x"><ref id="0"/></field></object>"#), "{text}");
    assert!(text.contains("<str>&lt;a &amp; &quot;b&quot;&gt;&#13;&#10;&#9;</str>"), "{text}");
    assert!(text.contains(r#"<str base64="1">AQ==</str>"#), "{text}");
    assert!(text.contains(r#"<datetime fold="1">1970-01-01T00:00:00+01:00</datetime>"#), "{text}");
    round_trip(Value::Dict(vec![]), vec![]);
    // The same values but the SUBCLASS and the NaN, which the one-pass reader leaves to the tree.
    let one_pass = Value::List(vec![
        Value::Object { descriptor: 0, fields: vec![Value::BackRef(0)] },
        Value::Dict(vec![(Value::Int(1), Value::Str("<a & \"b\">\r\n\t".into())), (Value::Str("\u{1}".into()), Value::None)]),
        Value::DateTime { micros: 0, tz: TzInfo::Offset(3_600_000_000), fold: true },
        Value::BackRef(1),
    ]);
    round_trip(one_pass, table[..1].to_vec());
}

#[test]
fn malformed_documents_are_errors() {
    for bad in [
        "", "<copal/>", "<copal version=\"2\"><none/></copal>", "<copal version=\"1\"><none/><none/></copal>",
        "<copal version=\"1\"><nope/></copal>", "<copal version=\"1\"><int>x</int></copal>",
        "<copal version=\"1\"><list>text</list></copal>", "<copal version=\"1\"><ref id=\"0\"/></copal>",
        "<copal version=\"1\"><str>&bogus;</str></copal>", "<copal version=\"1\"><none/></copal>x",
        "<!DOCTYPE x [<!ENTITY a \"b\">]><copal version=\"1\"><none/></copal>",
        "<copal version=\"1\"><dict><int>1</int></dict></copal>", "<copal version=\"1\"><float>1</float></copal>",
    ] {
        assert!(from_xml(bad, usize::MAX).is_err(), "{bad}");
    }
    let deep = format!("<copal version=\"1\">{}{}</copal>", "<list>".repeat(10_000), "</list>".repeat(10_000));
    assert!(matches!(from_xml(&deep, usize::MAX), Err(TextError::Syntax { .. })));
}

/// XML 1.0 allows no character references to control characters other than tab, line feed and
/// carriage return, nor to U+FFFE and U+FFFF; `<?xml-stylesheet?>` is a processing
/// instruction, not a declaration. Both readers refuse them.
#[test]
fn characters_and_instructions_xml_forbids_are_refused() {
    for bad in [
        "<copal version=\"1\"><str>&#0;</str></copal>",
        "<copal version=\"1\"><str>a&#1;</str></copal>",
        "<copal version=\"1\"><str>&#x1F;</str></copal>",
        "<copal version=\"1\"><str>&#xFFFE;</str></copal>",
        "<copal version=\"1\"><enum type=\"m.E&#2;\">A</enum></copal>",
        "<?xml-stylesheet href=\"a.xsl\"?><copal version=\"1\"><none/></copal>",
        "<?xml version=\"1.0\"?><?xml-stylesheet href=\"a.xsl\"?><copal version=\"1\"><none/></copal>",
        "<?xmlversion=\"1.0\"?><copal version=\"1\"><none/></copal>",
    ] {
        assert!(xml_body::transcode(bad).is_none(), "{bad}");
        assert!(matches!(from_xml(bad, usize::MAX), Err(TextError::Syntax { .. })), "{bad}");
    }
    let text = "<?xml version=\"1.0\"?>\n<copal version=\"1\"><str>&#9;&#10;&#13;&#x10FFFF;</str></copal>";
    assert_eq!(from_xml(text, usize::MAX).unwrap().value, Value::Str("\t\n\r\u{10FFFF}".into()));
}

/// Names and enum members holding such characters have no XML form: writing them is an error,
/// not a document no reader accepts.
#[test]
fn names_xml_cannot_carry_are_not_written() {
    let table = |name: &str, field: &str| vec![TableEntry { persistent: false, type_name: name.into(), fields: vec![field.into()] }];
    let object = Value::Object { descriptor: 0, fields: vec![Value::None] };
    for (value, table) in [
        (object.clone(), table("m.\u{1}", "x")),
        (object, table("m.P", "x\u{0}")),
        (Value::Enum { descriptor: 0, member: "\u{FFFF}".into() }, table("m.E", "x")),
    ] {
        let Err(TextError::Mapping { message }) = to_xml(&Body { table, value }.encode()) else { panic!("written") };
        assert!(message.contains("XML 1.0 cannot carry"), "{message}");
    }
}

/// An element may carry at most `MAX_XML_ATTRIBUTES` attributes: 80,000 are refused at once,
/// not compared with each other.
#[test]
fn many_attributes_are_refused_at_once() {
    let attrs: String = (0..80_000).map(|i| format!(" a{i}=\"1\"")).collect();
    let text = format!("<copal version=\"1\"><none{attrs}/></copal>");
    let start = std::time::Instant::now();
    assert!(xml_body::transcode(&text).is_none());
    let Err(TextError::Syntax { message, .. }) = from_xml(&text, usize::MAX) else { panic!("read") };
    assert!(message.contains("more than 8 attributes"), "{message}");
    assert!(start.elapsed() < std::time::Duration::from_secs(1), "{:?}", start.elapsed());
    let eight: String = (0..MAX_XML_ATTRIBUTES).map(|i| format!(" a{i}=\"1\"")).collect();
    let Err(TextError::Mapping { message }) = from_xml(&format!("<copal version=\"1\"><none{eight}/></copal>"), usize::MAX) else { panic!("read") };
    assert!(message.contains("unexpected attribute"), "{message}");
}

#[test]
fn trees_are_held_to_their_limit() {
    // Laid out as copal writes it, a document is read without trees, whatever the limit; with a
    // comment inside its root, through trees the limit bounds.
    let items = "<list/>".repeat(10_000);
    let canonical = format!("<copal version=\"1\"><list>{items}</list></copal>");
    let commented = format!("<copal version=\"1\"><!-- --><list>{items}</list></copal>");
    assert!(table_and_value_from_xml(&canonical, 1000).is_ok());
    let body = table_and_value_from_xml(&commented, usize::MAX).unwrap();
    assert_eq!(table_and_value_from_xml(&commented, 10_010 * super::parser::XML_NODE).unwrap(), body);
    assert_eq!(table_and_value_from_xml(&commented, 1 << 20), Err(TextError::TooLarge { limit: 1 << 20 }));
    assert_eq!(from_xml(&commented, 1 << 20).map(drop), Err(TextError::TooLarge { limit: 1 << 20 }));
}
