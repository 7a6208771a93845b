//! Lists, tuples, sets and dicts, and the typed fields of TYPED_OBJECT values.

use copal_core::format::{tag, DecodeError, FieldKind, ListHead, Reader, StrHead};
use copal_core::format::zigzag_decode;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::allocation;
use crate::list_builder::ListBuilder;
use crate::strings::new_string;

use super::{memory, small_int, unhashable, Decoder, Fail, OrCorrupt, Out, Resolver};

impl<'r, 'py, R: Resolver<'py>, const BOUNDED: bool> Decoder<'r, 'py, R, BOUNDED> {
    /// A field of a TYPED_OBJECT, written in the form of its `kind` (docs/STREAM.md section 5).
    pub(super) fn typed_field(&mut self, r: &mut Reader<'_>, kind: FieldKind, depth: usize) -> Out<'py> {
        if kind == FieldKind::Any {
            return self.value(r, depth);
        }
        // Untagged values nest like tagged ones (FORMAT.md's depth limit counts values).
        if depth > self.limits.max_depth {
            return Err(DecodeError::TooDeep { limit: self.limits.max_depth }.into());
        }
        let py = self.py;
        // Typed fields are read without `value_inner`, which charges and checks the others.
        self.charge(memory::SLOT);
        self.check_memory()?;
        let (start, own_slot) = (self.expanded, self.memo.len());
        let value = match kind {
            FieldKind::Int => self.int(r.zigzag()?)?,
            FieldKind::Float => {
                self.charge(memory::FLOAT);
                allocation::float(py, r.f64()?)?
            }
            FieldKind::Str => {
                let offset = r.position();
                match StrHead::decode(r.varint()?) {
                    StrHead::New(len) => {
                        let len = r.fitting_length(offset, len, 1)?;
                        let text = r.bytes(len)?;
                        self.charge(memory::STR + memory::SLOT);
                        let value = new_string(py, text)?.ok_or(DecodeError::BadUtf8 { offset })?;
                        self.string_slots.get_or_insert_with(Vec::new).push(value.clone());
                        value
                    }
                    StrHead::Slot(index) => match self.string_slots.get_or_insert_with(Vec::new).get(index as usize) {
                        Some(value) => value.clone(),
                        None => return Err(DecodeError::BadBackRef { offset, index }.into()),
                    },
                }
            }
            FieldKind::List => {
                let offset = r.position();
                match ListHead::read(r)? {
                    ListHead::Items(count) => {
                        let count = r.fitting_length(offset, count, 1)?;
                        self.list_items(r, count, depth)?
                    }
                    ListHead::Objects(count) => {
                        let count = r.fitting_length(offset, count, 1)?;
                        self.object_list(r, count, offset, depth)?
                    }
                    ListHead::Backref(index) => self.backref(index, offset)?,
                }
            }
            FieldKind::Any => return self.value(r, depth),
        };
        self.count_expanded(start, own_slot);
        Ok(value)
    }

    /// A LIST of `count` tagged items (the count already read and checked).
    pub(super) fn list_items(&mut self, r: &mut Reader<'_>, count: usize, depth: usize) -> Out<'py> {
        self.charge(memory::LIST + memory::MEMO);
        let mut list = self.new_list(count)?;
        self.memo.push(Some(list.list().clone().into_any()));
        // Items nest one level deeper; scalars no further, so past the limit only `value`
        // (which refuses them) reads them.
        let scalars_fit = depth < self.limits.max_depth;
        let mut left = count;
        while left > 0 {
            if scalars_fit {
                left -= self.shared_scalars(r, &mut list, left)?;
                if left == 0 {
                    break;
                }
            }
            list.push(self.value(r, depth + 1)?)?;
            left -= 1;
        }
        Ok(list.into_any())
    }

    /// Reads into `list` the run of at most `max` items at `r` that are objects the decoder
    /// already has (INTs of `SMALL_INTS`, and in a stream with shared strings STRREFs), with
    /// varints of one or two bytes, and returns how many it read. They are what lists of numbers
    /// and of repeated strings are made of; read by `value`, each cost a call, a large stack
    /// frame and a jump over every tag, and was half the time of decoding such lists. Other
    /// items (and errors) are left to `value`.
    pub(super) fn shared_scalars(&mut self, r: &mut Reader<'_>, list: &mut ListBuilder<'py>, max: usize) -> Result<usize, Fail> {
        let data = r.rest();
        let slots: &[Bound<'py, PyAny>] = self.string_slots.as_deref().unwrap_or_default();
        let shares_strings = self.string_slots.is_some();
        let (small_ints, py) = (self.small_ints, self.py);
        let mut position = 0;
        // No further than the memory budget allows: the next value read checks it.
        let mut left = if BOUNDED { max.min(self.memory_limit.saturating_sub(self.memory_used) / memory::SLOT + 1) } else { max };
        let next = || {
            if left == 0 {
                return None;
            }
            let (tag, first) = (*data.get(position)?, *data.get(position + 1)?);
            let (operand, length) = if first < 0x80 {
                (u64::from(first), 2)
            } else {
                let second = *data.get(position + 2)?;
                if second >= 0x80 {
                    return None;
                }
                (u64::from(first & 0x7f) | u64::from(second) << 7, 3)
            };
            let item = match tag {
                tag::INT => {
                    small_int(small_ints, zigzag_decode(operand))?.bind(py)
                }
                tag::STRREF if shares_strings => slots.get(operand as usize)?,
                _ => return None,
            };
            position += length;
            left -= 1;
            Some(item)
        };
        // SAFETY: a small int lives as long as the process (`small_ints`), a string of
        // `string_slots` as long as the decoder, and `next` runs no Python code.
        let read = unsafe { list.extend_shared(next)? };
        r.bytes(position)?;
        self.expanded = self.expanded.saturating_add(read as u64);
        self.charge(read * memory::SLOT);
        Ok(read)
    }

    /// The body of an OBJECT_LIST after its count, read at `offset`: the descriptor id, then
    /// `count` TYPED_OBJECT bodies, each taking its memo slot after the list's. Objects of a
    /// descriptor without fields take no bytes, which the length rule then does not bound: a
    /// count of them is refused (docs/STREAM.md section 5).
    pub(super) fn object_list(&mut self, r: &mut Reader<'_>, count: usize, offset: usize, depth: usize) -> Out<'py> {
        self.charge(memory::LIST + memory::MEMO);
        let mut list = self.new_list(count)?;
        self.memo.push(Some(list.list().clone().into_any()));
        let id = r.u32_varint()?;
        if depth + 1 > self.limits.max_depth && count > 0 {
            return Err(DecodeError::TooDeep { limit: self.limits.max_depth }.into());
        }
        // The descriptor and class are looked up once for all the objects (and checked even
        // for none, as the id of an OBJECT is).
        let target = self.object_target(id)?;
        if target.info.fields.is_empty() && count > 0 {
            return Err(DecodeError::LengthTooLarge { offset, length: count as u64 }.into());
        }
        for _ in 0..count {
            let (start, own_slot) = (self.expanded, self.memo.len());
            self.charge(memory::SLOT);
            let item = self.object_of(r, id, &target, true, depth + 1)?;
            self.count_expanded(start, own_slot);
            list.push(item)?;
        }
        Ok(list.into_any())
    }

    pub(super) fn items(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<Vec<Bound<'py, PyAny>>, Fail> {
        let count = r.length(1)?;
        let mut items = Vec::with_capacity(count.min(copal_core::format::PREALLOCATE_MAX));
        for _ in 0..count {
            items.push(self.value(r, depth + 1)?);
        }
        Ok(items)
    }

    pub(super) fn hashed_items(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<Vec<Bound<'py, PyAny>>, Fail> {
        let count = r.length(1)?;
        self.charge(count * memory::SET_ITEM);
        let mut items = Vec::with_capacity(count.min(copal_core::format::PREALLOCATE_MAX));
        for _ in 0..count {
            items.push(self.hashed_value(r, depth + 1)?);
        }
        Ok(items)
    }

    pub(super) fn fill_dict(&mut self, r: &mut Reader<'_>, dict: &Bound<'py, PyDict>, depth: usize) -> Result<(), Fail> {
        let offset = r.position();
        let count = r.length(2)?;
        let table = if count > 0 { memory::DICT_TABLE.max(count * memory::DICT_ITEM) } else { 0 };
        self.charge(memory::DICT + memory::MEMO + table);
        for _ in 0..count {
            let key = self.hashed_value(r, depth + 1)?;
            let value = self.value(r, depth + 1)?;
            dict.set_item(key, value).or_corrupt(self.py, || unhashable(offset))?;
        }
        Ok(())
    }
}
