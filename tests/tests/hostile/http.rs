//! Hostile cases: http. Slow and idle sockets, connection floods,
//! preconditions and credentials, against a real `leasehold` process on
//! loopback (the embedded backend: these promises do not depend on the
//! database).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use leasehold_host::timeouts::{HTTP_BODY_READ, HTTP_HEADER_READ};
use leasehold_tests::TempDir;
use leasehold_tests::http;
use leasehold_tests::process::{Replica, binary, free_port, run_to_end};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Slack on top of a server deadline for scheduling and the close to
/// arrive: the promise is "closed at the deadline", not "to the millisecond".
const MARGIN: Duration = Duration::from_secs(2);

/// How long a start-up may take (no controllers, embedded backend).
const START: Duration = Duration::from_secs(30);

/// A config without controllers on the embedded backend; `http` is the
/// body of its `[http]` table.
fn config(http: &str) -> String {
    format!("cluster = \"hostile\"\nholder = \"h\"\n\n[http]\n{http}\n")
}

/// A host listening on loopback with `extra` `[http]` keys, healthy.
async fn host(dir: &TempDir, extra: &str) -> Replica {
    let port = free_port();
    let replica = Replica::start(
        dir.path(),
        "host",
        port,
        &config(&format!("listen = \"127.0.0.1:{port}\"\n{extra}")),
    );
    replica.wait_healthy(START).await;
    replica
}

/// Read until the server closes the connection; what it sent. Panics if
/// it is still open after `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration, what: &str) -> String {
    let mut raw = Vec::new();
    match tokio::time::timeout(limit, stream.read_to_end(&mut raw)).await {
        // A reset is a close too.
        Ok(_) => String::from_utf8_lossy(&raw).into_owned(),
        Err(_) => panic!("{what}: the connection was still open after {limit:?}"),
    }
}

#[tokio::test]
async fn half_a_header_is_cut_off_at_the_header_timeout() {
    let dir = TempDir::new();
    let replica = host(&dir, "").await;
    let mut stream = TcpStream::connect(&replica.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: slow")
        .await
        .unwrap();
    let started = Instant::now();
    closed_within(
        &mut stream,
        HTTP_HEADER_READ + MARGIN,
        "a socket that never finishes its header",
    )
    .await;
    assert!(
        started.elapsed() + MARGIN >= HTTP_HEADER_READ,
        "closed after {:?}, well before the header timeout: was it the header timeout?",
        started.elapsed()
    );
}

#[tokio::test]
async fn half_a_body_is_answered_408_at_the_body_timeout() {
    let dir = TempDir::new();
    let replica = host(&dir, "").await;
    let mut stream = TcpStream::connect(&replica.addr).await.unwrap();
    stream
        .write_all(
            b"PUT /v1/objects/nodes/slow HTTP/1.1\r\nHost: slow\r\nContent-Length: 64\r\n\r\n{\"half\": ",
        )
        .await
        .unwrap();
    let reply = closed_within(
        &mut stream,
        HTTP_BODY_READ + MARGIN,
        "a socket that never finishes its body",
    )
    .await;
    assert!(
        reply.starts_with("HTTP/1.1 408"),
        "expected 408, got {reply:?}"
    );
    assert!(reply.contains("request_timeout"), "{reply}");
    let read = http::get(&replica.addr, "/v1/objects/nodes/slow")
        .await
        .unwrap();
    assert_eq!(read.status, 404, "the half body was not written");
}

/// A script that starts `leasehold` with at most `fds` file descriptors.
fn with_fd_limit(dir: &Path, fds: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("leasehold-limited");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nulimit -n {fds} || exit 97\nexec '{}' \"$@\"\n",
            binary().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `log` without the terminal colour sequences of the human format.
fn without_colours(log: &str) -> String {
    let mut plain = String::with_capacity(log.len());
    let mut rest = log;
    while let Some(start) = rest.find('\u{1b}') {
        plain.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find('m').map_or(rest.len(), |m| m + 1);
        rest = &rest[end..];
    }
    plain.push_str(rest);
    plain
}

#[tokio::test]
async fn idle_sockets_beyond_the_fd_limit_leave_the_api_reachable() {
    // The 1,100 sockets against 1,024 descriptors, scaled down.
    const FDS: u32 = 256;
    const IDLE: usize = 300;
    let dir = TempDir::new();
    let port = free_port();
    let replica = Replica::start_binary(
        with_fd_limit(dir.path(), FDS),
        dir.path(),
        "limited",
        port,
        &config(&format!("listen = \"127.0.0.1:{port}\"")),
    );
    replica.wait_healthy(START).await;
    let mut idle = Vec::with_capacity(IDLE);
    for i in 0..IDLE {
        let mut stream = TcpStream::connect(&replica.addr).await.unwrap();
        // Half of them slowloris, half silent.
        if i % 2 == 0 {
            let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\n").await;
        }
        idle.push(stream);
    }
    for attempt in 0..5 {
        let started = Instant::now();
        let reply = http::request_within(
            Duration::from_secs(2),
            &replica.addr,
            "GET",
            "/healthz",
            &[],
            None,
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "attempt {attempt}: /healthz unreachable with {IDLE} idle sockets open ({e}); log:\n{}",
                replica.log_tail(20)
            )
        });
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    let log = replica.log();
    assert!(
        !log.contains("Too many open files"),
        "the host ran out of file descriptors:\n{}",
        replica.log_tail(20)
    );
    // The cap was sized from the limit it was given.
    assert!(
        without_colours(&log).contains("max_connections=128"),
        "no start-up line with the cap for {FDS} descriptors:\n{log}"
    );
    drop(idle);
}

#[tokio::test]
async fn two_authorization_headers_are_refused() {
    let dir = TempDir::new();
    let replica = host(&dir, "token = \"s3cret-token\"").await;
    for pair in [
        ["Bearer s3cret-token", "Bearer wrong"],
        ["Bearer wrong", "Bearer s3cret-token"],
    ] {
        let reply = http::request(
            &replica.addr,
            "PUT",
            "/v1/objects/nodes/n1",
            &[("Authorization", pair[0]), ("Authorization", pair[1])],
            Some("{}"),
        )
        .await
        .unwrap();
        assert_eq!(reply.status, 400, "{pair:?}: {reply:?}");
        assert_eq!(reply.json()["code"], "invalid_request");
    }
    let read = http::request(
        &replica.addr,
        "GET",
        "/v1/objects/nodes/n1",
        &[("Authorization", "Bearer s3cret-token")],
        None,
    )
    .await
    .unwrap();
    assert_eq!(read.status, 404, "a refused write wrote: {read:?}");
}

/// A token anywhere but one `Authorization: Bearer` header is no token:
/// in the query string, in another header, after another scheme. The
/// scheme's case does not matter (RFC 7235).
#[tokio::test]
async fn tokens_in_the_wrong_places_are_no_tokens() {
    let dir = TempDir::new();
    let replica = host(&dir, "token = \"s3cret-token-0123456789\"").await;
    let token = "s3cret-token-0123456789";
    let refused: &[(&str, &[(&str, &str)])] = &[
        ("/v1/leases?token=s3cret-token-0123456789", &[]),
        ("/v1/leases?access_token=s3cret-token-0123456789", &[]),
        ("/v1/leases", &[("X-Auth-Token", token)]),
        ("/v1/leases", &[("Cookie", "token=s3cret-token-0123456789")]),
        ("/v1/leases", &[("Authorization", token)]),
        (
            "/v1/leases",
            &[("Authorization", "Token s3cret-token-0123456789")],
        ),
        (
            "/v1/leases",
            &[("Authorization", "Bearer  s3cret-token-0123456789x")],
        ),
        (
            "/v1/leases",
            &[("Proxy-Authorization", "Bearer s3cret-token-0123456789")],
        ),
    ];
    for (path, headers) in refused {
        let reply = http::request(&replica.addr, "GET", path, headers, None)
            .await
            .unwrap();
        assert_eq!(reply.status, 401, "{path} {headers:?}: {reply:?}");
        assert_eq!(reply.json()["code"], "unauthorized");
    }
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} {token}");
        let reply = http::request(
            &replica.addr,
            "GET",
            "/v1/leases",
            &[("Authorization", &auth)],
            None,
        )
        .await
        .unwrap();
        assert_eq!(reply.status, 200, "{scheme}: {reply:?}");
    }
}

/// A token file's surrounding whitespace (a CRLF, trailing spaces) is not
/// part of the token; a space inside one refuses the file at start,
/// naming it and never the token.
#[tokio::test]
async fn token_files_lose_their_whitespace_and_a_space_inside_is_refused() {
    let dir = TempDir::new();
    let file = dir.path().join("ops.token");
    std::fs::write(&file, "ops-token-0123456789  \r\n").unwrap();
    let tokens = format!(
        "[[http.tokens]]\nname = \"ops\"\nfile = \"{}\"\nrole = \"read\"\n",
        file.display()
    );
    let port = free_port();
    let text = format!(
        "cluster = \"hostile\"\nholder = \"h\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n{tokens}"
    );
    let replica = Replica::start(dir.path(), "host", port, &text);
    replica.wait_healthy(START).await;
    let reply = http::request(
        &replica.addr,
        "GET",
        "/v1/leases",
        &[("Authorization", "Bearer ops-token-0123456789")],
        None,
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    drop(replica);

    std::fs::write(&file, "ops token 0123456789\n").unwrap();
    let path = dir.path().join("host.toml");
    let (code, out, err) = run_to_end(&["run", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("ops.token") && err.contains("without spaces"),
        "{err}"
    );
    assert!(
        !err.contains("0123456789"),
        "the refusal shows the token: {err}"
    );
    let (code, out, err) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(format!("{out}{err}").contains("ops.token"), "{out}{err}");
}

/// An `Authorization` header far beyond any token is answered (401) or
/// refused as too large, never crashes or hangs the host.
#[tokio::test]
async fn a_huge_authorization_header_is_refused_and_the_host_serves_on() {
    let dir = TempDir::new();
    let replica = host(&dir, "token = \"s3cret-token-0123456789\"").await;
    for size in [4 << 10, 64 << 10, 1 << 20] {
        let auth = format!("Bearer {}", "x".repeat(size));
        let reply = http::request(
            &replica.addr,
            "GET",
            "/v1/leases",
            &[("Authorization", &auth)],
            None,
        )
        .await;
        match reply {
            Ok(reply) => assert!(
                reply.status == 401 || reply.status == 431 || reply.status == 400,
                "{size} bytes: {}",
                reply.status
            ),
            // hyper closes a connection whose header is past its bound.
            Err(e) => assert!(size > 16 << 10, "{size} bytes: {e}"),
        }
    }
    let ok = http::request(
        &replica.addr,
        "GET",
        "/v1/leases",
        &[("Authorization", "Bearer s3cret-token-0123456789")],
        None,
    )
    .await
    .unwrap();
    assert_eq!(ok.status, 200);
}

#[tokio::test]
async fn if_match_a_version_on_an_absent_object_is_409() {
    let dir = TempDir::new();
    let replica = host(&dir, "").await;
    for method in ["PUT", "DELETE"] {
        for version in ["3", "\"3\"", "*"] {
            let reply = http::request(
                &replica.addr,
                method,
                "/v1/objects/nodes/absent",
                &[("If-Match", version)],
                (method == "PUT").then_some("{}"),
            )
            .await
            .unwrap();
            assert_eq!(reply.status, 409, "{method} If-Match: {version}: {reply:?}");
            assert_eq!(reply.json()["code"], "conflict");
        }
    }
}

#[tokio::test]
async fn listening_beyond_loopback_without_a_token_warns() {
    const WARNING: &str = "no token is configured";
    let dir = TempDir::new();
    let port = free_port();
    let text = config(&format!("listen = \"0.0.0.0:{port}\""));
    let replica = Replica::start(dir.path(), "open", port, &text);
    replica.wait_healthy(START).await;
    let log = replica.log();
    let line = log
        .lines()
        .find(|l| l.contains(WARNING))
        .unwrap_or_else(|| panic!("no warning about an open API in the log:\n{log}"));
    assert!(line.contains("WARN"), "{line}");

    let path = dir.path().join("open.toml");
    let (code, out, err) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(WARNING), "check did not warn:\n{out}{err}");

    // With a token but plain HTTP, the warning is about the plain HTTP.
    let guarded = dir.path().join("guarded.toml");
    std::fs::write(
        &guarded,
        config(&format!("listen = \"0.0.0.0:{port}\"\ntoken = \"t0ken\"")),
    )
    .unwrap();
    let (code, out, err) = run_to_end(&["check", "--config", guarded.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains(WARNING), "{out}");
    assert!(out.contains("serves plain HTTP"), "{out}");

    // With a token and TLS there is nothing to warn about.
    let ca = leasehold_tests::pki::Pki::new(dir.path(), "api");
    let cert = ca.server("api", &["127.0.0.1"]);
    let secured = dir.path().join("secured.toml");
    std::fs::write(
        &secured,
        config(&format!(
            "listen = \"0.0.0.0:{port}\"\ntoken = \"t0ken\"\ntls_cert = \"{}\"\ntls_key = \"{}\"",
            cert.cert.display(),
            cert.key.display()
        )),
    )
    .unwrap();
    let (code, out, err) = run_to_end(&["check", "--config", secured.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("WARNING: the HTTP API listens"), "{out}");
}
