//! The binary encoding of exports (docs/EXPORT.md section 2): `CPLX`, a version and flags, then
//! entries, each `kind | varint n | payload (n bytes) | CRC-32`, the checksum covering the kind,
//! the length and the payload, so that no damaged byte of an entry (an oid, a descriptor, a
//! record) goes unnoticed. Version 1 exports, whose records alone carry a checksum (the store's
//! CRC-16), are read too.

use std::borrow::Cow;
use std::io::{self, BufRead, Read, Write};

use super::checksum::unseal;
use super::index::IndexDef;
use super::transfer::{malformed, Entry, EntryFault, EntryReader, EntryWriter, TransferError};
use crate::format::{ClassNo, DecodeError, Descriptor, Reader, Writer, MAX_VARINT_LEN};

/// The first bytes of a binary export.
pub const MAGIC: [u8; 4] = *b"CPLX";
/// The version this copal writes: every entry ends with its CRC-32.
pub(crate) const BINARY_VERSION: u8 = 2;
/// The first version, still read: only records carry a checksum, the store's CRC-16 after the
/// record bytes.
const RECORD_CHECKSUM_VERSION: u8 = 1;
/// Reserved flag bits of the header: none is defined.
const FLAGS: u8 = 0;
const CHECKSUM_LEN: usize = 4;
/// Payloads are read this much at a time at first, and then in steps as large as what was read
/// so far: a damaged length never makes the reader reserve room the input does not fill.
const FIRST_READ: usize = 64 << 10;

const KIND_HEADER: u8 = 1;
const KIND_DESCRIPTOR: u8 = 2;
const KIND_REMOVED: u8 = 3;
const KIND_INDEX: u8 = 4;
const KIND_RECORD: u8 = 5;
const KIND_END: u8 = 6;
const KIND_HIGH_WATER: u8 = 7;

/// The name of an entry of `kind` in errors.
fn kind_name(kind: u8) -> Cow<'static, str> {
    Cow::Borrowed(match kind {
        KIND_HEADER => "header",
        KIND_DESCRIPTOR => "descriptor",
        KIND_REMOVED => "removed-fields declaration",
        KIND_INDEX => "index definition",
        KIND_RECORD => "record",
        KIND_END => "end",
        KIND_HIGH_WATER => "high-water mark",
        other => return Cow::Owned(format!("kind {other}")),
    })
}

fn write_names(w: &mut Writer, names: &[String]) {
    w.varint(names.len() as u64);
    names.iter().for_each(|name| w.length_prefixed(name.as_bytes()));
}

fn read_names(r: &mut Reader<'_>) -> Result<Vec<String>, DecodeError> {
    let count = r.length(1)?;
    (0..count).map(|_| r.str().map(str::to_owned)).collect()
}

pub(crate) struct CopalWriter<'w> {
    out: &'w mut dyn Write,
    payload: Writer,
}

impl<'w> CopalWriter<'w> {
    pub(crate) fn new(out: &'w mut dyn Write) -> Result<Self, TransferError> {
        out.write_all(&MAGIC)?;
        out.write_all(&[BINARY_VERSION, FLAGS])?;
        Ok(CopalWriter { out, payload: Writer::new() })
    }
}

impl EntryWriter for CopalWriter<'_> {
    fn write_entry(&mut self, entry: &Entry<'_>) -> Result<(), TransferError> {
        let w = &mut self.payload;
        w.buf.clear();
        let kind = match entry {
            Entry::Header { tid, records } => {
                w.varint(*tid);
                w.varint(*records);
                KIND_HEADER
            }
            Entry::Descriptor(d) => {
                w.varint(u64::from(d.id));
                w.bytes(&d.encode());
                KIND_DESCRIPTOR
            }
            Entry::Removed { type_name, fields } => {
                w.length_prefixed(type_name.as_bytes());
                write_names(w, fields);
                KIND_REMOVED
            }
            Entry::HighWater { class, next } => {
                w.varint(u64::from(*class));
                w.varint(*next);
                KIND_HIGH_WATER
            }
            Entry::Index(def) => {
                w.bytes(&def.encode());
                KIND_INDEX
            }
            Entry::Record { oid, record } => {
                w.bytes(&oid.to_le_bytes());
                w.bytes(record);
                KIND_RECORD
            }
            Entry::End { records } => {
                w.varint(*records);
                KIND_END
            }
        };
        let mut frame = Writer { buf: Vec::with_capacity(1 + MAX_VARINT_LEN) };
        frame.u8(kind);
        frame.varint(w.buf.len() as u64);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&frame.buf);
        crc.update(&w.buf);
        self.out.write_all(&frame.buf)?;
        self.out.write_all(&w.buf)?;
        self.out.write_all(&crc.finalize().to_le_bytes())?;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TransferError> {
        Ok(self.out.flush()?)
    }
}

pub(crate) struct CopalReader<'r> {
    input: &'r mut dyn BufRead,
    version: u8,
    /// The number of the next entry (the header is entry 0).
    entry: u64,
    /// The largest payload accepted.
    max_size: usize,
    payload: Vec<u8>,
}

impl<'r> CopalReader<'r> {
    pub(crate) fn new(input: &'r mut dyn BufRead, max_size: usize) -> Result<Self, TransferError> {
        let mut header = [0; MAGIC.len() + 2];
        input.read_exact(&mut header).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => malformed("the export is truncated (in the header)"),
            _ => TransferError::Io(e),
        })?;
        if header[..MAGIC.len()] != MAGIC {
            return Err(malformed("the input does not start with CPLX"));
        }
        let (version, flags) = (header[MAGIC.len()], header[MAGIC.len() + 1]);
        if !(RECORD_CHECKSUM_VERSION..=BINARY_VERSION).contains(&version) {
            return Err(malformed(format!(
                "export version {version} is not supported (this copal reads versions {RECORD_CHECKSUM_VERSION} to {BINARY_VERSION})"
            )));
        }
        if flags != FLAGS {
            return Err(malformed(format!("reserved header flags {flags:#04x} are set")));
        }
        Ok(CopalReader { input, version, entry: 0, max_size, payload: Vec::new() })
    }

    /// Fills `buf` with the next bytes of the input; false if it ends first.
    fn fill(&mut self, buf: &mut [u8]) -> Result<bool, TransferError> {
        match self.input.read_exact(buf) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(TransferError::Io(e)),
        }
    }

    /// The bytes of the entry length (a varint, docs/FORMAT.md section 1), read byte by byte;
    /// None if the input ends inside it.
    fn length_bytes(&mut self) -> Result<Option<Vec<u8>>, TransferError> {
        let mut bytes = Vec::with_capacity(MAX_VARINT_LEN);
        while bytes.len() < MAX_VARINT_LEN {
            let mut byte = [0];
            if !self.fill(&mut byte)? {
                return Ok(None);
            }
            bytes.push(byte[0]);
            if byte[0] & 0x80 == 0 {
                break;
            }
        }
        Ok(Some(bytes))
    }

    /// Reads `len` bytes into `self.payload`, which grows with the data that arrives (never
    /// beyond `len`); false if the input ends first.
    fn read_payload(&mut self, len: usize) -> Result<bool, TransferError> {
        self.payload.clear();
        while self.payload.len() < len {
            let step = (len - self.payload.len()).min(self.payload.len().max(FIRST_READ));
            self.payload.reserve_exact(step);
            let read = Read::take(&mut self.input, step as u64).read_to_end(&mut self.payload)?;
            if read < step {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl EntryReader for CopalReader<'_> {
    fn next_entry(&mut self) -> Result<Option<Entry<'static>>, TransferError> {
        let mut kind = [0];
        if !self.fill(&mut kind)? {
            return Ok(None);
        }
        let (kind, entry) = (kind[0], self.entry);
        self.entry += 1;
        let fault = |fault| TransferError::BadEntry { entry, what: kind_name(kind).into_owned(), fault };
        let Some(len_bytes) = self.length_bytes()? else { return Err(fault(EntryFault::Truncated)) };
        let len = Reader::new(&len_bytes).varint().map_err(|e| fault(EntryFault::BadPayload(format!("its length: {e}"))))?;
        let Some(len) = usize::try_from(len).ok().filter(|&len| len <= self.max_size) else {
            return Err(fault(EntryFault::TooLarge { size: len, max_size: self.max_size }));
        };
        if !self.read_payload(len)? {
            return Err(fault(EntryFault::Truncated));
        }
        if self.version >= BINARY_VERSION {
            let mut stored = [0; CHECKSUM_LEN];
            if !self.fill(&mut stored)? {
                return Err(fault(EntryFault::Truncated));
            }
            let mut crc = crc32fast::Hasher::new();
            crc.update(&[kind]);
            crc.update(&len_bytes);
            crc.update(&self.payload);
            if crc.finalize().to_le_bytes() != stored {
                return Err(fault(EntryFault::BadChecksum));
            }
        }
        if !(KIND_HEADER..=KIND_HIGH_WATER).contains(&kind) {
            return Err(fault(EntryFault::UnknownKind));
        }
        if kind == KIND_RECORD {
            return self.record(entry).map(Some);
        }
        let mut r = Reader::new(&self.payload);
        let decoded = decode_entry(kind, &mut r).and_then(|entry| r.expect_end().map(|()| entry));
        decoded.map(Some).map_err(|e| fault(EntryFault::BadPayload(e.to_string())))
    }
}

impl CopalReader<'_> {
    /// The record entry `entry` whose payload was read: its oid and record, which keeps the
    /// payload's buffer (a record may be large: it is not copied).
    fn record(&mut self, entry: u64) -> Result<Entry<'static>, TransferError> {
        let Some(oid) = self.payload.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))) else {
            let fault = EntryFault::BadPayload(DecodeError::Truncated { offset: self.payload.len(), needed: 8 - self.payload.len() }.to_string());
            return Err(TransferError::BadEntry { entry, what: "record".into(), fault });
        };
        // The next payload is read into a buffer of the same room, not grown again from nothing.
        let room = self.payload.capacity();
        let mut record = std::mem::replace(&mut self.payload, Vec::with_capacity(room));
        record.drain(..8);
        if self.version == RECORD_CHECKSUM_VERSION {
            let fault = |fault| TransferError::BadEntry { entry, what: format!("record {oid:#x}"), fault };
            let len = unseal(oid, &record).map_err(|_| fault(EntryFault::BadChecksum))?.len();
            record.truncate(len);
        }
        Ok(Entry::Record { oid, record: Cow::Owned(record) })
    }
}

fn decode_entry(kind: u8, r: &mut Reader<'_>) -> Result<Entry<'static>, DecodeError> {
    Ok(match kind {
        KIND_HEADER => Entry::Header { tid: r.varint()?, records: r.varint()? },
        KIND_DESCRIPTOR => {
            let id = r.u32_varint()?;
            Entry::Descriptor(Descriptor::decode(id, r.bytes(r.remaining())?)?)
        }
        KIND_REMOVED => Entry::Removed { type_name: r.str()?.to_owned(), fields: read_names(r)? },
        KIND_INDEX => Entry::Index(IndexDef::decode(0, r.bytes(r.remaining())?)?),
        KIND_END => Entry::End { records: r.varint()? },
        KIND_HIGH_WATER => {
            let offset = r.position();
            let class = ClassNo::try_from(r.varint()?).map_err(|_| DecodeError::OutOfRange { offset, what: "class number" })?;
            Entry::HighWater { class, next: r.varint()? }
        }
        other => unreachable!("entry kind {other} is refused before its payload is decoded"),
    })
}

#[cfg(test)]
mod tests;
