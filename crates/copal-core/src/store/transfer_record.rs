//! A record rewritten byte by byte into the stream body of its export document (its value, beside
//! a descriptor table kept across records) and back (docs/EXPORT.md section 3), so that exporting and importing records as JSON or XML builds no
//! value tree: references become members of `copal.Oid` and back, descriptor ids become
//! positions in the document's descriptor table and back, and back-references move by the memo
//! slots of the entry's wrapper (`WRAPPER_SLOTS`). Every other value is copied.
//!
//! Both directions answer `None` for anything they do not read, which sends the entry to the
//! value-tree path of transfer_text.rs: that path writes the same bytes for every entry these
//! accept (the tests compare them) and gives the error for a bad one, so the errors stay its
//! own. On export the walk checks everything `decode_record_state` checks (it decodes the rarer
//! scalars with the same decoder), so a damaged record is never written as if it were sound.

use std::collections::HashMap;

use super::transfer_text::{parse_oid, OID_TYPE, WRAPPER_SLOTS};
use crate::format::{decode_value, read_ref, tag, DecodeError, Descriptor, DescriptorSource, Oid, Reader, RecordHeader, Value, Writer};
use crate::text::{Positions, TableEntry};

/// How descriptors and references change between a record and its document.
trait Mapping {
    /// The descriptor written in place of descriptor `id` of an OBJECT or SUBCLASS, and its
    /// field count.
    fn object(&mut self, id: u32) -> Option<(u32, usize)>;
    /// Rewrites an ENUM whose tag has been read, writing its own tag.
    fn enumeration(&mut self, r: &mut Reader<'_>, out: &mut Writer) -> Option<()>;
    /// Rewrites a REF whose tag has been read, writing its own tag.
    fn reference(&mut self, r: &mut Reader<'_>, out: &mut Writer) -> Option<()>;
}

/// A walk over values that copies them to `out` as `mapping` rewrites them. It numbers memo slots
/// and bounds nesting as the record decoder does (docs/FORMAT.md section 7, format/value.rs).
struct Rewrite<'a, M> {
    mapping: &'a mut M,
    out: &'a mut Writer,
    /// The next memo slot, as the input numbers them.
    slot: u64,
    /// The input's number of the record's first memo slot, and the output's.
    first: u64,
    out_first: u64,
    /// Memo slots of tuples and frozensets whose items are being read (see format/value.rs).
    unfinished: Vec<u64>,
}

/// The descriptors of the rare scalars that `Rewrite` decodes with `decode_value`: none, as
/// scalars name no descriptor.
struct NoDescriptors;

impl DescriptorSource for NoDescriptors {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        Err(DecodeError::UnknownDescriptor { id })
    }
}

impl<'a, M: Mapping> Rewrite<'a, M> {
    fn new(mapping: &'a mut M, out: &'a mut Writer, first: u64, out_first: u64) -> Self {
        Rewrite { mapping, out, slot: first, first, out_first, unfinished: Vec::new() }
    }

    fn value(&mut self, r: &mut Reader<'_>, depth: usize) -> Option<()> {
        if depth > r.limits.max_depth {
            return None;
        }
        let t = r.peek_u8().ok()?;
        let slot = self.slot;
        if tag::takes_memo_slot(t) {
            self.slot += 1;
        }
        match t {
            tag::NONE | tag::FALSE | tag::TRUE | tag::INT | tag::FLOAT | tag::STR => self.common_scalar(r),
            tag::LIST | tag::TUPLE | tag::SET | tag::FROZENSET | tag::DICT => {
                r.u8().ok()?;
                self.container(r, t, depth, slot)
            }
            tag::OBJECT | tag::SUBCLASS => {
                r.u8().ok()?;
                let (descriptor, count) = self.mapping.object(r.u32_varint().ok()?)?;
                self.out.u8(t);
                self.out.varint(u64::from(descriptor));
                if t == tag::SUBCLASS {
                    // The base takes no memo slot of its own: the instance took it.
                    let base = r.u8().ok()?;
                    if !matches!(base, tag::LIST | tag::TUPLE | tag::SET | tag::FROZENSET | tag::DICT) {
                        return None;
                    }
                    self.container(r, base, depth, slot)?;
                }
                (0..count).try_for_each(|_| self.value(r, depth + 1))
            }
            tag::ENUM => {
                r.u8().ok()?;
                self.mapping.enumeration(r, self.out)
            }
            tag::REF => {
                r.u8().ok()?;
                self.mapping.reference(r, self.out)
            }
            tag::BACKREF => {
                r.u8().ok()?;
                let index = r.varint().ok()?;
                if index < self.first || index >= self.slot || self.unfinished.contains(&index) {
                    return None;
                }
                self.out.u8(tag::BACKREF);
                self.out.varint(index - self.first + self.out_first);
                Some(())
            }
            // The rarer scalars (dates, bytes, decimals, ...), and unknown tags, which it refuses.
            _ => {
                decode_value(r, &NoDescriptors).ok()?.encode(self.out);
                Some(())
            }
        }
    }

    /// The scalars most records hold, copied as `Value::encode` writes them.
    fn common_scalar(&mut self, r: &mut Reader<'_>) -> Option<()> {
        let t = r.u8().ok()?;
        match t {
            tag::INT => self.out.int_i64(r.zigzag().ok()?),
            tag::FLOAT => {
                self.out.u8(tag::FLOAT);
                self.out.f64(r.f64().ok()?);
            }
            tag::STR => self.out.str(r.str().ok()?),
            _ => self.out.u8(t),
        }
        Some(())
    }

    /// The items of a container whose tag `t` has been read; `slot` is the memo slot of the
    /// container (or of the subclass instance whose base it is).
    fn container(&mut self, r: &mut Reader<'_>, t: u8, depth: usize, slot: u64) -> Option<()> {
        let (min_item_size, per_item) = if t == tag::DICT { (2, 2) } else { (1, 1) };
        let count = r.length(min_item_size).ok()?;
        self.out.u8(t);
        self.out.varint(count as u64);
        let unfinished = matches!(t, tag::TUPLE | tag::FROZENSET);
        if unfinished {
            self.unfinished.push(slot);
        }
        (0..count * per_item).try_for_each(|_| self.value(r, depth + 1))?;
        if unfinished {
            self.unfinished.pop();
        }
        Some(())
    }
}

// -- export -------------------------------------------------------------------------------------

/// The descriptor table of a record's document, built as the record is walked.
struct ToDocument<'k> {
    known: &'k HashMap<u32, Descriptor>,
    /// (store descriptor id, or None for `copal.Oid`; persistent), in table order.
    table: Vec<(Option<u32>, bool)>,
    positions: Positions<(Option<u32>, bool)>,
}

impl ToDocument<'_> {
    fn position(&mut self, key: (Option<u32>, bool)) -> u32 {
        let at = self.positions.find(&self.table, |k| *k == key, || key).unwrap_or_else(|| {
            self.table.push(key);
            self.positions.added(&self.table, |k| *k);
            self.table.len() - 1
        });
        at as u32
    }
}

impl Mapping for ToDocument<'_> {
    fn object(&mut self, id: u32) -> Option<(u32, usize)> {
        let count = self.known.get(&id)?.fields.len();
        Some((self.position((Some(id), false)), count))
    }

    fn enumeration(&mut self, r: &mut Reader<'_>, out: &mut Writer) -> Option<()> {
        let id = r.u32_varint().ok()?;
        self.known.get(&id)?;
        let member = r.str().ok()?;
        out.u8(tag::ENUM);
        out.varint(u64::from(self.position((Some(id), false))));
        out.length_prefixed(member.as_bytes());
        Some(())
    }

    fn reference(&mut self, r: &mut Reader<'_>, out: &mut Writer) -> Option<()> {
        let oid = read_ref(r).ok()?;
        out.u8(tag::ENUM);
        out.varint(u64::from(self.position((None, false))));
        out.length_prefixed(oid_text(oid, &mut [0; OID_TEXT_MAX]));
        Some(())
    }
}

/// The longest `oid_text`: `0x` and 16 digits.
const OID_TEXT_MAX: usize = 18;

/// `format!("{oid:#x}")`, written into `buf`: `0x` and lowercase hexadecimal digits without
/// leading zeros.
pub(super) fn oid_text(oid: Oid, buf: &mut [u8; OID_TEXT_MAX]) -> &[u8] {
    let digits = (oid.checked_ilog2().unwrap_or(0) / 4 + 1) as usize;
    buf[..2].copy_from_slice(b"0x");
    for i in 0..digits {
        buf[2 + digits - 1 - i] = b"0123456789abcdef"[(oid >> (4 * i)) as usize & 0xF];
    }
    &buf[..2 + digits]
}

/// The descriptor tables of records' documents, by the store descriptors they list.
#[derive(Default)]
pub(super) struct DocumentTables(Recent<(Option<u32>, bool), Vec<TableEntry>>);

impl DocumentTables {
    /// Forgets every table: a descriptor entry changes what they hold.
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// The export document of record `oid` (`{"oid": ..., "flags": ..., "record": ...}`) as a
/// stream body's descriptor table and the bytes of its value, written to `value`; `known` are
/// the store's descriptors. `None` when the record does not decode.
pub(super) fn record_document<'t>(known: &HashMap<u32, Descriptor>, oid: Oid, record: &[u8], tables: &'t mut DocumentTables, value: &mut Vec<u8>) -> Option<&'t [TableEntry]> {
    let mut r = Reader::new(record);
    let header = RecordHeader::read(&mut r).ok()?;
    let count = known.get(&header.descriptor)?.fields.len();
    let mut out = Writer { buf: std::mem::take(value) };
    out.buf.clear();
    // The entry dict as `Value::encode` writes it; the record object is table entry 0.
    out.u8(tag::DICT);
    out.varint(3);
    out.str("oid");
    out.u8(tag::STR);
    out.length_prefixed(oid_text(oid, &mut [0; OID_TEXT_MAX]));
    out.str("flags");
    out.int_i64(i64::from(header.flags));
    out.str("record");
    out.u8(tag::OBJECT);
    out.varint(0);
    let mut document = ToDocument { known, table: vec![(Some(header.descriptor), true)], positions: Positions::default() };
    let mut rewrite = Rewrite::new(&mut document, &mut out, 0, WRAPPER_SLOTS);
    let walked = (0..count).try_for_each(|_| rewrite.value(&mut r, 0)).and_then(|()| r.expect_end().ok());
    *value = out.buf;
    walked?;
    let table = tables.0.get_or_make(&document.table, || {
        let entry = |&(id, persistent): &(Option<u32>, bool)| match id {
            Some(id) => TableEntry { persistent, type_name: known[&id].type_name.clone(), fields: known[&id].fields.clone() },
            None => TableEntry { persistent: false, type_name: OID_TYPE.to_owned(), fields: Vec::new() },
        };
        document.table.iter().map(entry).collect()
    });
    Some(table)
}

/// The values made from the last few keys, by key: the records of an export use a few
/// descriptor tables over and over, so each is made once, not once per record.
struct Recent<K, V>(Vec<(Vec<K>, V)>);

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Recent(Vec::new())
    }
}

/// How many values `Recent` keeps, the latest ones.
const RECENT_KEPT: usize = 16;

impl<K: PartialEq + Clone, V> Recent<K, V> {
    fn clear(&mut self) {
        self.0.clear();
    }

    /// The value of `key`, made by `make` unless it is kept.
    fn get_or_make(&mut self, key: &[K], make: impl FnOnce() -> V) -> &V {
        let at = match self.0.iter().position(|(known, _)| known.as_slice() == key) {
            Some(at) => at,
            None => {
                if self.0.len() == RECENT_KEPT {
                    self.0.remove(0);
                }
                self.0.push((key.to_vec(), make()));
                self.0.len() - 1
            }
        };
        &self.0[at].1
    }
}

// -- import -------------------------------------------------------------------------------------

/// An entry of a record document's descriptor table, as the import resolves it.
#[derive(Debug, Clone, Copy)]
struct Resolved {
    /// Whether it is `copal.Oid`, whose members are references.
    oid: bool,
    persistent: bool,
    /// The store's descriptor id, if the export declared the type with these fields.
    id: Option<u32>,
    fields: usize,
}

/// The descriptor tables of the documents read lately, resolved.
#[derive(Default)]
pub(super) struct Tables(Recent<TableEntry, Vec<Resolved>>);

impl Tables {
    /// Forgets every table: a descriptor entry changes what they resolve to.
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    /// `table` resolved with `ids`, the store's descriptor ids by (type name, fields).
    fn resolve(&mut self, table: &[TableEntry], ids: &HashMap<(String, Vec<String>), u32>) -> &[Resolved] {
        let resolve = |entry: &TableEntry| Resolved {
            oid: entry.type_name == OID_TYPE,
            persistent: entry.persistent,
            id: ids.get(&(entry.type_name.clone(), entry.fields.clone())).copied(),
            fields: entry.fields.len(),
        };
        self.0.get_or_make(table, || table.iter().map(resolve).collect())
    }
}

/// The store's descriptors for a record document's table.
struct FromDocument<'t>(&'t [Resolved]);

impl FromDocument<'_> {
    /// The store id of a type stored by value inside a record.
    fn by_value(&self, position: u32) -> Option<(Resolved, u32)> {
        let entry = *self.0.get(position as usize)?;
        match entry.persistent {
            true => None,
            false => Some((entry, entry.id?)),
        }
    }
}

impl Mapping for FromDocument<'_> {
    fn object(&mut self, position: u32) -> Option<(u32, usize)> {
        self.by_value(position).map(|(entry, id)| (id, entry.fields))
    }

    fn enumeration(&mut self, r: &mut Reader<'_>, out: &mut Writer) -> Option<()> {
        let position = r.u32_varint().ok()?;
        let member = r.str().ok()?;
        if self.0.get(position as usize)?.oid {
            Value::Ref(parse_oid(member).ok()?).encode(out);
        } else {
            out.u8(tag::ENUM);
            out.varint(u64::from(self.by_value(position)?.1));
            out.length_prefixed(member.as_bytes());
        }
        Some(())
    }

    /// A document's body holds no REF.
    fn reference(&mut self, _: &mut Reader<'_>, _: &mut Writer) -> Option<()> {
        None
    }
}

/// Whether the next value of `r` is the string `expected`.
fn next_str_is(r: &mut Reader<'_>, expected: &str) -> Option<()> {
    (r.u8().ok()? == tag::STR && r.str().ok()? == expected).then_some(())
}

/// The oid and record of a record entry's document, from its stream body's `table` and `value`;
/// `None` for any other entry, and for a record laid out otherwise than an export writes it or
/// that does not import as it stands (with the export's descriptors by (type name, fields)
/// `ids`).
pub(super) fn body_record(table: &[TableEntry], value: &[u8], ids: &HashMap<(String, Vec<String>), u32>, tables: &mut Tables) -> Option<(Oid, Vec<u8>)> {
    let mut r = Reader::new(value);
    let table = tables.resolve(table, ids);
    (r.u8().ok()? == tag::DICT && r.varint().ok()? == 3).then_some(())?;
    next_str_is(&mut r, "oid")?;
    (r.u8().ok()? == tag::STR).then_some(())?;
    let oid = parse_oid(r.str().ok()?).ok()?;
    next_str_is(&mut r, "flags")?;
    (r.u8().ok()? == tag::INT).then_some(())?;
    let flags = u8::try_from(r.zigzag().ok()?).ok()?;
    next_str_is(&mut r, "record")?;
    (r.u8().ok()? == tag::OBJECT).then_some(())?;
    let own = *table.get(r.u32_varint().ok()? as usize)?;
    if !own.persistent {
        return None;
    }
    let mut record = Writer { buf: Vec::with_capacity(value.len()) };
    RecordHeader { flags, descriptor: own.id?, tid: 0 }.write(&mut record);
    let mut from = FromDocument(table);
    let mut rewrite = Rewrite::new(&mut from, &mut record, WRAPPER_SLOTS, 0);
    (0..own.fields).try_for_each(|_| rewrite.value(&mut r, 0))?;
    r.expect_end().ok()?;
    Some((oid, record.buf))
}
