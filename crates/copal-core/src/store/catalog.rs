//! The in-memory copy of the descriptors table, shared by every connection of a store.

use std::collections::HashMap;
use std::sync::Arc;

use crate::format::{ClassNo, DecodeError, Descriptor, DescriptorSource};

#[derive(Debug, Default)]
pub struct Catalog {
    by_id: HashMap<u32, Arc<Descriptor>>,
    by_shape: HashMap<(String, Vec<String>), u32>,
    class_by_name: HashMap<String, ClassNo>,
    name_by_class: HashMap<ClassNo, String>,
    pub max_id: u32,
    pub max_class: ClassNo,
}

impl Catalog {
    pub fn insert(&mut self, descriptor: Arc<Descriptor>) {
        self.max_id = self.max_id.max(descriptor.id);
        self.max_class = self.max_class.max(descriptor.class_no);
        self.class_by_name.insert(descriptor.type_name.clone(), descriptor.class_no);
        self.name_by_class.insert(descriptor.class_no, descriptor.type_name.clone());
        self.by_shape.insert((descriptor.type_name.clone(), descriptor.fields.clone()), descriptor.id);
        self.by_id.insert(descriptor.id, descriptor);
    }

    pub fn get(&self, id: u32) -> Option<&Arc<Descriptor>> {
        self.by_id.get(&id)
    }

    pub fn find(&self, type_name: &str, fields: &[String]) -> Option<&Arc<Descriptor>> {
        // The tuple key forces an allocation per lookup; lookups happen once per class shape
        // per connection (the binding caches the result), so this is not on a hot path.
        self.by_shape.get(&(type_name.to_owned(), fields.to_vec())).and_then(|id| self.by_id.get(id))
    }

    pub fn class_no(&self, type_name: &str) -> Option<ClassNo> {
        self.class_by_name.get(type_name).copied()
    }

    pub fn type_name(&self, class_no: ClassNo) -> Option<&str> {
        self.name_by_class.get(&class_no).map(String::as_str)
    }

    pub fn type_names(&self) -> impl Iterator<Item = (&String, &ClassNo)> {
        self.class_by_name.iter()
    }

    pub fn descriptors(&self) -> impl Iterator<Item = &Arc<Descriptor>> {
        self.by_id.values()
    }
}

impl DescriptorSource for Catalog {
    fn field_count(&self, id: u32) -> Result<usize, DecodeError> {
        self.by_id.get(&id).map(|d| d.fields.len()).ok_or(DecodeError::UnknownDescriptor { id })
    }
}
