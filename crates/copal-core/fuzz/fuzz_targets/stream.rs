//! Fuzz target `stream`: arbitrary bytes -> `stream::Stream::read` (docs/FUZZING.md).
//!
//! Checks that reading a stream (header, bounded decompression, descriptor table, field kinds)
//! returns, never panics, hangs or allocates past its bound; that an accepted stream's body,
//! framed again with the same compression, reads back to the same version, body and table; and
//! that a version 1 value the core decoder accepts round-trips as in the `value` target.

#![no_main]

use copal_core::format::{decode_value, Reader};
use copal_core::stream::{Compression, Frame, Header, Stream, STREAM};
use copal_core_fuzz::{bounded, bounded_to, check_value_round_trip, container_bound, MAX_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(stream) = bounded_to(container_bound(data.len()), || Stream::read(data, MAX_SIZE)) else { return };
    assert!(stream.body.len() <= MAX_SIZE);
    let flags = Header::read(data, &STREAM).expect("read once").flags;
    let compression = Compression::new(flags, None).expect("a code read from a stream has a default level");
    let parts: [&[u8]; 1] = [&stream.body];
    let framed = Frame::new(&STREAM, stream.version, 0, &parts, compression).expect("compression of a body in memory").to_vec();
    let again = match Stream::read(&framed, MAX_SIZE) {
        Ok(again) => again,
        Err(e) => panic!("a stream written again does not read: {e}"),
    };
    assert_eq!((again.version, &again.table, &again.body[..]), (stream.version, &stream.table, &stream.body[..]));

    if stream.version == 1 {
        let mut r = Reader::new(stream.value());
        if let Ok(value) = bounded(r.remaining(), || decode_value(&mut r, &stream.table)) {
            check_value_round_trip(&value, r.position(), &stream.table);
        }
    }
});
