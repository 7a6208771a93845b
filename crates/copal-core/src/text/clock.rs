//! ISO 8601 text of DATE, DATETIME and TIME values (the forms Python's `isoformat()` writes and
//! `fromisoformat()` reads), and of UUIDs.

use crate::format::calendar::{civil_from_days, days_from_civil, MICROS_PER_DAY};
use crate::format::{MAX_DAY, MIN_DAY};

use super::TextOut;

/// The longest text one writer assembles: a datetime whose year has as many digits as a u64,
/// `-` + 20 + `-MM-DD` + `T` + `HH:MM:SS.ffffff`. The others are shorter: a UUID has 36 bytes,
/// and the hours of any clock or offset (at most `u64::MAX` microseconds) have 10 digits.
const LINE_CAPACITY: usize = 1 + 20 + 6 + 1 + 15;

/// ASCII text assembled on the stack and appended to the output in one piece, so that the
/// fixed-width fields of dates, times and UUIDs are written without formatting machinery or an
/// allocation. Only ASCII bytes are stored, and `len` never exceeds `LINE_CAPACITY`.
struct Line {
    bytes: [u8; LINE_CAPACITY],
    len: usize,
}

impl Line {
    #[inline(always)]
    fn new() -> Self {
        Line { bytes: [0; LINE_CAPACITY], len: 0 }
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) -> &mut Self {
        self.bytes[self.len] = b;
        self.len += 1;
        self
    }

    /// `n` zero-padded to `width` digits, or all its digits when it has more: the text of
    /// `format!("{n:0width$}")`.
    #[inline(always)]
    fn padded(&mut self, n: u64, width: u32) -> &mut Self {
        let count = if n < 10u64.pow(width) { width } else { n.ilog10() + 1 } as usize;
        let field = &mut self.bytes[self.len..self.len + count];
        let mut rest = n;
        for digit in field.iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        self.len += count;
        self
    }

    /// The two lowercase hex digits of `b`.
    #[inline(always)]
    fn hex(&mut self, b: u8) -> &mut Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self.byte(HEX[usize::from(b >> 4)]).byte(HEX[usize::from(b & 0xF)])
    }

    /// `YYYY-MM-DD`; a year outside 0 to 9999 has as many digits as it needs, and a negative
    /// one a `-` in front of at least three (`{y:04}`'s text).
    #[inline(always)]
    fn date(&mut self, days: i64) -> &mut Self {
        let (y, m, d) = civil_from_days(days);
        if y < 0 {
            self.byte(b'-').padded(y.unsigned_abs(), 3);
        } else {
            self.padded(y as u64, 4);
        }
        self.byte(b'-').padded(u64::from(m), 2).byte(b'-').padded(u64::from(d), 2)
    }

    /// `HH:MM:SS`, then `.ffffff` unless the microseconds are zero.
    #[inline(always)]
    fn clock(&mut self, micros: u64) -> &mut Self {
        let (s, us) = (micros / 1_000_000, micros % 1_000_000);
        self.padded(s / 3600, 2).byte(b':').padded(s / 60 % 60, 2).byte(b':').padded(s % 60, 2);
        if us != 0 {
            self.byte(b'.').padded(us, 6);
        }
        self
    }

    /// `+HH:MM` or `-HH:MM`, with `:SS` and `.ffffff` when they are not zero.
    #[inline(always)]
    fn offset(&mut self, micros: i64) -> &mut Self {
        self.byte(if micros < 0 { b'-' } else { b'+' });
        let abs = micros.unsigned_abs();
        let (s, us) = (abs / 1_000_000, abs % 1_000_000);
        self.padded(s / 3600, 2).byte(b':').padded(s / 60 % 60, 2);
        if s % 60 != 0 || us != 0 {
            self.byte(b':').padded(s % 60, 2);
        }
        if us != 0 {
            self.byte(b'.').padded(us, 6);
        }
        self
    }

    /// Appends the line to `out`, copying the whole fixed-size buffer (a few word moves, where
    /// copying `len` bytes would call `memcpy`) and taking `len` bytes of it.
    #[inline(always)]
    fn write_to<O: TextOut + ?Sized>(&self, out: &mut O) {
        out.reserve(LINE_CAPACITY);
        // SAFETY: `LINE_CAPACITY` bytes were reserved at `end()` and are stored, and the `len`
        // bytes taken are ASCII, which keeps the text UTF-8.
        unsafe {
            std::ptr::copy_nonoverlapping(self.bytes.as_ptr(), out.end(), LINE_CAPACITY);
            out.advance(self.len);
        }
    }
}

/// The date `days` after 1970-01-01 as `YYYY-MM-DD`.
pub fn write_date<O: TextOut + ?Sized>(days: i64, out: &mut O) {
    Line::new().date(days).write_to(out);
}

/// `HH:MM:SS`, then `.ffffff` unless the microseconds are zero.
pub fn write_clock<O: TextOut + ?Sized>(micros: u64, out: &mut O) {
    Line::new().clock(micros).write_to(out);
}

/// The wall-clock time `micros` after 1970-01-01T00:00 as the date, `T` and the clock.
pub fn write_datetime<O: TextOut + ?Sized>(micros: i64, out: &mut O) {
    Line::new().date(micros.div_euclid(MICROS_PER_DAY)).byte(b'T').clock(micros.rem_euclid(MICROS_PER_DAY) as u64).write_to(out);
}

/// A UTC offset as `+HH:MM`, with `:SS` and `.ffffff` when they are not zero.
pub fn write_offset<O: TextOut + ?Sized>(micros: i64, out: &mut O) {
    Line::new().offset(micros).write_to(out);
}

/// A cursor over ASCII text that reads fixed-width fields.
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn digits(&mut self, n: usize) -> Option<u64> {
        let field = self.text.get(self.at..self.at + n)?;
        if !field.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.at += n;
        Some(field.iter().fold(0, |acc, &d| acc * 10 + u64::from(d - b'0')))
    }

    fn eat(&mut self, c: u8) -> bool {
        let found = self.text.get(self.at) == Some(&c);
        self.at += usize::from(found);
        found
    }

    /// `HH:MM:SS` and an optional fraction of 1 to 6 digits, as microseconds since midnight.
    fn clock(&mut self) -> Option<u64> {
        let h = self.digits(2)?;
        let m = self.eat(b':').then(|| self.digits(2))??;
        let s = self.eat(b':').then(|| self.digits(2))??;
        if h > 23 || m > 59 || s > 59 {
            return None;
        }
        Some((h * 3600 + m * 60 + s) * 1_000_000 + self.fraction()?)
    }

    fn fraction(&mut self) -> Option<u64> {
        if !self.eat(b'.') {
            return Some(0);
        }
        let start = self.at;
        while self.at < self.text.len() && self.text[self.at].is_ascii_digit() && self.at - start < 6 {
            self.at += 1;
        }
        let n = self.at - start;
        if n == 0 {
            return None;
        }
        let value = self.text[start..self.at].iter().fold(0, |acc, &d| acc * 10 + u64::from(d - b'0'));
        Some(value * 10u64.pow(6 - n as u32))
    }

    fn date(&mut self) -> Option<i64> {
        let y = self.digits(4)?;
        let m = self.eat(b'-').then(|| self.digits(2))??;
        let d = self.eat(b'-').then(|| self.digits(2))??;
        let (m, d) = (u32::try_from(m).ok()?, u32::try_from(d).ok()?);
        if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
            return None;
        }
        let days = days_from_civil(y as i64, m, d);
        // Rejects February 30th and the like: the day must name itself.
        (civil_from_days(days) == (y as i64, m, d) && (MIN_DAY..=MAX_DAY).contains(&days)).then_some(days)
    }

    /// An optional offset: `Z` or `±HH:MM[:SS[.ffffff]]`, strictly less than a day.
    fn offset(&mut self) -> Option<Option<i64>> {
        if self.eat(b'Z') {
            return Some(Some(0));
        }
        let sign = match self.text.get(self.at) {
            Some(b'+') => 1,
            Some(b'-') => -1,
            _ => return Some(None),
        };
        self.at += 1;
        let h = self.digits(2)?;
        let m = self.eat(b':').then(|| self.digits(2))??;
        let (s, us) = if self.eat(b':') { (self.digits(2)?, self.fraction()?) } else { (0, 0) };
        if h > 23 || m > 59 || s > 59 {
            return None;
        }
        Some(Some(sign * (((h * 3600 + m * 60 + s) * 1_000_000 + us) as i64)))
    }

    fn end(&self) -> Option<()> {
        (self.at == self.text.len()).then_some(())
    }
}

pub fn parse_date(text: &str) -> Option<i64> {
    let mut c = Cursor { text: text.as_bytes(), at: 0 };
    let days = c.date()?;
    c.end().map(|()| days)
}

/// Wall-clock microseconds since 1970-01-01T00:00 and the offset, if any.
pub fn parse_datetime(text: &str) -> Option<(i64, Option<i64>)> {
    let mut c = Cursor { text: text.as_bytes(), at: 0 };
    let days = c.date()?;
    if !c.eat(b'T') {
        return None;
    }
    let clock = c.clock()?;
    let offset = c.offset()?;
    c.end()?;
    Some((days * MICROS_PER_DAY + clock as i64, offset))
}

/// Microseconds since midnight and the offset, if any.
pub fn parse_time(text: &str) -> Option<(u64, Option<i64>)> {
    let mut c = Cursor { text: text.as_bytes(), at: 0 };
    let clock = c.clock()?;
    let offset = c.offset()?;
    c.end()?;
    Some((clock, offset))
}

/// The most days a TIMEDELTA holds either way (Python's `timedelta.max.days`), as the binary
/// decoder checks it (`MAX_TIMEDELTA_DAYS` in format/value.rs).
const MAX_TIMEDELTA_DAYS: u64 = 999_999_999;

/// Whether a TIMEDELTA is in the normalized range the binary decoder accepts (FORMAT.md): days
/// within Python's bounds, seconds below a day, microseconds below a second. The text readers
/// refuse others, which no body could hold.
pub(crate) fn timedelta_in_range(days: i64, seconds: u64, micros: u64) -> bool {
    days.unsigned_abs() <= MAX_TIMEDELTA_DAYS && seconds < 86_400 && micros < 1_000_000
}

/// The 8-4-4-4-12 lowercase hex form.
pub fn write_uuid<O: TextOut + ?Sized>(bytes: &[u8; 16], out: &mut O) {
    let mut line = Line::new();
    for (i, &b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            line.byte(b'-');
        }
        line.hex(b);
    }
    line.write_to(out);
}

/// The 16 bytes of a UUID in the 8-4-4-4-12 hex form (either case).
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.bytes().filter(|&c| c != b'-').collect();
    let dashes_ok = text.len() == 36 && [8, 13, 18, 23].iter().all(|&i| text.as_bytes()[i] == b'-');
    if !dashes_ok || hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::calendar::MICROS_PER_SECOND;

    #[test]
    fn iso_round_trips() {
        let mut s = String::new();
        write_datetime(-62_135_596_800_000_000 + 5, &mut s);
        assert_eq!(s, "0001-01-01T00:00:00.000005");
        assert_eq!(parse_datetime(&s), Some((-62_135_596_800_000_000 + 5, None)));
        let mut o = String::new();
        write_offset(-(5 * 3600 + 30 * 60) * MICROS_PER_SECOND - 7, &mut o);
        assert_eq!(o, "-05:30:00.000007");
        assert_eq!(parse_time(&format!("23:59:59.5{o}")), Some((86_399_500_000, Some(-(5 * 3600 + 30 * 60) * MICROS_PER_SECOND - 7))));
        assert_eq!(parse_date("2024-02-30"), None);
        assert_eq!(parse_date("2024-02-29"), Some(days_from_civil(2024, 2, 29)));
        assert_eq!(parse_datetime("2024-01-01T24:00:00"), None);
        assert_eq!(parse_time("12:00:00+"), None);
    }

    /// The text the writers produce, as `format!` writes it.
    fn formatted_date(days: i64) -> String {
        let (y, m, d) = civil_from_days(days);
        format!("{y:04}-{m:02}-{d:02}")
    }

    fn formatted_clock(micros: u64) -> String {
        let (s, us) = (micros / 1_000_000, micros % 1_000_000);
        let fraction = if us != 0 { format!(".{us:06}") } else { String::new() };
        format!("{:02}:{:02}:{:02}{fraction}", s / 3600, s / 60 % 60, s % 60)
    }

    fn formatted_offset(micros: i64) -> String {
        let sign = if micros < 0 { '-' } else { '+' };
        let abs = micros.unsigned_abs();
        let (s, us) = (abs / 1_000_000, abs % 1_000_000);
        let seconds = if s % 60 != 0 || us != 0 { format!(":{:02}", s % 60) } else { String::new() };
        let fraction = if us != 0 { format!(".{us:06}") } else { String::new() };
        format!("{sign}{:02}:{:02}{seconds}{fraction}", s / 3600, s / 60 % 60)
    }

    fn written(write: impl FnOnce(&mut String)) -> String {
        let mut s = String::from("<");
        write(&mut s);
        s.remove(0);
        s
    }

    #[test]
    fn dates_have_four_digit_years_at_least() {
        let cases = [
            (MIN_DAY, "0001-01-01"),
            (MAX_DAY, "9999-12-31"),
            (0, "1970-01-01"),
            (-1, "1969-12-31"),
            (days_from_civil(2024, 2, 29), "2024-02-29"),
            (days_from_civil(0, 3, 1), "0000-03-01"),
            (days_from_civil(-1, 12, 31), "-001-12-31"),
            (days_from_civil(-999, 1, 1), "-999-01-01"),
            (days_from_civil(-12_345, 6, 7), "-12345-06-07"),
            (days_from_civil(10_000, 1, 1), "10000-01-01"),
            (days_from_civil(123_456_789, 10, 11), "123456789-10-11"),
        ];
        for (days, text) in cases {
            assert_eq!(written(|s| write_date(days, s)), text);
            assert_eq!(formatted_date(days), text);
        }
        for days in (-5_000_000..5_000_000).step_by(997) {
            assert_eq!(written(|s| write_date(days, s)), formatted_date(days), "{days}");
        }
    }

    #[test]
    fn clocks_have_a_fraction_only_when_it_is_not_zero() {
        let second = MICROS_PER_SECOND as u64;
        let cases = [
            (0, "00:00:00"),
            (1, "00:00:00.000001"),
            (999_999, "00:00:00.999999"),
            (500_000, "00:00:00.500000"),
            ((23 * 3600 + 59 * 60 + 59) * second, "23:59:59"),
            ((12 * 3600 + 34 * 60 + 56) * second + 7_080, "12:34:56.007080"),
            // Beyond a day, which no TIME holds, the hours take the digits they need.
            (100 * 3600 * second, "100:00:00"),
            (u64::MAX, "5124095576:01:49.551615"),
        ];
        for (micros, text) in cases {
            assert_eq!(written(|s| write_clock(micros, s)), text);
            assert_eq!(formatted_clock(micros), text);
        }
        for micros in (0..MICROS_PER_DAY as u64).step_by(86_400_017) {
            assert_eq!(written(|s| write_clock(micros, s)), formatted_clock(micros), "{micros}");
        }
    }

    #[test]
    fn datetimes_join_date_and_clock() {
        let day = MICROS_PER_DAY;
        let cases = [
            (0, "1970-01-01T00:00:00"),
            (-1, "1969-12-31T23:59:59.999999"),
            (MIN_DAY * day, "0001-01-01T00:00:00"),
            ((MAX_DAY + 1) * day - 1, "9999-12-31T23:59:59.999999"),
            (days_from_civil(-44, 3, 15) * day + 3_600_000_000, "-044-03-15T01:00:00"),
            (days_from_civil(20_000, 1, 1) * day + 10, "20000-01-01T00:00:00.000010"),
        ];
        for (micros, text) in cases {
            assert_eq!(written(|s| write_datetime(micros, s)), text);
        }
        for micros in (MIN_DAY * day..(MAX_DAY + 1) * day).step_by(3_155_695_200_001) {
            let expected = format!("{}T{}", formatted_date(micros.div_euclid(day)), formatted_clock(micros.rem_euclid(day) as u64));
            assert_eq!(written(|s| write_datetime(micros, s)), expected, "{micros}");
        }
    }

    #[test]
    fn offsets_have_seconds_and_fraction_when_not_zero() {
        let (minute, hour) = (60 * MICROS_PER_SECOND, 3600 * MICROS_PER_SECOND);
        let cases = [
            (0, "+00:00"),
            (5 * hour + 30 * minute, "+05:30"),
            (-(5 * hour + 30 * minute), "-05:30"),
            (-(23 * hour + 59 * minute + 59 * MICROS_PER_SECOND), "-23:59:59"),
            (hour + 7, "+01:00:00.000007"),
            (-(hour + 7), "-01:00:00.000007"),
            (-(2 * hour + 3 * MICROS_PER_SECOND + 456_000), "-02:00:03.456000"),
            (-1, "-00:00:00.000001"),
            (i64::MIN, "-2562047788:00:54.775808"),
        ];
        for (micros, text) in cases {
            assert_eq!(written(|s| write_offset(micros, s)), text);
            assert_eq!(formatted_offset(micros), text);
        }
        for micros in (-MICROS_PER_DAY + 1..MICROS_PER_DAY).step_by(1_000_000_007) {
            assert_eq!(written(|s| write_offset(micros, s)), formatted_offset(micros), "{micros}");
        }
    }

    #[test]
    fn uuids_are_lowercase_hex_with_dashes() {
        let mut bytes = [0u8; 16];
        bytes.iter_mut().enumerate().for_each(|(i, b)| *b = (i as u8).wrapping_mul(0x1F) ^ 0xA0);
        let text = written(|s| write_uuid(&bytes, s));
        assert_eq!(text, "a0bf9efd-dc3b-1a79-58b7-96f5d4331271");
        assert_eq!(parse_uuid(&text), Some(bytes));
        assert_eq!(written(|s| write_uuid(&[0xFF; 16], s)), "ffffffff-ffff-ffff-ffff-ffffffffffff");
    }
}
