//! Where a PostgreSQL URL connects, completed as libpq completes it, so that the settings people
//! already use for `psql` work for copal too: options the URL leaves out come from the
//! connection service named by `?service=` or `PGSERVICE` (a section of `PGSERVICEFILE`, else
//! `~/.pg_service.conf`), then from the environment (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
//! `PGDATABASE`), then from libpq's defaults (localhost, port 5432, the user's login name); a
//! password still missing comes from the password file (`PGPASSFILE`, else `~/.pgpass`).
//!
//! TLS is set up as libpq does too, from `sslmode` and `sslrootcert` (URL, service, then
//! `PGSSLMODE`, `PGSSLROOTCERT`): see `Tls`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Mutex;

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use postgres::config::{Host, SslMode};
use postgres::tls::{MakeTlsConnect, TlsConnect};
use postgres::Config;
use postgres_openssl::MakeTlsConnector;
use tokio::io::{AsyncRead, AsyncWrite};

use super::error::StoreError;

/// How connections are secured, from libpq's `sslmode` (default `prefer`) and `sslrootcert`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tls {
    /// `disable`: plain text.
    Off,
    /// `prefer` and `allow`: TLS when the server offers it, else plain text; the server's
    /// certificate is not checked (libpq's `allow` tries plain text first; copal tries TLS).
    Prefer,
    /// `require`: TLS or no connection; the certificate is not checked (it protects against
    /// eavesdropping, not against a server that impersonates another).
    Require,
    /// `verify-ca` (`check_host` false) and `verify-full`: TLS with the server's certificate
    /// checked against the authorities in `root` (a PEM file; None: the system's, for
    /// `sslrootcert=system`), and for `verify-full` its host name too.
    Verify { root: Option<PathBuf>, check_host: bool },
}

impl Tls {
    /// The OpenSSL connector for these settings, built once per process: building one loads the
    /// system's certificate authorities (about 60 ms here), whether they are used or not.
    fn connector(&self) -> Result<MakeTlsConnector, StoreError> {
        static BUILT: Mutex<Vec<(Tls, MakeTlsConnector)>> = Mutex::new(Vec::new());
        let mut built = BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, connector)) = built.iter().find(|(tls, _)| tls == self) {
            return Ok(connector.clone());
        }
        let connector = self.build_connector()?;
        built.push((self.clone(), connector.clone()));
        Ok(connector)
    }

    fn build_connector(&self) -> Result<MakeTlsConnector, StoreError> {
        let failed = |e: openssl::error::ErrorStack| StoreError::Storage { message: format!("PostgreSQL TLS setup: {e}") };
        let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(failed)?;
        let mut check_host = false;
        match self {
            Tls::Off | Tls::Prefer | Tls::Require => builder.set_verify(SslVerifyMode::NONE),
            Tls::Verify { root, check_host: host } => {
                if let Some(root) = root {
                    builder.set_ca_file(root).map_err(|e| StoreError::Storage {
                        message: format!("PostgreSQL TLS: cannot read the root certificates in {}: {e}", root.display()),
                    })?;
                }
                check_host = *host;
            }
        }
        let mut connector = MakeTlsConnector::new(builder.build());
        connector.set_callback(move |connection, _| {
            connection.set_verify_hostname(check_host);
            Ok(())
        });
        Ok(connector)
    }
}

/// Secures connections as its `Tls` says, building the OpenSSL connector on the first TLS
/// handshake rather than for every pool: a connection to a server without TLS (`prefer`, the
/// default) never needs one, and would otherwise pay for loading the certificate authorities.
#[derive(Clone)]
pub(crate) struct LazyTls(pub(crate) Tls);

/// The handshake of one connection to `domain`, for `LazyTls`.
pub(crate) struct LazyHandshake {
    tls: Tls,
    domain: String,
}

impl<S> MakeTlsConnect<S> for LazyTls
where
    S: AsyncRead + AsyncWrite + Unpin + Debug + Send + Sync + 'static,
{
    type Stream = postgres_openssl::TlsStream<S>;
    type TlsConnect = LazyHandshake;
    type Error = Infallible;

    fn make_tls_connect(&mut self, domain: &str) -> Result<LazyHandshake, Infallible> {
        Ok(LazyHandshake { tls: self.0.clone(), domain: domain.to_owned() })
    }
}

impl<S> TlsConnect<S> for LazyHandshake
where
    S: AsyncRead + AsyncWrite + Unpin + Debug + Send + Sync + 'static,
{
    type Stream = postgres_openssl::TlsStream<S>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, Self::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let handshake = self.tls.connector().map_err(Self::Error::from).and_then(|mut connector| {
            MakeTlsConnect::<S>::make_tls_connect(&mut connector, &self.domain).map_err(Self::Error::from)
        });
        match handshake {
            Ok(handshake) => handshake.connect(stream),
            Err(error) => Box::pin(std::future::ready(Err(error))),
        }
    }
}

/// The connection settings of `url`; `env` reads an environment variable (a parameter so tests
/// need not change the process's environment).
pub(crate) fn connection_config(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<(Config, Tls), StoreError> {
    let invalid = |message: String| StoreError::Storage { message: format!("invalid PostgreSQL URL {}: {message}", super::postgres::without_password(url)) };
    let (url, mut taken) = take_params(url, &["service", "sslmode", "sslrootcert"]);
    let mut config: Config = url.parse().map_err(|e| invalid(format!("{e}")))?;
    if let Some(service) = taken.remove("service").or_else(|| env("PGSERVICE")) {
        let settings = service_settings(&service, env)?;
        complete(&mut config, &|name| settings.get(name).cloned());
        for name in ["sslmode", "sslrootcert"] {
            if let Some(value) = settings.get(name) {
                taken.entry(name.to_owned()).or_insert_with(|| value.clone());
            }
        }
    }
    let from_env = |variable| env(variable).filter(|value: &String| !value.is_empty());
    let tls = tls_settings(
        taken.remove("sslmode").or_else(|| from_env("PGSSLMODE")).as_deref(),
        taken.remove("sslrootcert").or_else(|| from_env("PGSSLROOTCERT")),
        env,
    )?;
    config.ssl_mode(match tls {
        Tls::Off => SslMode::Disable,
        Tls::Prefer => SslMode::Prefer,
        Tls::Require | Tls::Verify { .. } => SslMode::Require,
    });
    complete(&mut config, &|name| {
        let variable = match name {
            "host" => "PGHOST",
            "port" => "PGPORT",
            "user" => "PGUSER",
            "password" => "PGPASSWORD",
            "dbname" => "PGDATABASE",
            _ => return None,
        };
        env(variable).filter(|value| !value.is_empty())
    });
    complete(&mut config, &|name| match name {
        "host" => Some("localhost".to_owned()),
        "user" => env("USER").or_else(|| env("LOGNAME")),
        _ => None,
    });
    if config.get_ports().contains(&0) {
        return Err(invalid("port 0".to_owned()));
    }
    if config.get_password().is_none() {
        if let Some(password) = password_file_entry(&config, env) {
            config.password(password);
        }
    }
    Ok((config, tls))
}

/// The password of the first line of the password file (`PGPASSFILE`, else `~/.pgpass`) whose
/// `host:port:database:user` matches `config`, as libpq finds it: `*` matches anything, a
/// backslash escapes `:` or itself, lines starting with `#` are comments. As libpq does, a file that its
/// group or others may read is ignored (it would leak the passwords it holds).
fn password_file_entry(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let file = env("PGPASSFILE").map(PathBuf::from).or_else(|| env("HOME").map(|home| PathBuf::from(home).join(".pgpass")))?;
    if !private_file(&file) {
        return None;
    }
    let text = std::fs::read_to_string(&file).ok()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(_)) | None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = config.get_user().unwrap_or_default();
    // libpq's default database is the user's name.
    let database = config.get_dbname().unwrap_or(user);
    let wanted = [host.as_str(), port.as_str(), database, user];
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let fields = password_file_fields(line);
        let matches = fields.len() == 5 && fields.iter().zip(wanted).all(|(field, value)| field == "*" || field == value);
        matches.then(|| fields[4].clone())
    })
}

/// The `:`-separated fields of a password file line, unescaped (the fifth, the password, may
/// hold `:`).
fn password_file_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => field.extend(chars.next()),
            ':' if fields.len() < 4 => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[cfg(unix)]
fn private_file(file: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(file).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o077 == 0)
}

#[cfg(not(unix))]
fn private_file(file: &std::path::Path) -> bool {
    file.is_file()
}

/// `url` without the query parameters `names` (which the URL parser does not know, or knows
/// only in part), and their values.
fn take_params(url: &str, names: &[&str]) -> (String, HashMap<String, String>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), HashMap::new()) };
    let mut taken = HashMap::new();
    let rest: Vec<&str> = query
        .split('&')
        .filter(|param| match param.split_once('=') {
            Some((name, value)) if names.contains(&name) => {
                taken.insert(name.to_owned(), value.to_owned());
                false
            }
            _ => true,
        })
        .collect();
    let url = if rest.is_empty() { base.to_owned() } else { format!("{base}?{}", rest.join("&")) };
    (url, taken)
}

/// The TLS settings of libpq's `mode` and `root` (`sslrootcert`; default
/// `~/.postgresql/root.crt`, as libpq's).
fn tls_settings(mode: Option<&str>, root: Option<String>, env: &dyn Fn(&str) -> Option<String>) -> Result<Tls, StoreError> {
    let check_host = match mode {
        Some("disable") => return Ok(Tls::Off),
        None | Some("allow" | "prefer") => return Ok(Tls::Prefer),
        Some("require") => return Ok(Tls::Require),
        Some("verify-ca") => false,
        Some("verify-full") => true,
        Some(other) => {
            return Err(StoreError::Storage {
                message: format!(
                    "PostgreSQL: invalid sslmode {other:?} (disable, allow, prefer, require, verify-ca or verify-full)"
                ),
            })
        }
    };
    let root = match root {
        Some(root) if root == "system" => None,
        Some(root) => Some(PathBuf::from(root)),
        None => Some(env("HOME").map(PathBuf::from).unwrap_or_default().join(".postgresql/root.crt")),
    };
    if let Some(file) = root.as_ref().filter(|file| !file.is_file()) {
        return Err(StoreError::Storage {
            message: format!(
                "PostgreSQL: sslmode={} checks the server's certificate, but the root certificate file {} does not \
                 exist: set sslrootcert to a PEM file of the authorities to trust, or to 'system'",
                mode.unwrap_or_default(),
                file.display()
            ),
        });
    }
    Ok(Tls::Verify { root, check_host })
}

/// Sets the options that `config` lacks from `source(option name)`.
fn complete(config: &mut Config, source: &dyn Fn(&str) -> Option<String>) {
    if config.get_hosts().is_empty() {
        if let Some(host) = source("host") {
            config.host(&host);
        }
    }
    if config.get_ports().is_empty() {
        if let Some(port) = source("port").and_then(|p| p.parse::<u16>().ok()) {
            config.port(port);
        }
    }
    if config.get_user().is_none() {
        if let Some(user) = source("user") {
            config.user(&user);
        }
    }
    if config.get_password().is_none() {
        if let Some(password) = source("password") {
            config.password(password);
        }
    }
    if config.get_dbname().is_none() {
        if let Some(dbname) = source("dbname") {
            config.dbname(&dbname);
        }
    }
}

/// The settings of connection service `name` (a `[name]` section of `key=value` lines).
fn service_settings(name: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<HashMap<String, String>, StoreError> {
    let file = env("PGSERVICEFILE").map(PathBuf::from).or_else(|| env("HOME").map(|home| PathBuf::from(home).join(".pg_service.conf")));
    let not_found = |why: String| StoreError::Storage { message: format!("PostgreSQL connection service {name:?}: {why}") };
    let Some(file) = file else { return Err(not_found("no service file (set PGSERVICEFILE)".to_owned())) };
    let text = std::fs::read_to_string(&file).map_err(|e| not_found(format!("cannot read {}: {e}", file.display())))?;
    let mut in_section = false;
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_section = section.trim() == name;
            if in_section {
                found.get_or_insert_with(HashMap::new);
            }
        } else if in_section {
            if let Some((key, value)) = line.split_once('=') {
                found.get_or_insert_with(HashMap::new).insert(key.trim().to_owned(), value.trim().to_owned());
            }
        }
    }
    found.ok_or_else(|| not_found(format!("no [{name}] section in {}", file.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| pairs.get(name).cloned()
    }

    fn host(config: &Config) -> String {
        match &config.get_hosts()[0] {
            Host::Tcp(host) => host.clone(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn the_url_wins_then_the_environment_then_the_defaults() {
        let env = env_of(&[("PGHOST", "envhost"), ("PGPORT", "6000"), ("PGUSER", "envuser"), ("PGDATABASE", "envdb"), ("USER", "login")]);
        let config = connection_config("postgresql://urluser@urlhost:5555/urldb", &env).unwrap().0;
        assert_eq!((host(&config), config.get_ports(), config.get_user(), config.get_dbname()), ("urlhost".into(), &[5555][..], Some("urluser"), Some("urldb")));
        let config = connection_config("postgresql://", &env).unwrap().0;
        assert_eq!((host(&config), config.get_ports(), config.get_user(), config.get_dbname()), ("envhost".into(), &[6000][..], Some("envuser"), Some("envdb")));
        let config = connection_config("postgres://", &env_of(&[("USER", "login")])).unwrap().0;
        assert_eq!((host(&config), config.get_user()), ("localhost".into(), Some("login")));
    }

    #[test]
    fn a_service_fills_what_the_url_leaves_out_before_the_environment() {
        let dir = std::env::temp_dir().join(format!("copal-pg-service-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pg_service.conf");
        std::fs::write(&file, "# services\n[other]\nhost=wrong\n\n[copal]\nhost = svchost\nport=7000\ndbname=svcdb\n").unwrap();
        let file_name = file.display().to_string();
        let env = env_of(&[("PGSERVICEFILE", &file_name), ("PGHOST", "envhost"), ("PGUSER", "envuser")]);
        let config = connection_config("postgresql:///urldb?service=copal", &env).unwrap().0;
        assert_eq!((host(&config), config.get_ports(), config.get_user(), config.get_dbname()), ("svchost".into(), &[7000][..], Some("envuser"), Some("urldb")));
        std::fs::write(&file, "[tls]\nhost=svchost\nsslmode=require\n").unwrap();
        assert_eq!(connection_config("postgresql://?service=tls", &env).unwrap().1, Tls::Require);
        let missing = connection_config("postgresql://?service=nope", &env).unwrap_err();
        assert!(missing.to_string().contains("no [nope] section"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    #[cfg(unix)]
    fn a_missing_password_comes_from_the_first_matching_line_of_a_private_password_file() {
        let dir = std::env::temp_dir().join(format!("copal-pgpass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:*:wrong\ndb.example:5433:shop:app:not-this-port\n\
             db.example:*:shop:app:se\\:cr:et\\\\\n*:*:*:*:fallback\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let env = env_of(&[("PGPASSFILE", file.to_str().unwrap())]);
        let password = |url: &str| connection_config(url, &env).unwrap().0.get_password().map(<[u8]>::to_vec);
        assert_eq!(password("postgresql://app@db.example:5432/shop"), Some(b"se:cr:et\\".to_vec()));
        assert_eq!(password("postgresql://bob@elsewhere/x"), Some(b"fallback".to_vec()));
        // The URL's password wins; a file that others may read is ignored, as libpq does.
        assert_eq!(password("postgresql://app:given@db.example/shop"), Some(b"given".to_vec()));
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        assert_eq!(password("postgresql://app@db.example/shop"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn other_query_parameters_stay() {
        let (url, taken) = take_params("postgresql://h/db?connect_timeout=5&service=s&application_name=x", &["service"]);
        assert_eq!((url.as_str(), taken.get("service").map(String::as_str)), ("postgresql://h/db?connect_timeout=5&application_name=x", Some("s")));
    }

    #[test]
    fn tls_comes_from_sslmode_in_the_url_the_service_or_the_environment() {
        let tls = |url: &str, env: &[(&str, &str)]| connection_config(url, &env_of(env)).map(|(_, tls)| tls);
        assert_eq!(tls("postgresql://h/db", &[]).unwrap(), Tls::Prefer);
        assert_eq!(tls("postgresql://h/db?sslmode=require&connect_timeout=5", &[]).unwrap(), Tls::Require);
        assert_eq!(tls("postgresql://h/db", &[("PGSSLMODE", "disable")]).unwrap(), Tls::Off);
        // The URL's mode comes before the environment's, as with libpq.
        assert_eq!(tls("postgresql://h/db?sslmode=require", &[("PGSSLMODE", "disable")]).unwrap(), Tls::Require);
        assert_eq!(
            tls("postgresql://h/db?sslmode=verify-full&sslrootcert=system", &[]).unwrap(),
            Tls::Verify { root: None, check_host: true }
        );
        let error = tls("postgresql://h/db", &[("PGSSLMODE", "verify-ca"), ("HOME", "/nonexistent")]).unwrap_err();
        assert!(error.to_string().contains("/nonexistent/.postgresql/root.crt does not exist"), "{error}");
        let error = tls("postgresql://h/db?sslmode=sometimes", &[]).unwrap_err();
        assert!(error.to_string().contains("invalid sslmode"), "{error}");
    }
}
