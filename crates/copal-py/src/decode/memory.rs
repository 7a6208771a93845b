//! The memory budget of a decoding: an estimate, in bytes, of what the Python objects it makes
//! take beyond the bytes and characters they hold, charged as they are made (docs/STREAM.md
//! section 3). A compressed payload's decoding is held to `max_size` this way, as its
//! decompression is: a few kilobytes of zstd inflate to `max_size` bytes of empty lists, each
//! two bytes of which become 80 bytes of objects. The bytes and characters of strings, bytes,
//! ints and decimals are not charged: they come from the payload, at most one byte of object
//! per byte of it, so they are bounded by `max_size` already. Only a `Decoder::bounded` keeps the
//! account; the others (records, uncompressed streams) compile without it: the objects of an
//! uncompressed input are bounded by its length, as each value takes at least one byte of it
//! (the most an input byte makes is half an empty set, `0E 00`: about 120 bytes), and the
//! account cost a bounded decoding 1 to 4% of its instructions.
//!
//! The estimates are the sizes CPython 3.11 to 3.13 (64-bit) gives the objects
//! (`sys.getsizeof`, garbage-collector header included), rounded up; a value shared with the
//! rest of the process (None, booleans, small ints, enum members, a back-reference, a string
//! the decoder's cache already made) costs only the reference to it.

use copal_core::format::tag;
use pyo3::PyErr;

use super::{Decoder, Fail, Resolver};
use crate::errors::CorruptRecordError;

/// A reference to a value: its place in the container or object that holds it.
pub(super) const SLOT: usize = 8;
/// The memo slot (and its expansion weight) of a value that takes one.
pub(super) const MEMO: usize = 16;
pub(super) const INT: usize = 32;
pub(super) const FLOAT: usize = 24;
pub(super) const COMPLEX: usize = 32;
pub(super) const STR: usize = 80;
pub(super) const BYTES: usize = 40;
pub(super) const BYTEARRAY: usize = 64;
pub(super) const DATETIME: usize = 48;
pub(super) const DATE: usize = 32;
pub(super) const TIME: usize = 48;
pub(super) const TIMEDELTA: usize = 40;
pub(super) const DECIMAL: usize = 104;
/// A UUID and the int it holds.
pub(super) const UUID: usize = 104;
pub(super) const LIST: usize = 56;
pub(super) const TUPLE: usize = 40;
/// An empty dict; one with items has a table of its own, of at least `DICT_TABLE` bytes and
/// `DICT_ITEM` per item (beside the references to its keys and values).
pub(super) const DICT: usize = 64;
pub(super) const DICT_TABLE: usize = 160;
pub(super) const DICT_ITEM: usize = 32;
/// A set or frozenset, whose table holds up to four slots of 16 bytes per element.
pub(super) const SET: usize = 216;
pub(super) const SET_ITEM: usize = 64;
/// An instance before its fields: the object and the header of its values.
pub(super) const OBJECT: usize = 104;
/// The instance of a SUBCLASS value beyond its base's estimate.
pub(super) const SUBCLASS: usize = 64;

/// What a value of each tag costs at least, with the reference to it, charged when its tag is
/// read (its items, fields and the tag's other costs are charged where they are read).
pub(super) const OF_TAG: [usize; 256] = {
    let mut costs = [SLOT; 256];
    costs[tag::BIGINT as usize] = SLOT + INT;
    costs[tag::FLOAT as usize] = SLOT + FLOAT;
    costs[tag::COMPLEX as usize] = SLOT + COMPLEX;
    costs[tag::STR_SURROGATES as usize] = SLOT + STR;
    costs[tag::BYTES as usize] = SLOT + BYTES;
    costs[tag::BYTEARRAY as usize] = SLOT + BYTEARRAY + MEMO;
    costs[tag::TUPLE as usize] = SLOT + TUPLE + MEMO;
    costs[tag::SET as usize] = SLOT + SET + MEMO;
    costs[tag::FROZENSET as usize] = SLOT + SET + MEMO;
    costs[tag::SUPERSEDED_TUPLE as usize] = SLOT + MEMO;
    costs[tag::SUPERSEDED_FROZENSET as usize] = SLOT + MEMO;
    costs[tag::DATETIME as usize] = SLOT + DATETIME;
    costs[tag::DATE as usize] = SLOT + DATE;
    costs[tag::TIME as usize] = SLOT + TIME;
    costs[tag::TIMEDELTA as usize] = SLOT + TIMEDELTA;
    costs[tag::DECIMAL as usize] = SLOT + DECIMAL;
    costs[tag::UUID as usize] = SLOT + UUID;
    costs[tag::SUBCLASS as usize] = SLOT + SUBCLASS;
    costs
};

impl<'py, R: Resolver<'py>, const BOUNDED: bool> Decoder<'_, 'py, R, BOUNDED> {
    /// Adds `bytes` to the estimate of a bounded decoder. It is checked (`check_memory`)
    /// before each value is made, so it passes the bound by the costs of one value at most.
    #[inline(always)]
    pub(super) fn charge(&mut self, bytes: usize) {
        if BOUNDED {
            self.memory_used = self.memory_used.saturating_add(bytes);
        }
    }

    #[inline(always)]
    pub(super) fn check_memory(&self) -> Result<(), Fail> {
        match BOUNDED && self.memory_used > self.memory_limit {
            true => Err(Fail::Python(self.over_budget())),
            false => Ok(()),
        }
    }

    #[cold]
    #[inline(never)]
    fn over_budget(&self) -> PyErr {
        let limit = self.memory_limit;
        CorruptRecordError::new_err(format!(
            "corrupt {what}: its objects would take more than max_size = {limit} bytes of memory; pass a larger \
             max_size to loads/load if the {what} is trusted",
            what = (self.what)()
        ))
    }
}
