//! A commit's transaction on the PostgreSQL backend (postgres.rs): the commit lock and the small
//! tables read with it, buffered record and index entry writes sent as one statement per table
//! (new records with COPY), and the statements sent with the COMMIT.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::Arc;

use postgres::error::SqlState;
use postgres::types::Type;

use super::error::StoreError;
use super::pg_columns::column;
use super::pg_pool::Pool;
use super::pg_schema;
use super::postgres::{
    from_sql_oid, hex_column, id_rows, scan_entries, scan_records, simple_results, sql_oid, unexpected_reply, visit_id_rows,
    visit_ids, Conn, IdRows, PgBackend, PgRead, INDEX_DEFS_AS_TEXT,
};
use super::{DescriptorTable, IdVisitor, META_TID};
use crate::format::Oid;

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

    pub(crate) fn first_logged(&self) -> Result<Option<u64>, StoreError> {
        self.with(Conn::first_logged)
    }

    pub(crate) fn log_entries(&self, from: u64, to: u64, visit: impl FnMut(u64, &[u8]) -> Result<(), StoreError>) -> Result<(), StoreError> {
        self.with(|conn| conn.log_entries(from, to, visit))
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
