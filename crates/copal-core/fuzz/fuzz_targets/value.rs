//! Fuzz target `value`: arbitrary bytes -> `decode_value` (docs/FUZZING.md).
//!
//! Checks that the decoder returns (never panics, aborts, hangs or over-allocates), and that
//! whatever it accepts round-trips: `Value::encode` writes bytes that decode again, completely,
//! to an equal value (floats compared bit for bit, so NaN payloads count), that are no longer
//! than the input bytes the value was read from, and that re-encode to themselves. With feature
//! `alloc-bound`, also that decoding allocates at most a bounded amount per input byte.

#![no_main]

use copal_core::format::{decode_value, Reader};
use copal_core_fuzz::{bounded, encode, same, Table};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let Ok(value) = bounded(data.len(), || decode_value(&mut r, &Table)) else { return };
    let consumed = r.position();
    assert!(consumed >= 1 && consumed <= data.len());

    let bytes = encode(&value);
    assert!(bytes.len() <= consumed, "re-encoding grew from {consumed} to {} bytes", bytes.len());
    let mut r2 = Reader::new(&bytes);
    let again = match decode_value(&mut r2, &Table) {
        Ok(v) => v,
        Err(e) => panic!("re-encoded value does not decode: {e:?}\nvalue: {value:?}\nbytes: {bytes:02x?}"),
    };
    assert!(r2.is_empty(), "re-encoded value leaves {} trailing bytes", r2.remaining());
    assert!(same(&value, &again), "round trip changed the value:\n{value:?}\n{again:?}");
    assert_eq!(encode(&again), bytes, "encoding is not canonical");
});
