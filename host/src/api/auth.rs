//! Who may call the API: named bearer tokens, each with a role (`read` or
//! `write`) and optionally the object kinds it may reach.
//!
//! With no token configured the API is open (the local quick start). With
//! any, every `/v1` request but `GET /v1/openapi.json` needs one: a
//! missing or unknown token is 401 with `WWW-Authenticate: Bearer`, a
//! known one without the role or kind asked for is 403 naming what is
//! missing (the token's name, never the token). `/healthz`, `/readyz` and
//! `/metrics` need none; they show no object data and no secret.
//!
//! Owns: reading the tokens from their files (and again on SIGHUP), the
//! constant-time comparison, and the [`Grant`] a request carries to the
//! handlers (which filter streams by kind and record the token's name as
//! the origin of a write). Must never: log, answer or keep in a message a
//! token's content; stop comparing at the first wrong byte.
//!
//! Runs as middleware, before the handler's extractors, so an
//! unauthenticated write is refused before its body is read.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;
use crate::config::{DEFAULT_TOKEN_NAME, HttpConfig, TokenConfig, TokenRole};
use crate::limits::{MAX_TOKEN_BYTES, MIN_TOKEN_BYTES};

/// What a request was let in as: set on the request by the middleware
/// when tokens are configured, read by the handlers.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The token's name (recorded as the origin of its writes).
    pub name: Arc<str>,
    /// The only kinds it may reach; `None`: every kind.
    pub kinds: Option<Arc<BTreeSet<String>>>,
}

impl Grant {
    /// Whether the token may reach objects of `kind`.
    pub fn may_reach(&self, kind: &str) -> bool {
        self.kinds.as_ref().is_none_or(|kinds| kinds.contains(kind))
    }

    /// The kinds a stream read by this token keeps: those asked for
    /// (every one must be reachable, else 403 naming the first that is
    /// not), or, when none were asked for, the token's own kinds (`None`:
    /// every kind).
    pub fn stream_kinds(&self, asked: &[String]) -> Result<Option<Vec<String>>, ApiError> {
        if let Some(kind) = asked.iter().find(|k| !self.may_reach(k)) {
            return Err(self.kind_refused(kind));
        }
        Ok(match (&self.kinds, asked.is_empty()) {
            (Some(kinds), true) => Some(kinds.iter().cloned().collect()),
            _ => None,
        })
    }

    /// The 403 for a kind this token may not reach.
    pub fn kind_refused(&self, kind: &str) -> ApiError {
        ApiError::forbidden(format!(
            "token {:?} may not reach objects of kind {kind:?}: its kinds are {}",
            self.name,
            self.kinds
                .as_ref()
                .map(|k| k.iter().cloned().collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        ))
    }
}

/// The grant of a request, if tokens are configured.
pub fn grant_of(request_extensions: &axum::http::Extensions) -> Option<&Grant> {
    request_extensions.get::<Grant>()
}

/// One token as the API holds it.
struct Token {
    name: Arc<str>,
    role: TokenRole,
    kinds: Option<Arc<BTreeSet<String>>>,
    /// SHA-256 of the token: compared in constant time, and of one length
    /// whatever the token's, so a comparison tells nothing of either.
    digest: [u8; 32],
}

/// Where a token comes from.
#[derive(Clone)]
enum Source {
    /// `[http] token`, written in the config (the `default` write token).
    Literal(String),
    /// `[[http.tokens]]`: read from its file.
    File(TokenConfig),
}

/// The configured tokens, re-read on SIGHUP.
pub struct Access {
    sources: Vec<Source>,
    current: RwLock<Arc<Vec<Token>>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("tokens", &self.names())
            .finish_non_exhaustive()
    }
}

impl Access {
    /// No token: the API is open.
    pub fn open() -> Self {
        Self {
            sources: Vec::new(),
            current: RwLock::new(Arc::new(Vec::new())),
        }
    }

    /// The tokens `[http]` configures, their files read now. Every problem
    /// is returned, each naming its key and file, never a token.
    pub fn load(http: &HttpConfig) -> Result<Self, Vec<String>> {
        let mut sources = Vec::new();
        if let Some(token) = &http.token {
            sources.push(Source::Literal(token.clone()));
        }
        sources.extend(http.tokens.iter().cloned().map(Source::File));
        let tokens = read(&sources)?;
        Ok(Self {
            sources,
            current: RwLock::new(Arc::new(tokens)),
        })
    }

    /// One write token named `default` (the `[http] token` shorthand).
    pub fn single(token: &str) -> Self {
        let http = HttpConfig {
            token: Some(token.to_string()),
            ..HttpConfig::default()
        };
        Self::load(&http).unwrap_or_else(|problems| panic!("{}", problems.join("; ")))
    }

    /// Read every token file again (SIGHUP): all of them take effect, or,
    /// when any cannot be read, none (the old tokens stay), and the
    /// problems are returned. Returns how many tokens are in force.
    pub fn reload(&self) -> Result<usize, Vec<String>> {
        let tokens = read(&self.sources)?;
        let count = tokens.len();
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tokens);
        Ok(count)
    }

    /// Whether no token is configured (every request is let in).
    pub fn is_open(&self) -> bool {
        self.sources.is_empty()
    }

    /// The configured tokens' names.
    pub fn names(&self) -> Vec<String> {
        self.sources
            .iter()
            .map(|s| match s {
                Source::Literal(_) => DEFAULT_TOKEN_NAME.to_string(),
                Source::File(t) => t.name.clone(),
            })
            .collect()
    }

    fn tokens(&self) -> Arc<Vec<Token>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The token `presented` is, compared with every configured token in
    /// constant time (no comparison stops early, none is skipped).
    fn find(&self, presented: &str) -> Option<(Grant, TokenRole)> {
        let digest = sha256(presented.as_bytes());
        let tokens = self.tokens();
        let mut found = None;
        for token in tokens.iter() {
            if constant_time_eq(&token.digest, &digest) {
                let grant = Grant {
                    name: token.name.clone(),
                    kinds: token.kinds.clone(),
                };
                found = Some((grant, token.role));
            }
        }
        found
    }
}

/// Warnings about the token files (never refusals): a file its group or
/// others can read, a token shorter than [`MIN_TOKEN_BYTES`].
pub fn warnings(http: &HttpConfig) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(token) = &http.token
        && token.len() < MIN_TOKEN_BYTES
    {
        warnings.push(format!(
            "http.token is shorter than {MIN_TOKEN_BYTES} characters: easy to guess"
        ));
    }
    for token in &http.tokens {
        if crate::tls::readable_by_others(&token.file) == Some(true) {
            warnings.push(format!(
                "token {:?}: its file {} can be read by its group or others; make it 0600",
                token.name,
                token.file.display()
            ));
        }
        if let Ok(text) = std::fs::read_to_string(&token.file)
            && text.trim().len() < MIN_TOKEN_BYTES
            && check_secret(text.trim()).is_ok()
        {
            warnings.push(format!(
                "token {:?} in {} is shorter than {MIN_TOKEN_BYTES} characters: easy to guess",
                token.name,
                token.file.display()
            ));
        }
    }
    warnings
}

fn read(sources: &[Source]) -> Result<Vec<Token>, Vec<String>> {
    let mut tokens = Vec::new();
    let mut problems = Vec::new();
    for source in sources {
        match source {
            Source::Literal(secret) => tokens.push(Token {
                name: Arc::from(DEFAULT_TOKEN_NAME),
                role: TokenRole::Write,
                kinds: None,
                digest: sha256(secret.as_bytes()),
            }),
            Source::File(config) => match read_file(&config.name, &config.file) {
                Ok(secret) => tokens.push(Token {
                    name: Arc::from(config.name.as_str()),
                    role: config.role,
                    kinds: config
                        .kinds
                        .as_ref()
                        .map(|k| Arc::new(k.iter().cloned().collect())),
                    digest: sha256(secret.as_bytes()),
                }),
                Err(problem) => problems.push(problem),
            },
        }
    }
    // Two names for one secret would make the name a request is recorded
    // under depend on the order of the file.
    for (i, a) in tokens.iter().enumerate() {
        if let Some(b) = tokens[i + 1..].iter().find(|b| b.digest == a.digest) {
            problems.push(format!(
                "tokens {:?} and {:?} are the same token; give each its own",
                a.name, b.name
            ));
        }
    }
    if problems.is_empty() {
        Ok(tokens)
    } else {
        Err(problems)
    }
}

/// A token file's token: its content without surrounding whitespace (a
/// trailing newline or CRLF included; a token itself never holds
/// whitespace).
fn read_file(name: &str, path: &Path) -> Result<String, String> {
    let where_ = |reason: String| format!("token {name:?} (file {}): {reason}", path.display());
    let bytes = std::fs::read(path).map_err(|e| where_(e.to_string()))?;
    if bytes.len() > MAX_TOKEN_BYTES * 2 {
        return Err(where_(format!(
            "the file is over {} bytes; a token is at most {MAX_TOKEN_BYTES}",
            MAX_TOKEN_BYTES * 2
        )));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| where_("the file is not text (UTF-8)".to_string()))?;
    let secret = text.trim_matches(|c: char| c.is_ascii_whitespace());
    check_secret(secret).map_err(where_)?;
    Ok(secret.to_string())
}

/// A token's rules, whatever its source.
fn check_secret(secret: &str) -> Result<(), String> {
    if secret.is_empty() {
        return Err("the token is empty".to_string());
    }
    if secret.len() > MAX_TOKEN_BYTES {
        return Err(format!("the token is longer than {MAX_TOKEN_BYTES} bytes"));
    }
    if !secret.bytes().all(|b| b.is_ascii_graphic()) {
        // A bearer token travels in a header: spaces and control
        // characters would be cut or refused on the way.
        return Err("the token may hold only printable ASCII, without spaces inside".to_string());
    }
    Ok(())
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Whether `path` (a matched route's template) needs a token when tokens
/// are configured: every `/v1` route but the OpenAPI document.
fn guarded(path: &str) -> bool {
    path.starts_with("/v1/") && path != super::openapi::PATH
}

/// Let in only requests with a token allowed to do what they ask, when
/// tokens are configured; put the [`Grant`] on the request.
pub(super) async fn require_token(
    State(shared): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let access = &shared.api.access;
    if access.is_open() {
        return next.run(request).await;
    }
    let Some(path) = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
    else {
        return next.run(request).await;
    };
    if !guarded(&path) {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer);
    let Some(presented) = presented else {
        return ApiError::unauthorized(
            "this API needs `Authorization: Bearer <token>` with a token from the [http] config \
             (reads too)",
        )
        .into_response();
    };
    let Some((grant, role)) = access.find(presented) else {
        return ApiError::unauthorized("the bearer token is not one of the configured tokens")
            .into_response();
    };
    let writes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if writes && role != TokenRole::Write {
        return ApiError::forbidden(format!(
            "token {:?} has role read; {} needs a token with role write",
            grant.name,
            request.method()
        ))
        .into_response();
    }
    // A path that names a kind is refused here for a kind the token may
    // not reach; streams filter in their handlers.
    if path.starts_with("/v1/objects/{kind}")
        && let Some(kind) = kind_in(request.uri().path())
        && !grant.may_reach(&kind)
    {
        return grant.kind_refused(&kind).into_response();
    }
    request.extensions_mut().insert(grant);
    next.run(request).await
}

/// The kind segment of an `/v1/objects/{kind}...` path as sent
/// (percent-decoded the way the router decodes it).
fn kind_in(path: &str) -> Option<String> {
    let segment = path.strip_prefix("/v1/objects/")?.split('/').next()?;
    Some(percent_decode(segment).unwrap_or_else(|| segment.to_string()))
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The credentials of a `Bearer` authorization (the scheme is
/// case-insensitive, RFC 7235); anything else is no token.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.trim().split_once(' ')?;
    let credentials = credentials.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !credentials.is_empty()).then_some(credentials)
}

/// Compare without stopping at the first difference, so response timing
/// does not reveal how much of a guess is right. Only equal-length inputs
/// (digests) are compared here.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)));
    difference == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_compare_by_every_byte() {
        let a = sha256(b"secret");
        assert!(constant_time_eq(&a, &sha256(b"secret")));
        assert!(!constant_time_eq(&a, &sha256(b"secreT")));
        assert!(!constant_time_eq(&a, &sha256(b"secret2")));
        // A difference in the last byte alone is found too.
        let mut last = a;
        last[31] ^= 1;
        assert!(!constant_time_eq(&a, &last));
        let mut first = a;
        first[0] ^= 0x80;
        assert!(!constant_time_eq(&a, &first));
    }

    /// The comparison takes as long whatever the guess shares with the
    /// token: every configured token is compared, by every byte of a
    /// digest of fixed length. Measured as work done, not time: each
    /// comparison folds all 32 bytes.
    #[test]
    fn a_lookup_compares_every_token_in_full() {
        let access = Access {
            sources: vec![Source::Literal("first-token-0123456789".into())],
            current: RwLock::new(Arc::new(vec![
                Token {
                    name: Arc::from("a"),
                    role: TokenRole::Read,
                    kinds: None,
                    digest: sha256(b"first-token-0123456789"),
                },
                Token {
                    name: Arc::from("b"),
                    role: TokenRole::Write,
                    kinds: None,
                    digest: sha256(b"second-token-0123456789"),
                },
            ])),
        };
        assert_eq!(
            access.find("second-token-0123456789").map(|t| t.0.name),
            Some(Arc::from("b"))
        );
        assert_eq!(
            access.find("first-token-0123456789").map(|t| t.0.name),
            Some(Arc::from("a"))
        );
        assert!(access.find("first-token-012345678").is_none());
        assert!(access.find("").is_none());
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_needs_credentials() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("BEARER abc"), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }

    #[test]
    fn a_token_file_loses_its_surrounding_whitespace_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("lh-token-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases: [(&[u8], Result<&str, &str>); 6] = [
            (b"abc-0123456789-xyz\n", Ok("abc-0123456789-xyz")),
            (b"abc-0123456789-xyz\r\n", Ok("abc-0123456789-xyz")),
            (b"abc-0123456789-xyz   \n", Ok("abc-0123456789-xyz")),
            (b"abc 0123456789\n", Err("without spaces inside")),
            (b"\n\n", Err("the token is empty")),
            (b"\xff\xfe", Err("not text")),
        ];
        for (i, (content, expected)) in cases.iter().enumerate() {
            let path = dir.join(format!("t{i}"));
            std::fs::write(&path, content).unwrap();
            let read = read_file("t", &path);
            match expected {
                Ok(token) => assert_eq!(read.as_deref(), Ok(*token), "case {i}"),
                Err(fragment) => {
                    let problem = read.unwrap_err();
                    assert!(problem.contains(fragment), "case {i}: {problem}");
                    assert!(problem.contains(&path.display().to_string()), "{problem}");
                    assert!(!problem.contains("0123456789"), "names no token: {problem}");
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kinds_in_paths_are_read_as_the_router_decodes_them() {
        assert_eq!(kind_in("/v1/objects/tasks/t1"), Some("tasks".into()));
        assert_eq!(kind_in("/v1/objects/ta%73ks"), Some("tasks".into()));
        assert_eq!(kind_in("/v1/leases"), None);
    }
}
