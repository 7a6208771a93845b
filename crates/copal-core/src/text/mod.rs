//! Text forms of standalone streams (docs/TEXT_FORMATS.md): the body of a stream (docs/STREAM.md
//! section 4, a descriptor table and one value) transcoded to and from JSON and XML. Working on the
//! body keeps every Python conversion in the binding's record codec: `copal.dumps(obj,
//! format="json")` encodes the graph as a binary body and transcodes it here, and `copal.loads`
//! of JSON transcodes it back to a body and decodes that.

pub mod base64;
mod bigint;
pub mod clock;
pub mod json;
mod body_out;
mod json_body;
mod tree;
mod xml_body;
pub mod xml;

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

use crate::format::{DecodeError, DescriptorSource, Reader, Value, Writer};

/// Why a text document could not be transcoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TextError {
    /// The text is not well-formed JSON or XML.
    Syntax { offset: usize, message: String },
    /// Well-formed JSON that does not follow the mapping of docs/TEXT_FORMATS.md.
    Mapping { message: String },
    /// The binary body being written as text is malformed.
    Body(DecodeError),
    /// The document is read through trees (it is not laid out as copal writes it) that would
    /// take more than `limit` bytes of memory (`TreeBudget`).
    TooLarge { limit: usize },
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax { offset, message } => write!(f, "malformed text at byte {offset}: {message}"),
            Self::Mapping { message } => write!(f, "not a copal document: {message}"),
            Self::Body(e) => write!(f, "corrupt stream body: {e}"),
            Self::TooLarge { limit } => {
                write!(f, "it is not laid out as copal writes it, and reading it so would take more than {limit} bytes of memory")
            }
        }
    }
}

impl std::error::Error for TextError {}

impl From<DecodeError> for TextError {
    fn from(e: DecodeError) -> Self {
        TextError::Body(e)
    }
}

/// Where the text writers put their text: a `String`, or a buffer its owner allocates, so that
/// the text can be written where it is wanted in the end (the binding writes a JSON document
/// straight into the bytes object it returns, which spares copying the whole document once more).
///
/// # Safety
/// After `reserve(additional)`, `end()` must point to at least `additional` writable bytes past
/// the text (and at any time to at least `room()` bytes), which belong to the buffer and stay
/// where they are until the next `reserve`; the writers store into them through that pointer
/// and then `advance` over what they stored.
pub unsafe trait TextOut {
    /// Bytes of text written so far.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes room for `additional` more bytes.
    fn reserve(&mut self, additional: usize);

    /// Bytes that can be stored at `end()` now, without a `reserve`.
    fn room(&self) -> usize;

    /// Where the next byte goes: just past the text.
    fn end(&mut self) -> *mut u8;

    /// Takes `n` bytes stored at `end()` into the text.
    ///
    /// # Safety
    /// The `n` bytes must have been reserved and stored, and keep the text UTF-8.
    unsafe fn advance(&mut self, n: usize);

    /// Appends `text`.
    #[inline]
    fn push_str(&mut self, text: &str) {
        self.reserve(text.len());
        // SAFETY: `text.len()` bytes were reserved; a whole str keeps the text UTF-8.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), self.end(), text.len());
            self.advance(text.len());
        }
    }

    /// Appends `c`.
    #[inline(always)]
    fn push(&mut self, c: char) {
        if c.is_ascii() {
            self.reserve(1);
            // SAFETY: one byte was reserved, and an ASCII byte keeps the text UTF-8.
            unsafe {
                *self.end() = c as u8;
                self.advance(1);
            }
        } else {
            self.push_str(c.encode_utf8(&mut [0; 4]));
        }
    }

    /// Appends formatted text (`out.push_fmt(format_args!(...))`).
    fn push_fmt(&mut self, args: fmt::Arguments<'_>) {
        struct Adapter<'a, O: ?Sized>(&'a mut O);
        impl<O: TextOut + ?Sized> fmt::Write for Adapter<'_, O> {
            fn write_str(&mut self, text: &str) -> fmt::Result {
                self.0.push_str(text);
                Ok(())
            }
        }
        // Writing into the buffer cannot fail, and the formatting of numbers does not either.
        let _ = fmt::Write::write_fmt(&mut Adapter(self), args);
    }
}

// SAFETY: `reserve` is `String::reserve`, after which the spare capacity past the length holds
// at least `additional` bytes, and `advance` sets the length over bytes stored there.
unsafe impl TextOut for String {
    #[inline]
    fn len(&self) -> usize {
        String::len(self)
    }

    #[inline]
    fn reserve(&mut self, additional: usize) {
        String::reserve(self, additional);
    }

    #[inline]
    fn room(&self) -> usize {
        self.capacity() - String::len(self)
    }

    #[inline]
    fn end(&mut self) -> *mut u8 {
        // SAFETY: only the pointer is taken; `advance`'s caller keeps the text UTF-8.
        unsafe {
            let vec = self.as_mut_vec();
            vec.as_mut_ptr().add(vec.len())
        }
    }

    #[inline]
    unsafe fn advance(&mut self, n: usize) {
        // SAFETY: the caller stored `n` reserved bytes past the length, keeping the text UTF-8.
        unsafe {
            let vec = self.as_mut_vec();
            vec.set_len(vec.len() + n);
        }
    }

    #[inline]
    fn push_str(&mut self, text: &str) {
        String::push_str(self, text);
    }

    #[inline]
    fn push(&mut self, c: char) {
        String::push(self, c);
    }
}

/// What the trees a reader builds for a document may still take, in bytes. A document laid out
/// as copal writes it is read in one pass, into the bytes of its body; any other is parsed into
/// a tree of its text (`Json`, `Element`) and then into one of its values (`Value`): tens of
/// bytes per value where the text may have two, so a reader of untrusted text bounds them.
/// Each node is charged when it is parsed, for itself, the value it becomes and the spare room
/// of the vectors that hold them (`JSON_NODE`, `XML_NODE`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TreeBudget {
    left: usize,
    limit: usize,
}

impl TreeBudget {
    pub(crate) fn new(limit: usize) -> Self {
        TreeBudget { left: limit, limit }
    }

    pub(crate) fn charge(&mut self, bytes: usize) -> Result<(), TextError> {
        self.left = self.left.checked_sub(bytes).ok_or(TextError::TooLarge { limit: self.limit })?;
        Ok(())
    }
}

pub(crate) fn mapping(message: impl Into<String>) -> TextError {
    TextError::Mapping { message: message.into() }
}

/// Whether two of `items` have the same `key`.
pub(crate) fn has_duplicate<T>(items: &[T], key: impl Fn(&T) -> &str) -> bool {
    if items.len() <= 8 {
        return items.iter().enumerate().any(|(i, item)| items[..i].iter().any(|other| key(other) == key(item)));
    }
    let mut keys: Vec<&str> = items.iter().map(key).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

/// Descriptor-entry flag of docs/STREAM.md section 4: a persistent class stored by value.
pub const PERSISTENT: u8 = 0x01;

/// One entry of a stream's descriptor table (docs/STREAM.md section 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableEntry {
    pub persistent: bool,
    pub type_name: String,
    pub fields: Vec<String>,
}

/// A stream body: its descriptor table and its value, whose OBJECT, SUBCLASS and ENUM values
/// name entries by position.
#[derive(Debug, Clone, PartialEq)]
pub struct Body {
    pub table: Vec<TableEntry>,
    pub value: Value,
}

struct Table<'a>(&'a [TableEntry]);

impl DescriptorSource for Table<'_> {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        self.0.get(id as usize).map(|e| e.fields.len()).ok_or(DecodeError::UnknownDescriptor { id })
    }
}

/// Whether `bytes` may be the text of a STR_SURROGATES value: generalized UTF-8 (FORMAT.md),
/// checked by the binary decoder itself, so that the text readers refuse exactly what no body
/// could hold (`$surrogates`, `<surrogates>`).
pub(crate) fn is_surrogates_text(bytes: &[u8]) -> bool {
    let mut w = Writer { buf: Vec::with_capacity(bytes.len() + 11) };
    w.u8(crate::format::tag::STR_SURROGATES);
    w.length_prefixed(bytes);
    let mut r = Reader::new(&w.buf);
    crate::format::decode_value(&mut r, &Table(&[])).is_ok() && r.is_empty()
}

/// Reads the descriptor table at the start of a stream body (docs/STREAM.md section 4).
pub fn read_table(r: &mut Reader<'_>) -> Result<Vec<TableEntry>, DecodeError> {
    let count = r.length(1)?;
    let mut table = Vec::with_capacity(count.min(crate::format::PREALLOCATE_MAX));
    for _ in 0..count {
        let offset = r.position();
        let flags = r.u8()?;
        if flags & !PERSISTENT != 0 {
            return Err(DecodeError::OutOfRange { offset, what: "descriptor flags" });
        }
        let type_name = r.str()?.to_owned();
        let n = r.length(1)?;
        let fields = (0..n).map(|_| r.str().map(str::to_owned)).collect::<Result<_, _>>()?;
        table.push(TableEntry { persistent: flags & PERSISTENT != 0, type_name, fields });
    }
    Ok(table)
}

impl Body {
    /// Decodes the body of a text document (a version 1 stream body whose SUBCLASS values may
    /// have a BYTEARRAY base, docs/TEXT_FORMATS.md section 3), which must end with its value.
    pub fn decode(body: &[u8]) -> Result<Body, DecodeError> {
        let mut r = Reader::new(body);
        let table = read_table(&mut r)?;
        let value = crate::format::decode_document_value(&mut r, &Table(&table))?;
        r.expect_end()?;
        Ok(Body { table, value })
    }

    /// The descriptor table and the bytes of the value, apart.
    pub fn apart(self) -> (Vec<TableEntry>, Vec<u8>) {
        let mut w = Writer::new();
        self.value.encode(&mut w);
        (self.table, w.buf)
    }

    /// The body's bytes (docs/STREAM.md section 4).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        write_table(&mut w, &self.table);
        self.value.encode(&mut w);
        w.buf
    }
}

/// The stream body made of `table` and then `value`, the bytes of its value.
pub(crate) fn body_of(table: &[TableEntry], value: &[u8]) -> Vec<u8> {
    let mut body = Writer { buf: Vec::with_capacity(value.len() + 64) };
    write_table(&mut body, table);
    body.bytes(value);
    body.buf
}

/// Writes a stream body's descriptor table (docs/STREAM.md section 4).
pub fn write_table(w: &mut Writer, table: &[TableEntry]) {
    w.varint(table.len() as u64);
    for entry in table {
        w.u8(if entry.persistent { PERSISTENT } else { 0 });
        w.length_prefixed(entry.type_name.as_bytes());
        w.varint(entry.fields.len() as u64);
        for field in &entry.fields {
            w.length_prefixed(field.as_bytes());
        }
    }
}

/// The class names a document has met, numbered in the order they were first met
/// (docs/TEXT_FORMATS.md section 2.1): how the JSON and XML readers number them, and how the
/// writers (the transcoder's and the binding's) decide between a name and its number.
#[derive(Default)]
pub struct ClassNumbers {
    names: Vec<String>,
    numbers: Positions<String>,
}

impl ClassNumbers {
    /// The number of the class named `name`, the next one if it is new.
    pub fn number(&mut self, name: &str) -> usize {
        self.number_or_new(name).unwrap_or_else(|number| number)
    }

    /// `Ok` with the number of the class named `name` if the document named it before, else
    /// `Err` with the number it takes now: a writer writes the number in the first case and
    /// the name in the second.
    pub fn number_or_new(&mut self, name: &str) -> Result<usize, usize> {
        if let Some(number) = self.numbers.find(&self.names, |known| known == name, || name.to_owned()) {
            return Ok(number);
        }
        self.names.push(name.to_owned());
        self.numbers.added(&self.names, String::clone);
        Err(self.names.len() - 1)
    }

    /// Forgets the names numbered `len` and after, which the next names take again.
    pub fn truncate(&mut self, len: usize) {
        self.names.truncate(len);
        self.numbers.truncate(len);
    }

    /// The name of class `number`, which `number` gave.
    pub(crate) fn name(&self, number: usize) -> &str {
        &self.names[number]
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

/// Up to this many items, `Positions` searches them: that costs less than hashing a key (and
/// building it), and most documents name a few classes and descriptors, each read on its own
/// (an export is a document per record).
const SEARCHED: usize = 8;

/// The positions of the items of a list that only grows, by key: searched while there are few,
/// indexed when there are more.
pub(crate) struct Positions<K>(HashMap<K, usize>);

impl<K> Default for Positions<K> {
    fn default() -> Self {
        Positions(HashMap::new())
    }
}

impl<K: Hash + Eq> Positions<K> {
    /// The position of the item of `items` that `matches`, whose key `key` gives.
    pub(crate) fn find<T>(&self, items: &[T], matches: impl Fn(&T) -> bool, key: impl FnOnce() -> K) -> Option<usize> {
        match items.len() <= SEARCHED {
            true => items.iter().position(matches),
            false => self.0.get(&key()).copied(),
        }
    }

    /// Forgets the items from position `len` on, which were taken off the list.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.0.retain(|_, position| *position < len);
    }

    /// Takes in the last item of `items`, just added; `key` gives an item's key.
    pub(crate) fn added<T>(&mut self, items: &[T], key: impl Fn(&T) -> K) {
        let n = items.len();
        if n == SEARCHED + 1 {
            self.0.extend(items.iter().enumerate().map(|(i, item)| (key(item), i)));
        } else if n > SEARCHED {
            self.0.insert(key(&items[n - 1]), n - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_numbers_are_found_whether_searched_or_indexed() {
        let mut classes = ClassNumbers::default();
        let names: Vec<String> = (0..3 * SEARCHED).map(|i| format!("m.C{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            assert_eq!(classes.number(name), i);
            // Every name met so far keeps its number, on both sides of the switch to the index.
            for (j, earlier) in names[..=i].iter().enumerate() {
                assert_eq!(classes.number(earlier), j);
            }
        }
        assert_eq!((classes.len(), classes.name(SEARCHED + 1)), (names.len(), names[SEARCHED + 1].as_str()));
    }
}
