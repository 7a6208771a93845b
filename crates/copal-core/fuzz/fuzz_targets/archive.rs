//! Fuzz target `archive`: arbitrary bytes -> `stream::archive::Archive::read` (docs/FUZZING.md).
//!
//! Checks `containers::check_archive` (opening and reading value ranges returns; the values of
//! an accepted archive written into a new one read back the same) within `container_bound`, and
//! that values the core decoder accepts round-trip as in the `value` target.

#![no_main]

use copal_core_fuzz::containers::{check_archive, container_bound};
use copal_core_fuzz::{bounded_to, check_value_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bounded_to(container_bound(data.len()), || check_archive(data, |bytes, table, forms| check_value_bytes(bytes, table, forms)));
});
