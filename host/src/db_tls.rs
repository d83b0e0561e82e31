//! TLS to PostgreSQL, with libpq's meaning of the connection string's
//! parameters: `sslmode` (`disable`, `prefer` (the default), `require`,
//! `verify-ca`, `verify-full`), `sslrootcert` (a PEM file of the CAs to
//! trust, or `system` for the platform's roots), `sslcert` and `sslkey`
//! (a client certificate and its key).
//!
//! Owns: reading those parameters out of a URL or key-value connection
//! string ([`parse`]: tokio-postgres itself knows only `disable`, `prefer`
//! and `require`), the TLS connector every connection of the host is
//! opened with (pools and dedicated sessions alike, [`Connector`]), and
//! whether the connections a connector opened were encrypted (for
//! `/readyz`, `leasehold check` and `leasehold_db_tls{pool}`). Must never:
//! open a connection without the connector; accept a certificate the mode
//! says must verify; show a key's content.
//!
//! As in libpq: `require` (and `prefer`) with a root file checks the chain
//! (as `verify-ca`), without one only encrypts; `verify-ca` and
//! `verify-full` need `sslrootcert`; `sslrootcert=system` defaults the mode
//! to `verify-full` and refuses a weaker one. Relative paths are the
//! process's working directory's, as libpq reads them.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use futures::future::BoxFuture;
use tokio_postgres::Socket;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::tls::{self, Verify};

/// libpq's `sslmode`, as far as the host supports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never encrypt.
    Disable,
    /// Encrypt when the server offers it (libpq's default).
    Prefer,
    /// Encrypt or fail; check the chain only when `sslrootcert` is given.
    Require,
    /// Encrypt, and the certificate must chain to `sslrootcert`.
    VerifyCa,
    /// As `VerifyCa`, and be issued for the host name connected to.
    VerifyFull,
}

impl SslMode {
    /// The parameter's value.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(text: &str) -> Result<Self, String> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode {other:?} is not one of disable, prefer, require, verify-ca, \
                     verify-full"
                ));
            }
        })
    }
}

/// Which roots `sslrootcert` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The platform's trusted roots.
    System,
}

/// The TLS parameters of one connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsParams {
    /// `sslmode`.
    pub mode: SslMode,
    /// `sslrootcert`.
    pub root_cert: Option<RootCert>,
    /// `sslcert`.
    pub client_cert: Option<PathBuf>,
    /// `sslkey`.
    pub client_key: Option<PathBuf>,
}

impl TlsParams {
    /// How far the server's certificate is checked.
    pub fn verify(&self) -> Verify {
        match (self.mode, &self.root_cert) {
            (SslMode::VerifyFull, _) => Verify::Full,
            (SslMode::VerifyCa, _) => Verify::Chain,
            (_, Some(_)) => Verify::Chain,
            (_, None) => Verify::Nothing,
        }
    }

    /// One line for `leasehold check` and start-up logs: what is
    /// encrypted and what is verified.
    pub fn summary(&self) -> String {
        let verified = match self.verify() {
            _ if self.mode == SslMode::Disable => "not encrypted",
            Verify::Full => "server certificate and host name verified",
            Verify::Chain => "server certificate verified, host name not checked",
            Verify::Nothing => "server certificate NOT verified (add sslrootcert)",
        };
        let client = if self.client_cert.is_some() {
            ", client certificate presented"
        } else {
            ""
        };
        format!("sslmode={} ({verified}{client})", self.mode.as_str())
    }

    /// The rustls configuration these parameters ask for (its files read
    /// now).
    fn client_config(&self) -> Result<rustls::ClientConfig, String> {
        let roots = match &self.root_cert {
            Some(RootCert::File(path)) => {
                tls::read_roots("sslrootcert", path).map_err(|e| e.to_string())?
            }
            Some(RootCert::System) => tls::system_roots()?,
            None => rustls::RootCertStore::empty(),
        };
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((
                tls::read_certificates("sslcert", cert).map_err(|e| e.to_string())?,
                tls::read_private_key("sslkey", key).map_err(|e| e.to_string())?,
            )),
            _ => None,
        };
        tls::client_config(roots, self.verify(), identity)
    }

    /// Problems worth a warning (never a refusal): a client key others
    /// can read.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(key) = &self.client_key
            && tls::readable_by_others(key) == Some(true)
        {
            warnings.push(format!(
                "sslkey {} can be read by its group or others; make it 0600",
                key.display()
            ));
        }
        warnings
    }
}

/// A connection string without its TLS parameters, for tokio-postgres to
/// parse, and those parameters read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The connection string with `sslmode`, `sslrootcert`, `sslcert` and
    /// `sslkey` taken out (everything else as written).
    pub rest: String,
    /// What they said.
    pub tls: TlsParams,
}

/// The parameters this module reads out of a connection string.
const TLS_KEYS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Read the TLS parameters out of `connection` (a `postgres://` URL or
/// libpq's `key=value` form) and check them together. The error names the
/// parameter, never another part of the string.
pub fn split(connection: &str) -> Result<Split, String> {
    let text = connection.trim();
    let (rest, found) = if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        split_url(text)
    } else {
        split_key_value(text)?
    };
    let mut mode = None;
    let mut root_cert = None;
    let mut client_cert = None;
    let mut client_key = None;
    for (key, value) in found {
        match key.as_str() {
            "sslmode" => mode = Some(SslMode::parse(&value)?),
            "sslrootcert" if value == "system" => root_cert = Some(RootCert::System),
            "sslrootcert" => root_cert = Some(RootCert::File(non_empty(&key, value)?)),
            "sslcert" => client_cert = Some(non_empty(&key, value)?),
            "sslkey" => client_key = Some(non_empty(&key, value)?),
            _ => unreachable!("only TLS_KEYS are split out"),
        }
    }
    let mode = match (mode, &root_cert) {
        (Some(mode), Some(RootCert::System)) if mode != SslMode::VerifyFull => {
            return Err(format!(
                "sslrootcert=system needs sslmode=verify-full (the default with it), not {}: \
                 the platform's roots vouch for names, so a weaker mode would trust any \
                 certificate they ever issued",
                mode.as_str()
            ));
        }
        (Some(mode), _) => mode,
        (None, Some(RootCert::System)) => SslMode::VerifyFull,
        (None, _) => SslMode::Prefer,
    };
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
        return Err(format!(
            "sslmode={} needs sslrootcert: a PEM file of the CA that issued the server's \
             certificate, or sslrootcert=system for the platform's roots",
            mode.as_str()
        ));
    }
    match (&client_cert, &client_key) {
        (Some(_), None) => return Err("sslcert is given without sslkey".to_string()),
        (None, Some(_)) => return Err("sslkey is given without sslcert".to_string()),
        _ => {}
    }
    Ok(Split {
        rest,
        tls: TlsParams {
            mode,
            root_cert,
            client_cert,
            client_key,
        },
    })
}

fn non_empty(key: &str, value: String) -> Result<PathBuf, String> {
    if value.is_empty() {
        return Err(format!("{key} is empty"));
    }
    Ok(PathBuf::from(value))
}

/// The URL without its TLS parameters, and their (decoded) values.
fn split_url(url: &str) -> (String, Vec<(String, String)>) {
    // The query starts at the first `?` after the user part (which ends at
    // the first `@`), as tokio-postgres reads it.
    let after_user = url.find('@').map_or(0, |at| at + 1);
    let Some(question) = url[after_user..].find('?').map(|q| q + after_user) else {
        return (url.to_string(), Vec::new());
    };
    let (base, query) = (&url[..question], &url[question + 1..]);
    let mut kept = Vec::new();
    let mut found = Vec::new();
    for param in query.split('&') {
        let (raw_key, raw_value) = param.split_once('=').unwrap_or((param, ""));
        let key = percent_decode(raw_key);
        if TLS_KEYS.contains(&key.as_str()) {
            found.push((key, percent_decode(raw_value)));
        } else {
            kept.push(param);
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, found)
}

/// The key-value form without its TLS pairs, and their (unquoted) values.
fn split_key_value(text: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut kept: Vec<&str> = Vec::new();
    let mut found = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let key_end = rest
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        let Some(value_text) = rest[key_end..].trim_start().strip_prefix('=') else {
            // tokio-postgres reports the malformed pair; keep it for that.
            kept.push(rest);
            break;
        };
        let value_text = value_text.trim_start();
        let (value, length) = unquote(value_text);
        let pair_end = rest.len() - value_text.len() + length;
        if TLS_KEYS.contains(&key) {
            found.push((key.to_string(), value));
        } else {
            kept.push(&rest[..pair_end]);
        }
        rest = rest[pair_end..].trim_start();
    }
    Ok((kept.join(" "), found))
}

/// A key-value form value (quoted with `'`, or up to whitespace; `\`
/// escapes the next character in both) and how many bytes it took.
fn unquote(text: &str) -> (String, usize) {
    let quoted = text.starts_with('\'');
    let mut value = String::new();
    let mut chars = text.char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            '\'' if quoted => return (value, i + 1),
            c if !quoted && c.is_whitespace() => return (value, i),
            c => value.push(c),
        }
    }
    (value, text.len())
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
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

/// Whether a connector's connections were encrypted, as last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encryption {
    /// No connection opened yet.
    Unknown,
    /// The last connection opened is plaintext.
    Plain,
    /// The last connection opened is encrypted.
    Encrypted,
}

impl Encryption {
    /// `Some(encrypted)` once known.
    pub fn known(self) -> Option<bool> {
        match self {
            Encryption::Unknown => None,
            Encryption::Plain => Some(false),
            Encryption::Encrypted => Some(true),
        }
    }
}

/// The TLS connector of one connection string: every connection the host
/// opens to it (pooled or dedicated) goes through it, and it remembers
/// whether the last one it opened was encrypted.
#[derive(Clone)]
pub struct Connector {
    params: TlsParams,
    rustls: MakeRustlsConnect,
    /// [`Encryption`] as a number (0 unknown, 1 plain, 2 encrypted).
    last: Arc<AtomicU8>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("params", &self.params)
            .field("last", &self.encryption())
            .finish()
    }
}

impl Connector {
    /// The connector for `params`, its files read now (a missing or
    /// unreadable file is refused here, naming it).
    pub fn new(params: TlsParams) -> Result<Self, String> {
        let config = params.client_config()?;
        Ok(Self {
            params,
            rustls: MakeRustlsConnect::new(config),
            last: Arc::new(AtomicU8::new(0)),
        })
    }

    /// A connector that shares nothing with this one but its settings (a
    /// sibling pool counts its own connections).
    pub fn fresh(&self) -> Self {
        Self {
            params: self.params.clone(),
            rustls: self.rustls.clone(),
            last: Arc::new(AtomicU8::new(0)),
        }
    }

    /// The parameters it connects with.
    pub fn params(&self) -> &TlsParams {
        &self.params
    }

    /// Whether the last connection it opened was encrypted.
    pub fn encryption(&self) -> Encryption {
        match self.last.load(Ordering::Relaxed) {
            1 => Encryption::Plain,
            2 => Encryption::Encrypted,
            _ => Encryption::Unknown,
        }
    }

    /// `config` with the mode tokio-postgres enforces for these
    /// parameters (`disable`, `prefer` or `require`; the stronger modes
    /// are `require` plus this connector's verification).
    pub fn apply(&self, config: &mut tokio_postgres::Config) {
        config.ssl_mode(match self.params.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        });
    }

    /// Connect one session with `config` through this connector.
    pub async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(tokio_postgres::Client, Connection), tokio_postgres::Error> {
        let tracked = Tracked {
            rustls: self.rustls.clone(),
            handshook: Arc::new(AtomicBool::new(false)),
        };
        let handshook = tracked.handshook.clone();
        let connected = config.connect(tracked).await?;
        let encrypted = handshook.load(Ordering::SeqCst);
        self.last
            .store(if encrypted { 2 } else { 1 }, Ordering::Relaxed);
        Ok(connected)
    }
}

/// The stream of a connection opened by a [`Connector`].
pub type Stream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

/// A connection (the driver half) opened by a [`Connector`].
pub type Connection = tokio_postgres::Connection<Socket, Stream>;

/// The deadpool side: pooled sessions are opened by the pool's
/// [`Connector`].
impl deadpool_postgres::Connect for Connector {
    fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> BoxFuture<
        '_,
        Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
    > {
        let config = config.clone();
        Box::pin(async move {
            let (client, connection) = Connector::connect(self, &config).await?;
            let driver = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %crate::db::describe(&e), "database connection ended");
                }
            });
            Ok((client, driver))
        })
    }
}

/// One connection attempt's TLS, noting whether the handshake happened
/// (with `prefer`, a server without TLS is talked to in plaintext).
#[derive(Clone)]
struct Tracked {
    rustls: MakeRustlsConnect,
    handshook: Arc<AtomicBool>,
}

impl MakeTlsConnect<Socket> for Tracked {
    type Stream = Stream;
    type TlsConnect = TrackedConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<TrackedConnect, Self::Error> {
        Ok(TrackedConnect {
            inner: MakeTlsConnect::<Socket>::make_tls_connect(&mut self.rustls, domain)?,
            handshook: self.handshook.clone(),
        })
    }
}

struct TrackedConnect {
    inner: <MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect,
    handshook: Arc<AtomicBool>,
}

impl TlsConnect<Socket> for TrackedConnect {
    type Stream = Stream;
    type Error =
        <<MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect as TlsConnect<Socket>>::Error;
    type Future = BoxFuture<'static, Result<Stream, Self::Error>>;

    fn connect(self, stream: Socket) -> Self::Future {
        let handshook = self.handshook;
        let connecting = self.inner.connect(stream);
        Box::pin(async move {
            let stream = connecting.await?;
            handshook.store(true, Ordering::SeqCst);
            Ok(stream)
        })
    }
}

/// Where a dedicated (never pooled) session connects, and how.
#[derive(Debug, Clone)]
pub struct Target {
    /// The parsed connection string (TLS parameters aside).
    pub config: tokio_postgres::Config,
    /// Its TLS.
    pub tls: Connector,
}

impl Target {
    /// Connect one session.
    pub async fn connect(
        &self,
    ) -> Result<(tokio_postgres::Client, Connection), tokio_postgres::Error> {
        self.tls.connect(&self.config).await
    }
}

/// Whether a connection failure is a refusal that trying again cannot
/// change: the server's certificate does not verify, or the server
/// refuses a connection without encryption (or with it) by its
/// `pg_hba.conf`. Returns the reason in words.
pub fn refusal(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(problem) = tls::certificate_problem(error) {
        return Some(format!(
            "the server's certificate does not verify: {problem}"
        ));
    }
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(db) = error.downcast_ref::<tokio_postgres::error::DbError>() {
            let message = db.message();
            if *db.code() == tokio_postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                && message.contains("no pg_hba.conf entry")
            {
                return Some(if message.contains("no encryption") {
                    "the server demands an encrypted connection (its pg_hba.conf allows only \
                     hostssl here): remove sslmode=disable"
                        .to_string()
                } else {
                    "the server's pg_hba.conf has no entry for this host, user and database"
                        .to_string()
                });
            }
            return None;
        }
        if let Some(pg) = error.downcast_ref::<tokio_postgres::Error>()
            && pg.to_string().contains("server does not support TLS")
        {
            return Some(
                "the server does not offer TLS, and sslmode asks for it: enable ssl on the \
                 server, or lower sslmode"
                    .to_string(),
            );
        }
        next = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(url: &str) -> TlsParams {
        split(url).unwrap().tls
    }

    #[test]
    fn the_default_is_prefer_as_in_libpq() {
        let split = split("postgres://u@h/db").unwrap();
        assert_eq!(split.rest, "postgres://u@h/db");
        assert_eq!(split.tls.mode, SslMode::Prefer);
        assert_eq!(split.tls.verify(), Verify::Nothing);
    }

    #[test]
    fn tls_parameters_are_taken_out_of_a_url_and_the_rest_kept() {
        let split = split(
            "postgres://u:p%40ss@h1:5432,h2/db?sslmode=verify-full&target_session_attrs=read-write\
             &sslrootcert=%2Fetc%2Fca.pem&sslcert=c.pem&sslkey=k.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(
            split.rest,
            "postgres://u:p%40ss@h1:5432,h2/db?target_session_attrs=read-write&application_name=x"
        );
        assert_eq!(split.tls.mode, SslMode::VerifyFull);
        assert_eq!(
            split.tls.root_cert,
            Some(RootCert::File(PathBuf::from("/etc/ca.pem")))
        );
        assert_eq!(split.tls.client_cert, Some(PathBuf::from("c.pem")));
        assert_eq!(split.tls.client_key, Some(PathBuf::from("k.pem")));
        assert_eq!(split.tls.verify(), Verify::Full);
        // What is left parses.
        split.rest.parse::<tokio_postgres::Config>().unwrap();
    }

    #[test]
    fn tls_parameters_are_taken_out_of_the_key_value_form() {
        let split = split(
            "host=h user=u sslmode=verify-ca sslrootcert='/a dir/ca.pem' password='x y' dbname=d",
        )
        .unwrap();
        assert_eq!(split.rest, "host=h user=u password='x y' dbname=d");
        assert_eq!(split.tls.mode, SslMode::VerifyCa);
        assert_eq!(
            split.tls.root_cert,
            Some(RootCert::File(PathBuf::from("/a dir/ca.pem")))
        );
        assert_eq!(split.tls.verify(), Verify::Chain);
        split.rest.parse::<tokio_postgres::Config>().unwrap();
    }

    #[test]
    fn require_with_a_root_file_checks_the_chain_as_libpq_does() {
        assert_eq!(
            tls("postgres://h/d?sslmode=require&sslrootcert=ca.pem").verify(),
            Verify::Chain
        );
        assert_eq!(
            tls("postgres://h/d?sslmode=require").verify(),
            Verify::Nothing
        );
    }

    #[test]
    fn system_roots_mean_verify_full_and_refuse_weaker_modes() {
        let params = tls("postgres://h/d?sslrootcert=system");
        assert_eq!(params.mode, SslMode::VerifyFull);
        assert_eq!(params.root_cert, Some(RootCert::System));
        let refused = split("postgres://h/d?sslrootcert=system&sslmode=require").unwrap_err();
        assert!(refused.contains("verify-full"), "{refused}");
    }

    #[test]
    fn bad_tls_parameters_are_refused_by_name() {
        let cases = [
            ("postgres://h/d?sslmode=allow", "sslmode \"allow\""),
            ("postgres://h/d?sslmode=verify-full", "needs sslrootcert"),
            ("postgres://h/d?sslcert=c.pem", "without sslkey"),
            ("postgres://h/d?sslkey=k.pem", "without sslcert"),
            ("postgres://h/d?sslrootcert=", "sslrootcert is empty"),
        ];
        for (url, expected) in cases {
            let refused = split(url).unwrap_err();
            assert!(refused.contains(expected), "{url}: {refused}");
        }
    }

    #[test]
    fn the_connector_refuses_a_missing_root_file_naming_it() {
        let params = tls("postgres://h/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem");
        let refused = Connector::new(params).unwrap_err();
        assert!(
            refused.contains("sslrootcert /nonexistent/ca.pem"),
            "{refused}"
        );
    }

    #[test]
    fn the_summary_says_what_is_verified() {
        assert!(
            tls("postgres://h/d?sslmode=disable")
                .summary()
                .contains("not encrypted")
        );
        assert!(tls("postgres://h/d").summary().contains("NOT verified"));
    }
}
