//! The record header (docs/FORMAT.md section "Records").

use super::error::DecodeError;
use super::oid::ROOT_DESCRIPTOR;
use super::reader::Reader;
use super::tag;
use super::writer::Writer;

pub const FORMAT_VERSION: u8 = 1;
const VERSION_SHIFT: u32 = 4;
const FLAGS_MASK: u8 = 0x0f;
/// The state holds plain mutable containers (list, dict, set, bytearray, plain objects) whose
/// in-place mutation the Python layer detects by re-encoding at commit.
pub const FLAG_MUTABLE_STATE: u8 = 0x01;
const KNOWN_FLAGS: u8 = FLAG_MUTABLE_STATE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub flags: u8,
    pub descriptor: u32,
    /// The id of the transaction that wrote this record (its serial).
    pub tid: u64,
}

impl RecordHeader {
    pub fn write(&self, w: &mut Writer) {
        w.u8((FORMAT_VERSION << VERSION_SHIFT) | (self.flags & FLAGS_MASK));
        w.varint(u64::from(self.descriptor));
        w.varint(self.tid);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<RecordHeader, DecodeError> {
        let offset = r.position();
        let first = r.u8()?;
        let version = first >> VERSION_SHIFT;
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion { version });
        }
        let flags = first & FLAGS_MASK;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(DecodeError::OutOfRange { offset, what: "record flags" });
        }
        let descriptor = r.u32_varint()?;
        let tid = r.varint()?;
        Ok(RecordHeader { flags, descriptor, tid })
    }

    pub fn parse(data: &[u8]) -> Result<(RecordHeader, usize), DecodeError> {
        let mut r = Reader::new(data);
        let header = Self::read(&mut r)?;
        Ok((header, r.position()))
    }
}

/// The record of a fresh, empty root mapping: a PersistentDict whose one field `data` is `{}`.
pub fn encode_root_record(tid: u64) -> Vec<u8> {
    let mut w = Writer::new();
    RecordHeader { flags: 0, descriptor: ROOT_DESCRIPTOR, tid }.write(&mut w);
    w.u8(tag::DICT);
    w.varint(0);
    w.buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = RecordHeader { flags: FLAG_MUTABLE_STATE, descriptor: 300, tid: 70_000 };
        let mut w = Writer::new();
        h.write(&mut w);
        assert_eq!(w.buf[0], 0x11);
        assert_eq!(RecordHeader::parse(&w.buf).unwrap(), (h, w.buf.len()));
    }

    #[test]
    fn unknown_version_is_rejected() {
        assert_eq!(RecordHeader::parse(&[0x21, 1, 1]), Err(DecodeError::UnsupportedVersion { version: 2 }));
    }
}
