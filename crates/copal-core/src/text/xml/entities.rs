//! Entity and character references: the escaping of text and attribute values as they are
//! written, and the replacing of references as they are read.

use crate::text::{mapping, TextError};

/// Characters XML 1.0 allows in a document (its production `Char`), minus carriage returns,
/// which parsers turn into line feeds unless escaped (copal escapes them).
pub(super) fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Whether `s` is printable ASCII without markup characters: text that `escape_into` copies as
/// it is (most strings, checked at a byte a step instead of a character).
pub(super) fn is_plain_text(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, 0x20..=0x7E) && !matches!(b, b'<' | b'>' | b'&' | b'"'))
}

/// Text or attribute content: markup characters as entities, and tab, line feed and carriage
/// return as character references (attribute-value normalization would turn them into spaces).
/// A character XML 1.0 does not allow, even as a reference, is an error (strings holding one are
/// written in base64 instead; names and enum members have no other form in XML).
pub(super) fn escape_into(out: &mut String, s: &str) -> Result<(), TextError> {
    if is_plain_text(s) {
        out.push_str(s);
        return Ok(());
    }
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\t' => out.push_str("&#9;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c if !is_xml_char(c) => {
                return Err(mapping(format!("{s:?} holds U+{:04X}, which XML 1.0 cannot carry (JSON can)", c as u32)));
            }
            c => out.push(c),
        }
    }
    Ok(())
}

/// Character data with its entity and character references replaced.
pub(in crate::text) fn unescape(raw: &str) -> Result<String, &'static str> {
    if !raw.contains('&') {
        return Ok(raw.to_owned());
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let end = rest[at..].find(';').ok_or("unterminated reference")?;
        let name = &rest[at + 1..at + end];
        let c = match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                // XML's CharRef: digits only (Rust's parsers also take a leading `+`).
                let code = if let Some(hex) = name.strip_prefix("#x").filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit())) {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(dec) = name.strip_prefix('#').filter(|dec| dec.bytes().all(|b| b.is_ascii_digit())) {
                    dec.parse().ok()
                } else {
                    None
                };
                let c = code.and_then(char::from_u32).ok_or("unknown reference")?;
                if !is_xml_char(c) {
                    return Err("a character reference to a character XML 1.0 does not allow");
                }
                c
            }
        };
        out.push(c);
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
