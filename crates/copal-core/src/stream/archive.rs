//! Archives (docs/STREAM.md section 10): many independent values in one buffer or file, with
//! one descriptor table for all of them and an index of offsets, so that value `k` is read
//! without reading any other.
//!
//! The section (the payload, decompressed) is: the descriptor table, the values one after
//! another, the index (`count + 1` little-endian offsets into the section, u32 or u64 by the
//! WIDE_OFFSETS flag; offset `k` is where value `k` starts, the last one where the index
//! starts), then the count as a u64.

use std::ops::Range;

use super::{Compression, Container, Frame, StreamError, StreamTable};
use crate::format::{DecodeError, Writer};

/// Archives have one version; their values never share strings.
pub const ARCHIVE_VERSION: u8 = 1;
/// Archive flag: index offsets are u64 (else u32).
pub const WIDE_OFFSETS: u8 = 0x04;
pub const ARCHIVE: Container = Container { name: "archive", magic: *b"CPA1", newest_version: ARCHIVE_VERSION, extra_flags: WIDE_OFFSETS };

/// The section ends with the value count as a u64.
const COUNT_SIZE: usize = size_of::<u64>();

/// Where the values of an archive section are.
///
/// Invariants, established by `new`: the index of `len + 1` offsets of `width` bytes starts at
/// `index_start` and ends 8 bytes before the section's end; the values lie between
/// `values_start` and `index_start`; the last offset is `index_start`. The other offsets are
/// checked when read (`value_range`), so that opening costs O(table), not O(values).
#[derive(Debug, Clone)]
pub struct ArchiveIndex {
    pub values_start: usize,
    pub index_start: usize,
    width: usize,
    len: usize,
}

impl ArchiveIndex {
    /// The index of `section`, whose descriptor table ends at `values_start`; `flags` are the
    /// header's.
    pub fn new(section: &[u8], values_start: usize, flags: u8) -> Result<ArchiveIndex, StreamError> {
        let bad = |error| StreamError::Body { part: "archive index", error };
        let width = if flags & WIDE_OFFSETS != 0 { 8 } else { 4 };
        let trailer = section.len().checked_sub(COUNT_SIZE).filter(|&at| at >= values_start);
        let Some(trailer) = trailer else {
            return Err(bad(DecodeError::Truncated { offset: section.len(), needed: values_start + COUNT_SIZE - section.len() }));
        };
        let count = u64::from_le_bytes(section[trailer..].try_into().expect("8 bytes"));
        let room = ((trailer - values_start) / width) as u64;
        if count >= room {
            return Err(bad(DecodeError::LengthTooLarge { offset: trailer, length: count }));
        }
        let len = count as usize;
        let index = ArchiveIndex { values_start, index_start: trailer - (len + 1) * width, width, len };
        if index.offset(section, len) != index.index_start as u64 {
            return Err(bad(DecodeError::OutOfRange { offset: index.index_start, what: "last offset" }));
        }
        Ok(index)
    }

    /// How many values the archive holds.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn offset(&self, section: &[u8], i: usize) -> u64 {
        let at = self.index_start + i * self.width;
        let raw = &section[at..at + self.width];
        if self.width == 8 {
            u64::from_le_bytes(raw.try_into().expect("8 bytes"))
        } else {
            u64::from(u32::from_le_bytes(raw.try_into().expect("4 bytes")))
        }
    }

    /// Where value `k` (`k < len`) is in `section`, checked against the section's layout.
    pub fn value_range(&self, section: &[u8], k: usize) -> Result<Range<usize>, ArchiveValueError> {
        let (start, end) = (self.offset(section, k), self.offset(section, k + 1));
        let bounds = self.values_start as u64..=self.index_start as u64;
        if !bounds.contains(&start) || !bounds.contains(&end) || start > end {
            return Err(ArchiveValueError { k, start, end, values: self.values_start..self.index_start });
        }
        Ok(start as usize..end as usize)
    }
}

/// An index entry whose value lies outside the values (or ends before it starts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveValueError {
    pub k: usize,
    pub start: u64,
    pub end: u64,
    pub values: Range<usize>,
}

impl std::fmt::Display for ArchiveValueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ArchiveValueError { k, start, end, values } = self;
        write!(f, "corrupt archive: the index gives value {k} the bytes {start}..{end}, outside the values ({}..{})", values.start, values.end)
    }
}

impl std::error::Error for ArchiveValueError {}

/// The section of an archive and where its parts are, read without Python: the descriptor
/// table (parsed) and the index of its values.
#[derive(Debug)]
pub struct Archive<'a> {
    pub section: std::borrow::Cow<'a, [u8]>,
    pub table: StreamTable,
    pub index: ArchiveIndex,
}

impl<'a> Archive<'a> {
    /// Reads the header, section, table and index of archive `data`, whose payload, if
    /// compressed, may inflate to at most `max_size` bytes.
    pub fn read(data: &'a [u8], max_size: usize) -> Result<Archive<'a>, StreamError> {
        let opened = super::Opened::read(data, &ARCHIVE, max_size, "archive descriptor table")?;
        let index = ArchiveIndex::new(&opened.payload, opened.table_end, opened.header.flags)?;
        Ok(Archive { section: opened.payload, table: opened.table, index })
    }

    /// The bytes of value `k` (`k < len`).
    pub fn value(&self, k: usize) -> Result<&[u8], ArchiveValueError> {
        Ok(&self.section[self.index.value_range(&self.section, k)?])
    }
}

/// The end of an archive's section after its values: the index and the count, for a section
/// whose descriptor table takes `table_len` bytes and whose values, `values_len` bytes, end at
/// `ends` (relative to the first value); and the header flags it needs.
pub fn index_bytes(table_len: usize, values_len: usize, ends: &[usize]) -> (u8, Vec<u8>) {
    let index_start = table_len + values_len;
    let wide = u32::try_from(index_start).is_err();
    let width = if wide { 8 } else { 4 };
    let mut index = Writer { buf: Vec::with_capacity((ends.len() + 1) * width + COUNT_SIZE) };
    for offset in std::iter::once(0).chain(ends.iter().copied()).map(|end| (table_len + end) as u64) {
        if wide {
            index.bytes(&offset.to_le_bytes());
        } else {
            index.bytes(&(offset as u32).to_le_bytes());
        }
    }
    index.bytes(&(ends.len() as u64).to_le_bytes());
    (if wide { WIDE_OFFSETS } else { 0 }, index.buf)
}

/// The archive of the values encoded one after another in `values` (value `k` ending at
/// `ends[k]`), whose descriptor table is `table` (its entry count, then its entries, as
/// docs/STREAM.md section 4 writes them), compressed with `compression`.
pub fn write_archive(table: &[u8], values: &[u8], ends: &[usize], compression: Compression) -> std::io::Result<Vec<u8>> {
    let (flags, index) = index_bytes(table.len(), values.len(), ends);
    Ok(Frame::new(&ARCHIVE, ARCHIVE_VERSION, flags, &[table, values, &index], compression)?.to_vec())
}
