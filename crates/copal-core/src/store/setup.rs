//! Creating a database explicitly and upgrading its layout (`copal init`, `copal upgrade`), for
//! either store. Opening a database creates it too; `init` is for deployments that create the
//! tables ahead of time (and want to be told what was created), `upgrade` the one way to migrate.

use std::path::Path;

use super::error::StoreError;
use super::pg_schema::Goal;
use super::{lmdb, postgres, Backend, Store, StoreOptions};

/// What `Store::init` or `Store::upgrade` found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationReport {
    /// The database: its directory, or its URL without the password.
    pub location: String,
    /// The layout version before: 0 when there was no database.
    pub from_version: u32,
    /// The layout version now (this copal's).
    pub to_version: u32,
    /// What each migration step applied did, in order; empty when there was nothing to do.
    pub steps: Vec<String>,
    /// What was created: the tables (PostgreSQL), or the directory (embedded store).
    pub created: Vec<String>,
}

impl Store {
    /// Creates copal's tables in the PostgreSQL database at URL `location`, or the embedded
    /// database in directory `location`, unless they exist (then it does nothing). A database
    /// of an older layout is refused with a message naming `copal upgrade`.
    pub fn init(location: &str) -> Result<MigrationReport, StoreError> {
        if postgres::is_url(location) {
            return postgres::migrate(location, Goal::Create);
        }
        let path = Path::new(location);
        let existed = holds_lmdb_store(path);
        lmdb::open(path, StoreOptions::default())?;
        let version = lmdb::STORE_FORMAT;
        let location = path.display().to_string();
        Ok(if existed {
            MigrationReport { location, from_version: version, to_version: version, ..MigrationReport::default() }
        } else {
            MigrationReport {
                created: vec![location.clone()],
                location,
                from_version: 0,
                to_version: version,
                steps: vec!["created the embedded database".to_owned()],
            }
        })
    }

    /// Migrates the database at `location` from an older layout version to this copal's, in one
    /// transaction; a database already current is left as it is. Refuses a location without a
    /// copal database (`init` creates one) and a layout newer than this copal knows. The
    /// embedded store migrates its layout when it opens, so for it this opens the database and
    /// reports the migration that open did (none when another open of this process did it).
    pub fn upgrade(location: &str) -> Result<MigrationReport, StoreError> {
        if postgres::is_url(location) {
            return postgres::migrate(location, Goal::Upgrade);
        }
        let path = Path::new(location);
        if !holds_lmdb_store(path) {
            return Err(StoreError::Storage {
                message: format!(
                    "{} holds no copal database to upgrade: `copal init {location}` (copal.init) creates one",
                    path.display()
                ),
            });
        }
        let store = lmdb::open(path, StoreOptions::default())?;
        let version = lmdb::STORE_FORMAT;
        let from_version = match &store.backend {
            Backend::Lmdb(lmdb) => lmdb.found_format,
            Backend::Postgres(_) => version,
        };
        let steps = if from_version < version {
            vec![format!("moved every record into a table of its class (store format {from_version} to {version})")]
        } else {
            Vec::new()
        };
        let location = path.display().to_string();
        Ok(MigrationReport { location, from_version, to_version: version, steps, created: Vec::new() })
    }
}

/// Whether directory `path` holds an embedded store (LMDB's data file).
fn holds_lmdb_store(path: &Path) -> bool {
    path.join("data.mdb").is_file()
}
