//! Fuzz target `archive`: arbitrary bytes -> `stream::archive::Archive::read` (docs/FUZZING.md).
//!
//! Checks that opening an archive (header, bounded decompression, descriptor table, index) and
//! reading its values' ranges returns, never panics, hangs or allocates past its bound; that the
//! values an accepted archive yields, written into a new archive with its table, read back the
//! same; and that values the core decoder accepts round-trip as in the `value` target.

#![no_main]

use copal_core::format::{decode_value, Reader, Writer};
use copal_core::stream::archive::{write_archive, Archive};
use copal_core::stream::Compression;
use copal_core_fuzz::{bounded, bounded_to, check_value_round_trip, container_bound, MAX_SIZE};
use libfuzzer_sys::fuzz_target;

/// Values read per input: an index may claim many (each at least one offset of the input).
const VALUES_READ: usize = 256;

fuzz_target!(|data: &[u8]| {
    let Ok(archive) = bounded_to(container_bound(data.len()), || Archive::read(data, MAX_SIZE)) else { return };
    let (mut values, mut ends) = (Vec::new(), Vec::new());
    for k in 0..archive.index.len().min(VALUES_READ) {
        let Ok(bytes) = archive.value(k) else { return };
        values.extend_from_slice(bytes);
        ends.push(values.len());
        let mut r = Reader::new(bytes);
        if let Ok(value) = bounded(bytes.len(), || decode_value(&mut r, &archive.table)) {
            check_value_round_trip(&value, r.position(), &archive.table);
        }
    }
    let mut table = Writer::new();
    copal_core::text::write_table(&mut table, &archive.table.entries);
    let written = write_archive(&table.buf, &values, &ends, Compression::NONE).expect("an archive in memory");
    let again = match Archive::read(&written, MAX_SIZE) {
        Ok(again) => again,
        Err(e) => panic!("an archive written again does not read: {e}"),
    };
    assert_eq!(again.table, archive.table);
    assert_eq!(again.index.len(), ends.len());
    for k in 0..ends.len() {
        assert_eq!(again.value(k).expect("written index"), archive.value(k).expect("read before"));
    }
});
