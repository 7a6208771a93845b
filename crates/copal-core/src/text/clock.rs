//! ISO 8601 text of DATE, DATETIME and TIME values (the forms Python's `isoformat()` writes and
//! `fromisoformat()` reads), and of UUIDs.

use crate::format::calendar::{civil_from_days, days_from_civil, MICROS_PER_DAY};
use crate::format::{MAX_DAY, MIN_DAY};

use super::TextOut;

pub fn write_date<O: TextOut + ?Sized>(days: i64, out: &mut O) {
    let (y, m, d) = civil_from_days(days);
    out.push_str(&format!("{y:04}-{m:02}-{d:02}"));
}

/// `HH:MM:SS`, then `.ffffff` unless the microseconds are zero.
pub fn write_clock<O: TextOut + ?Sized>(micros: u64, out: &mut O) {
    let (s, us) = (micros / 1_000_000, micros % 1_000_000);
    out.push_str(&format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60));
    if us != 0 {
        out.push_str(&format!(".{us:06}"));
    }
}

pub fn write_datetime<O: TextOut + ?Sized>(micros: i64, out: &mut O) {
    write_date(micros.div_euclid(MICROS_PER_DAY), out);
    out.push('T');
    write_clock(micros.rem_euclid(MICROS_PER_DAY) as u64, out);
}

/// A UTC offset as `+HH:MM`, with `:SS` and `.ffffff` when they are not zero.
pub fn write_offset<O: TextOut + ?Sized>(micros: i64, out: &mut O) {
    out.push(if micros < 0 { '-' } else { '+' });
    let abs = micros.unsigned_abs();
    let (s, us) = (abs / 1_000_000, abs % 1_000_000);
    out.push_str(&format!("{:02}:{:02}", s / 3600, s / 60 % 60));
    if s % 60 != 0 || us != 0 {
        out.push_str(&format!(":{:02}", s % 60));
    }
    if us != 0 {
        out.push_str(&format!(".{us:06}"));
    }
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

pub fn write_uuid<O: TextOut + ?Sized>(bytes: &[u8; 16], out: &mut O) {
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
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
}
