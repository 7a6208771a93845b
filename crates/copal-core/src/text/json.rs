//! The JSON form of a stream body (docs/TEXT_FORMATS.md): `{"$copal": 1, "value": ...}`, with
//! JSON's own types where they fit and `$`-tagged objects where JSON cannot express a type.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::Write as _;

pub use super::json_body::{body_from_json, table_and_value_from_json};
use super::tree::{zone as zone_of, TreeBuilder};
use super::{base64, bigint, clock, mapping, Body, ClassNumbers, Positions, TableEntry, TextError, TextOut};
use crate::format::calendar::MICROS_PER_DAY;
use crate::format::{is_decimal_text, tag, DecodeError, Reader, TzInfo, Value, MAX_DAY, MIN_DAY};

/// The version of the JSON mapping, written as `"$copal"`. Version 2 names a class already
/// named in the document by its number (docs/TEXT_FORMATS.md section 2.1); version 1, which
/// always wrote the name, is still read.
pub const JSON_VERSION: u64 = 2;

/// The document's opening, up to its value.
pub const DOCUMENT_OPENING: &str = "{\"$copal\":2,\"value\":";

/// JSON nesting allowed on input: a value of depth 256 (FORMAT.md's limit) takes at most two
/// JSON levels per value level (`{"$tuple": [...]}`), plus the document's own object.
pub(super) const MAX_JSON_DEPTH: usize = 2 * 256 + 8;

// -- writing ------------------------------------------------------------------------------------

/// The JSON document of a stream body (docs/STREAM.md section 4), written straight from its
/// bytes: no value tree is built, so writing allocates little beyond the output.
pub fn to_json(body: &[u8]) -> Result<String, TextError> {
    let mut r = Reader::new(body);
    let table = super::read_table(&mut r)?;
    write_document(&table, r)
}

/// The JSON document of the stream body made of `table` and then `value` (the bytes of its
/// value), for a writer that keeps the table it already has.
pub fn value_to_json(table: &[TableEntry], value: &[u8]) -> Result<String, TextError> {
    write_document(table, Reader::new(value))
}

/// The document of the value at `r`, whose descriptors are `table`.
fn write_document(table: &[TableEntry], mut r: Reader<'_>) -> Result<String, TextError> {
    let body_len = r.remaining();
    // The second pass reads from the same place with the same positions: `mixed` is keyed by them.
    let values = r.clone();
    // Only values that back-references point to get a `"$id"`, and which those are is known
    // at the end: the first pass writes the document assuming there are none (the usual case)
    // and collects them; a second pass writes the ids if there were any.
    let mut w = JsonWriter { out: String::with_capacity(body_len * 2 + 32), table, targets: HashSet::new(), found: HashSet::new(), slot: 0, in_base: false, mixed: HashSet::new(), classes: Vec::new(), class_positions: Positions::default() };
    w.document(&mut r)?;
    r.expect_end()?;
    if w.found.is_empty() {
        return Ok(w.out);
    }
    let mut r = values;
    let mut w = JsonWriter { out: String::with_capacity(w.out.len() + 32), table, targets: std::mem::take(&mut w.found), found: HashSet::new(), slot: 0, in_base: false, mixed: std::mem::take(&mut w.mixed), classes: Vec::new(), class_positions: Positions::default() };
    w.document(&mut r)?;
    Ok(w.out)
}

struct JsonWriter<'a> {
    out: String,
    table: &'a [TableEntry],
    /// The memo slots that get a `"$id"`.
    targets: HashSet<u64>,
    /// The memo slots that back-references point to, as they are met.
    found: HashSet<u64>,
    /// The next memo slot (docs/FORMAT.md section 7), counted as the binary decoder counts.
    slot: u64,
    /// Set while writing a SUBCLASS base: the container takes no memo slot of its own (the
    /// subclass instance took it), so the next container must not count one.
    in_base: bool,
    /// Offsets of dicts found to have a key that is not a string (see `dict`).
    mixed: HashSet<usize>,
    /// The class names written so far, by number (docs/TEXT_FORMATS.md section 2.1).
    classes: Vec<&'a str>,
    class_positions: Positions<&'a str>,
}

impl<'a> JsonWriter<'a> {
    fn document(&mut self, r: &mut Reader<'_>) -> Result<(), TextError> {
        self.out.push_str(DOCUMENT_OPENING);
        self.value(r, 0)?;
        self.out.push('}');
        Ok(())
    }

    fn entry(&self, descriptor: u32) -> Result<&'a TableEntry, TextError> {
        self.table.get(descriptor as usize).ok_or(TextError::Body(DecodeError::UnknownDescriptor { id: descriptor }))
    }

    /// Takes the next memo slot (unless this is a SUBCLASS base) and returns whether the value
    /// needs its `"$id"`.
    fn memo(&mut self) -> Option<u64> {
        if std::mem::take(&mut self.in_base) {
            return None;
        }
        let slot = self.slot;
        self.slot += 1;
        self.targets.contains(&slot).then_some(slot)
    }

    /// Opens a tagged object of a memo-taking value, with `"$id"` first when it needs one.
    fn open_memo(&mut self) {
        self.out.push('{');
        if let Some(slot) = self.memo() {
            let _ = write!(self.out, "\"$id\":{slot},");
        }
    }

    /// A class name: its number if the document named it before, else the name, which takes
    /// the next number.
    fn class_name(&mut self, name: &'a str) {
        match self.class_positions.find(&self.classes, |known| *known == name, || name) {
            Some(number) => push_u64(&mut self.out, number as u64),
            None => {
                self.classes.push(name);
                self.class_positions.added(&self.classes, |name| *name);
                string(&mut self.out, name);
            }
        }
    }

    fn key(&mut self, key: &str) {
        string(&mut self.out, key);
        self.out.push(':');
    }

    fn escaped_key(&mut self, key: &str) {
        escaped_key(&mut self.out, key);
    }

    fn items(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<(), TextError> {
        let count = r.length(1)?;
        self.out.push('[');
        for i in 0..count {
            if i > 0 {
                self.out.push(',');
            }
            self.value(r, depth + 1)?;
        }
        self.out.push(']');
        Ok(())
    }

    fn tagged_items(&mut self, tag: &str, r: &mut Reader<'_>, depth: usize) -> Result<(), TextError> {
        self.open_memo();
        self.key(tag);
        self.items(r, depth)?;
        self.out.push('}');
        Ok(())
    }

    fn tagged_str(&mut self, tag: &str, text: &str) {
        self.out.push('{');
        self.key(tag);
        string(&mut self.out, text);
        self.out.push('}');
    }

    fn float(&mut self, f: f64) {
        float(&mut self.out, f);
    }

    /// `{"$datetime"|"$time": iso, "$zone": name, "$fold": 1}`, the last two when they apply.
    fn clock_value(&mut self, tag: &str, r: &mut Reader<'_>, flags: u8, offset: usize, write: impl FnOnce(&mut String)) -> Result<(), TextError> {
        let tz = r.tz_suffix(flags)?;
        self.out.push('{');
        self.key(tag);
        self.out.push('"');
        write(&mut self.out);
        if let TzInfo::Offset(micros) = tz {
            if micros.unsigned_abs() >= MICROS_PER_DAY as u64 {
                return Err(DecodeError::OutOfRange { offset, what: "UTC offset" }.into());
            }
            clock::write_offset(micros, &mut self.out);
        }
        self.out.push('"');
        if let TzInfo::Named(zone) = &tz {
            self.out.push(',');
            self.key("$zone");
            string(&mut self.out, zone);
        }
        if flags & tag::TZ_FOLD != 0 {
            self.out.push_str(",\"$fold\":1");
        }
        self.out.push('}');
        Ok(())
    }

    fn fields(&mut self, r: &mut Reader<'_>, names: &[String], depth: usize) -> Result<(), TextError> {
        for name in names {
            self.out.push(',');
            self.escaped_key(name);
            self.value(r, depth)?;
        }
        Ok(())
    }

    /// A dict: a JSON object when every key is a string, else `{"$dict": [[k, v], ...]}`.
    /// Keys are only known while reading, so the object form is written optimistically and
    /// rolled back at the first key that is not a string; `mixed` remembers such dicts (by
    /// offset) so that rewriting an enclosing dict does not try them again, which keeps the
    /// worst case at one rewrite per nesting level instead of exponential.
    fn dict(&mut self, r: &mut Reader<'_>, depth: usize, offset: usize) -> Result<(), TextError> {
        let count = r.length(2)?;
        if !self.mixed.contains(&offset) {
            let (mark, saved, slot, in_base, classes) = (self.out.len(), r.clone(), self.slot, self.in_base, self.classes.len());
            self.open_memo();
            if count == 0 && self.out.ends_with(',') {
                // `{"$id": n}` alone: drop the comma `open_memo` put after the id.
                self.out.pop();
            }
            let mut all_str = true;
            for i in 0..count {
                if r.peek_u8()? != tag::STR {
                    all_str = false;
                    break;
                }
                if i > 0 {
                    self.out.push(',');
                }
                r.u8()?;
                let key = r.str()?;
                self.escaped_key(key);
                self.value(r, depth + 1)?;
            }
            if all_str {
                self.out.push('}');
                return Ok(());
            }
            self.mixed.insert(offset);
            self.out.truncate(mark);
            (*r, self.slot, self.in_base) = (saved, slot, in_base);
            // The classes named in the text taken back are named again, in the order of the
            // text that replaces it.
            self.classes.truncate(classes);
            self.class_positions.truncate(classes);
        }
        self.open_memo();
        self.key("$dict");
        self.out.push('[');
        for i in 0..count {
            self.out.push_str(if i > 0 { ",[" } else { "[" });
            self.value(r, depth + 1)?;
            self.out.push(',');
            self.value(r, depth + 1)?;
            self.out.push(']');
        }
        self.out.push_str("]}");
        Ok(())
    }

    fn value(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<(), TextError> {
        if depth > r.limits.max_depth {
            return Err(DecodeError::TooDeep { limit: r.limits.max_depth }.into());
        }
        let offset = r.position();
        match r.u8()? {
            tag::NONE => self.out.push_str("null"),
            tag::FALSE => self.out.push_str("false"),
            tag::TRUE => self.out.push_str("true"),
            tag::INT => push_i64(&mut self.out, r.zigzag()?),
            tag::BIGINT => {
                let bytes = r.length_prefixed()?;
                if bytes.len() > r.limits.max_bigint_bytes {
                    return Err(DecodeError::OutOfRange { offset, what: "integer size" }.into());
                }
                self.out.push_str(&bigint::to_decimal(bytes));
            }
            tag::FLOAT => self.float(r.f64()?),
            tag::COMPLEX => {
                self.out.push_str("{\"$complex\":[");
                self.float(r.f64()?);
                self.out.push(',');
                self.float(r.f64()?);
                self.out.push_str("]}");
            }
            tag::STR => string(&mut self.out, r.str()?),
            tag::STR_SURROGATES => self.base64("$surrogates", r.length_prefixed()?),
            tag::BYTES => self.base64("$bytes", r.length_prefixed()?),
            tag::BYTEARRAY => {
                self.open_memo();
                self.key("$bytearray");
                self.out.push('"');
                base64::encode(r.length_prefixed()?, &mut self.out);
                self.out.push_str("\"}");
            }
            tag::LIST => {
                if self.in_base {
                    self.in_base = false;
                    self.items(r, depth)?;
                } else if self.targets.contains(&self.slot) {
                    self.tagged_items("$list", r, depth)?;
                } else {
                    self.slot += 1;
                    self.items(r, depth)?;
                }
            }
            tag::TUPLE => self.tagged_items("$tuple", r, depth)?,
            tag::SET => self.tagged_items("$set", r, depth)?,
            tag::FROZENSET => self.tagged_items("$frozenset", r, depth)?,
            tag::DICT => self.dict(r, depth, offset)?,
            tag::DATETIME => {
                let flags = r.tz_flags()?;
                let micros = r.zigzag()?;
                if !(MIN_DAY..=MAX_DAY).contains(&micros.div_euclid(MICROS_PER_DAY)) {
                    return Err(DecodeError::OutOfRange { offset, what: "datetime" }.into());
                }
                self.clock_value("$datetime", r, flags, offset, |out| clock::write_datetime(micros, out))?;
            }
            tag::DATE => {
                let days = r.zigzag()?;
                if !(MIN_DAY..=MAX_DAY).contains(&days) {
                    return Err(DecodeError::OutOfRange { offset, what: "date" }.into());
                }
                let mut text = String::new();
                clock::write_date(days, &mut text);
                self.tagged_str("$date", &text);
            }
            tag::TIME => {
                let flags = r.tz_flags()?;
                let micros = r.varint()?;
                if micros >= MICROS_PER_DAY as u64 {
                    return Err(DecodeError::OutOfRange { offset, what: "time of day" }.into());
                }
                self.clock_value("$time", r, flags, offset, |out| clock::write_clock(micros, out))?;
            }
            tag::TIMEDELTA => {
                let (days, seconds, micros) = (r.zigzag()?, r.varint()?, r.varint()?);
                if !clock::timedelta_in_range(days, seconds, micros) {
                    return Err(DecodeError::OutOfRange { offset, what: "timedelta" }.into());
                }
                let _ = write!(self.out, "{{\"$timedelta\":[{days},{seconds},{micros}]}}");
            }
            tag::DECIMAL => {
                let text = r.str()?;
                if !is_decimal_text(text) {
                    return Err(DecodeError::OutOfRange { offset, what: "decimal" }.into());
                }
                self.tagged_str("$decimal", text);
            }
            tag::UUID => {
                let mut text = String::new();
                clock::write_uuid(&r.array::<16>()?, &mut text);
                self.tagged_str("$uuid", &text);
            }
            tag::ENUM => {
                let descriptor = r.u32_varint()?;
                let type_name = &self.entry(descriptor)?.type_name;
                self.out.push_str("{\"$enum\":");
                self.class_name(type_name);
                self.out.push_str(",\"$member\":");
                string(&mut self.out, r.str()?);
                self.out.push('}');
            }
            tag::OBJECT => {
                let entry = self.entry(r.u32_varint()?)?;
                let (persistent, type_name, names) = (entry.persistent, &entry.type_name, &entry.fields);
                self.open_memo();
                self.key(if persistent { "$persistent" } else { "$type" });
                self.class_name(type_name);
                self.fields(r, names, depth + 1)?;
                self.out.push('}');
            }
            tag::SUBCLASS => {
                let entry = self.entry(r.u32_varint()?)?;
                let (type_name, names) = (&entry.type_name, &entry.fields);
                self.open_memo();
                self.key("$subclass");
                self.class_name(type_name);
                self.out.push_str(",\"$base\":");
                let base_offset = r.position();
                // A BYTEARRAY base: text documents carry subclasses of bytearray (section 3 of
                // docs/TEXT_FORMATS.md).
                if !matches!(r.peek_u8()?, tag::LIST | tag::TUPLE | tag::SET | tag::FROZENSET | tag::DICT | tag::BYTEARRAY) {
                    return Err(DecodeError::UnknownTag { offset: base_offset, tag: r.peek_u8()? }.into());
                }
                self.in_base = true;
                self.value(r, depth)?;
                self.fields(r, names, depth + 1)?;
                self.out.push('}');
            }
            tag::BACKREF => {
                let index = r.varint()?;
                if index >= self.slot {
                    return Err(DecodeError::BadBackRef { offset, index }.into());
                }
                self.found.insert(index);
                self.out.push_str("{\"$ref\":");
                push_u64(&mut self.out, index);
                self.out.push('}');
            }
            tag::REF => return Err(mapping("a stream holds no references to stored objects")),
            other => return Err(DecodeError::UnknownTag { offset, tag: other }.into()),
        }
        Ok(())
    }

    fn base64(&mut self, tag: &str, bytes: &[u8]) {
        self.out.push('{');
        self.key(tag);
        self.out.push('"');
        base64::encode(bytes, &mut self.out);
        self.out.push_str("\"}");
    }
}

// The pieces below are shared with the binding's direct writer (crates/copal-py/src/json_writer.rs),
// so that both write every value with the same bytes.

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

/// Appends `piece`. Most pieces of a document are short (numbers, field names, short strings),
/// and for those a few moves of fixed sizes cost much less than the call to memcpy that
/// `push_str` makes for a length known only at run time (a sixth of the time of writing a list
/// of ints went to that call).
#[inline]
pub fn push_piece<O: TextOut + ?Sized>(out: &mut O, piece: &str) {
    // SAFETY: `piece` is UTF-8.
    unsafe { append(out, piece.as_bytes()) }
}

/// The bytes a `Piece` appends by one fixed-size move.
const PIECE_MOVE: usize = 32;

/// Text a writer appends again and again (a field name with its quotes and colon, the opening
/// of an object of one class), kept with room after it: up to `PIECE_MOVE` bytes it is
/// appended by one move of `PIECE_MOVE` bytes, of which the text takes its length, where
/// `push_piece` first dispatches on the length (a call and a few branches per piece: a
/// seventh of writing seed 001). Not for the JSON writer's dict-key cache (json_keys.rs): its
/// 256 slots, twice as large with a `Piece` each, made writing plain dicts 10-17% slower.
pub struct Piece {
    /// The text, then zeros up to `PIECE_MOVE` bytes (unused for a longer text).
    padded: [u8; PIECE_MOVE],
    text: String,
}

impl Piece {
    pub fn new(text: String) -> Self {
        let mut padded = [0; PIECE_MOVE];
        if let Some(start) = padded.get_mut(..text.len()) {
            start.copy_from_slice(text.as_bytes());
        }
        Piece { padded, text }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Appends the text to `out`.
    #[inline(always)]
    pub fn write<O: TextOut + ?Sized>(&self, out: &mut O) {
        let n = self.text.len();
        // Without the room for the whole move, the text alone: making room for more than the
        // text would grow an output sized for the document it is (see json_writer.rs's
        // `LAST_LENGTH`) at its last piece, doubling it.
        if n > PIECE_MOVE || out.room() < PIECE_MOVE {
            out.push_str(&self.text);
            return;
        }
        // SAFETY: there is room for the `PIECE_MOVE` bytes stored; the first `n` are the text
        // (UTF-8), which `advance` takes; the zeros after it are not taken.
        unsafe {
            std::ptr::copy_nonoverlapping(self.padded.as_ptr(), out.end(), PIECE_MOVE);
            out.advance(n);
        }
    }
}

/// `push_piece` of bytes.
///
/// # Safety
/// `bytes` must be UTF-8 (the caller's bytes are ASCII, or a whole `str`).
#[inline]
unsafe fn append<O: TextOut + ?Sized>(out: &mut O, bytes: &[u8]) {
    let n = bytes.len();
    if n > 32 {
        // SAFETY: the caller guarantees UTF-8.
        out.push_str(unsafe { std::str::from_utf8_unchecked(bytes) });
        return;
    }
    out.reserve(n);
    // SAFETY: the bytes appended are UTF-8 (the caller's guarantee), so the text stays UTF-8;
    // `n` bytes of spare capacity were reserved, and each move below reads within `bytes` and
    // writes within those `n` bytes (the pairs of moves overlap when `n` is not their size).
    unsafe {
        let (src, dst) = (bytes.as_ptr(), out.end());
        match n {
            0 => {}
            1..=3 => {
                *dst = *src;
                *dst.add(n / 2) = *src.add(n / 2);
                *dst.add(n - 1) = *src.add(n - 1);
            }
            4..=7 => {
                std::ptr::copy_nonoverlapping(src, dst, 4);
                std::ptr::copy_nonoverlapping(src.add(n - 4), dst.add(n - 4), 4);
            }
            8..=16 => {
                std::ptr::copy_nonoverlapping(src, dst, 8);
                std::ptr::copy_nonoverlapping(src.add(n - 8), dst.add(n - 8), 8);
            }
            _ => {
                std::ptr::copy_nonoverlapping(src, dst, 16);
                std::ptr::copy_nonoverlapping(src.add(n - 16), dst.add(n - 16), 16);
            }
        }
        out.advance(n);
    }
}

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

/// An integer in decimal.
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
        let text = if f.is_nan() { "nan" } else if f > 0.0 { "inf" } else { "-inf" };
        out.push_str("{\"$float\":\"");
        out.push_str(text);
        out.push_str("\"}");
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

/// A dict key or field name and its `:`, with one more `$` in front of a name that starts with
/// `$`, so that it cannot be taken for a tag.
pub fn escaped_key<O: TextOut + ?Sized>(out: &mut O, key: &str) {
    quoted(out, if key.starts_with('$') { "\"$" } else { "\"" }, key, "\":");
}

/// A JSON string.
#[inline]
pub fn string<O: TextOut + ?Sized>(out: &mut O, s: &str) {
    quoted(out, "\"", s, "\"");
}

/// `opening`, the escaped `s` and `closing`. Room for all three is made at once, so that a
/// string with nothing to escape (most of them) is one reservation and a copy. Inlined, so that
/// the few bytes of `opening` and `closing` are stored as constants, not copied by a call.
#[inline(always)]
fn quoted<O: TextOut + ?Sized>(out: &mut O, opening: &str, s: &str, closing: &str) {
    let bytes = s.as_bytes();
    let (n, open, close) = (bytes.len(), opening.len(), closing.len());
    out.reserve(open + n + close);
    // SAFETY: `open + n + close` bytes were reserved: the opening, then at most `n` bytes that
    // `copy_plain` stores, then the closing only when all `n` were plain. The bytes kept are
    // whole strs or end before an ASCII byte, so the text stays UTF-8.
    let plain = unsafe {
        let dst = out.end();
        store_short(opening, dst);
        let plain = copy_plain(bytes, dst.add(open));
        if plain == n {
            store_short(closing, dst.add(open + n));
            out.advance(open + n + close);
            return;
        }
        out.advance(open + plain);
        plain
    };
    escape_into(out, &s[plain..]);
    out.push_str(closing);
}

/// Stores the bytes of `piece`, a few at most, one by one: a copy of a length not known when
/// compiling is a call to memcpy.
///
/// # Safety
/// `dst` must be valid for `piece.len()` writes.
#[inline(always)]
unsafe fn store_short(piece: &str, dst: *mut u8) {
    for (i, &byte) in piece.as_bytes().iter().enumerate() {
        // SAFETY: the caller's guarantee.
        unsafe { *dst.add(i) = byte };
    }
}

/// JSON string contents: `"`, `\` and control characters escaped, everything else as UTF-8.
fn escape_into<O: TextOut + ?Sized>(out: &mut O, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    loop {
        start += append_plain(out, &bytes[start..]);
        let Some(&byte) = bytes.get(start) else { return };
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b => {
                out.push_fmt(format_args!("\\u{b:04x}"));
            }
        }
        start += 1;
    }
}

/// Whether JSON strings escape `byte`.
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// The high bit of each byte of `word` that JSON strings escape: below 0x20, or equal to `"` or
/// `\` (a byte is equal when the xor makes it zero). Borrows can only mark bytes above one
/// truly marked, so the lowest mark is exact, and a word without a byte to escape has none.
fn escape_marks(word: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES * 0x80;
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    below(word, 0x20) | below(word ^ (ONES * u64::from(b'"')), 1) | below(word ^ (ONES * u64::from(b'\\')), 1)
}

/// Appends the longest start of `bytes` that needs no escape, and returns its length.
fn append_plain<O: TextOut + ?Sized>(out: &mut O, bytes: &[u8]) -> usize {
    out.reserve(bytes.len());
    // SAFETY: `bytes.len()` bytes were reserved, and the bytes kept end before an ASCII byte or
    // at the end of `bytes`, a whole str, so the text stays UTF-8.
    unsafe {
        let plain = copy_plain(bytes, out.end());
        out.advance(plain);
        plain
    }
}

/// Stores the bytes of `bytes` at `dst` up to the first one that needs an escape, and returns
/// how many that is. Eight bytes at a time, each word stored as soon as it is tested: most
/// strings need no escape, and testing them first and copying them after read each byte twice
/// (and called memcpy for the longer ones). A word whose test fails is stored whole; the bytes
/// past the returned count are scratch. Strings of four to seven bytes are tested as one word
/// made of their first and last four (which overlap).
///
/// # Safety
/// `dst` must be valid for `bytes.len()` writes.
#[inline]
unsafe fn copy_plain(bytes: &[u8], dst: *mut u8) -> usize {
    let n = bytes.len();
    let src = bytes.as_ptr();
    // SAFETY: every read is within `bytes` and every store within the `n` bytes at `dst`: words
    // at offsets `i` with `i + 8 <= n` (the last one at `n - 8`), halves at 0 and `n - 4` when
    // `n >= 4`, single bytes below `n`.
    unsafe {
        if n < 8 {
            if n >= 4 {
                let (low, high) = (std::ptr::read_unaligned(src.cast::<u32>()), std::ptr::read_unaligned(src.add(n - 4).cast::<u32>()));
                if escape_marks(u64::from(low) | u64::from(high) << 32) == 0 {
                    std::ptr::write_unaligned(dst.cast::<u32>(), low);
                    std::ptr::write_unaligned(dst.add(n - 4).cast::<u32>(), high);
                    return n;
                }
            }
            for (i, &byte) in bytes.iter().enumerate() {
                if needs_escape(byte) {
                    return i;
                }
                *dst.add(i) = byte;
            }
            return n;
        }
        // Each word is stored, then tested; returns how many of its bytes are kept.
        let copy_word = |i: usize| {
            let word = std::ptr::read_unaligned(src.add(i).cast::<[u8; 8]>());
            std::ptr::write_unaligned(dst.add(i).cast::<[u8; 8]>(), word);
            escape_marks(u64::from_le_bytes(word)).trailing_zeros() as usize / 8
        };
        let mut i = 0;
        while i + 8 <= n {
            let kept = copy_word(i);
            if kept < 8 {
                return i + kept;
            }
            i += 8;
        }
        if i < n {
            // The last eight bytes, overlapping the ones copied already (which have no mark).
            return n - 8 + copy_word(n - 8);
        }
        n
    }
}

// -- reading ------------------------------------------------------------------------------------

/// A parsed JSON value; numbers keep their text so that integers of any size survive.
#[derive(Debug)]
pub(super) enum Json<'a> {
    Null,
    Bool(bool),
    Number(&'a str),
    Str(String),
    Array(Vec<Json<'a>>),
    Object(Vec<(String, Json<'a>)>),
}

pub(super) struct Parser<'a> {
    pub(super) text: &'a str,
    pub(super) at: usize,
}

impl<'a> Parser<'a> {
    fn fail(&self, message: &str) -> TextError {
        TextError::Syntax { offset: self.at, message: message.to_owned() }
    }

    pub(super) fn ws(&mut self) {
        let bytes = self.text.as_bytes();
        while self.at < bytes.len() && matches!(bytes[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    pub(super) fn expect(&mut self, c: u8) -> Result<(), TextError> {
        self.ws();
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.fail(&format!("expected '{}'", c as char)))
        }
    }

    pub(super) fn value(&mut self, depth: usize) -> Result<Json<'a>, TextError> {
        if depth > MAX_JSON_DEPTH {
            return Err(self.fail("nested too deeply"));
        }
        self.ws();
        match self.peek() {
            Some(b'{') => {
                self.at += 1;
                let mut members = Vec::new();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.at += 1;
                    return Ok(Json::Object(members));
                }
                loop {
                    self.ws();
                    let key = self.string()?;
                    self.expect(b':')?;
                    members.push((key, self.value(depth + 1)?));
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        Some(b'}') => {
                            self.at += 1;
                            if has_duplicate_key(&members) {
                                return Err(self.fail("a key appears twice in one object"));
                            }
                            return Ok(Json::Object(members));
                        }
                        _ => return Err(self.fail("expected ',' or '}'")),
                    }
                }
            }
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek() == Some(b']') {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(self.fail("expected ',' or ']'")),
                    }
                }
            }
            Some(b'"') => Ok(Json::Str(self.string()?)),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.fail("expected a value")),
        }
    }

    pub(super) fn literal(&mut self, word: &str, value: Json<'a>) -> Result<Json<'a>, TextError> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.fail("expected a value"))
        }
    }

    /// A number in RFC 8259 syntax, kept as text.
    pub(super) fn number(&mut self) -> Result<Json<'a>, TextError> {
        match self.number_text() {
            Some((text, _)) => Ok(Json::Number(text)),
            None => Err(self.fail("malformed number")),
        }
    }

    /// The text of a number in RFC 8259 syntax and whether it has a fraction or an exponent;
    /// None, the parser where it was, if no number starts here.
    pub(super) fn number_text(&mut self) -> Option<(&'a str, bool)> {
        let start = self.at;
        let bytes = self.text.as_bytes();
        let digits = |at: &mut usize| {
            let from = *at;
            while *at < bytes.len() && bytes[*at].is_ascii_digit() {
                *at += 1;
            }
            *at - from
        };
        let mut at = self.at;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        let int_start = at;
        let n = digits(&mut at);
        if n == 0 || (n > 1 && bytes[int_start] == b'0') {
            return None;
        }
        let mut fractional = false;
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            if digits(&mut at) == 0 {
                return None;
            }
            fractional = true;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            if digits(&mut at) == 0 {
                return None;
            }
            fractional = true;
        }
        self.at = at;
        Some((&self.text[start..at], fractional))
    }

    /// A string without escapes, borrowed from the text; None, the parser where it was, for any
    /// other (`string_text` reads them all). The one-pass reader's strings: small enough a
    /// result to come back in registers.
    pub(super) fn plain_string(&mut self) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        if bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at + 1;
        let mut at = start;
        // Eight bytes at a time up to the first that ends the string or escapes (the lowest
        // mark is exact), then byte by byte from it, or over the last bytes.
        while let Some(word) = bytes.get(at..at + 8) {
            let marks = escape_marks(u64::from_le_bytes(word.try_into().expect("eight bytes")));
            if marks != 0 {
                at += (marks.trailing_zeros() / 8) as usize;
                break;
            }
            at += 8;
        }
        loop {
            match *bytes.get(at)? {
                b'"' => {
                    self.at = at + 1;
                    return Some(&self.text[start..at]);
                }
                b'\\' | 0x00..=0x1F => return None,
                _ => at += 1,
            }
        }
    }

    fn string(&mut self) -> Result<String, TextError> {
        self.string_text().map(Cow::into_owned)
    }

    /// A string, borrowed from the text unless it holds escapes.
    pub(super) fn string_text(&mut self) -> Result<Cow<'a, str>, TextError> {
        if self.peek() != Some(b'"') {
            return Err(self.fail("expected a string"));
        }
        self.at += 1;
        let text = self.text;
        let bytes = text.as_bytes();
        let start = self.at;
        loop {
            let Some(&b) = bytes.get(self.at) else {
                return Err(self.fail("unterminated string"));
            };
            match b {
                b'"' => {
                    self.at += 1;
                    return Ok(Cow::Borrowed(&text[start..self.at - 1]));
                }
                b'\\' => break,
                0x00..=0x1F => return Err(self.fail("control character in a string")),
                _ => self.at += 1,
            }
        }
        let mut out = String::from(&text[start..self.at]);
        let mut start = self.at;
        loop {
            let Some(&b) = bytes.get(self.at) else {
                return Err(self.fail("unterminated string"));
            };
            match b {
                b'"' => {
                    out.push_str(&text[start..self.at]);
                    self.at += 1;
                    return Ok(Cow::Owned(out));
                }
                b'\\' => {
                    out.push_str(&text[start..self.at]);
                    self.at += 1;
                    self.escape(&mut out)?;
                    start = self.at;
                }
                0x00..=0x1F => return Err(self.fail("control character in a string")),
                _ => self.at += 1,
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), TextError> {
        let c = self.peek().ok_or_else(|| self.fail("unterminated string"))?;
        self.at += 1;
        let simple = match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                let code = if (0xD800..0xDC00).contains(&first) && self.text[self.at..].starts_with("\\u") {
                    self.at += 2;
                    let second = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&second) {
                        return Err(self.fail("unpaired surrogate escape (copal writes lone surrogates as $surrogates)"));
                    }
                    0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                } else {
                    first
                };
                char::from_u32(code).ok_or_else(|| self.fail("unpaired surrogate escape (copal writes lone surrogates as $surrogates)"))?
            }
            _ => return Err(self.fail("unknown escape")),
        };
        out.push(simple);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, TextError> {
        let digits = self.text.get(self.at..self.at + 4).ok_or_else(|| self.fail("short \\u escape"))?;
        let value = u32::from_str_radix(digits, 16).map_err(|_| self.fail("bad \\u escape"))?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.fail("bad \\u escape"));
        }
        self.at += 4;
        Ok(value)
    }
}

/// Whether two members of an object have the same key: what they mean would depend on the
/// reader (RFC 8259 section 4), so copal refuses them.
fn has_duplicate_key(members: &[(String, Json<'_>)]) -> bool {
    super::has_duplicate(members, |(key, _)| key)
}


/// The stream body of a JSON document.
pub fn from_json(text: &str) -> Result<Body, TextError> {
    let mut parser = Parser { text, at: 0 };
    let doc = parser.value(0)?;
    parser.ws();
    if parser.at != text.len() {
        return Err(parser.fail("text after the document"));
    }
    let Json::Object(members) = doc else {
        return Err(mapping("the document is not a JSON object {\"$copal\": 1, \"value\": ...}"));
    };
    let mut version = None;
    let mut value = None;
    for (key, member) in members {
        match (key.as_str(), member) {
            ("$copal", Json::Number(n)) => version = Some(n),
            ("value", v) => value = Some(v),
            (other, _) => return Err(mapping(format!("unexpected member {other:?} in the document"))),
        }
    }
    let version = match version {
        Some(v) => match v.parse::<u64>() {
            Ok(known @ 1..=JSON_VERSION) => known,
            _ => return Err(mapping(format!("version {v} is not supported by this copal (reads versions 1 to {JSON_VERSION})"))),
        },
        None => return Err(mapping("the document has no \"$copal\" version")),
    };
    let value = value.ok_or_else(|| mapping("the document has no \"value\""))?;
    let mut build = Build::new(version);
    let value = build.value(&value)?;
    Ok(build.tree.finish(value))
}

/// Builds the value tree (and its descriptor table) of a parsed document.
pub(super) struct Build {
    pub(super) tree: TreeBuilder,
    /// The class names met so far, by number (docs/TEXT_FORMATS.md section 2.1).
    pub(super) classes: ClassNumbers,
    /// Whether the document's version names classes by number (version 2 on).
    numbered_classes: bool,
}

/// Tags that make a JSON object something other than a dict (docs/TEXT_FORMATS.md).
const KIND_TAGS: [&str; 21] = [
    "$ref", "$list", "$tuple", "$set", "$frozenset", "$dict", "$type", "$persistent", "$subclass", "$enum",
    "$bytes", "$bytearray", "$surrogates", "$float", "$complex", "$datetime", "$date", "$time", "$timedelta",
    "$decimal", "$uuid",
];

pub(super) fn is_tag(key: &str) -> bool {
    key.starts_with('$') && !key.starts_with("$$")
}

/// A dict key or field name as written, without the escaping `$`.
fn unescape(key: &str) -> String {
    unescaped(key).to_owned()
}

pub(super) fn unescaped(key: &str) -> &str {
    if key.starts_with("$$") { &key[1..] } else { key }
}

impl Build {
    pub(super) fn new(version: u64) -> Build {
        Build { tree: TreeBuilder::default(), classes: ClassNumbers::default(), numbered_classes: version >= 2 }
    }

    fn take_slot(&mut self, id: Option<&Json<'_>>) -> Result<(), TextError> {
        let id = id.map(|id| as_u64(id).ok_or_else(|| mapping("\"$id\" must be a non-negative integer"))).transpose()?;
        self.tree.take_slot(id)
    }

    /// The class named by `json`: a name, numbered here if it is new, or the number of a name
    /// met before (docs/TEXT_FORMATS.md section 2.1).
    fn class_name(&mut self, json: &Json<'_>, kind: &str) -> Result<String, TextError> {
        let number = match json {
            Json::Str(name) => self.classes.number(name),
            Json::Number(n) => self.class_numbered(n, kind)?,
            _ => return Err(class_needed(kind)),
        };
        Ok(self.classes.name(number).to_owned())
    }

    /// The class that the number `n` (its text) stands for, in version 2 on.
    pub(super) fn class_numbered(&self, n: &str, kind: &str) -> Result<usize, TextError> {
        if !self.numbered_classes {
            return Err(class_needed(kind));
        }
        match n.parse::<usize>() {
            Ok(number) if number < self.classes.len() => Ok(number),
            _ => Err(mapping(format!("{kind} {n} is not the number of a class named earlier in the document"))),
        }
    }

    fn items(&mut self, json: &Json<'_>, what: &str) -> Result<Vec<Value>, TextError> {
        match json {
            Json::Array(items) => items.iter().map(|j| self.value(j)).collect(),
            _ => Err(mapping(format!("{what} must be an array"))),
        }
    }

    pub(super) fn value(&mut self, json: &Json<'_>) -> Result<Value, TextError> {
        Ok(match json {
            Json::Null => Value::None,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => number(n)?,
            Json::Str(s) => Value::Str(s.clone()),
            Json::Array(_) => {
                self.take_slot(None)?;
                Value::List(self.items(json, "a list")?)
            }
            Json::Object(members) => self.object(members)?,
        })
    }

    fn object(&mut self, members: &[(String, Json<'_>)]) -> Result<Value, TextError> {
        let get = |name: &str| members.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        let kind = members.iter().map(|(k, _)| k.as_str()).find(|k| KIND_TAGS.contains(k));
        let id = get("$id");
        let allowed: &[&str] = match kind {
            Some("$datetime" | "$time") => &["$zone", "$fold"],
            Some("$subclass") => &["$base", "$id"],
            Some("$enum") => &["$member"],
            Some("$ref" | "$bytes" | "$surrogates" | "$float" | "$complex" | "$date" | "$timedelta" | "$decimal" | "$uuid") => &[],
            _ => &["$id"],
        };
        let fields_allowed = matches!(kind, None | Some("$type" | "$persistent" | "$subclass"));
        for (key, _) in members {
            let is_kind = Some(key.as_str()) == kind;
            if is_tag(key) && !is_kind && !allowed.contains(&key.as_str()) {
                return Err(mapping(format!("unexpected {key:?} in {}", kind.unwrap_or("a dict"))));
            }
            if !is_tag(key) && !fields_allowed {
                return Err(mapping(format!("unexpected {key:?} in {}", kind.unwrap_or("a dict"))));
            }
        }
        let Some(kind) = kind else {
            self.take_slot(id)?;
            let pairs = members
                .iter()
                .filter(|(k, _)| !is_tag(k))
                .map(|(k, v)| Ok((Value::Str(unescape(k)), self.value(v)?)))
                .collect::<Result<_, TextError>>()?;
            return Ok(Value::Dict(pairs));
        };
        let arg = get(kind).expect("the kind is a member");
        let text = |what: &str| match arg {
            Json::Str(s) => Ok(s.as_str()),
            _ => Err(mapping(format!("{kind} needs a string ({what})"))),
        };
        Ok(match kind {
            "$ref" => {
                let id = as_u64(arg).ok_or_else(|| mapping("\"$ref\" must be a non-negative integer"))?;
                self.tree.reference(id)?
            }
            "$list" | "$tuple" | "$set" | "$frozenset" => {
                self.take_slot(id)?;
                let items = self.items(arg, kind)?;
                match kind {
                    "$list" => Value::List(items),
                    "$tuple" => Value::Tuple(items),
                    "$set" => Value::Set(items),
                    _ => Value::FrozenSet(items),
                }
            }
            "$dict" => {
                self.take_slot(id)?;
                let Json::Array(pairs) = arg else { return Err(mapping("$dict must be an array of [key, value] pairs")) };
                let pairs = pairs
                    .iter()
                    .map(|pair| match pair {
                        Json::Array(kv) if kv.len() == 2 => Ok((self.value(&kv[0])?, self.value(&kv[1])?)),
                        _ => Err(mapping("$dict must be an array of [key, value] pairs")),
                    })
                    .collect::<Result<_, TextError>>()?;
                Value::Dict(pairs)
            }
            "$type" | "$persistent" | "$subclass" => {
                let type_name = self.class_name(arg, kind)?;
                self.take_slot(id)?;
                let names: Vec<String> = members.iter().filter(|(k, _)| !is_tag(k)).map(|(k, _)| unescape(k)).collect();
                let descriptor = self.tree.descriptor(kind == "$persistent", &type_name, names);
                let base = match kind {
                    "$subclass" => {
                        let base = get("$base").ok_or_else(|| mapping("$subclass needs \"$base\""))?;
                        self.tree.start_base();
                        let base = self.value(base)?;
                        Some(self.tree.end_base(base)?)
                    }
                    _ => None,
                };
                let fields = members.iter().filter(|(k, _)| !is_tag(k)).map(|(_, v)| self.value(v)).collect::<Result<_, _>>()?;
                match base {
                    Some(base) => Value::Subclass { descriptor, base: Box::new(base), fields },
                    None => Value::Object { descriptor, fields },
                }
            }
            "$enum" => {
                let type_name = self.class_name(arg, kind)?;
                let Some(Json::Str(member)) = get("$member") else { return Err(mapping("$enum needs \"$member\", a string")) };
                Value::Enum { descriptor: self.tree.descriptor(false, &type_name, Vec::new()), member: member.clone() }
            }
            "$bytes" | "$bytearray" | "$surrogates" => {
                if kind == "$bytearray" {
                    self.take_slot(id)?;
                }
                let bytes = base64::decode(text("base64")?).ok_or_else(|| mapping(format!("{kind} is not padded base64")))?;
                if kind == "$surrogates" && !super::is_surrogates_text(&bytes) {
                    return Err(mapping("$surrogates is not the base64 of generalized UTF-8"));
                }
                match kind {
                    "$bytes" => Value::Bytes(bytes),
                    "$bytearray" => Value::ByteArray(bytes),
                    _ => Value::StrSurrogates(bytes),
                }
            }
            "$float" => Value::Float(special_float(text("nan, inf or -inf")?)?),
            "$complex" => match arg {
                Json::Array(parts) if parts.len() == 2 => Value::Complex(float_of(&parts[0])?, float_of(&parts[1])?),
                _ => return Err(mapping("$complex must be [real, imaginary]")),
            },
            "$datetime" | "$time" => {
                let fold = match get("$fold") {
                    None => false,
                    Some(f) => match as_u64(f) {
                        Some(0) => false,
                        Some(1) => true,
                        _ => return Err(mapping("\"$fold\" must be 0 or 1")),
                    },
                };
                let zone = match get("$zone") {
                    None => None,
                    Some(Json::Str(name)) => Some(name.as_str()),
                    Some(_) => return Err(mapping("\"$zone\" must be a string")),
                };
                let bad = || mapping(format!("{kind} is not an ISO 8601 {}", &kind[1..]));
                let (micros, offset) = if kind == "$datetime" {
                    let (m, o) = clock::parse_datetime(text("ISO 8601")?).ok_or_else(bad)?;
                    (Ok(m), o)
                } else {
                    let (m, o) = clock::parse_time(text("ISO 8601")?).ok_or_else(bad)?;
                    (Err(m), o)
                };
                let tz = zone_of(offset, zone, kind)?;
                match micros {
                    Ok(micros) => Value::DateTime { micros, tz, fold },
                    Err(micros) => Value::Time { micros, tz, fold },
                }
            }
            "$date" => Value::Date { days: clock::parse_date(text("ISO 8601")?).ok_or_else(|| mapping("$date is not an ISO 8601 date"))? },
            "$timedelta" => match arg {
                Json::Array(parts) if parts.len() == 3 => {
                    let days = match &parts[0] {
                        Json::Number(n) => n.parse::<i64>().ok(),
                        _ => None,
                    };
                    match (days, as_u64(&parts[1]), as_u64(&parts[2])) {
                        (Some(days), Some(seconds), Some(micros)) if clock::timedelta_in_range(days, seconds, micros) => {
                            Value::TimeDelta { days, seconds, micros }
                        }
                        _ => return Err(mapping("$timedelta must be [days, seconds, microseconds], normalized as Python's")),
                    }
                }
                _ => return Err(mapping("$timedelta must be [days, seconds, microseconds]")),
            },
            "$decimal" => match text("decimal text")? {
                decimal if is_decimal_text(decimal) => Value::Decimal(decimal.to_owned()),
                _ => return Err(mapping("$decimal is not decimal text (what str(Decimal) writes)")),
            },
            "$uuid" => Value::Uuid(clock::parse_uuid(text("8-4-4-4-12 hex")?).ok_or_else(|| mapping("$uuid is not 8-4-4-4-12 hex"))?),
            _ => unreachable!("every kind tag is handled"),
        })
    }
}

fn class_needed(kind: &str) -> TextError {
    mapping(format!("{kind} needs a class name, or in version 2 the number of one named earlier"))
}

fn as_u64(json: &Json<'_>) -> Option<u64> {
    match json {
        Json::Number(n) => n.parse().ok(),
        _ => None,
    }
}

pub(super) fn number(text: &str) -> Result<Value, TextError> {
    if text.contains(['.', 'e', 'E']) {
        return text.parse().map(Value::Float).map_err(|_| mapping(format!("bad number {text}")));
    }
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Value::Int(i));
    }
    bigint::from_decimal(text).map(Value::BigInt).ok_or_else(|| mapping(format!("bad number {text}")))
}

fn special_float(text: &str) -> Result<f64, TextError> {
    match text {
        "nan" => Ok(f64::NAN),
        "inf" => Ok(f64::INFINITY),
        "-inf" => Ok(f64::NEG_INFINITY),
        _ => Err(mapping("$float must be \"nan\", \"inf\" or \"-inf\"")),
    }
}

fn float_of(json: &Json<'_>) -> Result<f64, TextError> {
    match json {
        Json::Number(n) => n.parse().map_err(|_| mapping(format!("bad number {n}"))),
        Json::Object(members) if members.len() == 1 && members[0].0 == "$float" => match &members[0].1 {
            Json::Str(s) => special_float(s),
            _ => Err(mapping("$float must be a string")),
        },
        _ => Err(mapping("a complex number's parts must be numbers")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(value: Value, table: Vec<TableEntry>) -> String {
        let body = Body { table, value };
        let bytes = body.encode();
        assert_eq!(Body::decode(&bytes).unwrap(), body);
        let text = to_json(&bytes).unwrap();
        assert_eq!(from_json(&text).unwrap(), body, "{text}");
        // The one-pass reader may number descriptors in another order: the graph is the same
        // when the document written back is.
        let direct = super::super::json_body::transcode(&text).expect("copal's own documents are read in one pass");
        assert_eq!(to_json(&direct).unwrap(), text);
        text
    }

    /// `float` writes what Debug writes, the text it had before it used zmij: over random bit
    /// patterns (every magnitude), random magnitudes around the bounds of `PLAIN_FLOATS`,
    /// decimal fractions, whose shortest digits are short, and values in [2^43, 2^51), where
    /// ties between two shortest texts are frequent.
    #[test]
    fn floats_are_written_as_debug_writes_them() {
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move || {
            // xorshift64*: a fixed sequence, so that a failure is reproducible.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut values = vec![0.0, -0.0, 1e-4, -1e-4, 1e16, 1e15, 9_999_999_999_999_998.0, 1_825_382_308_105_347.2, 0.1, 0.375, 5e-324, f64::MAX, f64::MIN_POSITIVE];
        for _ in 0..200_000 {
            let bits = next();
            values.push(f64::from_bits(bits));
            // Uniform in [1e-6, 1e18): both sides of both bounds.
            values.push(10f64.powf(-6.0 + 24.0 * (bits >> 11) as f64 / (1u64 << 53) as f64));
            values.push((bits % 1_000_000_007) as f64 / 10f64.powi((bits % 20) as i32));
            // Just below 1e16, where ulps are fractions of a unit and ties are frequent.
            values.push(f64::from_bits((0x42A + bits % 8) << 52 | bits & ((1 << 52) - 1)));
        }
        for value in values.into_iter().filter(|v| v.is_finite()) {
            let mut out = String::new();
            float(&mut out, value);
            assert_eq!(out, format!("{value:?}"), "bits {:#x}", value.to_bits());
        }
    }

    #[test]
    fn pieces_of_every_length_are_appended_whole() {
        let text = "0123456789abcdefghijé😀";
        for end in 0..=text.len() {
            let Some(piece) = text.get(..end) else { continue };
            for before in ["", "x", "{\"$copal\":"] {
                let mut out = String::from(before);
                push_piece(&mut out, piece);
                assert_eq!(out, format!("{before}{piece}"));
            }
        }
    }

    #[test]
    fn kept_pieces_of_every_length_are_appended_whole() {
        let text = ",\"0123456789abcdefghijklmnopqrstuvwxyzé😀\":";
        for end in 0..=text.len() {
            let Some(piece) = text.get(..end) else { continue };
            let kept = Piece::new(piece.to_owned());
            assert_eq!(kept.as_str(), piece);
            for before in ["", "x", "{\"$copal\":"] {
                let mut out = String::from(before);
                kept.write(&mut out);
                kept.write(&mut out);
                push_piece(&mut out, "}");
                assert_eq!(out, format!("{before}{piece}{piece}}}"));
            }
        }
    }

    #[test]
    fn an_output_with_room_for_the_text_alone_is_not_grown() {
        for n in [0, 7, 42, 12_345_678, 100_000_000] {
            let text = n.to_string();
            let mut out = String::with_capacity(text.len());
            let capacity = out.capacity();
            push_u64(&mut out, n);
            assert_eq!((out.as_str(), out.capacity()), (text.as_str(), capacity));
        }
        for text in ["", ",\"a\":", "{\"$type\":12,\"name\":"] {
            let mut out = String::with_capacity(text.len());
            let capacity = out.capacity();
            Piece::new(text.to_owned()).write(&mut out);
            assert_eq!((out.as_str(), out.capacity()), (text, capacity));
        }
    }

    #[test]
    fn integers_are_written_as_display_writes_them() {
        let mut values = vec![0, 1, -1, 9, 10, 99, 100, 101, 999, 1000, i64::MAX, i64::MIN, i64::MIN + 1];
        values.extend((0..19).flat_map(|power| {
            let n = 10i64.pow(power);
            [n - 1, n, n + 1, -n, -(n - 1)]
        }));
        for &n in &values {
            let mut out = String::new();
            push_i64(&mut out, n);
            assert_eq!(out, n.to_string());
        }
        // One after another, each written past the text before it (the short ones store a
        // whole word, beyond their digits).
        let mut out = String::new();
        for &n in &values {
            push_i64(&mut out, n);
            out.push(',');
        }
        assert_eq!(out, values.iter().map(|n| format!("{n},")).collect::<String>());
        let mut out = String::new();
        push_u64(&mut out, u64::MAX);
        assert_eq!(out, u64::MAX.to_string());
    }

    /// JSON string contents as `escape_into` must write them, one character at a time.
    fn escaped_slowly(text: &str) -> String {
        text.chars()
            .map(|c| match c {
                '"' => "\\\"".to_string(),
                '\\' => "\\\\".to_string(),
                '\n' => "\\n".to_string(),
                '\r' => "\\r".to_string(),
                '\t' => "\\t".to_string(),
                c if u32::from(c) < 0x20 => format!("\\u{:04x}", u32::from(c)),
                c => c.to_string(),
            })
            .collect()
    }

    /// Every byte that needs escaping, at every position of strings longer and shorter than the
    /// eight bytes `copy_plain` reads at a time (and of the four to seven it reads as one
    /// word), after bytes close to it in value, and after text already in the buffer; and
    /// strings with nothing to escape, of every length.
    #[test]
    fn escapes_are_found_anywhere() {
        let special: Vec<char> = (0u8..0x20).map(char::from).chain(['"', '\\']).collect();
        for len in 1..20 {
            for at in 0..len {
                for &c in &special {
                    for filler in ['a', '!', '#', '[', ']', ' ', '\u{7f}', 'é'] {
                        let text: String = (0..len).map(|i| if i == at { c } else { filler }).collect();
                        let mut out = String::from("x");
                        escape_into(&mut out, &text);
                        assert_eq!(out, format!("x{}", escaped_slowly(&text)), "{text:?}");
                        let mut out = String::from("x");
                        string(&mut out, &text);
                        escaped_key(&mut out, &text);
                        let escaped = escaped_slowly(&text);
                        assert_eq!(out, format!("x\"{escaped}\"\"{escaped}\":"), "{text:?}");
                    }
                }
            }
            let plain = "!#[]é\u{7f}~ 😀".repeat(len);
            for end in (0..=plain.len()).filter(|&end| plain.is_char_boundary(end)) {
                let mut out = String::from("{");
                assert_eq!(append_plain(&mut out, &plain.as_bytes()[..end]), end);
                assert_eq!(out, format!("{{{}", &plain[..end]));
                let mut out = String::from("{");
                string(&mut out, &plain[..end]);
                escaped_key(&mut out, &format!("${}", &plain[..end]));
                assert_eq!(out, format!("{{\"{0}\"\"$${0}\":", &plain[..end]));
            }
        }
        let mut out = String::new();
        escape_into(&mut out, "a\"b\\c\nd\re\tf\u{1}g\u{1f}");
        assert_eq!(out, r#"a\"b\\c\nd\re\tf\u0001g\u001f"#);
    }

    #[test]
    fn plain_json_where_it_fits() {
        let value = Value::Dict(vec![
            (Value::Str("a".into()), Value::List(vec![Value::Int(1), Value::Float(1.0), Value::None, Value::Bool(true)])),
            (Value::Str("$b".into()), Value::Str("x\"\n\u{1}é".into())),
        ]);
        let text = round_trip(value, vec![]);
        assert_eq!(text, r#"{"$copal":2,"value":{"a":[1,1.0,null,true],"$$b":"x\"\n\u0001é"}}"#);
    }

    #[test]
    fn tagged_values_and_shared_references() {
        let table = vec![TableEntry { persistent: false, type_name: "m.P".into(), fields: vec!["x".into()] }];
        let value = Value::List(vec![
            Value::Object { descriptor: 0, fields: vec![Value::BackRef(0)] },
            Value::Tuple(vec![Value::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 1])]),
            Value::Dict(vec![]),
            Value::BackRef(3),
            Value::Set(vec![Value::Bytes(b"hi".to_vec())]),
            Value::Dict(vec![(Value::Int(1), Value::Float(f64::INFINITY))]),
            Value::DateTime { micros: 0, tz: TzInfo::Named("Europe/Paris".into()), fold: true },
            Value::Time { micros: 1, tz: TzInfo::Offset(-3_600_000_000), fold: false },
            Value::TimeDelta { days: -1, seconds: 5, micros: 6 },
            Value::Uuid([0xAB; 16]),
            Value::BackRef(1),
        ]);
        let text = round_trip(value, table);
        assert!(text.starts_with(r#"{"$copal":2,"value":{"$id":0,"$list":[{"$id":1,"$type":"m.P","x":{"$ref":0}},"#), "{text}");
        assert!(text.contains(r#"{"$datetime":"1970-01-01T00:00:00","$zone":"Europe/Paris","$fold":1}"#), "{text}");
        assert!(text.contains(r#"{"$time":"00:00:00.000001-01:00"}"#), "{text}");
        assert!(text.contains("18446744073709551616"), "{text}");
    }

    #[test]
    fn dicts_with_other_keys_are_rewritten_with_the_same_ids() {
        // The object form is abandoned at key 2, after a nested dict and a list were written
        // (and counted memo slots 1 and 2); the rewrite must count them again from the same slot.
        let inner = Value::Dict(vec![(Value::Int(1), Value::Dict(vec![(Value::Str("x".into()), Value::List(vec![]))]))]);
        let value = Value::List(vec![
            Value::Dict(vec![(Value::Str("a".into()), inner.clone()), (Value::Int(2), Value::BackRef(2))]),
            Value::BackRef(4),
            inner,
        ]);
        let text = round_trip(value, vec![]);
        assert!(text.contains(r#"{"$dict":[["a",{"$id":2,"$dict":[[1,{"x":{"$id":4,"$list":[]}}]]}],[2,{"$ref":2}]]}"#), "{text}");
    }

    /// The second object of a class, and every value naming a class named before (objects,
    /// persistent objects, subclass instances, enums share the numbering), names it by number;
    /// two classes with the same unqualified name are two classes.
    #[test]
    fn classes_named_before_are_named_by_number() {
        let entry = |persistent, type_name: &str, fields: &[&str]| TableEntry { persistent, type_name: type_name.into(), fields: fields.iter().map(|f| f.to_string()).collect() };
        let table = vec![
            entry(false, "a.Foo", &["x"]),
            entry(false, "b.Foo", &["x"]),
            entry(false, "a.Foo", &["x", "y"]),
            entry(false, "m.Color", &[]),
            entry(true, "b.Foo", &[]),
            entry(false, "m.Tags", &[]),
        ];
        let foo = |descriptor, x| Value::Object { descriptor, fields: vec![Value::Int(x)] };
        let value = Value::List(vec![
            foo(0, 1),
            foo(1, 2),
            Value::Object { descriptor: 2, fields: vec![Value::Enum { descriptor: 3, member: "RED".into() }, foo(1, 3)] },
            Value::Enum { descriptor: 3, member: "BLUE".into() },
            Value::Object { descriptor: 4, fields: vec![] },
            Value::Subclass { descriptor: 5, base: Box::new(Value::List(vec![foo(0, 4)])), fields: vec![] },
            Value::Subclass { descriptor: 5, base: Box::new(Value::Dict(vec![])), fields: vec![] },
        ]);
        let text = round_trip(value, table);
        let expected = concat!(
            r#"{"$copal":2,"value":[{"$type":"a.Foo","x":1},{"$type":"b.Foo","x":2},"#,
            r#"{"$type":0,"x":{"$enum":"m.Color","$member":"RED"},"y":{"$type":1,"x":3}},{"$enum":2,"$member":"BLUE"},"#,
            r#"{"$persistent":1},{"$subclass":"m.Tags","$base":[{"$type":0,"x":4}]},{"$subclass":3,"$base":{}}]}"#,
        );
        assert_eq!(text, expected);
    }

    /// A dict written as an object until a key that is not a string turns it into `$dict`
    /// form: the classes named in the text taken back are numbered again in the new order.
    #[test]
    fn classes_are_numbered_in_the_order_of_the_final_text() {
        let table = vec![TableEntry { persistent: false, type_name: "m.A".into(), fields: vec![] }, TableEntry { persistent: false, type_name: "m.B".into(), fields: vec![] }];
        let object = |descriptor| Value::Object { descriptor, fields: vec![] };
        let value = Value::List(vec![
            Value::Dict(vec![(Value::Str("k".into()), object(0)), (object(1), Value::None)]),
            object(0),
        ]);
        let text = round_trip(value, table);
        assert_eq!(text, r#"{"$copal":2,"value":[{"$dict":[["k",{"$type":"m.A"}],[{"$type":"m.B"},null]]},{"$type":0}]}"#);
    }

    /// Version 1 named every class in full; its documents read as they always did.
    #[test]
    fn version_1_documents_are_read() {
        let text = r#"{"$copal":1,"value":[{"$type":"m.A","x":1},{"$type":"m.A","x":2},{"$enum":"m.A","$member":"B"}]}"#;
        let body = from_json(text).unwrap();
        let table = vec![TableEntry { persistent: false, type_name: "m.A".into(), fields: vec!["x".into()] }, TableEntry { persistent: false, type_name: "m.A".into(), fields: vec![] }];
        let value = Value::List(vec![
            Value::Object { descriptor: 0, fields: vec![Value::Int(1)] },
            Value::Object { descriptor: 0, fields: vec![Value::Int(2)] },
            Value::Enum { descriptor: 1, member: "B".into() },
        ]);
        assert_eq!(body, Body { table, value });
    }

    #[test]
    fn subclass_bases_take_no_memo_slot() {
        let table = vec![TableEntry { persistent: false, type_name: "m.Tags".into(), fields: vec!["n".into()] }];
        let value = Value::List(vec![
            Value::Subclass { descriptor: 0, base: Box::new(Value::List(vec![Value::BackRef(1)])), fields: vec![Value::Int(1)] },
            Value::Subclass { descriptor: 0, base: Box::new(Value::Dict(vec![])), fields: vec![Value::List(vec![])] },
            Value::BackRef(2),
            Value::BackRef(1),
        ]);
        let text = round_trip(value, table);
        assert!(text.contains(r#"{"$id":1,"$subclass":"m.Tags","$base":[{"$ref":1}],"n":1}"#), "{text}");
        assert!(text.contains(r#"{"$id":2,"$subclass":0,"$base":{},"n":[]}"#), "{text}");
    }

    #[test]
    fn damaged_bodies_are_errors_not_panics() {
        let table = vec![TableEntry { persistent: true, type_name: "m.P".into(), fields: vec!["x".into(), "$y".into()] }];
        let value = Value::List(vec![
            Value::Object { descriptor: 0, fields: vec![Value::BackRef(0), Value::Decimal("1.5".into())] },
            Value::Dict(vec![(Value::Int(1), Value::DateTime { micros: 5, tz: TzInfo::Offset(60_000_000), fold: false })]),
            Value::Time { micros: 7, tz: TzInfo::Named("UTC".into()), fold: true },
            Value::BigInt(vec![1, 2, 3, 4, 5, 6, 7, 8, 0x80]),
            Value::Enum { descriptor: 0, member: "A".into() },
        ]);
        let bytes = Body { table, value }.encode();
        for at in 0..bytes.len() {
            for b in [0x00, 0x01, 0x0b, 0x0d, 0x10, 0x12, 0x18, 0x19, 0x1a, 0x7f, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] = b;
                let _ = to_json(&damaged);
            }
            let _ = to_json(&bytes[..at]);
        }
    }

    /// Every byte of a document naming classes by number, replaced by bytes that change its
    /// structure or its numbers, and every prefix: errors, never panics; a number changed to
    /// another class's is read as that class.
    #[test]
    fn damaged_documents_are_errors_not_panics() {
        let text = r#"{"$copal":2,"value":[{"$type":"m.A","x":1},{"$enum":"m.B","$member":"C"},{"$type":0,"x":{"$id":5,"$list":[{"$enum":1,"$member":"D"}]}},{"$subclass":"m.C","$base":[]},{"$ref":5},{"$subclass":2,"$base":{}}]}"#;
        for at in 0..text.len() {
            for b in [b'0', b'1', b'3', b'9', b'-', b'.', b'"', b'{', b'}', b'[', b']', b',', b':', b'$', b'x'] {
                let mut damaged = text.as_bytes().to_vec();
                damaged[at] = b;
                if let Ok(damaged) = std::str::from_utf8(&damaged) {
                    let _ = from_json(damaged);
                }
            }
            let _ = from_json(&text[..at]);
        }
        let swapped = from_json(&text.replace(r#"{"$type":0,"#, r#"{"$type":1,"#)).unwrap();
        assert_eq!(swapped.table[2].type_name, "m.B");
    }

    #[test]
    fn malformed_documents_are_errors() {
        for bad in [
            "", "[1]", "{\"value\":1}", "{\"$copal\":3,\"value\":1}", "{\"$copal\":0,\"value\":1}",
            "{\"$copal\":1,\"value\":{\"$type\":0}}", "{\"$copal\":2,\"value\":{\"$type\":0}}",
            "{\"$copal\":2,\"value\":[{\"$type\":\"m.A\"},{\"$type\":1}]}", "{\"$copal\":2,\"value\":[{\"$type\":\"m.A\"},{\"$enum\":-0,\"$member\":\"X\"}]}",
            "{\"$copal\":2,\"value\":{\"$type\":[\"m.A\"]}}", "{\"$copal\":1,\"value\":{\"$ref\":0}}",
            "{\"$copal\":1,\"value\":{\"$bytes\":\"A\"}}", "{\"$copal\":1,\"value\":{\"$tuple\":[],\"a\":1}}",
            "{\"$copal\":1,\"value\":{\"$nope\":1}}", "{\"$copal\":1,\"value\":01}", "{\"$copal\":1,\"value\":\"\\ud800\"}",
            "{\"$copal\":1,\"value\":1} x", "{\"$copal\":1,\"value\":{\"$date\":\"2024-13-01\"}}",
        ] {
            assert!(from_json(bad).is_err(), "{bad}");
        }
        let deep = format!("{{\"$copal\":1,\"value\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(from_json(&deep), Err(TextError::Syntax { .. })));
    }
}
