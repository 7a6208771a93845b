//! The PostgreSQL backend: many processes on many machines share one database. Plain SQL only
//! (no advisory locks, no LISTEN/NOTIFY), so that PostgreSQL-compatible engines can follow.
//!
//! | table                 | columns                           | as LMDB's                      |
//! |-----------------------|-----------------------------------|--------------------------------|
//! | `copal_records`       | oid bigint PK, value bytea        | `records` (record + checksum)  |
//! | `copal_descriptors`   | id bigint PK, value bytea         | `descriptors`                  |
//! | `copal_log`           | tid bigint PK, oids bytea         | `log`                          |
//! | `copal_meta`          | key bytea PK, value bigint        | `meta`                         |
//! | `copal_index_defs`    | id bigint PK, value bytea         | `index_defs`                   |
//! | `copal_index_entries` | key bytea PK                      | `index_entries`                |
//! | `copal_settings`      | key bytea PK, value bytea         | settings in `meta`             |
//! | `copal_schema_history`| version bigint PK, applied_at, copal_version | (none)              |
//!
//! The tables are created and migrated between schema versions by `pg_schema.rs`.
//!
//! Oids are unsigned; they are stored as `oid XOR 2^63` so that bigint order is oid order (class
//! extents stay contiguous key ranges). `bytea` compares as bytes, like LMDB keys.
//!
//! Snapshots are REPEATABLE READ READ ONLY transactions; their first statement (reading the last
//! tid) fixes the snapshot. Commits run at READ COMMITTED and start with `SELECT ... FOR UPDATE`
//! of the `tid` (and `format`) rows of `copal_meta`: that lock serializes commits as LMDB's write
//! lock does, and every later statement of the commit sees everything committed before it.
//! Record and index entry writes are buffered and sent as one multi-row statement per table
//! (before any range read of the commit, and at its end).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use postgres::types::ToSql;
use postgres::types::Type;
use postgres::error::SqlState;
use postgres::{Client, Row, SimpleQueryMessage, SimpleQueryRow, Statement};

use super::error::StoreError;
use super::pg_columns::column;
use super::pg_pool::{Pool, PoolLimits, Slot};
use super::pg_schema::{self, Goal};
use super::{Backend, DescriptorTable, IdVisitor, MigrationReport, SettingVisitor, Store};
pub(crate) use super::pg_write::{bytea_literal, PgWrite};
use crate::format::Oid;

/// Wanted ids at most this far apart are read as one key range by `records_near`: the few rows
/// between them that nobody asked for cost less than another range's index descent.
const RANGE_GAP: u64 = 4;

/// Rows read per statement by range scans: a scan that stops early reads at most this many rows
/// too many, and a long scan costs one round trip per page.
const PAGE: i64 = 1000;

/// Begins a snapshot and reads the last tid, in one round trip (simple-query statements sent
/// together); the first statement after BEGIN fixes the snapshot.
const BEGIN_SNAPSHOT: &str =
    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT value FROM copal_meta WHERE key = 'tid'::bytea";

/// Runs `sql`, one or more statements, in one round trip (the simple-query protocol: values
/// come as text), and returns the rows of each statement (none for those that return none).
pub(crate) fn simple_results(client: &mut Client, sql: &str) -> Result<Vec<Vec<SimpleQueryRow>>, StoreError> {
    let (mut results, mut rows) = (Vec::new(), Vec::new());
    for message in client.simple_query(sql)? {
        match message {
            SimpleQueryMessage::Row(row) => rows.push(row),
            SimpleQueryMessage::CommandComplete(_) => results.push(std::mem::take(&mut rows)),
            _ => {}
        }
    }
    Ok(results)
}

/// The rows of the last statement of `sql` (see `simple_results`).
pub(crate) fn simple_rows(client: &mut Client, sql: &str) -> Result<Vec<SimpleQueryRow>, StoreError> {
    Ok(simple_results(client, sql)?.pop().unwrap_or_default())
}

pub(super) fn unexpected_reply() -> StoreError {
    StoreError::Storage { message: "PostgreSQL: the server's reply has fewer results than statements sent".to_owned() }
}

/// Column `i` of a simple-query row, parsed from its text.
pub(crate) fn parse_text_column<T: std::str::FromStr>(row: &SimpleQueryRow, i: usize) -> Result<T, StoreError> {
    row.get(i).and_then(|text| text.parse().ok()).ok_or_else(|| StoreError::Storage {
        message: format!("PostgreSQL: unexpected value {:?} in column {i} of a reply", row.get(i)),
    })
}

/// `(id, bytes)` rows of the descriptors or index definitions table.
pub(super) type IdRows = Vec<(u32, Vec<u8>)>;

/// Reads the index definitions as text (`encode(value, 'hex')`), to go in a begin's batch.
pub(super) const INDEX_DEFS_AS_TEXT: &str = "SELECT id, encode(value, 'hex') FROM copal_index_defs ORDER BY id";

/// The `(id, hex value)` rows of a simple query, decoded.
pub(super) fn id_rows(rows: &[SimpleQueryRow]) -> Result<IdRows, StoreError> {
    rows.iter().map(|row| Ok((parse_text_column::<u32>(row, 0)?, hex_column(row, 1)?))).collect()
}

/// Column `i` of a simple-query row, an `encode(..., 'hex')`, as bytes.
pub(super) fn hex_column(row: &SimpleQueryRow, i: usize) -> Result<Vec<u8>, StoreError> {
    hex_bytes(row.get(i).unwrap_or_default()).ok_or_else(|| StoreError::Storage {
        message: format!("PostgreSQL: column {i} of a reply is not hexadecimal"),
    })
}

/// The bytes spelled by hexadecimal `text`; None if it is not.
fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
    let pairs = text.as_bytes().chunks(2);
    pairs
        .map(|pair| match pair {
            [high, low] => Some(digit(*high)? << 4 | digit(*low)?),
            _ => None,
        })
        .collect()
}

pub(super) fn visit_ids(rows: &IdRows, after: u32, visit: IdVisitor<'_>) -> Result<(), StoreError> {
    rows.iter().filter(|(id, _)| *id > after).try_for_each(|(id, value)| visit(*id, value))
}

/// Whether `location` names a PostgreSQL database rather than a directory.
pub(crate) fn is_url(location: &str) -> bool {
    location.starts_with("postgresql://") || location.starts_with("postgres://")
}

pub(crate) fn sql_oid(oid: Oid) -> i64 {
    (oid ^ (1 << 63)) as i64
}

pub(super) fn from_sql_oid(value: i64) -> Oid {
    (value as u64) ^ (1 << 63)
}

/// Visits `(id, value)` rows of the descriptors or index definitions table.
pub(super) fn visit_id_rows(rows: &[Row], table: &str, visit: IdVisitor<'_>) -> Result<(), StoreError> {
    rows.iter().try_for_each(|row| visit(column::<i64>(row, 0, table)? as u32, column(row, 1, table)?))
}

fn values<'a>(params: &Params<'a>) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|(value, _)| *value).collect()
}

impl From<postgres::Error> for StoreError {
    fn from(error: postgres::Error) -> Self {
        let message = match error.as_db_error() {
            Some(db) => format!("PostgreSQL: {} (SQLSTATE {})", db.message(), db.code().code()),
            None if error.is_closed() => {
                "PostgreSQL: the connection to the server was lost; the next transaction reconnects".to_owned()
            }
            // The client's message names the kind of failure; its source says what happened
            // ("Connection refused", "certificate verify failed").
            None => match std::error::Error::source(&error) {
                Some(cause) => format!("PostgreSQL: {error}: {cause}"),
                None => format!("PostgreSQL: {error}"),
            },
        };
        StoreError::Storage { message }
    }
}

/// A statement's parameters with their types: with the types a statement can run unprepared
/// (`query_typed`: parse, bind and execute in one round trip).
type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// One server connection with the statements it has run.
pub(super) struct Conn {
    pub(super) client: Client,
    /// The statements run on this connection: None after their first run, which is unprepared
    /// (one round trip, where prepare + execute is two: most statements of a short-lived
    /// connection run once); prepared on their second run, which costs the prepare's round trip
    /// once and then spares the server parsing and planning them on every later run.
    pub(super) statements: HashMap<&'static str, Option<Statement>>,
    /// The pool's count of this connection (`max_connections`), given back when it is dropped.
    pub(super) _slot: Slot,
}

impl Conn {
    /// The prepared statement of `sql`, preparing it on its second run; None on its first.
    fn prepared(&mut self, sql: &'static str, params: &Params<'_>) -> Result<Option<Statement>, StoreError> {
        match self.statements.get_mut(sql) {
            None => {
                self.statements.insert(sql, None);
                Ok(None)
            }
            Some(Some(statement)) => Ok(Some(statement.clone())),
            Some(slot @ None) => {
                let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
                let statement = self.client.prepare_typed(sql, &types)?;
                *slot = Some(statement.clone());
                Ok(Some(statement))
            }
        }
    }

    pub(super) fn query(&mut self, sql: &'static str, params: &Params<'_>) -> Result<Vec<Row>, StoreError> {
        Ok(match self.prepared(sql, params)? {
            Some(statement) => self.client.query(&statement, &values(params))?,
            None => self.client.query_typed(sql, params)?,
        })
    }

    pub(super) fn execute(&mut self, sql: &'static str, params: &Params<'_>) -> Result<u64, StoreError> {
        Ok(match self.prepared(sql, params)? {
            Some(statement) => self.client.execute(&statement, &values(params))?,
            None => self.client.execute_typed(sql, params)?,
        })
    }

    pub(super) fn meta_u64(&mut self, key: &[u8]) -> Result<Option<u64>, StoreError> {
        let rows = self.query("SELECT value FROM copal_meta WHERE key = $1", &[(&key, Type::BYTEA)])?;
        rows.first().map(|row| Ok(column::<i64>(row, 0, "copal_meta")? as u64)).transpose()
    }

    /// The first tid the commit log still holds (None: the log is empty).
    pub(super) fn first_logged(&mut self) -> Result<Option<u64>, StoreError> {
        let rows = self.query("SELECT min(tid) FROM copal_log", &[])?;
        Ok(rows.first().map(|row| column::<Option<i64>>(row, 0, "copal_log")).transpose()?.flatten().map(|tid| tid as u64))
    }

    /// Calls `visit(tid, log entry)` for the tids `from..=to`.
    pub(super) fn log_entries(
        &mut self,
        from: u64,
        to: u64,
        mut visit: impl FnMut(u64, &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let (from, to) = (from as i64, to as i64);
        let rows =
            self.query("SELECT tid, oids FROM copal_log WHERE tid >= $1 AND tid <= $2 ORDER BY tid", &[(&from, Type::INT8), (&to, Type::INT8)])?;
        rows.iter().try_for_each(|row| visit(column::<i64>(row, 0, "copal_log")? as u64, column(row, 1, "copal_log")?))
    }

    /// Calls `visit(key, value)` for the settings whose key starts with `prefix`.
    fn settings(&mut self, prefix: &[u8], visit: SettingVisitor<'_>) -> Result<(), StoreError> {
        let rows = match super::prefix_end(prefix) {
            Some(end) => self.query(
                "SELECT key, value FROM copal_settings WHERE key >= $1 AND key < $2 ORDER BY key",
                &[(&prefix, Type::BYTEA), (&end, Type::BYTEA)],
            )?,
            None => self.query("SELECT key, value FROM copal_settings WHERE key >= $1 ORDER BY key", &[(&prefix, Type::BYTEA)])?,
        };
        for row in rows {
            visit(column(&row, 0, "copal_settings")?, column(&row, 1, "copal_settings")?)?;
        }
        Ok(())
    }

    pub(super) fn get(&mut self, oid: Oid) -> Result<Option<Vec<u8>>, StoreError> {
        let rows = self.query("SELECT value FROM copal_records WHERE oid = $1", &[(&sql_oid(oid), Type::INT8)])?;
        rows.first().map(|row| column(row, 0, "copal_records")).transpose()
    }

    /// The records of `oids` (in any order), and perhaps some between them, in one round trip.
    /// They are read as key ranges, each run of nearby ids one range: `oid = ANY(list)` costs a
    /// B-tree descent and a recheck per id, and for the 4,096 mostly consecutive ids of a
    /// `load_closure` batch took ten times as long on the server as their ranges.
    pub(super) fn records_near(&mut self, oids: &[Oid]) -> Result<Vec<Row>, StoreError> {
        let mut sorted = oids.to_vec();
        sorted.sort_unstable();
        let (mut starts, mut ends) = (Vec::new(), Vec::<Oid>::new());
        for oid in sorted {
            match ends.last_mut() {
                Some(end) if oid - *end <= RANGE_GAP => *end = oid,
                _ => {
                    starts.push(oid);
                    ends.push(oid);
                }
            }
        }
        let starts: Vec<i64> = starts.into_iter().map(sql_oid).collect();
        let ends: Vec<i64> = ends.into_iter().map(sql_oid).collect();
        self.query(
            "SELECT r.oid, r.value FROM unnest($1::bigint[], $2::bigint[]) AS k (lo, hi) \
             JOIN copal_records r ON r.oid >= k.lo AND r.oid <= k.hi",
            &[(&starts, Type::INT8_ARRAY), (&ends, Type::INT8_ARRAY)],
        )
    }

    pub(super) fn descriptors_after(&mut self, known: u32) -> Result<Vec<Row>, StoreError> {
        self.query("SELECT id, value FROM copal_descriptors WHERE id > $1 ORDER BY id", &[(&i64::from(known), Type::INT8)])
    }

    /// A page of the records with `from <= oid <= last`, in oid order.
    pub(super) fn records_page(&mut self, from: Oid, last: Oid) -> Result<Vec<Row>, StoreError> {
        self.query(
            "SELECT oid, value FROM copal_records WHERE oid >= $1 AND oid <= $2 ORDER BY oid LIMIT $3",
            &[(&sql_oid(from), Type::INT8), (&sql_oid(last), Type::INT8), (&PAGE, Type::INT8)],
        )
    }

    /// A page of the index entries in `[lo, hi)` (no hi: to the last entry), in key order or
    /// reversed.
    pub(super) fn entries_page(&mut self, lo: &[u8], hi: Option<&[u8]>, descending: bool) -> Result<Vec<Row>, StoreError> {
        match (hi, descending) {
            (Some(hi), false) => self.query(
                "SELECT key FROM copal_index_entries WHERE key >= $1 AND key < $2 ORDER BY key LIMIT $3",
                &[(&lo, Type::BYTEA), (&hi, Type::BYTEA), (&PAGE, Type::INT8)],
            ),
            (None, false) => {
                self.query("SELECT key FROM copal_index_entries WHERE key >= $1 ORDER BY key LIMIT $2", &[(&lo, Type::BYTEA), (&PAGE, Type::INT8)])
            }
            (Some(hi), true) => self.query(
                "SELECT key FROM copal_index_entries WHERE key >= $1 AND key < $2 ORDER BY key DESC LIMIT $3",
                &[(&lo, Type::BYTEA), (&hi, Type::BYTEA), (&PAGE, Type::INT8)],
            ),
            (None, true) => self.query(
                "SELECT key FROM copal_index_entries WHERE key >= $1 ORDER BY key DESC LIMIT $2",
                &[(&lo, Type::BYTEA), (&PAGE, Type::INT8)],
            ),
        }
    }
}

/// Calls `visit(oid, stored value)` for the records with `first <= oid < end` (no end: to the
/// last record), in oid order, until it returns false. Pages come from `fetch(from, last)`, one
/// round trip each; the visitor runs between fetches, with the connection free (query
/// evaluation reads referenced records while it scans).
pub(super) fn scan_records(
    first: Oid,
    end: Option<Oid>,
    mut fetch: impl FnMut(Oid, Oid) -> Result<Vec<Row>, StoreError>,
    mut visit: impl FnMut(Oid, &[u8]) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    let last = match end {
        Some(0) => return Ok(()),
        Some(end) => end - 1,
        None => u64::MAX,
    };
    let mut from = first;
    loop {
        let rows = fetch(from, last)?;
        for row in &rows {
            let oid = from_sql_oid(column(row, 0, "copal_records")?);
            if !visit(oid, column(row, 1, "copal_records")?)? {
                return Ok(());
            }
            from = oid;
        }
        if (rows.len() as i64) < PAGE || from == last {
            return Ok(());
        }
        from += 1;
    }
}

/// Calls `visit(entry key)` for the index entries in `[lo, hi)` (no hi: to the last entry), in
/// key order or reversed, until it returns false; pages as `scan_records`.
pub(super) fn scan_entries(
    lo: &[u8],
    hi: Option<&[u8]>,
    descending: bool,
    mut fetch: impl FnMut(&[u8], Option<&[u8]>, bool) -> Result<Vec<Row>, StoreError>,
    mut visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    let mut lo = lo.to_vec();
    let mut hi = hi.map(<[u8]>::to_vec);
    loop {
        let rows = fetch(&lo, hi.as_deref(), descending)?;
        for row in &rows {
            if !visit(column(row, 0, "copal_index_entries")?)? {
                return Ok(());
            }
        }
        let Some(last) = rows.last() else { return Ok(()) };
        if (rows.len() as i64) < PAGE {
            return Ok(());
        }
        let last: Vec<u8> = column(last, 0, "copal_index_entries")?;
        if descending {
            hi = Some(last);
        } else {
            // The smallest key after `last`.
            lo = last;
            lo.push(0);
        }
    }
}

pub(crate) struct PgBackend {
    pub(super) pool: Arc<Pool>,
    pub(super) location: String,
}

pub(crate) fn open(url: &str, durable: bool, limits: PoolLimits, log_retention: u64) -> Result<Arc<Store>, StoreError> {
    let location = without_password(url);
    let pool = Arc::new(Pool::new(url, durable, limits)?);
    let (conn, descriptors) = pool.start(None, |conn, _| {
        let descriptors = match descriptors_if_current(conn)? {
            Some(descriptors) => descriptors,
            None => {
                // A new database gets its tables here; an older or newer schema is refused.
                pg_schema::prepare(&mut conn.client, &location, Goal::Create)?;
                descriptors_if_current(conn)?.ok_or_else(|| StoreError::Storage {
                    message: format!("the copal tables in {location} changed while they were opened: open them again"),
                })?
            }
        };
        pg_schema::check_tables(&mut conn.client, &location)?;
        Ok(descriptors)
    })?;
    pool.give_back(conn, false);
    let store = Store::without_catalog(Backend::Postgres(PgBackend { pool, location }), log_retention);
    store.refresh_catalog(&DescriptorRows(descriptors))?;
    Ok(Arc::new(store))
}

/// The schema version and every descriptor, in one statement (one round trip, where checking
/// the version and reading the catalog took several): rows (version, descriptor id, descriptor).
const VERSION_AND_DESCRIPTORS: &str = "SELECT m.value, d.id, d.value FROM copal_meta m \
     LEFT JOIN copal_descriptors d ON true WHERE m.key = 'format'::bytea ORDER BY d.id";

/// The descriptor rows of `VERSION_AND_DESCRIPTORS` if the database has the current schema;
/// None if it has another version or no copal tables (then `pg_schema::prepare` decides).
fn descriptors_if_current(conn: &mut Conn) -> Result<Option<Vec<Row>>, StoreError> {
    let rows = match conn.client.query_typed(VERSION_AND_DESCRIPTORS, &[]) {
        Ok(rows) => rows,
        Err(error) if error.code() == Some(&SqlState::UNDEFINED_TABLE) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let current = match rows.first() {
        Some(row) => column::<i64>(row, 0, "copal_meta")? == pg_schema::SCHEMA_VERSION,
        None => false,
    };
    Ok(current.then_some(rows))
}

/// The descriptors read by `descriptors_if_current`, for the store's first catalog.
struct DescriptorRows(Vec<Row>);

impl DescriptorTable for DescriptorRows {
    fn descriptors_after(&self, known: u32, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        for row in &self.0 {
            if let Some(id) = column::<Option<i64>>(row, 1, "copal_descriptors")?.filter(|&id| id > i64::from(known)) {
                visit(id as u32, column(row, 2, "copal_descriptors")?)?;
            }
        }
        Ok(())
    }
}

/// Creates (`Goal::Create`) or upgrades the copal tables of the database at `url` without
/// opening a store on it.
pub(crate) fn migrate(url: &str, goal: Goal) -> Result<MigrationReport, StoreError> {
    let pool = Pool::new(url, true, PoolLimits::default())?;
    pg_schema::prepare(&mut pool.connection()?.client, &without_password(url), goal)
}

/// The URL without its password, for messages and `repr`.
pub(crate) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split(':').next().unwrap_or("");
            format!("{scheme}://{user}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

impl PgBackend {
    pub(crate) fn location(&self) -> &str {
        &self.location
    }

    /// Refuses a database that lacks some of copal's tables (`pg_schema::check_tables`).
    pub(crate) fn check_tables(&self) -> Result<(), StoreError> {
        let (conn, ()) = self.pool.start(None, |conn, _| pg_schema::check_tables(&mut conn.client, &self.location))?;
        self.pool.give_back(conn, false);
        Ok(())
    }

    /// Bytes used by copal's tables (with their indexes and TOAST data).
    pub(crate) fn disk_size(&self) -> Result<u64, StoreError> {
        let (conn, size) = self.pool.start(None, |conn, _| {
            let row = conn.client.query_one(
                "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c \
                 WHERE c.relname LIKE 'copal\\_%' AND c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace",
                &[],
            )?;
            column::<Option<i64>>(&row, 0, "pg_class")
        })?;
        self.pool.give_back(conn, false);
        Ok(size.unwrap_or(0) as u64)
    }
}

/// A snapshot's REPEATABLE READ transaction on a connection of its own.
pub(crate) struct PgRead {
    conn: Mutex<Option<Conn>>,
    pool: Arc<Pool>,
    last_tid: u64,
    /// The index definitions, read with the snapshot's first statement (a query plans with
    /// them; they cannot change within the snapshot).
    index_defs: IdRows,
}

impl PgRead {
    pub(crate) fn begin(backend: &PgBackend) -> Result<PgRead, StoreError> {
        let (conn, (last_tid, index_defs)) = backend.pool.start(None, |conn, _| {
            let results = simple_results(&mut conn.client, &format!("{BEGIN_SNAPSHOT}; {INDEX_DEFS_AS_TEXT}"))?;
            let [_, tid, index_defs] = results.as_slice() else { return Err(unexpected_reply()) };
            let last_tid = match tid.first() {
                Some(row) => parse_text_column::<i64>(row, 0)? as u64,
                None => 0,
            };
            Ok((last_tid, id_rows(index_defs)?))
        })?;
        Ok(PgRead { conn: Mutex::new(Some(conn)), pool: Arc::clone(&backend.pool), last_tid, index_defs })
    }

    /// The snapshot's connection, still in the snapshot's transaction, for a commit to continue
    /// on (PgWrite::begin ends the transaction). None if the connection is gone.
    pub(super) fn into_conn(self) -> Option<Conn> {
        self.conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut guard = self.conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match guard.as_mut() {
            Some(conn) => f(conn),
            None => Err(StoreError::Storage { message: "PostgreSQL: the snapshot's connection is gone".to_owned() }),
        }
    }

    pub(crate) fn last_tid(&self) -> Result<u64, StoreError> {
        Ok(self.last_tid)
    }

    pub(crate) fn settings(&self, prefix: &[u8], visit: SettingVisitor<'_>) -> Result<(), StoreError> {
        self.with(|conn| conn.settings(prefix, visit))
    }

    pub(crate) fn meta_u64(&self, key: &[u8]) -> Result<Option<u64>, StoreError> {
        self.with(|conn| conn.meta_u64(key))
    }

    pub(crate) fn get(&self, oid: Oid) -> Result<Option<Cow<'_, [u8]>>, StoreError> {
        Ok(self.with(|conn| conn.get(oid))?.map(Cow::Owned))
    }

    /// Calls `visit(i, oid, stored value)` for each `oids[i]`, reading each batch of ids with one
    /// statement (one round trip), and `missing(oid)` for each id without a record (whose error
    /// ends the reads).
    pub(crate) fn get_many<E>(
        &self,
        oids: &[Oid],
        mut missing: impl FnMut(Oid) -> Result<(), E>,
        failed: impl Fn(StoreError) -> E,
        mut visit: impl FnMut(usize, Oid, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        // Bounds the statement's size; a batch of the binding is usually smaller.
        const BATCH: usize = 10_000;
        for (chunk_no, chunk) in oids.chunks(BATCH).enumerate() {
            let rows = self.with(|conn| conn.records_near(chunk)).map_err(&failed)?;
            let found = rows
                .iter()
                .map(|row| Ok((from_sql_oid(column(row, 0, "copal_records")?), column(row, 1, "copal_records")?)))
                .collect::<Result<HashMap<Oid, &[u8]>, StoreError>>()
                .map_err(&failed)?;
            for (i, &oid) in chunk.iter().enumerate() {
                match found.get(&oid) {
                    Some(value) => visit(chunk_no * BATCH + i, oid, value)?,
                    None => missing(oid)?,
                }
            }
        }
        Ok(())
    }

    pub(crate) fn scan_records(
        &self,
        first: Oid,
        end: Option<Oid>,
        visit: impl FnMut(Oid, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        scan_records(first, end, |from, last| self.with(|conn| conn.records_page(from, last)), visit)
    }

    /// How many records have ids in `[first, end)`, counted by the server (no row is sent).
    pub(crate) fn count_records(&self, first: Oid, end: Oid) -> Result<u64, StoreError> {
        let rows = self.with(|conn| {
            conn.query(
                "SELECT count(*) FROM copal_records WHERE oid >= $1 AND oid <= $2",
                &[(&sql_oid(first), Type::INT8), (&sql_oid(end - 1), Type::INT8)],
            )
        })?;
        Ok(rows.first().map(|row| column::<i64>(row, 0, "copal_records")).transpose()?.unwrap_or(0) as u64)
    }

    pub(crate) fn first_logged(&self) -> Result<Option<u64>, StoreError> {
        self.with(Conn::first_logged)
    }

    pub(crate) fn log_entries(&self, from: u64, to: u64, visit: impl FnMut(u64, &[u8]) -> Result<(), StoreError>) -> Result<(), StoreError> {
        self.with(|conn| conn.log_entries(from, to, visit))
    }

    pub(crate) fn index_defs(&self, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        visit_ids(&self.index_defs, 0, visit)
    }

    pub(crate) fn scan_entries(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        descending: bool,
        visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        scan_entries(lo, hi, descending, |lo, hi, desc| self.with(|conn| conn.entries_page(lo, hi, desc)), visit)
    }
}

impl DescriptorTable for PgRead {
    fn descriptors_after(&self, known: u32, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        visit_id_rows(&self.with(|conn| conn.descriptors_after(known))?, "copal_descriptors", visit)
    }
}

impl Drop for PgRead {
    fn drop(&mut self) {
        let conn = self.conn.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if let Some(conn) = conn {
            self.pool.give_back(conn, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::META_TID;

    #[test]
    fn sql_oids_keep_oid_order() {
        let oids = [0u64, 1, 1 << 48, (1 << 63) - 1, 1 << 63, u64::MAX];
        for pair in oids.windows(2) {
            assert!(sql_oid(pair[0]) < sql_oid(pair[1]));
        }
        assert!(oids.iter().all(|&oid| from_sql_oid(sql_oid(oid)) == oid));
    }

    #[test]
    fn bytea_literals_spell_every_byte_in_hex() {
        assert_eq!(bytea_literal(&[0x00, 0x0f, 0xa5, 0xff]), "decode('000fa5ff', 'hex')");
        assert_eq!(bytea_literal(b""), "decode('', 'hex')");
    }

    #[test]
    fn the_begin_statements_name_the_meta_keys_of_mod_rs() {
        for key in [META_TID, pg_schema::META_FORMAT] {
            let literal = format!("'{}'::bytea", std::str::from_utf8(key).unwrap());
            assert!(pg_schema::LOCK_META.contains(&literal), "{literal}");
        }
        assert!(BEGIN_SNAPSHOT.contains(&format!("'{}'::bytea", std::str::from_utf8(META_TID).unwrap())));
        assert!(VERSION_AND_DESCRIPTORS.contains(&format!("'{}'::bytea", std::str::from_utf8(pg_schema::META_FORMAT).unwrap())));
    }

    #[test]
    fn hex_text_decodes_to_its_bytes() {
        assert_eq!(hex_bytes("000fA5ff"), Some(vec![0x00, 0x0f, 0xa5, 0xff]));
        assert_eq!(hex_bytes(""), Some(vec![]));
        assert_eq!(hex_bytes("abc"), None);
        assert_eq!(hex_bytes("zz"), None);
        let bytes: Vec<u8> = (0..=255).collect();
        let literal = bytea_literal(&bytes);
        let hex = literal.trim_start_matches("decode('").trim_end_matches("', 'hex')");
        assert_eq!(hex_bytes(hex), Some(bytes));
    }

    #[test]
    fn passwords_stay_out_of_locations() {
        assert_eq!(without_password("postgresql://ann:secret@db:5432/app"), "postgresql://ann@db:5432/app");
        assert_eq!(without_password("postgres://db/app"), "postgres://db/app");
    }
}
