//! Field kinds of stream version 3 (docs/STREAM.md sections 4 and 5): the form in which a
//! TYPED_OBJECT writes each field of its descriptor, without a tag when the kind says which
//! value type the field holds.

use super::error::DecodeError;
use super::reader::Reader;
use super::tag;

/// How a field of a TYPED_OBJECT is written. The byte of each kind is the tag of the value type
/// it stands for (0 for `Any`), so that the descriptor table reads like the values it describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A tagged value, as in an OBJECT.
    Any,
    /// An INT without its tag: the zigzag varint.
    Int,
    /// A FLOAT without its tag: 8 bytes.
    Float,
    /// A string: a varint `h`, then for even `h` the `h / 2` bytes of a new string (which takes
    /// the next string slot), for odd `h` the string of slot `h / 2` (`StrHead`).
    Str,
    /// A list: a varint `h` whose low two bits say what follows (`ListHead`).
    List,
}

impl FieldKind {
    pub const fn byte(self) -> u8 {
        match self {
            FieldKind::Any => 0,
            FieldKind::Int => tag::INT,
            FieldKind::Float => tag::FLOAT,
            FieldKind::Str => tag::STR,
            FieldKind::List => tag::LIST,
        }
    }

    pub const fn from_byte(byte: u8) -> Option<FieldKind> {
        Some(match byte {
            0 => FieldKind::Any,
            tag::INT => FieldKind::Int,
            tag::FLOAT => FieldKind::Float,
            tag::STR => FieldKind::Str,
            tag::LIST => FieldKind::List,
            _ => return None,
        })
    }
}

/// The head of a `FieldKind::Str` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrHead {
    /// A new string of this many UTF-8 bytes follows.
    New(u64),
    /// The string of an earlier string slot.
    Slot(u64),
}

impl StrHead {
    pub fn encode(self) -> u64 {
        match self {
            StrHead::New(len) => len << 1,
            StrHead::Slot(slot) => (slot << 1) | 1,
        }
    }

    pub fn decode(h: u64) -> StrHead {
        if h & 1 == 0 { StrHead::New(h >> 1) } else { StrHead::Slot(h >> 1) }
    }
}

/// The head of a `FieldKind::List` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListHead {
    /// A list of this many tagged items (as LIST).
    Items(u64),
    /// A list of this many objects of one descriptor (as OBJECT_LIST: the descriptor id and the
    /// typed bodies follow).
    Objects(u64),
    /// A list written before: a back-reference to this memo slot.
    Backref(u64),
}

const LIST_ITEMS: u64 = 0;
const LIST_OBJECTS: u64 = 1;
const LIST_BACKREF: u64 = 2;

impl ListHead {
    pub fn encode(self) -> u64 {
        match self {
            ListHead::Items(n) => (n << 2) | LIST_ITEMS,
            ListHead::Objects(n) => (n << 2) | LIST_OBJECTS,
            ListHead::Backref(slot) => (slot << 2) | LIST_BACKREF,
        }
    }

    /// Reads the head; the mode 3 is reserved (`OutOfRange`).
    pub fn read(r: &mut Reader<'_>) -> Result<ListHead, DecodeError> {
        let offset = r.position();
        let h = r.varint()?;
        match h & 3 {
            LIST_ITEMS => Ok(ListHead::Items(h >> 2)),
            LIST_OBJECTS => Ok(ListHead::Objects(h >> 2)),
            LIST_BACKREF => Ok(ListHead::Backref(h >> 2)),
            _ => Err(DecodeError::OutOfRange { offset, what: "list form" }),
        }
    }
}

/// Reads the field kinds of a version 3 descriptor table (docs/STREAM.md section 4): one byte per
/// field of each entry, in table order; `field_counts` are the entries' field counts.
pub fn read_field_kinds(r: &mut Reader<'_>, field_counts: impl IntoIterator<Item = usize>) -> Result<Vec<Vec<FieldKind>>, DecodeError> {
    field_counts
        .into_iter()
        .map(|count| {
            let offset = r.position();
            let bytes = r.bytes(count)?;
            bytes
                .iter()
                .enumerate()
                .map(|(i, &byte)| FieldKind::from_byte(byte).ok_or(DecodeError::OutOfRange { offset: offset + i, what: "field kind" }))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_bytes() {
        for kind in [FieldKind::Any, FieldKind::Int, FieldKind::Float, FieldKind::Str, FieldKind::List] {
            assert_eq!(FieldKind::from_byte(kind.byte()), Some(kind));
        }
        assert_eq!(FieldKind::from_byte(tag::OBJECT), None);
    }

    #[test]
    fn heads_round_trip() {
        for head in [StrHead::New(0), StrHead::New(9), StrHead::Slot(0), StrHead::Slot(1 << 40)] {
            assert_eq!(StrHead::decode(head.encode()), head);
        }
        for head in [ListHead::Items(0), ListHead::Items(70), ListHead::Objects(2), ListHead::Backref(5)] {
            let mut w = super::super::Writer::new();
            w.varint(head.encode());
            assert_eq!(ListHead::read(&mut Reader::new(&w.buf)), Ok(head));
        }
    }

    #[test]
    fn reserved_list_form_and_unknown_kinds_are_errors() {
        assert!(matches!(ListHead::read(&mut Reader::new(&[0x03])), Err(DecodeError::OutOfRange { .. })));
        assert!(matches!(read_field_kinds(&mut Reader::new(&[0x03, 0x18]), [2]), Err(DecodeError::OutOfRange { offset: 1, .. })));
        assert!(matches!(read_field_kinds(&mut Reader::new(&[0x03]), [2]), Err(DecodeError::Truncated { .. })));
        assert_eq!(read_field_kinds(&mut Reader::new(&[0x07, 0x00, 0x0b]), [1, 0, 2]), Ok(vec![vec![FieldKind::Str], vec![], vec![FieldKind::Any, FieldKind::List]]));
    }
}
