//! From the file as written to a [`Config`]: defaults, environment
//! overrides, paths, and every rule a value must keep. Each rule reports
//! into one list instead of returning early, so the user sees every problem
//! at once; a value that fails is replaced by its default so later rules
//! do not report follow-on noise about it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::raw::{DurationText, IntOrText, RawConfig, RawController, RawDatabase, RawDir};
use super::units::{line_of, parse_duration, parse_size, parse_u64, show_size};
use super::{
    Config, ControllerConfig, DEFAULT_GUEST_DIR, DEFAULT_LISTEN, DatabaseConfig, DirConfig,
    Environment, GUEST_DIR_ENV, GUEST_DIR_PLACEHOLDER, HttpConfig, MAX_BACKOFF,
    MAX_DATABASE_CONNECTIONS, MAX_DIRS, MAX_GUEST_MEMORY_BYTES, MAX_GUEST_PATH_BYTES,
    MAX_LEASE_TTL, MAX_RECONCILE_DEADLINE, MAX_TOKEN_BYTES, MIN_GUEST_MEMORY_BYTES, MIN_LEASE_TTL,
    Problem, RuntimeConfig, StoreConfig, TelemetryConfig, default_holder,
};
use crate::authority::{CrashDetection, LeaseTiming};
use crate::limits::{
    DEFAULT_CREATE_BURST, DEFAULT_CREATES_PER_SECOND, DEFAULT_OBJECTS_PER_KIND, GUEST_MEMORY_BYTES,
    MAX_CONTROLLERS, MAX_CREATE_BURST, MAX_CREATES_PER_SECOND, MAX_HTTP_ALLOW_ENTRIES,
    MAX_OBJECTS_PER_KIND, WORK_QUEUE_KEYS,
};
use crate::limits::{
    GUEST_INSTANCES, GUEST_MEMORIES, GUEST_TABLES, MAX_GUEST_INSTANCES, MAX_GUEST_MEMORIES,
    MAX_GUEST_TABLES,
};
use crate::names::{check_holder, check_label};
use crate::outbound::{AllowEntry, AllowList};
use crate::quota::QuotaLimits;
use crate::timeouts;

/// The problem the TOML reader stopped at, with its line, column and key
/// (`http.token`) so the user sees where, but never the text of the line:
/// the line may hold a password or the token, and a value the reader
/// quotes in its message is cut out of it too (`invalid type: string
/// "...", expected i64` reads `invalid type: string, expected i64`).
pub(super) fn syntax_problem(text: &str, error: &toml::de::Error) -> Problem {
    let message = error.message().trim();
    let Some(span) = error.span() else {
        return Problem {
            line: None,
            message: crate::db::scrub(&super::without_quoted_value(message)),
        };
    };
    let offset = super::char_boundary_at_or_before(text, span.start);
    let line = line_of(text, offset);
    let place = super::SourcePlace::of(text, offset);
    // A span followed by `=` is a key, which the message may name (`unknown
    // field `x``); anything else is (part of) a value.
    // A misspelt table name (`[controllers.setings]`) is a key too, though
    // no `=` follows it: serde's "unknown field" quotes only keys.
    let names_a_key = message.starts_with("unknown field `")
        || text
            .get(span.end..)
            .is_some_and(|rest| rest.trim_start_matches([' ', '\t']).starts_with('='));
    let message = if names_a_key {
        message.to_string()
    } else {
        super::without_quoted_value(message)
    };
    let mut message = format!("{message} (column {}", place.column);
    if let Some(key) = &place.key {
        message.push_str(&format!(", key `{key}`"));
    }
    message.push(')');
    Problem {
        line: Some(line),
        message: crate::db::scrub(&message),
    }
}

/// Collects problems, each with the line of the value it is about.
struct Checker {
    /// Byte offset at which each line after the first starts, so a line
    /// lookup is a binary search (a file may hold thousands of entries).
    line_starts: Vec<usize>,
    problems: Vec<Problem>,
}

impl Checker {
    fn new(text: &str) -> Self {
        Self {
            line_starts: text
                .bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i + 1)
                .collect(),
            problems: Vec::new(),
        }
    }

    fn line<T>(&self, value: &Spanned<T>) -> usize {
        let offset = value.span().start;
        self.line_starts.partition_point(|&start| start <= offset) + 1
    }

    fn at<T>(&mut self, value: &Spanned<T>, message: impl Into<String>) {
        let line = Some(self.line(value));
        self.problems.push(Problem {
            line,
            message: message.into(),
        });
    }

    fn general(&mut self, message: impl Into<String>) {
        self.problems.push(Problem {
            line: None,
            message: message.into(),
        });
    }
}

pub(super) fn resolve(
    raw: RawConfig,
    text: &str,
    base_dir: &Path,
    env: &Environment,
) -> Result<Config, Vec<Problem>> {
    let mut c = Checker::new(text);

    let cluster = match &raw.cluster {
        None => {
            c.general(
                "`cluster` is required: name the cluster these controllers belong to, \
                 e.g. `cluster = \"demo\"` at the top of the file",
            );
            String::new()
        }
        Some(value) => {
            if let Err(e) = check_label("cluster", value.get_ref()) {
                c.at(value, e.to_string());
            }
            value.get_ref().clone()
        }
    };

    let holder = match (&env.holder, &raw.holder) {
        // The environment wins, like LEASEHOLD_DATABASE_URL over `url`.
        (Some(name), _) => {
            if let Err(e) = check_holder(name) {
                c.general(format!("{}: {e}", super::HOLDER_ENV));
            }
            name.clone()
        }
        (None, Some(value)) => {
            if let Err(e) = check_holder(value.get_ref()) {
                c.at(value, e.to_string());
            }
            value.get_ref().clone()
        }
        (None, None) => default_holder().to_string(),
    };

    let database = database(&mut c, &raw.database, env);
    let http = http(&mut c, &raw, base_dir);
    let default_detection = crash_detection(
        &mut c,
        "crash_detection",
        &raw.crash_detection,
        CrashDetection::default(),
    );
    let runtime = RuntimeConfig {
        pooling: raw.runtime.pooling.unwrap_or(true),
        cache_dir: raw.runtime.cache_dir.as_ref().and_then(|value| {
            if value.get_ref().trim().is_empty() {
                c.at(
                    value,
                    "runtime.cache_dir is empty; remove the key to disable the cache",
                );
                None
            } else {
                Some(absolute_in(base_dir, Path::new(value.get_ref())))
            }
        }),
    };

    let data_dir = match &raw.data_dir {
        Some(value) if value.get_ref().trim().is_empty() => {
            c.at(
                value,
                format!(
                    "data_dir is empty; remove it to use {:?} beside this file",
                    super::DEFAULT_DATA_DIR
                ),
            );
            base_dir.join(super::DEFAULT_DATA_DIR)
        }
        // Kept with a URL too (unused then): LEASEHOLD_DATABASE_URL may
        // point one config at PostgreSQL for a while.
        Some(value) => absolute_in(base_dir, Path::new(value.get_ref())),
        None => base_dir.join(super::DEFAULT_DATA_DIR),
    };
    let telemetry = telemetry(&mut c, &raw, env);
    let store = store(&mut c, &raw);
    let placement = placement(&mut c, &raw);

    if raw.controllers.len() > MAX_CONTROLLERS {
        c.general(format!(
            "{} controllers are configured; one host runs at most {MAX_CONTROLLERS}",
            raw.controllers.len()
        ));
    }
    let guest_dir = guest_dir(base_dir, env);
    let mut controllers = Vec::with_capacity(raw.controllers.len());
    let mut first_line_of_name: BTreeMap<String, usize> = BTreeMap::new();
    for (index, entry) in raw.controllers.iter().enumerate() {
        let controller = controller(
            &mut c,
            index,
            entry,
            base_dir,
            &guest_dir,
            default_detection,
        );
        if let Some(name) = entry.get_ref().name.as_ref() {
            let line = c.line(name);
            match first_line_of_name.get(name.get_ref()) {
                Some(first) => c.at(
                    name,
                    format!(
                        "controller name {:?} is already used on line {first}; names must be unique \
                         (each controller has its own lease)",
                        name.get_ref()
                    ),
                ),
                None => {
                    first_line_of_name.insert(name.get_ref().clone(), line);
                }
            }
        }
        controllers.push(controller);
    }
    lease_names_are_unique(&mut c, &raw.controllers, &controllers);
    let leases: usize = controllers
        .iter()
        .map(|c| c.shards.unwrap_or(1) as usize)
        .sum();
    if raw.controllers.len() <= MAX_CONTROLLERS && leases > MAX_CONTROLLERS {
        c.general(format!(
            "the controllers run {leases} leases with their shards; one host runs at most {MAX_CONTROLLERS}"
        ));
    }

    if !c.problems.is_empty() {
        // Problems with a line come in file order; file-wide ones first.
        c.problems.sort_by_key(|p| p.line.unwrap_or(0));
        return Err(c.problems);
    }
    Ok(Config {
        cluster,
        holder: Some(holder),
        database,
        http,
        runtime,
        telemetry,
        store,
        placement,
        controllers,
        data_dir,
        base_dir: base_dir.to_path_buf(),
    })
}

/// A `crash_detection` value (`key` names where it is, for the message);
/// on a problem, report it and use `default`.
fn crash_detection(
    c: &mut Checker,
    key: &str,
    raw: &Option<Spanned<String>>,
    default: CrashDetection,
) -> CrashDetection {
    let Some(value) = raw else {
        return default;
    };
    match CrashDetection::parse(value.get_ref().trim()) {
        Some(mode) => mode,
        None => {
            let allowed: Vec<String> = CrashDetection::ALL
                .iter()
                .map(|mode| format!("{:?}", mode.as_str()))
                .collect();
            c.at(
                value,
                format!(
                    "{key} is {:?}; it must be one of {}: \"session\" takes a dead host's \
                     leases over as soon as the database sees its session gone, \"ttl\" only \
                     once they expired",
                    value.get_ref(),
                    allowed.join(", ")
                ),
            );
            default
        }
    }
}

fn database(c: &mut Checker, raw: &RawDatabase, env: &Environment) -> DatabaseConfig {
    let mut config = DatabaseConfig {
        url: raw.url.as_ref().map(|u| u.get_ref().clone()),
        ..DatabaseConfig::default()
    };
    if let Some(value) = &raw.session_url {
        let url = value.get_ref();
        if url.trim().is_empty() {
            c.at(
                value,
                "database.session_url is empty; remove it to open the dedicated sessions at \
                 database.url",
            );
        } else if let Err(e) = crate::db::parse_syntax(url) {
            c.at(
                value,
                format!(
                    "database.session_url {} is not a PostgreSQL URL ({e}); write it like \
                     postgres://USER:PASSWORD@HOST:5432/DATABASE",
                    crate::db::redact(url),
                ),
            );
        } else if env.database_url.is_none()
            && raw
                .url
                .as_ref()
                .is_none_or(|u| u.get_ref().trim() == super::MEMORY_URL)
        {
            c.at(
                value,
                "database.session_url is set but database.url is not a PostgreSQL URL: the \
                 embedded and in-memory backends have no sessions; set database.url too, or \
                 remove session_url",
            );
        } else {
            config.session_url = Some(url.clone());
        }
    }
    let overridden = config.apply_url_override(env.database_url.clone());
    if let Some(url) = &config.url {
        let problem = if url.trim().is_empty() {
            Some(format!(
                "is empty; remove `url` to use the embedded backend, or write {:?} for the \
                 in-memory one",
                super::MEMORY_URL
            ))
        } else if url.trim() == super::MEMORY_URL {
            None
        } else {
            crate::db::parse_syntax(url).err().map(|e| {
                format!(
                    "{} is not a PostgreSQL URL ({e}); write it like \
                     postgres://USER:PASSWORD@HOST:5432/DATABASE",
                    crate::db::redact(url),
                )
            })
        };
        if let Some(problem) = problem {
            match (overridden, &raw.url) {
                (true, _) => c.general(format!(
                    "the database URL from {}: {problem}",
                    crate::db::URL_ENV
                )),
                (false, Some(value)) => c.at(value, format!("database.url {problem}")),
                (false, None) => c.general(format!("database.url {problem}")),
            }
        }
    }
    if let Some(value) = &raw.max_connections {
        let n = *value.get_ref();
        match usize::try_from(n) {
            Ok(n) if (1..=MAX_DATABASE_CONNECTIONS).contains(&n) => config.max_connections = n,
            _ => c.at(
                value,
                format!(
                    "database.max_connections is {n}; it must be between 1 and {MAX_DATABASE_CONNECTIONS}"
                ),
            ),
        }
    }
    if let Some(value) = &raw.expected_database_id {
        match uuid::Uuid::parse_str(value.get_ref().trim()) {
            Ok(id) => config.expected_database_id = Some(id),
            Err(e) => c.at(
                value,
                format!(
                    "database.expected_database_id {:?} is not a UUID ({e}); \
                     `leasehold migrate` prints the database id",
                    value.get_ref()
                ),
            ),
        }
    }
    if let Some(value) = &raw.expected_system_identifier {
        match parse_u64(value.get_ref()) {
            Ok(id) => config.expected_system_identifier = Some(id),
            Err(e) => c.at(
                value,
                format!(
                    "database.expected_system_identifier: {e}; \
                     `leasehold migrate` prints the system identifier"
                ),
            ),
        }
    }
    if let Some(value) = &raw.pooler {
        match value.get_ref().as_str() {
            "none" => config.pooler = crate::db::Pooler::None,
            "transaction" => config.pooler = crate::db::Pooler::Transaction,
            other => c.at(
                value,
                format!(
                    "database.pooler is {other:?}; it must be \"none\" (url reaches PostgreSQL, \
                     or a pooler in session pooling) or \"transaction\" (url goes through a \
                     pooler in transaction pooling, such as PgBouncer's pool_mode = transaction)"
                ),
            ),
        }
        if config.pooler == crate::db::Pooler::Transaction {
            pooled_url_checks(c, value, &config);
        }
    }
    config
}

/// What `pooler = "transaction"` needs of the rest of `[database]`: a
/// `session_url` (LISTEN and the liveness session keep session state, which
/// a transaction pooler does not), and no session settings in `url`'s
/// `options` (PgBouncer refuses that start-up parameter unless
/// `ignore_startup_parameters` lists it, and then drops it).
fn pooled_url_checks(c: &mut Checker, value: &Spanned<String>, config: &DatabaseConfig) {
    if config.session_url.is_none() {
        c.at(
            value,
            "database.pooler = \"transaction\" needs database.session_url: the liveness \
             session (a session advisory lock) and LISTEN keep session state, which a \
             transaction pooler hands to other clients between transactions; set session_url \
             to a URL that reaches PostgreSQL itself, not the pooler",
        );
    }
    let options = config
        .url
        .as_deref()
        .and_then(|url| crate::db::parse_syntax(url).ok())
        .and_then(|(parsed, _)| parsed.get_options().map(drop));
    if options.is_some() {
        c.at(
            value,
            "database.url sets options but database.pooler = \"transaction\": a \
             transaction pooler refuses that start-up parameter (PgBouncer: unless \
             ignore_startup_parameters lists it, and then it is dropped), and session \
             settings would not follow a client from one server session to the next; set \
             them on the role or database instead (ALTER ROLE … SET …)",
        );
    }
}

/// `[telemetry]`: the collector from the file, else from
/// `OTEL_EXPORTER_OTLP_ENDPOINT`, and the sampling ratio.
fn telemetry(c: &mut Checker, raw: &RawConfig, env: &Environment) -> TelemetryConfig {
    let mut config = TelemetryConfig::default();
    match &raw.telemetry.otlp_endpoint {
        Some(value) => match otlp_endpoint(value.get_ref()) {
            Ok(endpoint) => config.otlp_endpoint = Some(endpoint),
            Err(why) => c.at(value, format!("telemetry.otlp_endpoint {why}")),
        },
        None => {
            if let Some(text) = &env.otlp_endpoint {
                match otlp_endpoint(text) {
                    Ok(endpoint) => config.otlp_endpoint = Some(endpoint),
                    Err(why) => c.general(format!("{} {why}", crate::telemetry::OTLP_ENDPOINT_ENV)),
                }
            }
        }
    }
    if let Some(value) = &raw.telemetry.sample_ratio {
        let ratio = *value.get_ref();
        if (0.0..=1.0).contains(&ratio) {
            config.sample_ratio = ratio;
        } else {
            c.at(
                value,
                format!(
                    "telemetry.sample_ratio {ratio} is not between 0 and 1 (the share of \
                     traces recorded: 1 records every one, 0.1 one in ten)"
                ),
            );
        }
    }
    config
}

/// A collector's base URL as the exporter takes it: `http` (the exporter
/// speaks plain HTTP; put a local collector or agent in front of a remote
/// TLS one), a host, no user information, query or fragment. The text is
/// quoted only when it carries no credentials.
fn otlp_endpoint(text: &str) -> Result<String, String> {
    let trimmed = text.trim();
    let url = url::Url::parse(trimmed).map_err(|e| format!("is not a URL ({e})"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry user information; pass credentials in \
                    OTEL_EXPORTER_OTLP_HEADERS instead"
            .to_string());
    }
    if url.scheme() != "http" {
        return Err(format!(
            "{trimmed:?} must use http (the exporter speaks plain HTTP to a collector \
             or agent nearby), not {}",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{trimmed:?} names no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{trimmed:?} must have no query or fragment"));
    }
    Ok(trimmed.trim_end_matches('/').to_string())
}

fn http(c: &mut Checker, raw: &RawConfig, base_dir: &Path) -> HttpConfig {
    let mut config = HttpConfig {
        tls: http_tls(c, raw, base_dir),
        tokens: tokens(c, raw, base_dir),
        ..HttpConfig::default()
    };
    if let Some(value) = &raw.http.listen {
        match value.get_ref().trim().parse::<SocketAddr>() {
            Ok(addr) => config.listen = addr,
            Err(_) => c.at(
                value,
                format!(
                    "http.listen {:?} is not an IP address and port; write it like \
                     {DEFAULT_LISTEN:?} or \"0.0.0.0:8080\" (host names are not resolved)",
                    value.get_ref()
                ),
            ),
        }
    }
    if let Some(value) = &raw.http.token {
        let token = value.get_ref();
        if token.is_empty() {
            c.at(
                value,
                "http.token is empty; remove the key to leave writes open, or set a secret",
            );
        } else if token.len() > MAX_TOKEN_BYTES {
            c.at(
                value,
                format!("http.token is longer than {MAX_TOKEN_BYTES} bytes"),
            );
        } else if !token.bytes().all(|b| b.is_ascii_graphic()) {
            // A bearer token travels in a header: spaces and control
            // characters would be cut or refused on the way.
            c.at(
                value,
                "http.token may contain only printable ASCII without spaces",
            );
        } else {
            config.token = Some(token.clone());
        }
    }
    config
}

/// A file named by `key`, made absolute against the config's folder; an
/// empty value is reported.
fn file_path(
    c: &mut Checker,
    key: &str,
    value: &Spanned<String>,
    base_dir: &Path,
) -> Option<PathBuf> {
    if value.get_ref().trim().is_empty() {
        c.at(
            value,
            format!("{key} is empty; name a file, or remove the key"),
        );
        return None;
    }
    Some(absolute_in(base_dir, Path::new(value.get_ref())))
}

/// `tls_cert`, `tls_key` and `tls_client_ca` of `[http]`: both of the
/// first two or neither; the client CA only with them. The files are read
/// when the API starts (and by `leasehold check`), not here.
fn http_tls(c: &mut Checker, raw: &RawConfig, base_dir: &Path) -> Option<crate::tls::ServerFiles> {
    let http = &raw.http;
    let cert = http
        .tls_cert
        .as_ref()
        .and_then(|v| file_path(c, "http.tls_cert", v, base_dir));
    let key = http
        .tls_key
        .as_ref()
        .and_then(|v| file_path(c, "http.tls_key", v, base_dir));
    let client_ca = http
        .tls_client_ca
        .as_ref()
        .and_then(|v| file_path(c, "http.tls_client_ca", v, base_dir));
    match (&http.tls_cert, &http.tls_key) {
        (Some(value), None) => c.at(
            value,
            "http.tls_cert is set without http.tls_key; give both (the certificate chain and its \
             private key) to serve HTTPS",
        ),
        (None, Some(value)) => c.at(
            value,
            "http.tls_key is set without http.tls_cert; give both to serve HTTPS",
        ),
        (None, None) => {
            if let Some(value) = &http.tls_client_ca {
                c.at(
                    value,
                    "http.tls_client_ca needs http.tls_cert and http.tls_key: client certificates \
                     are asked for only over HTTPS",
                );
            }
        }
        (Some(_), Some(_)) => {}
    }
    Some(crate::tls::ServerFiles {
        cert: cert?,
        key: key?,
        client_ca,
    })
}

/// `[[http.tokens]]`: names unique DNS labels (and not the `[http] token`
/// shorthand's), a file, a role, kinds that are kind names. The files are
/// read when the API starts (and by `leasehold check`).
fn tokens(c: &mut Checker, raw: &RawConfig, base_dir: &Path) -> Vec<super::TokenConfig> {
    let mut tokens = Vec::new();
    let mut first_line: BTreeMap<String, usize> = BTreeMap::new();
    if raw.http.token.is_some() {
        first_line.insert(super::DEFAULT_TOKEN_NAME.to_string(), 0);
    }
    for (i, entry) in raw.http.tokens.iter().enumerate() {
        let token = entry.get_ref();
        let who = match &token.name {
            Some(name) => format!("http.tokens[{i}] ({:?})", name.get_ref()),
            None => format!("http.tokens[{i}]"),
        };
        let name = match &token.name {
            None => {
                c.at(
                    entry,
                    format!("{who} has no `name`; give it a unique DNS label"),
                );
                None
            }
            Some(value) => {
                let name = value.get_ref();
                if let Err(e) = check_label("token name", name) {
                    c.at(value, format!("{who}: {e}"));
                    None
                } else if let Some(&line) = first_line.get(name) {
                    c.at(
                        value,
                        if line == 0 {
                            format!(
                                "{who}: the name {name:?} is taken by the [http] token shorthand; \
                                 rename it"
                            )
                        } else {
                            format!("{who}: the name {name:?} is already used on line {line}; token names must be unique")
                        },
                    );
                    None
                } else {
                    first_line.insert(name.clone(), c.line(value));
                    Some(name.clone())
                }
            }
        };
        let file = match &token.file {
            None => {
                c.at(
                    entry,
                    format!("{who} has no `file`; name the file holding the token"),
                );
                None
            }
            Some(value) => file_path(c, &format!("{who}: file"), value, base_dir),
        };
        let role = match &token.role {
            None => {
                c.at(
                    entry,
                    format!("{who} has no `role`; set role = \"read\" or \"write\""),
                );
                None
            }
            Some(value) => match value.get_ref().as_str() {
                "read" => Some(super::TokenRole::Read),
                "write" => Some(super::TokenRole::Write),
                other => {
                    c.at(
                        value,
                        format!("{who}: role {other:?} is not \"read\" or \"write\""),
                    );
                    None
                }
            },
        };
        let kinds = match &token.kinds {
            None => Some(None),
            Some(list) if list.get_ref().is_empty() => {
                c.at(
                    list,
                    format!(
                        "{who}: kinds is empty, so the token could reach no object; list \
                             kinds, or remove the key for every kind"
                    ),
                );
                None
            }
            Some(list) if list.get_ref().len() > crate::limits::MAX_CHANGE_KINDS => {
                c.at(
                    list,
                    format!(
                        "{who}: kinds lists {} kinds; a token reaches at most {} (as many as \
                         one change-stream read names)",
                        list.get_ref().len(),
                        crate::limits::MAX_CHANGE_KINDS
                    ),
                );
                None
            }
            Some(list) => {
                let mut ok = true;
                let mut kinds = Vec::new();
                for (k, kind) in list.get_ref().iter().enumerate() {
                    if let Err(e) = check_label("kind", kind.get_ref()) {
                        c.at(kind, format!("{who}: kinds[{k}]: {e}"));
                        ok = false;
                    } else if !kinds.contains(kind.get_ref()) {
                        kinds.push(kind.get_ref().clone());
                    }
                }
                ok.then_some(Some(kinds))
            }
        };
        if let (Some(name), Some(file), Some(role), Some(kinds)) = (name, file, role, kinds) {
            tokens.push(super::TokenConfig {
                name,
                file,
                role,
                kinds,
            });
        }
    }
    tokens
}

/// What `${LEASEHOLD_GUEST_DIR}` expands to.
pub(super) fn guest_dir(base_dir: &Path, env: &Environment) -> PathBuf {
    match &env.guest_dir {
        Some(dir) => absolute_in(base_dir, dir),
        None => base_dir
            .parent()
            .unwrap_or(base_dir)
            .join(DEFAULT_GUEST_DIR),
    }
}

/// `path` made absolute against `base`, without touching the file system
/// (so a missing path is reported as missing, not as an I/O error).
fn absolute_in(base: &Path, path: &Path) -> PathBuf {
    let joined = base.join(path);
    std::path::absolute(&joined).unwrap_or(joined)
}

/// `[store]`: retention, bounded; a bad value is reported naming its key.
fn store(c: &mut Checker, raw: &RawConfig) -> StoreConfig {
    let mut config = StoreConfig::default();
    let (event_retention, _) = duration(
        c,
        "store",
        &raw.store.event_retention,
        DurationRule {
            key: "event_retention",
            default: super::DEFAULT_EVENT_RETENTION,
            min: super::MIN_EVENT_RETENTION,
            max: super::MAX_EVENT_RETENTION,
            why_min: "a reader further behind than this re-lists everything it watches",
            why_max: "keep the log bounded; ten years is the most",
        },
    );
    config.event_retention = event_retention;
    if let Some(value) = &raw.store.tenure_retention {
        let n = *value.get_ref();
        match u64::try_from(n) {
            Ok(n) if (1..=super::MAX_TENURE_RETENTION).contains(&n) => config.tenure_retention = n,
            _ => c.at(
                value,
                format!(
                    "store.tenure_retention is {n}; it must be between 1 and {} (the newest \
                     tenures kept per lease; the live one is always kept)",
                    super::MAX_TENURE_RETENTION
                ),
            ),
        }
    }
    config
}

/// `[placement]`: bounded; a bad value is reported naming its key.
fn placement(c: &mut Checker, raw: &RawConfig) -> crate::supervisor::placement::PlacementSettings {
    let mut config = crate::supervisor::placement::PlacementSettings::default();
    if let Some(enabled) = raw.placement.enabled {
        config.enabled = enabled;
    }
    if let Some(value) = &raw.placement.slack {
        let n = *value.get_ref();
        match u64::try_from(n) {
            Ok(n) if n <= super::MAX_PLACEMENT_SLACK => config.slack = n as usize,
            _ => c.at(
                value,
                format!(
                    "placement.slack is {n}; it must be between 0 and {} (how many leases \
                     above its fair share a host may hold before it hands one over)",
                    super::MAX_PLACEMENT_SLACK
                ),
            ),
        }
    }
    let (min_tenure, _) = duration(
        c,
        "placement",
        &raw.placement.min_tenure,
        DurationRule {
            key: "min_tenure",
            default: crate::timeouts::PLACEMENT_MIN_TENURE,
            min: Duration::ZERO,
            max: super::MAX_PLACEMENT_MIN_TENURE,
            why_min: "a tenure cannot be negative",
            why_max: "a day is the most",
        },
    );
    config.min_tenure = min_tenure;
    config
}

/// Bounds and default of one duration key, with why each bound is there
/// (shown when a value is refused).
struct DurationRule {
    key: &'static str,
    default: Duration,
    min: Duration,
    max: Duration,
    why_min: &'static str,
    why_max: &'static str,
}

/// Parse and bound a duration; on any problem report it and use the
/// default. Returns the value and whether it was usable as written.
fn duration(
    c: &mut Checker,
    who: &str,
    raw: &Option<Spanned<DurationText>>,
    rule: DurationRule,
) -> (Duration, bool) {
    let Some(value) = raw else {
        return (rule.default, true);
    };
    let key = rule.key;
    let parsed = match parse_duration(&value.get_ref().0) {
        Ok(d) => d,
        Err(e) => {
            c.at(value, format!("{who}: {key}: {e}"));
            return (rule.default, false);
        }
    };
    let show = |d: Duration| humantime::format_duration(d).to_string();
    if parsed.is_zero() {
        c.at(value, format!("{who}: {key} must be greater than zero"));
    } else if parsed < rule.min {
        c.at(
            value,
            format!(
                "{who}: {key} is {}; it must be at least {}: {}",
                show(parsed),
                show(rule.min),
                rule.why_min
            ),
        );
    } else if parsed > rule.max {
        c.at(
            value,
            format!(
                "{who}: {key} is {}; it must be at most {}: {}",
                show(parsed),
                show(rule.max),
                rule.why_max
            ),
        );
    } else {
        return (parsed, true);
    }
    (rule.default, false)
}

/// Every lease a host would run has its own name: a sharded controller's
/// leases (`NAME-0 …`) must not be another controller's lease. (Names
/// given twice are reported where they are read.)
fn lease_names_are_unique(
    c: &mut Checker,
    raw: &[Spanned<RawController>],
    controllers: &[ControllerConfig],
) {
    let mut owner_of: BTreeMap<String, &str> = BTreeMap::new();
    for (entry, controller) in raw.iter().zip(controllers) {
        if controller.name.is_empty() {
            continue;
        }
        for (lease, _) in controller.leases() {
            match owner_of.get(&lease) {
                Some(other) if *other != controller.name => c.at(
                    entry,
                    format!(
                        "controller {:?} runs lease {lease:?}, which controller {other:?} runs too; \
                         rename one of them (a controller with shards = N runs the leases NAME-0 to NAME-(N-1))",
                        controller.name
                    ),
                ),
                _ => {
                    owner_of.insert(lease, &controller.name);
                }
            }
        }
    }
}

fn controller(
    c: &mut Checker,
    index: usize,
    entry: &Spanned<RawController>,
    base_dir: &Path,
    guest_dir: &Path,
    default_detection: CrashDetection,
) -> ControllerConfig {
    let raw = entry.get_ref();
    let name = match &raw.name {
        None => {
            c.at(
                entry,
                format!("controllers[{index}] has no `name`; give it a unique DNS label such as \"scheduler\""),
            );
            String::new()
        }
        Some(value) => {
            if let Err(e) = check_label("controller name", value.get_ref()) {
                c.at(value, e.to_string());
            }
            value.get_ref().clone()
        }
    };
    // Messages name the controller when its name is usable, else its index.
    let who = if check_label("controller name", &name).is_ok() {
        format!("controller {name:?}")
    } else {
        format!("controllers[{index}]")
    };

    let component = match &raw.component {
        None => {
            c.at(
                entry,
                format!("{who} has no `component`; set it to the path of its .wasm file"),
            );
            PathBuf::new()
        }
        Some(value) => match component_path(value.get_ref(), base_dir, guest_dir) {
            Ok(path) => path,
            Err(e) => {
                c.at(value, format!("{who}: {e}"));
                PathBuf::new()
            }
        },
    };

    let (lease_ttl, ttl_ok) = duration(
        c,
        &who,
        &raw.lease_ttl,
        DurationRule {
            key: "lease_ttl",
            default: timeouts::LEASE_TTL,
            min: MIN_LEASE_TTL,
            max: MAX_LEASE_TTL,
            why_min: "shorter leases flap between replicas on ordinary database latency, \
                      and every flap is a tenure row kept for good",
            why_max: "it is also the worst-case takeover time after a holder vanishes",
        },
    );
    // Left out, the interval and deadline follow the ttl in the defaults'
    // proportions (2 s and 7 s of 10 s), so setting `lease_ttl` alone is
    // always a valid timing.
    let (renew_interval, interval_ok) = duration(
        c,
        &who,
        &raw.renew_interval,
        DurationRule {
            key: "renew_interval",
            default: timeouts::derived_renew_interval(lease_ttl),
            min: timeouts::MIN_RENEW_INTERVAL,
            max: MAX_LEASE_TTL,
            why_min: "each renewal is a database round trip; renewing more often only \
                      loads the database and the host",
            why_max: "it must be below lease_ttl, which is at most that",
        },
    );
    let (renew_deadline, deadline_ok) = duration(
        c,
        &who,
        &raw.renew_deadline,
        DurationRule {
            key: "renew_deadline",
            default: timeouts::derived_renew_deadline(lease_ttl),
            // Its floor follows from the interval's and the ratios below.
            min: Duration::ZERO,
            max: MAX_LEASE_TTL,
            why_min: "",
            why_max: "it must be below lease_ttl, which is at most that",
        },
    );
    if ttl_ok && interval_ok && deadline_ok {
        lease_timing(
            c,
            &who,
            entry,
            LeaseTiming {
                ttl: lease_ttl,
                renew_interval,
                renew_deadline,
            },
        );
    }
    let (reconcile_deadline, _) = duration(
        c,
        &who,
        &raw.reconcile_deadline,
        DurationRule {
            key: "reconcile_deadline",
            default: timeouts::RECONCILE_DEADLINE,
            min: timeouts::MIN_RECONCILE_DEADLINE,
            max: MAX_RECONCILE_DEADLINE,
            why_min: "it also bounds a fresh guest's start, so shorter tears healthy guests \
                      down and restarts them in a loop",
            why_max: "a reconcile that long holds up every other key of the controller",
        },
    );
    let (backoff_min, min_ok) = duration(
        c,
        &who,
        &raw.backoff_min,
        DurationRule {
            key: "backoff_min",
            default: timeouts::BACKOFF_MIN,
            min: timeouts::MIN_BACKOFF_MIN,
            max: MAX_BACKOFF,
            why_min: "the first retry of a failed acquire or guest must not be a busy loop",
            why_max: "an hour between retries is a controller that has stopped",
        },
    );
    let (backoff_max, max_ok) = duration(
        c,
        &who,
        &raw.backoff_max,
        DurationRule {
            key: "backoff_max",
            default: timeouts::BACKOFF_MAX,
            min: timeouts::MIN_BACKOFF_MAX,
            max: MAX_BACKOFF,
            why_min: "a controller that keeps failing must not retry more than once a second \
                      (each retry may be a log line and a tenure row)",
            why_max: "an hour between retries is a controller that has stopped",
        },
    );
    if min_ok && max_ok && backoff_min > backoff_max {
        let message = format!(
            "{who}: backoff_min ({}) is larger than backoff_max ({})",
            humantime::format_duration(backoff_min),
            humantime::format_duration(backoff_max)
        );
        match raw.backoff_min.as_ref().or(raw.backoff_max.as_ref()) {
            Some(value) => c.at(value, message),
            None => c.at(entry, message),
        }
    }

    let quota = QuotaLimits {
        creates_per_second: count_key(
            c,
            &who,
            &raw.max_creates_per_second,
            "max_creates_per_second",
            DEFAULT_CREATES_PER_SECOND.into(),
            MAX_CREATES_PER_SECOND.into(),
        ) as u32,
        create_burst: count_key(
            c,
            &who,
            &raw.create_burst,
            "create_burst",
            DEFAULT_CREATE_BURST.into(),
            MAX_CREATE_BURST.into(),
        ) as u32,
        objects_per_kind: count_key(
            c,
            &who,
            &raw.max_objects_per_kind,
            "max_objects_per_kind",
            DEFAULT_OBJECTS_PER_KIND,
            MAX_OBJECTS_PER_KIND,
        ),
    };

    let memory_limit = match &raw.memory_limit {
        None => GUEST_MEMORY_BYTES,
        Some(value) => match memory(value.get_ref()) {
            Ok(bytes) => bytes,
            Err(e) => {
                c.at(value, format!("{who}: memory_limit {e}"));
                GUEST_MEMORY_BYTES
            }
        },
    };

    // The guest's store counts (what an interpreter guest needs more of
    // than a Rust one; see `crate::limits::GUEST_INSTANCES`).
    let max_instances = count_key(
        c,
        &who,
        &raw.max_instances,
        "max_instances",
        GUEST_INSTANCES as u64,
        MAX_GUEST_INSTANCES as u64,
    ) as usize;
    let max_tables = count_key(
        c,
        &who,
        &raw.max_tables,
        "max_tables",
        GUEST_TABLES as u64,
        MAX_GUEST_TABLES as u64,
    ) as usize;
    let max_memories = count_key(
        c,
        &who,
        &raw.max_memories,
        "max_memories",
        GUEST_MEMORIES as u64,
        MAX_GUEST_MEMORIES as u64,
    ) as usize;

    let degraded_failures = match &raw.degraded_after_failures {
        None => crate::limits::DEGRADED_AFTER_FAILURES,
        Some(value) => match u64::try_from(*value.get_ref()) {
            Ok(n) if (1..=crate::limits::MAX_DEGRADED_AFTER_FAILURES).contains(&n) => n,
            _ => {
                c.at(
                    value,
                    format!(
                        "{who}: degraded_after_failures is {}; it must be between 1 and {}",
                        value.get_ref(),
                        crate::limits::MAX_DEGRADED_AFTER_FAILURES
                    ),
                );
                crate::limits::DEGRADED_AFTER_FAILURES
            }
        },
    };
    let (degraded_after, _) = duration(
        c,
        &who,
        &raw.degraded_after,
        DurationRule {
            key: "degraded_after",
            default: timeouts::DEGRADED_AFTER,
            min: timeouts::MIN_DEGRADED_AFTER,
            max: timeouts::MAX_DEGRADED_AFTER,
            why_min: "a short outage of a service the controller calls would flag it at once",
            why_max: "a controller failing for a day is degraded whatever its count",
        },
    );

    let max_queue = match &raw.max_queue {
        None => WORK_QUEUE_KEYS,
        Some(value) => match usize::try_from(*value.get_ref()) {
            Ok(n) if (1..=WORK_QUEUE_KEYS).contains(&n) => n,
            _ => {
                c.at(
                    value,
                    format!(
                        "{who}: max_queue is {}; it must be between 1 and {WORK_QUEUE_KEYS}",
                        value.get_ref()
                    ),
                );
                WORK_QUEUE_KEYS
            }
        },
    };

    if raw.dirs.len() > MAX_DIRS {
        c.at(
            entry,
            format!(
                "{who} grants {} directories; at most {MAX_DIRS} are allowed",
                raw.dirs.len()
            ),
        );
    }
    let mut dirs: Vec<DirConfig> = Vec::with_capacity(raw.dirs.len());
    for (i, dir) in raw.dirs.iter().enumerate() {
        if let Some(resolved) = grant(c, &who, i, dir, base_dir) {
            if dirs.iter().any(|d| d.guest == resolved.guest) {
                c.at(
                    dir,
                    format!(
                        "{who}: dirs[{i}]: guest path {:?} is granted twice",
                        resolved.guest
                    ),
                );
            } else {
                dirs.push(resolved);
            }
        }
    }

    let http_allow = http_allow(c, &who, &raw.http_allow);
    let http_ca = raw
        .http_ca
        .as_ref()
        .and_then(|v| file_path(c, &format!("{who}: http_ca"), v, base_dir));
    if let (Some(value), true) = (&raw.http_ca, http_allow.is_empty()) {
        c.at(
            value,
            format!(
                "{who}: http_ca is set but http_allow is empty, so the guest calls nothing \
                     it could be used for"
            ),
        );
    }
    let mut http_forwarded_headers = Vec::new();
    if let Some(list) = &raw.http_forwarded_headers {
        for (i, name) in list.get_ref().iter().enumerate() {
            let lowered = name.get_ref().trim().to_ascii_lowercase();
            if crate::outbound::headers::is_forwarding_name(&lowered) && !lowered.contains('_') {
                if !http_forwarded_headers.contains(&lowered) {
                    http_forwarded_headers.push(lowered);
                }
            } else {
                c.at(
                    name,
                    format!(
                        "{who}: http_forwarded_headers[{i}] is not a forwarding header; list \
                         Forwarded, X-Forwarded-... or X-Real-IP headers the guest may send"
                    ),
                );
            }
        }
    }
    let crash_detection = crash_detection(
        c,
        &format!("{who}: crash_detection"),
        &raw.crash_detection,
        default_detection,
    );
    let settings = match &raw.settings {
        None => crate::runtime::Settings::default(),
        Some(value) => match super::settings::settings(value.get_ref()) {
            Ok(settings) => settings,
            Err(problems) => {
                for problem in problems {
                    c.at(value, format!("{who}: {problem}"));
                }
                crate::runtime::Settings::default()
            }
        },
    };

    let shards = match &raw.shards {
        None => None,
        Some(value) => match u32::try_from(*value.get_ref()) {
            Ok(n) if (1..=crate::shard::MAX_SHARDS).contains(&n) => {
                // The last shard's lease name must be a DNS label too.
                let last = crate::shard::Shard::lease_name(&name, n - 1);
                if check_label("controller name", &name).is_ok()
                    && let Err(e) = check_label("shard lease name", &last)
                {
                    c.at(
                        value,
                        format!("{who}: with {n} shards its leases are named up to {last:?}, which {}; shorten the name", e.reason),
                    );
                }
                Some(n)
            }
            _ => {
                c.at(
                    value,
                    format!(
                        "{who}: shards is {}; it must be between 1 and {}",
                        value.get_ref(),
                        crate::shard::MAX_SHARDS
                    ),
                );
                None
            }
        },
    };

    ControllerConfig {
        name,
        component,
        lease_ttl,
        renew_interval,
        renew_deadline,
        reconcile_deadline,
        backoff_min,
        backoff_max,
        memory_limit,
        max_instances,
        max_tables,
        max_memories,
        max_queue,
        dirs,
        quota,
        http_allow,
        http_ca,
        http_forwarded_headers,
        crash_detection,
        settings,
        shards,
        degraded: crate::status::DegradedRule {
            failures: degraded_failures,
            failing_for: degraded_after,
        },
    }
}

/// `http_allow`, parsed by [`AllowList::parse`]. When it refuses the list,
/// every bad entry is reported on its own line (`http_allow[2]: ...`), so
/// one run shows them all; a problem of the whole list (too many entries)
/// is reported on the key's line. On a problem the list is empty: a bad
/// config never starts anyway, and no follow-on noise is reported.
fn http_allow(
    c: &mut Checker,
    who: &str,
    raw: &Option<Spanned<Vec<Spanned<String>>>>,
) -> AllowList {
    let Some(list) = raw else {
        return AllowList::default();
    };
    let entries = list.get_ref();
    let texts: Vec<&str> = entries.iter().map(|e| e.get_ref().as_str()).collect();
    let whole = match AllowList::parse(&texts) {
        Ok(allow) => return allow,
        Err(problem) => problem,
    };
    let mut reported = false;
    if entries.len() <= MAX_HTTP_ALLOW_ENTRIES {
        for (i, entry) in entries.iter().enumerate() {
            if let Err(problem) = AllowEntry::parse(entry.get_ref()) {
                c.at(entry, format!("{who}: http_allow[{i}]: {problem}"));
                reported = true;
            }
        }
    }
    if !reported {
        // `AllowList::parse` names an entry as `[i]: ...`; it never quotes
        // an entry, since any part of one may be a secret.
        let separator = if whole.starts_with('[') { "" } else { ": " };
        c.at(list, format!("{who}: http_allow{separator}{whole}"));
    }
    AllowList::default()
}

/// The rules a lease timing keeps besides each key's own bounds, each
/// reported on its own with the floor or ratio and why. Points at the key
/// the file sets, the deadline first since every rule involves it.
fn lease_timing(c: &mut Checker, who: &str, entry: &Spanned<RawController>, timing: LeaseTiming) {
    let raw = entry.get_ref();
    let show = |d: Duration| humantime::format_duration(d).to_string();
    let LeaseTiming {
        ttl,
        renew_interval: interval,
        renew_deadline: deadline,
    } = timing;
    let report =
        |c: &mut Checker, first: [&Option<Spanned<DurationText>>; 3], message: String| match first
            .iter()
            .find_map(|v| v.as_ref())
        {
            Some(value) => c.at(value, message),
            None => c.at(entry, message),
        };
    let deadline_first = [&raw.renew_deadline, &raw.renew_interval, &raw.lease_ttl];
    if let Err(e) = timing.validate() {
        report(
            c,
            deadline_first,
            format!("{who}: {e}; the holder must give the lease up before anyone else can take it"),
        );
        // The ratios below would only repeat this.
        return;
    }
    let renewals = timeouts::MIN_RENEWALS_PER_DEADLINE;
    if deadline < interval * renewals {
        report(
            c,
            deadline_first,
            format!(
                "{who}: renew_deadline ({}) must be at least {renewals} × renew_interval ({}), \
                 i.e. {}: at least {renewals} renewals must be sent within each deadline, so that \
                 one lost or slow round trip does not lose the lease",
                show(deadline),
                show(interval),
                show(interval * renewals)
            ),
        );
    }
    let slack = timeouts::min_renew_slack(ttl);
    if deadline - interval < slack {
        // Either fix keeps the other rules here: a lower interval also
        // leaves room for `renewals` renewals per deadline.
        let raise = format!("raise renew_deadline to {}", show(interval + slack));
        let lower = deadline
            .checked_sub(slack)
            .map(|lower| lower.min(deadline / renewals));
        let fix = match lower {
            Some(lower) if lower >= timeouts::MIN_RENEW_INTERVAL => {
                format!("{raise} or lower renew_interval to {}", show(lower))
            }
            _ => raise,
        };
        report(
            c,
            deadline_first,
            format!(
                "{who}: renew_deadline ({}) is only {} after renew_interval ({}); it must be at \
                 least {} after it: the last renewal sent before the deadline may wait {} for \
                 the lease row's lock (a tenth of lease_ttl, at most {}) and needs {} for its \
                 round trip; {fix}",
                show(deadline),
                show(deadline - interval),
                show(interval),
                show(slack),
                show(timeouts::renew_lock_timeout(ttl)),
                show(timeouts::RENEW_LOCK_TIMEOUT),
                show(timeouts::MIN_RENEW_SLACK),
            ),
        );
    }
    let margin = timeouts::MIN_EXPIRY_MARGIN;
    if ttl - deadline < margin {
        report(
            c,
            [&raw.renew_deadline, &raw.lease_ttl, &raw.renew_interval],
            format!(
                "{who}: renew_deadline ({}) is only {} below lease_ttl ({}); it must be at least \
                 {} below: that margin is where the holder stops its guest before anyone else \
                 can be granted the lease (L3)",
                show(deadline),
                show(ttl - deadline),
                show(ttl),
                show(margin)
            ),
        );
    }
}

/// A positive count key bounded by `max`; on a problem, report it and use
/// the default.
fn count_key(
    c: &mut Checker,
    who: &str,
    raw: &Option<Spanned<i64>>,
    key: &str,
    default: u64,
    max: u64,
) -> u64 {
    let Some(value) = raw else {
        return default;
    };
    match u64::try_from(*value.get_ref()) {
        Ok(n) if (1..=max).contains(&n) => n,
        _ => {
            c.at(
                value,
                format!(
                    "{who}: {key} is {}; it must be between 1 and {max} (default {default})",
                    value.get_ref()
                ),
            );
            default
        }
    }
}

fn memory(value: &IntOrText) -> Result<usize, String> {
    let bytes = parse_size(value)?;
    let (min, max) = (MIN_GUEST_MEMORY_BYTES as u64, MAX_GUEST_MEMORY_BYTES as u64);
    if !(min..=max).contains(&bytes) {
        return Err(format!(
            "is {}; it must be between {} and {}",
            show_size(bytes),
            show_size(min),
            show_size(max)
        ));
    }
    usize::try_from(bytes).map_err(|_| format!("{} does not fit this platform", show_size(bytes)))
}

/// Expand `${LEASEHOLD_GUEST_DIR}`, resolve against the config folder, and
/// require an existing file.
pub(super) fn component_path(
    written: &str,
    base_dir: &Path,
    guest_dir: &Path,
) -> Result<PathBuf, String> {
    if written.trim().is_empty() {
        return Err("component is empty; set it to the path of a .wasm file".into());
    }
    let uses_placeholder = written.contains(GUEST_DIR_PLACEHOLDER);
    let expanded = written.replace(GUEST_DIR_PLACEHOLDER, "");
    if expanded.contains("${") {
        return Err(format!(
            "component {written:?}: only {GUEST_DIR_PLACEHOLDER} is expanded in paths"
        ));
    }
    let path = if uses_placeholder {
        // Splice the directory in as an OS string: the variable's value
        // need not be UTF-8.
        let mut spliced = OsString::new();
        let mut parts = written.split(GUEST_DIR_PLACEHOLDER).peekable();
        while let Some(part) = parts.next() {
            spliced.push(part);
            if parts.peek().is_some() {
                spliced.push(guest_dir.as_os_str());
            }
        }
        absolute_in(base_dir, Path::new(&spliced))
    } else {
        absolute_in(base_dir, Path::new(written))
    };
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => Ok(path),
        Ok(_) => Err(format!(
            "component {} is not a file; point it at a .wasm component",
            path.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let hint = if uses_placeholder {
                format!(
                    "; build the guest components first (`cargo xtask guests`), or set \
                     {GUEST_DIR_ENV} to the folder that holds them"
                )
            } else {
                "; paths are relative to the config file's folder".to_string()
            };
            Err(format!(
                "component file {} does not exist{hint}",
                path.display()
            ))
        }
        Err(e) => Err(format!("component file {}: {e}", path.display())),
    }
}

fn grant(
    c: &mut Checker,
    who: &str,
    index: usize,
    entry: &Spanned<RawDir>,
    base_dir: &Path,
) -> Option<DirConfig> {
    let raw = entry.get_ref();
    let mut ok = true;
    let host = match &raw.host {
        None => {
            c.at(
                entry,
                format!("{who}: dirs[{index}] has no `host` directory"),
            );
            ok = false;
            PathBuf::new()
        }
        Some(value) => {
            let path = absolute_in(base_dir, Path::new(value.get_ref()));
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    c.at(
                        value,
                        format!(
                            "{who}: dirs[{index}]: {} is not a directory",
                            path.display()
                        ),
                    );
                    ok = false;
                }
                Err(e) => {
                    c.at(
                        value,
                        format!(
                            "{who}: dirs[{index}]: host directory {}: {e} \
                             (paths are relative to the config file's folder)",
                            path.display()
                        ),
                    );
                    ok = false;
                }
            }
            path
        }
    };
    let guest = match &raw.guest {
        None => {
            c.at(
                entry,
                format!("{who}: dirs[{index}] has no `guest` path (such as \"/data\")"),
            );
            ok = false;
            String::new()
        }
        Some(value) => {
            let guest = value.get_ref();
            let path = Path::new(guest);
            let problem = if !guest.starts_with('/') {
                Some("must be absolute, such as \"/data\"")
            } else if guest.len() > MAX_GUEST_PATH_BYTES {
                Some("is too long")
            } else if path
                .components()
                .any(|part| matches!(part, Component::ParentDir | Component::CurDir))
            {
                Some("must not contain `.` or `..`")
            } else {
                None
            };
            if let Some(problem) = problem {
                c.at(
                    value,
                    format!("{who}: dirs[{index}]: guest path {guest:?} {problem}"),
                );
                ok = false;
            }
            guest.clone()
        }
    };
    ok.then_some(DirConfig {
        host,
        guest,
        writable: raw.writable,
    })
}
