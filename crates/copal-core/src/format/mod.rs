//! The copal record format, version 1 (docs/FORMAT.md).

pub mod calendar;
mod descriptor;
mod error;
mod field_kind;
mod field_texts;
pub mod index_key;
mod oid;
mod reader;
mod record;
pub mod tag;
mod value;
mod varint;
mod writer;
mod written_strings;

pub use descriptor::{Descriptor, DescriptorSource};
pub use error::DecodeError;
pub use field_kind::{read_field_kinds, FieldKind, ListHead, StrHead};
pub use field_texts::ObjectField;
pub use oid::{class_extent, oid_class, oid_seq, make_oid, Oid, ClassNo, MAX_SEQ, ROOT_OID, ROOT_CLASS, ROOT_DESCRIPTOR, ROOT_TYPE_NAME};
pub use reader::{Limits, Reader, TzInfo};
pub use record::{RecordHeader, FORMAT_VERSION, FLAG_MUTABLE_STATE, encode_root_record};
pub(crate) use value::{decode_document_value, read_ref};
pub use value::{decode_record_state, decode_value, decode_value_with, is_decimal_text, memo_value, record_references, FieldReader, Value, ValueForms, MAX_DAY, MIN_DAY, PREALLOCATE_MAX};
pub use varint::{zigzag_decode, zigzag_encode, MAX_VARINT_LEN};
pub use writer::{repeat_tail, Writer};
pub use written_strings::{reference_is_shorter, text_hash, StringForm, StringsMark, WrittenStrings};
