//! The XML form of a stream body (docs/TEXT_FORMATS.md section 6): `<copal version="1">`
//! around one element per value, named by its type.

use std::collections::HashSet;
use std::fmt::Write as _;

pub use super::xml_body::{body_from_xml, table_and_value_from_xml};
use super::tree::{zone as zone_of, TreeBuilder};
use super::{base64, bigint, clock, mapping, Body, Table, TableEntry, TextError};
use crate::format::{decode_document_value, is_decimal_text, DecodeError, Reader, TzInfo, Value};

/// The version of the XML mapping, written as the `version` attribute of the root.
pub const XML_VERSION: &str = "1";

/// Element nesting allowed on input: a value of depth 256 (FORMAT.md's limit) takes at most two
/// element levels per value level (`<field>` around a value), plus the root.
pub(super) const MAX_XML_DEPTH: usize = 2 * 256 + 8;

// -- writing ------------------------------------------------------------------------------------

/// The XML document of a stream body.
pub fn to_xml(body: &[u8]) -> Result<String, TextError> {
    let body = Body::decode(body)?;
    write_document(&body.table, &body.value)
}

/// The XML document of the stream body made of `table` and then `value` (the bytes of its
/// value), for a writer that keeps the table it already has.
pub fn value_to_xml(table: &[TableEntry], value: &[u8]) -> Result<String, TextError> {
    let mut r = Reader::new(value);
    let value = decode_document_value(&mut r, &Table(table))?;
    r.expect_end()?;
    write_document(table, &value)
}

fn write_document(table: &[TableEntry], value: &Value) -> Result<String, TextError> {
    let mut targets = HashSet::new();
    back_ref_targets(value, &mut targets);
    let mut w = XmlWriter { out: String::with_capacity(256), table, targets, slot: 0, in_base: false };
    w.out.push_str("<copal version=\"1\">");
    w.value(value)?;
    w.out.push_str("</copal>");
    Ok(w.out)
}

/// The memo slots that back-references point to: only those get an `id`.
fn back_ref_targets(value: &Value, out: &mut HashSet<u32>) {
    match value {
        Value::BackRef(slot) => {
            out.insert(*slot);
        }
        Value::List(items) | Value::Tuple(items) | Value::Set(items) | Value::FrozenSet(items) => {
            items.iter().for_each(|v| back_ref_targets(v, out));
        }
        Value::Dict(pairs) => pairs.iter().for_each(|(k, v)| {
            back_ref_targets(k, out);
            back_ref_targets(v, out);
        }),
        Value::Object { fields, .. } => fields.iter().for_each(|v| back_ref_targets(v, out)),
        Value::Subclass { base, fields, .. } => {
            back_ref_targets(base, out);
            fields.iter().for_each(|v| back_ref_targets(v, out));
        }
        _ => {}
    }
}

struct XmlWriter<'a> {
    out: String,
    table: &'a [TableEntry],
    targets: HashSet<u32>,
    /// The next memo slot, counted as the binary decoder counts (see json/writer.rs).
    slot: u32,
    /// Set while writing a SUBCLASS base, which takes no memo slot.
    in_base: bool,
}

impl<'a> XmlWriter<'a> {
    /// Opens `<name` for a memo-taking value, with its `id` attribute when it is referenced.
    fn open_memo(&mut self, name: &str) {
        self.out.push('<');
        self.out.push_str(name);
        if std::mem::take(&mut self.in_base) {
            return;
        }
        let slot = self.slot;
        self.slot += 1;
        if self.targets.contains(&slot) {
            let _ = write!(self.out, " id=\"{slot}\"");
        }
    }

    fn text_element(&mut self, name: &str, text: &str) {
        self.start(name);
        escape_into(&mut self.out, text);
        self.end(name);
    }

    // `<name>` and `</name>`, without `write!`'s formatting machinery: they are most of the
    // markup of a document.
    fn start(&mut self, name: &str) {
        self.out.push('<');
        self.out.push_str(name);
        self.out.push('>');
    }

    fn end(&mut self, name: &str) {
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push('>');
    }

    fn container(&mut self, name: &str, items: &[Value]) -> Result<(), TextError> {
        self.open_memo(name);
        self.out.push('>');
        for item in items {
            self.value(item)?;
        }
        self.end(name);
        Ok(())
    }

    fn float_text(f: f64) -> String {
        if f.is_nan() {
            "nan".into()
        } else if f.is_infinite() {
            if f > 0.0 { "inf".into() } else { "-inf".into() }
        } else {
            let mut text = String::new();
            super::json::finite_float(&mut text, f);
            text
        }
    }

    fn attr(&mut self, name: &str, value: &str) {
        self.out.push(' ');
        self.out.push_str(name);
        self.out.push_str("=\"");
        escape_into(&mut self.out, value);
        self.out.push('"');
    }

    fn clock(&mut self, name: &str, mut text: String, tz: &TzInfo, fold: bool) {
        let _ = write!(self.out, "<{name}");
        if let TzInfo::Named(zone) = tz {
            self.attr("zone", zone);
        }
        if fold {
            self.out.push_str(" fold=\"1\"");
        }
        if let TzInfo::Offset(micros) = tz {
            clock::write_offset(*micros, &mut text);
        }
        let _ = write!(self.out, ">{text}</{name}>");
    }

    fn fields(&mut self, names: &[String], values: &[Value]) -> Result<(), TextError> {
        for (name, value) in names.iter().zip(values) {
            self.out.push_str("<field");
            self.attr("name", name);
            self.out.push('>');
            self.value(value)?;
            self.out.push_str("</field>");
        }
        Ok(())
    }

    fn entry(&self, descriptor: u32) -> Result<&'a TableEntry, TextError> {
        self.table.get(descriptor as usize).ok_or(TextError::Body(DecodeError::UnknownDescriptor { id: descriptor }))
    }

    fn value(&mut self, value: &Value) -> Result<(), TextError> {
        match value {
            Value::None => self.out.push_str("<none/>"),
            Value::Bool(true) => self.out.push_str("<true/>"),
            Value::Bool(false) => self.out.push_str("<false/>"),
            Value::Int(i) => {
                self.out.push_str("<int>");
                super::json::push_i64(&mut self.out, *i);
                self.out.push_str("</int>");
            }
            Value::BigInt(bytes) => {
                let _ = write!(self.out, "<int>{}</int>", bigint::to_decimal(bytes));
            }
            Value::Float(f) if f.is_finite() => {
                self.out.push_str("<float>");
                super::json::finite_float(&mut self.out, *f);
                self.out.push_str("</float>");
            }
            Value::Float(f) => {
                let _ = write!(self.out, "<float>{}</float>", Self::float_text(*f));
            }
            Value::Complex(re, im) => {
                let _ = write!(self.out, "<complex real=\"{}\" imag=\"{}\"/>", Self::float_text(*re), Self::float_text(*im));
            }
            Value::Str(s) => {
                if is_plain_text(s) || s.chars().all(is_xml_char) {
                    self.text_element("str", s);
                } else {
                    // XML 1.0 cannot hold these characters even as references.
                    self.out.push_str("<str base64=\"1\">");
                    base64::encode(s.as_bytes(), &mut self.out);
                    self.out.push_str("</str>");
                }
            }
            Value::StrSurrogates(bytes) => self.base64("surrogates", bytes, false),
            Value::Bytes(bytes) => self.base64("bytes", bytes, false),
            Value::ByteArray(bytes) => self.base64("bytearray", bytes, true),
            Value::List(items) => self.container("list", items)?,
            Value::Tuple(items) => self.container("tuple", items)?,
            Value::Set(items) => self.container("set", items)?,
            Value::FrozenSet(items) => self.container("frozenset", items)?,
            Value::Dict(pairs) => {
                self.open_memo("dict");
                self.out.push('>');
                for (k, v) in pairs {
                    self.value(k)?;
                    self.value(v)?;
                }
                self.out.push_str("</dict>");
            }
            Value::DateTime { micros, tz, fold } => {
                let mut text = String::new();
                clock::write_datetime(*micros, &mut text);
                self.clock("datetime", text, tz, *fold);
            }
            Value::Date { days } => {
                let mut text = String::new();
                clock::write_date(*days, &mut text);
                self.text_element("date", &text);
            }
            Value::Time { micros, tz, fold } => {
                let mut text = String::new();
                clock::write_clock(*micros, &mut text);
                self.clock("time", text, tz, *fold);
            }
            Value::TimeDelta { days, seconds, micros } => {
                let _ = write!(self.out, "<timedelta days=\"{days}\" seconds=\"{seconds}\" microseconds=\"{micros}\"/>");
            }
            Value::Decimal(text) => self.text_element("decimal", text),
            Value::Uuid(bytes) => {
                let mut text = String::new();
                clock::write_uuid(bytes, &mut text);
                self.text_element("uuid", &text);
            }
            Value::Enum { descriptor, member } => {
                let type_name = &self.entry(*descriptor)?.type_name;
                self.out.push_str("<enum");
                self.attr("type", type_name);
                self.out.push('>');
                escape_into(&mut self.out, member);
                self.out.push_str("</enum>");
            }
            Value::Ref(_) => return Err(mapping("a stream holds no references to stored objects")),
            Value::Object { descriptor, fields } => {
                let entry = self.entry(*descriptor)?;
                self.open_memo("object");
                self.attr("type", &entry.type_name);
                if entry.persistent {
                    self.out.push_str(" persistent=\"1\"");
                }
                self.out.push('>');
                self.fields(&entry.fields, fields)?;
                self.out.push_str("</object>");
            }
            Value::Subclass { descriptor, base, fields } => {
                let entry = self.entry(*descriptor)?;
                self.open_memo("subclass");
                self.attr("type", &entry.type_name);
                self.out.push('>');
                self.in_base = true;
                self.value(base)?;
                self.in_base = false;
                self.fields(&entry.fields, fields)?;
                self.out.push_str("</subclass>");
            }
            Value::BackRef(slot) => {
                let _ = write!(self.out, "<ref id=\"{slot}\"/>");
            }
        }
        Ok(())
    }

    fn base64(&mut self, name: &str, bytes: &[u8], memo: bool) {
        if memo {
            self.open_memo(name);
        } else {
            let _ = write!(self.out, "<{name}");
        }
        self.out.push('>');
        base64::encode(bytes, &mut self.out);
        let _ = write!(self.out, "</{name}>");
    }
}

/// Characters XML 1.0 allows in a document (its production `Char`), minus carriage returns,
/// which parsers turn into line feeds unless escaped (copal escapes them).
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Whether `s` is printable ASCII without markup characters: text that `escape_into` copies as
/// it is (most strings, checked at a byte a step instead of a character).
fn is_plain_text(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, 0x20..=0x7E) && !matches!(b, b'<' | b'>' | b'&' | b'"'))
}

/// Text or attribute content: markup characters as entities, and tab, line feed and carriage
/// return as character references (attribute-value normalization would turn them into spaces).
fn escape_into(out: &mut String, s: &str) {
    if is_plain_text(s) {
        out.push_str(s);
        return;
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
                let _ = write!(out, "&#{};", c as u32);
            }
            c => out.push(c),
        }
    }
}

// -- reading ------------------------------------------------------------------------------------

/// A parsed element: its name, attributes, child elements and text (character data outside
/// the children, concatenated).
pub(super) struct Element {
    pub(super) name: String,
    pub(super) attrs: Vec<(String, String)>,
    pub(super) children: Vec<Element>,
    pub(super) text: String,
}

impl Element {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl Parser<'_> {
    fn fail(&self, message: &str) -> TextError {
        TextError::Syntax { offset: self.at, message: message.to_owned() }
    }

    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn ws(&mut self) {
        while let Some(c) = self.rest().chars().next().filter(|c| matches!(c, ' ' | '\t' | '\n' | '\r')) {
            self.at += c.len_utf8();
        }
    }

    /// The prolog: an optional XML declaration, comments and whitespace.
    fn prolog(&mut self) -> Result<(), TextError> {
        self.ws();
        if self.rest().starts_with("<?xml") {
            let end = self.rest().find("?>").ok_or_else(|| self.fail("unterminated XML declaration"))?;
            self.at += end + 2;
        }
        self.misc()
    }

    fn misc(&mut self) -> Result<(), TextError> {
        loop {
            self.ws();
            if self.rest().starts_with("<!--") {
                let end = self.rest().find("-->").ok_or_else(|| self.fail("unterminated comment"))?;
                self.at += end + 3;
            } else if self.rest().starts_with("<!") || self.rest().starts_with("<?") {
                return Err(self.fail("DTDs and processing instructions are not accepted"));
            } else {
                return Ok(());
            }
        }
    }

    fn name(&mut self) -> Result<String, TextError> {
        let len = name_length(self.rest());
        if len == 0 {
            return Err(self.fail("expected a name"));
        }
        let name = self.rest()[..len].to_owned();
        self.at += len;
        Ok(name)
    }

    /// A start tag (after its `<`): the element, and whether it is already complete (`/>`).
    fn start_tag(&mut self) -> Result<(Element, bool), TextError> {
        let name = self.name()?;
        let mut attrs: Vec<(String, String)> = Vec::new();
        loop {
            self.ws();
            let complete = if self.rest().starts_with("/>") {
                true
            } else if self.rest().starts_with('>') {
                false
            } else {
                let key = self.name()?;
                self.ws();
                if !self.rest().starts_with('=') {
                    return Err(self.fail("expected '='"));
                }
                self.at += 1;
                self.ws();
                let quote = self.rest().chars().next().filter(|c| *c == '"' || *c == '\'').ok_or_else(|| self.fail("expected a quoted value"))?;
                self.at += 1;
                let end = self.rest().find(quote).ok_or_else(|| self.fail("unterminated attribute"))?;
                let raw = &self.text[self.at..self.at + end];
                if raw.contains('<') {
                    return Err(self.fail("'<' in an attribute value"));
                }
                let value = unescape(raw).map_err(|m| self.fail(m))?;
                if attrs.iter().any(|(k, _)| *k == key) {
                    return Err(self.fail("an attribute appears twice"));
                }
                attrs.push((key, value));
                self.at += end + 1;
                continue;
            };
            self.at += if complete { 2 } else { 1 };
            return Ok((Element { name, attrs, children: Vec::new(), text: String::new() }, complete));
        }
    }

    /// The root element with everything inside it. Iterative (an explicit stack of open
    /// elements), so that nesting costs heap, not call stack, up to `MAX_XML_DEPTH`.
    fn root(&mut self) -> Result<Element, TextError> {
        if !self.rest().starts_with('<') {
            return Err(self.fail("expected an element"));
        }
        self.at += 1;
        let (root, complete) = self.start_tag()?;
        if complete {
            return Ok(root);
        }
        let mut open = vec![root];
        loop {
            let next = self.rest().find('<').ok_or_else(|| self.fail("unterminated element"))?;
            let raw = &self.text[self.at..self.at + next];
            let text = unescape(raw).map_err(|m| self.fail(m))?;
            open.last_mut().expect("an open element").text.push_str(&text);
            self.at += next;
            if self.rest().starts_with("</") {
                self.at += 2;
                let close = self.name()?;
                self.ws();
                let done = open.pop().expect("an open element");
                if close != done.name || !self.rest().starts_with('>') {
                    return Err(self.fail(&format!("expected </{}>", done.name)));
                }
                self.at += 1;
                match open.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None => return Ok(done),
                }
            } else if self.rest().starts_with("<!--") {
                let end = self.rest().find("-->").ok_or_else(|| self.fail("unterminated comment"))?;
                self.at += end + 3;
            } else if self.rest().starts_with("<!") || self.rest().starts_with("<?") {
                return Err(self.fail("CDATA sections and processing instructions are not accepted"));
            } else {
                self.at += 1;
                let (element, complete) = self.start_tag()?;
                if complete {
                    open.last_mut().expect("an open element").children.push(element);
                } else if open.len() >= MAX_XML_DEPTH {
                    return Err(self.fail("nested too deeply"));
                } else {
                    open.push(element);
                }
            }
        }
    }
}

/// Whether `text` is only whitespace, which may stand between elements.
fn is_blank(text: &str) -> bool {
    text.trim_matches([' ', '\t', '\n', '\r']).is_empty()
}

/// The length of the XML name at the start of `text` (0 if there is none).
pub(super) fn name_length(text: &str) -> usize {
    text.find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))).unwrap_or(text.len())
}

/// Character data with its entity and character references replaced.
pub(super) fn unescape(raw: &str) -> Result<String, &'static str> {
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
                code.and_then(char::from_u32).ok_or("unknown reference")?
            }
        };
        out.push(c);
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The stream body of an XML document.
pub fn from_xml(text: &str) -> Result<Body, TextError> {
    let mut parser = Parser { text, at: 0 };
    parser.prolog()?;
    let root = parser.root()?;
    parser.misc()?;
    if parser.at != text.len() {
        return Err(parser.fail("text after the document"));
    }
    if root.name != "copal" {
        return Err(mapping("the root element is not <copal>"));
    }
    match root.attr("version") {
        Some(XML_VERSION) => {}
        Some(v) => return Err(mapping(format!("version {v} is not supported by this copal (reads version {XML_VERSION})"))),
        None => return Err(mapping("the root element has no version")),
    }
    if let Some((key, _)) = root.attrs.iter().find(|(k, _)| k != "version") {
        return Err(mapping(format!("unexpected attribute {key:?} on <copal>")));
    }
    let [value] = root.children.as_slice() else {
        return Err(mapping("<copal> must hold exactly one value"));
    };
    if !is_blank(&root.text) {
        return Err(mapping("<copal> cannot hold text"));
    }
    let mut build = Build::default();
    let value = build.value(value)?;
    Ok(build.tree.finish(value))
}

/// Builds the value tree (and its descriptor table) of a parsed document.
#[derive(Default)]
pub(super) struct Build {
    pub(super) tree: TreeBuilder,
}

impl Build {
    fn take_slot(&mut self, e: &Element) -> Result<(), TextError> {
        let id = e.attr("id").map(|id| id.parse::<u64>().map_err(|_| mapping("id must be a non-negative integer"))).transpose()?;
        self.tree.take_slot(id)
    }

    fn items(&mut self, e: &Element) -> Result<Vec<Value>, TextError> {
        e.children.iter().map(|c| self.value(c)).collect()
    }

    pub(super) fn value(&mut self, e: &Element) -> Result<Value, TextError> {
        let name = e.name.as_str();
        let allowed: &[&str] = match name {
            "list" | "tuple" | "set" | "frozenset" | "dict" | "bytearray" => &["id"],
            "object" => &["id", "type", "persistent"],
            "subclass" => &["id", "type"],
            "enum" => &["type"],
            "datetime" | "time" => &["zone", "fold"],
            "complex" => &["real", "imag"],
            "timedelta" => &["days", "seconds", "microseconds"],
            "str" => &["base64"],
            "ref" => &["id"],
            _ => &[],
        };
        if let Some((key, _)) = e.attrs.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            return Err(mapping(format!("unexpected attribute {key:?} on <{name}>")));
        }
        let has_children = matches!(name, "list" | "tuple" | "set" | "frozenset" | "dict" | "object" | "subclass");
        if !has_children && !e.children.is_empty() {
            return Err(mapping(format!("<{name}> cannot hold elements")));
        }
        if has_children && !is_blank(&e.text) {
            return Err(mapping(format!("<{name}> cannot hold text")));
        }
        let text = e.text.as_str();
        let bad = |what: &str| mapping(format!("<{name}> does not hold {what}"));
        Ok(match name {
            "none" | "true" | "false" if !text.is_empty() => return Err(mapping(format!("<{name}/> is empty"))),
            "none" => Value::None,
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "int" => match text.parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => Value::BigInt(bigint::from_decimal(text).ok_or_else(|| bad("an integer"))?),
            },
            "float" => Value::Float(float(text).ok_or_else(|| bad("a float"))?),
            "complex" => {
                let part = |k: &str| e.attr(k).and_then(float).ok_or_else(|| bad("real and imag floats"));
                Value::Complex(part("real")?, part("imag")?)
            }
            "str" => match e.attr("base64") {
                None => Value::Str(text.to_owned()),
                Some("1") => {
                    let bytes = base64::decode(text).ok_or_else(|| bad("padded base64"))?;
                    Value::Str(String::from_utf8(bytes).map_err(|_| bad("base64 of UTF-8"))?)
                }
                Some(_) => return Err(mapping("base64 must be \"1\"")),
            },
            "surrogates" | "bytes" | "bytearray" => {
                if name == "bytearray" {
                    self.take_slot(e)?;
                }
                let bytes = base64::decode(text).ok_or_else(|| bad("padded base64"))?;
                if name == "surrogates" && !super::is_surrogates_text(&bytes) {
                    return Err(bad("the base64 of generalized UTF-8"));
                }
                match name {
                    "bytes" => Value::Bytes(bytes),
                    "bytearray" => Value::ByteArray(bytes),
                    _ => Value::StrSurrogates(bytes),
                }
            }
            "list" | "tuple" | "set" | "frozenset" => {
                self.take_slot(e)?;
                let items = self.items(e)?;
                match name {
                    "list" => Value::List(items),
                    "tuple" => Value::Tuple(items),
                    "set" => Value::Set(items),
                    _ => Value::FrozenSet(items),
                }
            }
            "dict" => {
                self.take_slot(e)?;
                if !e.children.len().is_multiple_of(2) {
                    return Err(bad("key and value pairs"));
                }
                let items = self.items(e)?;
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
                Value::Dict(pairs)
            }
            "datetime" | "time" => {
                let fold = match e.attr("fold") {
                    None | Some("0") => false,
                    Some("1") => true,
                    Some(_) => return Err(mapping("fold must be 0 or 1")),
                };
                let (micros, offset) = if name == "datetime" {
                    let (m, o) = clock::parse_datetime(text).ok_or_else(|| bad("an ISO 8601 date and time"))?;
                    (Ok(m), o)
                } else {
                    let (m, o) = clock::parse_time(text).ok_or_else(|| bad("an ISO 8601 time"))?;
                    (Err(m), o)
                };
                let tz = zone_of(offset, e.attr("zone"), &format!("<{name}>"))?;
                match micros {
                    Ok(micros) => Value::DateTime { micros, tz, fold },
                    Err(micros) => Value::Time { micros, tz, fold },
                }
            }
            "date" => Value::Date { days: clock::parse_date(text).ok_or_else(|| bad("an ISO 8601 date"))? },
            "timedelta" => {
                let days = e.attr("days").and_then(|d| d.parse::<i64>().ok());
                let seconds = e.attr("seconds").and_then(|d| d.parse::<u64>().ok());
                let micros = e.attr("microseconds").and_then(|d| d.parse::<u64>().ok());
                match (days, seconds, micros) {
                    (Some(days), Some(seconds), Some(micros)) if clock::timedelta_in_range(days, seconds, micros) => {
                        Value::TimeDelta { days, seconds, micros }
                    }
                    _ => return Err(bad("days, seconds and microseconds, normalized as Python's")),
                }
            }
            "decimal" if is_decimal_text(text) => Value::Decimal(text.to_owned()),
            "decimal" => return Err(bad("decimal text (what str(Decimal) writes)")),
            "uuid" => Value::Uuid(clock::parse_uuid(text).ok_or_else(|| bad("8-4-4-4-12 hex"))?),
            "enum" => {
                let type_name = e.attr("type").ok_or_else(|| bad("a type"))?;
                Value::Enum { descriptor: self.tree.descriptor(false, type_name, Vec::new()), member: text.to_owned() }
            }
            "object" | "subclass" => {
                let type_name = e.attr("type").ok_or_else(|| bad("a type"))?;
                let persistent = match e.attr("persistent") {
                    None | Some("0") => false,
                    Some("1") => true,
                    Some(_) => return Err(mapping("persistent must be 0 or 1")),
                };
                self.take_slot(e)?;
                let (base, fields) = match (name, e.children.split_first()) {
                    ("subclass", Some((base, fields))) => (Some(base), fields),
                    ("subclass", None) => return Err(bad("its base value")),
                    _ => (None, e.children.as_slice()),
                };
                let mut names = Vec::with_capacity(fields.len());
                for field in fields {
                    if field.name != "field" || field.children.len() != 1 || !is_blank(&field.text) {
                        return Err(mapping(format!("<{name}> holds <field name=\"...\"> elements of one value each")));
                    }
                    if let Some((key, _)) = field.attrs.iter().find(|(k, _)| k != "name") {
                        return Err(mapping(format!("unexpected attribute {key:?} on <field>")));
                    }
                    names.push(field.attr("name").ok_or_else(|| mapping("<field> needs a name"))?.to_owned());
                }
                if super::has_duplicate(&names, |name| name) {
                    return Err(mapping(format!("two fields of <{name}> have the same name")));
                }
                let descriptor = self.tree.descriptor(persistent, type_name, names);
                let base = match base {
                    Some(base) => {
                        self.tree.start_base();
                        let base = self.value(base)?;
                        Some(self.tree.end_base(base)?)
                    }
                    None => None,
                };
                let fields = fields.iter().map(|f| self.value(&f.children[0])).collect::<Result<_, _>>()?;
                match base {
                    Some(base) => Value::Subclass { descriptor, base: Box::new(base), fields },
                    None => Value::Object { descriptor, fields },
                }
            }
            "ref" => {
                let id: u64 = e.attr("id").and_then(|i| i.parse().ok()).ok_or_else(|| bad("an id"))?;
                self.tree.reference(id)?
            }
            other => return Err(mapping(format!("unknown element <{other}>"))),
        })
    }
}

pub(super) fn float(text: &str) -> Option<f64> {
    match text {
        "nan" => Some(f64::NAN),
        "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        _ if text.contains(['.', 'e', 'E']) && !text.contains(['n', 'N', 'i', 'I']) => text.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(value: Value, table: Vec<TableEntry>) -> String {
        let body = Body { table, value };
        let text = to_xml(&body.encode()).unwrap();
        assert_eq!(from_xml(&text).unwrap(), body, "{text}");
        // The one-pass reader may number descriptors in another order: the graph is the same
        // when the document written back is.
        let direct = super::super::xml_body::transcode(&text).expect("copal's own documents are read in one pass");
        assert_eq!(to_xml(&direct).unwrap(), text);
        text
    }

    #[test]
    fn values_shared_references_and_escapes() {
        let table = vec![
            TableEntry { persistent: true, type_name: "m.P".into(), fields: vec!["x".into()] },
            TableEntry { persistent: false, type_name: "m.T".into(), fields: vec!["y".into()] },
        ];
        let value = Value::List(vec![
            Value::Object { descriptor: 0, fields: vec![Value::BackRef(0)] },
            Value::Dict(vec![(Value::Int(1), Value::Str("<a & \"b\">\r\n\t".into())), (Value::Str("\u{1}".into()), Value::None)]),
            Value::Subclass { descriptor: 1, base: Box::new(Value::List(vec![Value::BackRef(3)])), fields: vec![Value::Float(f64::NAN)] },
            Value::DateTime { micros: 0, tz: TzInfo::Offset(3_600_000_000), fold: true },
            Value::BackRef(1),
        ]);
        let body = Body { table: table.clone(), value: value.clone() };
        let text = to_xml(&body.encode()).unwrap();
        let back = from_xml(&text).unwrap();
        assert_eq!(back.table, table);
        // NaN != NaN: compare the encodings.
        assert_eq!(back.encode(), body.encode(), "{text}");
        assert!(text.starts_with(r#"<copal version="1"><list id="0"><object id="1" type="m.P" persistent="1"><field name="x"><ref id="0"/></field></object>"#), "{text}");
        assert!(text.contains("<str>&lt;a &amp; &quot;b&quot;&gt;&#13;&#10;&#9;</str>"), "{text}");
        assert!(text.contains(r#"<str base64="1">AQ==</str>"#), "{text}");
        assert!(text.contains(r#"<datetime fold="1">1970-01-01T00:00:00+01:00</datetime>"#), "{text}");
        round_trip(Value::Dict(vec![]), vec![]);
        // The same values but the SUBCLASS and the NaN, which the one-pass reader leaves to the tree.
        let one_pass = Value::List(vec![
            Value::Object { descriptor: 0, fields: vec![Value::BackRef(0)] },
            Value::Dict(vec![(Value::Int(1), Value::Str("<a & \"b\">\r\n\t".into())), (Value::Str("\u{1}".into()), Value::None)]),
            Value::DateTime { micros: 0, tz: TzInfo::Offset(3_600_000_000), fold: true },
            Value::BackRef(1),
        ]);
        round_trip(one_pass, table[..1].to_vec());
    }

    #[test]
    fn malformed_documents_are_errors() {
        for bad in [
            "", "<copal/>", "<copal version=\"2\"><none/></copal>", "<copal version=\"1\"><none/><none/></copal>",
            "<copal version=\"1\"><nope/></copal>", "<copal version=\"1\"><int>x</int></copal>",
            "<copal version=\"1\"><list>text</list></copal>", "<copal version=\"1\"><ref id=\"0\"/></copal>",
            "<copal version=\"1\"><str>&bogus;</str></copal>", "<copal version=\"1\"><none/></copal>x",
            "<!DOCTYPE x [<!ENTITY a \"b\">]><copal version=\"1\"><none/></copal>",
            "<copal version=\"1\"><dict><int>1</int></dict></copal>", "<copal version=\"1\"><float>1</float></copal>",
        ] {
            assert!(from_xml(bad).is_err(), "{bad}");
        }
        let deep = format!("<copal version=\"1\">{}{}</copal>", "<list>".repeat(10_000), "</list>".repeat(10_000));
        assert!(matches!(from_xml(&deep), Err(TextError::Syntax { .. })));
    }
}
