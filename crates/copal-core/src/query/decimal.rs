//! Decimals (docs/FORMAT.md 6.6, DECIMAL) as the exact numbers they are, as Python compares
//! `decimal.Decimal` with int, float and Decimal: `Decimal("0.1") != 0.1`, and
//! `Decimal("0.10000000000000000001") > Decimal("0.1")`. A decimal is read from its text without
//! copying; comparing it with a float or a big integer writes that number's exact decimal digits.

use std::cmp::Ordering;

/// The value of a DECIMAL's text.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Parsed<'t> {
    Finite(Decimal<'t>),
    Infinite { negative: bool },
    /// `NaN` or `sNaN` (with or without a payload), and text that is not a decimal.
    NaN,
}

/// A finite decimal: ±0.d₁d₂…dₙ × 10^`scale`, where d₁…dₙ are the significant digits of
/// `int ++ frac` (no leading or trailing zero; none for zero), found at `start..end`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decimal<'t> {
    negative: bool,
    int: &'t [u8],
    frac: &'t [u8],
    start: usize,
    end: usize,
    scale: i64,
}

/// Exponents beyond this are clamped: they are far outside what any decimal context allows
/// (Python's maximum is 10^18 - 1), so the order of the values is kept, and sums of them with
/// digit counts cannot overflow.
const MAX_EXPONENT: i64 = 1 << 61;

/// Parses the text of a DECIMAL (the grammar of docs/FORMAT.md 6.6).
pub(crate) fn parse(text: &str) -> Parsed<'_> {
    let bytes = text.as_bytes();
    let (negative, unsigned) = match bytes.first() {
        Some(b'-') => (true, &bytes[1..]),
        Some(b'+') => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    if unsigned.first().is_some_and(|b| !b.is_ascii_digit() && *b != b'.') {
        let word = unsigned.to_ascii_lowercase();
        return match word.as_slice() {
            b"inf" | b"infinity" => Parsed::Infinite { negative },
            _ => Parsed::NaN,
        };
    }
    let (mantissa, exponent) = match unsigned.iter().position(|b| *b == b'e' || *b == b'E') {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let (int, frac) = match mantissa.iter().position(|b| *b == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &[][..]),
    };
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    if !digits(int) || !digits(frac) || int.len() + frac.len() == 0 {
        return Parsed::NaN;
    }
    let exponent = match exponent {
        None => 0,
        Some(e) => {
            let (sign, e) = match e.first() {
                Some(b'-') => (-1, &e[1..]),
                Some(b'+') => (1, &e[1..]),
                _ => (1, e),
            };
            if e.is_empty() || !digits(e) {
                return Parsed::NaN;
            }
            let magnitude = e.iter().fold(0i64, |acc, d| acc.saturating_mul(10).saturating_add(i64::from(d - b'0')));
            sign * magnitude.min(MAX_EXPONENT)
        }
    };
    Parsed::Finite(Decimal::new(negative, int, frac, exponent))
}

impl<'t> Decimal<'t> {
    /// The decimal `int.frac × 10^exponent` (ASCII digits).
    fn new(negative: bool, int: &'t [u8], frac: &'t [u8], exponent: i64) -> Self {
        let digit = |i: usize| if i < int.len() { int[i] } else { frac[i - int.len()] };
        let len = int.len() + frac.len();
        let start = (0..len).find(|&i| digit(i) != b'0').unwrap_or(len);
        let end = (start..len).rev().find(|&i| digit(i) != b'0').map_or(start, |i| i + 1);
        let scale = (int.len() as i64 - start as i64).saturating_add(exponent);
        Decimal { negative, int, frac, start, end, scale }
    }

    /// The integer `digits × 10^exponent` (ASCII digits, no sign).
    fn from_digits(negative: bool, digits: &'t [u8], exponent: i64) -> Self {
        Decimal::new(negative, digits, &[], exponent)
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.start == self.end
    }

    pub(crate) fn is_negative(&self) -> bool {
        self.negative && !self.is_zero()
    }

    /// The significant digits, most significant first (ASCII).
    pub(crate) fn digits(&self) -> impl Iterator<Item = u8> + '_ {
        (self.start..self.end).map(|i| if i < self.int.len() { self.int[i] } else { self.frac[i - self.int.len()] })
    }

    fn digit_count(&self) -> usize {
        self.end - self.start
    }

    /// The power of ten just above the magnitude: |d| is in [10^(scale-1), 10^scale).
    pub(crate) fn scale(&self) -> i64 {
        self.scale
    }

    /// Whether the decimal is an integer.
    pub(crate) fn is_integral(&self) -> bool {
        self.is_zero() || self.scale >= self.digit_count() as i64
    }

    /// -1, 0 or 1.
    fn signum(&self) -> i8 {
        match (self.is_zero(), self.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        }
    }

    /// The integer part (rounded towards minus infinity), if it fits i128.
    pub(crate) fn floor_i128(&self) -> Option<i128> {
        if self.is_zero() || self.scale <= 0 {
            return Some(if self.is_negative() { -1 } else { 0 });
        }
        if self.scale > 39 {
            return None;
        }
        let mut magnitude: i128 = 0;
        let mut digits = self.digits();
        for _ in 0..self.scale {
            let d = digits.next().map_or(0, |d| d - b'0');
            magnitude = magnitude.checked_mul(10)?.checked_add(i128::from(d))?;
        }
        let fraction = digits.next().is_some();
        Some(match (self.negative, fraction) {
            (false, _) => magnitude,
            (true, false) => -magnitude,
            (true, true) => -magnitude - 1,
        })
    }

    /// The value, if it is an integer that fits i128.
    pub(crate) fn to_i128(self) -> Option<i128> {
        if self.is_integral() {
            self.floor_i128()
        } else {
            None
        }
    }

    /// The minimal little-endian two's complement bytes of an integral decimal of at most
    /// `max_bits` bits (None: not an integer, or larger).
    pub(crate) fn to_twos_complement(self, max_bits: usize) -> Option<Vec<u8>> {
        if !self.is_integral() {
            return None;
        }
        // 10^(scale-1) <= |d|: more than max_bits bits once scale - 1 > max_bits × log10(2).
        if self.scale > 1 + (max_bits as i64 * 30_103).div_euclid(100_000) + 1 {
            return None;
        }
        let mut limbs: Vec<u32> = Vec::new();
        let mut digits = self.digits();
        for _ in 0..self.scale.max(0) {
            let d = digits.next().map_or(0, |d| d - b'0');
            mul_add_binary(&mut limbs, 10, u32::from(d));
        }
        let bits = limbs.last().map_or(0, |top| 32 * limbs.len() - top.leading_zeros() as usize);
        if bits > max_bits {
            return None;
        }
        let mut le: Vec<u8> = limbs.iter().flat_map(|limb| limb.to_le_bytes()).collect();
        le.push(0);
        if self.is_negative() {
            negate_twos_complement(&mut le);
        }
        let minimal = super::number::minimal_twos_complement(&le).len();
        le.truncate(minimal);
        Some(le)
    }

    /// The float equal to the decimal, if there is one.
    pub(crate) fn as_float(&self) -> Option<f64> {
        let digits: String = self.digits().map(char::from).collect();
        let sign = if self.negative { "-" } else { "" };
        let exponent = self.scale - self.digit_count() as i64;
        let nearest: f64 = format!("{sign}0{digits}e{exponent}").parse().ok()?;
        (nearest.is_finite() && self.cmp_f64(nearest) == Some(Ordering::Equal)).then_some(nearest)
    }

    /// The exact order of two decimals.
    pub(crate) fn cmp(&self, other: &Decimal<'_>) -> Ordering {
        let (a, b) = (self.signum(), other.signum());
        if a != b || a == 0 {
            return a.cmp(&b);
        }
        let magnitude = self.scale.cmp(&other.scale).then_with(|| self.digits().cmp(other.digits()));
        if a < 0 {
            magnitude.reverse()
        } else {
            magnitude
        }
    }

    /// The exact order of the decimal and an integer.
    pub(crate) fn cmp_i128(&self, i: i128) -> Ordering {
        let mut buffer = [0u8; 40];
        let digits = integer_digits(i.unsigned_abs(), &mut buffer);
        self.cmp(&Decimal::from_digits(i < 0, digits, 0))
    }

    /// The exact order of the decimal and a float (None for NaN).
    pub(crate) fn cmp_f64(&self, f: f64) -> Option<Ordering> {
        if f.is_nan() {
            return None;
        }
        if f.is_infinite() {
            return Some(if f > 0.0 { Ordering::Less } else { Ordering::Greater });
        }
        let float_sign = if f == 0.0 { 0 } else if f < 0.0 { -1 } else { 1 };
        let sign = self.signum();
        if sign != float_sign || sign == 0 {
            return Some(sign.cmp(&float_sign));
        }
        // Far apart in magnitude: decided without the float's digits. log10 may be off by one
        // near powers of ten, hence the margin.
        let float_scale = f.abs().log10().floor() as i64 + 1;
        if (self.scale - float_scale).abs() >= 2 {
            let magnitude = self.scale.cmp(&float_scale);
            return Some(if sign < 0 { magnitude.reverse() } else { magnitude });
        }
        let (digits, exponent) = float_digits(f);
        Some(self.cmp(&Decimal::from_digits(f < 0.0, &digits, exponent)))
    }

    /// The exact order of the decimal and an integer given as little-endian two's complement.
    pub(crate) fn cmp_twos_complement(&self, le: &[u8]) -> Ordering {
        let negative = le.last().is_some_and(|b| b & 0x80 != 0);
        let mut magnitude = le.to_vec();
        if negative {
            negate_twos_complement(&mut magnitude);
        }
        while magnitude.last() == Some(&0) {
            magnitude.pop();
        }
        let other_sign: i8 = if magnitude.is_empty() { 0 } else if negative { -1 } else { 1 };
        let sign = self.signum();
        if sign != other_sign || sign == 0 {
            return sign.cmp(&other_sign);
        }
        // The integer has `digits` decimal digits, within these bounds (log10(2) = 0.30103 with
        // margins for rounding): a decimal whose scale lies outside them is decided at once.
        let bits = 8 * magnitude.len() as i64 - i64::from(magnitude.last().map_or(0, |b| b.leading_zeros()));
        let fewest = ((bits - 1) as f64 * std::f64::consts::LOG10_2 - 1e-6).floor() as i64 + 1;
        let most = (bits as f64 * std::f64::consts::LOG10_2 + 1e-6).floor() as i64 + 1;
        let by_magnitude = if self.scale < fewest {
            Some(Ordering::Less)
        } else if self.scale > most {
            Some(Ordering::Greater)
        } else {
            None
        };
        let ordering = match by_magnitude {
            Some(ordering) => ordering,
            None => {
                let digits = binary_to_decimal_digits(&magnitude);
                return self.cmp(&Decimal::from_digits(negative, &digits, 0));
            }
        };
        if sign < 0 {
            ordering.reverse()
        } else {
            ordering
        }
    }
}

/// The decimal digits of `n` (at least one), written at the end of `buffer`.
fn integer_digits(mut n: u128, buffer: &mut [u8; 40]) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buffer[at..];
        }
    }
}

/// The exact decimal digits of a finite nonzero float, and the power of ten they are scaled by:
/// `|f| = digits × 10^exponent`.
fn float_digits(f: f64) -> (Vec<u8>, i64) {
    let bits = f.to_bits();
    let biased = ((bits >> 52) & 0x7FF) as i64;
    let fraction = bits & ((1 << 52) - 1);
    let (mut mantissa, mut exponent) = if biased == 0 { (fraction, -1074) } else { (fraction | (1 << 52), biased - 1075) };
    let zeros = mantissa.trailing_zeros().min(63);
    mantissa >>= zeros;
    exponent += i64::from(zeros);
    // |f| = mantissa × 2^exponent, and 2^-k = 5^k × 10^-k.
    let mut limbs = vec![(mantissa % BASE) as u32, (mantissa / BASE % BASE) as u32, (mantissa / BASE / BASE) as u32];
    let (factor, mut count, scaled) = if exponent >= 0 { (2u32, exponent, 0) } else { (5u32, -exponent, exponent) };
    while count > 0 {
        let step = count.min(if factor == 2 { 31 } else { 13 });
        mul_add_decimal(&mut limbs, factor.pow(step as u32), 0);
        count -= step;
    }
    (decimal_limbs_to_digits(&limbs), scaled)
}

/// Limbs of decimal numbers: base 10^9, least significant first.
const BASE: u64 = 1_000_000_000;

/// `limbs = limbs × factor + add` in base 10^9 (factor and add below 2^32).
fn mul_add_decimal(limbs: &mut Vec<u32>, factor: u32, add: u32) {
    let mut carry = u64::from(add);
    for limb in limbs.iter_mut() {
        let product = u64::from(*limb) * u64::from(factor) + carry;
        *limb = (product % BASE) as u32;
        carry = product / BASE;
    }
    while carry > 0 {
        limbs.push((carry % BASE) as u32);
        carry /= BASE;
    }
}

/// `limbs = limbs × factor + add` in base 2^32.
fn mul_add_binary(limbs: &mut Vec<u32>, factor: u32, add: u32) {
    let mut carry = u64::from(add);
    for limb in limbs.iter_mut() {
        let product = u64::from(*limb) * u64::from(factor) + carry;
        *limb = product as u32;
        carry = product >> 32;
    }
    if carry > 0 {
        limbs.push(carry as u32);
    }
}

/// The decimal digits (ASCII, no leading zero; "0" for zero) of base-10^9 limbs.
fn decimal_limbs_to_digits(limbs: &[u32]) -> Vec<u8> {
    let mut top = limbs.len();
    while top > 1 && limbs[top - 1] == 0 {
        top -= 1;
    }
    let mut out = limbs.get(top.wrapping_sub(1)).map_or_else(|| b"0".to_vec(), |l| l.to_string().into_bytes());
    for limb in limbs[..top.saturating_sub(1)].iter().rev() {
        out.extend_from_slice(format!("{limb:09}").as_bytes());
    }
    out
}

/// The decimal digits of a magnitude given as little-endian bytes. Quadratic in its length, as
/// Python's own conversions are; callers convert only integers of a decimal's magnitude.
fn binary_to_decimal_digits(le: &[u8]) -> Vec<u8> {
    let mut limbs: Vec<u32> = Vec::new();
    for chunk in le.rchunks(3) {
        let mut word = 0u32;
        for byte in chunk.iter().rev() {
            word = word << 8 | u32::from(*byte);
        }
        mul_add_decimal(&mut limbs, 1 << (8 * chunk.len()), word);
    }
    decimal_limbs_to_digits(&limbs)
}

/// Negates a little-endian two's complement integer in place (invert and add one).
fn negate_twos_complement(le: &mut [u8]) {
    let mut carry = 1u16;
    for byte in le.iter_mut() {
        let sum = u16::from(!*byte) + carry;
        *byte = sum as u8;
        carry = sum >> 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(text: &str) -> Decimal<'_> {
        match parse(text) {
            Parsed::Finite(d) => d,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn texts_of_one_value_compare_equal() {
        for (a, b) in [("1.50", "1.5"), ("-0", "0.000"), ("1E+2", "100"), ("0.0012", "12e-4"), ("+7", "7.")] {
            assert_eq!(dec(a).cmp(&dec(b)), Ordering::Equal, "{a} {b}");
        }
        assert!(matches!(parse("-Infinity"), Parsed::Infinite { negative: true }));
        assert!(matches!(parse("sNaN12"), Parsed::NaN));
        assert!(matches!(parse("1.2.3"), Parsed::NaN));
    }

    #[test]
    fn decimals_compare_exactly() {
        assert_eq!(dec("0.10000000000000000001").cmp(&dec("0.1")), Ordering::Greater);
        assert_eq!(dec("-0.10000000000000000001").cmp(&dec("-0.1")), Ordering::Less);
        assert_eq!(dec("9.99").cmp(&dec("10")), Ordering::Less);
        assert_eq!(dec("0.1").cmp_f64(0.1), Some(Ordering::Less));
        assert_eq!(dec("0.1000000000000000055511151231257827021181583404541015625").cmp_f64(0.1), Some(Ordering::Equal));
        assert_eq!(dec("0.5").cmp_f64(0.5), Some(Ordering::Equal));
        assert_eq!(dec("5E-324").cmp_f64(f64::from_bits(1)), Some(Ordering::Greater));
        assert_eq!(dec("1E+30").cmp_i128(10i128.pow(30)), Ordering::Equal);
        assert_eq!(dec("-170141183460469231731687303715884105728").cmp_i128(i128::MIN), Ordering::Equal);
        assert_eq!(dec("1E+308").cmp_f64(1e308), Some(Ordering::Less));
        assert_eq!(dec("2.5").cmp_f64(f64::INFINITY), Some(Ordering::Less));
    }

    #[test]
    fn decimals_compare_exactly_with_big_integers() {
        // 2^200 = 1606938044258990275541962092341162602522202993782792835301376.
        let mut le = vec![0u8; 26];
        le[25] = 1;
        let two_200 = "1606938044258990275541962092341162602522202993782792835301376";
        assert_eq!(dec(two_200).cmp_twos_complement(&le), Ordering::Equal);
        assert_eq!(dec("1.606938044258990275541962092341162602522202993782792835301377E+60").cmp_twos_complement(&le), Ordering::Greater);
        assert_eq!(dec("1E+100").cmp_twos_complement(&le), Ordering::Greater);
        assert_eq!(dec("-1E+100").cmp_twos_complement(&le), Ordering::Less);
        negate_twos_complement(&mut le);
        assert_eq!(dec(&format!("-{two_200}")).cmp_twos_complement(&le), Ordering::Equal);
        assert_eq!(dec("-1E+59").cmp_twos_complement(&le), Ordering::Greater);
    }

    #[test]
    fn integral_decimals_convert_exactly() {
        assert_eq!(dec("1.2E+3").to_i128(), Some(1200));
        assert_eq!(dec("-2.5").floor_i128(), Some(-3));
        assert_eq!(dec("-0.5").floor_i128(), Some(-1));
        assert_eq!(dec("2.5").to_i128(), None);
        assert_eq!(dec("-1E+2").to_twos_complement(64), Some(vec![0x9C]));
        assert_eq!(dec("-2E+2").to_twos_complement(64), Some(vec![0x38, 0xFF]));
        assert_eq!(dec("1E+100").to_twos_complement(400).map(|b| b.len()), Some(42));
        assert_eq!(dec("1E+100").to_twos_complement(300), None);
    }
}
