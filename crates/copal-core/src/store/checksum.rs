//! Record checksums (docs/FORMAT.md, appendix A "Stored values"): the store keeps each record
//! followed by its CRC-16/CCITT (2 bytes, little-endian), so that flipped bits on disk are
//! detected on read (CorruptRecordError) instead of loading as wrong values. The record format
//! itself does not change: the checksum belongs to the store's framing.

use super::error::StoreError;
use crate::format::{DecodeError, Oid};

const CHECKSUM_LEN: usize = 2;

const fn crc_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static TABLE: [u16; 256] = crc_table();

pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0xFFFF, |crc, &b| (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ b)])
}

/// The stored value of `record`: the record, then its checksum.
pub fn seal(record: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(record.len() + CHECKSUM_LEN);
    value.extend_from_slice(record);
    value.extend_from_slice(&crc16(record).to_le_bytes());
    value
}

/// The record inside a stored value, after checking its checksum.
pub fn unseal(oid: Oid, value: &[u8]) -> Result<&[u8], StoreError> {
    let corrupt = |source| StoreError::Corrupt { what: format!("record {oid:#x}"), source };
    let Some(split) = value.len().checked_sub(CHECKSUM_LEN) else {
        return Err(corrupt(DecodeError::Truncated { offset: value.len(), needed: CHECKSUM_LEN - value.len() }));
    };
    let (record, stored) = value.split_at(split);
    if crc16(record).to_le_bytes() != stored {
        return Err(corrupt(DecodeError::ChecksumMismatch));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_value_and_bit_flips() {
        assert_eq!(crc16(b"123456789"), 0x29B1);
        let value = seal(b"\x10\x01\x00\x0d\x00");
        assert_eq!(unseal(1, &value).unwrap(), b"\x10\x01\x00\x0d\x00");
        for bit in 0..value.len() * 8 {
            let mut flipped = value.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(unseal(1, &flipped).is_err(), "bit {bit} went unnoticed");
        }
        assert!(unseal(1, b"\x01").is_err());
    }
}
