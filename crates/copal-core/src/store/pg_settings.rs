//! Where a PostgreSQL URL connects, completed as libpq completes it, so that the settings people
//! already use for `psql` work for copal too: options the URL leaves out come from the
//! connection service named by `?service=` or `PGSERVICE` (a section of `PGSERVICEFILE`, else
//! `~/.pg_service.conf`), then from the environment (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
//! `PGDATABASE`), then from libpq's defaults (localhost, port 5432, the user's login name).

use std::collections::HashMap;
use std::path::PathBuf;

use postgres::Config;

use super::error::StoreError;

/// The connection settings of `url`; `env` reads an environment variable (a parameter so tests
/// need not change the process's environment).
pub(crate) fn connection_config(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, StoreError> {
    let invalid = |message: String| StoreError::Storage { message: format!("invalid PostgreSQL URL {}: {message}", super::postgres::without_password(url)) };
    let (url, service) = take_service(url);
    let mut config: Config = url.parse().map_err(|e| invalid(format!("{e}")))?;
    if let Some(service) = service.or_else(|| env("PGSERVICE")) {
        let settings = service_settings(&service, env)?;
        complete(&mut config, &|name| settings.get(name).cloned());
    }
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
    if config.get_ports().iter().any(|port| *port == 0) {
        return Err(invalid("port 0".to_owned()));
    }
    Ok(config)
}

/// `url` without its `service=` query parameter (which the URL parser does not know), and the
/// service's name.
fn take_service(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), None) };
    let mut service = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|param| match param.strip_prefix("service=") {
            Some(name) => {
                service = Some(name.to_owned());
                false
            }
            None => true,
        })
        .collect();
    let url = if rest.is_empty() { base.to_owned() } else { format!("{base}?{}", rest.join("&")) };
    (url, service)
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
    use postgres::config::Host;

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
        let config = connection_config("postgresql://urluser@urlhost:5555/urldb", &env).unwrap();
        assert_eq!((host(&config), config.get_ports(), config.get_user(), config.get_dbname()), ("urlhost".into(), &[5555][..], Some("urluser"), Some("urldb")));
        let config = connection_config("postgresql://", &env).unwrap();
        assert_eq!((host(&config), config.get_ports(), config.get_user(), config.get_dbname()), ("envhost".into(), &[6000][..], Some("envuser"), Some("envdb")));
        let config = connection_config("postgres://", &env_of(&[("USER", "login")])).unwrap();
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
        let config = connection_config("postgresql:///urldb?service=copal", &env).unwrap();
        assert_eq!((host(&config), config.get_ports(), config.get_user(), config.get_dbname()), ("svchost".into(), &[7000][..], Some("envuser"), Some("urldb")));
        let missing = connection_config("postgresql://?service=nope", &env).unwrap_err();
        assert!(missing.to_string().contains("no [nope] section"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn other_query_parameters_stay() {
        let (url, service) = take_service("postgresql://h/db?connect_timeout=5&service=s&application_name=x");
        assert_eq!((url.as_str(), service.as_deref()), ("postgresql://h/db?connect_timeout=5&application_name=x", Some("s")));
    }
}
