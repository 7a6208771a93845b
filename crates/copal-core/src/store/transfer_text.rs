//! The text encodings of an export (docs/EXPORT.md section 3): JSON Lines, each line one JSON
//! document of docs/TEXT_FORMATS.md, or XML, each line one `<copal version="1">` document inside
//! a `<copal-export version="1">` element. The value of each document is a dict describing one
//! entry; a record's dict holds the record as an object whose references to stored objects are
//! members of the reserved enum `copal.Oid`.
//!
//! Writing goes through the stream transcoders of `crate::text` (an entry becomes a stream body,
//! then JSON or XML), so the text of every value is exactly the one TEXT_FORMATS.md specifies.
//! Records go between their bytes and their documents' bodies without a value tree
//! (transfer_record.rs); the tree path here serves the other entries, and the records that path
//! does not read.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::Arc;

use super::index::IndexDef;
use super::transfer_record::{body_record, record_document, DocumentTables, Tables};
use super::transfer::{malformed, Entry, EntryFault, EntryReader, EntryWriter, TransferError};
use crate::format::{decode_record_state, DecodeError, Descriptor, DescriptorSource, Oid, RecordHeader, Value, Writer};
use crate::stream::compression::reserve_within;
use crate::text::{json, xml, Body, TableEntry, TextError};

/// The type name of the enum whose members stand for references to stored objects: the member
/// name is the oid in hexadecimal (`0x1000000000003`).
pub const OID_TYPE: &str = "copal.Oid";
/// Memo slots taken by the wrapper of a record in its document (the entry dict and the record
/// object): a back-reference to slot `n` of the record is written as `n + WRAPPER_SLOTS`.
pub(super) const WRAPPER_SLOTS: u64 = 2;
/// The version of the text encodings, written as the header's `copal_export` (docs/EXPORT.md
/// section 4).
const TEXT_VERSION: u8 = 1;
const XML_OPEN: &str = "<copal-export version=\"1\">";
const XML_CLOSE: &str = "</copal-export>";

/// Descriptors by id, as the export's descriptor entries declare them.
#[derive(Default)]
struct Known(HashMap<u32, Descriptor>);

impl DescriptorSource for Known {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        self.0.get(&id).map(|d| d.fields.len()).ok_or(DecodeError::UnknownDescriptor { id })
    }
}

fn int(value: u64) -> Value {
    // Ids, counts and tids stay far below 2^63.
    Value::Int(i64::try_from(value).unwrap_or(i64::MAX))
}

fn str_list(names: &[String]) -> Value {
    Value::List(names.iter().map(|n| Value::Str(n.clone())).collect())
}

fn dict(members: Vec<(&str, Value)>) -> Value {
    Value::Dict(members.into_iter().map(|(k, v)| (Value::Str(k.to_owned()), v)).collect())
}

pub(crate) struct TextWriter<'w> {
    out: &'w mut dyn Write,
    xml: bool,
    known: Known,
    /// The descriptor tables of records' documents, and the value of the last one (a buffer
    /// kept from record to record).
    tables: DocumentTables,
    value: Vec<u8>,
}

impl<'w> TextWriter<'w> {
    pub(crate) fn new(out: &'w mut dyn Write, xml: bool) -> Result<Self, TransferError> {
        if xml {
            out.write_all(XML_OPEN.as_bytes())?;
            out.write_all(b"\n")?;
        }
        Ok(TextWriter { out, xml, known: Known::default(), tables: DocumentTables::default(), value: Vec::new() })
    }

    /// The JSON document of one stored record, as an export writes it, decoded with the
    /// store's `descriptors` (for `copal show`).
    pub(crate) fn record_json(descriptors: &[Arc<Descriptor>], oid: Oid, record: &[u8]) -> Result<String, TransferError> {
        let known = Known(descriptors.iter().map(|d| (d.id, (**d).clone())).collect());
        let mut sink = Vec::new();
        let mut writer = TextWriter { out: &mut sink, xml: false, known, tables: DocumentTables::default(), value: Vec::new() };
        writer.write_entry(&Entry::Record { oid, record: record.into() })?;
        Ok(String::from_utf8(sink).expect("JSON is UTF-8").trim_end().to_owned())
    }

    fn body(&mut self, entry: &Entry<'_>) -> Result<Body, TransferError> {
        let value = match entry {
            Entry::Header { tid, records } => {
                dict(vec![("copal_export", int(TEXT_VERSION.into())), ("tid", int(*tid)), ("records", int(*records))])
            }
            Entry::Descriptor(d) => {
                self.known.0.insert(d.id, d.clone());
                self.tables.clear();
                dict(vec![
                    ("descriptor", int(d.id.into())),
                    ("class", int(d.class_no.into())),
                    ("type", Value::Str(d.type_name.clone())),
                    ("fields", str_list(&d.fields)),
                ])
            }
            Entry::Removed { type_name, fields } => dict(vec![("removed", Value::Str(type_name.clone())), ("fields", str_list(fields))]),
            Entry::HighWater { class, next } => dict(vec![("high_water", int((*class).into())), ("next", int(*next))]),
            Entry::Index(def) => {
                let mut members = vec![
                    ("index", Value::Str(def.type_name.clone())),
                    ("covered", str_list(&def.covered)),
                    ("fields", str_list(&def.fields)),
                    ("unique", Value::Bool(def.unique)),
                    ("renamed", Value::List(def.renamed.iter().map(|(t, old, new)| str_list(&[t.clone(), old.clone(), new.clone()])).collect())),
                ];
                // Only when there are some: exports of indexes without defaults read as before.
                if !def.defaults.is_empty() {
                    let defaults = def.defaults.iter().map(|(t, field, key)| {
                        Value::List(vec![Value::Str(t.clone()), Value::Str(field.clone()), Value::Bytes(key.clone())])
                    });
                    members.push(("defaults", Value::List(defaults.collect())));
                }
                dict(members)
            }
            Entry::Record { oid, record } => return self.record(*oid, record),
            Entry::End { records } => dict(vec![("end", int(*records))]),
        };
        Ok(Body { table: Vec::new(), value })
    }

    /// The tree path of a record's body: it gives the error for a record that `record_body`
    /// does not read.
    fn record(&mut self, oid: Oid, record: &[u8]) -> Result<Body, TransferError> {
        let fail = |e: DecodeError| TransferError::Store(super::StoreError::Corrupt { what: format!("record {oid:#x}"), source: e });
        let (header, fields) = decode_record_state(record, &self.known).map_err(fail)?;
        let mut table = TableBuilder { known: &self.known, table: Vec::new(), positions: HashMap::new() };
        let own = table.position(header.descriptor, true).map_err(fail)?;
        let fields = fields.into_iter().map(|v| table.outgoing(v)).collect::<Result<_, _>>().map_err(fail)?;
        let value = dict(vec![
            ("oid", Value::Str(format!("{oid:#x}"))),
            ("flags", int(header.flags.into())),
            ("record", Value::Object { descriptor: own, fields }),
        ]);
        Ok(Body { table: table.table, value })
    }
}

impl EntryWriter for TextWriter<'_> {
    fn write_entry(&mut self, entry: &Entry<'_>) -> Result<(), TransferError> {
        // Records, nearly all the entries, go to text from their bytes; the others, and a
        // record that path does not read, through the value tree.
        let fast = match entry {
            Entry::Record { oid, record } => record_document(&self.known.0, *oid, record, &mut self.tables, &mut self.value),
            _ => None,
        };
        let text = match fast {
            Some(table) if self.xml => xml::value_to_xml(table, &self.value),
            Some(table) => json::value_to_json(table, &self.value),
            None => {
                let body = self.body(entry)?.encode();
                if self.xml { xml::to_xml(&body) } else { json::to_json(&body) }
            }
        };
        let text = text.map_err(|e| malformed(format!("cannot write an entry as text: {e}")))?;
        self.out.write_all(text.as_bytes())?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TransferError> {
        if self.xml {
            self.out.write_all(XML_CLOSE.as_bytes())?;
            self.out.write_all(b"\n")?;
        }
        Ok(self.out.flush()?)
    }
}

/// The descriptor table of one record's document: store descriptor ids to table positions.
struct TableBuilder<'k> {
    known: &'k Known,
    table: Vec<TableEntry>,
    /// (store descriptor id or None for `copal.Oid`, persistent) to position.
    positions: HashMap<(Option<u32>, bool), u32>,
}

impl TableBuilder<'_> {
    fn position(&mut self, id: u32, persistent: bool) -> Result<u32, DecodeError> {
        let d = self.known.0.get(&id).ok_or(DecodeError::UnknownDescriptor { id })?;
        let entry = TableEntry { persistent, type_name: d.type_name.clone(), fields: d.fields.clone() };
        Ok(self.entry((Some(id), persistent), entry))
    }

    fn entry(&mut self, key: (Option<u32>, bool), entry: TableEntry) -> u32 {
        let next = self.table.len() as u32;
        *self.positions.entry(key).or_insert_with(|| {
            self.table.push(entry);
            next
        })
    }

    /// A record's value as it is written in its document.
    fn outgoing(&mut self, value: Value) -> Result<Value, DecodeError> {
        Ok(match value {
            Value::Ref(oid) => {
                let oid_entry = TableEntry { persistent: false, type_name: OID_TYPE.to_owned(), fields: Vec::new() };
                Value::Enum { descriptor: self.entry((None, false), oid_entry), member: format!("{oid:#x}") }
            }
            Value::BackRef(slot) => Value::BackRef(slot + WRAPPER_SLOTS as u32),
            Value::List(v) => Value::List(self.items(v)?),
            Value::Tuple(v) => Value::Tuple(self.items(v)?),
            Value::Set(v) => Value::Set(self.items(v)?),
            Value::FrozenSet(v) => Value::FrozenSet(self.items(v)?),
            Value::Dict(pairs) => {
                Value::Dict(pairs.into_iter().map(|(k, v)| Ok((self.outgoing(k)?, self.outgoing(v)?))).collect::<Result<_, DecodeError>>()?)
            }
            Value::Enum { descriptor, member } => Value::Enum { descriptor: self.position(descriptor, false)?, member },
            Value::Object { descriptor, fields } => Value::Object { descriptor: self.position(descriptor, false)?, fields: self.items(fields)? },
            Value::Subclass { descriptor, base, fields } => Value::Subclass {
                descriptor: self.position(descriptor, false)?,
                base: Box::new(self.outgoing(*base)?),
                fields: self.items(fields)?,
            },
            other => other,
        })
    }

    fn items(&mut self, items: Vec<Value>) -> Result<Vec<Value>, DecodeError> {
        items.into_iter().map(|v| self.outgoing(v)).collect()
    }
}

pub(crate) struct TextReader<'r> {
    input: &'r mut dyn BufRead,
    xml: bool,
    /// Whether the XML element enclosing the entries was opened, and closed.
    opened: bool,
    closed: bool,
    line: Vec<u8>,
    /// The longest line accepted, which is also what the trees of a line may take.
    max_size: usize,
    /// The number of the next entry (the header is entry 0).
    entry: u64,
    /// The number of the last line read (the first line is line 1).
    line_number: u64,
    /// Store descriptor ids by (type name, fields), from the descriptor entries.
    ids: HashMap<(String, Vec<String>), u32>,
    /// The descriptor tables of records' documents, resolved with `ids`.
    tables: Tables,
}

impl<'r> TextReader<'r> {
    pub(crate) fn new(input: &'r mut dyn BufRead, xml: bool, max_size: usize) -> Self {
        TextReader {
            input,
            xml,
            opened: false,
            closed: false,
            line: Vec::new(),
            max_size,
            entry: 0,
            line_number: 0,
            ids: HashMap::new(),
            tables: Tables::default(),
        }
    }

    /// The next line that is not blank, without its line end; None at the end of the input.
    /// A line longer than `max_size` is refused as it is read (the entry it would be is
    /// `TooLarge`).
    fn next_line(&mut self) -> Result<Option<String>, TransferError> {
        loop {
            if !read_line(self.input, &mut self.line, self.max_size.saturating_add(1))? {
                return Ok(None);
            }
            self.line_number += 1;
            if self.line.len() > self.max_size {
                return Err(self.fault(self.entry, EntryFault::TooLarge { size: self.line.len() as u64, max_size: self.max_size }));
            }
            let text = std::str::from_utf8(&self.line).map_err(|_| malformed("a line is not UTF-8"))?.trim();
            if !text.is_empty() {
                // The line's buffer becomes the text, without a copy (a line may be large); the
                // next line is read into a buffer of the same room, so that lines of one size do
                // not grow it again step by step.
                let start = text.as_ptr() as usize - self.line.as_ptr() as usize;
                let end = start + text.len();
                let room = self.line.capacity();
                let mut line = std::mem::replace(&mut self.line, Vec::with_capacity(room));
                line.truncate(end);
                line.drain(..start);
                return Ok(Some(String::from_utf8(line).expect("checked to be UTF-8 above")));
            }
        }
    }

    fn entry(&mut self, body: Body) -> Result<Entry<'static>, TransferError> {
        let Value::Dict(pairs) = body.value else { return Err(malformed("an entry is not a dict")) };
        let mut members = Members(pairs);
        let kind = members.0.first().and_then(|(k, _)| match k {
            Value::Str(s) => Some(s.clone()),
            _ => None,
        });
        let entry = match kind.as_deref() {
            Some("copal_export") => {
                let version = members.uint("copal_export")?;
                if version != u64::from(TEXT_VERSION) {
                    return Err(malformed(format!("export version {version} is not supported (this copal reads version {TEXT_VERSION})")));
                }
                Entry::Header { tid: members.uint("tid")?, records: members.uint("records")? }
            }
            Some("descriptor") => {
                let id = u32::try_from(members.uint("descriptor")?).map_err(|_| malformed("descriptor id out of range"))?;
                let class_no = u16::try_from(members.uint("class")?).map_err(|_| malformed("class number out of range"))?;
                let d = Descriptor { id, class_no, type_name: members.string("type")?, fields: members.names("fields")? };
                self.ids.insert((d.type_name.clone(), d.fields.clone()), d.id);
                self.tables.clear();
                Entry::Descriptor(d)
            }
            Some("removed") => Entry::Removed { type_name: members.string("removed")?, fields: members.names("fields")? },
            Some("high_water") => {
                let class = u16::try_from(members.uint("high_water")?).map_err(|_| malformed("class number out of range"))?;
                Entry::HighWater { class, next: members.uint("next")? }
            }
            Some("index") => {
                let renamed = match members.take("renamed")? {
                    Value::List(items) => items.into_iter().map(|item| match names_of(item)?.as_slice() {
                        [t, old, new] => Ok((t.clone(), old.clone(), new.clone())),
                        _ => Err(malformed("a rename must be [type, former name, name]")),
                    }).collect::<Result<_, _>>()?,
                    _ => return Err(malformed("\"renamed\" must be a list")),
                };
                let unique = match members.take("unique")? {
                    Value::Bool(b) => b,
                    _ => return Err(malformed("\"unique\" must be true or false")),
                };
                let defaults = match members.take_optional("defaults") {
                    None => Vec::new(),
                    Some(Value::List(items)) => items.into_iter().map(|item| match item {
                        Value::List(parts) => match <[Value; 3]>::try_from(parts) {
                            Ok([Value::Str(t), Value::Str(field), Value::Bytes(key)]) => Ok((t, field, key)),
                            _ => Err(malformed("a default must be [type, field, key bytes]")),
                        },
                        _ => Err(malformed("a default must be [type, field, key bytes]")),
                    }).collect::<Result<_, _>>()?,
                    Some(_) => return Err(malformed("\"defaults\" must be a list")),
                };
                Entry::Index(IndexDef { id: 0, type_name: members.string("index")?, covered: members.names("covered")?, fields: members.names("fields")?, unique, renamed, defaults })
            }
            Some("oid") => {
                let oid = parse_oid(&members.string("oid")?)?;
                let flags = u8::try_from(members.uint("flags")?).map_err(|_| malformed("record flags out of range"))?;
                let Value::Object { descriptor, fields } = members.take("record")? else {
                    return Err(malformed(format!("record {oid:#x} is not an object")));
                };
                let ids = body.table.iter().map(|e| self.ids.get(&(e.type_name.clone(), e.fields.clone())).copied()).collect::<Vec<_>>();
                let incoming = Incoming { table: &body.table, ids: &ids };
                let own = incoming.table.get(descriptor as usize).filter(|e| e.persistent).and(ids.get(descriptor as usize).copied().flatten());
                let own = own.ok_or_else(|| malformed(format!("record {oid:#x} is not a persistent object of a declared type")))?;
                let mut w = Writer::new();
                RecordHeader { flags, descriptor: own, tid: 0 }.write(&mut w);
                for value in fields {
                    incoming.value(value)?.encode(&mut w);
                }
                Entry::Record { oid, record: w.buf.into() }
            }
            Some("end") => Entry::End { records: members.uint("end")? },
            _ => return Err(malformed("an entry of unknown kind")),
        };
        if let Some((key, _)) = members.0.first() {
            return Err(malformed(format!("unexpected member {key:?} in an entry")));
        }
        Ok(entry)
    }
}

impl EntryReader for TextReader<'_> {
    fn next_entry(&mut self) -> Result<Option<Entry<'static>>, TransferError> {
        let xml = self.xml;
        let Some(line) = self.next_line()? else {
            return match xml && self.opened && !self.closed {
                true => Err(malformed(format!("the export is truncated (no {XML_CLOSE})"))),
                false => Ok(None),
            };
        };
        if self.closed {
            return Err(malformed(format!("data follows {XML_CLOSE}")));
        }
        if xml && !self.opened {
            let opening = match xml::declaration_length(&line) {
                // An XML declaration may precede the export element on its own line, and
                // nothing else may (a document type declaration, say).
                Some(0) => line,
                Some(length) if length == line.trim_end().len() => self.next_line()?.unwrap_or_default(),
                _ => return Err(malformed(format!("an XML export's first line is an XML declaration or {XML_OPEN}"))),
            };
            if opening != XML_OPEN {
                return Err(malformed(format!("an XML export starts with {XML_OPEN}")));
            }
            self.opened = true;
            return self.next_entry();
        }
        if xml && line == XML_CLOSE {
            self.closed = true;
            return self.next_entry();
        }
        let number = self.entry;
        self.entry += 1;
        self.line_entry(&line, number).map(Some).map_err(|e| match e {
            TransferError::Malformed { message } => self.fault(number, EntryFault::BadPayload(message)),
            e => e,
        })
    }
}

impl TextReader<'_> {
    /// An error naming entry `number` and the line it was read from.
    fn fault(&self, number: u64, fault: EntryFault) -> TransferError {
        TransferError::BadEntry { entry: number, what: format!("line {}", self.line_number), fault }
    }

    /// The entry that `line` holds, entry `number`.
    fn line_entry(&mut self, line: &str, number: u64) -> Result<Entry<'static>, TransferError> {
        let xml = self.xml;
        // Records, nearly all the lines, go from the one-pass readers' body to the record bytes.
        let limit = self.max_size;
        let body = if xml { xml::table_and_value_from_xml(line, limit) } else { json::table_and_value_from_json(line, limit) };
        let (table, value) = body.map_err(|e| self.text_fault(number, e))?;
        if let Some((oid, record)) = body_record(&table, &value, &self.ids, &mut self.tables) {
            return Ok(Entry::Record { oid, record: record.into() });
        }
        // Every other entry, and a record that path does not read, through the value tree,
        // which gives the entry or the error.
        let body = if xml { xml::from_xml(line, limit) } else { json::from_json(line, limit) };
        let body = body.map_err(|e| self.text_fault(number, e))?;
        self.entry(body)
    }

    /// A line that does not read as a document, or whose trees would take more than `max_size`.
    fn text_fault(&self, number: u64, error: TextError) -> TransferError {
        match error {
            TextError::TooLarge { limit } => self.fault(number, EntryFault::TooLargeTree { max_size: limit }),
            e => malformed(format!("{e}")),
        }
    }
}

/// Reads the next line of `input` into `line` (emptied first), line end included, but at most
/// `limit` bytes of it; false at the end of the input. The buffer grows by half when the line
/// needs more room, never beyond `limit`: a line longer than the reader accepts is never
/// allocated room for.
fn read_line(input: &mut dyn BufRead, line: &mut Vec<u8>, limit: usize) -> std::io::Result<bool> {
    line.clear();
    loop {
        let available = input.fill_buf()?;
        if available.is_empty() {
            return Ok(!line.is_empty());
        }
        let end = available.iter().position(|&b| b == b'\n').map(|at| at + 1);
        let take = end.unwrap_or(available.len()).min(limit - line.len());
        reserve_within(line, line.len() + take, limit);
        line.extend_from_slice(&available[..take]);
        input.consume(take);
        if line.len() == limit || end.is_some_and(|end| end == take) {
            return Ok(true);
        }
    }
}

/// The members of an entry's dict, taken one by one.
struct Members(Vec<(Value, Value)>);

impl Members {
    fn take(&mut self, name: &str) -> Result<Value, TransferError> {
        self.take_optional(name).ok_or_else(|| malformed(format!("an entry lacks {name:?}")))
    }

    fn take_optional(&mut self, name: &str) -> Option<Value> {
        let at = self.0.iter().position(|(k, _)| matches!(k, Value::Str(s) if s == name));
        at.map(|i| self.0.remove(i).1)
    }

    fn uint(&mut self, name: &str) -> Result<u64, TransferError> {
        match self.take(name)? {
            Value::Int(i) => u64::try_from(i).map_err(|_| malformed(format!("{name:?} is negative"))),
            _ => Err(malformed(format!("{name:?} must be an integer"))),
        }
    }

    fn string(&mut self, name: &str) -> Result<String, TransferError> {
        match self.take(name)? {
            Value::Str(s) => Ok(s),
            _ => Err(malformed(format!("{name:?} must be a string"))),
        }
    }

    fn names(&mut self, name: &str) -> Result<Vec<String>, TransferError> {
        names_of(self.take(name)?)
    }
}

fn names_of(value: Value) -> Result<Vec<String>, TransferError> {
    let Value::List(items) = value else { return Err(malformed("expected a list of names")) };
    items.into_iter().map(|v| match v {
        Value::Str(s) => Ok(s),
        _ => Err(malformed("expected a list of names")),
    }).collect()
}

pub(crate) fn parse_oid(text: &str) -> Result<Oid, TransferError> {
    text.strip_prefix("0x").and_then(|hex| Oid::from_str_radix(hex, 16).ok()).ok_or_else(|| malformed(format!("{text:?} is not an oid (0x and hexadecimal digits)")))
}

/// A record's value as read from its document, with the store's descriptor ids.
struct Incoming<'a> {
    table: &'a [TableEntry],
    /// The store descriptor id of each table entry, if the export declared it.
    ids: &'a [Option<u32>],
}

impl Incoming<'_> {
    fn id(&self, position: u32) -> Result<u32, TransferError> {
        let entry = &self.table[position as usize];
        if entry.persistent {
            return Err(malformed(format!("a persistent object of {} is stored by value inside a record", entry.type_name)));
        }
        self.ids[position as usize].ok_or_else(|| malformed(format!("type {} with fields {:?} has no descriptor entry", entry.type_name, entry.fields)))
    }

    fn items(&self, items: Vec<Value>) -> Result<Vec<Value>, TransferError> {
        items.into_iter().map(|v| self.value(v)).collect()
    }

    fn value(&self, value: Value) -> Result<Value, TransferError> {
        Ok(match value {
            Value::Enum { descriptor, member } if self.table[descriptor as usize].type_name == OID_TYPE => Value::Ref(parse_oid(&member)?),
            Value::BackRef(slot) => Value::BackRef(
                slot.checked_sub(WRAPPER_SLOTS as u32).ok_or_else(|| malformed("a record refers back to its own entry"))?,
            ),
            Value::List(v) => Value::List(self.items(v)?),
            Value::Tuple(v) => Value::Tuple(self.items(v)?),
            Value::Set(v) => Value::Set(self.items(v)?),
            Value::FrozenSet(v) => Value::FrozenSet(self.items(v)?),
            Value::Dict(pairs) => Value::Dict(pairs.into_iter().map(|(k, v)| Ok((self.value(k)?, self.value(v)?))).collect::<Result<_, TransferError>>()?),
            Value::Enum { descriptor, member } => Value::Enum { descriptor: self.id(descriptor)?, member },
            Value::Object { descriptor, fields } => Value::Object { descriptor: self.id(descriptor)?, fields: self.items(fields)? },
            Value::Subclass { descriptor, base, fields } => {
                Value::Subclass { descriptor: self.id(descriptor)?, base: Box::new(self.value(*base)?), fields: self.items(fields)? }
            }
            other => other,
        })
    }
}

#[cfg(test)]
mod tests;
