//! Secondary indexes: definitions, entries, and their maintenance (docs/ARCHITECTURE.md
//! "Indexes"). An entry is the key `index id (u32 BE) ++ index key ++ oid (u64 BE)` with an
//! empty value in the index entries table, so a lookup or range is one range scan and two
//! transactions that index different objects never touch the same entry.

use super::error::StoreError;
use super::read_u64_key;
use crate::format::index_key::push_key;
use crate::format::{decode_record_state, DescriptorSource, Oid, Reader, Writer};

/// An index as the application's classes declare it (`copal.Index`): the fields of an
/// `IndexDef`, before the store gives it an id.
#[derive(Debug, Clone, Copy)]
pub struct DeclaredIndex<'a> {
    pub type_name: &'a str,
    pub covered: &'a [String],
    pub fields: &'a [String],
    pub unique: bool,
    pub renamed: &'a [(String, String, String)],
    pub defaults: &'a [FieldDefault],
}

/// (covered type name, field name, index key of the default): records of that type without the
/// field are keyed by the default that loading gives the field (a field added to the class
/// after they were written), so that the index answers as a scan of the records does.
pub type FieldDefault = (String, String, Vec<u8>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    pub id: u32,
    /// The class that declares the index.
    pub type_name: String,
    /// Type names whose objects the index holds: the declaring class and its subclasses.
    pub covered: Vec<String>,
    pub fields: Vec<String>,
    pub unique: bool,
    /// (covered type name, former field name, current name) for index fields that a class
    /// renamed: records written before the rename hold the value under the former name.
    pub renamed: Vec<(String, String, String)>,
    /// The defaults of index fields that records of a covered type may lack.
    pub defaults: Vec<FieldDefault>,
}

impl IndexDef {
    /// Whether this is the index that `declared` asks for, whichever types it covers so far.
    pub fn is_declared_as(&self, declared: &DeclaredIndex<'_>) -> bool {
        self.type_name == declared.type_name
            && self.fields == declared.fields
            && self.unique == declared.unique
            && self.renamed == declared.renamed
            && self.defaults == declared.defaults
    }

    /// What this definition declares (for building it again elsewhere: an import).
    pub fn declared(&self) -> DeclaredIndex<'_> {
        let IndexDef { type_name, covered, fields, unique, renamed, defaults, .. } = self;
        DeclaredIndex { type_name, covered, fields, unique: *unique, renamed, defaults }
    }

    /// The key of the default of `field` for records of `type_name` without it.
    pub fn default_key(&self, type_name: &str, field: &str) -> Option<&[u8]> {
        self.defaults.iter().find(|(t, f, _)| t == type_name && f == field).map(|(_, _, key)| key.as_slice())
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.length_prefixed(self.type_name.as_bytes());
        w.varint(self.covered.len() as u64);
        self.covered.iter().for_each(|c| w.length_prefixed(c.as_bytes()));
        w.varint(self.fields.len() as u64);
        self.fields.iter().for_each(|f| w.length_prefixed(f.as_bytes()));
        w.u8(u8::from(self.unique));
        // Definitions written before renames (then defaults) were recorded end here; they
        // decode as none.
        if !self.renamed.is_empty() || !self.defaults.is_empty() {
            w.varint(self.renamed.len() as u64);
            for (type_name, old, new) in &self.renamed {
                [type_name, old, new].iter().for_each(|s| w.length_prefixed(s.as_bytes()));
            }
        }
        if !self.defaults.is_empty() {
            w.varint(self.defaults.len() as u64);
            for (type_name, field, key) in &self.defaults {
                w.length_prefixed(type_name.as_bytes());
                w.length_prefixed(field.as_bytes());
                w.length_prefixed(key);
            }
        }
        w.buf
    }

    pub fn decode(id: u32, data: &[u8]) -> Result<IndexDef, crate::format::DecodeError> {
        let mut r = Reader::new(data);
        let type_name = r.str()?.to_owned();
        let covered = (0..r.length(1)?).map(|_| r.str().map(str::to_owned)).collect::<Result<_, _>>()?;
        let fields = (0..r.length(1)?).map(|_| r.str().map(str::to_owned)).collect::<Result<_, _>>()?;
        let unique = r.u8()? != 0;
        let mut renamed = Vec::new();
        if !r.is_empty() {
            for _ in 0..r.length(3)? {
                renamed.push((r.str()?.to_owned(), r.str()?.to_owned(), r.str()?.to_owned()));
            }
        }
        let mut defaults = Vec::new();
        if !r.is_empty() {
            for _ in 0..r.length(3)? {
                defaults.push((r.str()?.to_owned(), r.str()?.to_owned(), r.length_prefixed()?.to_vec()));
            }
        }
        r.expect_end()?;
        Ok(IndexDef { id, type_name, covered, fields, unique, renamed, defaults })
    }

    /// Decodes a definition read from the store (a damaged one is a corrupt store).
    pub(crate) fn decode_stored(id: u32, data: &[u8]) -> Result<IndexDef, StoreError> {
        IndexDef::decode(id, data).map_err(|source| StoreError::Corrupt { what: format!("index definition {id}"), source })
    }

    /// The index key of a record (a field the record lacks keyed as its default, else as
    /// missing), or None if the record's class is not covered by this index.
    pub fn key_of(
        &self,
        record: &[u8],
        descriptors: &(impl DescriptorSource + DescriptorNames),
    ) -> Result<Option<Vec<u8>>, crate::format::DecodeError> {
        let (header, values) = decode_record_state(record, descriptors)?;
        let (type_name, names) = descriptors.names(header.descriptor)?;
        if !self.covered.iter().any(|c| c == type_name) {
            return Ok(None);
        }
        let mut key = Vec::with_capacity(16 * self.fields.len());
        for field in &self.fields {
            let position = names.iter().position(|n| n == field).or_else(|| {
                self.renamed
                    .iter()
                    .filter(|(t, _, new)| t == type_name && new == field)
                    .find_map(|(_, old, _)| names.iter().position(|n| n == old))
            });
            match (position, self.default_key(type_name, field)) {
                (None, Some(default)) => key.extend_from_slice(default),
                (position, _) => push_key(&mut key, position.map(|i| &values[i])),
            }
        }
        Ok(Some(key))
    }
}

/// An index that the application's classes declare removed (`__copal_removed_indexes__`): the
/// declaring type name and the fields.
pub type RemovedIndex = (String, Vec<String>);

/// The indexes among `defs` that index maintenance drops: those declared removed, and those
/// superseded by a declaration on the same type and fields with another uniqueness, renames or
/// defaults (built anew beside them: an index no longer declared unique must stop refusing
/// duplicates). An index that the running program's classes merely do not declare is kept
/// and maintained: during a rolling deploy, a program still running an older class version
/// would otherwise drop the index that the newer version declares, and the newer one build it
/// again (docs/ARCHITECTURE.md, "Indexes").
pub fn stale_indexes(defs: &[std::sync::Arc<IndexDef>], declared: &[DeclaredIndex<'_>], removed: &[RemovedIndex]) -> Vec<u32> {
    defs.iter()
        .filter(|def| !declared.iter().any(|index| def.is_declared_as(index)))
        .filter(|def| {
            let superseded = declared.iter().any(|index| {
                index.type_name == def.type_name && index.fields == def.fields.as_slice()
            });
            superseded || removed.iter().any(|(type_name, fields)| *type_name == def.type_name && *fields == def.fields)
        })
        .map(|def| def.id)
        .collect()
}

/// Type name and field names of a descriptor id.
pub trait DescriptorNames {
    fn names(&self, id: u32) -> Result<(&str, &[String]), crate::format::DecodeError>;
}

impl DescriptorNames for super::catalog::Catalog {
    fn names(&self, id: u32) -> Result<(&str, &[String]), crate::format::DecodeError> {
        self.get(id)
            .map(|d| (d.type_name.as_str(), d.fields.as_slice()))
            .ok_or(crate::format::DecodeError::UnknownDescriptor { id })
    }
}

pub fn entry_key(index: u32, key: &[u8], oid: Oid) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len() + 8);
    out.extend_from_slice(&index.to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&oid.to_be_bytes());
    out
}

/// The oid at the end of an entry key.
pub fn entry_oid(entry: &[u8]) -> Result<Oid, StoreError> {
    read_u64_key(&entry[entry.len().saturating_sub(8)..], "index entry")
}

/// The smallest byte string greater than every string starting with `prefix` (None: none).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Whether a key (without oid) holds a missing or None field: such keys are exempt from
/// uniqueness, as NULLs are in SQL.
pub fn key_has_no_value(key: &[u8], fields: usize) -> bool {
    use crate::format::index_key::{MISSING, NONE};
    let mut pos = 0;
    for _ in 0..fields {
        match key.get(pos) {
            Some(&MISSING) | Some(&NONE) | None => return true,
            Some(_) => pos += field_key_len(&key[pos..]),
        }
    }
    false
}

fn field_key_len(key: &[u8]) -> usize {
    use crate::format::index_key::*;
    match key[0] {
        MISSING | NONE => 1,
        NUMBER => 17,
        DATE | DATETIME | TIME | TIMEDELTA => 9,
        UUID => 17,
        _ => {
            // Escaped bytes up to the 00 00 terminator.
            let mut i = 1;
            while i + 1 < key.len() {
                if key[i] == 0 {
                    if key[i + 1] == 0 {
                        return i + 2;
                    }
                    i += 2;
                } else {
                    i += 1;
                }
            }
            key.len()
        }
    }
}
