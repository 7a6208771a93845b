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
use std::cell::RefCell;
use std::io::Write;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use postgres::types::ToSql;
use postgres::types::Type;
use postgres::error::SqlState;
use postgres::{Client, Row, SimpleQueryMessage, SimpleQueryRow, Statement};

use super::error::StoreError;
use super::pg_columns::column;
use super::pg_pool::{Pool, PoolLimits, Slot};
use super::pg_schema::{self, Goal};
use super::{Backend, DescriptorTable, IdVisitor, MigrationReport, SettingVisitor, Store, META_TID};
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

fn unexpected_reply() -> StoreError {
    StoreError::Storage { message: "PostgreSQL: the server's reply has fewer results than statements sent".to_owned() }
}

/// Column `i` of a simple-query row, parsed from its text.
pub(crate) fn parse_text_column<T: std::str::FromStr>(row: &SimpleQueryRow, i: usize) -> Result<T, StoreError> {
    row.get(i).and_then(|text| text.parse().ok()).ok_or_else(|| StoreError::Storage {
        message: format!("PostgreSQL: unexpected value {:?} in column {i} of a reply", row.get(i)),
    })
}

/// `(id, bytes)` rows of the descriptors or index definitions table.
type IdRows = Vec<(u32, Vec<u8>)>;

/// Reads the index definitions as text (`encode(value, 'hex')`), to go in a begin's batch.
const INDEX_DEFS_AS_TEXT: &str = "SELECT id, encode(value, 'hex') FROM copal_index_defs ORDER BY id";

/// The `(id, hex value)` rows of a simple query, decoded.
fn id_rows(rows: &[SimpleQueryRow]) -> Result<IdRows, StoreError> {
    rows.iter().map(|row| Ok((parse_text_column::<u32>(row, 0)?, hex_column(row, 1)?))).collect()
}

/// Column `i` of a simple-query row, an `encode(..., 'hex')`, as bytes.
fn hex_column(row: &SimpleQueryRow, i: usize) -> Result<Vec<u8>, StoreError> {
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

fn visit_ids(rows: &IdRows, after: u32, visit: IdVisitor<'_>) -> Result<(), StoreError> {
    rows.iter().filter(|(id, _)| *id > after).try_for_each(|(id, value)| visit(*id, value))
}

/// Whether `location` names a PostgreSQL database rather than a directory.
pub(crate) fn is_url(location: &str) -> bool {
    location.starts_with("postgresql://") || location.starts_with("postgres://")
}

pub(crate) fn sql_oid(oid: Oid) -> i64 {
    (oid ^ (1 << 63)) as i64
}

fn from_sql_oid(value: i64) -> Oid {
    (value as u64) ^ (1 << 63)
}

/// Visits `(id, value)` rows of the descriptors or index definitions table.
fn visit_id_rows(rows: &[Row], table: &str, visit: IdVisitor<'_>) -> Result<(), StoreError> {
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

    fn query(&mut self, sql: &'static str, params: &Params<'_>) -> Result<Vec<Row>, StoreError> {
        Ok(match self.prepared(sql, params)? {
            Some(statement) => self.client.query(&statement, &values(params))?,
            None => self.client.query_typed(sql, params)?,
        })
    }

    fn execute(&mut self, sql: &'static str, params: &Params<'_>) -> Result<u64, StoreError> {
        Ok(match self.prepared(sql, params)? {
            Some(statement) => self.client.execute(&statement, &values(params))?,
            None => self.client.execute_typed(sql, params)?,
        })
    }

    fn meta_u64(&mut self, key: &[u8]) -> Result<Option<u64>, StoreError> {
        let rows = self.query("SELECT value FROM copal_meta WHERE key = $1", &[(&key, Type::BYTEA)])?;
        rows.first().map(|row| Ok(column::<i64>(row, 0, "copal_meta")? as u64)).transpose()
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

    fn get(&mut self, oid: Oid) -> Result<Option<Vec<u8>>, StoreError> {
        let rows = self.query("SELECT value FROM copal_records WHERE oid = $1", &[(&sql_oid(oid), Type::INT8)])?;
        rows.first().map(|row| column(row, 0, "copal_records")).transpose()
    }

    /// The records of `oids` (in any order), and perhaps some between them, in one round trip.
    /// They are read as key ranges, each run of nearby ids one range: `oid = ANY(list)` costs a
    /// B-tree descent and a recheck per id, and for the 4,096 mostly consecutive ids of a
    /// `load_closure` batch took ten times as long on the server as their ranges.
    fn records_near(&mut self, oids: &[Oid]) -> Result<Vec<Row>, StoreError> {
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

    fn descriptors_after(&mut self, known: u32) -> Result<Vec<Row>, StoreError> {
        self.query("SELECT id, value FROM copal_descriptors WHERE id > $1 ORDER BY id", &[(&i64::from(known), Type::INT8)])
    }

    /// A page of the records with `from <= oid <= last`, in oid order.
    fn records_page(&mut self, from: Oid, last: Oid) -> Result<Vec<Row>, StoreError> {
        self.query(
            "SELECT oid, value FROM copal_records WHERE oid >= $1 AND oid <= $2 ORDER BY oid LIMIT $3",
            &[(&sql_oid(from), Type::INT8), (&sql_oid(last), Type::INT8), (&PAGE, Type::INT8)],
        )
    }

    /// A page of the index entries in `[lo, hi)` (no hi: to the last entry), in key order or
    /// reversed.
    fn entries_page(&mut self, lo: &[u8], hi: Option<&[u8]>, descending: bool) -> Result<Vec<Row>, StoreError> {
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
fn scan_records(
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
fn scan_entries(
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
    pool: Arc<Pool>,
    location: String,
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
    fn into_conn(self) -> Option<Conn> {
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
    /// statement (one round trip).
    pub(crate) fn get_many<E>(
        &self,
        oids: &[Oid],
        missing: impl Fn(Oid) -> E,
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
                let value = found.get(&oid).ok_or_else(|| missing(oid))?;
                visit(chunk_no * BATCH + i, oid, value)?;
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
        let rows = self.with(|conn| conn.query("SELECT min(tid) FROM copal_log", &[]))?;
        Ok(rows.first().map(|row| column::<Option<i64>>(row, 0, "copal_log")).transpose()?.flatten().map(|tid| tid as u64))
    }

    pub(crate) fn log_entries(
        &self,
        from: u64,
        to: u64,
        mut visit: impl FnMut(u64, &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let (from, to) = (from as i64, to as i64);
        let rows = self.with(|conn| {
            conn.query("SELECT tid, oids FROM copal_log WHERE tid >= $1 AND tid <= $2 ORDER BY tid", &[(&from, Type::INT8), (&to, Type::INT8)])
        })?;
        rows.iter().try_for_each(|row| visit(column::<i64>(row, 0, "copal_log")? as u64, column(row, 1, "copal_log")?))
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

/// Stored values of records by oid (None: deleted).
type RecordWrites = BTreeMap<Oid, Option<Vec<u8>>>;

/// Stored values of the records of new objects by oid.
type NewRecords = BTreeMap<Oid, Vec<u8>>;

/// What a commit reads with its lock, in the lock's round trip; the lock keeps it current (no
/// other commit can change it until this one ends) and the commit's own writes update it.
struct ReadWithLock {
    /// The last committed tid (then the one this commit writes).
    last_tid: u64,
    index_defs: IdRows,
    /// The highest descriptor id the catalog knew at begin, and the descriptors above it
    /// (with those this commit adds).
    descriptors: (u32, IdRows),
    /// Every setting: few rows (removed-field declarations of some classes), which the
    /// declarations synced at a program's first transaction read one by one.
    settings: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// A commit's transaction. Holding it is holding the row lock on the last tid, which serializes
/// commits of every process on every machine.
pub(crate) struct PgWrite {
    conn: RefCell<Option<Conn>>,
    pool: Arc<Pool>,
    /// The small tables, read with the commit lock and kept current by this commit's writes.
    began: ReadWithLock,
    /// Buffered record writes (None: delete), sent by `flush`.
    records: RecordWrites,
    /// Buffered records of new objects (no row yet), sent by `flush` with COPY.
    fresh_records: NewRecords,
    /// Buffered index entry writes (false: delete), sent by `flush`.
    entries: BTreeMap<Vec<u8>, bool>,
    /// Stored values read ahead by `prefetch` or already flushed (None: no record). The commit
    /// lock keeps them current: no other commit can change a record until this one ends.
    known: HashMap<Oid, Option<Vec<u8>>>,
    /// Statements (SQL text, values inline) sent with the COMMIT, in its round trip.
    epilogue: String,
}

impl PgWrite {
    /// Waits for the commit lock (other writers, in any process, and upgrades of the schema),
    /// then checks that the schema is still the one this process opened. With `snapshot`, the
    /// commit runs on the snapshot's connection, whose transaction it ends: a transaction that
    /// read and then commits uses one server connection, not two (a new connection costs the
    /// server a process).
    /// `known_descriptors`: the highest descriptor id in the store's catalog (the commit reads the
    /// ones above it with its lock).
    pub(crate) fn begin(backend: &PgBackend, snapshot: Option<PgRead>, known_descriptors: u32) -> Result<PgWrite, StoreError> {
        let handed_over = snapshot.and_then(PgRead::into_conn);
        let (conn, began) = backend.pool.start(handed_over, |conn, ending| {
            // One round trip: the lock, then what every commit reads as it begins (small tables),
            // all of it after the lock and so current.
            let sql = format!(
                "{ending}BEGIN ISOLATION LEVEL READ COMMITTED; {}; {INDEX_DEFS_AS_TEXT}; \
                 SELECT id, encode(value, 'hex') FROM copal_descriptors WHERE id > {known_descriptors} ORDER BY id; \
                 SELECT encode(key, 'hex'), encode(value, 'hex') FROM copal_settings",
                pg_schema::LOCK_META
            );
            let results = simple_results(&mut conn.client, &sql)?;
            let [.., meta, index_defs, descriptors, settings] = results.as_slice() else { return Err(unexpected_reply()) };
            let (version, last_tid) = pg_schema::locked_meta(meta)?;
            pg_schema::check_unchanged(version, &backend.location)?;
            let settings = settings.iter().map(|row| Ok((hex_column(row, 0)?, hex_column(row, 1)?)));
            Ok(ReadWithLock {
                last_tid,
                index_defs: id_rows(index_defs)?,
                descriptors: (known_descriptors, id_rows(descriptors)?),
                settings: settings.collect::<Result<_, StoreError>>()?,
            })
        })?;
        Ok(PgWrite {
            conn: RefCell::new(Some(conn)),
            pool: Arc::clone(&backend.pool),
            began,
            records: BTreeMap::new(),
            fresh_records: BTreeMap::new(),
            entries: BTreeMap::new(),
            known: HashMap::new(),
            epilogue: String::new(),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        match self.conn.borrow_mut().as_mut() {
            Some(conn) => f(conn),
            None => Err(StoreError::Storage { message: "PostgreSQL: the commit's connection is gone".to_owned() }),
        }
    }

    /// Sends the buffered record and index entry writes (`send_buffered`), then keeps the records
    /// sent in `known` for the reads of the rest of the commit.
    fn flush(&mut self) -> Result<(), StoreError> {
        let (records, fresh) = self.send_buffered()?;
        self.known.extend(records);
        self.known.extend(fresh.into_iter().map(|(oid, value)| (oid, Some(value))));
        Ok(())
    }

    /// Sends the buffered record and index entry writes, one statement per kind, and returns the
    /// records sent: the replaced or deleted ones, and those of new objects.
    fn send_buffered(&mut self) -> Result<(RecordWrites, NewRecords), StoreError> {
        let records = std::mem::take(&mut self.records);
        let entries = std::mem::take(&mut self.entries);
        let fresh = std::mem::take(&mut self.fresh_records);
        self.with(|conn| {
            if !fresh.is_empty() {
                copy_new_records(conn, &fresh)?;
            }
            let (mut put_oids, mut put_values, mut deleted) = (Vec::new(), Vec::new(), Vec::new());
            for (oid, value) in &records {
                match value {
                    Some(value) => {
                        put_oids.push(sql_oid(*oid));
                        put_values.push(value.as_slice());
                    }
                    None => deleted.push(sql_oid(*oid)),
                }
            }
            if !deleted.is_empty() {
                conn.execute("DELETE FROM copal_records WHERE oid = ANY($1)", &[(&deleted, Type::INT8_ARRAY)])?;
            }
            if !put_oids.is_empty() {
                conn.execute(
                    "INSERT INTO copal_records (oid, value) SELECT * FROM unnest($1::bigint[], $2::bytea[]) \
                     ON CONFLICT (oid) DO UPDATE SET value = EXCLUDED.value",
                    &[(&put_oids, Type::INT8_ARRAY), (&put_values, Type::BYTEA_ARRAY)],
                )?;
            }
            let (added, removed): (Vec<_>, Vec<_>) = entries.iter().partition(|(_, present)| **present);
            let removed: Vec<&[u8]> = removed.into_iter().map(|(key, _)| key.as_slice()).collect();
            let added: Vec<&[u8]> = added.into_iter().map(|(key, _)| key.as_slice()).collect();
            if !removed.is_empty() {
                conn.execute("DELETE FROM copal_index_entries WHERE key = ANY($1)", &[(&removed, Type::BYTEA_ARRAY)])?;
            }
            if !added.is_empty() {
                conn.execute(
                    "INSERT INTO copal_index_entries (key) SELECT unnest($1::bytea[]) ON CONFLICT DO NOTHING",
                    &[(&added, Type::BYTEA_ARRAY)],
                )?;
            }
            Ok(())
        })?;
        Ok((records, fresh))
    }

    /// Reads the stored values of `oids` in one round trip per 10,000, so that the conflict
    /// checks and index maintenance that follow need none.
    pub(crate) fn prefetch(&mut self, oids: &[Oid]) -> Result<(), StoreError> {
        let wanted: Vec<Oid> =
            oids.iter().copied().filter(|oid| !self.records.contains_key(oid) && !self.known.contains_key(oid)).collect();
        for chunk in wanted.chunks(10_000) {
            let rows = self.with(|conn| conn.records_near(chunk))?;
            self.known.extend(chunk.iter().map(|&oid| (oid, None)));
            // Rows between the wanted ones are kept too: they are as current as the others.
            for row in &rows {
                self.known.insert(from_sql_oid(column(row, 0, "copal_records")?), Some(column(row, 1, "copal_records")?));
            }
        }
        Ok(())
    }

    pub(crate) fn meta_u64(&self, key: &[u8]) -> Result<Option<u64>, StoreError> {
        if key == META_TID {
            return Ok(Some(self.began.last_tid));
        }
        self.with(|conn| conn.meta_u64(key))
    }

    pub(crate) fn setting(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.began.settings.get(key).cloned())
    }

    /// Sets (`Some`) or removes (`None`) the setting `key`.
    pub(crate) fn put_setting(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        match value {
            Some(value) => self.began.settings.insert(key.to_vec(), value.to_vec()),
            None => self.began.settings.remove(key),
        };
        self.with(|conn| match value {
            Some(value) => conn
                .execute(
                    "INSERT INTO copal_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    &[(&key, Type::BYTEA), (&value, Type::BYTEA)],
                )
                .map(drop),
            None => conn.execute("DELETE FROM copal_settings WHERE key = $1", &[(&key, Type::BYTEA)]).map(drop),
        })
    }

    /// Buffered until `commit`, like `put_log` and `prune_log`: only `Commit::finish` writes meta
    /// values, after its last read.
    pub(crate) fn put_meta_u64(&mut self, key: &[u8], value: u64) -> Result<(), StoreError> {
        if key == META_TID {
            self.began.last_tid = value;
        }
        self.epilogue.push_str(&format!(
            "INSERT INTO copal_meta (key, value) VALUES ({}, {}) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value; ",
            bytea_literal(key),
            value as i64
        ));
        Ok(())
    }

    pub(crate) fn get(&self, oid: Oid) -> Result<Option<Cow<'_, [u8]>>, StoreError> {
        if let Some(value) = self.fresh_records.get(&oid) {
            return Ok(Some(Cow::Borrowed(value)));
        }
        if let Some(value) = self.records.get(&oid).or_else(|| self.known.get(&oid)) {
            return Ok(value.as_deref().map(Cow::Borrowed));
        }
        Ok(self.with(|conn| conn.get(oid))?.map(Cow::Owned))
    }

    pub(crate) fn last_oid(&mut self, first: Oid, end: Oid) -> Result<Option<Oid>, StoreError> {
        self.flush()?;
        let (first, last) = (sql_oid(first), sql_oid(end - 1));
        let rows = self.with(|conn| {
            conn.query(
                "SELECT oid FROM copal_records WHERE oid >= $1 AND oid <= $2 ORDER BY oid DESC LIMIT 1",
                &[(&first, Type::INT8), (&last, Type::INT8)],
            )
        })?;
        Ok(rows.first().map(|row| column(row, 0, "copal_records")).transpose()?.map(from_sql_oid))
    }

    /// Buffers the stored value of `oid`. A `fresh` oid has no row yet (nor a buffered or
    /// flushed one): it is sent with COPY, much cheaper than an upsert for a large commit.
    pub(crate) fn put_record(&mut self, oid: Oid, value: &[u8], fresh: bool) -> Result<(), StoreError> {
        if fresh && !self.known.contains_key(&oid) && !self.records.contains_key(&oid) {
            self.fresh_records.insert(oid, value.to_vec());
        } else if let Some(buffered) = self.fresh_records.get_mut(&oid) {
            *buffered = value.to_vec();
        } else {
            self.records.insert(oid, Some(value.to_vec()));
        }
        Ok(())
    }

    pub(crate) fn delete_record(&mut self, oid: Oid) -> Result<(), StoreError> {
        // A new object's record not sent yet never reaches the server.
        if self.fresh_records.remove(&oid).is_none() {
            self.records.insert(oid, None);
        }
        Ok(())
    }

    pub(crate) fn scan_records(
        &mut self,
        first: Oid,
        end: Option<Oid>,
        visit: impl FnMut(Oid, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.flush()?;
        scan_records(first, end, |from, last| self.with(|conn| conn.records_page(from, last)), visit)
    }

    pub(crate) fn put_descriptor(&mut self, id: u32, bytes: &[u8]) -> Result<(), StoreError> {
        self.began.descriptors.1.push((id, bytes.to_vec()));
        self.with(|conn| {
            conn.execute("INSERT INTO copal_descriptors (id, value) VALUES ($1, $2)", &[(&i64::from(id), Type::INT8), (&bytes, Type::BYTEA)]).map(drop)
        })
    }

    pub(crate) fn index_defs(&self, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        visit_ids(&self.began.index_defs, 0, visit)
    }

    pub(crate) fn put_index_def(&mut self, id: u32, bytes: &[u8]) -> Result<(), StoreError> {
        let defs = &mut self.began.index_defs;
        match defs.binary_search_by_key(&id, |(def_id, _)| *def_id) {
            Ok(at) => defs[at].1 = bytes.to_vec(),
            Err(at) => defs.insert(at, (id, bytes.to_vec())),
        }
        self.with(|conn| {
            conn.execute(
                "INSERT INTO copal_index_defs (id, value) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value",
                &[(&i64::from(id), Type::INT8), (&bytes, Type::BYTEA)],
            )
            .map(drop)
        })
    }

    pub(crate) fn drop_index(&mut self, id: u32) -> Result<(), StoreError> {
        self.flush()?;
        self.began.index_defs.retain(|(def_id, _)| *def_id != id);
        let (lo, hi) = (id.to_be_bytes().to_vec(), (id + 1).to_be_bytes().to_vec());
        self.with(|conn| {
            conn.execute("DELETE FROM copal_index_defs WHERE id = $1", &[(&i64::from(id), Type::INT8)])?;
            conn.execute("DELETE FROM copal_index_entries WHERE key >= $1 AND key < $2", &[(&lo, Type::BYTEA), (&hi, Type::BYTEA)]).map(drop)
        })
    }

    pub(crate) fn put_entry(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.entries.insert(key.to_vec(), true);
        Ok(())
    }

    pub(crate) fn delete_entry(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.entries.insert(key.to_vec(), false);
        Ok(())
    }

    pub(crate) fn scan_entries(
        &mut self,
        lo: &[u8],
        hi: Option<&[u8]>,
        visit: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.flush()?;
        scan_entries(lo, hi, false, |lo, hi, desc| self.with(|conn| conn.entries_page(lo, hi, desc)), visit)
    }

    pub(crate) fn put_log(&mut self, tid: u64, entry: &[u8]) -> Result<(), StoreError> {
        self.epilogue
            .push_str(&format!("INSERT INTO copal_log (tid, oids) VALUES ({}, {}); ", tid as i64, bytea_literal(entry)));
        Ok(())
    }

    pub(crate) fn prune_log(&mut self, cutoff: u64) -> Result<(), StoreError> {
        self.epilogue.push_str(&format!("DELETE FROM copal_log WHERE tid < {}; ", cutoff as i64));
        Ok(())
    }

    /// Sends the buffered writes and commits: the last statements (the log entry, the meta
    /// values) go with the COMMIT in one round trip. On failure the server rolls the whole
    /// transaction back: nothing of it is visible.
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        // Nothing reads after this: the records sent are not kept (100,000 map entries for a
        // large commit).
        self.send_buffered()?;
        let conn = self.conn.get_mut().take();
        let Some(mut conn) = conn else {
            return Err(StoreError::Storage { message: "PostgreSQL: the commit's connection is gone".to_owned() });
        };
        self.epilogue.push_str("COMMIT");
        match conn.client.batch_execute(&self.epilogue) {
            Ok(()) => {
                self.pool.give_back(conn, false);
                Ok(())
            }
            Err(error) => {
                // A statement before COMMIT failed: the transaction is still open, aborted.
                self.pool.give_back(conn, true);
                let db = error.as_db_error();
                if db.is_some_and(|db| db.code() == &SqlState::UNIQUE_VIOLATION && db.constraint() == Some("copal_log_pkey")) {
                    // The tid this commit took follows copal_meta's, which the log has passed.
                    return Err(StoreError::Damaged {
                        message: format!(
                            "copal_log already holds transaction {}: the last tid in copal_meta is behind \
                             the commit log, so every commit would reuse a tid",
                            self.began.last_tid
                        ),
                    });
                }
                Err(error.into())
            }
        }
    }
}

/// Sends the records of new objects with binary COPY. The rows are encoded here, in the format
/// of PostgreSQL's documentation (COPY, "Binary Format"), and handed to the connection 64 KiB at
/// a time: the client's row writer (`BinaryCopyInWriter`) runs its async machinery once per row.
fn copy_new_records(conn: &mut Conn, records: &NewRecords) -> Result<(), StoreError> {
    const CHUNK: usize = 64 * 1024;
    let io_failed = |error: std::io::Error| StoreError::Storage { message: format!("PostgreSQL: COPY failed: {error}") };
    let mut writer = conn.client.copy_in("COPY copal_records (oid, value) FROM STDIN (FORMAT binary)")?;
    let mut buf = Vec::with_capacity(CHUNK + 1024);
    // Signature, flags (no oids), length of the header extension (none).
    buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    buf.extend_from_slice(&0i32.to_be_bytes());
    buf.extend_from_slice(&0i32.to_be_bytes());
    for (&oid, value) in records {
        let length = i32::try_from(value.len()).map_err(|_| StoreError::Storage {
            message: format!("PostgreSQL: the record of {oid:#x} is larger than a bytea value can be (1 GB)"),
        })?;
        // A row: its field count, then each field's length and bytes (bigint: 8, big-endian).
        buf.extend_from_slice(&2i16.to_be_bytes());
        buf.extend_from_slice(&8i32.to_be_bytes());
        buf.extend_from_slice(&sql_oid(oid).to_be_bytes());
        buf.extend_from_slice(&length.to_be_bytes());
        buf.extend_from_slice(value);
        if buf.len() >= CHUNK {
            writer.write_all(&buf).map_err(io_failed)?;
            buf.clear();
        }
    }
    // The trailer: a field count of -1.
    buf.extend_from_slice(&(-1i16).to_be_bytes());
    writer.write_all(&buf).map_err(io_failed)?;
    writer.finish()?;
    Ok(())
}

/// `bytes` as an SQL expression, for statements sent as text (`decode` rather than a `'\x..'`
/// literal, whose meaning depends on `standard_conforming_strings`).
pub(crate) fn bytea_literal(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut sql = String::with_capacity(bytes.len() * 2 + 20);
    sql.push_str("decode('");
    for &byte in bytes {
        sql.push(char::from(DIGITS[usize::from(byte >> 4)]));
        sql.push(char::from(DIGITS[usize::from(byte & 15)]));
    }
    sql.push_str("', 'hex')");
    sql
}

impl DescriptorTable for PgWrite {
    fn descriptors_after(&self, known: u32, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        let (read_after, read) = &self.began.descriptors;
        if known >= *read_after {
            return visit_ids(read, known, visit);
        }
        visit_id_rows(&self.with(|conn| conn.descriptors_after(known))?, "copal_descriptors", visit)
    }
}

impl Drop for PgWrite {
    /// A commit dropped before `commit` rolls back (`give_back` ends the transaction).
    fn drop(&mut self) {
        if let Some(conn) = self.conn.get_mut().take() {
            self.pool.give_back(conn, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
