//! Parsing: JSON text into `Json` values, and the pieces the one-pass reader (json_body.rs)
//! parses with.

use std::borrow::Cow;

use super::strings::escape_marks;
use super::MAX_JSON_DEPTH;
use crate::format::Value;
use crate::text::{TextError, TreeBudget};

/// What a parsed JSON value costs `TreeBudget`: itself and the value it becomes, twice over for
/// the spare room of the vectors that hold them.
pub(super) const JSON_NODE: usize = 2 * (size_of::<Json<'static>>() + size_of::<Value>());

/// A parsed JSON value; numbers keep their text so that integers of any size survive.
#[derive(Debug)]
pub(in crate::text) enum Json<'a> {
    Null,
    Bool(bool),
    Number(&'a str),
    Str(String),
    Array(Vec<Json<'a>>),
    Object(Vec<(String, Json<'a>)>),
}

pub(in crate::text) struct Parser<'a> {
    pub(in crate::text) text: &'a str,
    pub(in crate::text) at: usize,
    /// What the values `value` parses may still take.
    pub(in crate::text) budget: TreeBudget,
}

impl<'a> Parser<'a> {
    pub(super) fn fail(&self, message: &str) -> TextError {
        TextError::Syntax { offset: self.at, message: message.to_owned() }
    }

    pub(in crate::text) fn ws(&mut self) {
        let bytes = self.text.as_bytes();
        while self.at < bytes.len() && matches!(bytes[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    pub(in crate::text) fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    pub(in crate::text) fn expect(&mut self, c: u8) -> Result<(), TextError> {
        self.ws();
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.fail(&format!("expected '{}'", c as char)))
        }
    }

    pub(in crate::text) fn value(&mut self, depth: usize) -> Result<Json<'a>, TextError> {
        if depth > MAX_JSON_DEPTH {
            return Err(self.fail("nested too deeply"));
        }
        self.budget.charge(JSON_NODE)?;
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

    pub(in crate::text) fn literal(&mut self, word: &str, value: Json<'a>) -> Result<Json<'a>, TextError> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.fail("expected a value"))
        }
    }

    /// A number in RFC 8259 syntax, kept as text.
    pub(in crate::text) fn number(&mut self) -> Result<Json<'a>, TextError> {
        match self.number_text() {
            Some((text, _)) => Ok(Json::Number(text)),
            None => Err(self.fail("malformed number")),
        }
    }

    /// The text of a number in RFC 8259 syntax and whether it has a fraction or an exponent;
    /// None, the parser where it was, if no number starts here.
    pub(in crate::text) fn number_text(&mut self) -> Option<(&'a str, bool)> {
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
    pub(in crate::text) fn plain_string(&mut self) -> Option<&'a str> {
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
    pub(in crate::text) fn string_text(&mut self) -> Result<Cow<'a, str>, TextError> {
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
    crate::text::has_duplicate(members, |(key, _)| key)
}
