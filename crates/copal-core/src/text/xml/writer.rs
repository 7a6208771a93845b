//! Writing: the XML document of a stream body, one element per value, written from its value
//! tree.

use std::collections::HashSet;
use std::fmt::Write as _;

use super::entities::{escape_into, is_plain_text, is_xml_char};
use crate::format::{decode_document_value, DecodeError, Reader, TzInfo, Value};
use crate::text::{base64, bigint, clock, json, mapping, Body, Table, TableEntry, TextError};

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

    fn text_element(&mut self, name: &str, text: &str) -> Result<(), TextError> {
        self.start(name);
        escape_into(&mut self.out, text)?;
        self.end(name);
        Ok(())
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
            json::finite_float(&mut text, f);
            text
        }
    }

    fn attr(&mut self, name: &str, value: &str) -> Result<(), TextError> {
        self.out.push(' ');
        self.out.push_str(name);
        self.out.push_str("=\"");
        escape_into(&mut self.out, value)?;
        self.out.push('"');
        Ok(())
    }

    fn clock(&mut self, name: &str, mut text: String, tz: &TzInfo, fold: bool) -> Result<(), TextError> {
        let _ = write!(self.out, "<{name}");
        if let TzInfo::Named(zone) = tz {
            self.attr("zone", zone)?;
        }
        if fold {
            self.out.push_str(" fold=\"1\"");
        }
        if let TzInfo::Offset(micros) = tz {
            clock::write_offset(*micros, &mut text);
        }
        let _ = write!(self.out, ">{text}</{name}>");
        Ok(())
    }

    fn fields(&mut self, names: &[String], values: &[Value]) -> Result<(), TextError> {
        for (name, value) in names.iter().zip(values) {
            self.out.push_str("<field");
            self.attr("name", name)?;
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
                json::push_i64(&mut self.out, *i);
                self.out.push_str("</int>");
            }
            Value::BigInt(bytes) => {
                let _ = write!(self.out, "<int>{}</int>", bigint::to_decimal(bytes));
            }
            Value::Float(f) if f.is_finite() => {
                self.out.push_str("<float>");
                json::finite_float(&mut self.out, *f);
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
                    self.text_element("str", s)?;
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
                self.clock("datetime", text, tz, *fold)?;
            }
            Value::Date { days } => {
                let mut text = String::new();
                clock::write_date(*days, &mut text);
                self.text_element("date", &text)?;
            }
            Value::Time { micros, tz, fold } => {
                let mut text = String::new();
                clock::write_clock(*micros, &mut text);
                self.clock("time", text, tz, *fold)?;
            }
            Value::TimeDelta { days, seconds, micros } => {
                let _ = write!(self.out, "<timedelta days=\"{days}\" seconds=\"{seconds}\" microseconds=\"{micros}\"/>");
            }
            Value::Decimal(text) => self.text_element("decimal", text)?,
            Value::Uuid(bytes) => {
                let mut text = String::new();
                clock::write_uuid(bytes, &mut text);
                self.text_element("uuid", &text)?;
            }
            Value::Enum { descriptor, member } => {
                let type_name = &self.entry(*descriptor)?.type_name;
                self.out.push_str("<enum");
                self.attr("type", type_name)?;
                self.out.push('>');
                escape_into(&mut self.out, member)?;
                self.out.push_str("</enum>");
            }
            Value::Ref(_) => return Err(mapping("a stream holds no references to stored objects")),
            // The body of a document is read without the forms of streams of version 2 on.
            Value::StrRef(_) | Value::SupersededTuple { .. } | Value::SupersededFrozenSet { .. } => {
                return Err(mapping("a document holds no shared strings or superseded copies"))
            }
            Value::Object { descriptor, fields } => {
                let entry = self.entry(*descriptor)?;
                self.open_memo("object");
                self.attr("type", &entry.type_name)?;
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
                self.attr("type", &entry.type_name)?;
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
