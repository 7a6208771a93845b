//! Self-describing values (docs/FORMAT.md section "Values"): a language-neutral tree decoder used
//! by Rust readers, query evaluation, the CLI and the format test vectors, and, with the forms
//! of `ValueForms` (stream_forms.rs), by the readers of streams of every version. (The Python
//! binding decodes the same bytes straight into Python objects, with the same `Reader`
//! primitives.)

mod stream_forms;

pub use stream_forms::ValueForms;
use stream_forms::Made;

use super::descriptor::DescriptorSource;
use super::error::DecodeError;
use super::oid::{make_oid, ClassNo, Oid};
use super::reader::{Reader, TzInfo};
use super::record::RecordHeader;
use super::tag;
use super::writer::Writer;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// Minimal little-endian two's complement bytes of an integer outside i64.
    BigInt(Vec<u8>),
    Float(f64),
    Complex(f64, f64),
    Str(String),
    /// Generalized UTF-8 bytes of a string holding lone surrogates.
    StrSurrogates(Vec<u8>),
    Bytes(Vec<u8>),
    ByteArray(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Set(Vec<Value>),
    FrozenSet(Vec<Value>),
    DateTime { micros: i64, tz: TzInfo, fold: bool },
    Date { days: i64 },
    Time { micros: u64, tz: TzInfo, fold: bool },
    TimeDelta { days: i64, seconds: u64, micros: u64 },
    Decimal(String),
    Uuid([u8; 16]),
    Enum { descriptor: u32, member: String },
    Ref(Oid),
    Object { descriptor: u32, fields: Vec<Value> },
    /// A SUBCLASS value: `base` is a container (LIST, TUPLE, SET, FROZENSET, DICT), or in a
    /// stream of version 4 a superseded copy, a scalar value or a BYTEARRAY (docs/STREAM.md
    /// section 5), without a memo slot of its own.
    Subclass { descriptor: u32, base: Box<Value>, fields: Vec<Value> },
    BackRef(u32),
    /// The string of an earlier string slot of a stream (STRREF, or a STR field of a
    /// TYPED_OBJECT that refers to a slot: docs/STREAM.md section 5). Kept as the reference, as
    /// a `BackRef` is.
    StrRef(u32),
    /// A tuple written again inside its own items (SUPERSEDED_TUPLE, docs/STREAM.md section 5):
    /// the copy's items, and the memo slot `by` of the copy whose value it is.
    SupersededTuple { items: Vec<Value>, by: u32 },
    /// SUPERSEDED_FROZENSET: `SupersededTuple` for a frozenset.
    SupersededFrozenSet { items: Vec<Value>, by: u32 },
}

const MICROS_PER_DAY: u64 = 86_400_000_000;
const MAX_TIMEDELTA_DAYS: u64 = 999_999_999;

struct Walk<'s, D: DescriptorSource + ?Sized> {
    descriptors: &'s D,
    /// The values read: those of records, or of a stream of some version (`ValueForms`).
    forms: ValueForms,
    memo_slots: u64,
    /// The STR values read so far (with `forms.shared_strings`, what a STRREF may refer to).
    string_slots: u64,
    /// With `forms.copies_and_scalar_bases`, what each memo slot's value is, as far as a
    /// superseded copy's slot must match it (`Made`); empty otherwise.
    made: Vec<Made>,
    /// The memo slot whose value `memo_value` wants, and that value once decoded.
    wanted: Option<u64>,
    captured: Option<Value>,
    /// Memo slots of tuples and frozensets whose items are being read, and of superseded copies
    /// whose slot is not read yet: a back-reference to one of them would make a value contain
    /// itself before it exists.
    unfinished: Vec<u64>,
}

impl<'s, D: DescriptorSource + ?Sized> Walk<'s, D> {
    fn new(descriptors: &'s D, forms: ValueForms) -> Self {
        Walk { descriptors, forms, memo_slots: 0, string_slots: 0, made: Vec::new(), wanted: None, captured: None, unfinished: Vec::new() }
    }
}

impl<D: DescriptorSource + ?Sized> Walk<'_, D> {
    /// One value at `depth`. This function and the container readers below recurse once per
    /// nesting level, so they keep their frames small: every value without contents is read by
    /// `scalar`, which is never inlined, so its locals are not part of the recursive frame
    /// (an unoptimized build otherwise needs about 8 KB per level and cannot reach the depth
    /// limit on a 2 MiB thread stack: FUZZING.md, F3).
    fn value(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<Value, DecodeError> {
        if depth > r.limits.max_depth {
            return Err(DecodeError::TooDeep { limit: r.limits.max_depth });
        }
        let t = r.u8()?;
        let slot = self.memo_slots;
        if tag::takes_memo_slot(t) {
            self.take_slot();
        }
        let value = match t {
            tag::LIST => self.items(r, depth).map(Value::List),
            tag::TUPLE => self.unfinished_items(r, depth, slot, Made::Tuple).map(Value::Tuple),
            tag::SET => self.items(r, depth).map(Value::Set),
            tag::FROZENSET => self.unfinished_items(r, depth, slot, Made::FrozenSet).map(Value::FrozenSet),
            tag::DICT => self.pairs(r, depth).map(Value::Dict),
            tag::OBJECT => {
                let (descriptor, count) = self.descriptor_fields(r)?;
                self.fields(r, count, depth + 1).map(|fields| Value::Object { descriptor, fields })
            }
            tag::SUBCLASS => {
                let (descriptor, count) = self.descriptor_fields(r)?;
                let base = Box::new(self.subclass_base(r, depth, slot, descriptor)?);
                self.fields(r, count, depth + 1).map(|fields| Value::Subclass { descriptor, base, fields })
            }
            tag::TYPED_OBJECT | tag::OBJECT_LIST if self.forms.typed_objects => {
                self.take_slot();
                self.typed_value(r, t, depth)
            }
            tag::SUPERSEDED_TUPLE | tag::SUPERSEDED_FROZENSET if self.forms.copies_and_scalar_bases => {
                self.take_slot();
                self.superseded(r, t, depth, slot, None)
            }
            _ => self.scalar(r, t),
        }?;
        if self.wanted == Some(slot) && tag::takes_memo_slot(t) {
            self.capture(&value);
        }
        Ok(value)
    }

    /// Keeps the value of the memo slot `memo_value` looks for (out of line: see `value`).
    #[inline(never)]
    fn capture(&mut self, value: &Value) {
        if self.captured.is_none() {
            self.captured = Some(value.clone());
        }
    }

    /// Takes the next memo slot.
    fn take_slot(&mut self) {
        self.memo_slots += 1;
        if self.forms.copies_and_scalar_bases {
            self.made.push(Made::Other);
        }
    }

    /// Records what the value of memo slot `slot` is (with `forms.copies_and_scalar_bases`).
    fn made(&mut self, slot: u64, made: Made) {
        if let Some(entry) = self.made.get_mut(slot as usize) {
            *entry = made;
        }
    }

    /// The value of a back-reference to memo slot `index`, read at `offset`.
    fn backref(&self, offset: usize, index: u64) -> Result<Value, DecodeError> {
        if index >= self.memo_slots || self.unfinished.contains(&index) {
            return Err(DecodeError::BadBackRef { offset, index });
        }
        Ok(Value::BackRef(index as u32))
    }

    /// The descriptor id of an OBJECT or SUBCLASS and its field count.
    #[inline(never)]
    fn descriptor_fields(&mut self, r: &mut Reader<'_>) -> Result<(u32, usize), DecodeError> {
        let descriptor = r.u32_varint()?;
        Ok((descriptor, self.descriptors.field_count(descriptor)?))
    }

    /// A value without contents (no recursion), after its tag `t`.
    #[inline(never)]
    fn scalar(&mut self, r: &mut Reader<'_>, t: u8) -> Result<Value, DecodeError> {
        let offset = r.position() - 1;
        Ok(match t {
            tag::NONE => Value::None,
            tag::FALSE => Value::Bool(false),
            tag::TRUE => Value::Bool(true),
            tag::INT => Value::Int(r.zigzag()?),
            tag::BIGINT => {
                let bytes = r.length_prefixed()?;
                if bytes.len() > r.limits.max_bigint_bytes {
                    return Err(DecodeError::OutOfRange { offset, what: "integer size" });
                }
                Value::BigInt(bytes.to_vec())
            }
            tag::FLOAT => Value::Float(r.f64()?),
            tag::COMPLEX => Value::Complex(r.f64()?, r.f64()?),
            tag::STR => {
                let text = r.str()?.to_owned();
                self.string_slots += 1;
                Value::Str(text)
            }
            tag::STRREF if self.forms.shared_strings => {
                let index = r.varint()?;
                if index >= self.string_slots {
                    return Err(DecodeError::BadBackRef { offset, index });
                }
                Value::StrRef(index as u32)
            }
            tag::STR_SURROGATES => {
                let bytes = r.length_prefixed()?;
                if !is_generalized_utf8(bytes) {
                    return Err(DecodeError::BadUtf8 { offset });
                }
                Value::StrSurrogates(bytes.to_vec())
            }
            tag::BYTES => Value::Bytes(r.length_prefixed()?.to_vec()),
            tag::BYTEARRAY => Value::ByteArray(r.length_prefixed()?.to_vec()),
            tag::DATETIME => {
                let flags = r.tz_flags()?;
                let micros = r.zigzag()?;
                if !(MIN_DAY..=MAX_DAY).contains(&micros.div_euclid(MICROS_PER_DAY as i64)) {
                    return Err(DecodeError::OutOfRange { offset, what: "datetime" });
                }
                Value::DateTime { micros, tz: checked_tz(r, flags, offset)?, fold: flags & tag::TZ_FOLD != 0 }
            }
            tag::DATE => {
                let days = r.zigzag()?;
                if !(MIN_DAY..=MAX_DAY).contains(&days) {
                    return Err(DecodeError::OutOfRange { offset, what: "date" });
                }
                Value::Date { days }
            }
            tag::TIME => {
                let flags = r.tz_flags()?;
                let micros = r.varint()?;
                if micros >= MICROS_PER_DAY {
                    return Err(DecodeError::OutOfRange { offset, what: "time of day" });
                }
                Value::Time { micros, tz: checked_tz(r, flags, offset)?, fold: flags & tag::TZ_FOLD != 0 }
            }
            tag::TIMEDELTA => {
                let days = r.zigzag()?;
                let seconds = r.varint()?;
                let micros = r.varint()?;
                if days.unsigned_abs() > MAX_TIMEDELTA_DAYS || seconds >= 86_400 || micros >= 1_000_000 {
                    return Err(DecodeError::OutOfRange { offset, what: "timedelta" });
                }
                Value::TimeDelta { days, seconds, micros }
            }
            tag::DECIMAL => {
                let text = r.str()?;
                if !is_decimal_text(text) {
                    return Err(DecodeError::OutOfRange { offset, what: "decimal" });
                }
                Value::Decimal(text.to_owned())
            }
            tag::UUID => Value::Uuid(r.array::<16>()?),
            tag::ENUM => {
                let descriptor = r.u32_varint()?;
                self.descriptors.field_count(descriptor)?;
                Value::Enum { descriptor, member: r.str()?.to_owned() }
            }
            tag::REF if self.forms.references => Value::Ref(read_ref(r)?),
            tag::BACKREF => {
                let index = r.varint()?;
                self.backref(offset, index)?
            }
            other => return Err(DecodeError::UnknownTag { offset, tag: other }),
        })
    }

    fn items(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<Vec<Value>, DecodeError> {
        let count = r.length(1)?;
        self.counted_items(r, count, depth)
    }

    /// `count` items (the count already read and checked), each at `depth + 1`.
    fn counted_items(&mut self, r: &mut Reader<'_>, count: usize, depth: usize) -> Result<Vec<Value>, DecodeError> {
        let mut items = Vec::with_capacity(count.min(PREALLOCATE_MAX));
        for _ in 0..count {
            items.push(self.value(r, depth + 1)?);
        }
        Ok(items)
    }

    /// The items of the tuple or frozenset of memo slot `slot`, which is then `made`.
    fn unfinished_items(&mut self, r: &mut Reader<'_>, depth: usize, slot: u64, made: Made) -> Result<Vec<Value>, DecodeError> {
        self.unfinished.push(slot);
        let items = self.items(r, depth);
        self.unfinished.pop();
        self.made(slot, made);
        items
    }

    fn pairs(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<Vec<(Value, Value)>, DecodeError> {
        let count = r.length(2)?;
        let mut pairs = Vec::with_capacity(count.min(PREALLOCATE_MAX));
        for _ in 0..count {
            let key = self.value(r, depth + 1)?;
            pairs.push((key, self.value(r, depth + 1)?));
        }
        Ok(pairs)
    }

    /// `count` field values, each at `depth` (0 for the fields of a record).
    fn fields(&mut self, r: &mut Reader<'_>, count: usize, depth: usize) -> Result<Vec<Value>, DecodeError> {
        let mut fields = Vec::with_capacity(count.min(PREALLOCATE_MAX));
        for _ in 0..count {
            fields.push(self.value(r, depth)?);
        }
        Ok(fields)
    }

    /// The built-in part of the SUBCLASS value of descriptor `descriptor` in memo slot `slot`:
    /// a container tag and its body, without a memo slot of its own (the subclass instance
    /// already took one), or a base of `forms` (stream_forms.rs).
    fn subclass_base(&mut self, r: &mut Reader<'_>, depth: usize, slot: u64, descriptor: u32) -> Result<Value, DecodeError> {
        let offset = r.position();
        let t = r.u8()?;
        Ok(match t {
            tag::LIST => Value::List(self.items(r, depth)?),
            tag::TUPLE => Value::Tuple(self.unfinished_items(r, depth, slot, Made::Subclass { descriptor, base: t })?),
            tag::FROZENSET => Value::FrozenSet(self.unfinished_items(r, depth, slot, Made::Subclass { descriptor, base: t })?),
            tag::SET => Value::Set(self.items(r, depth)?),
            tag::DICT => Value::Dict(self.pairs(r, depth)?),
            _ => return self.stream_subclass_base(r, t, offset, depth, slot, descriptor),
        })
    }
}

pub(crate) fn read_ref(r: &mut Reader<'_>) -> Result<Oid, DecodeError> {
    let offset = r.position();
    let class = ClassNo::try_from(r.varint()?).map_err(|_| DecodeError::OutOfRange { offset, what: "class number" })?;
    let seq = r.varint()?;
    if seq > super::oid::MAX_SEQ {
        return Err(DecodeError::OutOfRange { offset, what: "object sequence number" });
    }
    Ok(make_oid(class, seq))
}

/// Decodes one value (memo slots counted from this value).
pub fn decode_value<D: DescriptorSource + ?Sized>(r: &mut Reader<'_>, descriptors: &D) -> Result<Value, DecodeError> {
    decode_value_with(r, descriptors, ValueForms::RECORD)
}

/// Decodes one value as `decode_value` does, reading the stream forms `forms` too (a stream's
/// value: `stream::Stream::decode_value`).
pub fn decode_value_with<D: DescriptorSource + ?Sized>(r: &mut Reader<'_>, descriptors: &D, forms: ValueForms) -> Result<Value, DecodeError> {
    Walk::new(descriptors, forms).value(r, 0)
}

/// Decodes the value of the body of a text document (docs/TEXT_FORMATS.md section 3): as
/// `decode_value`, and a SUBCLASS may also have a BYTEARRAY base (docs/STREAM.md section 5).
pub(crate) fn decode_document_value<D: DescriptorSource + ?Sized>(r: &mut Reader<'_>, descriptors: &D) -> Result<Value, DecodeError> {
    decode_value_with(r, descriptors, ValueForms { bytearray_bases: true, ..ValueForms::RECORD })
}

/// Decodes a whole record: its header and one value per field of its descriptor.
pub fn decode_record_state<D: DescriptorSource + ?Sized>(
    data: &[u8],
    descriptors: &D,
) -> Result<(RecordHeader, Vec<Value>), DecodeError> {
    let mut r = Reader::new(data);
    let header = RecordHeader::read(&mut r)?;
    let count = descriptors.field_count(header.descriptor)?;
    let fields = Walk::new(descriptors, ValueForms::RECORD).fields(&mut r, count, 0)?;
    r.expect_end()?;
    Ok((header, fields))
}

/// Appends the oid of every reference the record `data` holds to `out`.
pub fn record_references<D: DescriptorSource + ?Sized>(data: &[u8], descriptors: &D, out: &mut Vec<Oid>) -> Result<(), DecodeError> {
    let (_, fields) = decode_record_state(data, descriptors)?;
    fields.iter().for_each(|v| v.references(out));
    Ok(())
}

/// The value of memo slot `slot` of a record's state (the value a `BackRef(slot)` in it stands
/// for), decoding the fields from `state_start`; None if no value of the record has that slot.
pub fn memo_value<D: DescriptorSource + ?Sized>(
    record: &[u8],
    state_start: usize,
    descriptors: &D,
    slot: u64,
) -> Result<Option<Value>, DecodeError> {
    let mut r = Reader::new(record);
    r.bytes(state_start)?;
    let mut walk = Walk::new(descriptors, ValueForms::RECORD);
    walk.wanted = Some(slot);
    while !r.is_empty() && walk.captured.is_none() {
        walk.value(&mut r, 0)?;
    }
    Ok(walk.captured)
}

/// Reads the fields of a record one by one (for query evaluation), numbering memo slots across
/// the whole record so that back-references between fields stay valid.
pub struct FieldReader<'a, 's, D: DescriptorSource + ?Sized> {
    reader: Reader<'a>,
    walk: Walk<'s, D>,
}

impl<'a, 's, D: DescriptorSource + ?Sized> FieldReader<'a, 's, D> {
    /// Starts after the header of `record`, which the caller has parsed.
    pub fn new(record: &'a [u8], state_start: usize, descriptors: &'s D) -> Result<Self, DecodeError> {
        let mut reader = Reader::new(record);
        reader.bytes(state_start)?;
        Ok(FieldReader { reader, walk: Walk::new(descriptors, ValueForms::RECORD) })
    }

    pub fn next_value(&mut self) -> Result<Value, DecodeError> {
        self.walk.value(&mut self.reader, 0)
    }

    /// Moves past the next field without building it. Scalars are skipped in place (a skipped
    /// string's UTF-8 is not checked: the field is not used, and the store's checksum already
    /// vouches for the bytes); containers are decoded and dropped, which numbers their memo
    /// slots as `next_value` would.
    #[inline]
    pub fn skip_value(&mut self) -> Result<(), DecodeError> {
        let r = &mut self.reader;
        match r.peek_u8()? {
            tag::NONE | tag::FALSE | tag::TRUE => {
                r.u8()?;
            }
            tag::INT => {
                r.u8()?;
                r.varint()?;
            }
            tag::FLOAT => {
                r.u8()?;
                r.bytes(8)?;
            }
            tag::STR | tag::BYTES => {
                r.u8()?;
                r.skip_length_prefixed()?;
            }
            _ => {
                self.walk.value(r, 0)?;
            }
        }
        Ok(())
    }

    /// Whether the next field is the string whose UTF-8 bytes are `expected`, moving past it.
    /// Nothing is copied or validated: bytes equal to `expected` are valid UTF-8 because
    /// `expected` is, and a value of any other tag is not that string.
    #[inline]
    pub fn next_str_is(&mut self, expected: &[u8]) -> Result<bool, DecodeError> {
        if self.reader.peek_u8()? != tag::STR {
            self.skip_value()?;
            return Ok(false);
        }
        self.reader.u8()?;
        Ok(self.reader.length_prefixed()? == expected)
    }

    /// Decodes the next field into `slot`, reusing the buffer of the string or bytes it holds:
    /// a scan testing a string field then allocates nothing per record.
    pub fn next_value_into(&mut self, slot: &mut Value) -> Result<(), DecodeError> {
        let r = &mut self.reader;
        match (r.peek_u8()?, &mut *slot) {
            (tag::STR, Value::Str(buffer)) => {
                r.u8()?;
                let text = r.str()?;
                buffer.clear();
                buffer.push_str(text);
            }
            (tag::BYTES, Value::Bytes(buffer)) => {
                r.u8()?;
                let bytes = r.length_prefixed()?;
                buffer.clear();
                buffer.extend_from_slice(bytes);
            }
            _ => *slot = self.walk.value(r, 0)?,
        }
        Ok(())
    }
}

/// The most elements reserved ahead of decoding them. A count is only bounded by the remaining
/// input, and nested containers each claiming it would reserve depth x input before failing;
/// reserving little keeps what a hostile input makes the decoder allocate proportional to the
/// values it really holds (vectors grow as items are read).
pub const PREALLOCATE_MAX: usize = 4;

/// 0001-01-01 and 9999-12-31 in days since 1970-01-01: the range of Python's dates.
pub const MIN_DAY: i64 = -719_162;
pub const MAX_DAY: i64 = 2_932_896;

fn checked_tz(r: &mut Reader<'_>, flags: u8, offset: usize) -> Result<TzInfo, DecodeError> {
    let tz = r.tz_suffix(flags)?;
    if let TzInfo::Offset(micros) = tz {
        if micros.unsigned_abs() >= MICROS_PER_DAY {
            return Err(DecodeError::OutOfRange { offset, what: "UTC offset" });
        }
    }
    Ok(tz)
}

/// Generalized UTF-8: UTF-8 in which the surrogate code points U+D800..U+DFFF may also be
/// encoded (each on its own, as three bytes). Overlong forms and values above U+10FFFF are not.
fn is_generalized_utf8(bytes: &[u8]) -> bool {
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let (len, min) = match b {
            0x00..=0x7F => (1, 0),
            0xC2..=0xDF => (2, 0x80),
            0xE0..=0xEF => (3, 0x800),
            0xF0..=0xF4 => (4, 0x10000),
            _ => return false,
        };
        if i + len > bytes.len() {
            return false;
        }
        let mut code = u32::from(b) & (0x7F >> len);
        for &c in &bytes[i + 1..i + len] {
            if c & 0xC0 != 0x80 {
                return false;
            }
            code = (code << 6) | u32::from(c & 0x3F);
        }
        if code < min || code > 0x10FFFF {
            return false;
        }
        i += len;
    }
    true
}

/// The decimal syntax of FORMAT.md: what Python's `str(Decimal)` writes.
pub fn is_decimal_text(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let lower = unsigned.to_ascii_lowercase();
    for special in ["snan", "nan"] {
        if let Some(payload) = lower.strip_prefix(special) {
            return payload.bytes().all(|b| b.is_ascii_digit());
        }
    }
    if lower == "infinity" || lower == "inf" {
        return true;
    }
    let (mantissa, exponent) = match lower.split_once('e') {
        Some((m, e)) => (m, Some(e)),
        None => (lower.as_str(), None),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = digits(int_part) && digits(frac_part) && !(int_part.is_empty() && frac_part.is_empty());
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

impl Value {
    /// Appends the oid of every reference this value holds, at any depth, to `out`.
    pub fn references(&self, out: &mut Vec<Oid>) {
        match self {
            Value::Ref(oid) => out.push(*oid),
            Value::List(items) | Value::Tuple(items) | Value::Set(items) | Value::FrozenSet(items) => {
                items.iter().for_each(|v| v.references(out))
            }
            Value::Dict(pairs) => pairs.iter().for_each(|(k, v)| {
                k.references(out);
                v.references(out);
            }),
            Value::Object { fields, .. } => fields.iter().for_each(|v| v.references(out)),
            Value::Subclass { base, fields, .. } => {
                base.references(out);
                fields.iter().for_each(|v| v.references(out));
            }
            _ => {}
        }
    }

    /// Encodes this value; `BackRef`s are written as they are (the tree mirrors the bytes).
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Value::None => w.u8(tag::NONE),
            Value::Bool(false) => w.u8(tag::FALSE),
            Value::Bool(true) => w.u8(tag::TRUE),
            Value::Int(i) => w.int_i64(*i),
            Value::BigInt(bytes) => w.bigint_le(bytes),
            Value::Float(f) => {
                w.u8(tag::FLOAT);
                w.f64(*f);
            }
            Value::Complex(re, im) => {
                w.u8(tag::COMPLEX);
                w.f64(*re);
                w.f64(*im);
            }
            Value::Str(s) => w.str(s),
            Value::StrSurrogates(b) => tagged_bytes(w, tag::STR_SURROGATES, b),
            Value::Bytes(b) => tagged_bytes(w, tag::BYTES, b),
            Value::ByteArray(b) => tagged_bytes(w, tag::BYTEARRAY, b),
            Value::List(items) => tagged_items(w, tag::LIST, items),
            Value::Tuple(items) => tagged_items(w, tag::TUPLE, items),
            Value::Set(items) => tagged_items(w, tag::SET, items),
            Value::FrozenSet(items) => tagged_items(w, tag::FROZENSET, items),
            Value::Dict(pairs) => {
                w.u8(tag::DICT);
                w.varint(pairs.len() as u64);
                for (k, v) in pairs {
                    k.encode(w);
                    v.encode(w);
                }
            }
            Value::DateTime { micros, tz, fold } => w.datetime(*micros, tz, *fold),
            Value::Date { days } => {
                w.u8(tag::DATE);
                w.zigzag(*days);
            }
            Value::Time { micros, tz, fold } => w.time(*micros, tz, *fold),
            Value::TimeDelta { days, seconds, micros } => {
                w.u8(tag::TIMEDELTA);
                w.zigzag(*days);
                w.varint(*seconds);
                w.varint(*micros);
            }
            Value::Decimal(text) => tagged_bytes(w, tag::DECIMAL, text.as_bytes()),
            Value::Uuid(bytes) => {
                w.u8(tag::UUID);
                w.bytes(bytes);
            }
            Value::Enum { descriptor, member } => {
                w.u8(tag::ENUM);
                w.varint(u64::from(*descriptor));
                w.length_prefixed(member.as_bytes());
            }
            Value::Ref(oid) => w.reference(super::oid::oid_class(*oid), super::oid::oid_seq(*oid)),
            Value::Object { descriptor, fields } => {
                w.u8(tag::OBJECT);
                w.varint(u64::from(*descriptor));
                fields.iter().for_each(|f| f.encode(w));
            }
            Value::Subclass { descriptor, base, fields } => {
                w.u8(tag::SUBCLASS);
                w.varint(u64::from(*descriptor));
                base.encode(w);
                fields.iter().for_each(|f| f.encode(w));
            }
            Value::BackRef(index) => {
                w.u8(tag::BACKREF);
                w.varint(u64::from(*index));
            }
            Value::StrRef(slot) => {
                w.u8(tag::STRREF);
                w.varint(u64::from(*slot));
            }
            Value::SupersededTuple { items, by } => superseded_copy(w, tag::SUPERSEDED_TUPLE, items, *by),
            Value::SupersededFrozenSet { items, by } => superseded_copy(w, tag::SUPERSEDED_FROZENSET, items, *by),
        }
    }

    /// Python-compatible equality for query predicates: numbers compare by value across int,
    /// float and bool; everything else compares structurally.
    pub fn query_eq(&self, other: &Value) -> bool {
        match (self.as_number(), other.as_number()) {
            (Some(a), Some(b)) => a == b,
            _ => match (self, other) {
                (Value::Tuple(a), Value::Tuple(b)) | (Value::List(a), Value::List(b)) => {
                    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.query_eq(y))
                }
                _ => self == other,
            },
        }
    }

    fn as_number(&self) -> Option<Number> {
        match self {
            Value::Bool(b) => Some(Number::Int(i128::from(*b))),
            Value::Int(i) => Some(Number::Int(i128::from(*i))),
            Value::Float(f) => Some(Number::Float(*f)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy)]
enum Number {
    Int(i128),
    Float(f64),
}

impl PartialEq for Number {
    fn eq(&self, other: &Self) -> bool {
        match (*self, *other) {
            (Number::Int(a), Number::Int(b)) => a == b,
            (Number::Float(a), Number::Float(b)) => a == b,
            (Number::Int(i), Number::Float(f)) | (Number::Float(f), Number::Int(i)) => {
                f.fract() == 0.0 && (-1.8e19..=1.8e19).contains(&f) && (f as i128) == i
            }
        }
    }
}

fn tagged_bytes(w: &mut Writer, t: u8, data: &[u8]) {
    w.u8(t);
    w.length_prefixed(data);
}

fn tagged_items(w: &mut Writer, t: u8, items: &[Value]) {
    w.u8(t);
    w.varint(items.len() as u64);
    items.iter().for_each(|v| v.encode(w));
}

fn superseded_copy(w: &mut Writer, t: u8, items: &[Value], by: u32) {
    tagged_items(w, t, items);
    w.varint(u64::from(by));
}

#[cfg(test)]
mod tests;
