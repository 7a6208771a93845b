//! Reading the columns of copal's PostgreSQL tables. A column whose type was changed behind
//! copal's back (`ALTER TABLE ... ALTER COLUMN ... TYPE`) no longer reads as the Rust type copal
//! asks for: that is a StorageError naming the table and the column, never a panic (the
//! client's `Row::get` panics on a type mismatch, so copal reads every column through `column`).

use postgres::types::FromSql;
use postgres::Row;

use super::error::StoreError;

/// Column `i` of `row`, a row of `table` (or of a statement computed from it, such as
/// `min(tid)`), as `T`.
pub(crate) fn column<'a, T: FromSql<'a>>(row: &'a Row, i: usize, table: &str) -> Result<T, StoreError> {
    row.try_get(i).map_err(|error| {
        let (name, found) = row.columns().get(i).map_or(("?", "?"), |c| (c.name(), c.type_().name()));
        StoreError::Storage {
            message: format!(
                "PostgreSQL: column {name} of {table} has type {found}, not the type copal created it with \
                 ({error}); change it back to the type docs/howto/postgresql.md lists with ALTER TABLE {table} ALTER COLUMN {name} TYPE"
            ),
        }
    })
}
