//! The versions of copal's tables in a PostgreSQL database and the steps between them.
//!
//! `copal_meta.format` holds the version. `MIGRATIONS[i]` takes a database from version `i` to
//! `i + 1` (version 0: no copal tables), so a new database runs every step in order and an older
//! one the steps it lacks: both end with the same tables, built by the same DDL. A released step
//! is never edited; a change of the tables is a new step at the end. The steps of one init or
//! upgrade run in one transaction (PostgreSQL's DDL is transactional), so a failure leaves the
//! database at the version it had.

use postgres::{Client, SimpleQueryRow};

use super::error::StoreError;
use super::pg_columns::column;
use super::postgres::{bytea_literal, parse_text_column, simple_results, simple_rows, sql_oid};
use super::{MigrationReport, META_TID};
use super::anchors::ANCHORS_RECORDED;
use crate::format::{encode_root_record, Descriptor, ROOT_CLASS, ROOT_DESCRIPTOR, ROOT_OID, ROOT_TYPE_NAME};

/// One step from a schema version to the next.
struct Migration {
    /// What the step does, as `copal init` and `copal upgrade` report it.
    summary: &'static str,
    /// The step's statements, values inline: the steps of an init or upgrade are sent together
    /// as text, in one round trip.
    sql: fn() -> String,
}

const MIGRATIONS: &[Migration] = &[
    Migration { summary: "created copal's tables and the empty root", sql: create_tables },
    Migration {
        summary: "created copal_schema_history (which copal applied each later schema version, and when)",
        sql: create_history,
    },
];

/// The schema version this code reads and writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The `copal_meta` key of the schema version.
pub(crate) const META_FORMAT: &[u8] = b"format";

/// Version 1: the tables as the first release of the PostgreSQL store created them.
fn create_tables() -> String {
    let root = Descriptor {
        id: ROOT_DESCRIPTOR,
        class_no: ROOT_CLASS,
        type_name: ROOT_TYPE_NAME.to_owned(),
        fields: vec!["data".to_owned()],
    };
    // IF NOT EXISTS: before schema versions were checked this carefully, a database whose first
    // open failed half-way could hold some of the tables.
    format!(
        "CREATE TABLE IF NOT EXISTS copal_meta (key bytea PRIMARY KEY, value bigint NOT NULL); \
         CREATE TABLE IF NOT EXISTS copal_records (oid bigint PRIMARY KEY, value bytea NOT NULL); \
         CREATE TABLE IF NOT EXISTS copal_descriptors (id bigint PRIMARY KEY, value bytea NOT NULL); \
         CREATE TABLE IF NOT EXISTS copal_log (tid bigint PRIMARY KEY, oids bytea NOT NULL); \
         CREATE TABLE IF NOT EXISTS copal_index_defs (id bigint PRIMARY KEY, value bytea NOT NULL); \
         CREATE TABLE IF NOT EXISTS copal_index_entries (key bytea PRIMARY KEY); \
         CREATE TABLE IF NOT EXISTS copal_settings (key bytea PRIMARY KEY, value bytea NOT NULL); \
         INSERT INTO copal_meta (key, value) VALUES ({}, 0); \
         INSERT INTO copal_descriptors (id, value) VALUES ({}, {}); \
         INSERT INTO copal_records (oid, value) VALUES ({}, {}); ",
        bytea_literal(META_TID),
        ROOT_DESCRIPTOR,
        bytea_literal(&root.encode()),
        sql_oid(ROOT_OID),
        bytea_literal(&super::checksum::seal(&encode_root_record(0))),
    )
}

/// Version 2: a history of the migrations, for operators (who upgraded, when, with what): a row
/// per version applied since the table exists. `copal_meta.format` stays the version that counts.
fn create_history() -> String {
    "CREATE TABLE copal_schema_history (version bigint PRIMARY KEY, applied_at timestamptz NOT NULL, \
     copal_version text NOT NULL); "
        .to_owned()
}

/// The tables of the current schema version: a database at that version lacking one is
/// damaged (`check_tables`).
const TABLES: [&str; 8] = [
    "copal_meta",
    "copal_records",
    "copal_descriptors",
    "copal_log",
    "copal_index_defs",
    "copal_index_entries",
    "copal_settings",
    "copal_schema_history",
];

/// Refuses a database at the current schema version that lacks some of its tables
/// (`StoreError::Damaged`, naming them): open and verify check it, since every later statement
/// on a missing table would fail with PostgreSQL's own error.
pub(crate) fn check_tables(client: &mut Client, location: &str) -> Result<(), StoreError> {
    let names: Vec<&str> = TABLES.to_vec();
    let rows = client.query_typed(
        "SELECT name FROM unnest($1::text[]) AS name WHERE to_regclass(name) IS NULL",
        &[(&names, postgres::types::Type::TEXT_ARRAY)],
    )?;
    let missing = rows.iter().map(|row| column(row, 0, "unnest")).collect::<Result<Vec<String>, StoreError>>()?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(StoreError::Damaged { message: format!("{location} has copal's tables but lacks {}", missing.join(", ")) })
}

/// The copal tables in the current schema, sorted (one column, the table name).
const COPAL_TABLES: &str = "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() \
     AND tablename LIKE 'copal\\_%' ORDER BY tablename";

/// Locks the `format` and `tid` rows of `copal_meta` until the transaction ends; rows: (is the
/// format row, value). Every commit starts with it, so that commits are serialized (as LMDB's
/// write lock does) and wait for, then see, a schema upgrade; an upgrade too, so that two of
/// them run one after the other (the second finds the work done). Sorted, because rows are
/// locked in the order the statement returns them, and updates move the tid row around the
/// table: two transactions taking the two rows in opposite orders deadlock (PostgreSQL then
/// aborts one of them).
pub(crate) const LOCK_META: &str = "SELECT key = 'format'::bytea, value FROM copal_meta \
     WHERE key IN ('format'::bytea, 'tid'::bytea) ORDER BY key FOR UPDATE";

/// The schema version (None: no row) and the last tid (0: no row) in the rows of `LOCK_META`.
pub(crate) fn locked_meta(rows: &[SimpleQueryRow]) -> Result<(Option<i64>, u64), StoreError> {
    let (mut version, mut last_tid) = (None, 0);
    for row in rows {
        match row.get(0) {
            Some("t") => version = Some(parse_text_column::<i64>(row, 1)?),
            _ => last_tid = parse_text_column::<i64>(row, 1)? as u64,
        }
    }
    Ok((version, last_tid))
}

/// What the caller of `prepare` wants.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Goal {
    /// Open or init: create the tables in a database without them; refuse an older version.
    Create,
    /// Migrate an older version to the current one; refuse a database without copal tables.
    Upgrade,
}

/// Brings the schema of the database `client` is connected to to the current version as `goal`
/// allows, and says what it did; `location` names the database in messages. Two processes
/// creating the tables of a new database at once may both run `CREATE TABLE`, which PostgreSQL
/// does not serialize; the loser fails and retries, then finds the tables.
pub(crate) fn prepare(client: &mut Client, location: &str, goal: Goal) -> Result<MigrationReport, StoreError> {
    let mut attempts = 0;
    loop {
        let result = try_prepare(client, location, goal);
        if result.is_err() && !client.is_closed() {
            // A failed statement leaves its transaction open and aborted (nothing of it stays);
            // outside a transaction ROLLBACK only warns.
            let _ = client.batch_execute("ROLLBACK");
        }
        match result {
            Err(StoreError::Storage { .. }) if attempts < 3 && !client.is_closed() => attempts += 1,
            other => return other,
        }
    }
}

fn try_prepare(client: &mut Client, location: &str, goal: Goal) -> Result<MigrationReport, StoreError> {
    // The usual case, an open of a current database, takes no lock and writes nothing.
    let mut from = stored_version(client, location)?;
    check_version(from, location, goal)?;
    // A new database is created in one round trip: the whole migration in one transaction.
    let mut begin = "BEGIN; ";
    if from > 0 && from < SCHEMA_VERSION {
        // Another upgrade may have finished (or be running) since: read again under the lock.
        let rows = simple_rows(client, &format!("BEGIN; {LOCK_META}"))?;
        from = locked_meta(&rows)?.0.unwrap_or(0);
        check_version(from, location, goal)?;
        begin = "";
    }
    let mut report = MigrationReport {
        location: location.to_owned(),
        from_version: from as u32,
        to_version: SCHEMA_VERSION as u32,
        ..MigrationReport::default()
    };
    if from == SCHEMA_VERSION {
        if begin.is_empty() {
            client.batch_execute("ROLLBACK")?;
        }
        return Ok(report);
    }
    let steps = &MIGRATIONS[from as usize..];
    let mut sql = format!("{begin}{COPAL_TABLES}; ");
    for step in steps {
        sql.push_str(&(step.sql)());
        report.steps.push(step.summary.to_owned());
    }
    if from == 0 {
        // A new database records the anchor of every object `add` stores from the start.
        sql.push_str(&format!("INSERT INTO copal_settings (key, value) VALUES ({}, ''::bytea); ", bytea_literal(ANCHORS_RECORDED)));
    }
    sql.push_str(&format!(
        "INSERT INTO copal_meta (key, value) VALUES ({}, {SCHEMA_VERSION}) \
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value; \
         INSERT INTO copal_schema_history (version, applied_at, copal_version) \
         SELECT version, now(), '{}' FROM generate_series({}, {SCHEMA_VERSION}) AS version; \
         {COPAL_TABLES}; COMMIT",
        bytea_literal(META_FORMAT),
        env!("CARGO_PKG_VERSION"),
        from + 1,
    ));
    let results = simple_results(client, &sql)?;
    // One result per statement: the first and the last SELECT of the tables are the ones of
    // COPAL_TABLES (BEGIN, if sent, comes first; COMMIT last).
    let table_names = |rows: &Vec<SimpleQueryRow>| -> Vec<String> {
        rows.iter().filter_map(|row| row.get(0).map(str::to_owned)).collect()
    };
    let before = table_names(&results[usize::from(!begin.is_empty())]);
    let after = table_names(&results[results.len() - 2]);
    report.created = after.into_iter().filter(|table| !before.contains(table)).collect();
    Ok(report)
}

/// The schema version stored in the database (0: no copal tables), read without a lock.
fn stored_version(client: &mut Client, location: &str) -> Result<i64, StoreError> {
    let row = client.query_typed_one("SELECT to_regclass('copal_meta') IS NOT NULL, to_regclass('copal_records') IS NOT NULL", &[])?;
    let (meta, records): (bool, bool) = (column(&row, 0, "pg_class")?, column(&row, 1, "pg_class")?);
    if !meta && records {
        // Creating the tables again would fail on the rows they hold, or hide them.
        return Err(StoreError::Damaged {
            message: format!("{location} holds copal_records but no copal_meta (the schema version and the last tid)"),
        });
    }
    if !meta {
        return Ok(0);
    }
    let rows = client.query_typed("SELECT value FROM copal_meta WHERE key = $1", &[(&META_FORMAT, postgres::types::Type::BYTEA)])?;
    Ok(rows.first().map(|row| column(row, 0, "copal_meta")).transpose()?.unwrap_or(0))
}

fn check_version(version: i64, location: &str, goal: Goal) -> Result<(), StoreError> {
    // The same kind as the embedded store's refusal of another store format.
    let refuse = |message: String| Err(StoreError::Incompatible { message });
    if version > SCHEMA_VERSION {
        return refuse(format!(
            "the copal tables in {location} have schema version {version}, newer than this copal knows \
             (up to {SCHEMA_VERSION}): use the copal release that upgraded them, or a later one"
        ));
    }
    match goal {
        Goal::Create if version > 0 && version < SCHEMA_VERSION => refuse(format!(
            "the copal tables in {location} have schema version {version}; this copal uses version \
             {SCHEMA_VERSION}: stop the programs using the database and run `copal upgrade {location}` \
             (copal.upgrade) to migrate them"
        )),
        Goal::Upgrade if version == 0 => refuse(format!(
            "{location} has no copal tables to upgrade: `copal init {location}` (copal.init) creates them"
        )),
        _ => Ok(()),
    }
}

/// Checks at the start of every commit that the schema is still the one this process opened:
/// an upgrade by a newer copal while this process runs must not be written over with the old
/// layout. `version` is the value read with the commit lock.
pub(crate) fn check_unchanged(version: Option<i64>, location: &str) -> Result<(), StoreError> {
    match version {
        Some(SCHEMA_VERSION) => Ok(()),
        other => Err(StoreError::Incompatible {
            message: format!(
                "the copal tables in {location} were changed to schema version {} while this program ran \
                 (it uses version {SCHEMA_VERSION}); nothing of this transaction was written: restart it with \
                 the copal that upgraded them",
                other.map_or_else(|| "none".to_owned(), |v| v.to_string())
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_goal_refuses_what_it_cannot_handle() {
        let message = |version, goal| check_version(version, "postgresql://h/db", goal).unwrap_err().to_string();
        assert!(check_version(0, "db", Goal::Create).is_ok());
        assert!(check_version(SCHEMA_VERSION, "db", Goal::Create).is_ok());
        assert!(check_version(1, "db", Goal::Upgrade).is_ok());
        assert!(message(1, Goal::Create).contains("copal upgrade postgresql://h/db"));
        assert!(message(0, Goal::Upgrade).contains("copal init postgresql://h/db"));
        for goal in [Goal::Create, Goal::Upgrade] {
            assert!(message(SCHEMA_VERSION + 1, goal).contains("newer than this copal knows"));
        }
    }
}
