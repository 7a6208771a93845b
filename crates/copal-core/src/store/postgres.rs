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
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use postgres::types::ToSql;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use postgres::{Client, Config, Row, SimpleQueryMessage, SimpleQueryRow, Statement};

use super::error::StoreError;
use super::pg_settings::LazyTls;
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

/// Begins a commit and takes the commit lock, in one round trip: rows (is the format row,
/// value) of the `format` and `tid` rows of `copal_meta`, locked. Sorted, because rows are
/// locked in the order the statement returns them, and updates move the tid row around the
/// table: two commits taking the two rows in opposite orders deadlock (PostgreSQL then aborts
/// one of them).
const BEGIN_COMMIT: &str = "BEGIN ISOLATION LEVEL READ COMMITTED; \
     SELECT key = 'format'::bytea, value FROM copal_meta WHERE key IN ('format'::bytea, 'tid'::bytea) \
     ORDER BY key FOR UPDATE";

/// Runs `sql`, one or more statements, in one round trip (the simple-query protocol: values
/// come as text), and returns the rows they return.
fn simple_rows(client: &mut Client, sql: &str) -> Result<Vec<SimpleQueryRow>, StoreError> {
    let messages = client.simple_query(sql)?;
    Ok(messages
        .into_iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .collect())
}

/// Column `i` of a simple-query row, parsed from its text.
fn parse_text_column<T: std::str::FromStr>(row: &SimpleQueryRow, i: usize) -> Result<T, StoreError> {
    row.get(i).and_then(|text| text.parse().ok()).ok_or_else(|| StoreError::Storage {
        message: format!("PostgreSQL: unexpected value {:?} in column {i} of a reply", row.get(i)),
    })
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
fn visit_id_rows(rows: &[Row], visit: IdVisitor<'_>) -> Result<(), StoreError> {
    rows.iter().try_for_each(|row| visit(row.get::<_, i64>(0) as u32, row.get(1)))
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
struct Conn {
    client: Client,
    /// The statements run on this connection: None after their first run, which is unprepared
    /// (one round trip, where prepare + execute is two: most statements of a short-lived
    /// connection run once); prepared on their second run, which costs the prepare's round trip
    /// once and then spares the server parsing and planning them on every later run.
    statements: HashMap<&'static str, Option<Statement>>,
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
        Ok(rows.first().map(|row| row.get::<_, i64>(0) as u64))
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
            visit(row.get::<_, &[u8]>(0), row.get::<_, &[u8]>(1))?;
        }
        Ok(())
    }

    fn get(&mut self, oid: Oid) -> Result<Option<Vec<u8>>, StoreError> {
        let rows = self.query("SELECT value FROM copal_records WHERE oid = $1", &[(&sql_oid(oid), Type::INT8)])?;
        Ok(rows.into_iter().next().map(|row| row.get(0)))
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

    fn index_defs(&mut self) -> Result<Vec<Row>, StoreError> {
        self.query("SELECT id, value FROM copal_index_defs ORDER BY id", &[])
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
            let oid = from_sql_oid(row.get(0));
            if !visit(oid, row.get(1))? {
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
            if !visit(row.get(0))? {
                return Ok(());
            }
        }
        let Some(last) = rows.last() else { return Ok(()) };
        if (rows.len() as i64) < PAGE {
            return Ok(());
        }
        let last: Vec<u8> = last.get(0);
        if descending {
            hi = Some(last);
        } else {
            // The smallest key after `last`.
            lo = last;
            lo.push(0);
        }
    }
}

/// Idle connections of one database, shared by its snapshots and commits.
struct Pool {
    config: Config,
    /// Secures new connections as the URL's `sslmode` says (pg_settings.rs).
    tls: LazyTls,
    durable: bool,
    idle: Mutex<Vec<Conn>>,
}

impl Pool {
    fn new(url: &str, durable: bool) -> Result<Pool, StoreError> {
        let (config, tls) = super::pg_settings::connection_config(url, &|name| std::env::var(name).ok())?;
        Ok(Pool { config, tls: LazyTls(tls), durable, idle: Mutex::new(Vec::new()) })
    }

    /// Runs `start` (which begins a transaction) on `handed_over`, a snapshot's connection still
    /// in its transaction, or else on an idle connection, or on a new one when there is none or
    /// when the one tried turns out to be dead: after a server restart every idle connection is,
    /// so they are all dropped and the transaction starts on a fresh one instead of failing.
    /// `start(conn, ending)` sends `ending` first, in the same round trip: the SQL that ends
    /// the transaction the connection is in ("ROLLBACK; " for a snapshot's, else nothing).
    fn start<T>(
        &self,
        handed_over: Option<Conn>,
        start: impl Fn(&mut Conn, &str) -> Result<T, StoreError>,
    ) -> Result<(Conn, T), StoreError> {
        let (tried, ending) = match handed_over {
            Some(conn) => (Some(conn), "ROLLBACK; "),
            None => (self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop(), ""),
        };
        if let Some(mut conn) = tried {
            match start(&mut conn, ending) {
                Ok(value) => return Ok((conn, value)),
                Err(_) if conn.client.is_closed() => {
                    self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clear();
                }
                Err(error) => {
                    self.give_back(conn, true);
                    return Err(error);
                }
            }
        }
        let mut conn = self.connect()?;
        match start(&mut conn, "") {
            Ok(value) => Ok((conn, value)),
            Err(error) => {
                self.give_back(conn, true);
                Err(error)
            }
        }
    }

    fn connect(&self) -> Result<Conn, StoreError> {
        let mut client = self.config.connect(self.tls.clone())?;
        if !self.durable {
            // Like LMDB's NO_SYNC: a server crash may lose the last commits, never corrupts.
            client.batch_execute("SET synchronous_commit = off")?;
        }
        Ok(Conn { client, statements: HashMap::new() })
    }

    /// Keeps a connection for reuse, unless it is broken. `open_transaction`: roll back the
    /// transaction it is in first (a snapshot's, or a commit that is abandoned).
    fn give_back(&self, mut conn: Conn, open_transaction: bool) {
        if conn.client.is_closed() || (open_transaction && conn.client.batch_execute("ROLLBACK").is_err()) {
            return;
        }
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(conn);
    }
}

pub(crate) struct PgBackend {
    pool: Arc<Pool>,
    location: String,
}

pub(crate) fn open(url: &str, durable: bool, log_retention: u64) -> Result<Arc<Store>, StoreError> {
    let location = without_password(url);
    let pool = Arc::new(Pool::new(url, durable)?);
    // A new database gets its tables here; an older or newer schema is refused.
    let (conn, _) = pool.start(None, |conn, _| pg_schema::prepare(&mut conn.client, &location, Goal::Create))?;
    pool.give_back(conn, false);
    let backend = PgBackend { pool, location };
    Ok(Arc::new(Store::new(Backend::Postgres(backend), log_retention)?))
}

/// Creates (`Goal::Create`) or upgrades the copal tables of the database at `url` without
/// opening a store on it.
pub(crate) fn migrate(url: &str, goal: Goal) -> Result<MigrationReport, StoreError> {
    let pool = Pool::new(url, true)?;
    pg_schema::prepare(&mut pool.connect()?.client, &without_password(url), goal)
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

    /// Bytes used by copal's tables (with their indexes and TOAST data).
    pub(crate) fn disk_size(&self) -> Result<u64, StoreError> {
        let (conn, size) = self.pool.start(None, |conn, _| {
            let row = conn.client.query_one(
                "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c \
                 WHERE c.relname LIKE 'copal\\_%' AND c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace",
                &[],
            )?;
            Ok(row.get::<_, Option<i64>>(0))
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
}

impl PgRead {
    pub(crate) fn begin(backend: &PgBackend) -> Result<PgRead, StoreError> {
        let (conn, last_tid) = backend.pool.start(None, |conn, _| {
            // The first statement after BEGIN fixes the snapshot.
            let rows = simple_rows(&mut conn.client, BEGIN_SNAPSHOT)?;
            Ok(match rows.first() {
                Some(row) => parse_text_column::<i64>(row, 0)? as u64,
                None => 0,
            })
        })?;
        Ok(PgRead { conn: Mutex::new(Some(conn)), pool: Arc::clone(&backend.pool), last_tid })
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
            let found: HashMap<Oid, &[u8]> = rows.iter().map(|row| (from_sql_oid(row.get(0)), row.get(1))).collect();
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
        Ok(rows.first().map_or(0, |row| row.get::<_, i64>(0) as u64))
    }

    pub(crate) fn first_logged(&self) -> Result<Option<u64>, StoreError> {
        let rows = self.with(|conn| conn.query("SELECT min(tid) FROM copal_log", &[]))?;
        Ok(rows.first().and_then(|row| row.get::<_, Option<i64>>(0)).map(|tid| tid as u64))
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
        rows.iter().try_for_each(|row| visit(row.get::<_, i64>(0) as u64, row.get(1)))
    }

    pub(crate) fn index_defs(&self, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        visit_id_rows(&self.with(Conn::index_defs)?, visit)
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
        visit_id_rows(&self.with(|conn| conn.descriptors_after(known))?, visit)
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

/// A commit's transaction. Holding it is holding the row lock on the last tid, which serializes
/// commits of every process on every machine.
pub(crate) struct PgWrite {
    conn: RefCell<Option<Conn>>,
    pool: Arc<Pool>,
    /// The last committed tid, read with the commit lock (which keeps it current) or written by
    /// this commit.
    last_tid: u64,
    /// Buffered record writes (None: delete), sent by `flush`.
    records: BTreeMap<Oid, Option<Vec<u8>>>,
    /// Buffered records of new objects (no row yet), sent by `flush` with COPY.
    fresh_records: BTreeMap<Oid, Vec<u8>>,
    /// Buffered index entry writes (false: delete), sent by `flush`.
    entries: BTreeMap<Vec<u8>, bool>,
    /// Stored values read ahead by `prefetch` or already flushed (None: no record). The commit
    /// lock keeps them current: no other commit can change a record until this one ends.
    known: HashMap<Oid, Option<Vec<u8>>>,
}

impl PgWrite {
    /// Waits for the commit lock (other writers, in any process, and upgrades of the schema),
    /// then checks that the schema is still the one this process opened. With `snapshot`, the
    /// commit runs on the snapshot's connection, whose transaction it ends: a transaction that
    /// read and then commits uses one server connection, not two (a new connection costs the
    /// server a process).
    pub(crate) fn begin(backend: &PgBackend, snapshot: Option<PgRead>) -> Result<PgWrite, StoreError> {
        let handed_over = snapshot.and_then(PgRead::into_conn);
        let (conn, last_tid) = backend.pool.start(handed_over, |conn, ending| {
            let rows = simple_rows(&mut conn.client, &format!("{ending}{BEGIN_COMMIT}"))?;
            let (mut version, mut last_tid) = (None, 0);
            for row in &rows {
                match row.get(0) {
                    Some("t") => version = Some(parse_text_column::<i64>(row, 1)?),
                    _ => last_tid = parse_text_column::<i64>(row, 1)? as u64,
                }
            }
            pg_schema::check_unchanged(version, &backend.location)?;
            Ok(last_tid)
        })?;
        Ok(PgWrite {
            conn: RefCell::new(Some(conn)),
            pool: Arc::clone(&backend.pool),
            last_tid,
            records: BTreeMap::new(),
            fresh_records: BTreeMap::new(),
            entries: BTreeMap::new(),
            known: HashMap::new(),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Conn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        match self.conn.borrow_mut().as_mut() {
            Some(conn) => f(conn),
            None => Err(StoreError::Storage { message: "PostgreSQL: the commit's connection is gone".to_owned() }),
        }
    }

    /// Sends the buffered record and index entry writes, one statement per kind.
    fn flush(&mut self) -> Result<(), StoreError> {
        if self.records.is_empty() && self.entries.is_empty() && self.fresh_records.is_empty() {
            return Ok(());
        }
        let mut records = std::mem::take(&mut self.records);
        let entries = std::mem::take(&mut self.entries);
        let fresh = std::mem::take(&mut self.fresh_records);
        self.with(|conn| {
            if !fresh.is_empty() {
                let sink = conn.client.copy_in("COPY copal_records (oid, value) FROM STDIN BINARY")?;
                let mut writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::BYTEA]);
                for (oid, value) in &fresh {
                    writer.write(&[&sql_oid(*oid), &value.as_slice()])?;
                }
                writer.finish()?;
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
        records.extend(fresh.into_iter().map(|(oid, value)| (oid, Some(value))));
        self.known.extend(records);
        Ok(())
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
            self.known.extend(rows.iter().map(|row| (from_sql_oid(row.get(0)), Some(row.get(1)))));
        }
        Ok(())
    }

    pub(crate) fn meta_u64(&self, key: &[u8]) -> Result<Option<u64>, StoreError> {
        if key == META_TID {
            return Ok(Some(self.last_tid));
        }
        self.with(|conn| conn.meta_u64(key))
    }

    pub(crate) fn setting(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let rows = self.with(|conn| conn.query("SELECT value FROM copal_settings WHERE key = $1", &[(&key, Type::BYTEA)]))?;
        Ok(rows.first().map(|row| row.get(0)))
    }

    /// Sets (`Some`) or removes (`None`) the setting `key`.
    pub(crate) fn put_setting(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
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

    pub(crate) fn put_meta_u64(&mut self, key: &[u8], value: u64) -> Result<(), StoreError> {
        if key == META_TID {
            self.last_tid = value;
        }
        let value = value as i64;
        self.with(|conn| {
            conn.execute(
                "INSERT INTO copal_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[(&key, Type::BYTEA), (&value, Type::INT8)],
            )
            .map(drop)
        })
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
        Ok(rows.first().map(|row| from_sql_oid(row.get(0))))
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
        self.with(|conn| {
            conn.execute("INSERT INTO copal_descriptors (id, value) VALUES ($1, $2)", &[(&i64::from(id), Type::INT8), (&bytes, Type::BYTEA)]).map(drop)
        })
    }

    pub(crate) fn index_defs(&self, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        visit_id_rows(&self.with(Conn::index_defs)?, visit)
    }

    pub(crate) fn put_index_def(&mut self, id: u32, bytes: &[u8]) -> Result<(), StoreError> {
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
        let tid = tid as i64;
        self.with(|conn| conn.execute("INSERT INTO copal_log (tid, oids) VALUES ($1, $2)", &[(&tid, Type::INT8), (&entry, Type::BYTEA)]).map(drop))
    }

    pub(crate) fn prune_log(&mut self, cutoff: u64) -> Result<(), StoreError> {
        let cutoff = cutoff as i64;
        self.with(|conn| conn.execute("DELETE FROM copal_log WHERE tid < $1", &[(&cutoff, Type::INT8)]).map(drop))
    }

    /// Sends the buffered writes and commits. On failure the server rolls the whole transaction
    /// back: nothing of it is visible.
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        self.flush()?;
        let conn = self.conn.get_mut().take();
        let Some(mut conn) = conn else {
            return Err(StoreError::Storage { message: "PostgreSQL: the commit's connection is gone".to_owned() });
        };
        conn.client.batch_execute("COMMIT")?;
        self.pool.give_back(conn, false);
        Ok(())
    }
}

impl DescriptorTable for PgWrite {
    fn descriptors_after(&self, known: u32, visit: IdVisitor<'_>) -> Result<(), StoreError> {
        visit_id_rows(&self.with(|conn| conn.descriptors_after(known))?, visit)
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
    fn passwords_stay_out_of_locations() {
        assert_eq!(without_password("postgresql://ann:secret@db:5432/app"), "postgresql://ann@db:5432/app");
        assert_eq!(without_password("postgres://db/app"), "postgres://db/app");
    }
}
