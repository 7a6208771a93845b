//! Writing: the JSON document of a stream body, written from its bytes.

use std::collections::HashSet;

use super::grammar::{self, Tag};
use super::numbers::{float, push_i64, push_u64};
use super::strings::{escaped_key, string};
use crate::format::calendar::MICROS_PER_DAY;
use crate::format::{is_decimal_text, tag, DecodeError, Reader, TzInfo, MAX_DAY, MIN_DAY};
use crate::text::{bigint, clock, mapping, ClassNumbers, TableEntry, TextError};

/// The JSON document of a stream body (docs/STREAM.md section 4), written straight from its
/// bytes: no value tree is built, so writing allocates little beyond the output.
pub fn to_json(body: &[u8]) -> Result<String, TextError> {
    let mut r = Reader::new(body);
    let table = crate::text::read_table(&mut r)?;
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
    let mut w = JsonWriter { out: String::with_capacity(body_len * 2 + 32), table, targets: HashSet::new(), found: HashSet::new(), slot: 0, in_base: false, mixed: HashSet::new(), classes: ClassNumbers::default() };
    w.document(&mut r)?;
    r.expect_end()?;
    if w.found.is_empty() {
        return Ok(w.out);
    }
    let mut r = values;
    let mut w = JsonWriter { out: String::with_capacity(w.out.len() + 32), table, targets: std::mem::take(&mut w.found), found: HashSet::new(), slot: 0, in_base: false, mixed: std::mem::take(&mut w.mixed), classes: ClassNumbers::default() };
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
    classes: ClassNumbers,
}

impl<'a> JsonWriter<'a> {
    fn document(&mut self, r: &mut Reader<'_>) -> Result<(), TextError> {
        grammar::open_document(&mut self.out);
        self.value(r, 0)?;
        grammar::close_document(&mut self.out);
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

    /// Opens the tagged object of a memo-taking value, with `"$id"` first when it needs one.
    fn open_memo(&mut self, tag: Tag) {
        let id = self.memo();
        grammar::open_tagged(&mut self.out, id, tag);
    }

    /// A class name: its number if the document named it before, else the name, which takes
    /// the next number.
    fn class_name(&mut self, name: &str) {
        match self.classes.number_or_new(name) {
            Ok(number) => push_u64(&mut self.out, number as u64),
            Err(_) => string(&mut self.out, name),
        }
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

    fn tagged_items(&mut self, tag: Tag, r: &mut Reader<'_>, depth: usize) -> Result<(), TextError> {
        self.open_memo(tag);
        self.items(r, depth)?;
        self.out.push('}');
        Ok(())
    }

    /// The zone of a DATETIME or TIME whose flags are `flags` (read), and whether its fold is set.
    fn zone(r: &mut Reader<'_>, flags: u8, offset: usize) -> Result<(TzInfo, bool), TextError> {
        let tz = r.tz_suffix(flags)?;
        if let TzInfo::Offset(micros) = tz {
            if micros.unsigned_abs() >= MICROS_PER_DAY as u64 {
                return Err(DecodeError::OutOfRange { offset, what: "UTC offset" }.into());
            }
        }
        Ok((tz, flags & tag::TZ_FOLD != 0))
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
            let id = self.memo();
            let mut first = !grammar::open_with_id(&mut self.out, id);
            let mut all_str = true;
            for _ in 0..count {
                if r.peek_u8()? != tag::STR {
                    all_str = false;
                    break;
                }
                if !first {
                    self.out.push(',');
                }
                first = false;
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
        }
        self.open_memo(Tag::Dict);
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
            tag::FLOAT => float(&mut self.out, r.f64()?),
            tag::COMPLEX => {
                let (real, imaginary) = (r.f64()?, r.f64()?);
                grammar::complex(&mut self.out, real, imaginary);
            }
            tag::STR => string(&mut self.out, r.str()?),
            tag::STR_SURROGATES => grammar::surrogates(&mut self.out, r.length_prefixed()?),
            tag::BYTES => grammar::bytes(&mut self.out, r.length_prefixed()?),
            tag::BYTEARRAY => {
                let id = self.memo();
                grammar::bytearray(&mut self.out, id, r.length_prefixed()?);
            }
            tag::LIST => {
                if self.in_base {
                    self.in_base = false;
                    self.items(r, depth)?;
                } else if self.targets.contains(&self.slot) {
                    self.tagged_items(Tag::List, r, depth)?;
                } else {
                    self.slot += 1;
                    self.items(r, depth)?;
                }
            }
            tag::TUPLE => self.tagged_items(Tag::Tuple, r, depth)?,
            tag::SET => self.tagged_items(Tag::Set, r, depth)?,
            tag::FROZENSET => self.tagged_items(Tag::FrozenSet, r, depth)?,
            tag::DICT => self.dict(r, depth, offset)?,
            tag::DATETIME => {
                let flags = r.tz_flags()?;
                let micros = r.zigzag()?;
                if !(MIN_DAY..=MAX_DAY).contains(&micros.div_euclid(MICROS_PER_DAY)) {
                    return Err(DecodeError::OutOfRange { offset, what: "datetime" }.into());
                }
                let (zone, fold) = Self::zone(r, flags, offset)?;
                grammar::datetime(&mut self.out, micros, &zone, fold);
            }
            tag::DATE => {
                let days = r.zigzag()?;
                if !(MIN_DAY..=MAX_DAY).contains(&days) {
                    return Err(DecodeError::OutOfRange { offset, what: "date" }.into());
                }
                grammar::date(&mut self.out, days);
            }
            tag::TIME => {
                let flags = r.tz_flags()?;
                let micros = r.varint()?;
                if micros >= MICROS_PER_DAY as u64 {
                    return Err(DecodeError::OutOfRange { offset, what: "time of day" }.into());
                }
                let (zone, fold) = Self::zone(r, flags, offset)?;
                grammar::time(&mut self.out, micros, &zone, fold);
            }
            tag::TIMEDELTA => {
                let (days, seconds, micros) = (r.zigzag()?, r.varint()?, r.varint()?);
                if !clock::timedelta_in_range(days, seconds, micros) {
                    return Err(DecodeError::OutOfRange { offset, what: "timedelta" }.into());
                }
                grammar::timedelta(&mut self.out, days, seconds, micros);
            }
            tag::DECIMAL => {
                let text = r.str()?;
                if !is_decimal_text(text) {
                    return Err(DecodeError::OutOfRange { offset, what: "decimal" }.into());
                }
                grammar::decimal(&mut self.out, text);
            }
            tag::UUID => {
                grammar::uuid(&mut self.out, &r.array::<16>()?);
            }
            tag::ENUM => {
                let descriptor = r.u32_varint()?;
                let type_name = &self.entry(descriptor)?.type_name;
                grammar::enum_opening(&mut self.out);
                self.class_name(type_name);
                grammar::enum_member(&mut self.out, r.str()?);
            }
            tag::OBJECT => {
                let entry = self.entry(r.u32_varint()?)?;
                let (persistent, type_name, names) = (entry.persistent, &entry.type_name, &entry.fields);
                self.open_memo(if persistent { Tag::Persistent } else { Tag::Type });
                self.class_name(type_name);
                self.fields(r, names, depth + 1)?;
                self.out.push('}');
            }
            tag::SUBCLASS => {
                let entry = self.entry(r.u32_varint()?)?;
                let (type_name, names) = (&entry.type_name, &entry.fields);
                self.open_memo(Tag::Subclass);
                self.class_name(type_name);
                grammar::subclass_base(&mut self.out);
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
                grammar::reference(&mut self.out, index);
            }
            tag::REF => return Err(mapping("a stream holds no references to stored objects")),
            other => return Err(DecodeError::UnknownTag { offset, tag: other }.into()),
        }
        Ok(())
    }
}
