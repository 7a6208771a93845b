//! Record checksums (docs/FORMAT.md, appendix A "Stored values"): the store keeps each record
//! followed by its CRC-16/CCITT (2 bytes, little-endian), so that flipped bits on disk are
//! detected on read (CorruptRecordError) instead of loading as wrong values. The record format
//! itself does not change: the checksum belongs to the store's framing.

use super::error::StoreError;
use crate::format::{DecodeError, Oid};

const CHECKSUM_LEN: usize = 2;

/// Slicing-by-8 tables: `TABLES[k][b]` is the register after byte `b` followed by `k` zero
/// bytes, starting from zero. Eight table lookups per eight bytes replace eight dependent
/// byte steps; scans checksum every record they read, so this is on the hot path of queries.
const fn crc_tables() -> [[u16; 256]; 8] {
    let mut tables = [[0u16; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        tables[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let previous = tables[k - 1][i];
            tables[k][i] = (previous << 8) ^ tables[0][(previous >> 8) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
}

static TABLES: [[u16; 256]; 8] = crc_tables();

/// CRC-16/CCITT-FALSE (polynomial 0x1021, initial value 0xFFFF, not reflected).
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0xFFFF;
    let mut blocks = bytes.chunks_exact(8);
    for block in &mut blocks {
        // The 16-bit register lines up with the block's first two bytes.
        let t = &TABLES;
        crc = t[7][usize::from(block[0] ^ (crc >> 8) as u8)]
            ^ t[6][usize::from(block[1] ^ crc as u8)]
            ^ t[5][usize::from(block[2])]
            ^ t[4][usize::from(block[3])]
            ^ t[3][usize::from(block[4])]
            ^ t[2][usize::from(block[5])]
            ^ t[1][usize::from(block[6])]
            ^ t[0][usize::from(block[7])];
    }
    blocks.remainder().iter().fold(crc, |crc, &b| (crc << 8) ^ TABLES[0][usize::from((crc >> 8) as u8 ^ b)])
}

/// The stored value of `record`: the record, then its checksum.
pub fn seal(record: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(record.len() + CHECKSUM_LEN);
    value.extend_from_slice(record);
    value.extend_from_slice(&crc16(record).to_le_bytes());
    value
}

/// The record inside a stored value, without checking its checksum (decoders reject malformed
/// bytes with an error, so reading it is safe; its values may be wrong if it is damaged).
pub fn without_checksum(value: &[u8]) -> &[u8] {
    &value[..value.len().saturating_sub(CHECKSUM_LEN)]
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

    /// The textbook one-byte-at-a-time CRC that the sliced version must equal.
    fn crc16_bytewise(bytes: &[u8]) -> u16 {
        bytes.iter().fold(0xFFFF, |crc, &b| (crc << 8) ^ TABLES[0][usize::from((crc >> 8) as u8 ^ b)])
    }

    #[test]
    fn sliced_crc_equals_bytewise_crc_at_every_length() {
        let data: Vec<u8> = (0..200u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for start in 0..9 {
            for end in start..data.len() {
                assert_eq!(crc16(&data[start..end]), crc16_bytewise(&data[start..end]), "{start}..{end}");
            }
        }
    }

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
