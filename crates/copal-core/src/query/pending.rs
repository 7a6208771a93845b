//! A running transaction's uncommitted changes, as queries see them: records that replace stored
//! ones or add new objects, deleted objects, and the provisional catalog entries that new
//! records need. The binding encodes the transaction's changed, new and mutated objects into
//! ordinary records (docs/FORMAT.md) and the query engine reads them before the snapshot.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::format::{class_extent, make_oid, ClassNo, DecodeError, Descriptor, DescriptorSource, Oid, MAX_SEQ};
use crate::store::{Catalog, Snapshot, StoreError};

use super::Query;

/// The first provisional sequence number of each class: half the sequence space, far above any
/// stored object's.
pub const FIRST_NEW_SEQ: u64 = MAX_SEQ / 2 + 1;

/// The pending changes of a transaction.
///
/// Invariants:
/// - An oid is in at most one of `records` and `deleted`.
/// - Provisional class numbers count down from `ClassNo::MAX - 1` (`ClassNo::MAX` is never a
///   class: the end of its extent would not fit an oid) and provisional descriptor ids from
///   `u32::MAX`, skipping those the catalog holds when they are given out. The catalog numbers
///   its own upwards, so the two never meet below 65,535 classes or 2^32 descriptors in all.
/// - A provisional descriptor's shape (type name, fields) is not in the catalog when it is made,
///   and no two provisional descriptors share a shape; its class number is the catalog's for
///   its type name if the catalog has one, else that type's provisional number.
/// - Provisional sequence numbers count up from `FIRST_NEW_SEQ` in each class, while stored
///   objects count up from 0 and stay below it: new objects sort after every stored object of
///   their class, in the order they were met, which is where their ids will be once committed.
#[derive(Debug, Default)]
pub struct Pending {
    /// Per oid, the record that replaces the stored one or adds a new object.
    records: BTreeMap<Oid, Vec<u8>>,
    /// Objects that count as absent: never results, and missing when referenced.
    deleted: BTreeSet<Oid>,
    /// Provisional class numbers, by type name.
    classes: HashMap<String, ClassNo>,
    /// Provisional descriptors, by id.
    descriptors: HashMap<u32, Arc<Descriptor>>,
    /// How many class numbers (counting down from `ClassNo::MAX - 1`) and descriptor ids
    /// (counting down from `u32::MAX`) have been given out or skipped.
    classes_below_top: ClassNo,
    descriptors_below_top: u32,
    /// Per class, how many provisional sequence numbers have been given out.
    new_objects: HashMap<ClassNo, u64>,
}

impl Pending {
    /// Whether no record is replaced, added or deleted: queries then read the snapshot alone.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.deleted.is_empty()
    }

    /// Makes `record` the state of `oid` for queries: it replaces the stored record of `oid`, or
    /// adds a new object (an oid from `new_oid`).
    pub fn put(&mut self, oid: Oid, record: Vec<u8>) {
        self.deleted.remove(&oid);
        self.records.insert(oid, record);
    }

    /// Makes `oid` absent for queries.
    pub fn delete(&mut self, oid: Oid) {
        self.records.remove(&oid);
        self.deleted.insert(oid);
    }

    /// The pending record of `oid`, if it has one.
    pub fn record(&self, oid: Oid) -> Option<&[u8]> {
        self.records.get(&oid).map(Vec::as_slice)
    }

    pub fn is_deleted(&self, oid: Oid) -> bool {
        self.deleted.contains(&oid)
    }

    /// Whether the pending state of `oid` replaces the stored one (a record or a deletion).
    pub fn overrides(&self, oid: Oid) -> bool {
        self.records.contains_key(&oid) || self.deleted.contains(&oid)
    }

    /// The class number of `type_name`: the catalog's if it has one, else a provisional one
    /// (the same for every call with that name).
    pub fn class_no(&mut self, catalog: &Catalog, type_name: &str) -> ClassNo {
        if let Some(class) = catalog.class_no(type_name) {
            return class;
        }
        if let Some(class) = self.classes.get(type_name) {
            return *class;
        }
        let class = loop {
            let candidate = (ClassNo::MAX - 1).checked_sub(self.classes_below_top).expect("fewer than 65,535 class numbers in use");
            self.classes_below_top = self.classes_below_top.saturating_add(1);
            if catalog.type_name(candidate).is_none() {
                break candidate;
            }
        };
        self.classes.insert(type_name.to_owned(), class);
        class
    }

    /// The descriptor of `type_name` with `fields`: the catalog's if it has one, else a
    /// provisional one (the same for every call with that shape).
    pub fn descriptor(&mut self, catalog: &Catalog, type_name: &str, fields: &[String]) -> Arc<Descriptor> {
        if let Some(d) = catalog.find(type_name, fields) {
            return Arc::clone(d);
        }
        if let Some(d) = self.descriptors.values().find(|d| d.type_name == type_name && d.fields == fields) {
            return Arc::clone(d);
        }
        let class_no = self.class_no(catalog, type_name);
        let id = loop {
            let candidate = u32::MAX.checked_sub(self.descriptors_below_top).expect("fewer than 2^32 descriptors in use");
            self.descriptors_below_top = self.descriptors_below_top.saturating_add(1);
            if catalog.get(candidate).is_none() {
                break candidate;
            }
        };
        let descriptor = Arc::new(Descriptor { id, class_no, type_name: type_name.to_owned(), fields: fields.to_vec() });
        self.descriptors.insert(id, Arc::clone(&descriptor));
        descriptor
    }

    /// The provisional class number of `type_name`, if this overlay gave it one.
    pub fn provisional_class(&self, type_name: &str) -> Option<ClassNo> {
        self.classes.get(type_name).copied()
    }

    /// The provisional descriptor `id`, if it is one.
    pub fn provisional_descriptor(&self, id: u32) -> Option<&Arc<Descriptor>> {
        self.descriptors.get(&id)
    }

    /// A provisional oid for a new object of `class`, after every stored object of the class.
    pub fn new_oid(&mut self, class: ClassNo) -> Oid {
        let given = self.new_objects.entry(class).or_insert(0);
        let seq = FIRST_NEW_SEQ.checked_add(*given).filter(|seq| *seq <= MAX_SEQ).expect("fewer than 2^47 new objects in a class");
        *given += 1;
        make_oid(class, seq)
    }

    /// Whether the pending records or deletions hold an object of `class`.
    fn touches(&self, class: ClassNo) -> bool {
        let (first, end) = class_extent(class);
        self.records.range(first..end).next().is_some() || self.deleted.range(first..end).next().is_some()
    }

    /// The pending records of `class`, in oid order.
    fn records_of(&self, class: ClassNo) -> impl Iterator<Item = (Oid, &[u8])> + '_ {
        let (first, end) = class_extent(class);
        self.records.range(first..end).map(|(oid, record)| (*oid, record.as_slice()))
    }

    /// The pending oids (records and deletions) of `class`.
    fn oids_of(&self, class: ClassNo) -> impl Iterator<Item = Oid> + '_ {
        let (first, end) = class_extent(class);
        self.records.range(first..end).map(|(oid, _)| *oid).chain(self.deleted.range(first..end).copied())
    }
}

/// What a query reads: the snapshot, with the pending records, deletions and provisional
/// descriptors of a transaction before it.
#[derive(Clone, Copy)]
pub(super) struct Source<'a> {
    pub snapshot: &'a Snapshot,
    pub pending: &'a Pending,
}

impl<'a> Source<'a> {
    /// The descriptor `id`, provisional or stored.
    pub fn descriptor(&self, id: u32) -> Result<Arc<Descriptor>, StoreError> {
        match self.pending.descriptors.get(&id) {
            Some(d) => Ok(Arc::clone(d)),
            None => self.snapshot.descriptor(id),
        }
    }

    /// The record of `oid` as the transaction sees it: its pending record, none if it is
    /// deleted, else the stored one.
    pub fn record(&self, oid: Oid) -> Result<Option<Cow<'a, [u8]>>, StoreError> {
        if !self.pending.is_empty() {
            if let Some(record) = self.pending.record(oid) {
                return Ok(Some(Cow::Borrowed(record)));
            }
            if self.pending.is_deleted(oid) {
                return Ok(None);
            }
        }
        self.snapshot.get(oid)
    }
}

impl DescriptorSource for Source<'_> {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        // Checked only when the transaction made descriptors: scans of stored records do not
        // hash per embedded object.
        if !self.pending.descriptors.is_empty() {
            if let Some(d) = self.pending.descriptors.get(&id) {
                return Ok(d.fields.len());
            }
        }
        self.snapshot.field_count(id)
    }
}

/// The part of a `Pending` that one query's extents see.
pub(super) struct Overlay<'p> {
    pending: &'p Pending,
    /// The pending records of the queried classes that the query does not exclude, in oid
    /// order: each is tested against the filter directly.
    pub records: Vec<(Oid, &'p [u8])>,
    /// Whether pending records or deletions fall in the queried classes: only then may a stored
    /// record be hidden, and need its oid be looked up.
    active: bool,
}

impl<'p> Overlay<'p> {
    pub fn new(pending: &'p Pending, query: &Query) -> Self {
        if pending.is_empty() {
            return Overlay { pending, records: Vec::new(), active: false };
        }
        let active = query.classes.iter().any(|class| pending.touches(*class));
        let mut records: Vec<(Oid, &[u8])> = query
            .classes
            .iter()
            .flat_map(|class| pending.records_of(*class))
            .filter(|(oid, _)| !query.exclude.contains(oid))
            .collect();
        // Already sorted when the classes are (`Query::new` sorts them).
        records.sort_unstable_by_key(|(oid, _)| *oid);
        Overlay { pending, records, active }
    }

    /// Whether the stored record of `oid` (of a queried class) is replaced or deleted.
    pub fn hides(&self, oid: Oid) -> bool {
        self.active && self.pending.overrides(oid)
    }

    /// Whether `oid` is one of `records`.
    pub fn holds(&self, oid: Oid) -> bool {
        self.records.binary_search_by_key(&oid, |(o, _)| *o).is_ok()
    }

    /// The ids a count of the whole extent of `class` leaves out: those the query excludes, and
    /// the pending ones (their records are counted from the overlay).
    pub fn excluded_from_extent<'q>(&self, class: ClassNo, query: &'q Query) -> Cow<'q, HashSet<Oid>> {
        if !self.active || !self.pending.touches(class) {
            return Cow::Borrowed(&query.exclude);
        }
        let mut excluded = query.exclude.clone();
        excluded.extend(self.pending.oids_of(class));
        Cow::Owned(excluded)
    }

    /// How many of `records` belong to `class`.
    pub fn count_of(&self, class: ClassNo) -> u64 {
        let (first, end) = class_extent(class);
        self.records.iter().filter(|(oid, _)| (first..end).contains(oid)).count() as u64
    }

    /// A cursor over `records`, for merging them into a stream of stored records in oid order.
    pub fn cursor(&self) -> Cursor<'_, 'p> {
        Cursor { rest: &self.records }
    }
}

/// The overlay records not yet tested, while they are merged into stored records in oid order.
pub(super) struct Cursor<'o, 'p> {
    rest: &'o [(Oid, &'p [u8])],
}

impl Cursor<'_, '_> {
    /// Calls `test` on the remaining records before `bound` (all of them if None), until it
    /// returns false (then false).
    pub fn test_before(
        &mut self,
        bound: Option<Oid>,
        test: &mut impl FnMut(Oid, &[u8], Option<&[u8]>) -> Result<bool, StoreError>,
    ) -> Result<bool, StoreError> {
        while let Some((&(oid, record), rest)) = self.rest.split_first() {
            if bound.is_some_and(|bound| oid >= bound) {
                break;
            }
            self.rest = rest;
            if !test(oid, record, None)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::oid_class;

    fn catalog() -> Catalog {
        let mut catalog = Catalog::default();
        for (id, class_no, name) in [(1, 1, "copal.PersistentDict"), (2, 2, "app.Person"), (u32::MAX, ClassNo::MAX - 1, "app.Odd")] {
            let fields = vec!["name".to_owned()];
            catalog.insert(Arc::new(Descriptor { id, class_no, type_name: name.to_owned(), fields }));
        }
        catalog
    }

    #[test]
    fn provisional_numbers_come_from_the_top_and_skip_the_catalogs() {
        let catalog = catalog();
        let mut pending = Pending::default();
        assert_eq!(pending.class_no(&catalog, "app.Person"), 2);
        let new_class = pending.class_no(&catalog, "app.New");
        assert_eq!(new_class, ClassNo::MAX - 2, "ClassNo::MAX - 1 is the catalog's");
        assert_eq!(pending.class_no(&catalog, "app.New"), new_class);
        assert_eq!(pending.class_no(&catalog, "app.Newer"), ClassNo::MAX - 3);

        let stored = pending.descriptor(&catalog, "app.Person", &["name".to_owned()]);
        assert_eq!(stored.id, 2);
        let wider = pending.descriptor(&catalog, "app.Person", &["name".to_owned(), "age".to_owned()]);
        assert_eq!((wider.id, wider.class_no), (u32::MAX - 1, 2));
        assert_eq!(pending.descriptor(&catalog, "app.Person", &["name".to_owned(), "age".to_owned()]).id, wider.id);
        let fresh = pending.descriptor(&catalog, "app.New", &[]);
        assert_eq!((fresh.id, fresh.class_no), (u32::MAX - 2, new_class));
        assert_eq!(pending.provisional_descriptor(fresh.id), Some(&fresh));
        assert!(pending.provisional_descriptor(2).is_none());
    }

    #[test]
    fn new_oids_count_up_from_the_upper_half_of_their_extent() {
        let mut pending = Pending::default();
        let first = pending.new_oid(2);
        let second = pending.new_oid(2);
        assert_eq!(first, make_oid(2, FIRST_NEW_SEQ));
        assert_eq!(second, make_oid(2, FIRST_NEW_SEQ + 1));
        assert_eq!(oid_class(pending.new_oid(3)), 3);
    }

    #[test]
    fn an_oid_is_either_replaced_or_deleted() {
        let mut pending = Pending::default();
        assert!(pending.is_empty());
        pending.put(5, vec![1]);
        pending.delete(5);
        assert!(pending.record(5).is_none() && pending.is_deleted(5) && pending.overrides(5));
        pending.put(5, vec![2]);
        assert_eq!(pending.record(5), Some(&[2][..]));
        assert!(!pending.is_deleted(5) && !pending.is_empty());
    }

    #[test]
    fn an_overlay_holds_the_records_of_the_queried_classes_in_oid_order() {
        let mut pending = Pending::default();
        pending.put(make_oid(3, 1), vec![3]);
        pending.put(make_oid(2, 9), vec![2]);
        pending.put(make_oid(2, 1), vec![1]);
        pending.put(make_oid(4, 1), vec![4]);
        pending.delete(make_oid(5, 0));
        let mut query = Query::new(vec![3, 2], super::super::Expr::True);
        query.exclude.insert(make_oid(2, 9));
        let overlay = Overlay::new(&pending, &query);
        let oids: Vec<Oid> = overlay.records.iter().map(|(oid, _)| *oid).collect();
        assert_eq!(oids, vec![make_oid(2, 1), make_oid(3, 1)]);
        assert!(overlay.hides(make_oid(2, 9)) && !overlay.hides(make_oid(2, 2)));
        assert!(overlay.holds(make_oid(3, 1)) && !overlay.holds(make_oid(2, 9)));
        assert_eq!(overlay.count_of(2), 1);
        assert!(!Overlay::new(&pending, &Query::new(vec![6], super::super::Expr::True)).hides(make_oid(5, 0)));
        assert!(Overlay::new(&pending, &Query::new(vec![5], super::super::Expr::True)).hides(make_oid(5, 0)));
    }
}
