//! Reading an index in a query's order. Index keys never order two values against
//! `sort_order`, but some keys are shared by values that sort apart (`index_key::sort_group`),
//! and equal values are keyed alike whatever their object ids: entries come in key order one
//! sort group at a time, and the entries of a group are put in order by their reader — by
//! object id for a group whose values sort alike (ties keep object-id order, in both
//! directions), by value for a coarse group.

use std::collections::HashSet;

use super::plan::KeyRange;
use crate::format::index_key::{sort_group, SortGroup};
use crate::format::Oid;
use crate::store::{entry_oid, IndexDef, Snapshot, StoreError};

/// An index read in a query's order.
pub(super) struct GroupScan<'a> {
    pub snapshot: &'a Snapshot,
    pub def: &'a IndexDef,
    pub ranges: &'a [KeyRange],
    pub descending: bool,
    /// The leading index fields that decide the order (the fixed ones and the order's).
    pub sorted_fields: usize,
    /// How many candidates of a long group to hand over at once, when they can be.
    pub batch: usize,
}

impl GroupScan<'_> {
    /// Calls `visit(oids, coarse)` with the candidates (the entries whose oid `keep` accepts,
    /// each oid once), in the query's order: runs of candidates already in order (groups whose
    /// values sort alike, each in ascending oid order, about `batch` at a time), and all the
    /// candidates of a coarse group at once, for the caller to sort by value. Stops when `visit`
    /// returns false.
    pub fn run(
        &self,
        mut keep: impl FnMut(Oid) -> bool,
        visit: impl FnMut(&[Oid], bool) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        // Read ascending with no field after the sorted ones, a group's entries come in oid
        // order: they can be handed over before the group ends, so that a limit stops early.
        let streaming = !self.descending && self.def.fields.len() == self.sorted_fields;
        let mut seen = HashSet::new();
        let mut runs = Runs { visit, batch: self.batch, current: Current::default(), group: Vec::new(), ready: Vec::new() };
        let ranges: Vec<&KeyRange> = if self.descending { self.ranges.iter().rev().collect() } else { self.ranges.iter().collect() };
        for range in ranges {
            let mut go_on = true;
            self.snapshot.scan_index(self.def.id, &range.start, range.end.as_deref(), self.descending, |entry| {
                let oid = entry_oid(entry)?;
                if !keep(oid) || !seen.insert(oid) {
                    return Ok(true);
                }
                // The entry is the index id, the key, and the oid.
                let group = sort_group(&entry[4..entry.len().saturating_sub(8).max(4)], self.sorted_fields);
                if !runs.current.is(&group) {
                    go_on = runs.close_group()?;
                    runs.current.set(&group);
                } else if streaming && !group.coarse && runs.group.len() + runs.ready.len() >= self.batch {
                    runs.ready.append(&mut runs.group);
                    go_on = runs.hand_over()?;
                }
                if go_on {
                    runs.group.push(oid);
                }
                Ok(go_on)
            })?;
            if !go_on {
                return Ok(());
            }
        }
        if runs.close_group()? {
            runs.hand_over()?;
        }
        Ok(())
    }
}

/// The sort group being read (a copy of its `SortGroup`, in a buffer reused from group to
/// group).
#[derive(Default)]
struct Current {
    started: bool,
    prefix: Vec<u8>,
    big: Option<bool>,
    coarse: bool,
}

impl Current {
    fn is(&self, group: &SortGroup<'_>) -> bool {
        self.started && self.prefix == group.prefix && self.big == group.big
    }

    fn set(&mut self, group: &SortGroup<'_>) {
        self.started = true;
        self.prefix.clear();
        self.prefix.extend_from_slice(group.prefix);
        self.big = group.big;
        self.coarse = group.coarse;
    }
}

/// The candidates of a `GroupScan` on their way to its visitor.
struct Runs<V> {
    visit: V,
    batch: usize,
    /// The group being read, and its candidates.
    current: Current,
    group: Vec<Oid>,
    /// Candidates in order, not handed over yet.
    ready: Vec<Oid>,
}

impl<V: FnMut(&[Oid], bool) -> Result<bool, StoreError>> Runs<V> {
    /// Hands over the ready candidates; false when the visitor stops.
    fn hand_over(&mut self) -> Result<bool, StoreError> {
        if self.ready.is_empty() {
            return Ok(true);
        }
        let go_on = (self.visit)(&self.ready, false)?;
        self.ready.clear();
        Ok(go_on)
    }

    /// Ends the current group: a coarse one is handed over whole (after the ready candidates),
    /// another joins the ready candidates in oid order.
    fn close_group(&mut self) -> Result<bool, StoreError> {
        if self.group.is_empty() {
            return Ok(true);
        }
        if self.current.coarse {
            if !self.hand_over()? {
                return Ok(false);
            }
            let go_on = (self.visit)(&self.group, true)?;
            self.group.clear();
            return Ok(go_on);
        }
        self.group.sort_unstable();
        self.ready.append(&mut self.group);
        if self.ready.len() >= self.batch {
            return self.hand_over();
        }
        Ok(true)
    }
}
