use std::collections::HashMap;

use crate::format::{ClassNo, DecodeError, FieldReader, Oid, Reader, RecordHeader, Value};
use crate::store::{Catalog, Snapshot, StoreError};

/// A test of one field of a record.
#[derive(Debug, Clone)]
pub enum Predicate {
    /// The field exists and equals the value (numbers compare by value, as in Python).
    Eq { field: String, value: Value },
}

impl Predicate {
    fn field(&self) -> &str {
        match self {
            Predicate::Eq { field, .. } => field,
        }
    }

    fn matches(&self, value: &Value) -> bool {
        match self {
            Predicate::Eq { value: expected, .. } => value.query_eq(expected),
        }
    }
}

/// For one descriptor: the position of each predicate's field (None: the field is absent, so
/// the predicate cannot match) and how many leading fields must be read.
struct FieldPlan {
    positions: Vec<Option<usize>>,
    fields_to_read: usize,
}

/// Scans the extents of `classes` in `snapshot` and returns the (oid, record bytes) of every
/// record whose fields satisfy all `predicates`, stopping after `limit` matches.
pub fn scan(
    snapshot: &Snapshot,
    classes: &[ClassNo],
    predicates: &[Predicate],
    limit: Option<usize>,
) -> Result<Vec<(Oid, Vec<u8>)>, StoreError> {
    let mut plans: HashMap<u32, FieldPlan> = HashMap::new();
    let mut matches = Vec::new();
    let limit = limit.unwrap_or(usize::MAX);
    for &class in classes {
        if matches.len() >= limit {
            break;
        }
        snapshot.scan_extent(class, |oid, record| {
            let corrupt = |source: DecodeError| StoreError::Corrupt { what: format!("record {oid:#x}"), source };
            let mut r = Reader::new(record);
            let header = RecordHeader::read(&mut r).map_err(corrupt)?;
            if !plans.contains_key(&header.descriptor) {
                let descriptor = snapshot.descriptor(header.descriptor)?;
                let positions: Vec<_> = predicates.iter().map(|p| descriptor.field_index(p.field())).collect();
                let fields_to_read = positions.iter().flatten().map(|i| i + 1).max().unwrap_or(0);
                plans.insert(header.descriptor, FieldPlan { positions, fields_to_read });
            }
            let plan = &plans[&header.descriptor];
            if plan.positions.iter().any(Option::is_none) {
                return Ok(true);
            }
            let catalog: &Catalog = &snapshot.store().catalog();
            let mut fields = FieldReader::new(record, r.position(), catalog).map_err(corrupt)?;
            let mut values = Vec::with_capacity(plan.fields_to_read);
            for index in 0..plan.fields_to_read {
                let value = fields.next_value().map_err(corrupt)?;
                values.push(plan.positions.contains(&Some(index)).then_some(value));
            }
            let all = predicates.iter().zip(&plan.positions).all(|(predicate, position)| {
                let index = position.expect("checked above");
                values[index].as_ref().is_some_and(|v| predicate.matches(v))
            });
            if all {
                matches.push((oid, record.to_vec()));
            }
            Ok(matches.len() < limit)
        })?;
    }
    Ok(matches)
}
