//! Class descriptors (docs/FORMAT.md section "Class descriptors"): a type name, the class number
//! of its extent and the ordered field names. Stored once per database; records carry only the
//! descriptor id and positional field values.

use super::error::DecodeError;
use super::field_kind::FieldKind;
use super::oid::ClassNo;
use super::reader::Reader;
use super::writer::Writer;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub id: u32,
    pub class_no: ClassNo,
    pub type_name: String,
    pub fields: Vec<String>,
}

impl Descriptor {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.varint(u64::from(self.class_no));
        w.length_prefixed(self.type_name.as_bytes());
        w.varint(self.fields.len() as u64);
        for field in &self.fields {
            w.length_prefixed(field.as_bytes());
        }
        w.buf
    }

    pub fn decode(id: u32, data: &[u8]) -> Result<Descriptor, DecodeError> {
        let mut r = Reader::new(data);
        let offset = r.position();
        let class_no = ClassNo::try_from(r.varint()?)
            .map_err(|_| DecodeError::OutOfRange { offset, what: "class number" })?;
        let type_name = r.str()?.to_owned();
        let count = r.length(1)?;
        let fields = (0..count).map(|_| r.str().map(str::to_owned)).collect::<Result<_, _>>()?;
        r.expect_end()?;
        Ok(Descriptor { id, class_no, type_name, fields })
    }

    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f == name)
    }
}

/// Where decoders look up descriptors by id (the store's catalog, or a standalone stream's table).
pub trait DescriptorSource {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError>;

    /// The field kinds of descriptor `id` (docs/STREAM.md section 4), which the fields of its
    /// TYPED_OBJECT values take the forms of: a stream table of version 3 or later has them. A
    /// field without a kind is a tagged value.
    fn field_kinds(&self, _id: u32) -> &[FieldKind] {
        &[]
    }

    /// Whether descriptors `a` and `b` name the same type, as a superseded SUBCLASS copy and the
    /// value it stands for must (docs/STREAM.md section 5). Ids are the same type; a stream table
    /// also compares type names.
    fn same_type(&self, a: u32, b: u32) -> bool {
        a == b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_round_trip() {
        let d = Descriptor { id: 7, class_no: 3, type_name: "app.Person".into(), fields: vec!["name".into(), "age".into()] };
        assert_eq!(Descriptor::decode(7, &d.encode()).unwrap(), d);
    }

    #[test]
    fn truncated_descriptor_is_an_error() {
        let d = Descriptor { id: 1, class_no: 3, type_name: "x.Y".into(), fields: vec!["a".into()] };
        let bytes = d.encode();
        assert!(Descriptor::decode(1, &bytes[..bytes.len() - 1]).is_err());
    }
}
