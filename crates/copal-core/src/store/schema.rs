//! The stored schema as data: which descriptors the records use (`copal schema`), the fields that
//! applications declared removed (`__copal_removed__`, docs/FORMAT.md section 5, rule 9), and the
//! maintenance that drops their values from the records (`copal gc --schema`). Everything here
//! works from the store alone, without the application's classes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::checksum::unseal;
use super::commit::Commit;
use super::error::StoreError;
use super::index::{stale_indexes, DeclaredIndex, RemovedIndex};
use super::snapshot::Snapshot;
use super::Store;
use crate::format::{decode_record_state, DecodeError, Descriptor, Oid, Reader, RecordHeader, Value, Writer};

/// Setting keys of removal declarations: this prefix, then the stored type name (UTF-8). The
/// value is the list of removed field names: a varint count, then each name length-prefixed.
const REMOVED_PREFIX: &[u8] = b"removed:";

/// One descriptor and how many records are written with it.
#[derive(Debug, Clone)]
pub struct DescriptorUse {
    pub descriptor: Arc<Descriptor>,
    pub records: u64,
}

/// Every descriptor of a store with its record count, in descriptor id order.
#[derive(Debug, Clone, Default)]
pub struct SchemaSummary {
    pub descriptors: Vec<DescriptorUse>,
    /// Records whose header does not parse or names no known descriptor (`copal verify` says why).
    pub unreadable: u64,
    /// Declared removed fields by stored type name.
    pub removed: BTreeMap<String, Vec<String>>,
}

/// How many records of `type_name` still hold a value of the removed field `field`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedValues {
    pub type_name: String,
    pub field: String,
    pub records: u64,
}

/// What `copal gc --schema` found and, when purging, did.
#[derive(Debug, Clone, Default)]
pub struct SchemaGcReport {
    pub removed: Vec<RemovedValues>,
    /// Records holding at least one removed value.
    pub records: u64,
    /// Records rewritten without their removed values (0 unless purging).
    pub purged: u64,
    /// Records left as they are because a kept field shares a value with a removed one (a
    /// back-reference into it); they lose the removed value when the object is next written.
    pub shared: Vec<Oid>,
    /// The tid of the purge commit, if one was made.
    pub tid: Option<u64>,
}

/// Whether a removal of `fields` from `type_name` is stored as a declaration: not an empty list
/// (it withdraws the declaration), nor for a type without descriptors in this store (no record
/// can hold its removed fields, and an application declares its classes to every database it
/// opens).
fn stores_removal(store: &Store, type_name: &str, fields: &[String]) -> bool {
    !fields.is_empty() && store.catalog().class_no(type_name).is_some()
}

fn removed_key(type_name: &str) -> Vec<u8> {
    [REMOVED_PREFIX, type_name.as_bytes()].concat()
}

fn encode_names(names: &[String]) -> Vec<u8> {
    let mut w = Writer::new();
    w.varint(names.len() as u64);
    names.iter().for_each(|name| w.length_prefixed(name.as_bytes()));
    w.buf
}

fn decode_names(data: &[u8]) -> Result<Vec<String>, DecodeError> {
    let mut r = Reader::new(data);
    let count = r.length(1)?;
    let names = (0..count).map(|_| r.str().map(str::to_owned)).collect::<Result<_, _>>()?;
    r.expect_end()?;
    Ok(names)
}

impl Snapshot {
    /// Counts the records of every descriptor. Only record headers are read: no checksum, no
    /// values, so this costs one pass over the keys and the first bytes of each record.
    pub fn schema_summary(&self) -> Result<SchemaSummary, StoreError> {
        let descriptors = self.all_descriptors()?;
        let mut counts: HashMap<u32, u64> = HashMap::new();
        let mut unreadable = 0;
        self.scan_all_values(|_, value| {
            // The checksum trails the record, so the header is the stored value's first bytes.
            match RecordHeader::parse(value) {
                Ok((header, _)) => *counts.entry(header.descriptor).or_default() += 1,
                Err(_) => unreadable += 1,
            }
            Ok(())
        })?;
        let descriptors: Vec<DescriptorUse> = descriptors
            .into_iter()
            .map(|descriptor| DescriptorUse { records: counts.remove(&descriptor.id).unwrap_or(0), descriptor })
            .collect();
        unreadable += counts.values().sum::<u64>();
        Ok(SchemaSummary { descriptors, unreadable, removed: self.removed_fields()? })
    }

    /// Whether the store already holds what the application's classes declare: every declared
    /// index exists and covers the types declared for it, no index is stale (`stale_indexes`:
    /// declared removed in `removed_indexes`, or superseded), and the removed fields stored are
    /// `removed`'s. Then the maintenance commits (`Commit::ensure_index`, `drop_index`,
    /// `declare_removed`) would change nothing, and a process that opens the database need not
    /// wait for the commit lock to find it out.
    pub fn holds_declarations(
        &self,
        indexes: &[DeclaredIndex<'_>],
        removed_indexes: &[RemovedIndex],
        removed: &[(String, Vec<String>)],
    ) -> Result<bool, StoreError> {
        let defs = self.index_defs()?;
        let built = indexes
            .iter()
            .all(|index| defs.iter().any(|def| def.is_declared_as(index) && index.covered.iter().all(|c| def.covered.contains(c))));
        if !built || !stale_indexes(defs, indexes, removed_indexes).is_empty() {
            return Ok(false);
        }
        // Whether a type has descriptors decides whether its declaration is stored.
        self.refresh_catalog()?;
        let stored = self.removed_fields()?;
        Ok(removed.iter().all(|(type_name, fields)| {
            let wanted = stores_removal(self.store(), type_name, fields).then_some(fields);
            stored.get(type_name) == wanted
        }))
    }

    /// The declared removed fields, by stored type name.
    pub fn removed_fields(&self) -> Result<BTreeMap<String, Vec<String>>, StoreError> {
        let mut out = BTreeMap::new();
        self.settings(REMOVED_PREFIX, &mut |key, value| {
            let type_name = String::from_utf8_lossy(&key[REMOVED_PREFIX.len()..]).into_owned();
            let fields = decode_names(value)
                .map_err(|source| StoreError::Corrupt { what: format!("removed fields of {type_name}"), source })?;
            out.insert(type_name, fields);
            Ok(())
        })?;
        Ok(out)
    }
}

impl Commit<'_> {
    /// Records that the class stored as `type_name` no longer has `fields` (an empty list
    /// withdraws the declaration). Returns whether the stored declaration changed. A type name
    /// without descriptors in this store is skipped: no record can hold its removed fields, and
    /// an application declares its classes to every database it opens.
    pub fn declare_removed(&mut self, type_name: &str, fields: &[String]) -> Result<bool, StoreError> {
        let key = removed_key(type_name);
        let wanted = stores_removal(self.store, type_name, fields).then(|| encode_names(fields));
        if self.setting(&key)? == wanted {
            return Ok(false);
        }
        self.put_setting(&key, wanted.as_deref())?;
        Ok(true)
    }
}

/// How the records of one descriptor holding removed fields are rewritten.
struct Pruning {
    descriptor: Arc<Descriptor>,
    /// Whether each field of the descriptor is removed.
    dropped: Vec<bool>,
    kept_fields: Vec<String>,
}

/// A record to rewrite: its oid, the tid it was read with, its flags, its `Pruning` and the
/// values of the fields it keeps.
struct Rewrite {
    oid: Oid,
    read_tid: u64,
    flags: u8,
    pruning: usize,
    fields: Vec<Value>,
}

impl Store {
    /// Reports the records that still hold values of declared removed fields and, with `purge`,
    /// rewrites them without those values in one maintenance commit (indexes are maintained as
    /// for any write). Fails with `Conflict` if one of them changes during the purge.
    pub fn gc_schema(self: &Arc<Self>, purge: bool) -> Result<SchemaGcReport, StoreError> {
        let snapshot = Snapshot::new(self)?;
        let removed = snapshot.removed_fields()?;
        let mut prunings = Vec::new();
        let mut pruning_of: HashMap<u32, usize> = HashMap::new();
        for descriptor in snapshot.all_descriptors()? {
            let Some(gone) = removed.get(&descriptor.type_name) else { continue };
            let dropped: Vec<bool> = descriptor.fields.iter().map(|f| gone.contains(f)).collect();
            if dropped.contains(&true) {
                let kept_fields = descriptor.fields.iter().zip(&dropped).filter(|(_, d)| !**d).map(|(f, _)| f.clone()).collect();
                pruning_of.insert(descriptor.id, prunings.len());
                prunings.push(Pruning { descriptor, dropped, kept_fields });
            }
        }
        let mut report = SchemaGcReport::default();
        let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut rewrites = Vec::new();
        if !prunings.is_empty() {
            // Records of a renamed class may sit in the extent of its former class number, so the
            // whole table is read; records of other descriptors cost only their header.
            snapshot.scan_all_values(|oid, value| {
                let Ok((header, _)) = RecordHeader::parse(value) else { return Ok(()) };
                let Some(&index) = pruning_of.get(&header.descriptor) else { return Ok(()) };
                let pruning = &prunings[index];
                report.records += 1;
                for (field, _) in pruning.descriptor.fields.iter().zip(&pruning.dropped).filter(|(_, d)| **d) {
                    *counts.entry((pruning.descriptor.type_name.clone(), field.clone())).or_default() += 1;
                }
                if !purge {
                    return Ok(());
                }
                let record = unseal(oid, value)?;
                let (_, values) = decode_record_state(record, &*self.catalog())
                    .map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source })?;
                match prune(values, &pruning.dropped) {
                    Some(fields) => rewrites.push(Rewrite { oid, read_tid: header.tid, flags: header.flags, pruning: index, fields }),
                    None => report.shared.push(oid),
                }
                Ok(())
            })?;
        }
        report.removed = counts
            .into_iter()
            .map(|((type_name, field), records)| RemovedValues { type_name, field, records })
            .collect();
        drop(snapshot);
        if rewrites.is_empty() {
            return Ok(report);
        }
        let mut commit = Commit::begin(self)?;
        commit.set_maintenance();
        for rewrite in &rewrites {
            commit.check_unchanged(rewrite.oid, rewrite.read_tid)?;
            let pruning = &prunings[rewrite.pruning];
            let descriptor = commit.descriptor(&pruning.descriptor.type_name, &pruning.kept_fields)?;
            let mut w = Writer::new();
            RecordHeader { flags: rewrite.flags, descriptor: descriptor.id, tid: commit.tid() }.write(&mut w);
            rewrite.fields.iter().for_each(|v| v.encode(&mut w));
            commit.put(rewrite.oid, &w.buf)?;
        }
        report.purged = rewrites.len() as u64;
        report.tid = Some(commit.finish()?);
        Ok(report)
    }
}

/// The values of the kept fields of a record, with back-references renumbered for the memo
/// slots that the dropped values no longer take (FORMAT.md section 7); None when a kept value
/// refers back into a dropped one, which would leave the reference without its target.
fn prune(values: Vec<Value>, dropped_fields: &[bool]) -> Option<Vec<Value>> {
    // Slot ranges [first, end) taken by dropped values, in increasing order.
    let mut dropped_ranges = Vec::new();
    let mut next_slot = 0;
    for (value, &dropped) in values.iter().zip(dropped_fields) {
        let taken = slots_taken(value);
        if dropped && taken > 0 {
            dropped_ranges.push((next_slot, next_slot + taken));
        }
        next_slot += taken;
    }
    let renumber = |slot: u32| -> Option<u32> {
        let mut below = 0;
        for &(first, end) in &dropped_ranges {
            if slot >= end {
                below += end - first;
            } else if slot >= first {
                return None;
            }
        }
        Some(slot - below)
    };
    let mut kept = Vec::with_capacity(values.len());
    for (mut value, &dropped) in values.into_iter().zip(dropped_fields) {
        if !dropped {
            if !dropped_ranges.is_empty() && !renumber_backrefs(&mut value, &renumber) {
                return None;
            }
            kept.push(value);
        }
    }
    Some(kept)
}

/// How many memo slots `value` and its contents take (FORMAT.md section 7).
fn slots_taken(value: &Value) -> u32 {
    let inner = |items: &[Value]| items.iter().map(slots_taken).sum::<u32>();
    match value {
        Value::ByteArray(_) => 1,
        Value::List(items) | Value::Tuple(items) | Value::Set(items) | Value::FrozenSet(items) => 1 + inner(items),
        Value::Dict(pairs) => 1 + pairs.iter().map(|(k, v)| slots_taken(k) + slots_taken(v)).sum::<u32>(),
        Value::Object { fields, .. } => 1 + inner(fields),
        // The base container of a SUBCLASS takes no slot of its own, only its contents do.
        Value::Subclass { base, fields, .. } => 1 + (slots_taken(base) - 1) + inner(fields),
        _ => 0,
    }
}

/// Applies `renumber` to every back-reference in `value`; false if one has no new number.
fn renumber_backrefs(value: &mut Value, renumber: &impl Fn(u32) -> Option<u32>) -> bool {
    match value {
        Value::BackRef(slot) => match renumber(*slot) {
            Some(new) => {
                *slot = new;
                true
            }
            None => false,
        },
        Value::List(items) | Value::Tuple(items) | Value::Set(items) | Value::FrozenSet(items) | Value::Object { fields: items, .. } => {
            items.iter_mut().all(|v| renumber_backrefs(v, renumber))
        }
        Value::Dict(pairs) => pairs.iter_mut().all(|(k, v)| renumber_backrefs(k, renumber) && renumber_backrefs(v, renumber)),
        Value::Subclass { base, fields, .. } => {
            renumber_backrefs(base, renumber) && fields.iter_mut().all(|v| renumber_backrefs(v, renumber))
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{oid_class, DescriptorSource};
    use crate::store::test_support::{record, temp_store};

    /// Stores two versions of `app.Account`: two records with (owner, legacy), one with (owner).
    fn two_versions(store: &Arc<Store>) -> (Arc<Descriptor>, Arc<Descriptor>, Vec<Oid>) {
        let mut commit = Commit::begin(store).unwrap();
        let old = commit.descriptor("app.Account", &["owner".into(), "legacy".into()]).unwrap();
        let new = commit.descriptor("app.Account", &["owner".into()]).unwrap();
        let tid = commit.tid();
        let mut oids = Vec::new();
        for (descriptor, fields) in [
            (&old, vec![Value::Str("ann".into()), Value::List(vec![Value::Int(1)])]),
            (&old, vec![Value::Str("bob".into()), Value::Int(7)]),
            (&new, vec![Value::Str("cy".into())]),
        ] {
            let oid = commit.allocate_oid(descriptor.class_no).unwrap();
            commit.put(oid, &record(descriptor.id, tid, &fields)).unwrap();
            oids.push(oid);
        }
        commit.finish().unwrap();
        (old, new, oids)
    }

    #[test]
    fn summary_counts_records_per_descriptor_from_headers() {
        let store = temp_store(concat!("schema-", "summary"));
        let (old, new, oids) = two_versions(&store);
        assert_eq!(old.class_no, new.class_no);
        assert_eq!(oid_class(oids[0]), old.class_no);
        let summary = Snapshot::new(&store).unwrap().schema_summary().unwrap();
        let count = |id: u32| summary.descriptors.iter().find(|u| u.descriptor.id == id).map(|u| u.records);
        assert_eq!(count(old.id), Some(2));
        assert_eq!(count(new.id), Some(1));
        assert_eq!(count(crate::format::ROOT_DESCRIPTOR), Some(1));
        assert_eq!(summary.unreadable, 0);

        // A damaged header, and a header naming a descriptor the store does not have.
        let mut commit = Commit::begin(&store).unwrap();
        commit.put_raw(oids[0], &[0x20, 0x01], true).unwrap();
        commit.put_raw(oids[1], &record(999, 1, &[]), true).unwrap();
        commit.finish().unwrap();
        let summary = Snapshot::new(&store).unwrap().schema_summary().unwrap();
        assert_eq!(summary.unreadable, 2);
        assert_eq!(summary.descriptors.iter().map(|u| u.records).sum::<u64>(), 2);
    }

    #[test]
    fn declared_removals_are_reported_then_purged_with_indexes_kept_exact() {
        let store = temp_store(concat!("schema-", "purge"));
        let (old, new, oids) = two_versions(&store);
        let mut commit = Commit::begin(&store).unwrap();
        commit.set_maintenance();
        let (account, owner) = (["app.Account".to_owned()], ["owner".to_owned()]);
        let by_owner = DeclaredIndex { type_name: "app.Account", covered: &account, fields: &owner, unique: true, renamed: &[], defaults: &[] };
        commit.ensure_index(&by_owner, &mut |_, _| {}).unwrap();
        assert!(commit.declare_removed("app.Account", &["legacy".into()]).unwrap());
        assert!(!commit.declare_removed("app.Account", &["legacy".into()]).unwrap(), "unchanged declaration");
        commit.finish().unwrap();

        let report = store.gc_schema(false).unwrap();
        assert_eq!(report.removed, vec![RemovedValues { type_name: "app.Account".into(), field: "legacy".into(), records: 2 }]);
        assert_eq!((report.records, report.purged, report.tid), (2, 0, None));

        let report = store.gc_schema(true).unwrap();
        assert_eq!((report.records, report.purged), (2, 2));
        let snapshot = Snapshot::new(&store).unwrap();
        assert_eq!(report.tid, Some(snapshot.tid()));
        for (oid, owner) in oids[..2].iter().zip(["ann", "bob"]) {
            let (header, fields) = decode_record_state(&snapshot.get(*oid).unwrap().unwrap(), &*store.catalog()).unwrap();
            assert_eq!(header.descriptor, new.id, "rewritten with the descriptor without the removed field");
            assert_eq!(header.tid, snapshot.tid());
            assert_eq!(fields, vec![Value::Str(owner.into())]);
        }
        assert!(store.verify().unwrap().ok());
        let again = store.gc_schema(true).unwrap();
        assert_eq!((again.records, again.purged), (0, 0));
        assert_eq!(store.catalog().field_count(old.id).unwrap(), 2, "descriptors are never modified");
    }

    #[test]
    fn withdrawn_declarations_are_forgotten_and_unknown_types_skipped() {
        let store = temp_store(concat!("schema-", "withdrawn"));
        let mut commit = Commit::begin(&store).unwrap();
        commit.descriptor("app.A", &["x".into()]).unwrap();
        commit.descriptor("app.B", &["z".into()]).unwrap();
        commit.finish().unwrap();
        let mut commit = Commit::begin(&store).unwrap();
        commit.set_maintenance();
        assert!(!commit.declare_removed("app.Elsewhere", &["x".into()]).unwrap());
        commit.declare_removed("app.A", &["x".into(), "y".into()]).unwrap();
        commit.declare_removed("app.B", &["z".into()]).unwrap();
        commit.finish().unwrap();
        let mut commit = Commit::begin(&store).unwrap();
        commit.set_maintenance();
        assert!(commit.declare_removed("app.A", &[]).unwrap());
        commit.finish().unwrap();
        let removed = Snapshot::new(&store).unwrap().removed_fields().unwrap();
        assert_eq!(removed, BTreeMap::from([("app.B".to_owned(), vec!["z".to_owned()])]));
    }

    #[test]
    fn pruning_renumbers_back_references_past_dropped_slots() {
        // Field 0 (dropped) takes slots 0 and 1; field 1 takes slot 2 and refers back to it.
        let values = vec![
            Value::List(vec![Value::List(vec![])]),
            Value::List(vec![Value::BackRef(2)]),
            Value::BackRef(2),
        ];
        let kept = prune(values, &[true, false, false]).unwrap();
        assert_eq!(kept, vec![Value::List(vec![Value::BackRef(0)]), Value::BackRef(0)]);
    }

    #[test]
    fn pruning_refuses_a_value_shared_with_a_dropped_field() {
        let values = vec![Value::List(vec![]), Value::BackRef(0)];
        assert_eq!(prune(values, &[true, false]), None);
    }

    #[test]
    fn subclass_bases_take_no_slot_of_their_own() {
        let subclass = Value::Subclass { descriptor: 9, base: Box::new(Value::List(vec![Value::ByteArray(vec![])])), fields: vec![] };
        assert_eq!(slots_taken(&subclass), 2);
    }

    #[test]
    fn declarations_hold_only_when_maintenance_would_change_nothing() {
        let store = temp_store(concat!("schema-", "declarations"));
        two_versions(&store);
        let account = ["app.Account".to_owned()];
        let (owner, balance) = (["owner".to_owned()], ["balance".to_owned()]);
        let by_owner = DeclaredIndex { type_name: "app.Account", covered: &account, fields: &owner, unique: true, renamed: &[], defaults: &[] };
        let removed = vec![("app.Account".to_owned(), vec!["legacy".to_owned()])];
        let holds = |indexes: &[DeclaredIndex<'_>], removed_indexes: &[RemovedIndex], removed: &[(String, Vec<String>)]| {
            Snapshot::new(&store).unwrap().holds_declarations(indexes, removed_indexes, removed).unwrap()
        };
        let owner_index_removed = [("app.Account".to_owned(), owner.to_vec())];
        assert!(holds(&[], &[], &[]));
        assert!(!holds(&[by_owner], &[], &[]), "the index is not built yet");
        assert!(!holds(&[], &[], &removed), "the removal is not stored yet");

        let mut commit = Commit::begin(&store).unwrap();
        commit.ensure_index(&by_owner, &mut |_, _| {}).unwrap();
        commit.declare_removed("app.Account", &removed[0].1).unwrap();
        commit.finish().unwrap();
        assert!(holds(&[by_owner], &[], &removed));
        // Each difference that a maintenance commit would write.
        let not_unique = DeclaredIndex { unique: false, ..by_owner };
        let other_field = DeclaredIndex { fields: &balance, ..by_owner };
        let covering_more = ["app.Account".to_owned(), "app.Savings".to_owned()];
        let wider = DeclaredIndex { covered: &covering_more, ..by_owner };
        let renamed = [("app.Account".to_owned(), "name".to_owned(), "owner".to_owned())];
        let with_rename = DeclaredIndex { renamed: &renamed, ..by_owner };
        for changed in [not_unique, other_field, wider, with_rename] {
            assert!(!holds(&[changed], &[], &removed));
        }
        assert!(!holds(&[], &owner_index_removed, &removed), "an index declared removed");
        assert!(holds(&[], &[], &removed), "an index that the classes do not declare stays");
        assert!(!holds(&[by_owner], &[], &[("app.Account".to_owned(), vec![])]), "a withdrawn removal");
        assert!(!holds(&[by_owner], &[], &[("app.Account".to_owned(), balance.to_vec())]));
        // A class with no records in this store stores no declaration: nothing to change.
        assert!(holds(&[by_owner], &[], &[removed[0].clone(), ("app.Other".to_owned(), balance.to_vec())]));
    }
}
