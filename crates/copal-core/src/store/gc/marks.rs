//! The marks of a garbage collection (gc.rs): sets of oids, and the marking that reads the
//! records of reached objects through a `RecordRefs` source.

use std::collections::HashMap;

use super::{GcProgress, Progress};
use crate::format::{record_references, Oid};
use crate::store::commit::Commit;
use crate::store::error::StoreError;
use crate::store::snapshot::Snapshot;

/// The most oids waiting to be read while marking (8 bytes each).
const QUEUE_MAX: usize = 1 << 20;
/// Oids read together while marking (one round trip on PostgreSQL).
const READ_BATCH: usize = 4096;
/// Progress is reported every this many objects.
pub(super) const PROGRESS_EVERY: u64 = 65_536;

/// Reads the references of stored records while marking.
pub(super) trait RecordRefs {
    /// Calls `visit(target)` for each reference of the stored records of `oids` (sorted, no
    /// duplicates); ids without a record are skipped (dangling references reach nothing).
    fn references(&mut self, oids: &[Oid], visit: &mut dyn FnMut(Oid)) -> Result<(), StoreError>;

    /// Moves to a newer view of the records if this source renews its view and it is due,
    /// queueing in `marks` the objects changed since; false if the commit log no longer
    /// reaches back to the view before.
    fn renew_if_old(&mut self, _marks: &mut Marks) -> Result<bool, StoreError> {
        Ok(true)
    }
}

/// `RecordRefs::references` of the records of `snapshot`.
pub(super) fn snapshot_references(snapshot: &Snapshot, oids: &[Oid], visit: &mut dyn FnMut(Oid)) -> Result<(), StoreError> {
    let mut refs = Vec::new();
    snapshot.get_many(oids, |_| Ok(()), |e| e, |i, record| {
        refs.clear();
        record_references(record, snapshot, &mut refs)
            .map_err(|source| StoreError::Corrupt { what: format!("record {:#x}", oids[i]), source })?;
        refs.iter().for_each(|&target| visit(target));
        Ok(())
    })
}

/// How a marking ended.
pub(super) enum Marking {
    Done,
    /// The progress callback stopped it.
    Stopped,
    /// The commit log no longer reaches back to the view marked before (`RecordRefs::renew_if_old`).
    LogPruned,
}

/// The current records, inside a sweep's commit.
pub(super) struct CommitRecords<'c, 's>(pub(super) &'c mut Commit<'s>);

impl RecordRefs for CommitRecords<'_, '_> {
    fn references(&mut self, oids: &[Oid], visit: &mut dyn FnMut(Oid)) -> Result<(), StoreError> {
        self.0.prefetch(oids)?;
        let mut refs = Vec::new();
        for &oid in oids {
            refs.clear();
            if self.0.stored_references(oid, &mut refs)? {
                refs.iter().for_each(|&target| visit(target));
            }
        }
        Ok(())
    }
}

/// The marks of a collection: the objects reached, and those whose references were read.
#[derive(Default)]
pub(super) struct Marks {
    pub(super) reached: OidSet,
    read: OidSet,
    /// Reached objects still to read; when full, further ones are found again in the marks.
    queue: Vec<Oid>,
    overflowed: bool,
}

impl Marks {
    pub(super) fn reach(&mut self, oid: Oid) {
        if self.reached.insert(oid) {
            self.enqueue(oid);
        }
    }

    /// Reads `oid` again (it changed since it was read), reaching it if it was not.
    pub(super) fn rescan(&mut self, oid: Oid) {
        self.reached.insert(oid);
        self.read.remove(oid);
        self.enqueue(oid);
    }

    fn enqueue(&mut self, oid: Oid) {
        if self.queue.len() < QUEUE_MAX {
            self.queue.push(oid);
        } else {
            self.overflowed = true;
        }
    }

    /// Reads the queued objects and everything they reach, through `records`.
    pub(super) fn propagate(&mut self, records: &mut dyn RecordRefs, total: u64, progress: Progress<'_>) -> Result<Marking, StoreError> {
        let mut reported = self.reached.len() / PROGRESS_EVERY;
        loop {
            while !self.queue.is_empty() {
                if !records.renew_if_old(self)? {
                    return Ok(Marking::LogPruned);
                }
                let from = self.queue.len().saturating_sub(READ_BATCH);
                let mut batch = self.queue.split_off(from);
                batch.sort_unstable();
                batch.dedup();
                batch.retain(|&oid| self.read.insert(oid));
                records.references(&batch, &mut |target| self.reach(target))?;
                if self.reached.len() / PROGRESS_EVERY > reported {
                    reported = self.reached.len() / PROGRESS_EVERY;
                    if progress(GcProgress::Mark { reached: self.reached.len(), total }).is_break() {
                        return Ok(Marking::Stopped);
                    }
                }
            }
            if !std::mem::take(&mut self.overflowed) {
                return Ok(Marking::Done);
            }
            let pending: Vec<Oid> = self.reached.iter().filter(|&oid| !self.read.contains(oid)).take(QUEUE_MAX).collect();
            self.overflowed = pending.len() == QUEUE_MAX;
            self.queue = pending;
        }
    }
}

/// A set of oids, one bit each in blocks of 2^16 consecutive oids: dense extents take two bits
/// per object of the marks together, and a stray high id takes one block, not a bitmap up to it.
#[derive(Default)]
pub(super) struct OidSet {
    blocks: HashMap<u64, Box<[u64; BLOCK_WORDS]>>,
    len: u64,
}

const BLOCK_BITS: u32 = 16;
const BLOCK_WORDS: usize = (1 << BLOCK_BITS) / 64;

impl OidSet {
    fn locate(oid: Oid) -> (u64, usize, u64) {
        let offset = (oid & ((1 << BLOCK_BITS) - 1)) as usize;
        (oid >> BLOCK_BITS, offset / 64, 1 << (offset % 64))
    }

    /// Adds `oid`; false if it was there.
    pub(super) fn insert(&mut self, oid: Oid) -> bool {
        let (block, word, bit) = Self::locate(oid);
        let words = self.blocks.entry(block).or_insert_with(|| Box::new([0; BLOCK_WORDS]));
        let fresh = words[word] & bit == 0;
        words[word] |= bit;
        self.len += u64::from(fresh);
        fresh
    }

    pub(super) fn remove(&mut self, oid: Oid) {
        let (block, word, bit) = Self::locate(oid);
        if let Some(words) = self.blocks.get_mut(&block) {
            self.len -= u64::from(words[word] & bit != 0);
            words[word] &= !bit;
        }
    }

    pub(super) fn contains(&self, oid: Oid) -> bool {
        let (block, word, bit) = Self::locate(oid);
        self.blocks.get(&block).is_some_and(|words| words[word] & bit != 0)
    }

    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// The oids in ascending order.
    pub(super) fn iter(&self) -> OidSetIter<'_> {
        let mut blocks: Vec<u64> = self.blocks.keys().copied().collect();
        blocks.sort_unstable();
        OidSetIter { set: self, blocks, block: 0, word: 0, bits: 0, base: 0 }
    }
}

/// The oids of an `OidSet`, ascending, found block by block (nothing is copied but the block
/// numbers).
pub(super) struct OidSetIter<'a> {
    set: &'a OidSet,
    blocks: Vec<u64>,
    /// The next word to load: word `word` of block `blocks[block]`.
    block: usize,
    word: usize,
    /// The bits of the word loaded last still to yield, and the oid of its bit 0.
    bits: u64,
    base: Oid,
}

impl Iterator for OidSetIter<'_> {
    type Item = Oid;

    fn next(&mut self) -> Option<Oid> {
        while self.bits == 0 {
            let &block = self.blocks.get(self.block)?;
            self.bits = self.set.blocks[&block][self.word];
            self.base = (block << BLOCK_BITS) | (self.word as u64 * 64);
            self.word += 1;
            if self.word == BLOCK_WORDS {
                self.word = 0;
                self.block += 1;
            }
        }
        let bit = u64::from(self.bits.trailing_zeros());
        self.bits &= self.bits - 1;
        Some(self.base | bit)
    }
}

