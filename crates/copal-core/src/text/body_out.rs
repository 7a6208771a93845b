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
}

impl<'a> BodyOut<'a> {
    pub(super) fn with_capacity(bytes: usize) -> Self {
        BodyOut { out: Writer { buf: Vec::with_capacity(bytes) }, names: Vec::new(), descriptors: Vec::new() }
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

    /// The table position of the descriptor of `type_name` (the reader's class number `class`)
    /// whose fields are the names from `names_from` on, added to `tree` if it is new; `None`
    /// when two fields have the same name. The names are taken off.
    pub(super) fn descriptor(&mut self, tree: &mut TreeBuilder, persistent: bool, class: usize, type_name: &str, names_from: usize) -> Option<u32> {
        if self.descriptors.len() <= class {
            self.descriptors.resize_with(class + 1, Vec::new);
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
        Some(position)
    }
}
