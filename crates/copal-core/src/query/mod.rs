//! Query evaluation on raw records (DESIGN.md §5): filters read only the fields they test,
//! straight from the stored bytes; paths follow embedded objects, dicts and references (a join on
//! object ids, reading the referenced record, never building objects); only matches are returned.

mod expr;
mod order;
mod plan;

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

pub use expr::{compares, CmpOp, Expr, Path};
pub use order::{compare, sort_order};
pub use plan::Access;

use crate::format::{decode_record_state, memo_value, ClassNo, DecodeError, Descriptor, FieldReader, Oid, RecordHeader, Value};
use crate::store::{Snapshot, StoreError};

/// What to find: objects of the given class extents that satisfy `filter`, sorted by `order`
/// (path, descending), after skipping `offset`, at most `limit`, leaving out `exclude`.
#[derive(Debug, Clone)]
pub struct Query {
    pub classes: Vec<ClassNo>,
    pub filter: Expr,
    pub order: Vec<(Path, bool)>,
    pub offset: usize,
    pub limit: Option<usize>,
    pub exclude: HashSet<Oid>,
    /// Per stored type name, the (former name, current name) pairs of fields its class renamed
    /// (`__copal_renamed__`): records written before the rename hold the former name.
    pub renamed: HashMap<String, Vec<(String, String)>>,
    /// Per stored type name, the (field name, value) pairs of the fields its class gives a
    /// default (an `__init__` default or a class attribute): a record without such a field is
    /// read as holding the default, as loading gives it (records written before the field was
    /// added), so that a query agrees with what loading returns.
    pub defaults: HashMap<String, Vec<(String, Value)>>,
}

impl Query {
    pub fn new(mut classes: Vec<ClassNo>, filter: Expr) -> Query {
        // Extents in class order give results in object-id order.
        classes.sort_unstable();
        classes.dedup();
        Query { classes, filter, order: Vec::new(), offset: 0, limit: None, exclude: HashSet::new(), renamed: HashMap::new(), defaults: HashMap::new() }
    }

    /// Where field `name` sits in records of `descriptor`: under that name, or under a former
    /// name of it.
    fn field_position(&self, descriptor: &Descriptor, name: &str) -> Option<usize> {
        descriptor.field_index(name).or_else(|| {
            let renames = self.renamed.get(&descriptor.type_name)?;
            renames.iter().filter(|(_, new)| new == name).find_map(|(old, _)| descriptor.field_index(old))
        })
    }

    /// The value of field `name` in records of `type_name` that do not hold it: its class's
    /// default, or None (missing).
    pub(crate) fn field_default(&self, type_name: &str, name: &str) -> Option<&Value> {
        self.defaults.get(type_name)?.iter().find(|(field, _)| field == name).map(|(_, value)| value)
    }

    /// Field `name` of `fields`, the values of a record or embedded object of `descriptor`: the
    /// stored value, else the default.
    fn field_value(&self, descriptor: &Descriptor, fields: Vec<Value>, name: &str) -> Option<Value> {
        match self.field_position(descriptor, name) {
            Some(i) => fields.into_iter().nth(i),
            None => self.field_default(&descriptor.type_name, name).cloned(),
        }
    }
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
struct Reader<'s> {
    snapshot: &'s Snapshot,
    query: &'s Query,
    descriptors: HashMap<u32, Arc<Descriptor>>,
    /// Referenced records read by path hops: their descriptor, fields and bytes (for the
    /// back-references among their fields).
    referenced: HashMap<Oid, Option<ReferencedRecord>>,
    /// Where the tested fields sit in the records of the descriptor read last (the records of
    /// an extent nearly always share one).
    layout: Option<FieldLayout>,
    /// The first error met inside an evaluation (which cannot return errors itself).
    failure: Option<StoreError>,
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
    fn new(snapshot: &'s Snapshot, query: &'s Query) -> Self {
        Reader { snapshot, query, descriptors: HashMap::new(), referenced: HashMap::new(), layout: None, failure: None }
    }

    fn descriptor(&mut self, id: u32) -> Result<Arc<Descriptor>, StoreError> {
        if let Some(d) = self.descriptors.get(&id) {
            return Ok(Arc::clone(d));
        }
        let d = self.snapshot.descriptor(id)?;
        self.descriptors.insert(id, Arc::clone(&d));
        Ok(d)
    }

    /// Sets `out[i]` to the value of the record's field `names[i]` (None where absent), reading
    /// the record only as far as the last of them, skipping the others without decoding them,
    /// and reusing the buffers of the values `out` held for the previous record. Returns false,
    /// leaving `out` incomplete, as soon as a field `names[i]` with `required[i] = Some(s)` is
    /// not the string `s`: the filter requires it (a conjunct `field == s`), so the record
    /// cannot match, and its other fields need not be read.
    fn fields_into(
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
            // The snapshot reads the catalog only for embedded objects and enums, which most
            // scanned fields are not: no lock per record.
            let mut reader = FieldReader::new(record, state_start, self.snapshot).map_err(corrupt)?;
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
        let shared = memo_value(record, state_start, self.snapshot, u64::from(slot)).map_err(corrupt)?;
        Ok(shared.unwrap_or(Value::BackRef(slot)))
    }

    /// Follows `rest` of a path from `value`, a value of `record`.
    fn descend(&mut self, value: Value, rest: &[String], record: &[u8]) -> Result<Option<Value>, StoreError> {
        let value = self.unshared(value, record)?;
        let Some((segment, rest)) = rest.split_first() else { return Ok(Some(value)) };
        let next = match value {
            Value::Object { descriptor, fields } | Value::Subclass { descriptor, fields, .. } => {
                let d = self.descriptor(descriptor)?;
                self.query.field_value(&d, fields, segment)
            }
            Value::Dict(pairs) => pairs.into_iter().find(|(k, _)| matches!(k, Value::Str(s) if s == segment)).map(|(_, v)| v),
            Value::Ref(oid) => {
                // The rest of the path is read in the referenced record.
                return match self.referenced_field(oid, segment)? {
                    Some((value, referenced)) => self.descend(value, rest, &referenced),
                    None => Ok(None),
                };
            }
            _ => None,
        };
        match next {
            Some(v) => self.descend(v, rest, record),
            None => Ok(None),
        }
    }

    /// The field `name` of the referenced record `oid`, and that record.
    fn referenced_field(&mut self, oid: Oid, name: &str) -> Result<Option<(Value, RecordBytes)>, StoreError> {
        if !self.referenced.contains_key(&oid) {
            let loaded = match self.snapshot.get(oid)? {
                None => None,
                Some(record) => {
                    let (header, fields) = decode_record_state(&record, self.snapshot)
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

/// The paths a query reads, borrowed from it: filter paths, then order paths.
fn query_paths(query: &Query) -> Vec<&Path> {
    let mut paths = Vec::new();
    query.filter.paths(&mut paths);
    for (path, _) in &query.order {
        if !paths.contains(&path) {
            paths.push(path);
        }
    }
    paths
}

/// How `query` will run on `snapshot`: through an index or by scanning the extents.
pub fn access(snapshot: &Snapshot, query: &Query) -> Result<Access, StoreError> {
    let defs = snapshot.index_defs()?;
    if defs.is_empty() {
        return Ok(Access::Scan);
    }
    snapshot.refresh_catalog()?;
    let type_names: Vec<String> = {
        let catalog = snapshot.store().catalog();
        query.classes.iter().filter_map(|c| catalog.type_name(*c).map(str::to_owned)).collect()
    };
    Ok(plan::plan(query, defs, &type_names))
}

/// A description of the chosen access, for `Query.explain()`.
pub fn explain(snapshot: &Snapshot, query: &Query) -> Result<String, StoreError> {
    Ok(plan::describe(&access(snapshot, query)?, query))
}

/// Calls `visit(oid, record, sort keys)` for every record that matches, in the access order
/// (id order for scans, key order for indexes), until it returns false.
fn for_each_match(
    snapshot: &Snapshot,
    query: &Query,
    access: &Access,
    mut visit: impl FnMut(Oid, &[u8], Vec<Option<Value>>) -> bool,
) -> Result<(), StoreError> {
    let paths = query_paths(query);
    let mut names: Vec<&str> = Vec::new();
    for path in paths {
        if let Some(first) = path.first() {
            if !names.contains(&first.as_str()) {
                names.push(first);
            }
        }
    }
    // Conjuncts `field == "text"` reject a record from the raw bytes of that field.
    let conjuncts = plan::conjuncts(&query.filter);
    let required: Vec<Option<&str>> = names
        .iter()
        .map(|name| {
            conjuncts.iter().find_map(|c| match c {
                Expr::Cmp { path, op: CmpOp::Eq, value: Value::Str(s) } if path.len() == 1 && path[0] == *name => Some(s.as_str()),
                _ => None,
            })
        })
        .collect();
    let mut reader = Reader::new(snapshot, query);
    let mut top: Vec<Option<Value>> = Vec::with_capacity(names.len());
    // `unverified` is the stored value (record and checksum) of a record whose checksum has not
    // been checked yet: it is checked if the record matches, before anything uses it.
    let mut test = |oid: Oid, record: &[u8], unverified: Option<&[u8]>| -> Result<bool, StoreError> {
        if query.exclude.contains(&oid) {
            return Ok(true);
        }
        if !reader.fields_into(oid, record, &names, &required, &mut top)? {
            return Ok(true);
        }
        let top = &top;
        let mut lookup = |path: &Path| -> Option<Cow<'_, Value>> {
            // `names` borrow the query's own paths: a pointer match usually spares comparing.
            let index = names.iter().position(|n| n.as_ptr() == path[0].as_ptr() || *n == path[0])?;
            let value = top[index].as_ref()?;
            if path.len() == 1 && !matches!(value, Value::BackRef(_)) {
                return Some(Cow::Borrowed(value));
            }
            match reader.descend(value.clone(), &path[1..], record) {
                Ok(found) => found.map(Cow::Owned),
                Err(error) => {
                    reader.failure.get_or_insert(error);
                    None
                }
            }
        };
        let matched = query.filter.eval(&mut lookup);
        let keys: Vec<Option<Value>> = if matched {
            query.order.iter().map(|(path, _)| lookup(path).map(Cow::into_owned)).collect()
        } else {
            Vec::new()
        };
        if let Some(error) = reader.failure.take() {
            return Err(error);
        }
        if matched {
            if let Some(value) = unverified {
                crate::store::unseal(oid, value)?;
            }
        }
        Ok(!matched || visit(oid, record, keys))
    };
    match access {
        Access::Scan => {
            for &class in &query.classes {
                let mut go_on = true;
                snapshot.scan_extent_unverified(class, |oid, record, value| {
                    go_on = test(oid, record, Some(value))?;
                    Ok(go_on)
                })?;
                if !go_on {
                    break;
                }
            }
        }
        Access::Index { def, ranges, ordered: false, .. } => {
            // Results in object-id order, as a scan gives them (an index must not change what a
            // query returns, nor its order): candidates come from the index alone, then their
            // records are read in id order, which also reads neighbouring records together.
            let mut candidates = Vec::new();
            for range in ranges {
                snapshot.scan_index(def.id, &range.start, range.end.as_deref(), false, |entry| {
                    let oid = crate::store::entry_oid(entry)?;
                    if query.classes.contains(&crate::format::oid_class(oid)) {
                        candidates.push(oid);
                    }
                    Ok(true)
                })?;
            }
            candidates.sort_unstable();
            candidates.dedup();
            test_batch(snapshot, &mut candidates, &mut test)?;
        }
        Access::Index { def, ranges, descending, ordered: true, .. } => {
            // Candidates are tested in batches: a limit stops the scan early, reading only as
            // many index entries as it may need.
            let batch = match query.limit {
                Some(limit) => (limit + query.offset).clamp(1, 1024),
                None => 1024,
            };
            let mut seen = HashSet::new();
            let mut candidates = Vec::new();
            let ordered_ranges: Vec<&plan::KeyRange> =
                if *descending { ranges.iter().rev().collect() } else { ranges.iter().collect() };
            'ranges: for range in ordered_ranges {
                let mut go_on = true;
                snapshot.scan_index(def.id, &range.start, range.end.as_deref(), *descending, |entry| {
                    let oid = crate::store::entry_oid(entry)?;
                    if query.classes.contains(&crate::format::oid_class(oid)) && seen.insert(oid) {
                        candidates.push(oid);
                        if candidates.len() >= batch {
                            // Test in batches so that an ordered scan with a limit stops early.
                            go_on = test_batch(snapshot, &mut candidates, &mut test)?;
                        }
                    }
                    Ok(go_on)
                })?;
                if !go_on {
                    break 'ranges;
                }
                if !test_batch(snapshot, &mut candidates, &mut test)? {
                    break 'ranges;
                }
            }
        }
    }
    Ok(())
}

/// Tests the records of `candidates` (in their order) and empties it; false when visiting stops.
/// Records are read in batches (`Snapshot::get_many`: cursor sweeps on LMDB, one round trip per
/// batch on PostgreSQL).
fn test_batch(
    snapshot: &Snapshot,
    candidates: &mut Vec<Oid>,
    test: &mut impl FnMut(Oid, &[u8], Option<&[u8]>) -> Result<bool, StoreError>,
) -> Result<bool, StoreError> {
    let oids = std::mem::take(candidates);
    // `get_many` has verified the checksums.
    if oids.windows(2).all(|w| w[0] < w[1]) {
        return for_each_record(snapshot, &oids, |oid, record| test(oid, record, None));
    }
    // In index order (an ordered scan): read in id order, then test in the candidates' order.
    let mut sorted = oids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let mut records: HashMap<Oid, Vec<u8>> = HashMap::with_capacity(sorted.len());
    for_each_record(snapshot, &sorted, |oid, record| {
        records.insert(oid, record.to_vec());
        Ok(true)
    })?;
    for oid in oids {
        if let Some(record) = records.get(&oid) {
            if !test(oid, record, None)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Calls `visit(oid, record)` for the records of `oids` (sorted, without duplicates) until it
/// returns false (then false). An id without a record is skipped: an index entry whose record is
/// missing is damage that `copal verify` reports, not a match.
fn for_each_record(
    snapshot: &Snapshot,
    oids: &[Oid],
    mut visit: impl FnMut(Oid, &[u8]) -> Result<bool, StoreError>,
) -> Result<bool, StoreError> {
    enum Halt {
        Missing(Oid),
        Stop,
        Failed(StoreError),
    }
    let mut rest = oids;
    while !rest.is_empty() {
        let outcome = snapshot.get_many(rest, Halt::Missing, Halt::Failed, |i, record| match visit(rest[i], record) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Halt::Stop),
            Err(error) => Err(Halt::Failed(error)),
        });
        match outcome {
            Ok(()) => return Ok(true),
            Err(Halt::Stop) => return Ok(false),
            Err(Halt::Failed(error)) => return Err(error),
            // Resume after the missing id (the ids before it have been visited).
            Err(Halt::Missing(oid)) => rest = &rest[rest.partition_point(|o| *o <= oid)..],
        }
    }
    Ok(true)
}

/// The (oid, record) of the matches, sorted, offset and limited as the query says.
pub fn run(snapshot: &Snapshot, query: &Query) -> Result<Vec<(Oid, Vec<u8>)>, StoreError> {
    let wanted = query.limit.map(|l| l.saturating_add(query.offset));
    let access = access(snapshot, query)?;
    let in_order = matches!(access, Access::Index { ordered: true, .. });
    if query.order.is_empty() || in_order {
        let mut out = Vec::new();
        let mut seen = 0;
        if wanted == Some(0) {
            return Ok(out);
        }
        for_each_match(snapshot, query, &access, |oid, record, _| {
            seen += 1;
            if seen > query.offset {
                out.push((oid, record.to_vec()));
            }
            wanted.is_none_or(|w| seen < w)
        })?;
        return Ok(out);
    }
    let mut all: Vec<(Vec<Option<Value>>, Oid, Vec<u8>)> = Vec::new();
    for_each_match(snapshot, query, &access, |oid, record, keys| {
        all.push((keys, oid, record.to_vec()));
        true
    })?;
    let order = |a: &(Vec<Option<Value>>, Oid, Vec<u8>), b: &(Vec<Option<Value>>, Oid, Vec<u8>)| {
        for ((x, y), (_, descending)) in a.0.iter().zip(&b.0).zip(&query.order) {
            let o = sort_order(x.as_ref(), y.as_ref());
            let o = if *descending { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        a.1.cmp(&b.1)
    };
    match wanted {
        // Top-k: only the first `w` need to be in order.
        Some(w) if w < all.len() => {
            all.select_nth_unstable_by(w, order);
            all.truncate(w);
            all.sort_by(order);
        }
        _ => all.sort_by(order),
    }
    Ok(all.into_iter().skip(query.offset).map(|(_, oid, record)| (oid, record)).collect())
}

/// How many records match (offset and limit ignored). Counts that an index answers exactly, and
/// counts of whole extents, read no record.
pub fn count(snapshot: &Snapshot, query: &Query) -> Result<u64, StoreError> {
    let mut n = 0;
    let unordered = Query { order: Vec::new(), ..query.clone() };
    let access = access(snapshot, &unordered)?;
    let counted = |oid: Oid| query.classes.contains(&crate::format::oid_class(oid)) && !query.exclude.contains(&oid);
    match &access {
        Access::Index { def, ranges, exact: true, .. } => {
            for range in ranges {
                snapshot.scan_index(def.id, &range.start, range.end.as_deref(), false, |entry| {
                    n += u64::from(counted(crate::store::entry_oid(entry)?));
                    Ok(true)
                })?;
            }
            return Ok(n);
        }
        Access::Scan if matches!(query.filter, Expr::True) => {
            for &class in &query.classes {
                n += snapshot.count_extent(class, &query.exclude)?;
            }
            return Ok(n);
        }
        _ => {}
    }
    for_each_match(snapshot, &unordered, &access, |_, _, _| {
        n += 1;
        true
    })?;
    Ok(n)
}
