//! The connections of one PostgreSQL store (docs/ARCHITECTURE.md, "PostgreSQL store"): idle
//! connections kept for reuse, and a cap on how many are open at once. A transaction holds one
//! connection from its snapshot to its end; when `max_connections` are open and none is idle, a
//! new transaction waits for one to be given back, up to `pool_timeout`, then fails with
//! StorageError rather than opening server sessions without bound.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use postgres::Config;

use super::error::StoreError;
use super::pg_settings::LazyTls;
use super::postgres::Conn;

/// How many connections a store may have open at once, and how long a transaction waits for one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolLimits {
    pub max_connections: usize,
    pub timeout: Duration,
}

impl Default for PoolLimits {
    fn default() -> Self {
        PoolLimits { max_connections: 20, timeout: Duration::from_secs(30) }
    }
}

/// The connections of a pool. Invariant: `open` counts every `Conn` of the pool that exists
/// (idle, in a transaction, or being connected), since each holds a `Slot` that decrements it
/// when dropped; so `idle.len() <= open <= max_connections`.
struct Connections {
    idle: Vec<Conn>,
    open: usize,
}

/// The pool's state, held by the pool; the slots of its connections refer to it weakly, since
/// its idle connections are inside it (a strong reference would be a cycle, and the pool's
/// connections would never close).
struct Shared {
    connections: Mutex<Connections>,
    /// Signalled when a connection is given back to `idle` or closed.
    freed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Connections> {
        self.connections.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A connection's place in the count of open connections, freed when the connection is dropped
/// (unless the whole pool is being dropped).
pub(super) struct Slot(Weak<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            shared.lock().open -= 1;
            shared.freed.notify_one();
        }
    }
}

/// Idle connections of one database, shared by its snapshots and commits.
pub(super) struct Pool {
    config: Config,
    /// Secures new connections as the URL's `sslmode` says (pg_settings.rs).
    tls: LazyTls,
    durable: bool,
    limits: PoolLimits,
    shared: Arc<Shared>,
}

/// What a transaction gets from the pool: an idle connection, or the right to open one.
// Moved once per transaction start: boxing the connection would add an allocation for nothing.
#[allow(clippy::large_enum_variant)]
enum Taken {
    Idle(Conn),
    New(Slot),
}

impl Pool {
    pub(super) fn new(url: &str, durable: bool, limits: PoolLimits) -> Result<Pool, StoreError> {
        let (config, tls) = super::pg_settings::connection_config(url, &|name| std::env::var(name).ok())?;
        if limits.max_connections == 0 {
            return Err(StoreError::Storage { message: "max_connections must be at least 1".to_owned() });
        }
        let shared = Arc::new(Shared { connections: Mutex::new(Connections { idle: Vec::new(), open: 0 }), freed: Condvar::new() });
        Ok(Pool { config, tls: LazyTls(tls), durable, limits, shared })
    }

    /// Runs `start` (which begins a transaction) on `handed_over`, a snapshot's connection still
    /// in its transaction, or else on an idle connection, or on a new one when there is none or
    /// when the one tried turns out to be dead: after a server restart every idle connection is,
    /// so they are all dropped and the transaction starts on a fresh one instead of failing.
    /// `start(conn, ending)` sends `ending` first, in the same round trip: the SQL that ends
    /// the transaction the connection is in ("ROLLBACK; " for a snapshot's, else nothing).
    pub(super) fn start<T>(
        &self,
        handed_over: Option<Conn>,
        start: impl Fn(&mut Conn, &str) -> Result<T, StoreError>,
    ) -> Result<(Conn, T), StoreError> {
        let (mut conn, ending) = match handed_over {
            Some(conn) => (conn, "ROLLBACK; "),
            None => match self.take()? {
                Taken::Idle(conn) => (conn, ""),
                Taken::New(slot) => return self.begin_on(self.connect(slot)?, start),
            },
        };
        match start(&mut conn, ending) {
            Ok(value) => Ok((conn, value)),
            Err(_) if conn.client.is_closed() => {
                drop(conn);
                // Dropped outside the lock: each connection's slot takes it when dropped.
                let dead = std::mem::take(&mut self.shared.lock().idle);
                drop(dead);
                self.begin_on(self.connection()?, start)
            }
            Err(error) => {
                self.give_back(conn, true);
                Err(error)
            }
        }
    }

    /// Runs `start` on `conn`, giving the connection back if it fails.
    fn begin_on<T>(&self, mut conn: Conn, start: impl Fn(&mut Conn, &str) -> Result<T, StoreError>) -> Result<(Conn, T), StoreError> {
        match start(&mut conn, "") {
            Ok(value) => Ok((conn, value)),
            Err(error) => {
                self.give_back(conn, true);
                Err(error)
            }
        }
    }

    /// An idle connection, or else a new one (waiting for room as `take` does).
    pub(super) fn connection(&self) -> Result<Conn, StoreError> {
        match self.take()? {
            Taken::Idle(conn) => Ok(conn),
            Taken::New(slot) => self.connect(slot),
        }
    }

    /// An idle connection, or a slot for a new one; waits while `max_connections` are open and
    /// none is idle, up to the pool's timeout.
    fn take(&self) -> Result<Taken, StoreError> {
        let deadline = Instant::now() + self.limits.timeout;
        let mut connections = self.shared.lock();
        loop {
            if let Some(conn) = connections.idle.pop() {
                return Ok(Taken::Idle(conn));
            }
            if connections.open < self.limits.max_connections {
                connections.open += 1;
                return Ok(Taken::New(Slot(Arc::downgrade(&self.shared))));
            }
            let now = Instant::now();
            if now >= deadline {
                let PoolLimits { max_connections, timeout } = self.limits;
                return Err(StoreError::Storage {
                    message: format!(
                        "PostgreSQL: all {max_connections} connections of this database (max_connections) are in use \
                         by running transactions, and none was given back within {} s (pool_timeout): end \
                         transactions sooner, or open the database with a larger max_connections",
                        timeout.as_secs_f64()
                    ),
                });
            }
            connections = self.shared.freed.wait_timeout(connections, deadline - now).unwrap_or_else(|poisoned| poisoned.into_inner()).0;
        }
    }

    fn connect(&self, slot: Slot) -> Result<Conn, StoreError> {
        let mut client = self.config.connect(self.tls.clone())?;
        if !self.durable {
            // Like LMDB's NO_SYNC: a server crash may lose the last commits, never corrupts.
            client.batch_execute("SET synchronous_commit = off")?;
        }
        Ok(Conn { client, statements: HashMap::new(), _slot: slot })
    }

    /// Keeps a connection for reuse, unless it is broken. `open_transaction`: roll back the
    /// transaction it is in first (a snapshot's, or a commit that is abandoned).
    pub(super) fn give_back(&self, mut conn: Conn, open_transaction: bool) {
        if conn.client.is_closed() || (open_transaction && conn.client.batch_execute("ROLLBACK").is_err()) {
            return;
        }
        self.shared.lock().idle.push(conn);
        self.shared.freed.notify_one();
    }
}
