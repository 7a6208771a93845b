//! The commit of a connection's transaction: conflict checks, then the records of changed,
//! watched, added and newly reachable objects, then deletions.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use copal_core::Commit;
use pyo3::prelude::*;

use super::sinks::CommitSink;
use super::thread::without_gil;
use super::Connection;
use crate::classes::ClassShape;
use crate::encode::{Encoder, Sink};
use crate::errors::IntoPyResult;
use crate::gc::GcPause;
use crate::persistent::{PersistentBase, CHANGED, GHOST, UP_TO_DATE};

/// Commits the running transaction (`Connection.commit`).
pub(super) fn commit<'py>(slf: &Bound<'py, Connection>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = slf.py();
    let this = slf.get();
    // Even a read-only commit ends the snapshot, a round trip on PostgreSQL.
    this.before_round_trip()?;
    if this.is_readonly() {
        return Ok(None);
    }
    // Index keys of datetimes in named zones are their instants by the zone's rules.
    crate::query::share_zone_search_path(py)?;
    let jar = slf.clone().unbind();
    let changed: Vec<Bound<'_, PyAny>> = this.changed.lock()?.iter().map(|o| o.bind(py).clone()).collect();
    let added: Vec<Bound<'_, PyAny>> = this.added.lock()?.iter().map(|o| o.bind(py).clone()).collect();
    let deleted: Vec<Bound<'_, PyAny>> = this.deleted.lock()?.iter().map(|o| o.bind(py).clone()).collect();
    let watched: Vec<(u64, Vec<u8>)> = {
        let saved = this.saved_states.lock()?;
        let mut watched: Vec<(u64, Vec<u8>)> =
            this.watched.lock()?.iter().filter_map(|oid| saved.get(oid).map(|state| (*oid, state.clone()))).collect();
        // In id order: the records are compared and written in the order they sit on disk.
        watched.sort_unstable_by_key(|(oid, _)| *oid);
        watched
    };
    // An added object is anchored even when it is stored already: the commit runs for it alone.
    if changed.is_empty() && deleted.is_empty() && added.is_empty() && watched.is_empty() {
        return Ok(None);
    }
    let _pause = GcPause::new(py);
    let store = this.store.get()?;
    // The commit ends the transaction: it takes over the snapshot, whose connection it runs
    // on (PostgreSQL). A read while it runs (none in practice) takes a fresh snapshot.
    let snapshot = this.snapshot.lock()?.take();
    let mut commit = without_gil(py, || match snapshot {
        Some(snapshot) => Commit::begin_after(&store, snapshot),
        None => Commit::begin(&store),
    })
    .py_err()?;
    commit.count_into(&this.stats.storage);
    // The objects this connection holds were read at or after its first snapshot (an object
    // kept from an earlier transaction may be a ghost whose record is gone): if garbage
    // collection removed objects since, a reference to one of them must fail the commit.
    commit.check_references_since(this.first_tid.load(Ordering::Relaxed)).py_err()?;
    let mut sink = CommitSink { conn: this, jar, commit, new_shapes: Vec::new(), to_write: VecDeque::new(), persisted: Vec::new() };
    let result = this.write_changes(py, &mut sink, &changed, &watched, &added, &deleted);
    let result = result.and_then(|written| {
        let CommitSink { commit, new_shapes, persisted, .. } = sink;
        if written.is_empty() && deleted.is_empty() && added.is_empty() {
            return Ok((None, written, new_shapes, persisted));
        }
        let tid = without_gil(py, move || commit.finish()).py_err()?;
        Ok((Some(tid), written, new_shapes, persisted))
    });
    match result {
        Ok((tid, written, new_shapes, _)) => {
            let mut classes = this.classes.lock()?;
            for (key, fields, shape) in new_shapes {
                if let Some(entry) = classes.by_type.get_mut(&key) {
                    entry.shapes.push((fields, shape));
                }
            }
            drop(classes);
            let Some(tid) = tid else { return Ok(None) };
            let mut cache = this.cache.lock()?;
            cache.reserve(written.len());
            let mut saved = this.saved_states.lock()?;
            for (obj, oid, mutable_state) in written {
                let p = PersistentBase::of(&obj)?;
                let was_loaded = p.state() != GHOST;
                p.set_loaded(tid);
                if let std::collections::hash_map::Entry::Vacant(slot) = cache.entry(oid) {
                    slot.insert(obj.clone().unbind());
                    this.loaded.fetch_add(1, Ordering::Relaxed);
                } else if !was_loaded {
                    this.loaded.fetch_add(1, Ordering::Relaxed);
                }
                p.set_holds_containers(mutable_state.is_some());
                match mutable_state {
                    Some(state) => {
                        saved.insert(oid, state);
                    }
                    None if !saved.is_empty() => {
                        saved.remove(&oid);
                    }
                    None => {}
                }
            }
            for obj in &deleted {
                let p = PersistentBase::of(obj)?;
                if let Some(oid) = p.oid() {
                    // `obj` itself is still referenced by `deleted`: no deallocation here.
                    cache.remove(&oid);
                    saved.remove(&oid);
                }
                p.set_holds_containers(false);
                p.detach();
            }
            // Only when no other commit came between this transaction's snapshot and its
            // commit: else the next begin must read their log entries too (this one's own
            // objects are then reloaded with them, which is merely redundant).
            if tid == this.seen_tid.load(Ordering::Relaxed) + 1 {
                this.seen_tid.store(tid, Ordering::Relaxed);
            }
            drop(saved);
            drop(cache);
            this.changed.lock()?.clear();
            this.added.lock()?.clear();
            this.deleted.lock()?.clear();
            this.watched.lock()?.clear();
            // Committed: a tid that cannot be made an int is still a MemoryError, not a panic.
            Ok(Some(crate::allocation::unsigned_int(py, tid)?))
        }
        Err(error) => Err(error),
    }
}

impl Connection {
    fn write_changes<'py>(
        &self,
        py: Python<'py>,
        sink: &mut CommitSink<'_, '_>,
        changed: &[Bound<'py, PyAny>],
        watched: &[(u64, Vec<u8>)],
        added: &[Bound<'py, PyAny>],
        deleted: &[Bound<'py, PyAny>],
    ) -> PyResult<Vec<Written<'py>>> {
        let tid = sink.commit.tid();
        let mut written = Vec::new();
        let outcome = (|| {
            // The changed and deleted objects' conflict checks, all before any write (their
            // records read in one batch): a conflict names every object that conflicts.
            let mut checked = Vec::new();
            for obj in changed {
                let p = PersistentBase::of(obj)?;
                if let (CHANGED, Some(oid)) = (p.state(), p.oid()) {
                    checked.push((oid, p.serial()));
                }
            }
            for obj in deleted {
                let p = PersistentBase::of(obj)?;
                checked.extend(p.oid().map(|oid| (oid, p.serial())));
            }
            let oids: Vec<u64> = checked.iter().map(|(oid, _)| *oid).collect();
            sink.commit.prefetch(&oids).py_err()?;
            let mut conflicting = Vec::new();
            for (oid, serial) in &checked {
                if sink.commit.stored_tid(*oid).py_err()? != Some(*serial) {
                    conflicting.push((*oid, *serial));
                }
            }
            if let Some((oid, serial)) = conflicting.first() {
                // The first one's check makes the error (and counts the refused commit).
                let first = sink.commit.check_unchanged(*oid, *serial).err().unwrap_or(copal_core::StoreError::Conflict {
                    oid: *oid,
                    read_tid: *serial,
                    stored_tid: None,
                });
                return Err(crate::errors::conflicts(first, conflicting.iter().map(|(oid, _)| *oid).collect()));
            }
            for obj in added {
                let oid = sink.reference(obj)?;
                sink.commit.anchor(oid).py_err()?;
            }
            for obj in changed {
                let p = PersistentBase::of(obj)?;
                let (oid, state) = (p.oid(), p.state());
                let Some(oid) = oid else { continue };
                if state != CHANGED {
                    continue;
                }
                written.extend(self.write_one(sink, obj, oid, tid, None, None)?);
            }
            for (oid, saved) in watched {
                let Some(obj) = self.cached(py, *oid)? else { continue };
                let p = PersistentBase::of(&obj)?;
                let (serial, state) = (p.serial(), p.state());
                if state != UP_TO_DATE {
                    continue;
                }
                if let Some(entry) = self.write_one(sink, &obj, *oid, tid, Some((saved, serial)), None)? {
                    written.push(entry);
                }
            }
            while let Some((obj, shape)) = sink.to_write.pop_front() {
                let obj = obj.into_bound(py);
                let oid = PersistentBase::of(&obj)?.oid().expect("persisted objects have ids");
                written.extend(self.write_one(sink, &obj, oid, tid, None, Some(shape))?);
            }
            for obj in deleted {
                let p = PersistentBase::of(obj)?;
                let oid = p.oid();
                if let Some(oid) = oid {
                    sink.commit.delete(oid).py_err()?;
                }
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => Ok(written),
            Err(error) => {
                // Objects that received ids in this failed commit become unsaved again.
                for obj in &sink.persisted {
                    PersistentBase::of(obj.bind(py))?.detach();
                }
                Err(error)
            }
        }
    }

    /// Encodes and stores one object. With `compare_to` (the state bytes it was loaded with and
    /// its serial), writes only if the state differs, after a conflict check.
    fn write_one<'py>(
        &self,
        sink: &mut CommitSink<'_, '_>,
        obj: &Bound<'py, PyAny>,
        oid: u64,
        tid: u64,
        compare_to: Option<(&Vec<u8>, u64)>,
        shape: Option<ClassShape>,
    ) -> PyResult<Option<Written<'py>>> {
        self.stats.objects_encoded.fetch_add(1, Ordering::Relaxed);
        let (record, state_start, mutable) = Encoder::new(sink).record(obj, tid, shape)?;
        let state = &record[state_start..];
        if let Some((saved, serial)) = compare_to {
            if state == saved.as_slice() {
                return Ok(None);
            }
            sink.commit.check_unchanged(oid, serial).py_err()?;
        }
        sink.commit.put(oid, &record).py_err()?;
        let mutable_state = mutable.then(|| state.to_vec());
        Ok(Some((obj.clone(), oid, mutable_state)))
    }
}

/// An object a commit wrote: the object, its id, and, if its state can change in place unseen,
/// the state bytes it was written with (the next commit compares them).
type Written<'py> = (Bound<'py, PyAny>, u64, Option<Vec<u8>>);
