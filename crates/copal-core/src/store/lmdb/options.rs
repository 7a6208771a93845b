//! The options of an embedded store, and the check that a second open of a directory in one
//! process asks for the options its environment was opened with.

use std::path::Path;

use crate::store::PoolLimits;

#[derive(Debug, Clone, PartialEq)]
pub struct StoreOptions {
    /// Address space reserved for the map. The file itself only grows as data is written, so the
    /// default reserves a terabyte of virtual memory and the database never has to be resized.
    pub map_size: usize,
    pub max_readers: u32,
    /// fsync at every commit (LMDB's default). Without it a machine crash may lose the last
    /// commits, but never corrupts the database.
    pub durable: bool,
    /// How many commits the commit log keeps for cache invalidation; a connection that falls
    /// further behind drops its whole cache.
    pub log_retention: u64,
    /// A PostgreSQL store's connections: how many may be open at once, how long a transaction
    /// waits for one. Unused by the embedded store.
    pub pool: PoolLimits,
    /// Opens an existing embedded store for reading only (LMDB's MDB_RDONLY): nothing is created
    /// or written, so it opens on read-only media, and every commit fails with
    /// `StoreError::ReadOnly`.
    pub read_only: bool,
    /// Whether the open walks the data file's pages with ordinary reads before LMDB reads them
    /// through its map (`page_walk`), so that a damaged file is `StoreError::Damaged` rather
    /// than a crash of the process.
    pub check_pages: PageCheck,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            map_size: 1 << 40,
            max_readers: 1022,
            durable: true,
            log_retention: 100_000,
            pool: Default::default(),
            read_only: false,
            check_pages: PageCheck::default(),
        }
    }
}

/// When an open walks the data file's pages (`StoreOptions::check_pages`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PageCheck {
    /// Data files up to `PageCheck::SMALL` bytes.
    #[default]
    Small,
    Always,
    Never,
}

impl PageCheck {
    /// The largest data file an open walks by default: 16 MiB, walked in about 8 ms from the
    /// page cache (docs/explanation/safety.md "Damaged and truncated files"), so that opening a
    /// small database stays cheap; larger files are walked when asked (`Always`).
    pub const SMALL: u64 = 16 << 20;

    pub(super) fn applies_to(self, data_file: &Path) -> bool {
        match self {
            PageCheck::Always => true,
            PageCheck::Never => false,
            PageCheck::Small => std::fs::metadata(data_file).is_ok_and(|meta| meta.len() <= Self::SMALL),
        }
    }
}

fn python_bool(value: bool) -> String {
    if value { "True" } else { "False" }.to_owned()
}

impl StoreOptions {
    /// The first option whose value differs between `self` and `other`: its name and both
    /// values.
    pub(super) fn first_difference(&self, other: &StoreOptions) -> Option<(&'static str, String, String)> {
        // `pool` is PostgreSQL's only: an embedded store has no connections to limit. The page
        // check is done by the first open, and `Store::verify` does it again.
        let StoreOptions { map_size, max_readers, durable, log_retention, pool: _, read_only, check_pages: _ } = self;
        let pairs = [
            ("map_size", map_size.to_string(), other.map_size.to_string()),
            ("max_readers", max_readers.to_string(), other.max_readers.to_string()),
            // Spelled as the Python argument is (`copal.open(path, durable=False)`).
            ("durable", python_bool(*durable), python_bool(other.durable)),
            ("log_retention", log_retention.to_string(), other.log_retention.to_string()),
            ("readonly", python_bool(*read_only), python_bool(other.read_only)),
        ];
        pairs.into_iter().find(|(_, mine, theirs)| mine != theirs)
    }
}
