//! A bounds-checked cursor over encoded bytes. Every read checks the remaining input first, so a
//! corrupt or hostile record yields a `DecodeError`, never a panic or an oversized allocation.

use super::error::DecodeError;
use super::tag;
use super::varint::{zigzag_decode, MAX_VARINT_LEN};

/// Decoder limits (docs/FORMAT.md section "Decoder limits").
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Deepest nesting of containers and objects inside one record.
    pub max_depth: usize,
    /// Largest integer accepted by BIGINT, in bytes of two's complement.
    pub max_bigint_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_depth: 256, max_bigint_bytes: 1 << 20 }
    }
}

/// The time zone of a DATETIME or TIME value.
#[derive(Debug, Clone, PartialEq)]
pub enum TzInfo {
    Naive,
    /// A fixed UTC offset in microseconds (Python `datetime.timezone`).
    Offset(i64),
    /// An IANA zone key (Python `zoneinfo.ZoneInfo`).
    Named(String),
}

#[derive(Clone)]
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    pub limits: Limits,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0, limits: Limits::default() }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.data[self.pos..]
    }

    pub fn is_empty(&self) -> bool {
        self.pos == self.data.len()
    }

    pub fn expect_end(&self) -> Result<(), DecodeError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes { offset: self.pos })
        }
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let byte = *self
            .data
            .get(self.pos)
            .ok_or(DecodeError::Truncated { offset: self.pos, needed: 1 })?;
        self.pos += 1;
        Ok(byte)
    }

    pub fn peek_u8(&self) -> Result<u8, DecodeError> {
        self.data.get(self.pos).copied().ok_or(DecodeError::Truncated { offset: self.pos, needed: 1 })
    }

    pub fn bytes(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if len > self.remaining() {
            return Err(DecodeError::Truncated { offset: self.pos, needed: len - self.remaining() });
        }
        let slice = &self.data[self.pos..self.pos + len];
        self.pos += len;
        Ok(slice)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    /// Inlined for the one-byte case, which most varints are (lengths, small ints, descriptor
    /// ids): a scan skipping fields reads several per record, and a call each was 14% of it.
    #[inline]
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        if let Some(&byte) = self.data.get(self.pos) {
            if byte < 0x80 {
                self.pos += 1;
                return Ok(u64::from(byte));
            }
        }
        self.multibyte_varint()
    }

    #[inline(never)]
    fn multibyte_varint(&mut self) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut value: u64 = 0;
        for i in 0..MAX_VARINT_LEN {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if i == MAX_VARINT_LEN - 1 && byte > 1 {
                return Err(DecodeError::BadVarint { offset: start });
            }
            value |= bits << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::BadVarint { offset: start })
    }

    pub fn zigzag(&mut self) -> Result<i64, DecodeError> {
        Ok(zigzag_decode(self.varint()?))
    }

    pub fn u32_varint(&mut self) -> Result<u32, DecodeError> {
        let offset = self.pos;
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| DecodeError::OutOfRange { offset, what: "descriptor id" })
    }

    /// A length or element count. Each element takes at least `min_item_size` bytes, so a count
    /// that could not fit in the remaining input is rejected before anything is allocated.
    pub fn length(&mut self, min_item_size: usize) -> Result<usize, DecodeError> {
        let offset = self.pos;
        let len = self.varint()?;
        self.fitting_length(offset, len, min_item_size)
    }

    /// `len`, read at `offset` (as part of a larger varint), checked as `length` checks it.
    pub fn fitting_length(&self, offset: usize, len: u64, min_item_size: usize) -> Result<usize, DecodeError> {
        let fits = (len as u128) * (min_item_size.max(1) as u128) <= self.remaining() as u128;
        if !fits {
            return Err(DecodeError::LengthTooLarge { offset, length: len });
        }
        Ok(len as usize)
    }

    /// Moves past a length-prefixed byte string (as `length_prefixed`, without returning it).
    pub fn skip_length_prefixed(&mut self) -> Result<(), DecodeError> {
        let offset = self.pos;
        let len = self.varint()?;
        if len > self.remaining() as u64 {
            return Err(DecodeError::LengthTooLarge { offset, length: len });
        }
        self.pos += len as usize;
        Ok(())
    }

    pub fn length_prefixed(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.length(1)?;
        self.bytes(len)
    }

    pub fn str(&mut self) -> Result<&'a str, DecodeError> {
        let offset = self.pos;
        std::str::from_utf8(self.length_prefixed()?).map_err(|_| DecodeError::BadUtf8 { offset })
    }

    pub fn f64(&mut self) -> Result<f64, DecodeError> {
        Ok(f64::from_le_bytes(self.array::<8>()?))
    }

    /// The time-zone flags of DATETIME and TIME; they precede the clock value, the zone follows it.
    pub fn tz_flags(&mut self) -> Result<u8, DecodeError> {
        let offset = self.pos;
        let flags = self.u8()?;
        if flags & !tag::TZ_KNOWN_FLAGS != 0 || (flags & tag::TZ_OFFSET != 0 && flags & tag::TZ_NAMED != 0) {
            return Err(DecodeError::OutOfRange { offset, what: "time-zone flags" });
        }
        Ok(flags)
    }

    pub fn tz_suffix(&mut self, flags: u8) -> Result<TzInfo, DecodeError> {
        if flags & tag::TZ_OFFSET != 0 {
            Ok(TzInfo::Offset(self.zigzag()?))
        } else if flags & tag::TZ_NAMED != 0 {
            Ok(TzInfo::Named(self.str()?.to_owned()))
        } else {
            Ok(TzInfo::Naive)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_varint_is_an_error() {
        assert!(matches!(Reader::new(&[0x80, 0x80]).varint(), Err(DecodeError::Truncated { .. })));
    }

    #[test]
    fn overlong_varint_is_an_error() {
        let bytes = [0xff; 11];
        assert!(matches!(Reader::new(&bytes).varint(), Err(DecodeError::BadVarint { .. })));
    }

    #[test]
    fn huge_length_is_rejected_before_allocation() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2];
        assert!(matches!(Reader::new(&bytes).length(1), Err(DecodeError::LengthTooLarge { .. })));
    }
}
