//! The structure of LZ4 frames (LZ4 frame format specification 1.6.x), followed as their bytes
//! are read: the LZ4 decoder takes the end of its input inside a frame for the end of the frame,
//! so a frame cut after one of its blocks would decompress to a prefix of its content without an
//! error. `Lz4Frames` sees every byte the decoder reads and refuses an input that ends anywhere
//! but between frames: each frame must end with its end mark (and its content checksum, if its
//! flags announce one). Skippable frames are skipped; a legacy frame has no end mark and runs to
//! the end of the input.

use std::io::{self, Read};

const MAGIC: u32 = 0x184D_2204;
const LEGACY_MAGIC: u32 = 0x184C_2102;
/// Skippable frames have the magic numbers 0x184D2A50 to 0x184D2A5F.
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;
const SKIPPABLE_MASK: u32 = 0xFFFF_FFF0;
/// Frame descriptor flags (FLG).
const BLOCK_CHECKSUM: u8 = 0x10;
const CONTENT_SIZE: u8 = 0x08;
const CONTENT_CHECKSUM: u8 = 0x04;
const DICTIONARY_ID: u8 = 0x01;
/// The bit of a block size that marks an uncompressed block.
const UNCOMPRESSED: u32 = 0x8000_0000;

/// The content size the first frame of `payload` declares, if it is a (non-legacy) LZ4 frame
/// whose flags announce one: the 8 bytes after the magic, the flags and the block descriptor.
pub(crate) fn declared_content_size(payload: &[u8]) -> Option<u64> {
    let magic = u32::from_le_bytes(payload.get(..4)?.try_into().expect("4 bytes"));
    let flags = *payload.get(4)?;
    let size = payload.get(6..14).filter(|_| magic == MAGIC && flags & CONTENT_SIZE != 0)?;
    Some(u64::from_le_bytes(size.try_into().expect("8 bytes")))
}

pub(crate) const TRUNCATED: &str = "the LZ4 frame ends before its end mark";
pub(crate) const FOLLOWED: &str = "bytes follow the LZ4 frames";

/// Where the input is in the structure of its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// A frame's magic number; no byte of it read means the input is between frames.
    Magic,
    /// The size of a skippable frame.
    SkippableSize,
    /// The flags byte (FLG) of a frame descriptor.
    Flags,
    /// A block's size, or the end mark (a size of 0).
    BlockSize,
    /// `skip` more bytes, then `then`.
    Skip { then: After },
    /// A legacy frame, which runs to the end of the input.
    Legacy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    Magic,
    BlockSize,
}

/// Follows the frames of an LZ4 input fed to it in pieces of any size (`feed`), and tells
/// whether the input may end where it is (`end`).
#[derive(Debug)]
pub(crate) struct Lz4Frames {
    part: Part,
    /// The bytes of the current fixed-size field (magic, size) read so far.
    field: [u8; 4],
    got: usize,
    /// Bytes left of the data being skipped (a block, a skippable frame, descriptor fields).
    skip: u64,
    /// The flags of the current frame.
    flags: u8,
}

impl Default for Lz4Frames {
    fn default() -> Self {
        Lz4Frames { part: Part::Magic, field: [0; 4], got: 0, skip: 0, flags: 0 }
    }
}

impl Lz4Frames {
    /// Follows `bytes`, the next bytes of the input.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) -> Result<(), &'static str> {
        while !bytes.is_empty() {
            match self.part {
                Part::Legacy => return Ok(()),
                Part::Skip { then } => {
                    let n = usize::try_from(self.skip).unwrap_or(usize::MAX).min(bytes.len());
                    bytes = &bytes[n..];
                    self.skip -= n as u64;
                    if self.skip == 0 {
                        self.part = match then {
                            After::Magic => Part::Magic,
                            After::BlockSize => Part::BlockSize,
                        };
                    }
                }
                Part::Flags => {
                    self.flags = bytes[0];
                    bytes = &bytes[1..];
                    // The block descriptor (BD), the optional content size and dictionary id,
                    // and the header checksum.
                    let optional = if self.flags & CONTENT_SIZE != 0 { 8 } else { 0 } + if self.flags & DICTIONARY_ID != 0 { 4 } else { 0 };
                    self.skip_then(1 + optional + 1, After::BlockSize);
                }
                Part::Magic | Part::SkippableSize | Part::BlockSize => {
                    let n = (4 - self.got).min(bytes.len());
                    self.field[self.got..self.got + n].copy_from_slice(&bytes[..n]);
                    self.got += n;
                    bytes = &bytes[n..];
                    if self.got == 4 {
                        self.got = 0;
                        self.field_read(u32::from_le_bytes(self.field))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes the value of the fixed-size field just read.
    fn field_read(&mut self, value: u32) -> Result<(), &'static str> {
        match self.part {
            Part::Magic if value == MAGIC => self.part = Part::Flags,
            Part::Magic if value == LEGACY_MAGIC => self.part = Part::Legacy,
            Part::Magic if value & SKIPPABLE_MASK == SKIPPABLE_MAGIC => self.part = Part::SkippableSize,
            Part::Magic => return Err(FOLLOWED),
            Part::SkippableSize => self.skip_then(u64::from(value), After::Magic),
            Part::BlockSize if value == 0 => {
                let checksum = if self.flags & CONTENT_CHECKSUM != 0 { 4 } else { 0 };
                self.skip_then(checksum, After::Magic);
            }
            Part::BlockSize => {
                let checksum = if self.flags & BLOCK_CHECKSUM != 0 { 4 } else { 0 };
                self.skip_then(u64::from(value & !UNCOMPRESSED) + checksum, After::BlockSize);
            }
            Part::Flags | Part::Skip { .. } | Part::Legacy => unreachable!("no fixed-size field is read there"),
        }
        Ok(())
    }

    fn skip_then(&mut self, skip: u64, then: After) {
        self.skip = skip;
        self.part = match (skip, then) {
            (0, After::Magic) => Part::Magic,
            (0, After::BlockSize) => Part::BlockSize,
            _ => Part::Skip { then },
        };
    }

    /// Whether the input may end here: between frames, or in a legacy frame.
    pub(crate) fn end(&self) -> Result<(), &'static str> {
        match self.part {
            Part::Magic if self.got == 0 => Ok(()),
            Part::Legacy => Ok(()),
            _ => Err(TRUNCATED),
        }
    }
}

/// The input of an LZ4 decoder, checked by `Lz4Frames` as the decoder reads it: reading past
/// its end fails unless the input ends between frames, and so does a byte after the frames.
pub(crate) struct CheckedLz4<R> {
    input: R,
    frames: Lz4Frames,
}

impl<R> CheckedLz4<R> {
    pub(crate) fn new(input: R) -> Self {
        CheckedLz4 { input, frames: Lz4Frames::default() }
    }
}

impl<R: Read> Read for CheckedLz4<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.input.read(buf)?;
        let checked = if n == 0 && !buf.is_empty() { self.frames.end() } else { self.frames.feed(&buf[..n]) };
        checked.map_err(|message| io::Error::new(io::ErrorKind::InvalidData, message))?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// An LZ4 frame of `data` with the given flags' options, in blocks of 64 KiB.
    fn frame(data: &[u8], block_checksums: bool, content_checksum: bool, content_size: bool) -> Vec<u8> {
        let info = lz4_flex::frame::FrameInfo::new()
            .block_checksums(block_checksums)
            .content_checksum(content_checksum)
            .content_size(content_size.then_some(data.len() as u64));
        let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn follow(input: &[u8], piece: usize) -> Result<(), &'static str> {
        let mut frames = Lz4Frames::default();
        input.chunks(piece).try_for_each(|bytes| frames.feed(bytes))?;
        frames.end()
    }

    #[test]
    fn whole_frames_end_and_every_cut_one_does_not() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for options in 0..8 {
            let first = frame(&data, options & 1 != 0, options & 2 != 0, options & 4 != 0);
            let skippable = [0x5F, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 9, 9, 9];
            let second = frame(b"tail", false, options & 2 != 0, false);
            let input = [&first[..], &skippable, &second].concat();
            for piece in [1, 3, 4096, input.len()] {
                assert_eq!(follow(&input, piece), Ok(()), "options {options}, pieces of {piece}");
            }
            let between_frames = [first.len(), first.len() + skippable.len()];
            for cut in (1..input.len()).filter(|cut| !between_frames.contains(cut)) {
                assert_eq!(follow(&input[..cut], 1 << 20), Err(TRUNCATED), "options {options}, cut at {cut}");
            }
        }
    }

    #[test]
    fn bytes_after_the_frames_and_legacy_frames() {
        let mut input = frame(b"data", false, false, false);
        assert_eq!(follow(&input, 1), Ok(()));
        input.extend_from_slice(b"junk");
        assert_eq!(follow(&input, 1), Err(FOLLOWED));
        // A legacy frame runs to the end of the input, whatever follows its magic.
        assert_eq!(follow(&[0x02, 0x21, 0x4C, 0x18, 1, 2, 3], 2), Ok(()));
        assert_eq!(follow(&[], 1), Ok(()));
    }

    #[test]
    fn a_reader_fails_at_the_end_of_a_cut_frame() {
        let input = frame(&[5; 100_000], false, false, false);
        let mut whole = Vec::new();
        lz4_flex::frame::FrameDecoder::new(CheckedLz4::new(&input[..])).read_to_end(&mut whole).unwrap();
        assert_eq!(whole, [5; 100_000]);
        // Cut after the first block: the decoder alone reads the first 64 KiB without an error.
        let cut = &input[..input.len() - 4];
        assert!(lz4_flex::frame::FrameDecoder::new(cut).read_to_end(&mut Vec::new()).is_ok());
        let error = lz4_flex::frame::FrameDecoder::new(CheckedLz4::new(cut)).read_to_end(&mut Vec::new()).unwrap_err();
        assert_eq!((error.kind(), error.to_string()), (io::ErrorKind::InvalidData, TRUNCATED.to_owned()));
    }
}
