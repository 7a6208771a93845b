//! Consistency check of a whole store (`copal verify`): every record decodes, every reference
//! resolves, and every index holds exactly the entries its objects call for.

use std::collections::{BTreeSet, HashSet};

use std::sync::Arc;

use super::checksum::unseal;
use super::error::StoreError;
use super::anchors::ANCHORS;
use super::index::{entry_key, entry_oid};
use super::snapshot::Snapshot;
use super::{Backend, Store};
use crate::format::{decode_record_state, Oid, ROOT_OID};

#[derive(Debug, Default, Clone)]
pub struct VerifyReport {
    pub records: u64,
    pub references: u64,
    pub index_entries: u64,
    /// The objects stored by `Transaction.add`, which garbage collection keeps.
    pub anchors: u64,
    pub problems: Vec<String>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    fn problem(&mut self, text: String) {
        // A badly damaged store could yield millions; the first thousand tell the story.
        if self.problems.len() < 1000 {
            self.problems.push(text);
        }
    }
}

impl Store {
    /// Checks the whole store. Its structure comes first: a store lacking a table copal needs
    /// has that one problem reported, since nothing else of it reads.
    pub fn verify(self: &Arc<Self>) -> Result<VerifyReport, StoreError> {
        let mut report = VerifyReport::default();
        // The embedded store's pages are walked before anything reads them through LMDB's map
        // (`lmdb::page_walk`), and its tables are checked when it opens (`lmdb::table_names`);
        // an open PostgreSQL database can lose a table to anyone's DROP TABLE.
        let structure = match &self.backend {
            Backend::Lmdb(lmdb) => lmdb.check_pages().map(drop),
            Backend::Postgres(pg) => pg.check_tables(),
        };
        match structure {
            Err(damaged @ StoreError::Damaged { .. }) => {
                report.problem(damaged.to_string());
                return Ok(report);
            }
            other => other?,
        }
        let snapshot = Snapshot::new(self)?;
        snapshot.all_descriptors()?;
        let defs = snapshot.index_defs()?.to_vec();
        if let Some(unfinished) = super::transfer::unfinished_import(&snapshot)? {
            report.problem(unfinished);
        }
        if snapshot.raw_value(ROOT_OID)?.is_none() {
            report.problem(format!("the root record (object {ROOT_OID:#x}) is missing: the named roots are lost"));
        }
        if let Some(tid) = snapshot.logged_after_last_tid()? {
            report.problem(format!(
                "the commit log holds transaction {tid}, past the last tid ({}): every commit would reuse a tid",
                snapshot.tid()
            ));
        }
        let mut oids = HashSet::new();
        let mut references: Vec<(Oid, Oid)> = Vec::new();
        let mut expected_entries: BTreeSet<Vec<u8>> = BTreeSet::new();
        snapshot.scan_all_values(|oid, value| {
            report.records += 1;
            oids.insert(oid);
            let record = match unseal(oid, value) {
                Ok(record) => record,
                Err(error) => {
                    report.problem(format!("{error}"));
                    return Ok(());
                }
            };
            let catalog = self.catalog();
            match decode_record_state(record, &*catalog) {
                Err(error) => report.problem(format!("record {oid:#x} does not decode: {error}")),
                Ok((_, fields)) => {
                    let mut refs = Vec::new();
                    fields.iter().for_each(|v| v.references(&mut refs));
                    references.extend(refs.into_iter().map(|target| (oid, target)));
                    for def in &defs {
                        match def.key_of(record, &*catalog) {
                            Ok(Some(index_key)) => {
                                expected_entries.insert(entry_key(def.id, &index_key, oid));
                            }
                            Ok(None) => {}
                            Err(error) => report.problem(format!("record {oid:#x}: index {}: {error}", def.id)),
                        }
                    }
                }
            }
            Ok(())
        })?;
        for (from, target) in references {
            report.references += 1;
            if !oids.contains(&target) {
                report.problem(format!("object {from:#x} refers to {target:#x}, which does not exist"));
            }
        }
        let known: HashSet<u32> = defs.iter().map(|d| d.id).collect();
        snapshot.scan_all_entries(|key| {
            let id = key.get(..4).map(|b| u32::from_be_bytes(b.try_into().unwrap_or_default())).unwrap_or(0);
            if id == ANCHORS {
                report.anchors += 1;
                match entry_oid(key) {
                    Ok(oid) if key.len() == 12 && oids.contains(&oid) => {}
                    _ => report.problem(format!("the anchor {} names no stored object", hex(key))),
                }
                return Ok(());
            }
            report.index_entries += 1;
            if !known.contains(&id) {
                report.problem(format!("index entry of unknown index {id}"));
            } else if !expected_entries.remove(key) {
                report.problem(format!("index {id} has an entry that no object calls for: {}", hex(key)));
            }
            Ok(())
        })?;
        for missing in expected_entries {
            let id = u32::from_be_bytes(missing[..4].try_into().unwrap_or_default());
            report.problem(format!("index {id} lacks the entry {}", hex(&missing)));
        }
        Ok(report)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
