//! Decimal text of BIGINT values (minimal little-endian two's complement bytes, docs/FORMAT.md
//! section 6), so that integers of any size are plain JSON numbers.

use crate::format::Limits;
use crate::text::{mapping, TextError};

/// The bases of the limbs: binary (a number's own) and decimal (nine digits per limb).
const BINARY: u64 = 1 << 32;
const DECIMAL: u64 = 1_000_000_000;

/// The decimal text of a two's complement little-endian integer.
pub fn to_decimal(twos_le: &[u8]) -> String {
    let negative = twos_le.last().is_some_and(|&b| b & 0x80 != 0);
    let mut magnitude = twos_le.to_vec();
    if negative {
        negate(&mut magnitude);
    }
    // Base 2^32 limbs, least significant first.
    let limbs: Vec<u32> = magnitude.chunks(4).map(|c| c.iter().rev().fold(0u32, |acc, &b| acc << 8 | u32::from(b))).collect();
    let chunks = decimal_chunks(trim(&limbs), &mut Vec::new());
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

/// Limbs up to which `decimal_chunks` divides directly; longer numbers are split in two.
const DIRECT_LIMBS: usize = 128;

/// The base 10^9 chunks, least significant first, of the little-endian base 2^32 `limbs`
/// (trimmed). Dividing by 10^9 over all the limbs per chunk takes time growing with the square
/// of the length: a long number is split into its low 2^j limbs and the limbs above them, each
/// converted alone, and joined as high x 2^(32 x 2^j) + low in base 10^9 with Karatsuba's
/// product, as `magnitude` does the other way. `powers[j]` caches 2^(32 x 2^j) in base 10^9.
fn decimal_chunks(limbs: &[u32], powers: &mut Vec<Vec<u32>>) -> Vec<u32> {
    if limbs.len() <= DIRECT_LIMBS {
        return decimal_chunks_directly(limbs);
    }
    // The largest 2^j below the length, which is at least half of it.
    let mut j = 0;
    while 1 << (j + 1) < limbs.len() {
        j += 1;
    }
    let (low, high) = limbs.split_at(1 << j);
    while powers.len() <= j {
        let next = match powers.last() {
            None => vec![294_967_296, 4],
            Some(last) => product::<DECIMAL>(last, last),
        };
        powers.push(next);
    }
    let mut out = product::<DECIMAL>(&decimal_chunks(trim(high), powers), &powers[j]);
    add_at::<DECIMAL>(&mut out, &decimal_chunks(trim(low), powers), 0);
    trimmed(out)
}

/// `decimal_chunks` by dividing by 10^9 until zero.
fn decimal_chunks_directly(limbs: &[u32]) -> Vec<u32> {
    // Most significant first, for the division.
    let mut limbs: Vec<u32> = limbs.iter().rev().copied().collect();
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
            *limb = (cur / DECIMAL) as u32;
            rem = cur % DECIMAL;
        }
        chunks.push(rem as u32);
    }
    chunks
}

/// The minimal two's complement little-endian bytes of decimal `text` (an optional `-`, then
/// ASCII digits); None if it is not such a number, and an error if it is longer than a BIGINT
/// may be (docs/FORMAT.md section 6.1). The length is bounded from the digit count before any
/// conversion, whose time grows faster than the length: a document of a few kilobytes, once
/// decompressed, holds millions of digits.
pub fn from_decimal(text: &str) -> Result<Option<Vec<u8>>, TextError> {
    from_decimal_within(text, Limits::default().max_bigint_bytes)
}

/// `from_decimal` with a BIGINT of at most `max_bytes`.
fn from_decimal_within(text: &str, max_bytes: usize) -> Result<Option<Vec<u8>>, TextError> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > max_digits(max_bytes) {
        return Err(out_of_range(significant.len(), max_bytes));
    }
    let significant = if significant.is_empty() { "0" } else { significant };
    let limbs = magnitude(significant.as_bytes(), &mut Vec::new());
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
    if bytes.len() > max_bytes {
        return Err(out_of_range(significant.len(), max_bytes));
    }
    Ok(Some(bytes))
}

/// The most significant digits a BIGINT of `max_bytes` can have, or at most one more: 10^(d-1)
/// needs more than (d - 1) x log2(10) bits, and 3.321928 is below log2(10), so d digits with
/// (d - 1) x 3.321928 >= 8 x `max_bytes` cannot fit (one bit holds the sign). The exact bound
/// is left to the byte count after conversion.
fn max_digits(max_bytes: usize) -> usize {
    const MILLIONTHS_OF_BITS_PER_DIGIT: u128 = 3_321_928;
    let bits = 8 * max_bytes as u128;
    (bits * 1_000_000).div_ceil(MILLIONTHS_OF_BITS_PER_DIGIT) as usize
}

fn out_of_range(digits: usize, max_bytes: usize) -> TextError {
    mapping(format!(
        "integer size out of range: an integer of {digits} digits is longer than a BIGINT may be ({max_bytes} bytes, about {} digits)",
        max_digits(max_bytes)
    ))
}

/// Digits up to which `magnitude` converts directly; longer numbers are split in two.
const DIRECT_DIGITS: usize = 1_000;

/// Limbs below which `product` multiplies directly.
const KARATSUBA_LIMBS: usize = 32;

/// The little-endian base 2^32 limbs of the decimal `digits` (ASCII digits, at least one).
/// Converting nine digits per pass over the limbs takes time growing with the square of the
/// length (a million digits took about 25 s, docs/FUZZING.md F8): a long number is split into
/// its last 9 x 2^j digits and the digits before them, each converted alone, and joined as
/// high x 10^(9 x 2^j) + low with Karatsuba's product, which keeps the whole below n^1.6.
/// `powers[j]` caches 10^(9 x 2^j).
fn magnitude(digits: &[u8], powers: &mut Vec<Vec<u32>>) -> Vec<u32> {
    if digits.len() <= DIRECT_DIGITS {
        return magnitude_directly(digits);
    }
    // The largest 9 x 2^j below the length, which is at least half of it.
    let mut j = 0;
    while 9 << (j + 1) < digits.len() {
        j += 1;
    }
    let (high, low) = digits.split_at(digits.len() - (9 << j));
    while powers.len() <= j {
        let next = match powers.last() {
            None => vec![1_000_000_000],
            Some(last) => product::<BINARY>(last, last),
        };
        powers.push(next);
    }
    let mut out = product::<BINARY>(&magnitude(high, powers), &powers[j]);
    add_at::<BINARY>(&mut out, &magnitude(low, powers), 0);
    trimmed(out)
}

/// `magnitude` nine digits at a time (the first group shorter): multiply by 10^9 and add.
fn magnitude_directly(digits: &[u8]) -> Vec<u32> {
    let mut limbs: Vec<u32> = Vec::with_capacity(digits.len() / 9 + 2);
    limbs.push(0);
    let first = match digits.len() % 9 {
        0 => 9,
        n => n,
    };
    let (head, tail) = digits.split_at(first.min(digits.len()));
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
    limbs
}

/// The product of two little-endian numbers of limbs in `BASE` (2^32 or 10^9): Karatsuba's
/// three half-size products when both are long, else the schoolbook one.
fn product<const BASE: u64>(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (a, b) = (trim(a), trim(b));
    if a.len() < KARATSUBA_LIMBS || b.len() < KARATSUBA_LIMBS {
        return schoolbook_product::<BASE>(a, b);
    }
    // a = a1 x B^half + a0, b likewise; a x b = z2 x B^2half + z1 x B^half + z0, with
    // z1 = (a0 + a1)(b0 + b1) - z0 - z2.
    let half = a.len().max(b.len()) / 2;
    let (a0, a1) = a.split_at(half.min(a.len()));
    let (b0, b1) = b.split_at(half.min(b.len()));
    let z0 = product::<BASE>(a0, b0);
    let z2 = product::<BASE>(a1, b1);
    let mut z1 = product::<BASE>(&sum::<BASE>(a0, a1), &sum::<BASE>(b0, b1));
    subtract::<BASE>(&mut z1, &z0);
    subtract::<BASE>(&mut z1, &z2);
    let mut out = vec![0u32; a.len() + b.len() + 1];
    add_at::<BASE>(&mut out, &z0, 0);
    add_at::<BASE>(&mut out, &z1, half);
    add_at::<BASE>(&mut out, &z2, 2 * half);
    trimmed(out)
}

fn schoolbook_product<const BASE: u64>(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = vec![0u32; a.len() + b.len()];
    for (i, &x) in a.iter().enumerate() {
        let mut carry = 0u64;
        for (j, &y) in b.iter().enumerate() {
            // At most (BASE - 1)^2 + 2 x (BASE - 1) = BASE^2 - 1, below 2^64.
            let cur = u64::from(x) * u64::from(y) + u64::from(out[i + j]) + carry;
            out[i + j] = (cur % BASE) as u32;
            carry = cur / BASE;
        }
        out[i + b.len()] = carry as u32;
    }
    trimmed(out)
}

fn trim(limbs: &[u32]) -> &[u32] {
    let len = limbs.iter().rposition(|&l| l != 0).map_or(0, |top| top + 1);
    &limbs[..len]
}

fn trimmed(mut limbs: Vec<u32>) -> Vec<u32> {
    limbs.truncate(trim(&limbs).len());
    limbs
}

fn sum<const BASE: u64>(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = a.to_vec();
    add_at::<BASE>(&mut out, b, 0);
    out
}

/// `acc += x x BASE^shift`, growing `acc` as the sum needs.
fn add_at<const BASE: u64>(acc: &mut Vec<u32>, x: &[u32], shift: usize) {
    if acc.len() < shift + x.len() {
        acc.resize(shift + x.len(), 0);
    }
    let mut carry = 0u64;
    let mut i = shift;
    for &limb in x {
        let cur = u64::from(acc[i]) + u64::from(limb) + carry;
        acc[i] = (cur % BASE) as u32;
        carry = cur / BASE;
        i += 1;
    }
    while carry != 0 {
        if i == acc.len() {
            acc.push(0);
        }
        let cur = u64::from(acc[i]) + carry;
        acc[i] = (cur % BASE) as u32;
        carry = cur / BASE;
        i += 1;
    }
}

/// `acc -= x`, where `acc >= x` (Karatsuba's middle term always is).
fn subtract<const BASE: u64>(acc: &mut [u32], x: &[u32]) {
    let mut borrow = 0u64;
    for (i, slot) in acc.iter_mut().enumerate() {
        if i >= x.len() && borrow == 0 {
            break;
        }
        let take = u64::from(x.get(i).copied().unwrap_or(0)) + borrow;
        let have = u64::from(*slot);
        borrow = u64::from(have < take);
        *slot = (have + borrow * BASE - take) as u32;
    }
    debug_assert_eq!(borrow, 0, "Karatsuba's middle term is never negative");
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
            let bytes = from_decimal(text).unwrap().unwrap();
            assert_eq!(to_decimal(&bytes), text);
        }
        assert_eq!(from_decimal("128").unwrap().unwrap(), vec![0x80, 0x00]);
        assert_eq!(from_decimal("-128").unwrap().unwrap(), vec![0x80]);
        assert_eq!(from_decimal("-129").unwrap().unwrap(), vec![0x7F, 0xFF]);
        assert_eq!(from_decimal("2x"), Ok(None));
        assert_eq!(from_decimal("0000000000000000000000000000000001").unwrap().unwrap(), vec![0x01]);
        assert_eq!(from_decimal("-000000000").unwrap().unwrap(), vec![0x00]);
        assert_eq!(from_decimal("-"), Ok(None));
    }

    /// The largest integers a BIGINT of a given size holds (2^(8 x size - 1) - 1 and its
    /// negation minus one) convert; one past either is refused, and so is one more digit than
    /// either, whatever its leading zeros.
    #[test]
    fn integers_beyond_the_bigint_limit_are_refused() {
        for max_bytes in [1, 2, 9, 64, 1000] {
            let mut largest = vec![0xFF; max_bytes];
            largest[max_bytes - 1] = 0x7F;
            let mut smallest = vec![0; max_bytes];
            smallest[max_bytes - 1] = 0x80;
            for bytes in [largest, smallest] {
                let text = to_decimal(&bytes);
                assert_eq!(from_decimal_within(&text, max_bytes), Ok(Some(bytes.clone())));
                let digits = text.trim_start_matches('-').len();
                assert!(digits <= max_digits(max_bytes) && max_digits(max_bytes) <= digits + 1, "{max_bytes} bytes");
                // 2^(8 x size - 1) ends in 2, 4, 6 or 8: one past either bound ends in 1 more.
                let past = format!("{}{}", &text[..text.len() - 1], char::from(text.as_bytes()[text.len() - 1] + 1));
                let longer = format!("{}000{}1", if bytes[max_bytes - 1] == 0x80 { "-" } else { "" }, "1".repeat(max_digits(max_bytes)));
                for text in [past, longer] {
                    let Err(TextError::Mapping { message }) = from_decimal_within(&text, max_bytes) else { panic!("{text} converts") };
                    assert!(message.starts_with("integer size out of range"), "{message}");
                }
            }
        }
    }

    /// Millions of digits are refused before any conversion, at once; leading zeros do not
    /// count.
    #[test]
    fn millions_of_digits_are_refused_at_once() {
        let start = std::time::Instant::now();
        assert!(from_decimal(&"9".repeat(10_000_000)).is_err());
        assert!(start.elapsed() < std::time::Duration::from_secs(1), "refusing took {:?}", start.elapsed());
        assert_eq!(from_decimal(&format!("-{}1", "0".repeat(10_000_000))), Ok(Some(vec![0xFF])));
    }

    /// Pseudo-random decimal digits (a fixed linear congruential sequence).
    fn digits(len: usize, seed: u64) -> String {
        let mut state = seed;
        (0..len)
            .map(|i| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                // A leading digit of 1 to 9, so that the length is the number's.
                char::from(b'0' + if i == 0 { 1 + (state >> 33) % 9 } else { (state >> 33) % 10 } as u8)
            })
            .collect()
    }

    /// Long numbers split and joined by Karatsuba's products give the limbs of the direct
    /// conversion, at lengths on both sides of every split (9 x 2^j digits) and of the
    /// thresholds.
    #[test]
    fn long_numbers_convert_as_digit_by_digit() {
        let lengths = [DIRECT_DIGITS, DIRECT_DIGITS + 1, 1_152, 1_153, 2_304, 2_305, 4_607, 9_216, 9_217, 20_000];
        for (k, &len) in lengths.iter().enumerate() {
            for text in [digits(len, k as u64), "9".repeat(len), format!("1{}", "0".repeat(len - 1))] {
                assert_eq!(magnitude(text.as_bytes(), &mut Vec::new()), trimmed(magnitude_directly(text.as_bytes())), "{len} digits");
            }
        }
    }

    /// Long numbers split and joined in base 10^9 give the chunks of dividing by 10^9, at
    /// lengths on both sides of every split (2^j limbs) and of the threshold; and text read back
    /// from either side is the same number.
    #[test]
    fn long_numbers_write_as_by_division() {
        for (k, len) in [DIRECT_LIMBS, DIRECT_LIMBS + 1, 256, 257, 511, 1_000, 3_000].into_iter().enumerate() {
            let text = digits(len * 10, 100 + k as u64);
            let limbs = magnitude(text.as_bytes(), &mut Vec::new());
            for limbs in [limbs.clone(), vec![u32::MAX; len], { let mut one = vec![0; len]; one.push(1); one }] {
                assert_eq!(decimal_chunks(trim(&limbs), &mut Vec::new()), decimal_chunks_directly(&limbs), "{len} limbs");
            }
            assert_eq!(to_decimal(&from_decimal(&text).unwrap().unwrap()), text);
            let negative = format!("-{text}");
            assert_eq!(to_decimal(&from_decimal(&negative).unwrap().unwrap()), negative);
        }
    }

    /// Karatsuba's product against the schoolbook one, in both bases, for operands of equal
    /// and unequal lengths, with the largest limbs (the largest carries).
    #[test]
    fn products_match_the_schoolbook_product() {
        let limbs = |len: usize, seed: u64| -> Vec<u32> {
            digits(len * 10, seed).as_bytes().chunks(9).map(|c| c.iter().fold(0u32, |acc, &d| acc.wrapping_mul(31).wrapping_add(u32::from(d)))).take(len).collect()
        };
        for (len_a, len_b) in [(32, 32), (33, 64), (100, 100), (257, 31), (257, 40), (500, 129), (1000, 999)] {
            for (a, b) in [(limbs(len_a, 1), limbs(len_b, 2)), (vec![u32::MAX; len_a], vec![u32::MAX; len_b])] {
                assert_eq!(product::<BINARY>(&a, &b), schoolbook_product::<BINARY>(&a, &b), "{len_a} x {len_b} limbs");
            }
            let decimal = |limbs: Vec<u32>| -> Vec<u32> { limbs.into_iter().map(|l| l % 1_000_000_000).collect() };
            for (a, b) in [(decimal(limbs(len_a, 3)), decimal(limbs(len_b, 4))), (vec![999_999_999; len_a], vec![999_999_999; len_b])] {
                assert_eq!(product::<DECIMAL>(&a, &b), schoolbook_product::<DECIMAL>(&a, &b), "{len_a} x {len_b} decimal limbs");
            }
        }
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
                assert_eq!(from_decimal(text).unwrap().unwrap(), slow(text), "{text}");
                assert_eq!(to_decimal(&from_decimal(text).unwrap().unwrap()), text);
                let negative = format!("-{text}");
                let expected = if text == "0" { "0".to_owned() } else { negative.clone() };
                assert_eq!(to_decimal(&from_decimal(&negative).unwrap().unwrap()), expected);
            }
        }
    }
}
