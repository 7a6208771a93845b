//! The checks of fuzz targets `stream` and `archive` (docs/FUZZING.md), which
//! tests/fuzz_regressions.rs also runs on the committed corpora (it includes this file): they
//! use copal-core alone.

use copal_core::format::{ValueForms, Writer};
use copal_core::stream::archive::{write_archive, Archive};
use copal_core::stream::{value_forms, Compression, Frame, Header, Stream, StreamTable, STREAM};

/// The `max_size` the targets read with: a payload inflates to at most this many bytes.
pub const MAX_SIZE: usize = 1 << 20;

/// How much checking a container of `input_len` bytes may allocate at once: reading it twice
/// (the input, then what it is written back to), each time 128 bytes per input byte plus a
/// constant, the inflated payload (capped at `MAX_SIZE`, briefly twice while its buffer grows)
/// and the codecs' own buffers, which a frame's header sizes whatever the input: an LZ4 frame's
/// two block buffers of up to 4 MiB each, 8 MiB each for a frame of LZ4's legacy format (which
/// its decoders read too), and the 128 KiB chunk copal reads at a time.
pub fn container_bound(input_len: usize) -> usize {
    2 * ((64 << 10) + 128 * input_len + 2 * MAX_SIZE + (17 << 20))
}

/// Values an archive check reads: an index may claim as many as its input has offsets.
const VALUES_READ: usize = 256;

/// Reads `data` as a stream: it returns (never panics); an accepted stream's body, framed again
/// with the same compression, reads back to the same version, table and body; `value` is given
/// the stream's value, its table and the value forms of its version.
pub fn check_stream(data: &[u8], value: impl Fn(&[u8], &StreamTable, ValueForms)) {
    let Ok(stream) = Stream::read(data, MAX_SIZE) else { return };
    assert!(stream.body.len() <= MAX_SIZE);
    let flags = Header::read(data, &STREAM).expect("read once").flags;
    let compression = Compression::new(flags, None).expect("a code read from a stream has a default level");
    let parts: [&[u8]; 1] = [&stream.body];
    let framed = Frame::new(&STREAM, stream.version, 0, &parts, compression).expect("compression in memory").to_vec();
    let again = match Stream::read(&framed, MAX_SIZE) {
        Ok(again) => again,
        Err(e) => panic!("a stream written again does not read: {e}"),
    };
    assert_eq!((again.version, &again.table, &again.body[..]), (stream.version, &stream.table, &stream.body[..]));
    value(stream.value(), &stream.table, value_forms(stream.version));
}

/// Reads `data` as an archive: opening it and reading its values' ranges returns (never
/// panics); the values an accepted archive yields, written into a new archive with its table,
/// read back the same; `value` is given each value, the table and the value forms of archives
/// (those of stream version 1).
pub fn check_archive(data: &[u8], value: impl Fn(&[u8], &StreamTable, ValueForms)) {
    let Ok(archive) = Archive::read(data, MAX_SIZE) else { return };
    let (mut values, mut ends) = (Vec::new(), Vec::new());
    for k in 0..archive.index.len().min(VALUES_READ) {
        let Ok(bytes) = archive.value(k) else { return };
        values.extend_from_slice(bytes);
        ends.push(values.len());
        value(bytes, &archive.table, value_forms(1));
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
    for (k, end) in ends.iter().enumerate() {
        let start = if k == 0 { 0 } else { ends[k - 1] };
        assert_eq!(again.value(k).expect("a written index"), &values[start..*end]);
    }
}
