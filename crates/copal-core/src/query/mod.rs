//! Query evaluation on raw records (DESIGN.md §5): filters read only the fields they test,
//! straight from the stored bytes; paths follow embedded objects, dicts and references (a join on
//! object ids, reading the referenced record, never building objects); only matches are returned.

mod expr;
mod order;
mod plan;

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub use expr::{compares, CmpOp, Expr, Path};
pub use order::{compare, sort_order};
pub use plan::Access;

use crate::format::{decode_record_state, ClassNo, DecodeError, Descriptor, FieldReader, Oid, RecordHeader, Value};
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
}

impl Query {
    pub fn new(mut classes: Vec<ClassNo>, filter: Expr) -> Query {
        // Extents in class order give results in object-id order.
        classes.sort_unstable();
        classes.dedup();
        Query { classes, filter, order: Vec::new(), offset: 0, limit: None, exclude: HashSet::new() }
    }
}

/// Reads field values out of records for one query, caching descriptors and referenced records.
struct Reader<'s> {
    snapshot: &'s Snapshot,
    descriptors: HashMap<u32, Arc<Descriptor>>,
    referenced: HashMap<Oid, Option<(Arc<Descriptor>, Vec<Value>)>>,
    /// The first error met inside an evaluation (which cannot return errors itself).
    failure: Option<StoreError>,
}

impl<'s> Reader<'s> {
    fn new(snapshot: &'s Snapshot) -> Self {
        Reader { snapshot, descriptors: HashMap::new(), referenced: HashMap::new(), failure: None }
    }

    fn descriptor(&mut self, id: u32) -> Result<Arc<Descriptor>, StoreError> {
        if let Some(d) = self.descriptors.get(&id) {
            return Ok(Arc::clone(d));
        }
        let d = self.snapshot.descriptor(id)?;
        self.descriptors.insert(id, Arc::clone(&d));
        Ok(d)
    }

    /// The values of the record's fields named in `names` (None where absent), reading the
    /// record only as far as the last of them.
    fn fields(&mut self, oid: Oid, record: &[u8], names: &[&str]) -> Result<Vec<Option<Value>>, StoreError> {
        let corrupt = |source: DecodeError| StoreError::Corrupt { what: format!("record {oid:#x}"), source };
        let (header, state_start) = RecordHeader::parse(record).map_err(corrupt)?;
        let descriptor = self.descriptor(header.descriptor)?;
        let positions: Vec<Option<usize>> = names.iter().map(|n| descriptor.field_index(n)).collect();
        let mut out = vec![None; names.len()];
        let Some(last) = positions.iter().flatten().max().copied() else { return Ok(out) };
        let catalog = self.snapshot.store().catalog();
        let mut reader = FieldReader::new(record, state_start, &*catalog).map_err(corrupt)?;
        for index in 0..=last {
            let value = reader.next_value().map_err(corrupt)?;
            for (slot, position) in out.iter_mut().zip(&positions) {
                if *position == Some(index) {
                    *slot = Some(value.clone());
                }
            }
        }
        Ok(out)
    }

    /// Follows `rest` of a path from `value`.
    fn descend(&mut self, value: Value, rest: &[String]) -> Result<Option<Value>, StoreError> {
        let Some((segment, rest)) = rest.split_first() else { return Ok(Some(value)) };
        let next = match value {
            Value::Object { descriptor, fields } | Value::Subclass { descriptor, fields, .. } => {
                let d = self.descriptor(descriptor)?;
                d.field_index(segment).and_then(|i| fields.into_iter().nth(i))
            }
            Value::Dict(pairs) => pairs
                .into_iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == segment))
                .map(|(_, v)| v),
            Value::Ref(oid) => self.referenced_field(oid, segment)?,
            _ => None,
        };
        match next {
            Some(v) => self.descend(v, rest),
            None => Ok(None),
        }
    }

    fn referenced_field(&mut self, oid: Oid, name: &str) -> Result<Option<Value>, StoreError> {
        if !self.referenced.contains_key(&oid) {
            let loaded = match self.snapshot.get(oid)? {
                None => None,
                Some(record) => {
                    let catalog = self.snapshot.store().catalog();
                    let (header, fields) = decode_record_state(&record, &*catalog)
                        .map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source })?;
                    drop(catalog);
                    Some((self.descriptor(header.descriptor)?, fields))
                }
            };
            self.referenced.insert(oid, loaded);
        }
        Ok(self.referenced[&oid]
            .as_ref()
            .and_then(|(d, fields)| d.field_index(name).map(|i| fields[i].clone())))
    }
}

/// The paths a query reads: filter paths, then order paths.
fn query_paths(query: &Query) -> Vec<Path> {
    let mut paths = Vec::new();
    query.filter.paths(&mut paths);
    let mut all: Vec<Path> = paths.into_iter().cloned().collect();
    for (path, _) in &query.order {
        if !all.contains(path) {
            all.push(path.clone());
        }
    }
    all
}

/// How `query` will run on `snapshot`: through an index or by scanning the extents.
pub fn access(snapshot: &Snapshot, query: &Query) -> Result<Access, StoreError> {
    let defs = snapshot.index_defs()?;
    if defs.is_empty() {
        return Ok(Access::Scan);
    }
    snapshot.all_descriptors()?;
    let type_names: Vec<String> = {
        let catalog = snapshot.store().catalog();
        query.classes.iter().filter_map(|c| catalog.type_name(*c).map(str::to_owned)).collect()
    };
    Ok(plan::plan(query, &defs, &type_names))
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
    for path in &paths {
        if let Some(first) = path.first() {
            if !names.contains(&first.as_str()) {
                names.push(first);
            }
        }
    }
    let mut reader = Reader::new(snapshot);
    let mut test = |oid: Oid, record: &[u8]| -> Result<bool, StoreError> {
        if query.exclude.contains(&oid) {
            return Ok(true);
        }
        let top = reader.fields(oid, record, &names)?;
            let mut lookup = |path: &Path| -> Option<Value> {
                let index = names.iter().position(|n| *n == path[0])?;
                let value = top[index].clone()?;
                match reader.descend(value, &path[1..]) {
                    Ok(found) => found,
                    Err(error) => {
                        reader.failure.get_or_insert(error);
                        None
                    }
                }
            };
        let matched = query.filter.eval(&mut lookup);
        let keys: Vec<Option<Value>> =
            if matched { query.order.iter().map(|(path, _)| lookup(path)).collect() } else { Vec::new() };
        if let Some(error) = reader.failure.take() {
            return Err(error);
        }
        Ok(!matched || visit(oid, record, keys))
    };
    match access {
        Access::Scan => {
            for &class in &query.classes {
                let mut go_on = true;
                snapshot.scan_extent(class, |oid, record| {
                    go_on = test(oid, record)?;
                    Ok(go_on)
                })?;
                if !go_on {
                    break;
                }
            }
        }
        Access::Index { def, ranges, descending, ordered, .. } => {
            // Candidates are tested in batches; an ordered scan that a limit will stop early
            // reads only as many index entries as it may need.
            let batch = match (ordered, query.limit) {
                (true, Some(limit)) => (limit + query.offset).clamp(1, 1024),
                _ => 1024,
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
fn test_batch(
    snapshot: &Snapshot,
    candidates: &mut Vec<Oid>,
    test: &mut impl FnMut(Oid, &[u8]) -> Result<bool, StoreError>,
) -> Result<bool, StoreError> {
    for oid in candidates.drain(..) {
        if let Some(record) = snapshot.get(oid)? {
            if !test(oid, &record)? {
                return Ok(false);
            }
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

/// How many records match (offset and limit ignored).
pub fn count(snapshot: &Snapshot, query: &Query) -> Result<u64, StoreError> {
    let mut n = 0;
    let unordered = Query { order: Vec::new(), ..query.clone() };
    let access = access(snapshot, &unordered)?;
    for_each_match(snapshot, &unordered, &access, |_, _, _| {
        n += 1;
        true
    })?;
    Ok(n)
}
