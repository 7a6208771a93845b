//! Query evaluation on raw records (DESIGN.md §5): filters read only the fields they test,
//! straight from the stored bytes; paths follow embedded objects, dicts and references (a join on
//! object ids, reading the referenced record, never building objects); only matches are returned.
//! A query may see a running transaction's uncommitted changes (`Pending`): its records replace
//! the stored ones everywhere the query reads records, and its deleted objects are absent.

mod aggregate;
mod clock;
mod decimal;
mod expr;
mod group_scan;
mod number;
mod order;
mod pending;
mod plan;
mod reader;
mod value_set;
mod zone;

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub use aggregate::{aggregate_pending, Aggregate, AggregateError, Aggregation};
pub use expr::{compares, CmpOp, Expr, Path};
pub use order::{compare, equals, sort_order};
pub use zone::{search_path_exists as zone_search_path_exists, set_search_path as set_zone_search_path};
pub(crate) use clock::{datetime_line, time_line};
pub(crate) use number::{decimal_key, DecimalKey};
pub use pending::{Pending, FIRST_NEW_SEQ};
pub use plan::Access;

use crate::format::{ClassNo, Descriptor, Oid, Value};
use crate::store::{Snapshot, StoreError};
use group_scan::GroupScan;
use pending::{Overlay, Source};
use reader::Reader;
use value_set::ValueSets;

/// What to find: objects of the given class extents that satisfy `filter`, sorted by `order`
/// (path, descending), after skipping `offset`, at most `limit`, leaving out `exclude`; and of
/// each, the values of the `select` paths (projections and aggregates read them).
#[derive(Debug, Clone)]
pub struct Query {
    pub classes: Vec<ClassNo>,
    pub filter: Expr,
    pub order: Vec<(Path, bool)>,
    pub select: Vec<Path>,
    pub offset: usize,
    pub limit: Option<usize>,
    pub exclude: HashSet<Oid>,
    /// Per stored type name, the (former name, current name) pairs of fields its class renamed
    /// (`__copal_renamed__`): records written before the rename hold the former name.
    pub renamed: Arc<HashMap<String, Vec<(String, String)>>>,
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
        Query { classes, filter, order: Vec::new(), select: Vec::new(), offset: 0, limit: None, exclude: HashSet::new(), renamed: Arc::default(), defaults: HashMap::new() }
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

/// The paths a query reads, borrowed from it: filter paths, then order and selected paths.
fn query_paths(query: &Query) -> Vec<&Path> {
    let mut paths = Vec::new();
    query.filter.paths(&mut paths);
    for path in query.order.iter().map(|(path, _)| path).chain(&query.select) {
        if !paths.contains(&path) {
            paths.push(path);
        }
    }
    paths
}

/// How `query` will run on `snapshot`: through an index or by scanning the extents.
pub fn access(snapshot: &Snapshot, query: &Query) -> Result<Access, StoreError> {
    if let Some(access) = plan::by_oids(&plan::conjuncts(&query.filter)) {
        return Ok(access);
    }
    let defs = snapshot.index_defs()?;
    if defs.is_empty() {
        return Ok(Access::Scan);
    }
    snapshot.refresh_catalog()?;
    let catalog = snapshot.store().catalog();
    let type_names: Vec<&str> = query.classes.iter().filter_map(|c| catalog.type_name(*c)).collect();
    // Classes the store has never held (a transaction's new ones) have no stored records: no
    // index covers them, and with no stored class at all there is nothing to look up.
    if type_names.is_empty() {
        return Ok(Access::Scan);
    }
    Ok(plan::plan(query, defs, &type_names))
}

/// `query` with each `ReferencedBy` of its filter replaced by the `SelfIn` of the objects it
/// names: the values of its inner query's selected path, run on `snapshot` with `pending` (so
/// that it sees the transaction's changes too), and the references they hold.
pub(crate) fn resolved<'q>(snapshot: &Snapshot, pending: &Pending, query: &'q Query) -> Result<Cow<'q, Query>, StoreError> {
    if !query.filter.has_reverse_joins() {
        return Ok(Cow::Borrowed(query));
    }
    let filter = resolve(snapshot, pending, &query.filter)?;
    Ok(Cow::Owned(Query { filter, ..query.clone() }))
}

fn resolve(snapshot: &Snapshot, pending: &Pending, expr: &Expr) -> Result<Expr, StoreError> {
    let all = |items: &[Expr]| items.iter().map(|e| resolve(snapshot, pending, e)).collect::<Result<Vec<_>, _>>();
    Ok(match expr {
        Expr::ReferencedBy(inner) => {
            let mut targets = Vec::new();
            for (_, values) in values_pending(snapshot, pending, inner)? {
                values.iter().flatten().for_each(|value| value.references(&mut targets));
            }
            targets.sort_unstable();
            targets.dedup();
            Expr::SelfIn(targets.into_iter().map(Value::Ref).collect())
        }
        Expr::And(items) => Expr::And(all(items)?),
        Expr::Or(items) => Expr::Or(all(items)?),
        Expr::Not(inner) => Expr::Not(Box::new(resolve(snapshot, pending, inner)?)),
        other => other.clone(),
    })
}

/// A description of the chosen access, for `Query.explain()`.
pub fn explain(snapshot: &Snapshot, query: &Query) -> Result<String, StoreError> {
    explain_pending(snapshot, &Pending::default(), query)
}

/// As `explain`, for a query that sees a transaction's `pending` changes.
pub fn explain_pending(snapshot: &Snapshot, pending: &Pending, query: &Query) -> Result<String, StoreError> {
    let query = &*resolved(snapshot, pending, query)?;
    let access = access(snapshot, query)?;
    let mut text = plan::describe(&access, query);
    let overlay = Overlay::new(pending, query);
    if !overlay.records.is_empty() {
        text.push_str(&format!(", plus {} pending record(s) of the transaction, tested directly", overlay.records.len()));
        if matches!(access, Access::Index { ordered: true, .. }) {
            text.push_str(" and sorted into the results");
        }
    }
    Ok(text)
}

/// The keys of a match (its sort keys, then its selected values), its oid, and what is kept of
/// its record (the record, or nothing when the selected values are all that is wanted).
type Found<T> = (Vec<Option<Value>>, Oid, T);

/// Tests records against a query's filter, reading only the fields that it and the order read.
struct Matcher<'a> {
    query: &'a Query,
    /// The first segments of the paths the query reads, each once.
    names: Vec<&'a str>,
    /// Per name, the string a conjunct `name == "text"` of the filter requires: a record is
    /// rejected from the raw bytes of that field.
    required: Vec<Option<&'a str>>,
    /// The filter's long `in_` lists, hashed.
    sets: ValueSets<'a>,
    reader: Reader<'a>,
    /// The values of `names` in the record tested last (their buffers are reused).
    top: Vec<Option<Value>>,
}

impl<'a> Matcher<'a> {
    fn new(source: Source<'a>, query: &'a Query) -> Self {
        let mut names: Vec<&str> = Vec::new();
        for path in query_paths(query) {
            if let Some(first) = path.first() {
                if !names.contains(&first.as_str()) {
                    names.push(first);
                }
            }
        }
        let conjuncts = plan::conjuncts(&query.filter);
        let required = names
            .iter()
            .map(|name| {
                conjuncts.iter().find_map(|c| match c {
                    Expr::Cmp { path, op: CmpOp::Eq, value: Value::Str(s) } if path.len() == 1 && path[0] == *name => Some(s.as_str()),
                    _ => None,
                })
            })
            .collect();
        let top = Vec::with_capacity(names.len());
        Matcher { query, names, required, sets: ValueSets::new(&query.filter), reader: Reader::new(source, query), top }
    }

    /// Whether the query wants the record of `oid` (not excluded, and the filter holds); if it
    /// does, `keys` (emptied first, its room reused) holds its keys: its sort keys, then its
    /// selected values (each whole: no back-reference left in it, `Reader::descend`).
    /// `unverified` is the stored value (record and checksum) of a record whose checksum has
    /// not been checked yet: it is checked if the record matches, before anything uses it.
    fn test(&mut self, oid: Oid, record: &[u8], unverified: Option<&[u8]>, keys: &mut Vec<Option<Value>>) -> Result<bool, StoreError> {
        let query = self.query;
        if query.exclude.contains(&oid) {
            return Ok(false);
        }
        if !self.reader.fields_into(oid, record, &self.names, &self.required, &mut self.top)? {
            return Ok(false);
        }
        let (names, top, reader) = (&self.names, &self.top, &mut self.reader);
        let mut lookup = |path: &Path| -> Option<Cow<'_, Value>> {
            // The empty path is the object itself (`Expr::SelfIn`).
            if path.is_empty() {
                return Some(Cow::Owned(Value::Ref(oid)));
            }
            // `names` borrow the query's own paths: a pointer match usually spares comparing.
            let index = names.iter().position(|n| n.as_ptr() == path[0].as_ptr() || *n == path[0])?;
            let value = top[index].as_ref()?;
            if path.len() == 1 && !matches!(value, Value::BackRef(_)) {
                return Some(Cow::Borrowed(value));
            }
            match reader.descend(value.clone(), &path[1..], record, false) {
                Ok(found) => found.map(Cow::Owned),
                Err(error) => {
                    reader.failure.get_or_insert(error);
                    None
                }
            }
        };
        let matched = query.filter.eval_with(&mut lookup, &self.sets);
        keys.clear();
        if matched {
            // One allocation when a visitor took the buffer before.
            keys.reserve(query.order.len() + query.select.len());
            keys.extend(query.order.iter().map(|(path, _)| lookup(path).map(Cow::into_owned)));
            for path in &query.select {
                let value = names.iter().position(|n| n.as_ptr() == path[0].as_ptr() || *n == path[0]).and_then(|i| top[i].clone());
                keys.push(match value.map(|value| reader.descend(value, &path[1..], record, true)) {
                    Some(Ok(found)) => found,
                    Some(Err(error)) => {
                        reader.failure.get_or_insert(error);
                        None
                    }
                    None => None,
                });
            }
        }
        if let Some(error) = self.reader.failure.take() {
            return Err(error);
        }
        if let (Some(value), true) = (unverified, matched) {
            crate::store::unseal(oid, value)?;
        }
        Ok(matched)
    }
}

/// Calls `visit(oid, record, keys)` for every record that matches, stored or in the overlay,
/// until it returns false; `keys` (`Matcher::test`) is one buffer, filled again for each match,
/// which `visit` takes (`std::mem::take`) to keep. Scans and unordered index accesses visit in object-id order,
/// the overlay's records merged in; an ordered index access visits the overlay's records first,
/// then the stored ones in the query's order (ties in object-id order).
fn for_each_match(
    source: Source<'_>,
    query: &Query,
    access: &Access,
    overlay: &Overlay<'_>,
    mut visit: impl FnMut(Oid, &[u8], &mut Vec<Option<Value>>) -> bool,
) -> Result<(), StoreError> {
    let snapshot = source.snapshot;
    let mut matcher = Matcher::new(source, query);
    let mut keys = Vec::new();
    let mut test = |oid: Oid, record: &[u8], unverified: Option<&[u8]>| -> Result<bool, StoreError> {
        Ok(!matcher.test(oid, record, unverified, &mut keys)? || visit(oid, record, &mut keys))
    };
    // The overlay's records not yet tested. Stored records that the overlay replaces or deletes
    // are skipped (`hides`): the index and the extents hold their stored versions.
    let mut pending = overlay.cursor();
    match access {
        Access::Scan => {
            for &class in &query.classes {
                let mut go_on = true;
                snapshot.scan_extent_unverified(class, |oid, record, value| {
                    go_on = pending.test_before(Some(oid), &mut test)? && (overlay.hides(oid) || test(oid, record, Some(value))?);
                    Ok(go_on)
                })?;
                if !go_on {
                    return Ok(());
                }
            }
        }
        Access::Oids(_) | Access::Index { ordered: false, .. } => {
            // Results in object-id order, as a scan gives them (an index must not change what a
            // query returns, nor its order): candidates come from the index alone (or are named
            // by oid), then their records are read in id order, which also reads neighbouring
            // records together.
            let wanted = |oid: Oid| query.classes.contains(&crate::format::oid_class(oid)) && !overlay.hides(oid);
            let mut candidates = Vec::new();
            match access {
                Access::Oids(oids) => candidates.extend(oids.iter().copied().filter(|&oid| wanted(oid))),
                Access::Index { def, ranges, .. } => {
                    for range in ranges {
                        snapshot.scan_index(def.id, &range.start, range.end.as_deref(), false, |entry| {
                            let oid = crate::store::entry_oid(entry)?;
                            if wanted(oid) {
                                candidates.push(oid);
                            }
                            Ok(true)
                        })?;
                    }
                }
                Access::Scan => {}
            }
            candidates.sort_unstable();
            candidates.dedup();
            let mut merged = |oid: Oid, record: &[u8], unverified: Option<&[u8]>| -> Result<bool, StoreError> {
                Ok(pending.test_before(Some(oid), &mut test)? && test(oid, record, unverified)?)
            };
            if !test_batch(snapshot, &mut candidates, &mut merged)? {
                return Ok(());
            }
        }
        Access::Index { def, ranges, descending, ordered: true, sorted_fields, .. } => {
            if !pending.test_before(None, &mut test)? {
                return Ok(());
            }
            // Candidates are tested in batches: a limit stops the scan early, reading only as
            // many index entries as it may need.
            let batch = match query.limit {
                Some(limit) => (limit + query.offset).clamp(1, 1024),
                None => 1024,
            };
            let scan = GroupScan { snapshot, def, ranges, descending: *descending, sorted_fields: *sorted_fields, batch };
            let keep = |oid: Oid| query.classes.contains(&crate::format::oid_class(oid)) && !overlay.hides(oid);
            scan.run(keep, |oids, coarse| {
                // The matches of a coarse group are sorted by value before they are visited.
                let mut found: Vec<Found<Vec<u8>>> = Vec::new();
                let mut keys = Vec::new();
                let go_on = test_batch(snapshot, &mut oids.to_vec(), &mut |oid: Oid, record: &[u8], unverified: Option<&[u8]>| {
                    Ok(match matcher.test(oid, record, unverified, &mut keys)? {
                        false => true,
                        true if coarse => {
                            found.push((std::mem::take(&mut keys), oid, record.to_vec()));
                            true
                        }
                        true => visit(oid, record, &mut keys),
                    })
                })?;
                found.sort_by(|a, b| key_order(&a.0, &b.0, &query.order).then(a.1.cmp(&b.1)));
                Ok(go_on && found.into_iter().all(|(mut keys, oid, record)| visit(oid, &record, &mut keys)))
            })?;
            return Ok(());
        }
    }
    pending.test_before(None, &mut test)?;
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
        Stop,
        Failed(StoreError),
    }
    let outcome = snapshot.get_many(oids, |_| Ok(()), Halt::Failed, |i, record| match visit(oids[i], record) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Halt::Stop),
        Err(error) => Err(Halt::Failed(error)),
    });
    match outcome {
        Ok(()) => Ok(true),
        Err(Halt::Stop) => Ok(false),
        Err(Halt::Failed(error)) => Err(error),
    }
}

/// The (oid, record) of the matches, sorted, offset and limited as the query says.
pub fn run(snapshot: &Snapshot, query: &Query) -> Result<Vec<(Oid, Vec<u8>)>, StoreError> {
    run_pending(snapshot, &Pending::default(), query)
}

/// As `run`, for a query that sees a transaction's `pending` changes: an overlay record
/// replaces the stored one (and is returned as the record of its match), a deleted object is
/// never a match, and the order is the one the records would have once committed.
pub fn run_pending(snapshot: &Snapshot, pending: &Pending, query: &Query) -> Result<Vec<(Oid, Vec<u8>)>, StoreError> {
    let found = found_matches(snapshot, pending, query, <[u8]>::to_vec)?;
    Ok(found.into_iter().map(|(_, oid, record)| (oid, record)).collect())
}

/// A match's oid and the values of the query's `select` paths in it (None where a path leads
/// nowhere).
pub type Row = (Oid, Vec<Option<Value>>);

/// The `Row` of each match, in `run_pending`'s order, offset and limited: no record is kept.
pub fn values_pending(snapshot: &Snapshot, pending: &Pending, query: &Query) -> Result<Vec<Row>, StoreError> {
    let found = found_matches(snapshot, pending, query, |_| ())?;
    let sort_keys = query.order.len();
    Ok(found
        .into_iter()
        .map(|(mut keys, oid, ())| {
            keys.drain(..sort_keys);
            (oid, keys)
        })
        .collect())
}

/// The matches of `run_pending`, in its order, offset and limited, each with its keys and what
/// `keep` takes from its record.
fn found_matches<T>(snapshot: &Snapshot, pending: &Pending, query: &Query, keep: impl Fn(&[u8]) -> T) -> Result<Vec<Found<T>>, StoreError> {
    let query = &*resolved(snapshot, pending, query)?;
    let wanted = query.limit.map(|l| l.saturating_add(query.offset));
    let access = access(snapshot, query)?;
    let overlay = Overlay::new(pending, query);
    let source = Source { snapshot, pending };
    let in_order = matches!(access, Access::Index { ordered: true, .. });
    if query.order.is_empty() || (in_order && overlay.records.is_empty()) {
        let mut out = Vec::new();
        let mut seen = 0;
        if wanted == Some(0) {
            return Ok(out);
        }
        for_each_match(source, query, &access, &overlay, |oid, record, keys| {
            seen += 1;
            if seen > query.offset {
                out.push((std::mem::take(keys), oid, keep(record)));
            }
            wanted.is_none_or(|w| seen < w)
        })?;
        return Ok(out);
    }
    if in_order {
        return run_ordered_with_overlay(source, query, &access, &overlay, wanted, keep);
    }
    let mut all: Vec<Found<T>> = Vec::new();
    for_each_match(source, query, &access, &overlay, |oid, record, keys| {
        all.push((std::mem::take(keys), oid, keep(record)));
        true
    })?;
    let order = |a: &Found<T>, b: &Found<T>| key_order(&a.0, &b.0, &query.order).then(a.1.cmp(&b.1));
    match wanted {
        // Top-k: only the first `w` need to be in order.
        Some(w) if w < all.len() => {
            all.select_nth_unstable_by(w, order);
            all.truncate(w);
            all.sort_by(order);
        }
        _ => all.sort_by(order),
    }
    all.drain(..query.offset.min(all.len()));
    Ok(all)
}

/// The order of two matches' sort keys under the query's `order`.
fn key_order(a: &[Option<Value>], b: &[Option<Value>], order: &[(Path, bool)]) -> Ordering {
    for ((x, y), (_, descending)) in a.iter().zip(b).zip(order) {
        let o = sort_order(x.as_ref(), y.as_ref());
        let o = if *descending { o.reverse() } else { o };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// `run` through an index that yields the stored matches in the query's order, with overlay
/// records of the queried classes: the stored matches keep the index's order, of which only the
/// first `wanted` can be results, and the overlay's matches (few: the transaction's) are sorted
/// and merged in. Ties go by oid, as everywhere.
fn run_ordered_with_overlay<T>(
    source: Source<'_>,
    query: &Query,
    access: &Access,
    overlay: &Overlay<'_>,
    wanted: Option<usize>,
    keep: impl Fn(&[u8]) -> T,
) -> Result<Vec<Found<T>>, StoreError> {
    let (mut stored, mut added): (Vec<Found<T>>, Vec<Found<T>>) = (Vec::new(), Vec::new());
    if wanted != Some(0) {
        // The overlay's records come first (`for_each_match`): stopping after `wanted` stored
        // matches leaves none of them untested.
        for_each_match(source, query, access, overlay, |oid, record, keys| {
            if overlay.holds(oid) {
                added.push((std::mem::take(keys), oid, keep(record)));
                return true;
            }
            stored.push((std::mem::take(keys), oid, keep(record)));
            wanted.is_none_or(|w| stored.len() < w)
        })?;
    }
    let before = |a: &Found<T>, b: &Found<T>| key_order(&a.0, &b.0, &query.order).then(a.1.cmp(&b.1));
    added.sort_by(before);
    let mut added = added.into_iter().peekable();
    let mut merged = Vec::with_capacity(stored.len() + added.len());
    for found in stored {
        while let Some(first) = added.next_if(|a| before(a, &found) == Ordering::Less) {
            merged.push(first);
        }
        merged.push(found);
    }
    merged.extend(added);
    let limit = query.limit.unwrap_or(usize::MAX);
    Ok(merged.into_iter().skip(query.offset).take(limit).collect())
}

/// The ids of the matches, in `run`'s order, offset and limited: from the index alone when it
/// can (`index_oids`), else `run`'s.
pub fn oids_pending(snapshot: &Snapshot, pending: &Pending, query: &Query) -> Result<Vec<Oid>, StoreError> {
    match index_oids(snapshot, pending, query)? {
        Some(oids) => Ok(oids),
        None => Ok(run_pending(snapshot, pending, query)?.into_iter().map(|(oid, _)| oid).collect()),
    }
}

/// The ids of the matches, in `run`'s order, offset and limited, read from an index that
/// answers the filter exactly, without reading a record; None when no index does, or when the
/// transaction's overlay holds records of the queried classes (they must be tested).
pub fn index_oids(snapshot: &Snapshot, pending: &Pending, query: &Query) -> Result<Option<Vec<Oid>>, StoreError> {
    let query = &*resolved(snapshot, pending, query)?;
    let access = access(snapshot, query)?;
    let overlay = Overlay::new(pending, query);
    let Access::Index { def, ranges, exact: true, ordered, descending, sorted_fields, single, .. } = &access else { return Ok(None) };
    if !overlay.records.is_empty() || !(query.order.is_empty() || *ordered) {
        return Ok(None);
    }
    let wanted = query.limit.map(|l| l.saturating_add(query.offset));
    let kept = |oid: Oid| {
        query.classes.contains(&crate::format::oid_class(oid)) && !query.exclude.contains(&oid) && !overlay.hides(oid)
    };
    let mut oids = Vec::new();
    if *ordered {
        // In the query's order, ties in oid order, as `run` gives them; a coarse group of two
        // or more (values that only their records can order) needs `run`.
        let mut needs_records = false;
        let batch = wanted.unwrap_or(1024).clamp(1, 1024);
        let scan = GroupScan { snapshot, def, ranges, descending: *descending, sorted_fields: *sorted_fields, batch };
        scan.run(kept, |group, coarse| {
            if coarse && group.len() > 1 {
                needs_records = true;
                return Ok(false);
            }
            oids.extend_from_slice(group);
            Ok(wanted.is_none_or(|w| oids.len() < w))
        })?;
        if needs_records {
            return Ok(None);
        }
    } else {
        for range in ranges {
            snapshot.scan_index(def.id, &range.start, range.end.as_deref(), false, |entry| {
                let oid = crate::store::entry_oid(entry)?;
                if kept(oid) {
                    oids.push(oid);
                }
                // The entry after a single one lies outside the range: not read.
                Ok(!*single)
            })?;
        }
        // Object-id order, as a scan gives them.
        oids.sort_unstable();
        oids.dedup();
    }
    Ok(Some(oids.into_iter().skip(query.offset).take(query.limit.unwrap_or(usize::MAX)).collect()))
}

/// How many records match (offset and limit ignored). Counts that an index answers exactly, and
/// counts of whole extents, read no record.
pub fn count(snapshot: &Snapshot, query: &Query) -> Result<u64, StoreError> {
    count_pending(snapshot, &Pending::default(), query)
}

/// As `count`, for a query that sees a transaction's `pending` changes. Counts that an index or
/// the extents answer leave out the stored versions of the overlay's objects and test its
/// records directly.
pub fn count_pending(snapshot: &Snapshot, pending: &Pending, query: &Query) -> Result<u64, StoreError> {
    let query = &*resolved(snapshot, pending, query)?;
    let mut n = 0;
    let unordered = Query { order: Vec::new(), ..query.clone() };
    let access = access(snapshot, &unordered)?;
    let overlay = Overlay::new(pending, &unordered);
    let source = Source { snapshot, pending };
    let counted = |oid: Oid| {
        query.classes.contains(&crate::format::oid_class(oid)) && !query.exclude.contains(&oid) && !overlay.hides(oid)
    };
    match &access {
        Access::Index { def, ranges, exact: true, .. } => {
            for range in ranges {
                snapshot.scan_index(def.id, &range.start, range.end.as_deref(), false, |entry| {
                    n += u64::from(counted(crate::store::entry_oid(entry)?));
                    Ok(true)
                })?;
            }
            let mut matcher = Matcher::new(source, &unordered);
            let mut keys = Vec::new();
            for (oid, record) in &overlay.records {
                n += u64::from(matcher.test(*oid, record, None, &mut keys)?);
            }
            return Ok(n);
        }
        Access::Scan if matches!(query.filter, Expr::True) => {
            for &class in &query.classes {
                n += snapshot.count_extent(class, &overlay.excluded_from_extent(class, &unordered))?;
                n += overlay.count_of(class);
            }
            return Ok(n);
        }
        _ => {}
    }
    for_each_match(source, &unordered, &access, &overlay, |_, _, _| {
        n += 1;
        true
    })?;
    Ok(n)
}
