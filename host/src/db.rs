//! PostgreSQL connections of the authority and the store: the pools (the
//! main one of `[database] max_connections`, and the authority's own small
//! one beside it, [`Database::sibling`]), the redacted endpoint, and
//! versioned migrations.
//!
//! Must never: log or return a URL with its password; hand a connection
//! back to the pool while a transaction on it may still be open (callers
//! that are cancelled mid-transaction rely on `deadpool`'s recycle check,
//! which discards connections that are closed or not idle).

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use thiserror::Error;

/// The default database URL when neither config nor environment give one.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Environment variable that overrides the configured database URL.
pub const URL_ENV: &str = "LEASEHOLD_DATABASE_URL";

/// `application_name` of the lease authority's own pool (see
/// [`Database::sibling`]); the main pool's sessions show the URL's
/// `application_name`, or `leasehold`.
pub const AUTHORITY_APPLICATION: &str = "leasehold-authority";

/// Migrations, in order. Each runs once, in its own transaction, under an
/// advisory transaction lock so concurrent hosts do not race.
pub const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (3, include_str!("../migrations/0003_store_collation.sql")),
    (4, include_str!("../migrations/0004_tenure_snapshots.sql")),
    (5, include_str!("../migrations/0005_tenure_outbound.sql")),
    (6, include_str!("../migrations/0006_hosts.sql")),
    (7, include_str!("../migrations/0007_change_feed.sql")),
    (8, include_str!("../migrations/0008_object_metadata.sql")),
    (
        10,
        include_str!("../migrations/0010_change_traceparent.sql"),
    ),
    (11, include_str!("../migrations/0011_database_origin.sql")),
    (
        12,
        include_str!("../migrations/0012_object_value_index.sql"),
    ),
    (13, include_str!("../migrations/0013_retention.sql")),
    (14, include_str!("../migrations/0014_change_relations.sql")),
    (15, include_str!("../migrations/0015_epoch_base.sql")),
    (16, include_str!("../migrations/0016_hosts.sql")),
    (17, include_str!("../migrations/0017_placement_moves.sql")),
    (18, include_str!("../migrations/0018_settled.sql")),
    (19, include_str!("../migrations/0019_position_base.sql")),
    (20, include_str!("../migrations/0020_timeline_floor.sql")),
    (21, include_str!("../migrations/0021_shardings.sql")),
];

/// The migrations this program knows: [`MIGRATIONS`], but in the
/// newer-host test fixture ([`declare_newer_schema_test_binary`]).
static KNOWN_MIGRATIONS: std::sync::OnceLock<&'static [(i32, &'static str)]> =
    std::sync::OnceLock::new();

/// The migrations this program knows and applies, and whose newest version
/// it requires: [`MIGRATIONS`], but in the newer-host test fixture.
pub fn known_migrations() -> &'static [(i32, &'static str)] {
    KNOWN_MIGRATIONS.get().copied().unwrap_or(MIGRATIONS)
}

/// Make this program a host of a newer schema: it knows [`MIGRATIONS`] and
/// one more, `sql`, numbered after the last; returns that number. Only
/// `leasehold-newer-schema`, the test fixture of
/// `tests/tests/schema_versions.rs`, calls this, first thing in `main`;
/// the `leasehold` program never does. Not for anything else.
#[doc(hidden)]
pub fn declare_newer_schema_test_binary(sql: &'static str) -> i32 {
    let version = MIGRATIONS.last().map_or(1, |(v, _)| v + 1);
    let mut all = MIGRATIONS.to_vec();
    all.push((version, sql));
    let _ = KNOWN_MIGRATIONS.set(Box::leak(all.into_boxed_slice()));
    version
}

/// Database setup failures.
#[derive(Debug, Error)]
pub enum DbError {
    /// The URL could not be parsed.
    #[error("invalid database URL {endpoint}: {reason}")]
    InvalidUrl {
        /// The URL, password redacted.
        endpoint: String,
        /// What is wrong.
        reason: String,
    },
    /// The server or its certificate refuses this host in a way trying
    /// again cannot change (a certificate that does not verify, a
    /// `pg_hba.conf` that demands encryption): a start-up refusal, never
    /// retried.
    #[error("refusing database {endpoint}: {reason}")]
    Refused {
        /// Where, password redacted.
        endpoint: String,
        /// Why, and what to change.
        reason: String,
    },
    /// Could not connect or a statement failed.
    #[error("database {endpoint}: {reason}")]
    Unavailable {
        /// Where, password redacted.
        endpoint: String,
        /// The failure.
        reason: String,
    },
}

/// What a hidden secret (or a piece of text that may hold one) is shown as.
pub const HIDDEN: &str = "***";

/// Shown in place of connection-string text that could not be read: past
/// that point nothing tells a secret from the rest.
const UNREADABLE: &str = "<unparseable>";

/// Connection options whose values are never secret, so a redacted
/// endpoint may show them. Any other option is hidden whole, key included:
/// a password holding a raw `&` or space splits into pieces that look like
/// further options, and their "keys" are fragments of the password.
const PLAIN_OPTIONS: &[&str] = &[
    "application_name",
    "channel_binding",
    "connect_timeout",
    "dbname",
    "host",
    "hostaddr",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "load_balance_hosts",
    "options",
    "port",
    "replication",
    "sslcert",
    "sslkey",
    "sslmode",
    "sslnegotiation",
    "sslrootcert",
    "target_session_attrs",
    "tcp_user_timeout",
    "user",
];

/// A connection string with every secret replaced by `***`, safe to show
/// and to store. Both forms PostgreSQL clients accept are covered:
///
/// - URL (`postgres://user:PASSWORD@host/db?password=PASSWORD`): the
///   password of the user part, and any query parameter whose key (percent-
///   decoded, any case) names a password;
/// - key-value (`host=h user=u password='p w'`): any key naming a
///   password, quoted values with escapes included.
///
/// Options not known to be harmless are hidden whole, and whatever cannot
/// be read is cut off, so malformed input never leaks its rest. Applying
/// it to its own output changes nothing.
pub fn redact(connection: &str) -> String {
    let text = connection.trim();
    match split_scheme(text) {
        Some((scheme, rest)) => redact_url(scheme, rest),
        None => redact_key_value(text),
    }
}

/// `(scheme, rest)` when `text` starts like a URL (`scheme://`).
fn split_scheme(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some((scheme, rest))
}

/// Whether an option key (already decoded) names a secret.
fn is_secret_key(key: &str) -> bool {
    key.to_ascii_lowercase().contains("pass")
}

/// Read the way tokio-postgres (like libpq) reads a URL: the user part
/// ends at the first `@`, the host list at the first `/` or `?`, the
/// database name at `?`, parameters are split at `&` and then at `=`.
fn redact_url(scheme: &str, rest: &str) -> String {
    let mut out = format!("{scheme}://");
    let (credentials, after) = match rest.split_once('@') {
        Some((credentials, after)) => (Some(credentials), after),
        None => (None, rest),
    };
    let host_end = after.find(['/', '?']).unwrap_or(after.len());
    let (mut hosts, tail) = after.split_at(host_end);
    // A host name never holds `@`: one here means the password did, raw.
    let mut password_spilled = false;
    if let Some(at) = hosts.rfind('@') {
        hosts = &hosts[at + 1..];
        password_spilled = true;
    }
    if let Some(credentials) = credentials {
        let (user, password) = match credentials.split_once(':') {
            Some((user, _)) => (user, true),
            None => (credentials, false),
        };
        // A user part with URL punctuation is not a user name but a
        // misplaced `@` swallowing the path or query, parameters included.
        if user.contains(['/', '?', '=', '&', '#']) || user.contains(char::is_whitespace) {
            out.push_str(HIDDEN);
        } else {
            out.push_str(user);
        }
        if password || password_spilled {
            out.push(':');
            out.push_str(HIDDEN);
        }
        out.push('@');
    }
    let hosts: Vec<String> = hosts.split(',').map(redact_host).collect();
    out.push_str(&hosts.join(","));
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    out.push_str(path);
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query.split('&').map(redact_url_param).collect();
        out.push_str(&params.join("&"));
    }
    out
}

/// One `host[:port]` of a URL's host list. A port that is not a number is
/// most likely a password whose `@` was forgotten (`postgres://user:pw`).
fn redact_host(host: &str) -> String {
    // `[v6]:port` keeps its colons inside the brackets.
    let port_at = match host.rfind(']') {
        Some(bracket) => host[bracket..].find(':').map(|i| bracket + i),
        None => host.find(':'),
    };
    match port_at {
        Some(colon) if !host[colon + 1..].bytes().all(|b| b.is_ascii_digit()) => {
            format!("{}:{HIDDEN}", &host[..colon])
        }
        _ => host.to_string(),
    }
}

/// `%XX` escapes decoded (invalid UTF-8 replaced): only to recognise a
/// parameter's key, never shown.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn redact_url_param(param: &str) -> String {
    let Some((raw_key, _)) = param.split_once('=') else {
        // Not an option at all: a piece of a value that held a raw `&`.
        return HIDDEN.to_string();
    };
    let key = percent_decode(raw_key);
    if is_secret_key(&key) {
        format!("{raw_key}={HIDDEN}")
    } else if PLAIN_OPTIONS.contains(&key.as_str()) {
        param.to_string()
    } else {
        HIDDEN.to_string()
    }
}

/// Read the way tokio-postgres reads `key = value` pairs: keys end at
/// whitespace or `=`, values are either single-quoted (with backslash
/// escapes) or run to the next whitespace (also with escapes).
fn redact_key_value(text: &str) -> String {
    let mut pieces: Vec<String> = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        match next_pair(rest) {
            Some((piece, after)) => {
                pieces.push(piece);
                rest = after.trim_start();
            }
            None => {
                if pieces.is_empty() {
                    return "<unparseable database url>".to_string();
                }
                pieces.push(UNREADABLE.to_string());
                break;
            }
        }
    }
    if pieces.is_empty() {
        return "<empty database url>".to_string();
    }
    pieces.join(" ")
}

/// The redacted form of the first pair of `text` and what follows it, or
/// `None` when no complete pair starts there.
fn next_pair(text: &str) -> Option<(String, &str)> {
    // This function's own marker for a hidden pair, so redacting twice is
    // harmless.
    if let Some(after) = text.strip_prefix(HIDDEN)
        && after.chars().next().is_none_or(char::is_whitespace)
    {
        return Some((HIDDEN.to_string(), after));
    }
    let key_end = text
        .find(|c: char| c.is_whitespace() || c == '=')
        .unwrap_or(text.len());
    let key = &text[..key_end];
    if key.is_empty() {
        return None;
    }
    let after_key = text[key_end..].trim_start();
    let value_text = after_key.strip_prefix('=')?.trim_start();
    let value_len = value_length(value_text)?;
    let (value, after) = value_text.split_at(value_len);
    let piece = if is_secret_key(key) {
        format!("{key}={HIDDEN}")
    } else if PLAIN_OPTIONS.contains(&key.to_ascii_lowercase().as_str()) {
        format!("{key}={value}")
    } else {
        HIDDEN.to_string()
    };
    Some((piece, after))
}

/// How many bytes of `text` the value at its start takes, quotes included,
/// or `None` if it is empty or its quote is never closed.
fn value_length(text: &str) -> Option<usize> {
    let quoted = text.starts_with('\'');
    let mut chars = text.char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return Some(i + 1),
            c if !quoted && c.is_whitespace() => return (i > 0).then_some(i),
            _ => {}
        }
    }
    (!quoted && !text.is_empty()).then_some(text.len())
}

/// Free text (an error message, a server's message) with every connection
/// string in it redacted by [`redact`] and the value of every
/// `password=...` in it hidden. For text that only may hold a secret; a
/// connection string on its own goes through [`redact`].
pub fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (word, after) = rest.split_at(word_end);
        out.push_str(&scrub_word(word));
        let space_end = after
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(after.len());
        out.push_str(&after[..space_end]);
        rest = &after[space_end..];
    }
    hide_password_values(&out)
}

/// A word with a URL in it, redacted; anything else as it is.
fn scrub_word(word: &str) -> String {
    let Some(sep) = word.find("://") else {
        return word.to_string();
    };
    let start = word[..sep]
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .map_or(0, |i| i + 1);
    let url = &word[start..];
    // Punctuation that ends a sentence or a quotation, not the URL.
    let url_end = url
        .trim_end_matches(|c: char| {
            matches!(c, '.' | ',' | ';' | ':' | ')' | ']' | '"' | '\'' | '`')
        })
        .len();
    if split_scheme(&url[..url_end]).is_none() {
        return word.to_string();
    }
    format!(
        "{}{}{}",
        &word[..start],
        redact(&url[..url_end]),
        &url[url_end..]
    )
}

/// `password = value` (any case, quoted or not) with the value hidden.
fn hide_password_values(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find("password") {
        let key_end = search + found + "password".len();
        search = key_end;
        let after_key = &text[key_end..];
        let Some(value_text) = after_key.trim_start().strip_prefix('=') else {
            continue;
        };
        let value_text = value_text.trim_start();
        let value_start = text.len() - value_text.len();
        let already_hidden = value_text.strip_prefix(HIDDEN).is_some_and(|after| {
            after.chars().next().is_none_or(|c| {
                c.is_whitespace() || matches!(c, '&' | '.' | ',' | ';' | ':' | ')' | '"' | '`')
            })
        });
        let value_len = if already_hidden {
            // Redacted already (a connection string in the text); keep the
            // punctuation after it.
            HIDDEN.len()
        } else if value_text.starts_with('\'') {
            // An unclosed quote hides everything after it.
            value_length(value_text).unwrap_or(value_text.len())
        } else {
            value_text
                .find(|c: char| c.is_whitespace() || c == '&')
                .unwrap_or(value_text.len())
        };
        out.push_str(&text[copied..value_start]);
        out.push_str(HIDDEN);
        copied = value_start + value_len;
        search = copied.max(search);
    }
    out.push_str(&text[copied..]);
    out
}

/// A driver or pool failure as a person can act on it: the server's own
/// SQLSTATE and message (`SQLSTATE 3D000: database "x" does not exist`)
/// instead of tokio-postgres' bare "db error", and the causes of a
/// connection failure instead of deadpool's "Error occurred while creating
/// a new object". Connection strings and `password=` values in the text are
/// hidden ([`scrub`]).
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(error) = next {
        next = error.source();
        if let Some(db) = error.downcast_ref::<tokio_postgres::error::DbError>() {
            parts.push(server_message(db));
            break;
        }
        let text = if let Some(pg) = error.downcast_ref::<tokio_postgres::Error>() {
            // "db error" says nothing its source (the server's message)
            // does not say better.
            if pg.as_db_error().is_some() {
                continue;
            }
            pg.to_string()
        } else if let Some(pool) = error.downcast_ref::<deadpool_postgres::PoolError>() {
            match pool {
                // The source (the driver's error) says why.
                deadpool_postgres::PoolError::Backend(_) => continue,
                deadpool_postgres::PoolError::Timeout(kind) => format!(
                    "no database connection within {} ({})",
                    humantime::format_duration(crate::timeouts::DATABASE_CONNECT),
                    match kind {
                        deadpool_postgres::TimeoutType::Wait => "every pooled connection was busy",
                        deadpool_postgres::TimeoutType::Create => "connecting took too long",
                        deadpool_postgres::TimeoutType::Recycle => {
                            "checking a pooled connection took too long"
                        }
                    }
                ),
                other => other.to_string(),
            }
        } else {
            error.to_string()
        };
        // Many errors repeat their source's text in their own.
        if !parts.last().is_some_and(|last| last.contains(&text)) {
            parts.push(text);
        }
    }
    let mut described = scrub(&parts.join(": "));
    if let Some(advice) = pooler_advice(error) {
        described.push_str("; ");
        described.push_str(advice);
    }
    described
}

/// What to do when a server session forgot a named statement the host
/// prepared on it (26000), or already has one of its name (42P05): the
/// host's sessions are being handed to other clients between
/// transactions, as a transaction pooler does, and the host was not told.
fn pooler_advice(error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    use tokio_postgres::error::SqlState;
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(db) = error.downcast_ref::<tokio_postgres::error::DbError>() {
            let code = db.code();
            return (*code == SqlState::INVALID_SQL_STATEMENT_NAME
                || *code == SqlState::DUPLICATE_PSTATEMENT)
                .then_some(
                    "the host's sessions seem to pass through a transaction pooler (PgBouncer \
                     pool_mode = transaction): set [database] pooler = \"transaction\" and a \
                     [database] session_url that reaches PostgreSQL itself",
                );
        }
        next = error.source();
    }
    None
}

/// [`describe`] for callers that hold any displayable failure: driver and
/// pool errors are described, anything else is shown scrubbed.
pub fn describe_any<E: std::fmt::Display + 'static>(error: &E) -> String {
    let any: &dyn std::any::Any = error;
    if let Some(e) = any.downcast_ref::<tokio_postgres::Error>() {
        describe(e)
    } else if let Some(e) = any.downcast_ref::<deadpool_postgres::PoolError>() {
        describe(e)
    } else if let Some(e) = any.downcast_ref::<DbError>() {
        // Already described when it was made.
        e.to_string()
    } else {
        scrub(&error.to_string())
    }
}

/// The server's error: SQLSTATE, message, and its hint when it gave one.
/// The detail is left out: it can quote row values.
fn server_message(db: &tokio_postgres::error::DbError) -> String {
    let mut text = format!("SQLSTATE {}: {}", db.code().code(), db.message());
    if let Some(hint) = db.hint() {
        text.push_str(&format!(" (hint: {hint})"));
    }
    text
}

/// What to do about a failure to reach or enter the database, for the
/// SQLSTATEs whose fix is in the connection string or the server's setup.
fn advice(error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(db) = error.downcast_ref::<tokio_postgres::error::DbError>() {
            use tokio_postgres::error::SqlState;
            let code = db.code();
            return if *code == SqlState::INVALID_CATALOG_NAME {
                Some("create the database, or correct its name in the URL")
            } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
                Some("create the role (CREATE ROLE ... LOGIN), or correct the user in the URL")
            } else if *code == SqlState::INVALID_PASSWORD {
                Some("correct the password for this role")
            } else {
                None
            };
        }
        next = error.source();
    }
    None
}

/// The label of the main pool in metrics (`leasehold_db_pool_*{pool}`);
/// a [`Database::sibling`] is labelled by its `application_name` without
/// the `leasehold-` prefix (the authority's: `authority`).
pub const MAIN_POOL: &str = "main";

/// A connection string parsed: its TLS parameters read into a
/// [`crate::db_tls::Connector`] (files read now), the rest by
/// tokio-postgres, with the mode the connector needs. The error says what
/// is wrong, never the string's secrets.
pub fn parse_connection(
    url: &str,
) -> Result<(tokio_postgres::Config, crate::db_tls::Connector), String> {
    let (mut config, params) = parse_syntax(url)?;
    let tls = crate::db_tls::Connector::new(params)?;
    tls.apply(&mut config);
    Ok((config, tls))
}

/// A connection string read without touching any file it names: its TLS
/// parameters by libpq's rules, the rest by tokio-postgres (what the
/// config checks; [`parse_connection`] reads the files too).
pub fn parse_syntax(
    url: &str,
) -> Result<(tokio_postgres::Config, crate::db_tls::TlsParams), String> {
    let split = crate::db_tls::split(url)?;
    let config: tokio_postgres::Config = split
        .rest
        .parse()
        .map_err(|e: tokio_postgres::Error| describe(&e))?;
    Ok((config, split.tls))
}

/// Where and how a dedicated session to `url` connects.
pub fn session_target(url: &str) -> Result<crate::db_tls::Target, String> {
    let (mut config, tls) = parse_connection(url)?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(crate::timeouts::DATABASE_CONNECT);
    }
    Ok(crate::db_tls::Target { config, tls })
}

/// What a pool looks like at one moment, for `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    /// The pool's label: [`MAIN_POOL`] or the sibling's name.
    pub name: String,
    /// Its configured size.
    pub max: usize,
    /// Connections handed out now.
    pub in_use: usize,
    /// Connections open and idle in the pool.
    pub idle: usize,
    /// Callers waiting for a connection now.
    pub waiting: usize,
    /// Calls that got no connection in time since the host started, by
    /// kind: `wait` (every connection busy), `create` (connecting took too
    /// long), `recycle` (checking a pooled connection took too long).
    pub timeouts: [(&'static str, u64); 3],
    /// What the start-up notification self-test found: a `NOTIFY` sent
    /// through this pool reached the host's LISTEN session (`Some(true)`),
    /// or not (`Some(false)`); `None` until it ran.
    pub notifications: Option<bool>,
    /// Whether the last session the pool opened is encrypted (TLS);
    /// `None` before the first.
    pub encrypted: Option<bool>,
    /// The same for the dedicated sessions (claim, listener, change feed)
    /// made from this pool's configuration.
    pub session_encrypted: Option<bool>,
    /// What the pool's `sslmode` and files ask for, in words.
    pub tls: String,
}

/// The pool of a [`Database`]: a `deadpool` pool whose [`PooledPool::get`]
/// also counts the calls that got no connection in time (what pool
/// starvation looks like from inside). Everything else is the pool's own
/// (it dereferences to [`Pool`]).
#[derive(Clone)]
pub struct PooledPool {
    pool: Pool,
    /// `wait`, `create`, `recycle` timeouts.
    timeouts: std::sync::Arc<[std::sync::atomic::AtomicU64; 3]>,
}

impl PooledPool {
    /// A connection from the pool, as [`Pool::get`]; a timeout is counted.
    pub async fn get(&self) -> Result<deadpool_postgres::Object, deadpool_postgres::PoolError> {
        let got = self.pool.get().await;
        if let Err(deadpool_postgres::PoolError::Timeout(kind)) = &got {
            let i = match kind {
                deadpool_postgres::TimeoutType::Wait => 0,
                deadpool_postgres::TimeoutType::Create => 1,
                deadpool_postgres::TimeoutType::Recycle => 2,
            };
            self.timeouts[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        got
    }
}

impl std::ops::Deref for PooledPool {
    type Target = Pool;

    fn deref(&self) -> &Pool {
        &self.pool
    }
}

/// How the main URL reaches PostgreSQL (`[database] pooler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooler {
    /// PostgreSQL itself, or a pooler that keeps a client on one server
    /// session: statements are prepared once per session and cached.
    #[default]
    None,
    /// A pooler in transaction pooling (PgBouncer's `pool_mode =
    /// transaction`): consecutive transactions of one pooled connection
    /// may run on different server sessions, so nothing on a pooled
    /// connection relies on session state. Statements run unnamed, their
    /// parameter types given ([`Prepared::Unnamed`]); `LISTEN` and the
    /// liveness session go to `[database] session_url`.
    Transaction,
}

impl Pooler {
    /// The value of `[database] pooler` that selects this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooler::None => "none",
            Pooler::Transaction => "transaction",
        }
    }
}

/// A statement ready to run on a pooled connection: what
/// [`Database::prepare`] gives, in the form the pool's [`Pooler`] mode
/// allows. Its `query*` and `execute` methods send it with its parameters in
/// one flight either way, so callers pipeline it as they would a
/// [`tokio_postgres::Statement`].
#[derive(Clone)]
pub enum Prepared {
    /// A named statement, prepared once on this session and cached there
    /// ([`Pooler::None`]).
    Named(tokio_postgres::Statement),
    /// The text and the parameter types the server inferred for it, sent
    /// each time as the unnamed statement: `Parse`, `Bind`, `Execute` and
    /// `Sync` in one message, so no later message relies on the server
    /// session that parsed it ([`Pooler::Transaction`]).
    Unnamed {
        /// The statement's text.
        sql: std::sync::Arc<str>,
        /// Its parameters' types, as the server inferred them.
        types: std::sync::Arc<[tokio_postgres::types::Type]>,
    },
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Prepared::Named(statement) => f.debug_tuple("Named").field(statement).finish(),
            Prepared::Unnamed { types, .. } => f
                .debug_struct("Unnamed")
                .field("types", types)
                .finish_non_exhaustive(),
        }
    }
}

/// A parameter as `query*`/`execute` take it.
pub type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);

impl Prepared {
    fn typed<'a>(
        types: &[tokio_postgres::types::Type],
        params: &[Param<'a>],
    ) -> Vec<(Param<'a>, tokio_postgres::types::Type)> {
        params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                // A parameter past the statement's own is declared text;
                // the server refuses the count, as a named statement's
                // bind would be refused.
                let ty = types
                    .get(i)
                    .cloned()
                    .unwrap_or(tokio_postgres::types::Type::TEXT);
                (*p, ty)
            })
            .collect()
    }

    /// Run it, every row.
    pub async fn query(
        &self,
        client: &tokio_postgres::Client,
        params: &[Param<'_>],
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        match self {
            Prepared::Named(statement) => client.query(statement, params).await,
            Prepared::Unnamed { sql, types } => {
                client.query_typed(sql, &Self::typed(types, params)).await
            }
        }
    }

    /// Run it, exactly one row (an error otherwise).
    pub async fn query_one(
        &self,
        client: &tokio_postgres::Client,
        params: &[Param<'_>],
    ) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
        match self {
            Prepared::Named(statement) => client.query_one(statement, params).await,
            Prepared::Unnamed { sql, types } => {
                client
                    .query_typed_one(sql, &Self::typed(types, params))
                    .await
            }
        }
    }

    /// Run it, at most one row (an error on more).
    pub async fn query_opt(
        &self,
        client: &tokio_postgres::Client,
        params: &[Param<'_>],
    ) -> Result<Option<tokio_postgres::Row>, tokio_postgres::Error> {
        match self {
            Prepared::Named(statement) => client.query_opt(statement, params).await,
            Prepared::Unnamed { sql, types } => {
                client
                    .query_typed_opt(sql, &Self::typed(types, params))
                    .await
            }
        }
    }

    /// Run it, the number of rows it changed.
    pub async fn execute(
        &self,
        client: &tokio_postgres::Client,
        params: &[Param<'_>],
    ) -> Result<u64, tokio_postgres::Error> {
        match self {
            Prepared::Named(statement) => client.execute(statement, params).await,
            Prepared::Unnamed { sql, types } => {
                client.execute_typed(sql, &Self::typed(types, params)).await
            }
        }
    }
}

/// A pooled session [`Database::prepare`] prepares on: a pooled connection
/// or a transaction on one.
pub trait Session: Sync {
    /// The session's client.
    fn pg(&self) -> &tokio_postgres::Client;
    /// `sql` as a named statement from (or into) the session's cache.
    fn prepare_cached(
        &self,
        sql: &str,
    ) -> impl std::future::Future<Output = Result<tokio_postgres::Statement, tokio_postgres::Error>> + Send;
}

impl Session for deadpool_postgres::ClientWrapper {
    fn pg(&self) -> &tokio_postgres::Client {
        self
    }

    fn prepare_cached(
        &self,
        sql: &str,
    ) -> impl std::future::Future<Output = Result<tokio_postgres::Statement, tokio_postgres::Error>> + Send
    {
        deadpool_postgres::ClientWrapper::prepare_cached(self, sql)
    }
}

impl Session for deadpool_postgres::Object {
    fn pg(&self) -> &tokio_postgres::Client {
        self
    }

    fn prepare_cached(
        &self,
        sql: &str,
    ) -> impl std::future::Future<Output = Result<tokio_postgres::Statement, tokio_postgres::Error>> + Send
    {
        deadpool_postgres::ClientWrapper::prepare_cached(self, sql)
    }
}

impl Session for deadpool_postgres::Transaction<'_> {
    fn pg(&self) -> &tokio_postgres::Client {
        self.client()
    }

    fn prepare_cached(
        &self,
        sql: &str,
    ) -> impl std::future::Future<Output = Result<tokio_postgres::Statement, tokio_postgres::Error>> + Send
    {
        deadpool_postgres::Transaction::prepare_cached(self, sql)
    }
}

/// What the statements of a [`Database`] (and its siblings) share: the
/// pooler mode and, in [`Pooler::Transaction`], the parameter types learnt
/// for each statement text.
#[derive(Default)]
struct Statements {
    pooler: Pooler,
    types: std::sync::Mutex<
        std::collections::HashMap<
            std::sync::Arc<str>,
            std::sync::Arc<[tokio_postgres::types::Type]>,
        >,
    >,
}

/// The name under which [`Database::prepare`] describes a statement in
/// [`Pooler::Transaction`]: prepared, read and deallocated in one
/// simple-protocol message, so one server session sees all three.
const DESCRIBED: &str = "leasehold_describe";

/// A connection pool plus the endpoint it talks to.
#[derive(Clone)]
pub struct Database {
    pool: PooledPool,
    /// The pool's label in metrics.
    name: String,
    endpoint: String,
    config: tokio_postgres::Config,
    sessions: std::sync::Arc<crate::session::Sessions>,
    statements: std::sync::Arc<Statements>,
    /// How this pool's sessions are encrypted (the URL's `ssl*`
    /// parameters), and whether the last one opened was.
    tls: crate::db_tls::Connector,
    /// Where dedicated sessions (LISTEN, the liveness session, the change
    /// feed) connect: `[database] session_url` with its own TLS, or else
    /// this pool's URL with a connector of its own (so `/metrics` tells
    /// their encryption apart from the pool's).
    session: crate::db_tls::Target,
    /// `session`'s endpoint, password redacted: `[database] session_url`,
    /// or else `endpoint`.
    session_endpoint: String,
    /// The notification self-test's verdict, shared with the siblings:
    /// 0 not run, 1 passed, 2 failed.
    notifications: std::sync::Arc<std::sync::atomic::AtomicU8>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Build a pool for `url` (nothing is connected yet).
    pub fn new(url: &str, max_connections: usize) -> Result<Self, DbError> {
        let endpoint = redact(url);
        let (mut config, tls) = parse_connection(url).map_err(|reason| DbError::InvalidUrl {
            endpoint: endpoint.clone(),
            reason,
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(crate::timeouts::DATABASE_CONNECT);
        }
        if config.get_application_name().is_none() {
            config.application_name("leasehold");
        }
        let sessions = std::sync::Arc::new(crate::session::Sessions::new());
        Self::build(config, tls, endpoint, max_connections, sessions, MAIN_POOL)
    }

    /// A second pool of at most `max_connections` to the same database, for
    /// one kind of work that must not wait behind this pool's (the lease
    /// authority's: [`crate::limits::AUTHORITY_POOL_CONNECTIONS`]). Its
    /// sessions carry `application_name` = `application` (whatever the URL
    /// set), so operators can tell the pools apart in `pg_stat_activity`.
    /// Both pools share one session retirement ([`crate::session`]): a
    /// failure that leaves sessions unusable, seen through either pool,
    /// retires the sessions of both, as it did when there was one pool.
    /// In metrics it is labelled `application` without its `leasehold-`
    /// prefix ([`AUTHORITY_APPLICATION`]: `authority`).
    pub fn sibling(&self, max_connections: usize, application: &str) -> Result<Self, DbError> {
        let mut config = self.config.clone();
        config.application_name(application);
        let name = application
            .strip_prefix("leasehold-")
            .unwrap_or(application);
        let mut sibling = Self::build(
            config,
            self.tls.fresh(),
            self.endpoint.clone(),
            max_connections,
            self.sessions.clone(),
            name,
        )?;
        sibling.statements = self.statements.clone();
        sibling.session = self.session.clone();
        sibling.session_endpoint = self.session_endpoint.clone();
        sibling.notifications = self.notifications.clone();
        Ok(sibling)
    }

    /// This pool as `[database]` says beyond its URL and size: its
    /// [`Pooler`] mode and its `session_url`.
    pub fn configured(self, database: &crate::config::DatabaseConfig) -> Result<Self, DbError> {
        let db = self.with_pooler(database.pooler);
        match &database.session_url {
            Some(url) => db.with_session_url(url),
            None => Ok(db),
        }
    }

    /// This pool (and the siblings made from it afterwards) in `pooler`
    /// mode. Call before the first [`Database::prepare`].
    pub fn with_pooler(mut self, pooler: Pooler) -> Self {
        self.statements = std::sync::Arc::new(Statements {
            pooler,
            ..Statements::default()
        });
        self
    }

    /// Record what the notification self-test found (shown in
    /// [`PoolStats::notifications`], for this pool and its siblings).
    pub fn note_notifications(&self, arrived: bool) {
        self.notifications.store(
            if arrived { 1 } else { 2 },
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The pooler mode of this pool.
    pub fn pooler(&self) -> Pooler {
        self.statements.pooler
    }

    /// Open the dedicated sessions (LISTEN, the liveness session) at `url`
    /// (`[database] session_url`) instead of this pool's URL.
    pub fn with_session_url(mut self, url: &str) -> Result<Self, DbError> {
        self.session = session_target(url).map_err(|reason| DbError::InvalidUrl {
            endpoint: redact(url),
            reason: format!("session_url: {reason}"),
        })?;
        self.session_endpoint = redact(url);
        Ok(self)
    }

    /// Where dedicated sessions connect ([`Database::session_target`]),
    /// password redacted: safe to log.
    pub fn session_endpoint(&self) -> &str {
        &self.session_endpoint
    }

    /// This pool's handle with errors naming the dedicated sessions'
    /// endpoint ([`Database::session_endpoint`]): for the errors of a
    /// session opened at `session_url`, which must name where it
    /// connected, not the pool's URL.
    pub fn at_sessions(&self) -> Self {
        let mut at = self.clone();
        at.endpoint = self.session_endpoint.clone();
        at
    }

    /// Where and how dedicated, never-pooled sessions connect:
    /// `[database] session_url`'s, or else this pool's URL (with a
    /// connector of their own, so `/metrics` tells their encryption
    /// apart).
    pub fn session_target(&self) -> crate::db_tls::Target {
        let mut target = self.session.clone();
        if target.config.get_connect_timeout().is_none() {
            target
                .config
                .connect_timeout(crate::timeouts::DATABASE_CONNECT);
        }
        target
    }

    /// How this pool's sessions are encrypted, and whether the last one
    /// opened was.
    pub fn tls(&self) -> &crate::db_tls::Connector {
        &self.tls
    }

    /// Whether the last dedicated session (claim, listener, change feed)
    /// opened was encrypted.
    pub fn session_encryption(&self) -> crate::db_tls::Encryption {
        self.session.tls.encryption()
    }

    /// `sql`, ready to run on `session` in this pool's [`Pooler`] mode: a
    /// named statement from the session's cache ([`Pooler::None`]), or the
    /// text with the parameter types the server infers for it
    /// ([`Pooler::Transaction`]; learnt once per text, by preparing,
    /// reading and deallocating it in one simple-protocol message, which a
    /// transaction pooler sends to one server session).
    pub async fn prepare(
        &self,
        session: &impl Session,
        sql: &str,
    ) -> Result<Prepared, tokio_postgres::Error> {
        if self.statements.pooler == Pooler::None {
            return session.prepare_cached(sql).await.map(Prepared::Named);
        }
        let known = self
            .statements
            .types
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_key_value(sql)
            .map(|(sql, types)| (sql.clone(), types.clone()));
        if let Some((sql, types)) = known {
            return Ok(Prepared::Unnamed { sql, types });
        }
        let messages = session
            .pg()
            .simple_query(&format!(
                "PREPARE {DESCRIBED} AS {sql}; \
                 SELECT parameter_types::oid[]::text FROM pg_prepared_statements \
                  WHERE name = '{DESCRIBED}'; \
                 DEALLOCATE {DESCRIBED}"
            ))
            .await?;
        let listed = messages
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or("{}")),
                _ => None,
            })
            .unwrap_or("{}");
        let types: std::sync::Arc<[tokio_postgres::types::Type]> = listed
            .trim_matches(|c| c == '{' || c == '}')
            .split(',')
            .filter(|oid| !oid.is_empty())
            .map(|oid| {
                let oid: u32 = oid.trim().parse().unwrap_or(0);
                tokio_postgres::types::Type::from_oid(oid).unwrap_or_else(|| {
                    // Not a built-in type: a value of it is refused by
                    // name when sent (no statement of the host has one).
                    tokio_postgres::types::Type::new(
                        format!("oid {oid}"),
                        oid,
                        tokio_postgres::types::Kind::Simple,
                        String::new(),
                    )
                })
            })
            .collect();
        let sql: std::sync::Arc<str> = sql.into();
        self.statements
            .types
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(sql.clone(), types.clone());
        Ok(Prepared::Unnamed { sql, types })
    }

    fn build(
        config: tokio_postgres::Config,
        tls: crate::db_tls::Connector,
        endpoint: String,
        max_connections: usize,
        sessions: std::sync::Arc<crate::session::Sessions>,
        name: &str,
    ) -> Result<Self, DbError> {
        let manager = Manager::from_connect(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                // Fast: a closed connection is never handed out, and a
                // connection whose transaction was abandoned by a cancelled
                // caller is closed by tokio-postgres when the `Transaction`
                // drops without commit (it sends ROLLBACK first), or, for
                // the store's hand-made transactions, taken out of the pool
                // (`Session`). Whether the session still answers is asked
                // only of sessions idle for long (`verify_idle_sessions`):
                // asking on every checkout was a round trip more for every
                // statement of a busy host.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .pre_recycle(sessions.clone().pre_recycle())
            .pre_recycle(verify_idle_sessions(crate::timeouts::SESSION_VERIFY_IDLE))
            .max_size(max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(crate::timeouts::DATABASE_CONNECT))
            .create_timeout(Some(crate::timeouts::DATABASE_CONNECT))
            .recycle_timeout(Some(crate::timeouts::DATABASE_CONNECT))
            .build()
            .map_err(|e| DbError::InvalidUrl {
                endpoint: endpoint.clone(),
                reason: e.to_string(),
            })?;
        let session = crate::db_tls::Target {
            config: config.clone(),
            tls: tls.fresh(),
        };
        Ok(Self {
            pool: PooledPool {
                pool,
                timeouts: std::sync::Arc::default(),
            },
            name: name.to_string(),
            session_endpoint: endpoint.clone(),
            endpoint,
            config,
            sessions,
            statements: std::sync::Arc::default(),
            session,
            tls,
            notifications: std::sync::Arc::default(),
        })
    }

    /// The pool's size, use and timeouts now, labelled for `/metrics`.
    pub fn pool_stats(&self) -> PoolStats {
        let status = self.pool.status();
        let count = |i: usize| self.pool.timeouts[i].load(std::sync::atomic::Ordering::Relaxed);
        PoolStats {
            name: self.name.clone(),
            max: status.max_size,
            in_use: status.size.saturating_sub(status.available),
            idle: status.available,
            waiting: status.waiting,
            timeouts: [
                ("wait", count(0)),
                ("create", count(1)),
                ("recycle", count(2)),
            ],
            notifications: match self
                .notifications
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                1 => Some(true),
                2 => Some(false),
                _ => None,
            },
            encrypted: self.tls.encryption().known(),
            session_encrypted: self.session.tls.encryption().known(),
            tls: self.tls.params().summary(),
        }
    }

    /// The endpoint, password redacted: safe to log.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The pool (its `get` counts timeouts for [`Database::pool_stats`]).
    pub fn pool(&self) -> &PooledPool {
        &self.pool
    }

    /// The parsed connection config, for dedicated (unpooled) sessions such
    /// as LISTEN.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The pool's session retirement (see [`crate::session`]).
    pub fn sessions(&self) -> &crate::session::Sessions {
        &self.sessions
    }

    /// A pooled client, or `Unavailable` naming the endpoint.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, DbError> {
        self.pool.get().await.map_err(|e| self.unavailable(e))
    }

    /// Wrap a failure with the (redacted) endpoint and its cause as
    /// [`describe`] gives it, plus what to do when the fix is in the
    /// connection string or the server's setup. A driver error that
    /// leaves sessions unusable also retires the pooled sessions
    /// ([`crate::session`]).
    pub fn unavailable(&self, error: impl std::fmt::Display + 'static) -> DbError {
        self.sessions.observe(&error);
        let mut reason = describe_any(&error);
        let any: &dyn std::any::Any = &error;
        let cause: Option<&(dyn std::error::Error + 'static)> =
            match any.downcast_ref::<tokio_postgres::Error>() {
                Some(e) => Some(e),
                None => any
                    .downcast_ref::<deadpool_postgres::PoolError>()
                    .map(|e| e as _),
            };
        if let Some(advice) = cause.and_then(advice) {
            reason.push_str("; ");
            reason.push_str(advice);
        }
        if let Some(refusal) = cause.and_then(crate::db_tls::refusal) {
            return DbError::Refused {
                endpoint: self.endpoint.clone(),
                reason: format!("{refusal} ({reason})"),
            };
        }
        DbError::Unavailable {
            endpoint: self.endpoint.clone(),
            reason,
        }
    }

    /// Apply every migration not yet applied. Idempotent and safe to run
    /// from several hosts at once: they serialize on the migration lock,
    /// waiting at most [`crate::timeouts::MIGRATION_LOCK_WAIT`] for it.
    ///
    /// Refused, saying why: on a server in recovery (a standby); while
    /// another host holds the migration lock past the wait (naming its
    /// session); and when the database has a migration this host does not
    /// know (a newer host migrated it: upgrade this one). Each statement
    /// waits at most [`crate::timeouts::MIGRATION_STATEMENT_LOCK`] for a
    /// table lock and the transaction may sit idle at most
    /// [`crate::timeouts::MIGRATION_IDLE`], so a migration never queues the
    /// cluster's queries behind it for long.
    pub async fn migrate(&self) -> Result<Vec<i32>, DbError> {
        self.migrate_with(known_migrations(), crate::timeouts::MIGRATION_LOCK_WAIT)
            .await
    }

    /// [`Database::migrate`] with another list of migrations (a test's
    /// newer host) and another wait for the migration lock.
    pub async fn migrate_with(
        &self,
        migrations: &[(i32, &str)],
        lock_wait: Duration,
    ) -> Result<Vec<i32>, DbError> {
        let refused = |reason: String| DbError::Unavailable {
            endpoint: self.endpoint.clone(),
            reason,
        };
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| self.unavailable(e))?;
        tx.batch_execute(&format!(
            "SET LOCAL idle_in_transaction_session_timeout = {}; SET LOCAL lock_timeout = {}",
            crate::timeouts::MIGRATION_IDLE.as_millis(),
            lock_wait.as_millis().max(1)
        ))
        .await
        .map_err(|e| self.unavailable(e))?;
        let in_recovery: bool = tx
            .query_typed_one("SELECT pg_is_in_recovery()", &[])
            .await
            .map_err(|e| self.unavailable(e))?
            .get(0);
        if in_recovery {
            return Err(refused(IN_RECOVERY.to_string()));
        }
        // A fixed key: serializes concurrent migrators. Transaction-scoped,
        // so it cannot leak through the pool.
        match tx
            .batch_execute("SELECT pg_advisory_xact_lock(7263414711)")
            .await
        {
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
                drop(tx);
                drop(client);
                let holder = self.migration_lock_holder().await;
                return Err(refused(format!(
                    "another session holds the migration lock ({holder}) and did not finish \
                     within {}: another host is migrating the schema, or is stalled mid-migration; \
                     this host migrates when it starts again",
                    humantime::format_duration(lock_wait)
                )));
            }
            locked => {
                locked.map_err(|e| self.unavailable(e))?;
            }
        }
        tx.batch_execute(&format!(
            "SET LOCAL lock_timeout = {}",
            crate::timeouts::MIGRATION_STATEMENT_LOCK.as_millis()
        ))
        .await
        .map_err(|e| self.unavailable(e))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS leasehold_migrations (
                 version    integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
             )",
        )
        .await
        .map_err(|e| self.unavailable(e))?;
        let applied: Vec<i32> = tx
            .query_typed("SELECT version FROM leasehold_migrations", &[])
            .await
            .map_err(|e| self.unavailable(e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut unknown: Vec<i32> = applied
            .iter()
            .copied()
            .filter(|v| !migrations.iter().any(|(known, _)| known == v))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            return Err(refused(newer_schema(
                &unknown,
                migrations.iter().map(|(v, _)| *v).max().unwrap_or(0),
            )));
        }
        let mut newly = Vec::new();
        for (version, sql) in migrations {
            if applied.contains(version) {
                continue;
            }
            tx.batch_execute(sql)
                .await
                .map_err(|e| DbError::Unavailable {
                    endpoint: self.endpoint.clone(),
                    reason: if e.code()
                        == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
                    {
                        format!(
                            "migration {version} waited over {} for a table lock another \
                             session holds, and gave up so as not to queue every query of that \
                             table behind it; nothing was changed: start again when the \
                             long-running transaction has ended ({})",
                            humantime::format_duration(crate::timeouts::MIGRATION_STATEMENT_LOCK),
                            describe(&e)
                        )
                    } else {
                        format!("migration {version} failed: {}", describe(&e))
                    },
                })?;
            tx.execute_typed(
                "INSERT INTO leasehold_migrations (version) VALUES ($1)",
                &[(version, tokio_postgres::types::Type::INT4)],
            )
            .await
            .map_err(|e| self.unavailable(e))?;
            newly.push(*version);
        }
        tx.commit().await.map_err(|e| self.unavailable(e))?;
        Ok(newly)
    }

    /// Who holds the migration lock, as far as `pg_stat_activity` tells.
    async fn migration_lock_holder(&self) -> String {
        let read = async {
            let client = self.client().await.ok()?;
            let row = client
                .query_typed_opt(
                    "SELECT a.pid, coalesce(a.application_name, ''),
                            coalesce(a.client_addr::text, 'local'),
                            a.xact_start
                       FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                      WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                        AND l.classid = ((7263414711::int8 >> 32) & 4294967295)::oid
                        AND l.objid = (7263414711::int8 & 4294967295)::oid
                        AND l.database = (SELECT oid FROM pg_database
                                           WHERE datname = current_database())",
                    &[],
                )
                .await
                .ok()??;
            let since: Option<chrono::DateTime<chrono::Utc>> = row.get(3);
            Some(format!(
                "backend pid {}, application {:?}, client {}, in its transaction since {}",
                row.get::<_, i32>(0),
                row.get::<_, String>(1),
                row.get::<_, String>(2),
                since.map_or_else(|| "unknown".to_string(), |t| t.to_rfc3339())
            ))
        };
        bounded_by(self, crate::timeouts::DATABASE_STATEMENT, async {
            Ok::<_, DbError>(read.await)
        })
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| "its session could not be read".to_string())
    }
}

/// Why a server in recovery is refused: migrations, leases and writes need
/// the primary.
pub const IN_RECOVERY: &str = "the server is in recovery (a standby): migrations, leases and \
     writes need the primary; point the URL at the primary, or list every server with \
     target_session_attrs=read-write";

/// A `pre_recycle` hook that asks a pooled session whether it still
/// answers (an empty query, bounded by
/// [`crate::timeouts::DATABASE_CONNECT`]) only when it was last handed out
/// more than `idle` ago; a session that does not answer is closed and the
/// pool takes, or opens, another. Sessions in steady use go out without
/// the round trip: a server that ended one of them closed its socket,
/// which the pool's own check (`is_closed`) sees, and every write checks
/// the database's identity in its own first flight anyway.
fn verify_idle_sessions(idle: Duration) -> deadpool_postgres::Hook {
    deadpool_postgres::Hook::async_fn(move |client, metrics| {
        Box::pin(async move {
            if metrics.last_used() < idle {
                return Ok(());
            }
            match tokio::time::timeout(crate::timeouts::DATABASE_CONNECT, client.simple_query(""))
                .await
            {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(deadpool_postgres::HookError::Backend(e)),
                Err(_) => Err(deadpool_postgres::HookError::message(
                    "an idle pooled session did not answer",
                )),
            }
        })
    })
}

/// Why a host refuses a database a newer host migrated.
pub fn newer_schema(unknown: &[i32], known: i32) -> String {
    format!(
        "the database has schema migration(s) {unknown:?}, newer than this host's (it knows up \
         to {known}): a newer Leasehold migrated it; upgrade this host before it leads or writes"
    )
}

/// Bound a database future by [`crate::timeouts::DATABASE_STATEMENT`].
pub async fn bounded<T, E: std::fmt::Display + 'static>(
    db: &Database,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, DbError> {
    bounded_by(db, crate::timeouts::DATABASE_STATEMENT, fut).await
}

/// Bound a database future by `limit`.
pub async fn bounded_by<T, E: std::fmt::Display + 'static>(
    db: &Database,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, DbError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(db.unavailable(e)),
        Err(_) => Err(db.unavailable(format!(
            "no answer within {}",
            humantime::format_duration(limit)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form a password can take, with what the redacted endpoint
    /// shows. The secret is always "s3cret" (or contains it).
    #[test]
    fn redact_hides_the_password_of_the_user_part() {
        assert_eq!(
            redact("postgres://alice:s3cret@db:5432/x"),
            "postgres://alice:***@db:5432/x"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1:5432/postgres"),
            "postgres://postgres@127.0.0.1:5432/postgres"
        );
        // A raw `@` or `/` in the password (tokio-postgres splits at the
        // first `@`).
        assert_eq!(
            redact("postgres://alice:s3/cr@et@db/x"),
            "postgres://alice:***@db/x"
        );
        assert_eq!(
            redact("postgresql://alice:s3%40cret@h1:5432,h2:5433/x"),
            "postgresql://alice:***@h1:5432,h2:5433/x"
        );
    }

    #[test]
    fn redact_hides_a_password_parameter_of_a_url() {
        assert_eq!(
            redact("postgres://alice@db/x?password=s3cret"),
            "postgres://alice@db/x?password=***"
        );
        assert_eq!(
            redact("postgres://alice@db/x?sslmode=disable&PassWord=s3cret&application_name=a"),
            "postgres://alice@db/x?sslmode=disable&PassWord=***&application_name=a"
        );
        // Percent-encoded key.
        assert_eq!(
            redact("postgres://db/x?pass%77ord=s3cret"),
            "postgres://db/x?pass%77ord=***"
        );
        // A raw `&` in the password: the rest looks like more parameters.
        assert_eq!(
            redact("postgres://db/x?password=s3&cret&x=s3cret"),
            "postgres://db/x?password=***&***&***"
        );
        // A misplaced `@` makes the query the "user part".
        assert!(!redact("postgres://db/x?password=s3cret@h").contains("s3cret"));
    }

    #[test]
    fn redact_hides_a_password_in_key_value_form() {
        assert_eq!(
            redact("host=db user=alice password=s3cret dbname=x"),
            "host=db user=alice password=*** dbname=x"
        );
        assert_eq!(
            redact(r"host=db password = 'two s3cret \' words' port=5432"),
            "host=db password=*** port=5432"
        );
        assert_eq!(redact("PASSWORD=s3cret host=db"), "PASSWORD=*** host=db");
        // An unquoted password with a space: its second word is no option.
        assert_eq!(
            redact("host=db password=s3 cret=s3cret"),
            "host=db password=*** ***"
        );
    }

    #[test]
    fn redact_never_leaks_unparseable_input() {
        for input in [
            "host=db password='s3cret",
            "host=db password=",
            "host=db s3cret",
            "s3cret",
            "postgres://alice:s3cret",
            "postgres://alice:s3cret@[bad",
            "postgres://db/x?password",
            "postgres://db/x?s3cret",
            "postgres://db/x?unknown=s3cret",
        ] {
            let redacted = redact(input);
            assert!(!redacted.contains("s3cret"), "{input} -> {redacted}");
            assert!(!redacted.contains("cret"), "{input} -> {redacted}");
        }
    }

    #[test]
    fn redacting_twice_changes_nothing() {
        for input in [
            "postgres://alice:s3cret@db:5432/x?password=s3cret&sslmode=disable&x=y",
            "host=db password='s 3' port=5432 odd=1",
            "host=db password='s3cret",
        ] {
            let once = redact(input);
            assert_eq!(redact(&once), once, "{input}");
        }
    }

    #[test]
    fn scrub_hides_connection_strings_and_password_values_in_text() {
        let text = scrub(
            "cannot reach postgres://alice:s3cret@db/x?password=s3cret: refused \
             (conninfo host=db password='s 3cret' port=1, PASSWORD=s3cret&x)",
        );
        assert!(
            !text.contains("s3cret") && !text.contains("3cret"),
            "{text}"
        );
        assert!(
            text.starts_with("cannot reach postgres://alice:***@db/x?password=***: refused"),
            "{text}"
        );
        assert!(text.contains("port=1"), "{text}");
        // Prose about passwords stays readable.
        assert_eq!(
            scrub(r#"password authentication failed for user "alice""#),
            r#"password authentication failed for user "alice""#
        );
    }

    #[test]
    fn invalid_urls_name_the_cause_without_the_password() {
        let error = Database::new("postgres://alice:s3cret@db:notaport/x", 1).unwrap_err();
        let text = error.to_string();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("port"), "{text}");
    }

    /// The authority's pool has connections of its own: every connection of
    /// the main pool busy, it still gets one at once, named apart; and it
    /// shares the main pool's retirement of unusable sessions.
    #[tokio::test]
    async fn a_sibling_pool_has_its_own_connections_and_shares_retirement() {
        let test = crate::testing::TestDatabase::create().await;
        let main = test.database(1);
        let authority = main.sibling(2, AUTHORITY_APPLICATION).unwrap();
        assert_eq!(authority.endpoint(), main.endpoint());
        // The main pool's one connection is taken (as an API flood takes
        // them all).
        let busy = main.client().await.unwrap();
        let started = std::time::Instant::now();
        let client = authority.client().await.unwrap();
        assert!(
            started.elapsed() < crate::timeouts::DATABASE_CONNECT / 2,
            "waited {:?} for a connection of the authority's pool",
            started.elapsed()
        );
        let name: String = client
            .query_one("SELECT current_setting('application_name')", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(name, AUTHORITY_APPLICATION);
        let main_name: String = busy
            .query_one("SELECT current_setting('application_name')", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(main_name, "leasehold");
        async fn pid(client: &deadpool_postgres::Object) -> i32 {
            client
                .query_one("SELECT pg_backend_pid()", &[])
                .await
                .unwrap()
                .get(0)
        }
        let before = pid(&client).await;
        drop(client);
        assert_eq!(pid(&authority.client().await.unwrap()).await, before);
        // A failure that leaves sessions unusable, seen through the main
        // pool, retires the authority's sessions too.
        main.sessions()
            .retire(&crate::session::Unusable::read_only());
        let after = pid(&authority.client().await.unwrap()).await;
        assert_ne!(after, before, "a retired session was handed out again");
    }

    /// A server error keeps its SQLSTATE and message through the pool.
    #[tokio::test]
    async fn connection_errors_carry_the_servers_sqlstate_and_message() {
        let admin = std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.to_string());
        let mut url = url::Url::parse(&admin).expect("admin url");
        let name = format!("no_such_db_{}", uuid::Uuid::new_v4().simple());
        url.set_path(&name);
        let db = Database::new(url.as_str(), 1).unwrap();
        let text = db.client().await.unwrap_err().to_string();
        assert!(text.contains("SQLSTATE 3D000"), "{text}");
        assert!(text.contains(&name), "{text}");
        assert!(text.contains("create the database"), "{text}");
        assert!(!text.contains("db error"), "{text}");
    }

    /// A named statement the server's session does not know (what a
    /// transaction pooler causes) is described with the key that fixes it.
    #[tokio::test]
    async fn a_lost_prepared_statement_names_the_pooler_key() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        let client = db.client().await.unwrap();
        for sql in [
            "EXECUTE leasehold_never_prepared",
            "PREPARE twice AS SELECT 1; PREPARE twice AS SELECT 1",
        ] {
            let error = client.batch_execute(sql).await.unwrap_err();
            let text = describe(&error);
            assert!(
                text.contains("[database] pooler = \"transaction\""),
                "{sql}: {text}"
            );
        }
        let other = client
            .batch_execute("SELECT * FROM no_such_table")
            .await
            .unwrap_err();
        assert!(!describe(&other).contains("pooler"), "{}", describe(&other));
    }

    /// Pool starvation shows in the pool's figures: a connection handed
    /// out is `in_use`, a caller queued behind it is `waiting`, and one
    /// that got nothing in time is counted as a `wait` timeout, per pool.
    #[tokio::test]
    async fn pool_stats_show_use_waiting_callers_and_timeouts() {
        let test = crate::testing::TestDatabase::create().await;
        let main = test.database(1);
        let authority = main.sibling(2, AUTHORITY_APPLICATION).unwrap();
        assert_eq!(main.pool_stats().name, MAIN_POOL);
        assert_eq!(authority.pool_stats().name, "authority");
        let held = main.client().await.expect("the one connection");
        let stats = main.pool_stats();
        assert_eq!((stats.max, stats.in_use, stats.waiting), (1, 1, 0));
        let waiter = {
            let main = main.clone();
            tokio::spawn(async move { main.client().await.map(drop) })
        };
        let started = std::time::Instant::now();
        while main.pool_stats().waiting == 0 {
            assert!(
                started.elapsed() < crate::timeouts::DATABASE_CONNECT,
                "never waiting"
            );
            tokio::task::yield_now().await;
        }
        let refused = waiter.await.unwrap().expect_err("no connection came free");
        assert!(refused.to_string().contains("busy"), "{refused}");
        let stats = main.pool_stats();
        assert_eq!(stats.timeouts[0], ("wait", 1), "{stats:?}");
        assert_eq!(stats.waiting, 0);
        // The other pool is untouched.
        assert_eq!(authority.pool_stats().timeouts[0], ("wait", 0));
        drop(held);
        assert_eq!(main.pool_stats().in_use, 0);
    }

    /// The backend `pid`'s last statement, as the server shows it.
    async fn last_statement(observer: &deadpool_postgres::Object, pid: i32) -> String {
        observer
            .query_one("SELECT query FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .await
            .unwrap()
            .get(0)
    }

    /// A session handed out again soon after its last use costs no round
    /// trip (the server saw nothing between the caller's statements); one
    /// idle for longer than the bound is asked whether it still answers
    /// first, and one that no longer does is replaced, not handed out.
    #[tokio::test]
    async fn only_sessions_idle_for_long_are_verified_before_use() {
        let test = crate::testing::TestDatabase::create().await;
        let observer = test.database(1);
        let observer = observer.client().await.unwrap();
        let marker = "SELECT 'last statement before the checkout'";

        // The host's pool: a session in steady use goes out as it is.
        let main = test.database(1);
        let client = main.client().await.unwrap();
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        client.simple_query(marker).await.unwrap();
        drop(client);
        let again = main.client().await.unwrap();
        assert_eq!(last_statement(&observer, pid).await, marker);
        drop(again);

        // Past the idle bound (zero here), the checkout asks first.
        let config: tokio_postgres::Config = test.url().parse().unwrap();
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .pre_recycle(verify_idle_sessions(Duration::ZERO))
            .max_size(1)
            .runtime(Runtime::Tokio1)
            .build()
            .unwrap();
        let client = pool.get().await.unwrap();
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        client.simple_query(marker).await.unwrap();
        drop(client);
        let again = pool.get().await.unwrap();
        assert_eq!(last_statement(&observer, pid).await, "");
        drop(again);

        // A session the server ended while it sat in the pool is not
        // handed out.
        observer
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
        let replaced: i32 = pool
            .get()
            .await
            .unwrap()
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        assert_ne!(replaced, pid);
    }
}

#[cfg(test)]
mod multi_host_tests {
    use super::*;
    use tokio_postgres::config::TargetSessionAttrs;

    /// Both spellings of a multi-host connection string reach
    /// tokio-postgres whole: every host and port in order, and the request
    /// for a writable session (what a failover needs), with the password
    /// still hidden in the endpoint.
    #[test]
    fn multi_host_urls_pass_through_with_target_session_attrs() {
        for url in [
            "postgres://app:s3cret@db1:5432,db2:5433/app?target_session_attrs=read-write",
            "host=db1,db2 port=5432,5433 user=app password=s3cret dbname=app \
             target_session_attrs=read-write",
        ] {
            let db = Database::new(url, 1).unwrap();
            let config = db.config();
            assert_eq!(config.get_hosts().len(), 2, "{url}");
            assert_eq!(config.get_ports(), [5432, 5433], "{url}");
            assert_eq!(
                config.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite,
                "{url}"
            );
            assert!(!db.endpoint().contains("s3cret"), "{}", db.endpoint());
        }
    }
}
