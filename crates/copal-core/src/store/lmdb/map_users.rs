//! Adopting the map size of another process.
//!
//! `map_size` is per process: LMDB maps the file with the size the opening process asked for
//! (at least the file's size then). Once a process with a larger map grows the file past this
//! process's map, every transaction this process begins fails with MDB_MAP_RESIZED. LMDB's remedy
//! is `mdb_env_set_mapsize(env, 0)`, which remaps the file with the size the last commit recorded,
//! and it is sound only while no transaction of the process runs: the old map is unmapped, and
//! every page a running transaction reads lies in it.
//!
//! Invariant: each running transaction holds a `MapUse`, taken before the transaction begins;
//! a `MapUse` is taken only under `MapUsers::lock`, and the map is replaced only under that lock
//! when no `MapUse` exists, so no transaction runs while it is replaced.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use heed::{Env, WithoutTls};

use crate::store::error::StoreError;

/// How long a transaction that finds the file grown past the map waits for the other
/// transactions of the process to end, so that the map can be replaced.
const WAIT_FOR_USERS: Duration = Duration::from_secs(10);

#[derive(Default)]
pub(crate) struct MapUsers {
    lock: Mutex<()>,
    /// Cloned into every `MapUse`: its strong count less one is the number of transactions.
    count: Arc<()>,
}

/// Held by a transaction for as long as it reads the map.
pub(crate) struct MapUse {
    _count: Arc<()>,
}

impl MapUsers {
    fn locked(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Begins a transaction with `begin`, returned after the `MapUse` it holds (so that a
    /// `let (user, txn)` drops the transaction first); when another process has grown the file past this
    /// process's map, waits for this process's other transactions to end, adopts the larger
    /// map and begins again.
    pub(crate) fn begin<T>(
        &self,
        env: &Env<WithoutTls>,
        mut begin: impl FnMut() -> heed::Result<T>,
    ) -> Result<(MapUse, T), StoreError> {
        let deadline = Instant::now() + WAIT_FOR_USERS;
        loop {
            let user = {
                let _guard = self.locked();
                MapUse { _count: Arc::clone(&self.count) }
            };
            match begin() {
                Err(heed::Error::Mdb(heed::MdbError::MapResized)) => drop(user),
                result => return Ok((user, result?)),
            }
            let guard = self.locked();
            if Arc::strong_count(&self.count) == 1 {
                // SAFETY: no transaction of this process runs (the invariant above), and none
                // begins while `guard` is held.
                unsafe { env.resize(0) }?;
                drop(guard);
                continue;
            }
            drop(guard);
            if Instant::now() >= deadline {
                return Err(StoreError::Storage {
                    message: format!(
                        "another process grew the database past this process's map_size, and transactions of \
                         this process stayed open for {}s, so the map could not be enlarged: end them (a thread \
                         that holds one transaction while it begins another waits on itself), or open the \
                         database with the map_size the other process uses",
                        WAIT_FOR_USERS.as_secs()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
