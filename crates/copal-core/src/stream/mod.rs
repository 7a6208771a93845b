//! Standalone streams and archives (docs/STREAM.md): the containers that `copal.dumps` and
//! `copal.pack_many` write, read here without Python. A container is a header (magic bytes,
//! version, flags, payload length), then its payload, compressed or not; a stream's payload is
//! one body (a descriptor table and one value), an archive's a table, many values and an index
//! of them (archive.rs).
//!
//! This module owns the bytes around the values: headers, compression and its limits, the field
//! kinds after a table and the archive index. The values of every version are read by
//! `format::decode_value_with` with the forms of their version (`value_forms`,
//! `Stream::decode_value`), or by the binding's decoder, which builds objects from them.

pub mod archive;
pub mod compression;
mod lz4_frames;
mod payload;

use std::borrow::Cow;
use std::fmt;

pub use compression::{Codec, Compression, InflateError, LevelError, DEFAULT_MAX_SIZE};
pub use payload::{Payload, BLANKS};

use crate::format::{decode_value_with, read_field_kinds, DecodeError, DescriptorSource, FieldKind, Reader, Value, ValueForms, Writer};
use crate::text::TableEntry;

/// The first bytes of every stream (docs/STREAM.md section 2).
pub const STREAM_MAGIC: [u8; 4] = *b"CPL1";
/// The first version whose values share strings (STRREF).
pub const SHARED_STRINGS_VERSION: u8 = 2;
/// The first version whose descriptors have field kinds and whose values have typed objects.
pub const TYPED_OBJECTS_VERSION: u8 = 3;
/// The first version whose values may have superseded copies and SUBCLASS values of scalar
/// bases. A stream without either is written as version 3, which copal releases before version
/// 4 read (docs/STREAM.md section 8).
pub const COPIES_AND_SCALAR_SUBCLASSES_VERSION: u8 = 4;
/// The newest stream version this build reads and writes; older versions are read too.
pub const STREAM_VERSION: u8 = COPIES_AND_SCALAR_SUBCLASSES_VERSION;

const FLAGS_OFFSET: usize = STREAM_MAGIC.len() + 1;

/// The value forms of a stream of `version` (docs/STREAM.md sections 5 and 8); an archive's
/// values are those of version 1 (section 10).
pub fn value_forms(version: u8) -> ValueForms {
    let copies = version >= COPIES_AND_SCALAR_SUBCLASSES_VERSION;
    ValueForms {
        references: false,
        shared_strings: version >= SHARED_STRINGS_VERSION,
        typed_objects: version >= TYPED_OBJECTS_VERSION,
        copies_and_scalar_bases: copies,
        bytearray_bases: copies,
    }
}

/// What distinguishes the two containers that share the header layout of docs/STREAM.md
/// section 2: streams and archives (section 10).
#[derive(Debug)]
pub struct Container {
    pub name: &'static str,
    pub magic: [u8; 4],
    /// The versions this build reads, all of them from 1.
    pub newest_version: u8,
    /// Flag bits beyond the compression code that this container defines.
    pub extra_flags: u8,
}

pub const STREAM: Container = Container { name: "stream", magic: STREAM_MAGIC, newest_version: STREAM_VERSION, extra_flags: 0 };

/// Why a container could not be read. `Display` gives the whole message, naming the container.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamError {
    /// The input does not start with the container's magic bytes.
    BadMagic { container: &'static str, magic: [u8; 4] },
    /// A version this build does not read.
    UnsupportedVersion { container: &'static str, version: u8, newest: u8 },
    /// The header is malformed (reserved flags, bad length, bytes after the payload).
    Header { container: &'static str, error: DecodeError },
    /// The payload does not decompress, or inflates past the caller's limit.
    Inflate(InflateError),
    /// The body (descriptor table, field kinds, value or index) is malformed; `part` names it.
    Body { part: &'static str, error: DecodeError },
}

impl StreamError {
    /// The error kind of docs/STREAM.md section 7 (the test vectors' names).
    pub fn kind(&self) -> &'static str {
        match self {
            StreamError::BadMagic { .. } => "BadMagic",
            StreamError::UnsupportedVersion { .. } => "UnsupportedVersion",
            StreamError::Inflate(InflateError::TooLarge { .. }) => "TooLarge",
            StreamError::Inflate(InflateError::Invalid { .. }) => "BadCompression",
            StreamError::Header { error, .. } | StreamError::Body { error, .. } => error.kind(),
        }
    }
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::BadMagic { container, magic } => write!(
                f,
                "corrupt {container}: not a copal {container} (it does not start with the magic bytes \"{}\")",
                String::from_utf8_lossy(magic)
            ),
            StreamError::UnsupportedVersion { container, version, newest } => write!(
                f,
                "corrupt {container}: {container} version {version} is not supported by this copal (reads versions 1 to {newest})"
            ),
            StreamError::Header { container, error } => write!(f, "corrupt {container} header: {error}"),
            StreamError::Inflate(error) => write!(f, "corrupt stream: {error}"),
            StreamError::Body { part, error } => write!(f, "corrupt {part}: {error}"),
        }
    }
}

impl std::error::Error for StreamError {}

impl From<InflateError> for StreamError {
    fn from(error: InflateError) -> Self {
        StreamError::Inflate(error)
    }
}

/// A container's header (docs/STREAM.md section 2) and its payload.
#[derive(Debug, Clone, Copy)]
pub struct Header<'a> {
    pub version: u8,
    pub flags: u8,
    pub payload: &'a [u8],
}

impl<'a> Header<'a> {
    /// Reads a stream or archive header, checking its fields in the order of docs/STREAM.md
    /// section 2; the payload must end the input.
    pub fn read(data: &'a [u8], kind: &Container) -> Result<Header<'a>, StreamError> {
        let container = kind.name;
        let magic = &data[..data.len().min(kind.magic.len())];
        if magic != &kind.magic[..magic.len()] {
            return Err(StreamError::BadMagic { container, magic: kind.magic });
        }
        let bad = |error| StreamError::Header { container, error };
        let mut r = Reader::new(data);
        r.bytes(kind.magic.len()).map_err(bad)?;
        let version = r.u8().map_err(bad)?;
        if !(1..=kind.newest_version).contains(&version) {
            return Err(StreamError::UnsupportedVersion { container, version, newest: kind.newest_version });
        }
        let flags = r.u8().map_err(bad)?;
        if flags & !(compression::CODE_MASK | kind.extra_flags) != 0 {
            return Err(bad(DecodeError::OutOfRange { offset: FLAGS_OFFSET, what: "flags" }));
        }
        let length = r.varint().map_err(bad)?;
        let remaining = r.remaining() as u64;
        if length > remaining {
            return Err(bad(DecodeError::Truncated { offset: data.len(), needed: (length - remaining) as usize }));
        }
        if length < remaining {
            return Err(bad(DecodeError::TrailingBytes { offset: r.position() + length as usize }));
        }
        Ok(Header { version, flags, payload: &data[r.position()..] })
    }

    /// The payload, decompressed if the flags say so, never more than `max_size` bytes.
    pub fn body(&self, max_size: usize) -> Result<Cow<'a, [u8]>, StreamError> {
        Ok(compression::decompress(self.flags & compression::CODE_MASK, self.payload, max_size)?)
    }
}

/// A container ready to be written: its header and its payload, which is either the
/// compressed data or the parts given, uncompressed. Written where its owner wants it
/// (`write_into`), so that a caller can write it straight into the buffer it returns.
pub struct Frame<'p> {
    header: Vec<u8>,
    compressed: Option<Vec<u8>>,
    parts: &'p [&'p [u8]],
}

impl<'p> Frame<'p> {
    /// The container `kind` of `version` whose payload is `parts` concatenated, compressed with
    /// `compression`; `flags` holds the container's own flag bits.
    pub fn new(kind: &Container, version: u8, flags: u8, parts: &'p [&'p [u8]], compression: Compression) -> std::io::Result<Frame<'p>> {
        let compressed = compression.compress(parts)?;
        let payload_len = compressed.as_ref().map_or_else(|| parts.iter().map(|part| part.len()).sum(), Vec::len);
        let mut header = Writer::new();
        header.bytes(&kind.magic);
        header.u8(version);
        header.u8(flags | compression.code());
        header.varint(payload_len as u64);
        Ok(Frame { header: header.buf, compressed, parts })
    }

    /// The container's size in bytes.
    pub fn len(&self) -> usize {
        self.header.len() + self.compressed.as_ref().map_or_else(|| self.parts.iter().map(|part| part.len()).sum(), Vec::len)
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the container into `out`, which is `len()` bytes long.
    pub fn write_into(&self, out: &mut [u8]) {
        let (head, rest) = out.split_at_mut(self.header.len());
        head.copy_from_slice(&self.header);
        match &self.compressed {
            Some(payload) => rest.copy_from_slice(payload),
            None => {
                let mut at = 0;
                for part in self.parts {
                    rest[at..at + part.len()].copy_from_slice(part);
                    at += part.len();
                }
            }
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0; self.len()];
        self.write_into(&mut out);
        out
    }
}

/// A descriptor table as a stream body of `version` holds it (docs/STREAM.md section 4): the
/// entries and, from version 3, each entry's field kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamTable {
    pub entries: Vec<TableEntry>,
    /// One list per entry from version 3; empty before.
    pub kinds: Vec<Vec<FieldKind>>,
}

impl StreamTable {
    /// Reads the table (and field kinds) at the start of a body of `version`.
    pub fn read(r: &mut Reader<'_>, version: u8) -> Result<StreamTable, DecodeError> {
        let entries = crate::text::read_table(r)?;
        let kinds = if version >= TYPED_OBJECTS_VERSION { read_field_kinds(r, entries.iter().map(|entry| entry.fields.len()))? } else { Vec::new() };
        Ok(StreamTable { entries, kinds })
    }
}

/// The table's descriptors by id, with their field kinds, for `format::decode_value_with`.
impl DescriptorSource for StreamTable {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        self.entries.get(id as usize).map(|entry| entry.fields.len()).ok_or(DecodeError::UnknownDescriptor { id })
    }

    fn field_kinds(&self, id: u32) -> &[FieldKind] {
        self.kinds.get(id as usize).map_or(&[], Vec::as_slice)
    }

    fn same_type(&self, a: u32, b: u32) -> bool {
        let type_name = |id: u32| self.entries.get(id as usize).map(|entry| &entry.type_name);
        a == b || (type_name(a).is_some() && type_name(a) == type_name(b))
    }
}

/// A stream read as far as copal-core reads it alone: its version, its body (decompressed) and
/// its descriptor table, and where the value starts in the body.
#[derive(Debug)]
pub struct Stream<'a> {
    pub version: u8,
    pub body: Cow<'a, [u8]>,
    pub table: StreamTable,
    pub value_start: usize,
}

impl<'a> Stream<'a> {
    /// Reads the header, payload and table of stream `data`, whose payload, if compressed, may
    /// inflate to at most `max_size` bytes.
    pub fn read(data: &'a [u8], max_size: usize) -> Result<Stream<'a>, StreamError> {
        let opened = Opened::read(data, &STREAM, max_size, "stream descriptor table")?;
        Ok(Stream { version: opened.header.version, body: opened.payload, table: opened.table, value_start: opened.table_end })
    }

    /// The bytes of the value.
    pub fn value(&self) -> &[u8] {
        &self.body[self.value_start..]
    }

    /// Decodes the value, with the forms of the stream's version; nothing may follow it.
    /// Error offsets count from the start of the body.
    pub fn decode_value(&self) -> Result<Value, StreamError> {
        let mut r = Reader::new(&self.body);
        let value = r.bytes(self.value_start).and_then(|_| {
            let value = decode_value_with(&mut r, &self.table, value_forms(self.version))?;
            r.expect_end()?;
            Ok(value)
        });
        value.map_err(|error| StreamError::Body { part: "stream value", error })
    }
}

/// What streams and archives start alike: the header, the payload (decompressed) and the
/// descriptor table at its start.
struct Opened<'a> {
    header: Header<'a>,
    payload: Cow<'a, [u8]>,
    table: StreamTable,
    /// Where the table ends in the payload.
    table_end: usize,
}

impl<'a> Opened<'a> {
    /// Reads container `kind` from `data`, its payload inflating to at most `max_size` bytes;
    /// `table_part` names its table in errors.
    fn read(data: &'a [u8], kind: &Container, max_size: usize, table_part: &'static str) -> Result<Opened<'a>, StreamError> {
        let header = Header::read(data, kind)?;
        let payload = header.body(max_size)?;
        let mut r = Reader::new(&payload);
        let table = StreamTable::read(&mut r, header.version).map_err(|error| StreamError::Body { part: table_part, error })?;
        let table_end = r.position();
        Ok(Opened { header, payload, table, table_end })
    }
}

#[cfg(test)]
mod tests;
