//! Reading a query's fields out of records: the tested fields of a scanned record, straight from
//! its bytes, and the fields of the records that paths reach through references.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use super::pending::Source;
use super::Query;
use crate::format::{decode_record_state, memo_value, DecodeError, Descriptor, FieldReader, Oid, RecordHeader, Value};
use crate::store::StoreError;

/// What copying one projected value out of its record may take (`Reader::whole_value`).
#[derive(Default)]
struct WholeBudget {
    values: usize,
    depth: usize,
}

impl WholeBudget {
    const MAX_VALUES: usize = 1 << 20;
    const MAX_DEPTH: usize = 256;
}

/// A record reached by a path hop, as a query reads it.
struct ReferencedRecord {
    descriptor: Arc<Descriptor>,
    fields: Vec<Value>,
    bytes: RecordBytes,
}

/// A record's bytes, shared between the cache of referenced records and the values read from
/// them (back-references among their fields are resolved against them).
type RecordBytes = Rc<[u8]>;

/// Reads field values out of records for one query, caching descriptors and referenced records.
/// Records, referenced ones included, are read as the transaction sees them (`Source`).
pub(super) struct Reader<'s> {
    source: Source<'s>,
    query: &'s Query,
    descriptors: HashMap<u32, Arc<Descriptor>>,
    /// Referenced records read by path hops: their descriptor, fields and bytes (for the
    /// back-references among their fields).
    referenced: HashMap<Oid, Option<ReferencedRecord>>,
    /// Where the tested fields sit in the records of the descriptor read last (the records of
    /// an extent nearly always share one).
    layout: Option<FieldLayout>,
    /// The first error met inside an evaluation (which cannot return errors itself).
    pub failure: Option<StoreError>,
}

/// For one descriptor: `slots[i]` is the index (into the query's field names) of the value at
/// field position `i`, up to the last tested field.
struct FieldLayout {
    descriptor: u32,
    slots: Vec<Option<usize>>,
    /// Indexes of the names that this descriptor does not have, with the default each is read
    /// as (None: missing).
    absent: Vec<(usize, Option<Value>)>,
}

impl<'s> Reader<'s> {
    pub fn new(source: Source<'s>, query: &'s Query) -> Self {
        Reader { source, query, descriptors: HashMap::new(), referenced: HashMap::new(), layout: None, failure: None }
    }

    fn descriptor(&mut self, id: u32) -> Result<Arc<Descriptor>, StoreError> {
        if let Some(d) = self.descriptors.get(&id) {
            return Ok(Arc::clone(d));
        }
        let d = self.source.descriptor(id)?;
        self.descriptors.insert(id, Arc::clone(&d));
        Ok(d)
    }

    /// Sets `out[i]` to the value of the record's field `names[i]` (None where absent), reading
    /// the record only as far as the last of them, skipping the others without decoding them,
    /// and reusing the buffers of the values `out` held for the previous record. Returns false,
    /// leaving `out` incomplete, as soon as a field `names[i]` with `required[i] = Some(s)` is
    /// not the string `s`: the filter requires it (a conjunct `field == s`), so the record
    /// cannot match, and its other fields need not be read.
    pub fn fields_into(
        &mut self,
        oid: Oid,
        record: &[u8],
        names: &[&str],
        required: &[Option<&str>],
        out: &mut Vec<Option<Value>>,
    ) -> Result<bool, StoreError> {
        let corrupt = |source: DecodeError| StoreError::Corrupt { what: format!("record {oid:#x}"), source };
        let (header, state_start) = RecordHeader::parse(record).map_err(corrupt)?;
        if self.layout.as_ref().is_none_or(|l| l.descriptor != header.descriptor) {
            let descriptor = self.descriptor(header.descriptor)?;
            let positions: Vec<Option<usize>> = names.iter().map(|n| self.query.field_position(&descriptor, n)).collect();
            let mut slots = vec![None; positions.iter().flatten().max().map_or(0, |last| last + 1)];
            for (name_index, position) in positions.iter().enumerate() {
                if let Some(p) = position {
                    slots[*p] = Some(name_index);
                }
            }
            let absent = (0..names.len())
                .filter(|i| positions[*i].is_none())
                .map(|i| (i, self.query.field_default(&descriptor.type_name, names[i]).cloned()))
                .collect();
            self.layout = Some(FieldLayout { descriptor: header.descriptor, slots, absent });
        }
        out.resize(names.len(), None);
        let layout = self.layout.as_ref().expect("set above");
        let rejects = |required: Option<&str>, default: &Option<Value>| match (required, default) {
            (Some(expected), Some(Value::Str(value))) => expected != value,
            (Some(_), _) => true,
            (None, _) => false,
        };
        if layout.absent.iter().any(|(i, default)| rejects(required[*i], default)) {
            return Ok(false);
        }
        let slots = &layout.slots;
        if !slots.is_empty() {
            // The source reads the catalog only for embedded objects and enums, which most
            // scanned fields are not: no lock per record.
            let mut reader = FieldReader::new(record, state_start, &self.source).map_err(corrupt)?;
            for slot in slots {
                match slot {
                    None => reader.skip_value().map_err(corrupt)?,
                    Some(name_index) => match (required[*name_index], &mut out[*name_index]) {
                        (Some(expected), slot) => {
                            if !reader.next_str_is(expected.as_bytes()).map_err(corrupt)? {
                                return Ok(false);
                            }
                            match slot {
                                Some(Value::Str(buffer)) => {
                                    buffer.clear();
                                    buffer.push_str(expected);
                                }
                                other => *other = Some(Value::Str(expected.to_owned())),
                            }
                        }
                        (None, Some(value)) => reader.next_value_into(value).map_err(corrupt)?,
                        (None, empty) => *empty = Some(reader.next_value().map_err(corrupt)?),
                    },
                }
            }
        }
        for (name_index, default) in &layout.absent {
            out[*name_index].clone_from(default);
        }
        Ok(true)
    }

    /// `value`, or the value it stands for if it is a back-reference to a value shared inside
    /// `record` (held by two fields, say): the record is decoded again to find it, which only
    /// records holding shared values cost.
    fn unshared(&mut self, value: Value, record: &[u8]) -> Result<Value, StoreError> {
        let Value::BackRef(slot) = value else { return Ok(value) };
        let corrupt = |source: DecodeError| StoreError::Corrupt { what: "record".to_owned(), source };
        let (_, state_start) = RecordHeader::parse(record).map_err(corrupt)?;
        let shared = memo_value(record, state_start, &self.source, u64::from(slot)).map_err(corrupt)?;
        Ok(shared.unwrap_or(Value::BackRef(slot)))
    }

    /// Follows `rest` of a path from `value`, a value of `record`. With `whole`, the value found
    /// holds no back-reference at any depth (`whole_value`): it stands alone, as a projection
    /// returns it; without, only the value itself is resolved, as a filter reads it.
    pub fn descend(&mut self, value: Value, rest: &[String], record: &[u8], whole: bool) -> Result<Option<Value>, StoreError> {
        let value = self.unshared(value, record)?;
        let Some((segment, rest)) = rest.split_first() else {
            return match whole {
                true => self.whole_value(value, record, &mut WholeBudget::default()).map(Some),
                false => Ok(Some(value)),
            };
        };
        let next = match value {
            Value::Object { descriptor, fields } | Value::Subclass { descriptor, fields, .. } => {
                let d = self.descriptor(descriptor)?;
                self.query.field_value(&d, fields, segment)
            }
            Value::Dict(pairs) => pairs.into_iter().find(|(k, _)| matches!(k, Value::Str(s) if s == segment)).map(|(_, v)| v),
            Value::Ref(oid) => {
                // The rest of the path is read in the referenced record.
                return match self.referenced_field(oid, segment)? {
                    Some((value, referenced)) => self.descend(value, rest, &referenced, whole),
                    None => Ok(None),
                };
            }
            _ => None,
        };
        match next {
            Some(v) => self.descend(v, rest, record, whole),
            None => Ok(None),
        }
    }

    /// `value`, a value of `record`, with every back-reference inside it replaced by the value
    /// it stands for: a value shared twice is copied twice, so `budget` bounds the copies (a
    /// record can share a list into itself, or nest sharing so that copies double per level).
    fn whole_value(&mut self, value: Value, record: &[u8], budget: &mut WholeBudget) -> Result<Value, StoreError> {
        budget.values += 1;
        budget.depth += 1;
        if budget.values > WholeBudget::MAX_VALUES || budget.depth > WholeBudget::MAX_DEPTH {
            return Err(StoreError::Storage {
                message: "a projected value shares its parts too often (or holds itself) to be copied out of its record: \
                          load the object instead"
                    .to_owned(),
            });
        }
        let whole = match self.unshared(value, record)? {
            Value::List(v) => Value::List(self.whole_values(v, record, budget)?),
            Value::Tuple(v) => Value::Tuple(self.whole_values(v, record, budget)?),
            Value::Set(v) => Value::Set(self.whole_values(v, record, budget)?),
            Value::FrozenSet(v) => Value::FrozenSet(self.whole_values(v, record, budget)?),
            Value::Object { descriptor, fields } => Value::Object { descriptor, fields: self.whole_values(fields, record, budget)? },
            Value::Subclass { descriptor, base, fields } => {
                let base = Box::new(self.whole_value(*base, record, budget)?);
                Value::Subclass { descriptor, base, fields: self.whole_values(fields, record, budget)? }
            }
            Value::Dict(pairs) => {
                let mut whole = Vec::with_capacity(pairs.len());
                for (key, value) in pairs {
                    whole.push((self.whole_value(key, record, budget)?, self.whole_value(value, record, budget)?));
                }
                Value::Dict(whole)
            }
            other => other,
        };
        budget.depth -= 1;
        Ok(whole)
    }

    fn whole_values(&mut self, values: Vec<Value>, record: &[u8], budget: &mut WholeBudget) -> Result<Vec<Value>, StoreError> {
        values.into_iter().map(|value| self.whole_value(value, record, budget)).collect()
    }

    /// The field `name` of the referenced record `oid`, and that record: its pending record if
    /// the transaction changed it, nothing if the transaction deleted it.
    fn referenced_field(&mut self, oid: Oid, name: &str) -> Result<Option<(Value, RecordBytes)>, StoreError> {
        if !self.referenced.contains_key(&oid) {
            let loaded = match self.source.record(oid)? {
                None => None,
                Some(record) => {
                    let (header, fields) = decode_record_state(&record, &self.source)
                        .map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source })?;
                    Some(ReferencedRecord { descriptor: self.descriptor(header.descriptor)?, fields, bytes: Rc::from(&record[..]) })
                }
            };
            self.referenced.insert(oid, loaded);
        }
        Ok(self.referenced[&oid].as_ref().and_then(|record| {
            let value = match self.query.field_position(&record.descriptor, name) {
                Some(i) => record.fields[i].clone(),
                None => self.query.field_default(&record.descriptor.type_name, name)?.clone(),
            };
            Some((value, Rc::clone(&record.bytes)))
        }))
    }
}
