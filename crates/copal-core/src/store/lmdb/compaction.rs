//! Compacting an embedded store in place (`copal compact`).
//!
//! LMDB never shrinks its data file: the pages that commits free are reused by later commits,
//! and while a transaction stays open no page freed after it began is reused, so the file grows
//! (docs/howto/tune.md). A compacting copy (LMDB's `mdb_env_copy2` with MDB_CP_COMPACT) holds
//! only the pages in use.
//!
//! Replacing `data.mdb` by such a copy is safe only while no other process has the environment
//! open: a process keeps the data file it opened, mapped and open, and would go on reading the
//! old file and committing to it, and its commits would be lost. LMDB's lock file tells: every
//! process that has the environment open holds a shared fcntl lock on the file's first byte,
//! which the first opener takes exclusively while it sets the lock table up (mdb.c
//! `mdb_env_excl_lock`, `mdb_env_share_locks`). So compaction takes that lock exclusively
//! without waiting, and refuses when any process has the environment open. While compaction
//! holds it, a process that opens the environment waits for the shared lock (LMDB asks with
//! F_SETLKW).
//!
//! The copy is made through an environment opened with MDB_NOLOCK, which leaves the lock file
//! alone (fcntl keeps one lock per process and file, so an ordinary open in this process would
//! turn the exclusive lock into a shared one and let others in), written beside `data.mdb`,
//! synced, checked (`page_walk`) and renamed over it. The lock table is then set up again by
//! an ordinary open, which this process makes as the first opener: a compacted copy numbers
//! its commit 1, and a process reading the old table's txnid would take the copy's other meta
//! page, which holds an empty database. That open shares the lock, which lets the waiting
//! processes in, and its close releases it. The lock file is emptied before the rename, so
//! that were that open to fail, a waiting process would fail to open (MDB_INVALID) rather than
//! use the old table.
//!
//! A process opening the environment read-only opens the data file before it waits for the
//! lock (mdb.c `mdb_env_open`), so it may hold the old file when compaction renames the new
//! one into place: `LmdbBackend::open` opens again when the data file changed during the open.

use std::fs::{File, OpenOptions};
use std::path::Path;

use heed::{CompactionOption, EnvFlags, EnvOpenOptions};

use super::{open_stores, page_walk, StoreOptions, DATA_FILE, LOCK_FILE};
use crate::store::error::{out_of_space, StoreError};
use crate::store::Store;

/// The copy is written as `data.mdb.compact-PID`.
const COPY_PREFIX: &str = "data.mdb.compact-";

/// What `Store::compact` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactReport {
    /// The database's directory.
    pub location: String,
    /// The data file's size before and after, in bytes.
    pub size_before: u64,
    pub size_after: u64,
}

impl Store {
    /// Rewrites the embedded store in directory `location` without its free pages, in place.
    /// Refused while any process (this one included) has the database open; a process that
    /// opens it meanwhile waits until it is done. The data file is walked (`page_walk`) before
    /// it is copied, so a damaged one is `StoreError::Damaged` and is left as it is.
    pub fn compact(location: &str) -> Result<CompactReport, StoreError> {
        if super::super::postgres::is_url(location) {
            return Err(StoreError::Storage {
                message: "copal compact applies to the embedded store: PostgreSQL reclaims the space of deleted rows \
                          with VACUUM (VACUUM FULL gives it back to the file system)"
                    .to_owned(),
            });
        }
        let path = Path::new(location);
        if !path.join(DATA_FILE).is_file() {
            return Err(StoreError::Storage { message: format!("{} holds no copal database to compact", path.display()) });
        }
        let dir = path.canonicalize().map_err(|e| storage(path, "cannot resolve the directory", e))?;
        // Held throughout: no open of this process may begin meanwhile.
        let open = open_stores().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if open.get(&dir).is_some_and(|store| store.strong_count() > 0) {
            return Err(StoreError::Storage {
                message: format!(
                    "{} is open in this process: close every Database on it before compacting it",
                    dir.display()
                ),
            });
        }
        let Some(excluded) = exclude_openers(&dir.join(LOCK_FILE))? else {
            return Err(StoreError::Storage {
                message: format!(
                    "{} is open in another process: compacting replaces its data file, and a process that has it \
                     open would go on using the old one and lose its commits. Stop the programs using the \
                     database, then compact it",
                    dir.display()
                ),
            });
        };
        let report = compact_excluded(&dir, &excluded);
        drop(excluded);
        drop(open);
        report
    }
}

fn storage(path: &Path, what: &str, error: impl std::fmt::Display) -> StoreError {
    StoreError::Storage { message: format!("compacting {}: {what}: {error}", path.display()) }
}

/// The exclusive lock of the byte of LMDB's lock file that every opener locks (see the module's
/// documentation); released when dropped, by closing the file.
struct Excluded {
    lock_file: File,
}

/// Locks out every opener of the environment whose lock file is `lock_file`; None when a
/// process has the environment open.
#[cfg(unix)]
fn exclude_openers(lock_file: &Path) -> Result<Option<Excluded>, StoreError> {
    use std::os::fd::AsRawFd;

    // Created if missing, as LMDB creates it (with its mode).
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(lock_file)
    }
    .map_err(|e| storage(lock_file, "cannot open LMDB's lock file", e))?;
    // SAFETY: flock is a plain C struct, for which all zeroes is a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = 0;
    lock.l_len = 1;
    loop {
        // SAFETY: the descriptor is open (owned by `file`) and `lock` is a valid flock.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) } == 0 {
            return Ok(Some(Excluded { lock_file: file }));
        }
        let error = std::io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EACCES | libc::EAGAIN) => return Ok(None),
            _ => return Err(storage(lock_file, "cannot lock LMDB's lock file", error)),
        }
    }
}

#[cfg(not(unix))]
fn exclude_openers(_lock_file: &Path) -> Result<Option<Excluded>, StoreError> {
    Err(StoreError::Storage { message: "copal compact needs the file locks of a Unix system".to_owned() })
}

/// Compacts the data file of `dir` while `excluded` keeps every other opener out.
fn compact_excluded(dir: &Path, excluded: &Excluded) -> Result<CompactReport, StoreError> {
    let data = dir.join(DATA_FILE);
    let size_before = std::fs::metadata(&data).map_err(|e| storage(dir, "cannot read the data file", e))?.len();
    // Copies left by compactions that were killed: no other can be running.
    let entries = std::fs::read_dir(dir).map_err(|e| storage(dir, "cannot list the directory", e))?;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(COPY_PREFIX) {
            std::fs::remove_file(entry.path()).map_err(|e| storage(dir, "cannot remove an earlier partial copy", e))?;
        }
    }
    page_walk::check(&data)?;
    let copy = dir.join(format!("{COPY_PREFIX}{}", std::process::id()));
    let size_after = match write_copy(dir, &data, &copy) {
        Ok(size) => size,
        Err(error) => {
            let _ = std::fs::remove_file(&copy);
            return Err(error);
        }
    };
    if let Err(error) = excluded.lock_file.set_len(0) {
        let _ = std::fs::remove_file(&copy);
        return Err(storage(dir, "cannot reset LMDB's lock file", error));
    }
    let renamed = std::fs::rename(&copy, &data).map_err(|e| storage(dir, "cannot move the compacted copy into place", e));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&copy);
    }
    // The rename is durable once the directory holding it is synced.
    let synced = renamed.and_then(|()| {
        File::open(dir).and_then(|handle| handle.sync_all()).map_err(|e| storage(dir, "cannot sync the directory", e))
    });
    // For the data file in place, the copy or (when the rename failed) the original.
    set_up_lock_table(dir)?;
    synced?;
    Ok(CompactReport { location: dir.display().to_string(), size_before, size_after })
}

/// Writes the compacted copy of `data` to `copy`, synced and checked, with `data`'s
/// permissions; its size.
fn write_copy(dir: &Path, data: &Path, copy: &Path) -> Result<u64, StoreError> {
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options.map_size(StoreOptions::default().map_size);
    // SAFETY: NO_LOCK leaves synchronisation to the caller, which holds every other opener
    // out; READ_ONLY refuses writes.
    unsafe { options.flags(EnvFlags::NO_LOCK | EnvFlags::READ_ONLY) };
    // SAFETY: no other process has the environment open, nor may open it meanwhile, and this
    // process opens it nowhere else (`open_stores` is held).
    let env = unsafe { options.open(dir) }?;
    let copied = env.copy_to_path(copy, CompactionOption::Enabled);
    env.prepare_for_closing().wait();
    let file = copied.map_err(|e| {
        let full = out_of_space(&e, None);
        storage(dir, if full { "no space left on device for the copy" } else { "the copy failed" }, StoreError::from(e))
    })?;
    file.sync_all().map_err(|e| storage(dir, "cannot sync the copy", e))?;
    let permissions = std::fs::metadata(data).map_err(|e| storage(dir, "cannot read the data file", e))?.permissions();
    std::fs::set_permissions(copy, permissions).map_err(|e| storage(dir, "cannot set the copy's permissions", e))?;
    page_walk::check(copy)?;
    Ok(file.metadata().map_err(|e| storage(dir, "cannot read the copy", e))?.len())
}

/// Opens and closes the environment as its first opener, which sets the lock table up from the
/// compacted file and lets waiting openers in.
fn set_up_lock_table(dir: &Path) -> Result<(), StoreError> {
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options.map_size(StoreOptions::default().map_size).max_readers(StoreOptions::default().max_readers);
    // SAFETY: READ_ONLY refuses writes.
    unsafe { options.flags(EnvFlags::READ_ONLY) };
    // SAFETY: the file is LMDB's own, complete and checked; nothing else writes it meanwhile.
    let env = unsafe { options.open(dir) }?;
    env.prepare_for_closing().wait();
    Ok(())
}
