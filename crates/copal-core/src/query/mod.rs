//! Query evaluation on raw records (DESIGN.md §5): predicates test fields decoded straight from
//! the stored bytes, so objects that do not match never become application objects.

mod predicate;

pub use predicate::{Predicate, scan};
