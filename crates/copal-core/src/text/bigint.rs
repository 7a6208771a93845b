//! Decimal text of BIGINT values (minimal little-endian two's complement bytes, docs/FORMAT.md
//! section 6), so that integers of any size are plain JSON numbers.

const CHUNK: u64 = 1_000_000_000;

/// The decimal text of a two's complement little-endian integer.
pub fn to_decimal(twos_le: &[u8]) -> String {
    let negative = twos_le.last().is_some_and(|&b| b & 0x80 != 0);
    let mut magnitude = twos_le.to_vec();
    if negative {
        negate(&mut magnitude);
    }
    // Base 2^32 limbs, most significant first, divided by 10^9 until zero.
    let mut limbs: Vec<u32> = magnitude
        .chunks(4)
        .rev()
        .map(|c| c.iter().rev().fold(0u32, |acc, &b| acc << 8 | u32::from(b)))
        .collect();
    let mut chunks = Vec::new();
    // The limbs from `top` on: the quotient's high limbs become zero as it shrinks, and are
    // left out of the next division instead of being divided again.
    let mut top = 0;
    loop {
        while limbs.get(top) == Some(&0) {
            top += 1;
        }
        if top == limbs.len() {
            break;
        }
        let mut rem = 0u64;
        for limb in &mut limbs[top..] {
            let cur = rem << 32 | u64::from(*limb);
            *limb = (cur / CHUNK) as u32;
            rem = cur % CHUNK;
        }
        chunks.push(rem as u32);
    }
    let mut out = String::from(if negative { "-" } else { "" });
    match chunks.split_last() {
        None => out.push('0'),
        Some((first, rest)) => {
            out.push_str(&first.to_string());
            for chunk in rest.iter().rev() {
                out.push_str(&format!("{chunk:09}"));
            }
        }
    }
    out
}

/// The minimal two's complement little-endian bytes of decimal `text` (an optional `-`, then
/// ASCII digits), or None if it is not such a number.
pub fn from_decimal(text: &str) -> Option<Vec<u8>> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Little-endian base 2^32 limbs: multiply by 10^9 and add, nine digits at a time (the first
    // group shorter), a ninth of the passes over the limbs of one digit at a time. Each pass is
    // still over all the limbs, so the time grows with the square of the length (docs/FUZZING.md, F8).
    let mut limbs: Vec<u32> = Vec::with_capacity(digits.len() / 9 + 2);
    limbs.push(0);
    let first = match digits.len() % 9 {
        0 => 9,
        n => n,
    };
    let (head, tail) = digits.as_bytes().split_at(first.min(digits.len()));
    for group in std::iter::once(head).chain(tail.chunks(9)) {
        let scale = 10u64.pow(group.len() as u32);
        // At most (2^32 - 1) x 10^9 + 10^9 - 1: no overflow, and a carry below 2^32.
        let mut carry = group.iter().fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
        for limb in &mut limbs {
            let cur = u64::from(*limb) * scale + carry;
            *limb = cur as u32;
            carry = cur >> 32;
        }
        if carry != 0 {
            limbs.push(carry as u32);
        }
    }
    let mut bytes: Vec<u8> = limbs.iter().flat_map(|l| l.to_le_bytes()).collect();
    bytes.push(0); // room for the sign bit
    if negative {
        negate(&mut bytes);
    }
    // Minimal: drop high bytes that only repeat the sign of the byte below them.
    while bytes.len() > 1 {
        let (top, below) = (bytes[bytes.len() - 1], bytes[bytes.len() - 2]);
        if (top == 0 && below & 0x80 == 0) || (top == 0xFF && below & 0x80 != 0) {
            bytes.pop();
        } else {
            break;
        }
    }
    Some(bytes)
}

/// Two's complement negation in place.
fn negate(bytes: &mut [u8]) {
    let mut carry = true;
    for b in bytes.iter_mut() {
        let (v, c) = (!*b).overflowing_add(u8::from(carry));
        *b = v;
        carry = c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for text in ["0", "1", "-1", "127", "128", "-128", "-129", "9223372036854775808", "-9223372036854775809",
            "340282366920938463463374607431768211456", "-1000000000000000000000000000000"] {
            let bytes = from_decimal(text).unwrap();
            assert_eq!(to_decimal(&bytes), text);
        }
        assert_eq!(from_decimal("128").unwrap(), vec![0x80, 0x00]);
        assert_eq!(from_decimal("-128").unwrap(), vec![0x80]);
        assert_eq!(from_decimal("-129").unwrap(), vec![0x7F, 0xFF]);
        assert_eq!(from_decimal("2x"), None);
        assert_eq!(from_decimal("0000000000000000000000000000000001").unwrap(), vec![0x01]);
        assert_eq!(from_decimal("-000000000").unwrap(), vec![0x00]);
        assert_eq!(from_decimal("-"), None);
    }

    /// Digit groups of every length at both ends, against a slow reference (multiply by ten).
    #[test]
    fn long_numbers_round_trip() {
        let slow = |text: &str| {
            let mut limbs: Vec<u32> = vec![0];
            for d in text.bytes() {
                let mut carry = u64::from(d - b'0');
                for limb in &mut limbs {
                    let cur = u64::from(*limb) * 10 + carry;
                    *limb = cur as u32;
                    carry = cur >> 32;
                }
                if carry != 0 {
                    limbs.push(carry as u32);
                }
            }
            let mut bytes: Vec<u8> = limbs.iter().flat_map(|l| l.to_le_bytes()).collect();
            bytes.push(0);
            while bytes.len() > 1 && bytes[bytes.len() - 1] == 0 && bytes[bytes.len() - 2] & 0x80 == 0 {
                bytes.pop();
            }
            bytes
        };
        for len in 1..60 {
            for text in ["9".repeat(len), format!("1{}", "0".repeat(len - 1)), (0..len).map(|i| char::from(b'0' + (i * 7 % 10) as u8)).collect()] {
                let text = text.trim_start_matches('0');
                let text = if text.is_empty() { "0" } else { text };
                assert_eq!(from_decimal(text).unwrap(), slow(text), "{text}");
                assert_eq!(to_decimal(&from_decimal(text).unwrap()), text);
                let negative = format!("-{text}");
                let expected = if text == "0" { "0".to_owned() } else { negative.clone() };
                assert_eq!(to_decimal(&from_decimal(&negative).unwrap()), expected);
            }
        }
    }
}
