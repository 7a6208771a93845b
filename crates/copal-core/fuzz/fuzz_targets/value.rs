//! Fuzz target `value`: arbitrary bytes -> `decode_value` (docs/FUZZING.md).
//!
//! Checks that the decoder returns (never panics, aborts, hangs or over-allocates), and that
//! whatever it accepts round-trips: `Value::encode` writes bytes that decode again, completely,
//! to an equal value (floats compared bit for bit, so NaN payloads count), that are no longer
//! than the input bytes the value was read from, and that re-encode to themselves. With feature
//! `alloc-bound`, also that decoding allocates at most a bounded amount per input byte.

#![no_main]

use copal_core::format::{decode_value, Reader, ValueForms};
use copal_core_fuzz::{bounded, check_value_round_trip, Table};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let Ok(value) = bounded(data.len(), || decode_value(&mut r, &Table)) else { return };
    let consumed = r.position();
    assert!(consumed >= 1 && consumed <= data.len());

    check_value_round_trip(&value, consumed, &Table, ValueForms::RECORD);
});
