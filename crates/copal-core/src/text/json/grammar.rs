//! The grammar of the JSON document (docs/TEXT_FORMATS.md sections 1 to 3): its opening, the
//! `$`-tagged objects that stand in for the values JSON has no type for, `$id` and `$ref`.
//!
//! Both writers of the document, the transcoder (`writer`) and the binding's direct writer
//! (crates/copal-py/src/json_writer/), write every tagged object through these functions, so
//! that each element of the grammar is written by one function. Values inside a tagged object
//! (the items of a `$tuple`, the fields of a `$type`, a class's name or number) are the
//! writer's; the functions here write the text around them. Everything is `#[inline]`: a tag
//! is a constant, and each function comes down to the appends it writes.

use super::numbers::{float, push_i64, push_u64};
use super::strings::string;
use crate::format::TzInfo;
use crate::text::{base64, clock, TextOut};

/// The document's opening, up to its value.
const DOCUMENT_OPENING: &str = "{\"$copal\":2,\"value\":";

/// Defines `Tag` with the text of each tag.
macro_rules! tags {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// The tag of a tagged object: the name of its first member (docs/TEXT_FORMATS.md
        /// section 2).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Tag {
            $($(#[$doc])* $variant,)*
        }

        impl Tag {
            /// `"$tag":`, the tag as the member it names.
            #[inline(always)]
            const fn member(self) -> &'static str {
                match self {
                    $(Tag::$variant => concat!("\"$", $name, "\":"),)*
                }
            }

            /// `{"$tag":`, the opening of a tagged object without an `"$id"`: one append.
            #[inline(always)]
            const fn opening(self) -> &'static str {
                match self {
                    $(Tag::$variant => concat!("{\"$", $name, "\":"),)*
                }
            }

            /// `{"$tag":"`, the opening of a tagged object without an `"$id"` whose value is a
            /// string written in pieces: one append.
            #[inline(always)]
            const fn string_opening(self) -> &'static str {
                match self {
                    $(Tag::$variant => concat!("{\"$", $name, "\":\""),)*
                }
            }
        }
    };
}

tags! {
    /// A FLOAT that is not finite.
    Float = "float",
    Complex = "complex",
    /// A STR_SURROGATES.
    Surrogates = "surrogates",
    Bytes = "bytes",
    ByteArray = "bytearray",
    /// A list that has an `"$id"` (other lists are plain arrays).
    List = "list",
    Tuple = "tuple",
    Set = "set",
    FrozenSet = "frozenset",
    /// A dict with a key that is not a string (other dicts are plain objects).
    Dict = "dict",
    DateTime = "datetime",
    Date = "date",
    Time = "time",
    TimeDelta = "timedelta",
    Decimal = "decimal",
    Uuid = "uuid",
    Enum = "enum",
    /// An OBJECT of a class that is not persistent.
    Type = "type",
    /// An OBJECT of a persistent class, stored by value.
    Persistent = "persistent",
    Subclass = "subclass",
    /// A BACKREF.
    Ref = "ref",
}

/// `{"$copal":2,"value":`, ahead of the root value.
#[inline]
pub fn open_document<O: TextOut + ?Sized>(out: &mut O) {
    out.push_str(DOCUMENT_OPENING);
}

/// The `}` after the root value.
#[inline]
pub fn close_document<O: TextOut + ?Sized>(out: &mut O) {
    out.push('}');
}

/// `{"$ref":slot}`: a back-reference to the value of memo slot `slot` (section 3).
#[inline]
pub fn reference<O: TextOut + ?Sized>(out: &mut O, slot: u64) {
    out.push_str(Tag::Ref.opening());
    push_u64(out, slot);
    out.push('}');
}

/// `{`, then `"$id":slot` if the value has an id: the value of memo slot `slot` is referred to
/// (section 3). Returns whether the id was written; the caller writes the comma before the
/// next member then.
#[inline]
pub fn open_with_id<O: TextOut + ?Sized>(out: &mut O, id: Option<u64>) -> bool {
    out.push('{');
    if let Some(slot) = id {
        id_member(out, slot);
    }
    id.is_some()
}

/// The opening of a tagged object up to its tag's value: `{"$tag":`, or `{"$id":slot,"$tag":`
/// when the value has an id.
#[inline]
pub fn open_tagged<O: TextOut + ?Sized>(out: &mut O, id: Option<u64>, tag: Tag) {
    match id {
        Some(slot) => {
            out.push('{');
            id_member(out, slot);
            out.push(',');
            out.push_str(tag.member());
        }
        None => out.push_str(tag.opening()),
    }
}

/// `"$id":slot`.
#[inline]
fn id_member<O: TextOut + ?Sized>(out: &mut O, slot: u64) {
    out.push_str("\"$id\":");
    push_u64(out, slot);
}

/// `{"$float":"nan"|"inf"|"-inf"}` of a FLOAT that is not finite.
#[inline]
pub fn non_finite_float<O: TextOut + ?Sized>(out: &mut O, f: f64) {
    let text = if f.is_nan() { "nan" } else if f > 0.0 { "inf" } else { "-inf" };
    out.push_str(Tag::Float.string_opening());
    out.push_str(text);
    out.push_str("\"}");
}

/// `{"$complex":[real,imaginary]}`.
#[inline]
pub fn complex<O: TextOut + ?Sized>(out: &mut O, real: f64, imaginary: f64) {
    out.push_str(Tag::Complex.opening());
    out.push('[');
    float(out, real);
    out.push(',');
    float(out, imaginary);
    out.push_str("]}");
}

/// `{"$bytes":"<base64>"}`.
#[inline]
pub fn bytes<O: TextOut + ?Sized>(out: &mut O, data: &[u8]) {
    out.push_str(Tag::Bytes.string_opening());
    base64_closing(out, data);
}

/// `{"$bytearray":"<base64>"}`, with the bytearray's `"$id"` when it has one.
#[inline]
pub fn bytearray<O: TextOut + ?Sized>(out: &mut O, id: Option<u64>, data: &[u8]) {
    open_tagged(out, id, Tag::ByteArray);
    out.push('"');
    base64_closing(out, data);
}

/// `{"$surrogates":"<base64>"}` of the generalized UTF-8 of a str with lone surrogates.
#[inline]
pub fn surrogates<O: TextOut + ?Sized>(out: &mut O, generalized_utf8: &[u8]) {
    out.push_str(Tag::Surrogates.string_opening());
    base64_closing(out, generalized_utf8);
}

/// `<base64>"}`: the value of a tagged object of bytes after its opening quote, and the
/// object's end.
#[inline]
fn base64_closing<O: TextOut + ?Sized>(out: &mut O, data: &[u8]) {
    base64::encode(data, out);
    out.push_str("\"}");
}

/// `{"$datetime":"<iso><offset>","$zone":"<key>","$fold":1}` of the wall-clock time `micros`
/// after the epoch (the offset, zone and fold when they apply). A fixed offset is under a day.
#[inline]
pub fn datetime<O: TextOut + ?Sized>(out: &mut O, micros: i64, zone: &TzInfo, fold: bool) {
    clock_value(out, Tag::DateTime, |out| clock::write_datetime(micros, out), zone, fold);
}

/// `{"$time":"<iso><offset>","$zone":"<key>","$fold":1}` of the time of day `micros` (the
/// offset, zone and fold when they apply). A fixed offset is under a day.
#[inline]
pub fn time<O: TextOut + ?Sized>(out: &mut O, micros: u64, zone: &TzInfo, fold: bool) {
    clock_value(out, Tag::Time, |out| clock::write_clock(micros, out), zone, fold);
}

/// A `$datetime` or `$time` object, whose ISO text `iso` writes.
#[inline]
fn clock_value<O: TextOut + ?Sized>(out: &mut O, tag: Tag, iso: impl FnOnce(&mut O), zone: &TzInfo, fold: bool) {
    out.push_str(tag.string_opening());
    iso(out);
    if let TzInfo::Offset(micros) = zone {
        clock::write_offset(*micros, out);
    }
    out.push('"');
    if let TzInfo::Named(key) = zone {
        out.push_str(",\"$zone\":");
        string(out, key);
    }
    if fold {
        out.push_str(",\"$fold\":1");
    }
    out.push('}');
}

/// `{"$date":"<iso>"}` of the date `days` after the epoch.
#[inline]
pub fn date<O: TextOut + ?Sized>(out: &mut O, days: i64) {
    out.push_str(Tag::Date.string_opening());
    clock::write_date(days, out);
    out.push_str("\"}");
}

/// `{"$timedelta":[days,seconds,microseconds]}`, in Python's normalized form.
#[inline]
pub fn timedelta<O: TextOut + ?Sized>(out: &mut O, days: i64, seconds: u64, micros: u64) {
    out.push_str(Tag::TimeDelta.opening());
    out.push('[');
    push_i64(out, days);
    out.push(',');
    push_u64(out, seconds);
    out.push(',');
    push_u64(out, micros);
    out.push_str("]}");
}

/// `{"$decimal":"<text>"}`, `text` being a decimal's text as FORMAT.md has it.
#[inline]
pub fn decimal<O: TextOut + ?Sized>(out: &mut O, text: &str) {
    out.push_str(Tag::Decimal.opening());
    string(out, text);
    out.push('}');
}

/// `{"$uuid":"<hex with dashes>"}`.
#[inline]
pub fn uuid<O: TextOut + ?Sized>(out: &mut O, bytes: &[u8; 16]) {
    out.push_str(Tag::Uuid.string_opening());
    clock::write_uuid(bytes, out);
    out.push_str("\"}");
}

/// `{"$enum":`, which the member's class (its name or number) follows, then `enum_member`.
#[inline]
pub fn enum_opening<O: TextOut + ?Sized>(out: &mut O) {
    out.push_str(Tag::Enum.opening());
}

/// `,"$member":"<name>"}`: the name of an enum member after its class, and the object's end.
#[inline]
pub fn enum_member<O: TextOut + ?Sized>(out: &mut O, name: &str) {
    out.push_str(",\"$member\":");
    string(out, name);
    out.push('}');
}

/// `,"$base":`, which the base value of a SUBCLASS follows, after its class.
#[inline]
pub fn subclass_base<O: TextOut + ?Sized>(out: &mut O) {
    out.push_str(",\"$base\":");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openings_name_the_tag_and_version() {
        assert_eq!((Tag::Date.member(), Tag::Date.opening(), Tag::Date.string_opening()), ("\"$date\":", "{\"$date\":", "{\"$date\":\""));
        assert!(DOCUMENT_OPENING.contains(&format!("\"$copal\":{}", super::super::JSON_VERSION)));
        let mut out = String::new();
        open_tagged(&mut out, Some(3), Tag::Tuple);
        open_tagged(&mut out, None, Tag::Type);
        assert_eq!(out, "{\"$id\":3,\"$tuple\":{\"$type\":");
    }

    #[test]
    fn clock_values_carry_offset_zone_and_fold() {
        let mut out = String::new();
        time(&mut out, 3_600_000_001, &TzInfo::Offset(-5_400_000_000), false);
        datetime(&mut out, 0, &TzInfo::Named("Europe/Paris".into()), true);
        timedelta(&mut out, -1, 86_399, 999_999);
        assert_eq!(
            out,
            "{\"$time\":\"01:00:00.000001-01:30\"}{\"$datetime\":\"1970-01-01T00:00:00\",\"$zone\":\"Europe/Paris\",\"$fold\":1}{\"$timedelta\":[-1,86399,999999]}"
        );
    }
}
