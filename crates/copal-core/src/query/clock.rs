//! Datetimes and times as Python compares them (`datetime_richcompare`, `time_richcompare`): two
//! values of one time zone by their wall clocks; otherwise aware values by their instants, and
//! naive and aware values never equal nor ordered. A datetime in a named zone gets its offset
//! from the zone's rules (`zone`); one in a fold or gap is never equal to a datetime of another
//! zone (PEP 495). A time has an offset only in a fixed-offset zone (`time.utcoffset()` has no
//! date to find one).

use std::cmp::Ordering;

use super::zone;
use crate::format::calendar::MICROS_PER_SECOND;
use crate::format::TzInfo;

/// Whether two values have the same `tzinfo`: both naive, the same fixed offset (then their
/// offsets are equal, which Python treats alike), or the same zone key (`ZoneInfo` instances
/// are cached by key).
fn same_zone(a: &TzInfo, b: &TzInfo) -> bool {
    a == b
}

/// The UTC offset (microseconds) of a datetime: None if naive, or in a zone the search path
/// does not hold (Python cannot load such a value).
fn datetime_offset(micros: i64, tz: &TzInfo, fold: bool) -> Option<i64> {
    match tz {
        TzInfo::Naive => None,
        TzInfo::Offset(offset) => Some(*offset),
        TzInfo::Named(key) => Some(zone::zone(key)?.offset(micros, fold) * MICROS_PER_SECOND),
    }
}

/// Python's order of two datetimes (wall clock, fold, zone); None when they are not ordered.
pub(crate) fn compare_datetimes(a: (i64, &TzInfo, bool), b: (i64, &TzInfo, bool)) -> Option<Ordering> {
    if same_zone(a.1, b.1) {
        return Some(a.0.cmp(&b.0));
    }
    let offset_a = datetime_offset(a.0, a.1, a.2)?;
    let offset_b = datetime_offset(b.0, b.1, b.2)?;
    Some((a.0 - offset_a).cmp(&(b.0 - offset_b)))
}

/// Python's `==` of two datetimes: their order says equal, and unless they share a zone,
/// neither is in a fold or gap.
pub(crate) fn datetimes_equal(a: (i64, &TzInfo, bool), b: (i64, &TzInfo, bool)) -> bool {
    compare_datetimes(a, b) == Some(Ordering::Equal) && (same_zone(a.1, b.1) || !(fold_matters(a.0, a.1) || fold_matters(b.0, b.1)))
}

/// Whether the offset of a datetime depends on its fold (it is in a fold or a gap of its zone).
pub(crate) fn fold_matters(micros: i64, tz: &TzInfo) -> bool {
    match tz {
        TzInfo::Named(key) => zone::zone(key).is_some_and(|z| z.fold_matters(micros)),
        _ => false,
    }
}

/// Where a datetime sorts, and what its index key holds: the instant (UTC microseconds) of an
/// aware one, the wall clock of a naive one or of one in an unknown zone.
pub(crate) fn datetime_line(micros: i64, tz: &TzInfo, fold: bool) -> i64 {
    datetime_offset(micros, tz, fold).map_or(micros, |offset| micros - offset)
}

/// Whether a datetime is in a named zone whose UTC offset is known: compared with another
/// zone's datetimes by instant, and with its own zone's by wall clock, it is keyed by instant.
pub(crate) fn is_zoned(tz: &TzInfo) -> bool {
    matches!(tz, TzInfo::Named(key) if zone::zone(key).is_some())
}

/// The UTC offset (microseconds) of a time: a fixed offset, or that of a fixed-offset zone.
pub(crate) fn time_offset(tz: &TzInfo) -> Option<i64> {
    match tz {
        TzInfo::Naive => None,
        TzInfo::Offset(offset) => Some(*offset),
        TzInfo::Named(key) => Some(zone::zone(key)?.fixed_offset()? * MICROS_PER_SECOND),
    }
}

/// Python's order of two times (microseconds since midnight, zone).
pub(crate) fn compare_times(a: (u64, &TzInfo), b: (u64, &TzInfo)) -> Option<Ordering> {
    if same_zone(a.1, b.1) {
        return Some(a.0.cmp(&b.0));
    }
    match (time_offset(a.1), time_offset(b.1)) {
        (None, None) => Some(a.0.cmp(&b.0)),
        (Some(x), Some(y)) => Some((a.0 as i64 - x).cmp(&(b.0 as i64 - y))),
        _ => None,
    }
}

/// Where a time sorts, and what its index key holds: its UTC time if it has an offset, else its
/// wall clock.
pub(crate) fn time_line(micros: u64, tz: &TzInfo) -> i64 {
    micros as i64 - time_offset(tz).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000_000;

    #[test]
    fn aware_datetimes_compare_as_instants() {
        let utc = TzInfo::Offset(0);
        let plus_one = TzInfo::Offset(HOUR);
        assert_eq!(compare_datetimes((12 * HOUR, &utc, false), (13 * HOUR, &plus_one, false)), Some(Ordering::Equal));
        assert_eq!(compare_datetimes((12 * HOUR, &TzInfo::Naive, false), (12 * HOUR, &utc, false)), None);
    }

    #[test]
    fn datetimes_of_one_zone_compare_by_wall_clock_and_others_by_instant() {
        let paris = TzInfo::Named("Europe/Paris".into());
        let utc = TzInfo::Offset(0);
        // 2020-10-25 02:30 in Paris happens twice (CEST then CET); only with the zone database.
        let Some(zone) = zone::zone("Europe/Paris") else { return };
        let day = crate::format::calendar::days_from_civil(2020, 10, 25) * 24 * HOUR;
        let first = (day + 2 * HOUR + HOUR / 2, &paris, false);
        let second = (day + 2 * HOUR + HOUR / 2, &paris, true);
        assert_eq!(datetime_line(first.0, first.1, first.2), day + HOUR / 2);
        assert_eq!(zone.offset(second.0, true), 3600);
        assert!(datetimes_equal(first, second), "one zone: wall clocks, fold ignored");
        let at_instant = (day + HOUR / 2, &utc, false);
        assert_eq!(compare_datetimes(first, at_instant), Some(Ordering::Equal));
        assert!(!datetimes_equal(first, at_instant), "a datetime in a fold equals no other zone's");
        let noon = (day + 12 * HOUR, &paris, false);
        assert!(datetimes_equal(noon, (day + 11 * HOUR, &utc, false)));
        assert_eq!(datetime_line(noon.0, noon.1, noon.2), day + 11 * HOUR);
    }

    #[test]
    fn times_have_offsets_only_in_fixed_zones() {
        let paris = TzInfo::Named("Europe/Paris".into());
        assert_eq!(compare_times((HOUR as u64, &paris), (HOUR as u64, &TzInfo::Naive)), Some(Ordering::Equal));
        assert_eq!(compare_times((HOUR as u64, &TzInfo::Offset(0)), (HOUR as u64, &TzInfo::Naive)), None);
        if zone::zone("UTC").is_some() {
            let utc = TzInfo::Named("UTC".into());
            assert_eq!(compare_times((HOUR as u64, &utc), (HOUR as u64, &TzInfo::Offset(0))), Some(Ordering::Equal));
            assert_eq!(compare_times((HOUR as u64, &utc), (HOUR as u64, &TzInfo::Naive)), None);
        }
    }
}
