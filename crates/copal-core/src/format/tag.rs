//! Value tags: the first byte of every encoded value (docs/FORMAT.md section "Value tags").
//! Tags marked "memo" take the next memo slot of their record when they start, so that a later
//! BACKREF can point to them (shared references and cycles).

pub const NONE: u8 = 0x00;
pub const FALSE: u8 = 0x01;
pub const TRUE: u8 = 0x02;
pub const INT: u8 = 0x03;
pub const BIGINT: u8 = 0x04;
pub const FLOAT: u8 = 0x05;
pub const COMPLEX: u8 = 0x06;
pub const STR: u8 = 0x07;
pub const STR_SURROGATES: u8 = 0x08;
pub const BYTES: u8 = 0x09;
/// memo
pub const BYTEARRAY: u8 = 0x0A;
/// memo
pub const LIST: u8 = 0x0B;
/// memo
pub const TUPLE: u8 = 0x0C;
/// memo
pub const DICT: u8 = 0x0D;
/// memo
pub const SET: u8 = 0x0E;
/// memo
pub const FROZENSET: u8 = 0x0F;
pub const DATETIME: u8 = 0x10;
pub const DATE: u8 = 0x11;
pub const TIME: u8 = 0x12;
pub const TIMEDELTA: u8 = 0x13;
pub const DECIMAL: u8 = 0x14;
pub const UUID: u8 = 0x15;
pub const ENUM: u8 = 0x16;
pub const REF: u8 = 0x17;
/// memo
pub const OBJECT: u8 = 0x18;
/// memo
pub const SUBCLASS: u8 = 0x19;
pub const BACKREF: u8 = 0x1A;
/// A string written earlier in the same stream: stream version 2 only (docs/STREAM.md section
/// 5), never in a record or an archive.
pub const STRREF: u8 = 0x1B;
/// memo. An object whose fields are written in the forms of its descriptor's field kinds
/// (`FieldKind`): stream version 3 only (docs/STREAM.md section 5).
pub const TYPED_OBJECT: u8 = 0x1C;
/// memo. A list of TYPED_OBJECT bodies of one descriptor, each taking a memo slot after the
/// list's: stream version 3 only (docs/STREAM.md section 5).
pub const OBJECT_LIST: u8 = 0x1D;
/// memo. A TUPLE (as a value, or as the base of a SUBCLASS) superseded by a copy of it written
/// inside its items, whose memo slot follows the items: stream version 4 only (docs/STREAM.md
/// section 5).
pub const SUPERSEDED_TUPLE: u8 = 0x1E;
/// memo. SUPERSEDED_TUPLE for a FROZENSET.
pub const SUPERSEDED_FROZENSET: u8 = 0x1F;

/// The tag that replaces TUPLE or FROZENSET `tag` when its copy is superseded.
pub const fn superseded(tag: u8) -> u8 {
    if tag == TUPLE { SUPERSEDED_TUPLE } else { SUPERSEDED_FROZENSET }
}

/// Whether a value with this tag takes a memo slot.
pub const fn takes_memo_slot(tag: u8) -> bool {
    matches!(tag, BYTEARRAY | LIST | TUPLE | DICT | SET | FROZENSET | OBJECT | SUBCLASS)
}

/// Time-zone flags of DATETIME and TIME values.
pub const TZ_FOLD: u8 = 0x01;
pub const TZ_OFFSET: u8 = 0x02;
pub const TZ_NAMED: u8 = 0x04;
pub const TZ_KNOWN_FLAGS: u8 = TZ_FOLD | TZ_OFFSET | TZ_NAMED;
