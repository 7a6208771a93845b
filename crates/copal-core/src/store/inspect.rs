//! What the command line shows of a database without the application's classes (`copal ls`,
//! `copal show`): records by oid with their type names, sizes and JSON form.

use std::sync::Arc;

use super::error::StoreError;
use super::snapshot::Snapshot;
use super::transfer::TransferError;
use super::transfer_text::TextWriter;
use super::Store;
use crate::format::{Oid, RecordHeader};

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
    }
}
