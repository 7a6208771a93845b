//! JSON numbers: integers and floats written as text (by the XML writer too), and the value of
//! a number's text read back.

use super::grammar::non_finite_float;
use super::pieces::push_piece;
use crate::format::Value;
use crate::text::{bigint, mapping, TextError, TextOut};

/// The magnitudes for which Debug writes a float in plain decimal notation (`0.0001`,
/// `123.0`), as zmij does. Outside it Debug uses an exponent (`1e-5`, `1e16`) from other bounds
/// than zmij's.
const PLAIN_FLOATS: std::ops::Range<f64> = 1e-4..1e16;

/// Whether zmij writes `f` as Debug does, faster: in plain notation, and where the shortest
/// digits that read back are unique. Both write the shortest digits closest to the value, but
/// when two are equally close (1825382308105347.25 between ...47.2 and ...47.3), Debug rounds
/// half up and zmij (as ryu before it) half to even. Such a tie needs the value's exact decimal expansion to be
/// one digit longer than the shortest text, so at most 18 significant digits; the value is
/// m * 2^e (m odd), whose expansion has the digits of m * 5^-e when e < 0, and an integer below
/// 1e16 is its own shortest text (its neighbours are at most 2 apart).
fn shortest_writes_as_debug(f: f64) -> bool {
    if !PLAIN_FLOATS.contains(&f.abs()) {
        return false;
    }
    const MANTISSA_BITS: u32 = 52;
    const EXPONENT_BIAS: i32 = 1023 + MANTISSA_BITS as i32;
    let bits = f.to_bits();
    // Normal numbers only: PLAIN_FLOATS holds no subnormal.
    let exponent = ((bits >> MANTISSA_BITS) & 0x7FF) as i32 - EXPONENT_BIAS;
    let mantissa = bits & ((1 << MANTISSA_BITS) - 1) | 1 << MANTISSA_BITS;
    let (odd, exponent) = (mantissa >> mantissa.trailing_zeros(), exponent + mantissa.trailing_zeros() as i32);
    if exponent >= 0 {
        return true;
    }
    // 5^26 > 10^18: the expansion is longer whatever `odd` is (and 5^25 * 2^53 fits in u128).
    exponent <= -26 || u128::from(odd) * 5u128.pow(exponent.unsigned_abs()) > 10u128.pow(18)
}

/// The decimal digits of 0 to 99, two by two: integers are written two digits per division.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";
/// A non-negative integer in decimal (`Display`'s text, without its formatting machinery).
#[inline]
pub fn push_u64<O: TextOut + ?Sized>(out: &mut O, n: u64) {
    match u32::try_from(n) {
        Ok(short) if short < 100_000_000 => push_eight_digits(out, short),
        _ => push_long_u64(out, n),
    }
}

/// `push_u64` of `n` below 10^8, its digits stored as one word: its four pairs depend on two
/// divisions, not on a chain of four, and its length is read off the word, where counting the
/// digits first cost as much as writing them.
#[inline]
fn push_eight_digits<O: TextOut + ?Sized>(out: &mut O, n: u32) {
    let (high, low) = (n / 10_000, n % 10_000);
    // The text of each pair as the two bytes of a little-endian u16, first digit lowest.
    let pair = |p: u32| u64::from(u16::from_le_bytes([DIGIT_PAIRS[p as usize * 2], DIGIT_PAIRS[p as usize * 2 + 1]]));
    // Put together in a register: bytes stored one by one and loaded as a word would stall
    // the load until the stores retire.
    let word = pair(high / 100) | pair(high % 100) << 16 | pair(low / 100) << 32 | pair(low % 100) << 48;
    // The eight digits, first lowest: the leading zeros are the low bytes that are 0 (every
    // byte is an ASCII digit, so the subtraction borrows nowhere); the last digit is kept
    // even when it is 0, by the bit set in its byte.
    let leading_zeros = ((word - 0x3030_3030_3030_3030) | 1 << 56).trailing_zeros() as usize / 8;
    let digits = (word >> (leading_zeros * 8)).to_le_bytes();
    let len = 8 - leading_zeros;
    if out.room() < 8 {
        // The digits alone: room for all eight bytes could grow an output sized for its
        // document (see `Piece::write`).
        // SAFETY: the first `len` bytes are ASCII digits.
        return out.push_str(unsafe { std::str::from_utf8_unchecked(&digits[..len]) });
    }
    // SAFETY: there is room for the 8 bytes stored; the first `len` are the digits (ASCII, so
    // the text stays UTF-8), the rest, past the text, are not taken by `advance`.
    unsafe {
        std::ptr::write_unaligned(out.end().cast::<[u8; 8]>(), digits);
        out.advance(len);
    }
}

/// `push_u64` of a longer integer. The digits go straight to their place in `out`, two per
/// division: through a buffer, the copy read the digits back before their stores had
/// retired, which stalled it.
#[inline(never)]
fn push_long_u64<O: TextOut + ?Sized>(out: &mut O, mut n: u64) {
    let len = n.checked_ilog10().map_or(1, |log| log as usize + 1);
    out.reserve(len);
    // SAFETY: `len` bytes were reserved; the pairs are written from the right end down to the
    // first byte (`len` is the digit count of `n`), each within them, so that `len` bytes are
    // stored when `advance` takes them; they are ASCII digits, so the text stays UTF-8.
    unsafe {
        let digits = out.end();
        let mut end = len;
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            end -= 2;
            std::ptr::copy_nonoverlapping(DIGIT_PAIRS.as_ptr().add(pair), digits.add(end), 2);
        }
        if n >= 10 {
            std::ptr::copy_nonoverlapping(DIGIT_PAIRS.as_ptr().add(n as usize * 2), digits, 2);
        } else {
            *digits = b'0' + n as u8;
        }
        out.advance(len);
    }
}

/// An integer in decimal. Inlined: the binding's writer of ints calls it for every int, and
/// LLVM leaves a function with two callers out of line.
#[inline(always)]
pub fn push_i64<O: TextOut + ?Sized>(out: &mut O, n: i64) {
    if n < 0 {
        out.push('-');
    }
    push_u64(out, n.unsigned_abs());
}

/// A FLOAT: finite as a JSON number, the others as `{"$float": "nan"|"inf"|"-inf"}`.
pub fn float<O: TextOut + ?Sized>(out: &mut O, f: f64) {
    if f.is_finite() {
        finite_float(out, f);
    } else {
        non_finite_float(out, f);
    }
}

/// zmij's buffer (24 bytes) within one cache line: reading the digits back across two lines,
/// just after zmij stored them, stalled until the stores were done (writing 200,000 floats took
/// twice as long in a build whose stack put the buffer across a line).
#[repr(align(32))]
struct AlignedDigits(zmij::Buffer);

/// The text of a finite float (JSON and XML): the shortest text that reads back as the same
/// f64, always with a `.` or an exponent, so that it reads back as a float, not an int. That is
/// Debug's text, written by zmij where zmij writes the same, faster.
pub fn finite_float<O: TextOut + ?Sized>(out: &mut O, f: f64) {
    if shortest_writes_as_debug(f) {
        let mut digits = AlignedDigits(zmij::Buffer::new());
        push_piece(out, digits.0.format_finite(f));
    } else {
        out.push_fmt(format_args!("{f:?}"));
    }
}
pub(in crate::text) fn number(text: &str) -> Result<Value, TextError> {
    if text.contains(['.', 'e', 'E']) {
        return text.parse().map(Value::Float).map_err(|_| mapping(format!("bad number {text}")));
    }
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Value::Int(i));
    }
    bigint::from_decimal(text)?.map(Value::BigInt).ok_or_else(|| mapping(format!("bad number {text}")))
}

pub(super) fn special_float(text: &str) -> Result<f64, TextError> {
    match text {
        "nan" => Ok(f64::NAN),
        "inf" => Ok(f64::INFINITY),
        "-inf" => Ok(f64::NEG_INFINITY),
        _ => Err(mapping("$float must be \"nan\", \"inf\" or \"-inf\"")),
    }
}
