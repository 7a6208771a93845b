//! Garbage collection (`Store::collect_garbage`, `copal gc`): removes the objects that neither
//! the root record nor an anchor (anchors.rs) reaches, while other transactions keep committing
//! (docs/ARCHITECTURE.md "Garbage collection").
//!
//! 1. Mark, in one snapshot at tid T: every object reached from the roots, in sets of one bit
//!    per object (`OidSet`); the objects waiting to be read are a bounded queue, refilled from
//!    the marks (reached, not yet read) when it overflows. Memory stays about two bits per
//!    stored object whatever the graph's shape.
//! 2. Candidates: the objects stored at T that were not reached.
//! 3. Sweep, in commits of at most `GcOptions::batch` removals. Each commit first reads the
//!    commit log since the last one it checked and marks, in the current state, from every
//!    object changed since (a new reference to a candidate can only be written in a record, and
//!    every written record is in the log); it then removes candidates still unmarked. Nothing
//!    commits between that check and the removals: they are one commit, and commits are
//!    serialized (LMDB's write lock, the commit lock on PostgreSQL).
//!
//! A transaction that began before a removal may still hold a removed object and write a
//! reference to it: the commit that collects records its tid (`COLLECTED_AT`), and a commit
//! whose transaction read before that tid checks that the objects its records refer to exist
//! (`Commit::check_references_since`), failing with a conflict otherwise.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::anchors::{ANCHORS_RECORDED, COLLECTED_AT};
use super::commit::Commit;
use super::error::StoreError;
use super::snapshot::Snapshot;
use super::transfer::unfinished_import;
use super::Store;
use crate::format::{oid_class, record_references, ClassNo, Oid, ROOT_OID};
use marks::{snapshot_references, CommitRecords, Marking, Marks, OidSet, RecordRefs, PROGRESS_EVERY};

mod marks;

/// How `collect_garbage` works.
#[derive(Debug, Clone, Copy)]
pub struct GcOptions {
    /// The most objects one commit removes (or anchors): each commit holds the write lock for
    /// about that many removals.
    pub batch: usize,
    /// The longest one snapshot of the marking lives. An old snapshot keeps LMDB from reusing
    /// the pages that later commits free (the file grows with every concurrent commit) and
    /// keeps a PostgreSQL transaction open; a new one costs reading the commit log since.
    pub snapshot_age: Duration,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions { batch: 10_000, snapshot_age: Duration::from_millis(250) }
    }
}

/// Told where a collection is; `Break` stops it at once if it is marking, after its current
/// commit if it is sweeping (each commit removes what it removes whole), and the report says
/// `stopped`.
pub type Progress<'a> = &'a mut dyn FnMut(GcProgress) -> ControlFlow<()>;

/// Where a collection is, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcProgress {
    /// Deriving the anchors of a database that did not record them: records read of `total`.
    Derive { read: u64, total: u64 },
    /// Marking: objects reached so far, of `total` stored.
    Mark { reached: u64, total: u64 },
    /// Sweeping: objects removed so far of the `candidates` found unreachable.
    Sweep { removed: u64, candidates: u64 },
}

/// What a collection found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// The objects stored when the collection began.
    pub objects: u64,
    /// Of those, the ones the roots reached.
    pub reachable: u64,
    /// The objects removed, and the bytes of their records.
    pub removed: u64,
    pub removed_bytes: u64,
    /// Removed objects per type name, sorted by name.
    pub removed_by_type: Vec<(String, u64)>,
    /// Anchors written for a database that did not record them (objects nothing referred to).
    pub anchors_derived: u64,
    /// The commits the sweep made.
    pub commits: u64,
    /// The progress callback stopped the collection before it was done.
    pub stopped: bool,
}

/// Collections started again (the commit log was pruned past the marked snapshot) before giving up.
const MAX_RESTARTS: usize = 3;

impl Store {
    /// Removes the objects that neither the root nor an anchor reaches (see the module
    /// documentation), calling `progress` as it goes. Fails without removing anything while an
    /// import is unfinished, and when a reachable record does not decode (`copal verify` tells
    /// more): its references are unknown, so nothing it might reach can be judged garbage.
    pub fn collect_garbage(self: &Arc<Self>, options: GcOptions, progress: Progress<'_>) -> Result<GcReport, StoreError> {
        let options = GcOptions { batch: options.batch.max(1), ..options };
        for _ in 0..MAX_RESTARTS {
            if let Some(report) = self.try_collect(options, progress)? {
                return Ok(report);
            }
        }
        Err(StoreError::Storage {
            message: format!(
                "garbage collection gave up: {MAX_RESTARTS} times, more transactions committed while it marked than \
                 the commit log keeps (log_retention); open the database with a larger log_retention"
            ),
        })
    }

    /// One collection; None when the commit log no longer reaches back to a snapshot it
    /// marked (the collection must start again).
    fn try_collect(self: &Arc<Self>, options: GcOptions, progress: Progress<'_>) -> Result<Option<GcReport>, StoreError> {
        let GcOptions { batch, snapshot_age } = options;
        let mut view = View::new(self, snapshot_age)?;
        if let Some(import) = unfinished_import(&view.snapshot)? {
            return Err(StoreError::Storage {
                message: format!("an import into this database is unfinished ({import}): garbage collection waits for it to end"),
            });
        }
        let total = view.snapshot.count_all()?;
        let stopped = Ok(Some(GcReport { stopped: true, ..GcReport::default() }));
        let mut record_anchors = !view.snapshot.has_setting(ANCHORS_RECORDED)?;
        let derived = match record_anchors {
            false => Vec::new(),
            true => match derive_anchors(&view.snapshot, total, progress)? {
                Some(derived) => derived,
                None => return stopped,
            },
        };
        let mut marks = Marks::default();
        marks.reach(ROOT_OID);
        view.snapshot.scan_anchors(|oid| {
            marks.reach(oid);
            Ok(())
        })?;
        derived.iter().for_each(|&oid| marks.reach(oid));
        // Mark, then list the candidates a slice at a time, marking what changed meanwhile
        // before each slice (`View::renew`).
        let mut report = GcReport::default();
        let mut candidates = OidSet::default();
        let mut next = Some(0);
        while let Some(first) = next {
            match marks.propagate(&mut view, total, progress)? {
                Marking::Done => {}
                Marking::Stopped => return stopped,
                Marking::LogPruned => return Ok(None),
            }
            let until = Instant::now() + snapshot_age;
            next = None;
            // Every slice lists at least one object: the listing always ends.
            view.snapshot.scan_values_from(first, |oid, _| {
                if oid > first && Instant::now() > until {
                    next = Some(oid);
                    return Ok(false);
                }
                report.objects += 1;
                if !marks.reached.contains(oid) {
                    candidates.insert(oid);
                }
                Ok(true)
            })?;
            if next.is_some() && !view.renew(&mut marks)? {
                return Ok(None);
            }
        }
        let mut checked = view.checked;
        drop(view);

        let candidates_found = candidates.len();
        report.reachable = report.objects - candidates_found;
        let mut to_sweep = candidates.iter().peekable();
        let mut to_anchor = derived.iter().copied();
        let mut removed_by_class: BTreeMap<ClassNo, u64> = BTreeMap::new();
        loop {
            let mut commit = Commit::begin(self)?;
            commit.set_maintenance();
            let Some(changed) = commit.changes_since(checked)? else { return Ok(None) };
            changed.into_iter().for_each(|oid| marks.rescan(oid));
            match marks.propagate(&mut CommitRecords(&mut commit), total, progress)? {
                Marking::Done => {}
                Marking::Stopped => {
                    report.stopped = true;
                    break;
                }
                Marking::LogPruned => return Ok(None),
            }
            let mut anchored = 0;
            let anchoring: Vec<Oid> = to_anchor.by_ref().take(batch).collect();
            commit.prefetch(&anchoring)?;
            for oid in anchoring {
                if commit.stored_record(oid)?.is_some() {
                    commit.anchor(oid)?;
                    anchored += 1;
                }
            }
            report.anchors_derived += anchored;
            if record_anchors && to_anchor.len() == 0 {
                commit.put_setting(ANCHORS_RECORDED, Some(b""))?;
                record_anchors = false;
            }
            let wanted: Vec<Oid> = to_sweep.by_ref().filter(|&oid| !marks.reached.contains(oid)).take(batch).collect();
            commit.prefetch(&wanted)?;
            let mut removed = 0;
            for &oid in &wanted {
                let Some(record) = commit.stored_record(oid)? else { continue };
                report.removed_bytes += record.len() as u64;
                commit.delete(oid)?;
                *removed_by_class.entry(oid_class(oid)).or_default() += 1;
                removed += 1;
            }
            if removed > 0 {
                commit.put_setting(COLLECTED_AT, Some(&commit.tid().to_be_bytes()))?;
            }
            let done = to_sweep.peek().is_none() && to_anchor.len() == 0;
            checked = commit.finish()?;
            report.removed += removed;
            report.commits += 1;
            report.stopped = progress(GcProgress::Sweep { removed: report.removed, candidates: candidates_found }).is_break() && !done;
            if done || report.stopped {
                break;
            }
        }
        let catalog = self.catalog();
        report.removed_by_type = removed_by_class
            .into_iter()
            .map(|(class, count)| (catalog.type_name(class).unwrap_or("?").to_owned(), count))
            .collect();
        report.removed_by_type.sort();
        Ok(Some(report))
    }
}

/// The snapshot a collection marks in, renewed when it is older than `age`: what
/// other transactions changed since the one before is marked again (`Marks::rescan`), read in
/// the new snapshot, as a sweep commit does.
struct View<'s> {
    store: &'s Arc<Store>,
    snapshot: Snapshot,
    /// The tid up to which changes have been marked: the snapshot's.
    checked: u64,
    taken: Instant,
    age: Duration,
}

impl<'s> View<'s> {
    fn new(store: &'s Arc<Store>, age: Duration) -> Result<View<'s>, StoreError> {
        let snapshot = Self::snapshot(store)?;
        Ok(View { store, checked: snapshot.tid(), snapshot, taken: Instant::now(), age })
    }

    /// A new snapshot whose descriptors the catalog holds (records are decoded with it).
    fn snapshot(store: &Arc<Store>) -> Result<Snapshot, StoreError> {
        let snapshot = Snapshot::new(store)?;
        snapshot.refresh_catalog()?;
        Ok(snapshot)
    }

    /// Takes a new snapshot and queues the objects changed since the last one in `marks`;
    /// false if the commit log no longer reaches back to it.
    fn renew(&mut self, marks: &mut Marks) -> Result<bool, StoreError> {
        let snapshot = Self::snapshot(self.store)?;
        let Some(changed) = snapshot.changes_since(self.checked)? else { return Ok(false) };
        changed.into_iter().for_each(|oid| marks.rescan(oid));
        self.checked = snapshot.tid();
        self.snapshot = snapshot;
        self.taken = Instant::now();
        Ok(true)
    }
}

impl RecordRefs for View<'_> {
    fn references(&mut self, oids: &[Oid], visit: &mut dyn FnMut(Oid)) -> Result<(), StoreError> {
        snapshot_references(&self.snapshot, oids, visit)
    }

    fn renew_if_old(&mut self, marks: &mut Marks) -> Result<bool, StoreError> {
        if self.taken.elapsed() < self.age {
            return Ok(true);
        }
        self.renew(marks)
    }
}

/// The anchors of a database that recorded none: the objects no other object refers to (the
/// root excepted), in oid order; None if `progress` stopped the collection.
fn derive_anchors(snapshot: &Snapshot, total: u64, progress: Progress<'_>) -> Result<Option<Vec<Oid>>, StoreError> {
    let (mut referenced, mut stored) = (OidSet::default(), OidSet::default());
    let (mut refs, mut read, mut flow) = (Vec::new(), 0, ControlFlow::Continue(()));
    snapshot.scan_all_values(|oid, value| {
        let record = super::checksum::unseal(oid, value)?;
        refs.clear();
        record_references(record, snapshot, &mut refs).map_err(|source| StoreError::Corrupt { what: format!("record {oid:#x}"), source })?;
        refs.iter().filter(|&&target| target != oid).for_each(|&target| {
            referenced.insert(target);
        });
        stored.insert(oid);
        read += 1;
        if read % PROGRESS_EVERY == 0 && flow.is_continue() {
            flow = progress(GcProgress::Derive { read, total });
        }
        Ok(())
    })?;
    if flow.is_break() || progress(GcProgress::Derive { read, total }).is_break() {
        return Ok(None);
    }
    Ok(Some(stored.iter().filter(|&oid| oid != ROOT_OID && !referenced.contains(oid)).collect()))
}

#[cfg(test)]
mod tests;
