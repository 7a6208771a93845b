//! Unsigned LEB128 varints and zigzag mapping of signed integers (docs/FORMAT.md "Varints").

pub const MAX_VARINT_LEN: usize = 10;

#[inline(always)]
pub fn write_varint(out: &mut Vec<u8>, value: u64) {
    // Most varints of a body (tags' lengths, counts, small ints, slots) take one byte.
    if value < 0x80 {
        out.push(value as u8);
    } else {
        write_long_varint(out, value);
    }
}

/// `write_varint` of a value of two bytes or more.
fn write_long_varint(out: &mut Vec<u8>, mut value: u64) {
    // Room for the longest varint is made once, not checked for every byte.
    out.reserve(MAX_VARINT_LEN);
    let start = out.len();
    let spare = &mut out.spare_capacity_mut()[..MAX_VARINT_LEN];
    let mut written = 0;
    while value >= 0x80 {
        spare[written].write((value as u8) | 0x80);
        value >>= 7;
        written += 1;
    }
    spare[written].write(value as u8);
    // SAFETY: the `written + 1` bytes after the end were just initialised, within the capacity
    // reserved above (a u64 takes at most MAX_VARINT_LEN bytes).
    unsafe { out.set_len(start + written + 1) };
}

/// The number of bytes `write_varint` writes for `value`.
pub const fn varint_len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

pub const fn zigzag_encode(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

pub const fn zigzag_decode(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_round_trips_extremes() {
        for v in [0, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(zigzag_decode(zigzag_encode(v)), v);
        }
        assert_eq!(zigzag_encode(-1), 1);
        assert_eq!(zigzag_encode(1), 2);
    }

    #[test]
    fn varint_lengths() {
        let mut out = Vec::new();
        write_varint(&mut out, 127);
        assert_eq!(out, [0x7f]);
        out.clear();
        write_varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        write_varint(&mut out, u64::MAX);
        assert_eq!(out.len(), MAX_VARINT_LEN);
        for value in [0, 1, 127, 128, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
            out.clear();
            write_varint(&mut out, value);
            assert_eq!(varint_len(value), out.len(), "{value}");
        }
    }
}
