//! The versions of copal's tables in a PostgreSQL database and the steps between them.
//!
//! `copal_meta.format` holds the version. `MIGRATIONS[i]` takes a database from version `i` to
//! `i + 1` (version 0: no copal tables), so a new database runs every step in order and an older
//! one the steps it lacks: both end with the same tables, built by the same DDL. A released step
//! is never edited; a change of the tables is a new step at the end. The steps of one init or
//! upgrade run in one transaction (PostgreSQL's DDL is transactional), so a failure leaves the
//! database at the version it had.

use postgres::{Client, Transaction};

use super::error::StoreError;
use super::{MigrationReport, META_TID};
use crate::format::{encode_root_record, Descriptor, ROOT_CLASS, ROOT_DESCRIPTOR, ROOT_OID, ROOT_TYPE_NAME};

/// One step from a schema version to the next.
struct Migration {
    /// What the step does, as `copal init` and `copal upgrade` report it.
    summary: &'static str,
    apply: fn(&mut Transaction<'_>) -> Result<(), postgres::Error>,
}

const MIGRATIONS: &[Migration] = &[
    Migration { summary: "created copal's tables and the empty root", apply: create_tables },
    Migration {
        summary: "created copal_schema_history (which copal applied each later schema version, and when)",
        apply: create_history,
    },
];

/// The schema version this code reads and writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The `copal_meta` key of the schema version.
pub(crate) const META_FORMAT: &[u8] = b"format";

/// Version 1: the tables as the first release of the PostgreSQL store created them.
fn create_tables(tx: &mut Transaction<'_>) -> Result<(), postgres::Error> {
    // IF NOT EXISTS: before schema versions were checked this carefully, a database whose first
    // open failed half-way could hold some of the tables.
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS copal_meta (key bytea PRIMARY KEY, value bigint NOT NULL);
         CREATE TABLE IF NOT EXISTS copal_records (oid bigint PRIMARY KEY, value bytea NOT NULL);
         CREATE TABLE IF NOT EXISTS copal_descriptors (id bigint PRIMARY KEY, value bytea NOT NULL);
         CREATE TABLE IF NOT EXISTS copal_log (tid bigint PRIMARY KEY, oids bytea NOT NULL);
         CREATE TABLE IF NOT EXISTS copal_index_defs (id bigint PRIMARY KEY, value bytea NOT NULL);
         CREATE TABLE IF NOT EXISTS copal_index_entries (key bytea PRIMARY KEY);
         CREATE TABLE IF NOT EXISTS copal_settings (key bytea PRIMARY KEY, value bytea NOT NULL);",
    )?;
    let root = Descriptor {
        id: ROOT_DESCRIPTOR,
        class_no: ROOT_CLASS,
        type_name: ROOT_TYPE_NAME.to_owned(),
        fields: vec!["data".to_owned()],
    };
    tx.execute("INSERT INTO copal_meta (key, value) VALUES ($1, 0)", &[&META_TID])?;
    tx.execute(
        "INSERT INTO copal_descriptors (id, value) VALUES ($1, $2)",
        &[&i64::from(ROOT_DESCRIPTOR), &root.encode()],
    )?;
    tx.execute(
        "INSERT INTO copal_records (oid, value) VALUES ($1, $2)",
        &[&super::postgres::sql_oid(ROOT_OID), &super::checksum::seal(&encode_root_record(0))],
    )?;
    Ok(())
}

/// Version 2: a history of the migrations, for operators (who upgraded, when, with what): a row
/// per version applied since the table exists. `copal_meta.format` stays the version that counts.
fn create_history(tx: &mut Transaction<'_>) -> Result<(), postgres::Error> {
    tx.batch_execute(
        "CREATE TABLE copal_schema_history (version bigint PRIMARY KEY, applied_at timestamptz NOT NULL, \
         copal_version text NOT NULL)",
    )
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
        match try_prepare(client, location, goal) {
            Err(StoreError::Storage { .. }) if attempts < 3 && !client.is_closed() => attempts += 1,
            other => return other,
        }
    }
}

fn try_prepare(client: &mut Client, location: &str, goal: Goal) -> Result<MigrationReport, StoreError> {
    // Dropping the transaction without commit rolls it back.
    let mut tx = client.transaction()?;
    // The usual case, an open of a current database, takes no lock and writes nothing.
    let mut from = stored_version(&mut tx, false)?;
    check_version(from, location, goal)?;
    if from > 0 && from < SCHEMA_VERSION {
        // Another upgrade may have finished (or be running) since: read again under the lock.
        from = stored_version(&mut tx, true)?;
        check_version(from, location, goal)?;
    }
    let mut report = MigrationReport {
        location: location.to_owned(),
        from_version: from as u32,
        to_version: SCHEMA_VERSION as u32,
        ..MigrationReport::default()
    };
    if from == SCHEMA_VERSION {
        return Ok(report);
    }
    let tables_before = copal_tables(&mut tx)?;
    for step in &MIGRATIONS[from as usize..] {
        (step.apply)(&mut tx)?;
        report.steps.push(step.summary.to_owned());
    }
    tx.execute(
        "INSERT INTO copal_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        &[&META_FORMAT, &SCHEMA_VERSION],
    )?;
    tx.execute(
        "INSERT INTO copal_schema_history (version, applied_at, copal_version) \
         SELECT version, now(), $3::text FROM generate_series($1::bigint, $2::bigint) AS version",
        &[&(from + 1), &SCHEMA_VERSION, &env!("CARGO_PKG_VERSION")],
    )?;
    report.created = copal_tables(&mut tx)?.into_iter().filter(|table| !tables_before.contains(table)).collect();
    tx.commit()?;
    Ok(report)
}

/// The schema version stored in the database (0: no copal tables). With `lock`, the version
/// and tid rows stay locked until the transaction ends: two upgrades run one after the other
/// (the second finds the work done), and commits wait until the upgrade is over.
fn stored_version(tx: &mut Transaction<'_>, lock: bool) -> Result<i64, StoreError> {
    let exists: bool = tx.query_one("SELECT to_regclass('copal_meta') IS NOT NULL", &[])?.get(0);
    if !exists {
        return Ok(0);
    }
    let rows = if lock {
        tx.query("SELECT key, value FROM copal_meta WHERE key = $1 OR key = $2 ORDER BY key FOR UPDATE", &[&META_FORMAT, &META_TID])?
    } else {
        tx.query("SELECT key, value FROM copal_meta WHERE key = $1", &[&META_FORMAT])?
    };
    let version = rows.iter().find(|row| row.get::<_, &[u8]>(0) == META_FORMAT);
    Ok(version.map_or(0, |row| row.get(1)))
}

fn check_version(version: i64, location: &str, goal: Goal) -> Result<(), StoreError> {
    let refuse = |message: String| Err(StoreError::Storage { message });
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

/// The names of the copal tables in the current schema, sorted.
fn copal_tables(tx: &mut Transaction<'_>) -> Result<Vec<String>, postgres::Error> {
    let rows = tx.query(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'copal\\_%' \
         ORDER BY tablename",
        &[],
    )?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Checks at the start of every commit that the schema is still the one this process opened:
/// an upgrade by a newer copal while this process runs must not be written over with the old
/// layout. `version` is the value read with the commit lock.
pub(crate) fn check_unchanged(version: Option<i64>, location: &str) -> Result<(), StoreError> {
    match version {
        Some(SCHEMA_VERSION) => Ok(()),
        other => Err(StoreError::Storage {
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
