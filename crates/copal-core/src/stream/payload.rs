//! What a payload handed to `copal.loads` or `copal import` is, told by its first bytes: a
//! compression frame, a JSON or XML document (docs/TEXT_FORMATS.md), or binary (a stream,
//! an archive, a binary export: each checks its own magic bytes).

use super::compression::Codec;

/// The blanks JSON and XML allow before a document (RFC 8259 section 2, XML 1.0 production S).
pub const BLANKS: &[u8] = b" \t\n\r";

/// The kinds of payload, by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// A zstd, gzip or LZ4 frame (the frame's magic bytes).
    Compressed(Codec),
    /// A JSON document: `{` after blanks.
    Json,
    /// An XML document: `<` after blanks.
    Xml,
    /// Anything else.
    Binary,
}

impl Payload {
    /// The kind of a payload that starts with `head` (at least four bytes of it, unless the
    /// payload is shorter, so that frames are told apart); None while `head` holds only
    /// blanks, since a document may follow.
    pub fn of(head: &[u8]) -> Option<Payload> {
        if let Some(codec) = Codec::of_frame(head) {
            return Some(Payload::Compressed(codec));
        }
        Some(match head.iter().find(|b| !BLANKS.contains(b))? {
            b'{' => Payload::Json,
            b'<' => Payload::Xml,
            _ => Payload::Binary,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_told_by_their_first_bytes() {
        assert_eq!(Payload::of(&[0x28, 0xb5, 0x2f, 0xfd, 0]), Some(Payload::Compressed(Codec::Zstd)));
        assert_eq!(Payload::of(&[0x1f, 0x8b, 8]), Some(Payload::Compressed(Codec::Gzip)));
        assert_eq!(Payload::of(&[0x04, 0x22, 0x4d, 0x18]), Some(Payload::Compressed(Codec::Lz4)));
        assert_eq!(Payload::of(b" \r\n\t{\"$copal\":2"), Some(Payload::Json));
        assert_eq!(Payload::of(b"\n<copal"), Some(Payload::Xml));
        assert_eq!(Payload::of(b"CPL1\x04\x00"), Some(Payload::Binary));
        assert_eq!(Payload::of(b"\x0c{"), Some(Payload::Binary));
        assert_eq!(Payload::of(b" \n"), None);
        assert_eq!(Payload::of(b""), None);
    }
}
