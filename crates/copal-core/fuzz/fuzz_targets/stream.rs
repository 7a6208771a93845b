//! Fuzz target `stream`: arbitrary bytes -> `stream::Stream::read` (docs/FUZZING.md).
//!
//! Checks `containers::check_stream` (reading returns; an accepted stream written again reads
//! back the same) within `container_bound`, and that a value the core decoder accepts, with the
//! forms of the stream's version, round-trips as in the `value` target.

#![no_main]

use copal_core_fuzz::containers::{check_stream, container_bound};
use copal_core_fuzz::{bounded_to, check_value_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bounded_to(container_bound(data.len()), || check_stream(data, |bytes, table, forms| check_value_bytes(bytes, table, forms)));
});
