//! Fuzz target `record`: arbitrary bytes -> the record and descriptor decoders
//! (docs/FUZZING.md): `RecordHeader::parse`, `decode_record_state` (against the fixed descriptor
//! table of the test vectors), `FieldReader` (the field-by-field reader of query evaluation) and
//! `Descriptor::decode`.
//!
//! Besides "no panic, abort, hang or over-allocation", checks that the decoders agree with each
//! other (the header of a decoded record is what `RecordHeader::parse` reads; `FieldReader`
//! yields the same fields or the same error) and that accepted records and descriptors
//! round-trip through their encoders to equal values (NaN-aware), in no more bytes, canonically.
//! With feature `alloc-bound`, also that decoding a record allocates at most a bounded amount per
//! input byte.

#![no_main]

use copal_core::format::{decode_record_state, Descriptor, DescriptorSource, FieldReader, RecordHeader, Writer};
use copal_core::{DecodeError, Value};
use copal_core_fuzz::{bounded, same, Table};
use libfuzzer_sys::fuzz_target;

fn encode_record(header: &RecordHeader, fields: &[Value]) -> Vec<u8> {
    let mut w = Writer::new();
    header.write(&mut w);
    fields.iter().for_each(|f| f.encode(&mut w));
    w.buf
}

fn check_record(data: &[u8]) {
    let parsed = RecordHeader::parse(data);
    let decoded = bounded(data.len(), || decode_record_state(data, &Table));

    // FieldReader (query evaluation) must see the same fields, or fail with the same error.
    if let Ok((header, state_start)) = parsed {
        assert!(state_start <= data.len());
        if let Ok(count) = Table.field_count(header.descriptor) {
            let mut reader = FieldReader::new(data, state_start, &Table).expect("header fits the record");
            let fields: Result<Vec<Value>, DecodeError> = (0..count).map(|_| reader.next_value()).collect();
            match (&fields, &decoded) {
                (Ok(a), Ok((_, b))) => {
                    assert!(a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y)), "FieldReader disagrees")
                }
                (Ok(_), Err(e)) => assert!(
                    matches!(e, DecodeError::TrailingBytes { .. }),
                    "FieldReader accepted, record failed with {e:?}"
                ),
                (Err(a), Err(b)) => assert_eq!(a, b, "FieldReader and decode_record_state fail differently"),
                (Err(a), Ok(_)) => panic!("FieldReader failed with {a:?} on a valid record"),
            }
        }
    }

    let Ok((header, fields)) = decoded else { return };
    assert_eq!(parsed.map(|(h, _)| h), Ok(header), "decode_record_state and RecordHeader::parse disagree");
    let bytes = encode_record(&header, &fields);
    assert!(bytes.len() <= data.len(), "re-encoding grew from {} to {} bytes", data.len(), bytes.len());
    let (header2, fields2) = match decode_record_state(&bytes, &Table) {
        Ok(r) => r,
        Err(e) => panic!("re-encoded record does not decode: {e:?}\nbytes: {bytes:02x?}"),
    };
    assert_eq!(header2, header);
    assert!(
        fields2.len() == fields.len() && fields2.iter().zip(&fields).all(|(x, y)| same(x, y)),
        "round trip changed the record"
    );
    assert_eq!(encode_record(&header2, &fields2), bytes, "record encoding is not canonical");
}

fn check_descriptor(data: &[u8]) {
    let Ok(descriptor) = Descriptor::decode(9, data) else { return };
    let bytes = descriptor.encode();
    assert!(bytes.len() <= data.len(), "descriptor re-encoding grew");
    assert_eq!(Descriptor::decode(9, &bytes), Ok(descriptor.clone()), "descriptor round trip");
    assert_eq!(Descriptor::decode(9, &bytes).unwrap().encode(), bytes);
}

fuzz_target!(|data: &[u8]| {
    check_record(data);
    check_descriptor(data);
});
