//! Compression of stream and archive payloads and of whole exports (docs/STREAM.md section 3,
//! docs/EXPORT.md): zstd, gzip and LZ4 in their standard frames, which the `zstd`, `gzip` and
//! `lz4` tools read too.
//!
//! Decompression of untrusted input is bounded: a payload never inflates past the caller's
//! `max_size`, and the output buffer never holds more room than that: it starts with the size
//! the frame declares, if it declares one (a few kilobytes of compressed data can claim
//! gigabytes, so the claim counts only up to `max_size`), and grows by half with the data
//! actually produced. The codecs' own working memory is what a frame header may ask for,
//! whatever the input's size: up to 16 MiB for LZ4 (two block buffers of 8 MiB for a frame of
//! its legacy format), the window for zstd (`window_log`), 32 KiB for gzip. LZ4 input is read
//! through `CheckedLz4`, which refuses frames cut before their end mark.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, BufRead, Read, Write};

use super::lz4_frames::CheckedLz4;

/// How many bytes a compressed payload may inflate to unless the caller says otherwise: large
/// enough for any graph that fits comfortably in memory as objects, small enough that a
/// decompression bomb cannot exhaust a process.
pub const DEFAULT_MAX_SIZE: usize = 256 << 20;

/// The compression codes of a container's flags (docs/STREAM.md section 2).
pub const NONE: u8 = 0;
pub const ZSTD: u8 = 1;
pub const GZIP: u8 = 2;
pub const LZ4: u8 = 3;
/// The flag bits that hold the compression code.
pub const CODE_MASK: u8 = 0x03;

const DEFAULT_ZSTD_LEVEL: i32 = 3;
const DEFAULT_GZIP_LEVEL: i32 = 6;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const LZ4_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];
/// How much decompressed data is read at a time.
const INFLATE_CHUNK: usize = 128 << 10;

/// A compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Zstd,
    Gzip,
    Lz4,
}

impl Codec {
    /// The codec of a compression code (None for NONE).
    pub fn from_code(code: u8) -> Option<Codec> {
        match code & CODE_MASK {
            ZSTD => Some(Codec::Zstd),
            GZIP => Some(Codec::Gzip),
            LZ4 => Some(Codec::Lz4),
            _ => None,
        }
    }

    /// The codec whose frame starts with `head`'s magic bytes.
    pub fn of_frame(head: &[u8]) -> Option<Codec> {
        [(&ZSTD_MAGIC[..], Codec::Zstd), (&GZIP_MAGIC, Codec::Gzip), (&LZ4_MAGIC, Codec::Lz4)]
            .into_iter()
            .find_map(|(magic, codec)| head.starts_with(magic).then_some(codec))
    }

    pub fn code(self) -> u8 {
        match self {
            Codec::Zstd => ZSTD,
            Codec::Gzip => GZIP,
            Codec::Lz4 => LZ4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::Zstd => "zstd",
            Codec::Gzip => "gzip",
            Codec::Lz4 => "lz4",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A compression level the codec does not have, or a level without a codec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelError(pub String);

impl fmt::Display for LevelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LevelError {}

/// How to compress: a codec and a level it has, or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    pub codec: Option<Codec>,
    pub level: i32,
}

impl Compression {
    pub const NONE: Compression = Compression { codec: None, level: 0 };

    /// The compression of `code` at `level` (the codec's default if None), checked: zstd has the
    /// levels of its library, gzip 0 to 9, LZ4 and no compression none.
    pub fn new(code: u8, level: Option<i32>) -> Result<Compression, LevelError> {
        if code > CODE_MASK {
            return Err(LevelError(format!("unknown compression code {code}")));
        }
        let codec = Codec::from_code(code);
        let level = match (codec, level) {
            (None | Some(Codec::Lz4), None) => 0,
            (None, Some(_)) => return Err(LevelError("a compression level needs a compression".into())),
            (Some(Codec::Lz4), Some(_)) => return Err(LevelError("lz4 has no compression levels: use compress=\"lz4\"".into())),
            (Some(Codec::Zstd), level) => {
                let level = level.unwrap_or(DEFAULT_ZSTD_LEVEL);
                let range = zstd::compression_level_range();
                if !range.contains(&level) {
                    return Err(LevelError(format!("zstd compression level {level} is outside {}..={}", range.start(), range.end())));
                }
                level
            }
            (Some(Codec::Gzip), level) => {
                let level = level.unwrap_or(DEFAULT_GZIP_LEVEL);
                if !(0..=9).contains(&level) {
                    return Err(LevelError(format!("gzip compression level {level} is outside 0..=9")));
                }
                level
            }
        };
        Ok(Compression { codec, level })
    }

    /// The compression code of the container flags.
    pub fn code(&self) -> u8 {
        self.codec.map_or(NONE, Codec::code)
    }

    /// The concatenation of `parts` compressed, in one frame that records the content size, or
    /// None without a codec.
    pub fn compress(&self, parts: &[&[u8]]) -> io::Result<Option<Vec<u8>>> {
        let Some(codec) = self.codec else { return Ok(None) };
        let len: usize = parts.iter().map(|part| part.len()).sum();
        let out = match codec {
            Codec::Zstd => {
                let mut encoder = zstd::stream::write::Encoder::new(Vec::with_capacity(len / 2), self.level)?;
                encoder.set_pledged_src_size(Some(len as u64))?;
                encoder.include_contentsize(true)?;
                parts.iter().try_for_each(|part| encoder.write_all(part))?;
                encoder.finish()?
            }
            Codec::Lz4 => {
                let info = lz4_flex::frame::FrameInfo::new().content_size(Some(len as u64));
                let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::with_capacity(len / 2));
                parts.iter().try_for_each(|part| encoder.write_all(part))?;
                encoder.finish().map_err(io::Error::other)?
            }
            Codec::Gzip => {
                let level = flate2::Compression::new(self.level as u32);
                let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(len / 2), level);
                parts.iter().try_for_each(|part| encoder.write_all(part))?;
                encoder.finish()?
            }
        };
        Ok(Some(out))
    }

    /// `out` behind a compressor of this codec (with the frame checksum: a damaged byte must not
    /// decompress to different data), for data too large to hold at once.
    pub fn writer<W: Write>(&self, out: W) -> io::Result<CompressingWriter<W>> {
        Ok(match self.codec {
            None => CompressingWriter::Plain(out),
            Some(Codec::Zstd) => {
                let mut encoder = zstd::stream::write::Encoder::new(out, self.level)?;
                encoder.include_checksum(true)?;
                CompressingWriter::Zstd(encoder)
            }
            Some(Codec::Gzip) => CompressingWriter::Gzip(flate2::write::GzEncoder::new(out, flate2::Compression::new(self.level as u32))),
            Some(Codec::Lz4) => CompressingWriter::Lz4(lz4_flex::frame::FrameEncoder::with_frame_info(
                lz4_flex::frame::FrameInfo::new().content_checksum(true),
                out,
            )),
        })
    }
}

/// A writer that compresses what it is given (`Compression::writer`); `finish` ends the frame.
pub enum CompressingWriter<W: Write> {
    Plain(W),
    Zstd(zstd::stream::write::Encoder<'static, W>),
    Gzip(flate2::write::GzEncoder<W>),
    Lz4(lz4_flex::frame::FrameEncoder<W>),
}

impl<W: Write> CompressingWriter<W> {
    /// Ends the compressed data and gives back the output, flushed.
    pub fn finish(self) -> io::Result<W> {
        let mut out = match self {
            CompressingWriter::Plain(out) => out,
            CompressingWriter::Zstd(encoder) => encoder.finish()?,
            CompressingWriter::Gzip(encoder) => encoder.finish()?,
            CompressingWriter::Lz4(encoder) => encoder.finish().map_err(io::Error::other)?,
        };
        out.flush()?;
        Ok(out)
    }
}

impl<W: Write> Write for CompressingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            CompressingWriter::Plain(w) => w.write(buf),
            CompressingWriter::Zstd(w) => w.write(buf),
            CompressingWriter::Gzip(w) => w.write(buf),
            CompressingWriter::Lz4(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            CompressingWriter::Plain(w) => w.flush(),
            CompressingWriter::Zstd(w) => w.flush(),
            CompressingWriter::Gzip(w) => w.flush(),
            CompressingWriter::Lz4(w) => w.flush(),
        }
    }
}

/// `input` decompressed if it starts with a zstd, gzip or LZ4 frame, else as it is: exports are
/// read without being told their compression. The decompressors work a buffer at a time.
pub fn detecting_reader<'a, R: BufRead + 'a>(mut input: R) -> io::Result<Box<dyn BufRead + 'a>> {
    Ok(match Codec::of_frame(input.fill_buf()?) {
        Some(Codec::Zstd) => Box::new(io::BufReader::new(zstd::stream::read::Decoder::with_buffer(input)?)),
        Some(Codec::Gzip) => Box::new(io::BufReader::new(WholeGzip(flate2::bufread::GzDecoder::new(input)))),
        Some(Codec::Lz4) => Box::new(io::BufReader::new(lz4_flex::frame::FrameDecoder::new(CheckedLz4::new(input)))),
        None => Box::new(input),
    })
}

/// A gzip decoder that also rejects data after its member: one member is all copal writes.
struct WholeGzip<R: BufRead>(flate2::bufread::GzDecoder<R>);

impl<R: BufRead> Read for WholeGzip<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read(buf)?;
        if n == 0 && !buf.is_empty() && !self.0.get_mut().fill_buf()?.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "bytes follow the gzip member"));
        }
        Ok(n)
    }
}

/// Why a payload could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InflateError {
    /// The payload is not a valid frame of its codec.
    Invalid { codec: Codec, detail: String },
    /// The payload inflates to more than `max_size` bytes.
    TooLarge { codec: Codec, max_size: usize },
}

impl fmt::Display for InflateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InflateError::Invalid { codec, detail } => write!(f, "the {codec} payload does not decompress ({detail})"),
            InflateError::TooLarge { codec, max_size } => write!(
                f,
                "the {codec} payload inflates to more than max_size = {max_size} bytes; pass a larger \
                 max_size to loads/load if the stream is trusted"
            ),
        }
    }
}

impl std::error::Error for InflateError {}

/// `payload` decompressed with the codec of compression `code` (borrowed as it is for NONE),
/// never more than `max_size` bytes. A zstd or LZ4 payload may be several frames, as their
/// formats allow; a gzip payload is one member.
pub fn decompress(code: u8, payload: &[u8], max_size: usize) -> Result<Cow<'_, [u8]>, InflateError> {
    let Some(codec) = Codec::from_code(code) else { return Ok(Cow::Borrowed(payload)) };
    let invalid = |e: io::Error| InflateError::Invalid { codec, detail: e.to_string() };
    let declared = declared_size(codec, payload);
    let body = match codec {
        Codec::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(payload).map_err(invalid)?;
            // The decoder allocates a frame's whole window when the frame does not say its
            // content size: a window much larger than the output may be is refused first.
            decoder.window_log_max(window_log(max_size)).map_err(invalid)?;
            inflate(codec, decoder, declared, max_size)?
        }
        Codec::Lz4 => inflate(codec, lz4_flex::frame::FrameDecoder::new(CheckedLz4::new(payload)), declared, max_size)?,
        Codec::Gzip => {
            let mut decoder = flate2::bufread::GzDecoder::new(payload);
            let body = inflate(codec, &mut decoder, declared, max_size)?;
            if !decoder.into_inner().is_empty() {
                return Err(InflateError::Invalid { codec, detail: "bytes follow the gzip member".into() });
            }
            body
        }
    };
    Ok(Cow::Owned(body))
}

/// The largest zstd window (as a base-2 logarithm) a payload bounded by `max_size` may use: the
/// smallest that holds `max_size` bytes, but at least 8 MiB (the window of zstd's level 19 when
/// the content size is not known, so that frames of other tools read) and at most zstd's own
/// default limit, 128 MiB.
fn window_log(max_size: usize) -> u32 {
    let log = usize::BITS - max_size.saturating_sub(1).leading_zeros();
    log.clamp(23, 27)
}

/// The size the content of a payload says it has, if it says one: the content size of its first
/// zstd or LZ4 frame, or the size a gzip member's trailer gives (modulo 2^32). A hint, which the
/// data may belie.
fn declared_size(codec: Codec, payload: &[u8]) -> Option<u64> {
    match codec {
        Codec::Zstd => zstd::zstd_safe::get_frame_content_size(payload).ok().flatten(),
        Codec::Lz4 => super::lz4_frames::declared_content_size(payload),
        Codec::Gzip => {
            let trailer = payload.len().checked_sub(4).filter(|_| payload.starts_with(&GZIP_MAGIC))?;
            Some(u64::from(u32::from_le_bytes(payload[trailer..].try_into().expect("4 bytes"))))
        }
    }
}

/// Reads everything a streaming decompressor produces into a buffer of the `declared` size
/// (if the payload declares one) that grows by half when the data needs more, capped at
/// `max_size`, so capacity obeys the bound too: the error comes before the allocation would.
fn inflate(codec: Codec, mut decoder: impl Read, declared: Option<u64>, max_size: usize) -> Result<Vec<u8>, InflateError> {
    let room = declared.map_or(0, |size| usize::try_from(size).unwrap_or(usize::MAX).min(max_size));
    let mut out = Vec::with_capacity(room);
    let mut chunk = vec![0u8; INFLATE_CHUNK];
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(InflateError::Invalid { codec, detail: e.to_string() }),
        };
        let needed = out.len() + n;
        if needed > max_size {
            return Err(InflateError::TooLarge { codec, max_size });
        }
        reserve_within(&mut out, needed, max_size);
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Makes room in `buffer` for `needed` bytes (`needed <= limit`): it grows by half when it must
/// grow, and never beyond `limit`, so a buffer bounded by `limit` is never given room past it.
pub(crate) fn reserve_within(buffer: &mut Vec<u8>, needed: usize, limit: usize) {
    if needed > buffer.capacity() {
        let target = (buffer.capacity() + buffer.capacity() / 2).max(needed).min(limit);
        buffer.reserve_exact(target - buffer.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATA: &[u8] = b"copal copal copal copal copal copal copal copal copal copal";

    fn compressed(code: u8) -> Vec<u8> {
        Compression::new(code, None).unwrap().compress(&[&DATA[..10], &DATA[10..]]).unwrap().unwrap()
    }

    #[test]
    fn every_codec_round_trips_and_is_bounded() {
        for code in [ZSTD, GZIP, LZ4] {
            let payload = compressed(code);
            assert_eq!(decompress(code, &payload, DATA.len()).unwrap(), DATA);
            let codec = Codec::from_code(code).unwrap();
            assert_eq!(decompress(code, &payload, DATA.len() - 1), Err(InflateError::TooLarge { codec, max_size: DATA.len() - 1 }));
        }
        assert_eq!(decompress(NONE, DATA, 0).unwrap(), DATA);
    }

    #[test]
    fn truncated_or_extended_frames_are_invalid() {
        for code in [ZSTD, GZIP, LZ4] {
            let payload = compressed(code);
            let cut = decompress(code, &payload[..payload.len() / 2], usize::MAX);
            assert!(matches!(cut, Err(InflateError::Invalid { .. })), "{code}: {cut:?}");
            // A frame that ends without its checksum, or (LZ4) without its end mark.
            let cut = decompress(code, &payload[..payload.len() - 3], usize::MAX);
            assert!(matches!(cut, Err(InflateError::Invalid { .. })), "{code}: {cut:?}");
            if code == LZ4 {
                let cut = decompress(code, &payload[..payload.len() - 4], usize::MAX);
                let detail = "the LZ4 frame ends before its end mark".to_string();
                assert_eq!(cut, Err(InflateError::Invalid { codec: Codec::Lz4, detail }));
                // A skippable frame after the data frame is skipped.
                let mut skippable = payload.clone();
                skippable.extend_from_slice(&[0x50, 0x2A, 0x4D, 0x18, 2, 0, 0, 0, 7, 7]);
                assert_eq!(decompress(code, &skippable, usize::MAX).unwrap(), DATA);
            }
        }
        let mut gzip = compressed(GZIP);
        gzip.push(0);
        let extended = decompress(GZIP, &gzip, usize::MAX);
        assert_eq!(extended, Err(InflateError::Invalid { codec: Codec::Gzip, detail: "bytes follow the gzip member".into() }));
    }

    #[test]
    fn zstd_windows_larger_than_the_bound_are_refused() {
        // A frame without its content size whose window (128 MiB) the decoder would allocate.
        let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        encoder.window_log(27).unwrap();
        encoder.include_contentsize(false).unwrap();
        encoder.write_all(DATA).unwrap();
        let payload = encoder.finish().unwrap();
        let refused = decompress(ZSTD, &payload, 1 << 20);
        assert!(matches!(refused, Err(InflateError::Invalid { codec: Codec::Zstd, .. })), "{refused:?}");
        assert_eq!(decompress(ZSTD, &payload, DEFAULT_MAX_SIZE).unwrap(), DATA);
    }

    #[test]
    fn levels_are_checked_per_codec() {
        assert_eq!(Compression::new(GZIP, None).unwrap().level, 6);
        assert_eq!(Compression::new(ZSTD, Some(19)).unwrap().level, 19);
        assert!(Compression::new(GZIP, Some(10)).unwrap_err().0.contains("outside 0..=9"));
        assert!(Compression::new(ZSTD, Some(99)).unwrap_err().0.contains("zstd compression level 99"));
        assert!(Compression::new(LZ4, Some(1)).is_err());
        assert!(Compression::new(NONE, Some(1)).is_err());
        assert!(Compression::new(7, None).is_err());
    }

    #[test]
    fn writers_make_frames_the_detecting_reader_reads() {
        for code in [NONE, ZSTD, GZIP, LZ4] {
            let mut writer = Compression::new(code, None).unwrap().writer(Vec::new()).unwrap();
            writer.write_all(DATA).unwrap();
            let written = writer.finish().unwrap();
            let mut read = Vec::new();
            detecting_reader(&written[..]).unwrap().read_to_end(&mut read).unwrap();
            assert_eq!(read, DATA, "{code}");
        }
        let mut gzip = Compression::new(GZIP, None).unwrap().writer(Vec::new()).unwrap();
        gzip.write_all(DATA).unwrap();
        let mut twice = gzip.finish().unwrap();
        twice.extend_from_slice(&twice.clone());
        let error = detecting_reader(&twice[..]).unwrap().read_to_end(&mut Vec::new()).unwrap_err();
        assert!(error.to_string().contains("bytes follow the gzip member"));
    }

    #[test]
    fn the_detecting_reader_refuses_an_lz4_frame_without_its_end() {
        let mut writer = Compression::new(LZ4, None).unwrap().writer(Vec::new()).unwrap();
        writer.write_all(&[7; 200_000]).unwrap();
        let written = writer.finish().unwrap();
        // Without the content checksum, without the end mark too, and cut after the first block.
        for cut in [4, 8, written.len() / 2] {
            let error = detecting_reader(&written[..written.len() - cut]).unwrap().read_to_end(&mut Vec::new()).unwrap_err();
            assert_eq!(error.to_string(), "the LZ4 frame ends before its end mark", "cut {cut}");
        }
    }

    #[test]
    fn the_output_starts_with_the_declared_size_up_to_max_size() {
        for code in [ZSTD, GZIP, LZ4] {
            let payload = compressed(code);
            let codec = Codec::from_code(code).unwrap();
            assert_eq!(declared_size(codec, &payload), Some(DATA.len() as u64), "{codec}");
            assert_eq!(decompress(code, &payload, DATA.len()).unwrap().into_owned().capacity(), DATA.len(), "{codec}");
        }
        // A claim beyond max_size reserves max_size at most, and fails as the data passes it.
        let mut lying = compressed(LZ4);
        lying[6..14].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(inflate(Codec::Lz4, &[][..], declared_size(Codec::Lz4, &lying), 10).unwrap().capacity() <= 10);
    }
}
