//! Values decoded and encoded: round trips, field readers, memo values and malformed input.

use super::*;

struct OneField;
impl DescriptorSource for OneField {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        if id == 5 { Ok(1) } else { Err(DecodeError::UnknownDescriptor { id }) }
    }
}

fn round_trip(v: Value) {
    let mut w = Writer::new();
    v.encode(&mut w);
    let mut r = Reader::new(&w.buf);
    assert_eq!(decode_value(&mut r, &OneField).unwrap(), v);
    assert!(r.is_empty());
}

#[test]
fn values_round_trip() {
    round_trip(Value::List(vec![
        Value::None,
        Value::Int(-5),
        Value::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 1]),
        Value::Str("héllo".into()),
        Value::Dict(vec![(Value::Str("k".into()), Value::Tuple(vec![Value::Bool(true)]))]),
        Value::DateTime { micros: -1, tz: TzInfo::Offset(3_600_000_000), fold: true },
        Value::Time { micros: 5, tz: TzInfo::Named("Europe/Paris".into()), fold: false },
        Value::TimeDelta { days: -3, seconds: 4, micros: 5 },
        Value::Ref(make_oid(4, 99)),
        Value::Object { descriptor: 5, fields: vec![Value::BackRef(0)] },
    ]));
}

#[test]
fn skipping_and_reusing_buffers_read_the_same_fields() {
    let fields = [
        Value::Str("first".into()),
        Value::Int(-7),
        Value::List(vec![Value::Str("in a list".into())]),
        Value::Float(2.5),
        Value::Bytes(vec![0, 1, 2]),
        Value::Str("last".into()),
        // Points at the list: skipping the list must still number its memo slot.
        Value::BackRef(0),
    ];
    let mut w = Writer::new();
    fields.iter().for_each(|v| v.encode(&mut w));
    for (wanted, expected) in fields.iter().enumerate() {
        let mut reader = FieldReader::new(&w.buf, 0, &OneField).unwrap();
        (0..wanted).try_for_each(|_| reader.skip_value()).unwrap();
        // A slot holding a value of another kind, or a longer string, is overwritten.
        let mut slot = if wanted % 2 == 0 { Value::Str("a longer previous string".into()) } else { Value::None };
        reader.next_value_into(&mut slot).unwrap();
        assert_eq!(&slot, expected);
    }
    let mut reader = FieldReader::new(&w.buf, 0, &OneField).unwrap();
    assert!(reader.next_str_is(b"first").unwrap());
    assert!(!reader.next_str_is(b"-7").unwrap()); // an int, not a string
    reader.skip_value().unwrap();
    reader.skip_value().unwrap();
    reader.skip_value().unwrap();
    assert!(!reader.next_str_is(b"las").unwrap());
    let mut reader = FieldReader::new(&w.buf[..w.buf.len() - 1], 0, &OneField).unwrap();
    (0..fields.len() - 1).try_for_each(|_| reader.skip_value()).unwrap();
    assert!(matches!(reader.skip_value(), Err(DecodeError::Truncated { .. })));
}

#[test]
fn memo_values_are_the_values_back_references_stand_for() {
    let shared = Value::List(vec![Value::Int(1), Value::Str("x".into())]);
    let fields = [
        Value::Str("s".into()),
        Value::Dict(vec![(Value::Str("k".into()), shared.clone())]),
        Value::BackRef(1),
    ];
    let mut w = Writer::new();
    fields.iter().for_each(|v| v.encode(&mut w));
    assert_eq!(memo_value(&w.buf, 0, &OneField, 1).unwrap(), Some(shared));
    assert!(matches!(memo_value(&w.buf, 0, &OneField, 0).unwrap(), Some(Value::Dict(_))));
    assert_eq!(memo_value(&w.buf, 0, &OneField, 2).unwrap(), None);
}

/// A SUBCLASS of base BYTEARRAY (one field, a BACKREF to the instance) is a value of text
/// documents' bodies, and an unknown base in a record's.
#[test]
fn a_bytearray_base_is_read_in_documents_only() {
    let bytes = [tag::SUBCLASS, 5, tag::BYTEARRAY, 2, b'a', b'b', tag::BACKREF, 0];
    let expected = Value::Subclass { descriptor: 5, base: Box::new(Value::ByteArray(b"ab".to_vec())), fields: vec![Value::BackRef(0)] };
    assert_eq!(decode_document_value(&mut Reader::new(&bytes), &OneField), Ok(expected));
    assert_eq!(decode_value(&mut Reader::new(&bytes), &OneField), Err(DecodeError::UnknownTag { offset: 2, tag: tag::BYTEARRAY }));
    assert!(matches!(decode_document_value(&mut Reader::new(&bytes[..5]), &OneField), Err(DecodeError::LengthTooLarge { .. })));
}

#[test]
fn backref_must_point_backwards() {
    let bytes = [tag::LIST, 1, tag::BACKREF, 1];
    assert!(matches!(decode_value(&mut Reader::new(&bytes), &OneField), Err(DecodeError::BadBackRef { .. })));
}

#[test]
fn deep_nesting_is_rejected() {
    let mut bytes = vec![];
    for _ in 0..5000 {
        bytes.extend([tag::LIST, 1]);
    }
    bytes.push(tag::NONE);
    assert!(matches!(decode_value(&mut Reader::new(&bytes), &OneField), Err(DecodeError::TooDeep { .. })));
}

#[test]
fn unknown_descriptor_is_an_error() {
    let bytes = [tag::OBJECT, 9];
    assert_eq!(decode_value(&mut Reader::new(&bytes), &OneField), Err(DecodeError::UnknownDescriptor { id: 9 }));
}

#[test]
fn numbers_compare_across_types() {
    assert!(Value::Int(1).query_eq(&Value::Float(1.0)));
    assert!(Value::Bool(true).query_eq(&Value::Int(1)));
    assert!(!Value::Int(1).query_eq(&Value::Str("1".into())));
}
