//! What the command line shows of a database without the application's classes (`copal ls`,
//! `copal show`): records by oid with their type names, sizes and JSON form.

use std::sync::Arc;

use super::error::StoreError;
use super::snapshot::Snapshot;
use super::transfer::TransferError;
use super::transfer_text::TextWriter;
use super::Store;
use crate::format::{Oid, RecordHeader};

/// What one table of a database holds: a class's records, an index's entries or the anchors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpace {
    /// `records TYPE`, `index TYPE(field, ...)` (`unique index ...` for a unique one) or
    /// `anchors` (the objects stored by `Transaction.add`).
    pub table: String,
    pub entries: u64,
    /// The bytes of its records or entry keys as stored (records with their checksum; keys
    /// with the index id and the oid), before the store's own overhead (pages, tuples).
    pub bytes: u64,
}

/// A record's oid, type name and size in bytes (without the store's checksum).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSummary {
    pub oid: Oid,
    pub type_name: String,
    pub size: usize,
}

impl Store {
    /// The JSON document of the record of `oid` as `copal export --format json` writes it
    /// (docs/EXPORT.md section 3), or None if there is no such object.
    pub fn record_json(self: &Arc<Self>, oid: Oid) -> Result<Option<String>, TransferError> {
        let snapshot = Snapshot::new(self)?;
        let Some(record) = snapshot.get(oid)? else { return Ok(None) };
        TextWriter::record_json(&snapshot.all_descriptors()?, oid, &record).map(Some)
    }

    /// The summaries of the records of `oids` (None for an id without a record).
    pub fn summaries(self: &Arc<Self>, oids: &[Oid]) -> Result<Vec<Option<RecordSummary>>, StoreError> {
        let snapshot = Snapshot::new(self)?;
        oids.iter()
            .map(|&oid| match snapshot.get(oid)? {
                None => Ok(None),
                Some(record) => summary(&snapshot, oid, &record).map(Some),
            })
            .collect()
    }

    /// The summaries of the first `limit` records of the extent of `type_name`, in oid order
    /// (None if the database stores no such type).
    pub fn extent_summaries(self: &Arc<Self>, type_name: &str, limit: usize) -> Result<Option<Vec<RecordSummary>>, StoreError> {
        let snapshot = Snapshot::new(self)?;
        let descriptors = snapshot.all_descriptors()?;
        let Some(class) = descriptors.iter().find(|d| d.type_name == type_name).map(|d| d.class_no) else { return Ok(None) };
        let mut out = Vec::new();
        snapshot.scan_extent_unverified(class, |oid, record, _| {
            if out.len() >= limit {
                return Ok(false);
            }
            out.push(summary(&snapshot, oid, record)?);
            Ok(true)
        })?;
        Ok(Some(out))
    }
}

impl Store {
    /// What each class's records, each index's entries and the anchors take, read from one
    /// snapshot: every record and entry is visited (`copal info` shows it; it reads the whole database).
    pub fn space(self: &Arc<Self>) -> Result<Vec<TableSpace>, StoreError> {
        let snapshot = Snapshot::new(self)?;
        let mut out = Vec::new();
        let mut classes: Vec<(crate::format::ClassNo, String)> = snapshot.all_descriptors()?.iter().map(|d| (d.class_no, d.type_name.clone())).collect();
        classes.sort();
        classes.dedup_by_key(|(class, _)| *class);
        for (class, type_name) in classes {
            let (mut entries, mut bytes) = (0, 0);
            snapshot.scan_extent_unverified(class, |_, _, stored| {
                entries += 1;
                bytes += stored.len() as u64;
                Ok(true)
            })?;
            out.push(TableSpace { table: format!("records {type_name}"), entries, bytes });
        }
        for def in snapshot.index_defs()? {
            let (mut entries, mut bytes) = (0, 0);
            snapshot.scan_index(def.id, &[], None, false, |key| {
                entries += 1;
                bytes += key.len() as u64;
                Ok(true)
            })?;
            let kind = if def.unique { "unique index" } else { "index" };
            out.push(TableSpace { table: format!("{kind} {}({})", def.type_name, def.fields.join(", ")), entries, bytes });
        }
        let mut anchors = 0;
        snapshot.scan_anchors(|_| {
            anchors += 1;
            Ok(())
        })?;
        out.push(TableSpace { table: "anchors".to_owned(), entries: anchors, bytes: anchors * 12 });
        Ok(out)
    }
}

fn summary(snapshot: &Snapshot, oid: Oid, record: &[u8]) -> Result<RecordSummary, StoreError> {
    let (header, _) = RecordHeader::parse(record).map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source })?;
    Ok(RecordSummary { oid, type_name: snapshot.descriptor(header.descriptor)?.type_name.clone(), size: record.len() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Value, ROOT_OID};
    use crate::store::test_support::{record, temp_store};
    use crate::store::Commit;

    #[test]
    fn records_are_summarised_and_shown_without_classes() {
        let store = temp_store("inspect");
        let mut commit = Commit::begin(&store).unwrap();
        let pet = commit.descriptor("app.Pet", &["name".into(), "owner".into()]).unwrap();
        let oid = commit.allocate_oid(pet.class_no).unwrap();
        let rex = record(pet.id, commit.tid(), &[Value::Str("rex".into()), Value::Ref(ROOT_OID)]);
        commit.put(oid, &rex).unwrap();
        commit.finish().unwrap();

        let shown = store.record_json(oid).unwrap().unwrap();
        assert!(shown.contains(r#""$persistent":"app.Pet","name":"rex","owner":{"$enum":"copal.Oid","$member":"0x1000000000000"}"#), "{shown}");
        assert_eq!(store.record_json(oid + 1).unwrap(), None);
        let listed = store.extent_summaries("app.Pet", 10).unwrap().unwrap();
        assert_eq!(listed, vec![RecordSummary { oid, type_name: "app.Pet".into(), size: rex.len() }]);
        assert_eq!(store.summaries(&[oid, oid + 1]).unwrap(), vec![Some(listed[0].clone()), None]);
        assert_eq!(store.extent_summaries("app.Nothing", 10).unwrap(), None);
        let space = store.space().unwrap();
        let pets = space.iter().find(|t| t.table == "records app.Pet").unwrap();
        assert_eq!(pets.entries, 1);
        assert!(pets.bytes >= rex.len() as u64, "{space:?}");
    }
}
