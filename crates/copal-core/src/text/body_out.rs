//! What the one-pass readers of JSON and XML documents (json_body.rs, xml_body.rs) share: the
//! body's value bytes written as the text is parsed, with counts and descriptor numbers patched
//! in once known, and the descriptors met so far matched without allocating. (The readers put
//! the table in front, `body_of`, unless their caller wants the two apart.)

use std::borrow::Cow;

use super::tree::TreeBuilder;
use super::has_duplicate;
use crate::format::Writer;

pub(super) struct BodyOut<'a> {
    pub(super) out: Writer,
    /// The member names of the dicts and objects being read, innermost last.
    pub(super) names: Vec<Cow<'a, str>>,
    /// Per class (numbered by the reader), the table positions of the descriptors met.
    descriptors: Vec<Vec<u32>>,
    /// Per class, the table position of the descriptor its last object had.
    last_descriptors: Vec<Option<u32>>,
}

/// The field names of an object being read, matched one by one against the fields of the
/// descriptor its class's last object had (objects of a class mostly have the same fields):
/// while they match, none is kept, and that descriptor is the object's without a search
/// (`BodyOut::object_descriptor`). Keeping each name and matching them all at the end took a
/// fifth of reading seed 001's JSON into a body.
pub(super) struct ObjectFields {
    /// The descriptor the names match so far, while they do.
    expected: Option<u32>,
    /// How many of its fields they matched.
    matched: usize,
    /// Where the object's names start in `BodyOut::names` (kept once they stop matching).
    names_from: usize,
    persistent: bool,
}

impl<'a> BodyOut<'a> {
    pub(super) fn with_capacity(bytes: usize) -> Self {
        BodyOut { out: Writer { buf: Vec::with_capacity(bytes) }, names: Vec::new(), descriptors: Vec::new(), last_descriptors: Vec::new() }
    }

    /// Room for a count written once known (`patch_varint`): one byte, which most counts take.
    pub(super) fn reserve_varint(&mut self) -> usize {
        self.out.u8(0);
        self.out.buf.len() - 1
    }

    /// Writes `value` at `at`, reserved by `reserve_varint`; a value of 128 or more moves the
    /// bytes after it by its extra length.
    pub(super) fn patch_varint(&mut self, at: usize, value: u64) {
        if value < 0x80 {
            self.out.buf[at] = value as u8;
        } else {
            let mut count = Writer::new();
            count.varint(value);
            self.out.buf.splice(at..at + 1, count.buf);
        }
    }

    /// Whether two of the names from `names_from` on are the same.
    pub(super) fn repeated_name(&self, names_from: usize) -> bool {
        has_duplicate(&self.names[names_from..], |name| name)
    }

    /// The start of the field names of an object of class `class` (`field_name` takes each).
    pub(super) fn object_fields(&self, tree: &TreeBuilder, persistent: bool, class: usize) -> ObjectFields {
        let expected = self.last_descriptors.get(class).copied().flatten();
        let expected = expected.filter(|&position| tree.table()[position as usize].persistent == persistent);
        ObjectFields { expected, matched: 0, names_from: self.names.len(), persistent }
    }

    /// The next field name of the object of `fields`.
    pub(super) fn field_name(&mut self, tree: &TreeBuilder, fields: &mut ObjectFields, name: Cow<'a, str>) {
        if let Some(position) = fields.expected {
            let known = &tree.table()[position as usize].fields;
            if known.get(fields.matched).is_some_and(|field| *field == *name) {
                fields.matched += 1;
                return;
            }
            self.keep_matched(tree, fields);
        }
        self.names.push(name);
    }

    /// The names `fields` matched, kept: the object has other fields than its descriptor's.
    #[cold]
    fn keep_matched(&mut self, tree: &TreeBuilder, fields: &mut ObjectFields) {
        if let Some(position) = fields.expected.take() {
            let known = &tree.table()[position as usize].fields[..fields.matched];
            self.names.extend(known.iter().map(|field| Cow::Owned(field.clone())));
        }
    }

    /// The table position of the descriptor of the object of `fields`, whose names have all been
    /// read (`descriptor`).
    pub(super) fn object_descriptor(&mut self, tree: &mut TreeBuilder, mut fields: ObjectFields, class: usize, type_name: &str) -> Option<u32> {
        if let Some(position) = fields.expected {
            if fields.matched == tree.table()[position as usize].fields.len() {
                return Some(position);
            }
            self.keep_matched(tree, &mut fields);
        }
        self.descriptor(tree, fields.persistent, class, type_name, fields.names_from)
    }

    /// The table position of the descriptor of `type_name` (the reader's class number `class`)
    /// whose fields are the names from `names_from` on, added to `tree` if it is new; `None`
    /// when two fields have the same name. The names are taken off.
    pub(super) fn descriptor(&mut self, tree: &mut TreeBuilder, persistent: bool, class: usize, type_name: &str, names_from: usize) -> Option<u32> {
        if self.descriptors.len() <= class {
            self.descriptors.resize_with(class + 1, Vec::new);
            self.last_descriptors.resize(class + 1, None);
        }
        let (names, table) = (&self.names[names_from..], tree.table());
        let known = self.descriptors[class].iter().copied().find(|&position| {
            let entry = &table[position as usize];
            entry.persistent == persistent && entry.fields.len() == names.len() && entry.fields.iter().zip(names).all(|(f, n)| f == n)
        });
        let position = match known {
            Some(position) => position,
            None if self.repeated_name(names_from) => return None,
            None => {
                let position = tree.descriptor(persistent, type_name, names.iter().map(|name| name.to_string()).collect());
                self.descriptors[class].push(position);
                position
            }
        };
        self.names.truncate(names_from);
        self.last_descriptors[class] = Some(position);
        Some(position)
    }
}
