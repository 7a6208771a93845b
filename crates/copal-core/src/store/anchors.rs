//! Anchors: the objects an application stored with `Transaction.add`, its explicit roots.
//! Garbage collection (gc.rs) keeps every object that the root record or an anchor reaches;
//! an object stored only because another one referred to it is collected once nothing reachable
//! does. An anchor lasts until its object is deleted.
//!
//! An anchor is an entry of the index entries table under `ANCHORS`, an index id that no index
//! definition takes: `ANCHORS (u32 BE) ++ oid (u64 BE)`. Both backends hold it as they hold
//! index entries, so anchors need no table of their own.

use super::error::StoreError;
use super::index::entry_oid;
use super::snapshot::Snapshot;
use crate::format::Oid;

/// The index id of anchor entries; `Commit::ensure_index` never gives it to an index.
pub(crate) const ANCHORS: u32 = u32::MAX;

/// The setting present in a database whose every `add` since it was created recorded an anchor.
/// A database without it (written by a copal that recorded none, or filled by an import) has its
/// anchors derived by its next garbage collection: every object that no other object refers to.
pub(crate) const ANCHORS_RECORDED: &[u8] = b"gc:anchors-recorded";

/// The setting holding the tid (u64 big-endian) of the last commit that collected garbage: a
/// transaction that began before it may hold references to collected objects, so its commit
/// checks the references it writes (`Commit::check_references_since`).
pub(crate) const COLLECTED_AT: &[u8] = b"gc:collected-at";

/// The index entry key of the anchor of `oid`.
pub(crate) fn anchor_key(oid: Oid) -> [u8; 12] {
    let mut key = [0; 12];
    key[..4].copy_from_slice(&ANCHORS.to_be_bytes());
    key[4..].copy_from_slice(&oid.to_be_bytes());
    key
}

impl Snapshot {
    /// Calls `visit(oid)` for every anchored object, in oid order.
    pub(crate) fn scan_anchors(&self, mut visit: impl FnMut(Oid) -> Result<(), StoreError>) -> Result<(), StoreError> {
        let first = ANCHORS.to_be_bytes();
        self.scan_entries_from(&first, |key| visit(entry_oid(key)?).map(|()| true))
    }

    /// Whether the setting `key` is present.
    pub(crate) fn has_setting(&self, key: &[u8]) -> Result<bool, StoreError> {
        let mut found = false;
        self.settings(key, &mut |stored, _| {
            found |= stored == key;
            Ok(())
        })?;
        Ok(found)
    }
}

/// The tid stored in the setting `COLLECTED_AT` (0: never collected).
pub(crate) fn collected_at(value: Option<&[u8]>) -> Result<u64, StoreError> {
    match value {
        None => Ok(0),
        Some(bytes) => super::read_u64_key(bytes, "gc setting"),
    }
}
