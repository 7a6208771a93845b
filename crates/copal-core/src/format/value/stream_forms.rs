//! The values that streams add to FORMAT.md's (docs/STREAM.md section 5), read by `Walk` where
//! `ValueForms` turns them on: shared strings (version 2), typed objects (version 3), superseded
//! copies and SUBCLASS values of scalar and BYTEARRAY bases (version 4). The errors are those of
//! the binding's decoder for the same bytes (crates/copal-py/src/decode/), check for check and in
//! the same order, so that a stream the one refuses the other refuses with the same kind.

use super::{Value, Walk, PREALLOCATE_MAX};
use crate::format::descriptor::DescriptorSource;
use crate::format::error::DecodeError;
use crate::format::field_kind::{FieldKind, ListHead, StrHead};
use crate::format::reader::Reader;
use crate::format::tag;

/// The values a decoding reads: those of records (`RECORD`), and the forms that streams add or
/// leave out (docs/STREAM.md section 5). Each one that is off is an unknown tag (or SUBCLASS
/// base).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueForms {
    /// REF: a reference to a stored object (records; a stream refers to nothing outside it).
    pub references: bool,
    /// STRREF: a string of an earlier STR (stream version 2 on).
    pub shared_strings: bool,
    /// TYPED_OBJECT and OBJECT_LIST, whose fields take the forms of their descriptor's field
    /// kinds (`DescriptorSource::field_kinds`; version 3 on).
    pub typed_objects: bool,
    /// SUPERSEDED_TUPLE and SUPERSEDED_FROZENSET, as values and SUBCLASS bases, and SUBCLASS
    /// bases of scalar tags (version 4).
    pub copies_and_scalar_bases: bool,
    /// SUBCLASS bases BYTEARRAY (version 4, and the bodies of text documents).
    pub bytearray_bases: bool,
}

impl ValueForms {
    /// The values of records (docs/FORMAT.md section 6).
    pub const RECORD: ValueForms =
        ValueForms { references: true, shared_strings: false, typed_objects: false, copies_and_scalar_bases: false, bytearray_bases: false };
}

/// What the value of a memo slot is, as far as a superseded copy that names the slot must
/// match it (docs/STREAM.md section 5, step 3): a tuple, a frozenset, or a SUBCLASS of either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Made {
    Tuple,
    FrozenSet,
    /// A SUBCLASS of descriptor `descriptor` whose base is TUPLE or FROZENSET (`base`).
    Subclass { descriptor: u32, base: u8 },
    Other,
}

impl<D: DescriptorSource + ?Sized> Walk<'_, D> {
    /// A TYPED_OBJECT or OBJECT_LIST (`t`) after its tag, whose memo slot is taken.
    pub(super) fn typed_value(&mut self, r: &mut Reader<'_>, t: u8, depth: usize) -> Result<Value, DecodeError> {
        if t == tag::OBJECT_LIST {
            let offset = r.position();
            let count = r.length(1)?;
            return self.object_list(r, count, offset, depth);
        }
        let (descriptor, count) = self.descriptor_fields(r)?;
        let fields = self.typed_fields(r, descriptor, count, depth + 1)?;
        Ok(Value::Object { descriptor, fields })
    }

    /// The body of an OBJECT_LIST (or of a LIST field of form 1) after its count, read at
    /// `offset`, whose memo slot is taken: the descriptor id, then `count` objects, each taking a
    /// memo slot before its fields. The depth is checked before the descriptor, as the binding
    /// checks it. The objects of a descriptor without fields take no bytes, so the length rule
    /// (one byte per object) does not bound their count: it refuses any, else lists claiming all
    /// the input left, one after another, would make objects quadratic in the input.
    fn object_list(&mut self, r: &mut Reader<'_>, count: usize, offset: usize, depth: usize) -> Result<Value, DecodeError> {
        let descriptor = r.u32_varint()?;
        if depth + 1 > r.limits.max_depth && count > 0 {
            return Err(DecodeError::TooDeep { limit: r.limits.max_depth });
        }
        let field_count = self.descriptors.field_count(descriptor)?;
        if field_count == 0 && count > 0 {
            return Err(DecodeError::LengthTooLarge { offset, length: count as u64 });
        }
        let mut objects = Vec::with_capacity(count.min(PREALLOCATE_MAX));
        for _ in 0..count {
            self.take_slot();
            let fields = self.typed_fields(r, descriptor, field_count, depth + 2)?;
            objects.push(Value::Object { descriptor, fields });
        }
        Ok(Value::List(objects))
    }

    /// The `count` fields of a typed object of `descriptor`, each at `depth`.
    fn typed_fields(&mut self, r: &mut Reader<'_>, descriptor: u32, count: usize, depth: usize) -> Result<Vec<Value>, DecodeError> {
        let descriptors = self.descriptors;
        let kinds = descriptors.field_kinds(descriptor);
        let mut fields = Vec::with_capacity(count.min(PREALLOCATE_MAX));
        for index in 0..count {
            let kind = kinds.get(index).copied().unwrap_or(FieldKind::Any);
            fields.push(self.typed_field(r, kind, depth)?);
        }
        Ok(fields)
    }

    /// A field of a typed object, in the form of its `kind` (docs/STREAM.md section 4). Untagged
    /// values count toward the depth limit as the tagged values they stand for.
    fn typed_field(&mut self, r: &mut Reader<'_>, kind: FieldKind, depth: usize) -> Result<Value, DecodeError> {
        if kind != FieldKind::Any && depth > r.limits.max_depth {
            return Err(DecodeError::TooDeep { limit: r.limits.max_depth });
        }
        let offset = r.position();
        Ok(match kind {
            FieldKind::Any => self.value(r, depth)?,
            FieldKind::Int => Value::Int(r.zigzag()?),
            FieldKind::Float => Value::Float(r.f64()?),
            FieldKind::Str => match StrHead::decode(r.varint()?) {
                StrHead::New(len) => {
                    let len = r.fitting_length(offset, len, 1)?;
                    let text = std::str::from_utf8(r.bytes(len)?).map_err(|_| DecodeError::BadUtf8 { offset })?;
                    self.string_slots += 1;
                    Value::Str(text.to_owned())
                }
                StrHead::Slot(index) if index < self.string_slots => Value::StrRef(index as u32),
                StrHead::Slot(index) => return Err(DecodeError::BadBackRef { offset, index }),
            },
            FieldKind::List => match ListHead::read(r)? {
                ListHead::Items(count) => {
                    let count = r.fitting_length(offset, count, 1)?;
                    self.take_slot();
                    Value::List(self.counted_items(r, count, depth)?)
                }
                ListHead::Objects(count) => {
                    let count = r.fitting_length(offset, count, 1)?;
                    self.take_slot();
                    self.object_list(r, count, offset, depth)?
                }
                ListHead::Backref(index) => self.backref(offset, index)?,
            },
        })
    }

    /// A superseded copy (`t`, SUPERSEDED_TUPLE or SUPERSEDED_FROZENSET) after its tag, in memo
    /// slot `slot`, as a value or as the base of the SUBCLASS of `descriptor`: its items, then
    /// the slot `by` whose value it is, which must have been taken inside the copy and hold a
    /// finished value of the type the copy stands for. Every value inside the copy is finished
    /// once its items are read, so a slot after `slot` holds its value.
    pub(super) fn superseded(&mut self, r: &mut Reader<'_>, t: u8, depth: usize, slot: u64, descriptor: Option<u32>) -> Result<Value, DecodeError> {
        let items = self.unfinished_items(r, depth, slot, Made::Other)?;
        let offset = r.position();
        let by = r.varint()?;
        let base = if t == tag::SUPERSEDED_TUPLE { tag::TUPLE } else { tag::FROZENSET };
        let expected = match descriptor {
            Some(descriptor) => Made::Subclass { descriptor, base },
            None if base == tag::TUPLE => Made::Tuple,
            None => Made::FrozenSet,
        };
        let found = if slot < by && by < self.memo_slots { self.made[by as usize] } else { Made::Other };
        let stands_for = match (found, expected) {
            (Made::Subclass { descriptor: a, base: x }, Made::Subclass { descriptor: b, base: y }) => {
                x == y && self.descriptors.same_type(a, b)
            }
            (found, expected) => found != Made::Other && found == expected,
        };
        if !stands_for {
            return Err(DecodeError::BadBackRef { offset, index: by });
        }
        self.made(slot, expected);
        let by = by as u32;
        Ok(if base == tag::TUPLE { Value::SupersededTuple { items, by } } else { Value::SupersededFrozenSet { items, by } })
    }

    /// The SUBCLASS bases of `forms`, after the base tag `t` read at `offset`; any other tag is
    /// unknown. A scalar base is a whole value that takes no string slot (it is no STR value of
    /// the stream) and holds no other value.
    pub(super) fn stream_subclass_base(
        &mut self,
        r: &mut Reader<'_>,
        t: u8,
        offset: usize,
        depth: usize,
        slot: u64,
        descriptor: u32,
    ) -> Result<Value, DecodeError> {
        let copies_and_scalars = self.forms.copies_and_scalar_bases;
        match t {
            tag::BYTEARRAY if self.forms.bytearray_bases => Ok(Value::ByteArray(r.length_prefixed()?.to_vec())),
            tag::SUPERSEDED_TUPLE | tag::SUPERSEDED_FROZENSET if copies_and_scalars => {
                self.superseded(r, t, depth, slot, Some(descriptor))
            }
            tag::INT | tag::BIGINT | tag::FLOAT | tag::COMPLEX | tag::STR | tag::STR_SURROGATES | tag::BYTES if copies_and_scalars => {
                let string_slots = self.string_slots;
                let base = self.scalar(r, t);
                self.string_slots = string_slots;
                base
            }
            other => Err(DecodeError::UnknownTag { offset, tag: other }),
        }
    }
}
