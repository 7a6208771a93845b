//! Time zones of the IANA database (`zoneinfo.ZoneInfo`), read from its TZif files as Python's
//! `zoneinfo` reads them (Lib/zoneinfo/_common.py `load_data`, Modules/_zoneinfo.c), so that a
//! datetime in a named zone has the UTC offset Python gives it: its instant, by which Python
//! compares it with datetimes of other zones. A DATETIME stores its wall clock and zone key only
//! (docs/FORMAT.md 6.5).
//!
//! Zones are looked up under the directories of `set_search_path` (by default the `TZPATH` that
//! CPython is built with), parsed once per process and kept. A key that no directory holds, or
//! whose file is malformed, has no zone: Python cannot load such a value either.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use crate::format::calendar::{civil_from_days, days_from_civil, MICROS_PER_DAY, MICROS_PER_SECOND};

/// The rules of one zone. Offsets are in seconds east of UTC; local timestamps count the wall
/// clock's seconds since 1970-01-01T00:00 (`get_local_timestamp`).
#[derive(Debug)]
pub(crate) struct Zone {
    /// Per fold (0, 1), the local timestamps of the transitions (`trans_list_wall`).
    local: [Vec<i64>; 2],
    /// The offset in force from each transition on.
    offsets: Vec<i64>,
    /// The offset before the first transition (`ttinfo_before`).
    before: Option<i64>,
    /// The rule after the last transition (`tzrule_after`).
    after: Rule,
    /// The offset of a zone whose offset never changes (`fixed_offset`): only such zones give a
    /// `datetime.time` an offset.
    fixed: Option<i64>,
}

#[derive(Debug, Clone)]
enum Rule {
    Fixed(i64),
    Alternating { std: i64, dst: i64, start: Day, end: Day },
}

/// When in a year a POSIX TZ rule changes the clocks, and at what local time of that day.
#[derive(Debug, Clone, Copy)]
enum Day {
    /// `Mm.w.d`: weekday d (0 = Sunday) of week w (5 = the last) of month m.
    Calendar { month: u32, week: i64, weekday: i64, seconds: i64 },
    /// `Jn` (julian: 1-365, February 29 not counted) or `n` (0-365).
    OfYear { julian: bool, day: i64, seconds: i64 },
}

/// The most zone keys (found or not) kept at once; the database has about 600 zones.
const MAX_CACHED: usize = 4096;

/// CPython's default `TZPATH` (`configure --with-tzpath`).
const DEFAULT_SEARCH_PATH: [&str; 4] = ["/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/usr/share/lib/zoneinfo", "/etc/zoneinfo"];

/// Until `set_search_path`: the absolute directories of the PYTHONTZPATH environment variable
/// if it names any, else CPython's default (as `zoneinfo` starts).
fn search_path() -> &'static RwLock<Vec<PathBuf>> {
    static PATH: OnceLock<RwLock<Vec<PathBuf>>> = OnceLock::new();
    PATH.get_or_init(|| {
        let from_environment: Vec<PathBuf> = std::env::var_os("PYTHONTZPATH")
            .map(|value| std::env::split_paths(&value).filter(|dir| dir.is_absolute()).collect())
            .unwrap_or_default();
        RwLock::new(match from_environment.is_empty() {
            true => DEFAULT_SEARCH_PATH.iter().map(PathBuf::from).collect(),
            false => from_environment,
        })
    })
}

/// Whether a directory of the search path exists.
pub fn search_path_exists() -> bool {
    search_path().read().unwrap_or_else(PoisonError::into_inner).iter().any(|dir| dir.is_dir())
}

fn loaded() -> &'static Mutex<HashMap<String, Option<Arc<Zone>>>> {
    static ZONES: OnceLock<Mutex<HashMap<String, Option<Arc<Zone>>>>> = OnceLock::new();
    ZONES.get_or_init(Mutex::default)
}

/// Makes zones be read from `dirs`, in order (Python's `zoneinfo.TZPATH`, and the `tzdata`
/// package's directory), forgetting the zones read so far if the path changes.
pub fn set_search_path(dirs: Vec<PathBuf>) {
    let mut path = search_path().write().unwrap_or_else(PoisonError::into_inner);
    if *path != dirs {
        *path = dirs;
        loaded().lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

/// The zone of `key`, if a directory of the search path holds a valid TZif file for it.
pub(crate) fn zone(key: &str) -> Option<Arc<Zone>> {
    if let Some(found) = loaded().lock().unwrap_or_else(PoisonError::into_inner).get(key) {
        return found.clone();
    }
    let found = read_zone(key).map(Arc::new);
    let mut zones = loaded().lock().unwrap_or_else(PoisonError::into_inner);
    // Keys come from stored data: the cache stays bounded whatever the data names.
    if zones.len() >= MAX_CACHED {
        zones.clear();
    }
    zones.insert(key.to_owned(), found.clone());
    found
}

/// Whether `key` names a file below a directory, as `zoneinfo._tzpath` accepts keys: relative,
/// without `..` or empty components.
fn is_valid_key(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with('/')
        && !key.contains(['\\', '\0'])
        && key.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
}

fn read_zone(key: &str) -> Option<Zone> {
    if !is_valid_key(key) {
        return None;
    }
    let dirs = search_path().read().unwrap_or_else(PoisonError::into_inner).clone();
    let file = dirs.iter().map(|dir| dir.join(key)).find(|path| path.is_file())?;
    parse_tzif(&std::fs::read(file).ok()?)
}

impl Zone {
    /// The UTC offset, in seconds, of a wall-clock time (`ZoneInfo.utcoffset`).
    pub(crate) fn offset(&self, wall_micros: i64, fold: bool) -> i64 {
        let ts = wall_micros.div_euclid(MICROS_PER_SECOND);
        let local = &self.local[usize::from(fold)];
        match (local.first(), local.last()) {
            (Some(first), _) if ts < *first => self.before.unwrap_or(0),
            (Some(_), Some(last)) if ts <= *last => self.offsets[local.partition_point(|t| *t <= ts) - 1],
            _ => {
                let (year, _, _) = civil_from_days(wall_micros.div_euclid(MICROS_PER_DAY));
                self.after.offset(ts, year, fold)
            }
        }
    }

    /// Whether the wall-clock time is in a fold or a gap: its offset depends on `fold`. Python
    /// never finds such a time equal to one of another zone (PEP 495).
    pub(crate) fn fold_matters(&self, wall_micros: i64) -> bool {
        self.offset(wall_micros, false) != self.offset(wall_micros, true)
    }

    /// The offset of a zone whose offset never changes, which a `datetime.time` in it has.
    pub(crate) fn fixed_offset(&self) -> Option<i64> {
        self.fixed
    }
}

impl Rule {
    /// `find_tzrule_ttinfo`: the offset at local timestamp `ts` of `year`.
    fn offset(&self, ts: i64, year: i64, fold: bool) -> i64 {
        let (std, dst, start, end) = match self {
            Rule::Fixed(offset) => return *offset,
            Rule::Alternating { std, dst, start, end } => (std, dst, start, end),
        };
        let dst_diff = dst - std;
        let (mut start, mut end) = (start.local_timestamp(year), end.local_timestamp(year));
        // With fold 0 the period of the smaller offset runs from the end of the gap to the end
        // of the fold; with fold 1 from the start of the gap to the start of the fold.
        if fold == (dst_diff >= 0) {
            end -= dst_diff;
        } else {
            start += dst_diff;
        }
        let is_dst = if start < end { start <= ts && ts < end } else { ts < end || ts >= start };
        if is_dst {
            *dst
        } else {
            *std
        }
    }
}

impl Day {
    /// `calendarrule_year_to_timestamp` / `dayrule_year_to_timestamp`.
    fn local_timestamp(&self, year: i64) -> i64 {
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        match *self {
            Day::Calendar { month, week, weekday, seconds } => {
                // days_from_civil + 719163 is Python's ordinal, whose day 1 is a Monday.
                let first_day = (days_from_civil(year, month, 1) + 719_163 + 6).rem_euclid(7);
                let days_in_month = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month as usize - 1];
                let mut day = (weekday - (first_day + 1)).rem_euclid(7) + 1 + (week - 1) * 7;
                if day > days_in_month {
                    day -= 7;
                }
                days_from_civil(year, month, day as u32) * 86_400 + seconds
            }
            Day::OfYear { julian, day, seconds } => {
                let day = if julian && day >= 59 && leap { day + 1 } else { day };
                (days_from_civil(year, 1, 1) - 1 + day) * 86_400 + seconds
            }
        }
    }
}

/// A reader of big-endian TZif data.
struct Bytes<'b>(&'b [u8]);

impl<'b> Bytes<'b> {
    fn take(&mut self, n: usize) -> Option<&'b [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn count(&mut self) -> Option<usize> {
        usize::try_from(i32::from_be_bytes(self.take(4)?.try_into().ok()?)).ok()
    }
}

/// The counts of a TZif header, in file order.
struct Header {
    version: u8,
    isutcnt: usize,
    isstdcnt: usize,
    leapcnt: usize,
    timecnt: usize,
    typecnt: usize,
    charcnt: usize,
}

fn header(bytes: &mut Bytes<'_>) -> Option<Header> {
    if bytes.take(4)? != b"TZif" {
        return None;
    }
    let version = match bytes.take(1)?[0] {
        0 => 1,
        digit @ b'1'..=b'9' => digit - b'0',
        _ => return None,
    };
    bytes.take(15)?;
    Some(Header {
        version,
        isutcnt: bytes.count()?,
        isstdcnt: bytes.count()?,
        leapcnt: bytes.count()?,
        timecnt: bytes.count()?,
        typecnt: bytes.count()?,
        charcnt: bytes.count()?,
    })
}

/// A local time type of the file: offset, DST flag, abbreviation.
struct TimeType {
    offset: i64,
    is_dst: bool,
    name: Vec<u8>,
}

fn parse_tzif(data: &[u8]) -> Option<Zone> {
    let mut bytes = Bytes(data);
    let mut h = header(&mut bytes)?;
    if h.version >= 2 {
        // Version 2+ repeats the data with 64-bit times after the version 1 block.
        let v1 = h.timecnt * 5 + h.typecnt * 6 + h.charcnt + h.leapcnt * 8 + h.isstdcnt + h.isutcnt;
        bytes.take(v1)?;
        h = header(&mut bytes)?;
    }
    let time_size = if h.version >= 2 { 8 } else { 4 };
    let transitions: Vec<i64> = bytes
        .take(h.timecnt * time_size)?
        .chunks(time_size)
        .map(|c| if time_size == 8 { i64::from_be_bytes(c.try_into().unwrap_or_default()) } else { i64::from(i32::from_be_bytes(c.try_into().unwrap_or_default())) })
        .collect();
    let indexes: Vec<usize> = bytes.take(h.timecnt)?.iter().map(|i| usize::from(*i)).collect();
    let raw_types: Vec<(i64, bool, usize)> = bytes
        .take(h.typecnt * 6)?
        .chunks(6)
        .map(|c| (i64::from(i32::from_be_bytes([c[0], c[1], c[2], c[3]])), c[4] != 0, usize::from(c[5])))
        .collect();
    let chars = bytes.take(h.charcnt)?;
    let types: Vec<TimeType> = raw_types
        .iter()
        .map(|&(offset, is_dst, at)| {
            let rest = chars.get(at..).unwrap_or_default();
            let name = rest[..rest.iter().position(|b| *b == 0).unwrap_or(rest.len())].to_vec();
            TimeType { offset, is_dst, name }
        })
        .collect();
    if indexes.iter().any(|i| *i >= types.len()) {
        return None;
    }
    let footer = if h.version >= 2 {
        bytes.take(h.isutcnt + h.isstdcnt + h.leapcnt * 12)?;
        if bytes.take(1)? != b"\n" {
            return None;
        }
        let end = bytes.0.iter().position(|b| *b == b'\n')?;
        Some(bytes.take(end)?)
    } else {
        None
    };
    build(&transitions, &indexes, &types, footer.filter(|f| !f.is_empty()))
}

fn build(transitions: &[i64], indexes: &[usize], types: &[TimeType], footer: Option<&[u8]>) -> Option<Zone> {
    let offset_of = |i: usize| types[i].offset;
    // ts_to_local: the wall time of each transition, for fold 0 with the larger of the offsets
    // before and after it, for fold 1 with the smaller.
    let mut local = [transitions.to_vec(), transitions.to_vec()];
    for i in 0..transitions.len() {
        let (before, after) = match i {
            0 if types.len() > 1 => (offset_of(0), offset_of(indexes[0])),
            0 => (offset_of(0), offset_of(0)),
            _ => (offset_of(indexes[i - 1]), offset_of(indexes[i])),
        };
        local[0][i] += before.max(after);
        local[1][i] += before.min(after);
    }
    let offsets = indexes.iter().map(|i| offset_of(*i)).collect();
    let before = types.iter().find(|t| !t.is_dst).or(types.first()).map(|t| t.offset);
    // The offset, DST offset and name of the rule after the transitions, and of the only time
    // type, decide whether the zone has a fixed offset (utcoff_to_dstoff gives a lone DST type
    // a DST offset of one hour).
    let dst_offset = |t: &TimeType| if t.is_dst { 3600 } else { 0 };
    let (after, after_std) = match footer {
        Some(text) => {
            let (rule, std_name) = parse_rule(text)?;
            let std = match &rule {
                Rule::Fixed(offset) | Rule::Alternating { std: offset, .. } => *offset,
            };
            let std_only = matches!(rule, Rule::Fixed(_));
            (rule, std_only.then_some((std, 0, std_name)))
        }
        None => {
            let last = match indexes.last() {
                Some(i) => &types[*i],
                None => types.last()?,
            };
            (Rule::Fixed(last.offset), Some((last.offset, dst_offset(last), last.name.clone())))
        }
    };
    let fixed = match (types, after_std) {
        (_, None) => None,
        ([], Some((offset, _, _))) => Some(offset),
        ([only], Some(std)) => (std == (only.offset, dst_offset(only), only.name.clone())).then_some(only.offset),
        _ => None,
    };
    Some(Zone { local, offsets, before, after, fixed })
}

/// A POSIX TZ string (RFC 8536 3.3, as `parse_tz_str` reads it): the rule, and the standard
/// time's abbreviation.
fn parse_rule(text: &[u8]) -> Option<(Rule, Vec<u8>)> {
    let mut p = Parser(text);
    let std_name = p.abbreviation()?;
    let std = p.offset()?;
    if p.0.is_empty() {
        return Some((Rule::Fixed(std), std_name));
    }
    p.abbreviation()?;
    let dst = if p.0.first() == Some(&b',') { std + 3600 } else { p.offset()? };
    let mut days = [None, None];
    for day in &mut days {
        if p.0.first() != Some(&b',') {
            return None;
        }
        p.0 = &p.0[1..];
        *day = Some(p.day()?);
    }
    if !p.0.is_empty() {
        return None;
    }
    Some((Rule::Alternating { std, dst, start: days[0]?, end: days[1]? }, std_name))
}

struct Parser<'t>(&'t [u8]);

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }

    fn bump(&mut self) {
        self.0 = &self.0[1..];
    }

    /// `parse_abbr`: `<...>` of letters, digits, `+` and `-`, or a run of letters (at least one
    /// character read).
    fn abbreviation(&mut self) -> Option<Vec<u8>> {
        if self.peek() == Some(b'<') {
            let end = self.0.iter().position(|b| *b == b'>')?;
            let name = &self.0[1..end];
            if !name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'-') {
                return None;
            }
            self.0 = &self.0[end + 1..];
            return Some(name.to_vec());
        }
        let len = self.0.iter().take_while(|b| b.is_ascii_alphabetic()).count();
        if len == 0 {
            return None;
        }
        let name = self.0[..len].to_vec();
        self.0 = &self.0[len..];
        Some(name)
    }

    /// Up to `max` digits (at least one).
    fn number(&mut self, max: usize) -> Option<i64> {
        let len = self.0.iter().take(max).take_while(|b| b.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        let value = self.0[..len].iter().fold(0, |acc, d| acc * 10 + i64::from(d - b'0'));
        self.0 = &self.0[len..];
        Some(value)
    }

    /// `:dd` (exactly two digits), or 0 when no colon follows.
    fn two_digits_after_colon(&mut self) -> Option<i64> {
        if self.peek() != Some(b':') {
            return Some(0);
        }
        self.bump();
        if self.0.len() < 2 || !self.0[..2].iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.number(2)
    }

    /// `parse_tz_delta`: `[+|-]hh[:mm[:ss]]`, hours west of UTC: the offset east is its negation.
    fn offset(&mut self) -> Option<i64> {
        let sign = match self.peek() {
            Some(b'-') => {
                self.bump();
                1
            }
            Some(b'+') => {
                self.bump();
                -1
            }
            _ => -1,
        };
        let hours = self.number(2)?;
        if hours > 24 {
            return None;
        }
        let minutes = self.two_digits_after_colon()?;
        let seconds = self.two_digits_after_colon()?;
        Some(sign * (hours * 3600 + minutes * 60 + seconds))
    }

    /// `parse_transition_time`: `[+|-]h[h][:mm[:ss]]`, the sign applying to every part.
    fn time(&mut self) -> Option<i64> {
        let sign = match self.peek() {
            Some(b'-') => {
                self.bump();
                -1
            }
            Some(b'+') => {
                self.bump();
                1
            }
            _ => 1,
        };
        let hours = self.number(2)?;
        let minutes = self.two_digits_after_colon()?;
        let seconds = self.two_digits_after_colon()?;
        Some(sign * (hours * 3600 + minutes * 60 + seconds))
    }

    /// `parse_transition_rule`: `Mm.w.d`, `Jn` or `n`, then an optional `/time` (default 02:00).
    fn day(&mut self) -> Option<Day> {
        let day = if self.peek() == Some(b'M') {
            self.bump();
            let month = self.number(2)?;
            let mut parts = [0; 2];
            for part in &mut parts {
                if self.peek() != Some(b'.') {
                    return None;
                }
                self.bump();
                *part = self.number(1)?;
            }
            let [week, weekday] = parts;
            if !(1..=12).contains(&month) || !(1..=5).contains(&week) || weekday > 6 {
                return None;
            }
            Day::Calendar { month: month as u32, week, weekday, seconds: 0 }
        } else {
            let julian = self.peek() == Some(b'J');
            if julian {
                self.bump();
            }
            let day = self.number(3)?;
            if day < i64::from(julian) || day > 365 {
                return None;
            }
            Day::OfYear { julian, day, seconds: 0 }
        };
        let seconds = if self.peek() == Some(b'/') {
            self.bump();
            self.time()?
        } else {
            2 * 3600
        };
        Some(match day {
            Day::Calendar { month, week, weekday, .. } => Day::Calendar { month, week, weekday, seconds },
            Day::OfYear { julian, day, .. } => Day::OfYear { julian, day, seconds },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000_000;

    fn wall(year: i64, month: u32, day: u32, hour: i64, minute: i64) -> i64 {
        days_from_civil(year, month, day) * MICROS_PER_DAY + hour * HOUR + minute * 60_000_000
    }

    /// A zone with only a TZ string (no transitions): the rule decides everything.
    fn posix(text: &str) -> Zone {
        let (rule, _) = parse_rule(text.as_bytes()).expect("valid rule");
        Zone { local: [Vec::new(), Vec::new()], offsets: Vec::new(), before: None, after: rule, fixed: None }
    }

    #[test]
    fn a_posix_rule_gives_offsets_folds_and_gaps_as_python() {
        let paris = posix("CET-1CEST,M3.5.0,M10.5.0/3");
        assert_eq!(paris.offset(wall(2030, 1, 15, 12, 0), false), 3600);
        assert_eq!(paris.offset(wall(2030, 7, 15, 12, 0), false), 7200);
        // 2030-03-31 02:30 does not exist; 2030-10-27 02:30 happens twice.
        let gap = wall(2030, 3, 31, 2, 30);
        assert_eq!((paris.offset(gap, false), paris.offset(gap, true)), (3600, 7200));
        let fold = wall(2030, 10, 27, 2, 30);
        assert_eq!((paris.offset(fold, false), paris.offset(fold, true)), (7200, 3600));
        assert!(paris.fold_matters(fold) && paris.fold_matters(gap) && !paris.fold_matters(wall(2030, 10, 27, 3, 0)));
        let new_york = posix("EST5EDT,M3.2.0,M11.1.0");
        assert_eq!(new_york.offset(wall(2030, 1, 15, 12, 0), false), -5 * 3600);
        assert_eq!(posix("<+0530>-5:30").offset(0, false), 5 * 3600 + 1800);
    }

    #[test]
    fn malformed_rules_and_keys_are_refused() {
        for text in ["", "CET", "CET-1CEST", "CET-1CEST,M13.5.0,M10.5.0", "CET-1CEST,M3.5.0,M10.5.0x", "<A!>1"] {
            assert!(parse_rule(text.as_bytes()).is_none(), "{text}");
        }
        for key in ["", "/etc/passwd", "../x", "Europe/../../x", "a//b", "a\\b"] {
            assert!(!is_valid_key(key), "{key}");
        }
        assert!(is_valid_key("America/Argentina/Buenos_Aires"));
    }

    #[test]
    fn system_zones_agree_with_their_rules() {
        // Only where the system has the time zone database.
        let Some(paris) = zone("Europe/Paris") else { return };
        assert_eq!(paris.offset(wall(2020, 1, 1, 12, 0), false), 3600);
        assert_eq!(paris.offset(wall(2020, 7, 1, 12, 0), false), 7200);
        assert_eq!(paris.offset(wall(1900, 1, 1, 0, 0), false), 561);
        assert!(paris.fold_matters(wall(2020, 10, 25, 2, 30)) && paris.fixed_offset().is_none());
        if let Some(utc) = zone("UTC") {
            assert_eq!(utc.fixed_offset(), Some(0));
        }
        assert!(zone("No/Such_Zone").is_none());
    }
}
