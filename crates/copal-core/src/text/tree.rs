//! What the JSON and XML readers share while building a stream body from a document: the
//! descriptor table they infer, the memo slots counted as the binary decoder counts them
//! (docs/FORMAT.md section 7), and the document's ids of shared values.

use std::collections::HashMap;

use super::{mapping, Body, Positions, TableEntry, TextError};
use crate::format::{TzInfo, Value};

#[derive(Default)]
pub(crate) struct TreeBuilder {
    table: Vec<TableEntry>,
    index: Positions<(bool, String, Vec<String>)>,
    slot: u32,
    /// Document ids to memo slots.
    ids: HashMap<u64, u32>,
    /// Set while building a SUBCLASS base, which takes no memo slot of its own (the subclass
    /// instance took it).
    in_base: bool,
}

impl TreeBuilder {
    /// Takes the next memo slot for a value that has one (unless it is a SUBCLASS base), under
    /// the document id `id` if it has one.
    pub(crate) fn take_slot(&mut self, id: Option<u64>) -> Result<(), TextError> {
        if std::mem::take(&mut self.in_base) {
            return match id {
                Some(_) => Err(mapping("the base of a subclass instance cannot carry an id (it is shared through the instance)")),
                None => Ok(()),
            };
        }
        let slot = self.slot;
        self.slot += 1;
        if let Some(id) = id {
            if self.ids.insert(id, slot).is_some() {
                return Err(mapping(format!("id {id} is defined twice")));
            }
        }
        Ok(())
    }

    /// The back-reference of a reference to document id `id`.
    pub(crate) fn reference(&self, id: u64) -> Result<Value, TextError> {
        let slot = self.ids.get(&id).ok_or_else(|| mapping(format!("a reference names no earlier id ({id})")))?;
        Ok(Value::BackRef(*slot))
    }

    /// The table position of a descriptor, added on first use.
    pub(crate) fn descriptor(&mut self, persistent: bool, type_name: &str, fields: Vec<String>) -> u32 {
        let matches = |e: &TableEntry| e.persistent == persistent && e.type_name == type_name && e.fields == fields;
        if let Some(position) = self.index.find(&self.table, matches, || (persistent, type_name.to_owned(), fields.clone())) {
            return position as u32;
        }
        self.table.push(TableEntry { persistent, type_name: type_name.to_owned(), fields });
        self.index.added(&self.table, |e| (e.persistent, e.type_name.clone(), e.fields.clone()));
        (self.table.len() - 1) as u32
    }

    /// Marks the next value as a SUBCLASS base; `end_base` checks it once built.
    pub(crate) fn start_base(&mut self) {
        self.in_base = true;
    }

    pub(crate) fn end_base(&mut self, base: Value) -> Result<Value, TextError> {
        self.in_base = false;
        if !matches!(base, Value::List(_) | Value::Tuple(_) | Value::Set(_) | Value::FrozenSet(_) | Value::Dict(_) | Value::ByteArray(_)) {
            return Err(mapping("the base of a subclass instance must be a list, tuple, set, frozenset, dict or bytearray"));
        }
        Ok(base)
    }

    pub(crate) fn table(&self) -> &[TableEntry] {
        &self.table
    }

    pub(crate) fn into_table(self) -> Vec<TableEntry> {
        self.table
    }

    pub(crate) fn finish(self, value: Value) -> Body {
        Body { table: self.table, value }
    }
}

/// The zone of a DATETIME or TIME from its text's offset and its named zone, if any.
pub(crate) fn zone(offset: Option<i64>, zone: Option<&str>, what: &str) -> Result<TzInfo, TextError> {
    match (offset, zone) {
        (None, None) => Ok(TzInfo::Naive),
        (Some(o), None) => Ok(TzInfo::Offset(o)),
        (None, Some(z)) => Ok(TzInfo::Named(z.to_owned())),
        (Some(_), Some(_)) => Err(mapping(format!("{what} has both an offset and a zone"))),
    }
}
