use std::fmt;

/// Why bytes could not be decoded as copal data. Every decoder in copal returns this instead of
/// panicking, whatever the input (docs/FORMAT.md section "Decoder limits").
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended inside a value; `needed` more bytes were expected at `offset`.
    Truncated { offset: usize, needed: usize },
    /// A tag byte that this format version does not define.
    UnknownTag { offset: usize, tag: u8 },
    /// A varint longer than 10 bytes or overflowing 64 bits.
    BadVarint { offset: usize },
    /// A length or count that cannot fit in the remaining input.
    LengthTooLarge { offset: usize, length: u64 },
    /// Nesting deeper than the configured limit.
    TooDeep { limit: usize },
    /// A string that is not valid UTF-8 (or generalized UTF-8 for tag STR_SURROGATES).
    BadUtf8 { offset: usize },
    /// The record header names a format version this build cannot read.
    UnsupportedVersion { version: u8 },
    /// A descriptor id that the database does not define.
    UnknownDescriptor { id: u32 },
    /// A back-reference to a memo slot that does not exist (yet).
    BadBackRef { offset: usize, index: u64 },
    /// Bytes left over after the last value of a record.
    TrailingBytes { offset: usize },
    /// The record's checksum does not match its bytes (damage on disk).
    ChecksumMismatch,
    /// A value that is syntactically valid but out of range (bad date, bad UUID length, ...).
    OutOfRange { offset: usize, what: &'static str },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { offset, needed } => {
                write!(f, "input truncated at byte {offset}: {needed} more byte(s) expected")
            }
            Self::UnknownTag { offset, tag } => write!(f, "unknown tag 0x{tag:02x} at byte {offset}"),
            Self::BadVarint { offset } => write!(f, "malformed varint at byte {offset}"),
            Self::LengthTooLarge { offset, length } => {
                write!(f, "length {length} at byte {offset} exceeds the remaining input")
            }
            Self::TooDeep { limit } => write!(f, "values nested deeper than {limit} levels"),
            Self::BadUtf8 { offset } => write!(f, "invalid UTF-8 in string at byte {offset}"),
            Self::UnsupportedVersion { version } => write!(
                f,
                "record format version {version} is not supported by this copal (reads version 1)"
            ),
            Self::UnknownDescriptor { id } => write!(f, "unknown class descriptor {id}"),
            Self::BadBackRef { offset, index } => {
                write!(f, "back-reference to undefined memo slot {index} at byte {offset}")
            }
            Self::TrailingBytes { offset } => write!(f, "unexpected bytes after the last value at byte {offset}"),
            Self::OutOfRange { offset, what } => write!(f, "{what} out of range at byte {offset}"),
            Self::ChecksumMismatch => write!(f, "checksum mismatch: the stored bytes were damaged"),
        }
    }
}

impl DecodeError {
    /// The error's kind, as docs/FORMAT.md section 9 and the test vectors name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Truncated { .. } => "Truncated",
            Self::UnknownTag { .. } => "UnknownTag",
            Self::BadVarint { .. } => "BadVarint",
            Self::LengthTooLarge { .. } => "LengthTooLarge",
            Self::TooDeep { .. } => "TooDeep",
            Self::BadUtf8 { .. } => "BadUtf8",
            Self::UnsupportedVersion { .. } => "UnsupportedVersion",
            Self::UnknownDescriptor { .. } => "UnknownDescriptor",
            Self::BadBackRef { .. } => "BadBackRef",
            Self::TrailingBytes { .. } => "TrailingBytes",
            Self::ChecksumMismatch => "ChecksumMismatch",
            Self::OutOfRange { .. } => "OutOfRange",
        }
    }
}

impl std::error::Error for DecodeError {}
