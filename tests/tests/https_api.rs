//! The API over HTTPS with named tokens, against a real `leasehold`
//! process on loopback (the backend does not matter to these promises):
//!
//! - with `[http] tls_cert` and `tls_key` the listener speaks only TLS: a
//!   plain HTTP request gets no HTTP answer;
//! - read, write and kind-limited tokens get 401/403 by the rules on
//!   `/v1/objects`, `/v1/changes`, `/v1/events` and `/v1/leases`, and a
//!   write's origin names its token;
//! - SIGHUP re-reads the certificate (new connections get the new one)
//!   and the token files (a rotated token takes effect, the old one is
//!   refused);
//! - `leasehold check` reads the TLS and token files and names each
//!   problem's key.
//!
//! Mutual TLS and stalled handshakes are in the hostile suite
//! (`tests/tests/hostile/tls.rs`).

use std::path::Path;
use std::time::Duration;

use leasehold_tests::TempDir;
use leasehold_tests::http::{ClientTls, Response, request_tls};
use leasehold_tests::pki::{Issued, Pki, owner_only};
use leasehold_tests::process::{Replica, eventually, free_port};
use serde_json::json;

const START: Duration = Duration::from_secs(30);

/// Write a token file (0600) holding `token` and a newline.
fn token_file(dir: &Path, name: &str, token: &str) -> String {
    let path = dir.join(format!("{name}.token"));
    std::fs::write(&path, format!("{token}\n")).unwrap();
    owner_only(&path);
    path.display().to_string()
}

/// A config serving HTTPS with `cert`, and these tokens: an admin
/// (write), a viewer (read) and a team limited to `tasks` (write).
fn config(dir: &Path, port: u16, cert: &Issued, extra: &str) -> String {
    format!(
        "cluster = \"https\"\nholder = \"h\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\
         tls_cert = \"{}\"\ntls_key = \"{}\"\n{extra}\n\
         [[http.tokens]]\nname = \"admin\"\nfile = \"{}\"\nrole = \"write\"\n\n\
         [[http.tokens]]\nname = \"viewer\"\nfile = \"{}\"\nrole = \"read\"\n\n\
         [[http.tokens]]\nname = \"tasks-team\"\nfile = \"{}\"\nrole = \"write\"\nkinds = [\"tasks\"]\n",
        cert.cert.display(),
        cert.key.display(),
        token_file(dir, "admin", "admin-token-0123456789abcdef"),
        token_file(dir, "viewer", "viewer-token-0123456789abcdef"),
        token_file(dir, "tasks-team", "team-token-0123456789abcdef"),
    )
}

/// One request over TLS as `token` (none when empty).
async fn call(
    tls: &ClientTls,
    host: &Replica,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> Response {
    let auth = format!("Bearer {token}");
    let headers: Vec<(&str, &str)> = if token.is_empty() {
        Vec::new()
    } else {
        vec![("Authorization", auth.as_str())]
    };
    request_tls(tls, &host.addr, method, path, &headers, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
        .0
}

/// The served certificate (DER) of a new connection.
async fn served_certificate(tls: &ClientTls, host: &Replica) -> Vec<u8> {
    request_tls(tls, &host.addr, "GET", "/healthz", &[], None)
        .await
        .expect("healthz over TLS")
        .1
}

/// Wait until `/healthz` answers over TLS.
async fn healthy(tls: &ClientTls, host: &Replica) {
    eventually("the host answers over TLS", START, || async {
        let (reply, _) = request_tls(tls, &host.addr, "GET", "/healthz", &[], None)
            .await
            .ok()?;
        (reply.status == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn https_serves_tokens_by_their_rules_and_rotates_on_sighup() {
    let dir = TempDir::new();
    let ca = Pki::new(dir.path(), "api");
    let cert = ca.server("api", &["127.0.0.1"]);
    let port = free_port();
    let host = Replica::start(
        dir.path(),
        "host",
        port,
        &config(dir.path(), port, &cert, ""),
    );
    let tls = ClientTls::trusting(&ca.ca());
    healthy(&tls, &host).await;

    // Plain HTTP gets no HTTP answer.
    let plain = leasehold_tests::http::get(&host.addr, "/healthz").await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");

    let admin = "admin-token-0123456789abcdef";
    let viewer = "viewer-token-0123456789abcdef";
    let team = "team-token-0123456789abcdef";
    let put = |path: &'static str, token: &'static str| {
        let (tls, host) = (&tls, &host);
        async move { call(tls, host, "PUT", path, token, Some("{}")).await }
    };
    assert_eq!(put("/v1/objects/nodes/n1", admin).await.status, 201);
    assert_eq!(put("/v1/objects/tasks/t1", team).await.status, 201);

    // Who may do what, on every kind of /v1 route.
    let cases: &[(&str, &str, &str, u16)] = &[
        ("GET", "/v1/objects/nodes/n1", "", 401),
        ("GET", "/v1/objects/nodes/n1", "not-a-token-0123456789", 401),
        ("GET", "/v1/objects/nodes/n1", viewer, 200),
        ("GET", "/v1/objects/nodes", team, 403),
        ("GET", "/v1/objects/tasks", team, 200),
        ("PUT", "/v1/objects/nodes/n2", viewer, 403),
        ("PUT", "/v1/objects/nodes/n2", team, 403),
        ("GET", "/v1/changes", "", 401),
        ("GET", "/v1/changes?kind=nodes", team, 403),
        ("GET", "/v1/changes", team, 200),
        ("GET", "/v1/events", "", 401),
        ("GET", "/v1/events", viewer, 200),
        ("GET", "/v1/leases", "", 401),
        ("GET", "/v1/leases", team, 200),
        ("GET", "/v1/openapi.json", "", 200),
        ("GET", "/readyz", "", 200),
        ("GET", "/metrics", "", 200),
    ];
    for &(method, path, token, status) in cases {
        let body = (method == "PUT").then_some("{}");
        let reply = call(&tls, &host, method, path, token, body).await;
        assert_eq!(
            reply.status, status,
            "{method} {path} as {token:?}: {}",
            reply.body
        );
        if status == 403 {
            assert!(
                !reply.body.contains(token),
                "a 403 names the token: {}",
                reply.body
            );
        }
    }
    // The team sees only its kind in the streams.
    for path in ["/v1/changes", "/v1/events"] {
        let items = call(&tls, &host, "GET", path, team, None).await.json()["items"].clone();
        let kinds: Vec<&str> = items
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["tasks"], "{path}");
    }
    // And the writes name their tokens.
    let events = call(&tls, &host, "GET", "/v1/events", admin, None)
        .await
        .json();
    let origins: Vec<_> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["origin"].clone())
        .collect();
    assert_eq!(
        origins,
        [
            json!({"by": "api", "token": "admin"}),
            json!({"by": "api", "token": "tasks-team"}),
        ]
    );

    // Rotation: a new certificate and a new admin token, then SIGHUP.
    let before = served_certificate(&tls, &host).await;
    let renewed = ca.server("api-renewed", &["127.0.0.1"]);
    std::fs::copy(&renewed.cert, &cert.cert).unwrap();
    std::fs::copy(&renewed.key, &cert.key).unwrap();
    let rotated = "admin-rotated-0123456789abcdef";
    token_file(dir.path(), "admin", rotated);
    host.signal("HUP");
    eventually("the new certificate is served", START, || async {
        let now = served_certificate(&tls, &host).await;
        (now != before).then_some(())
    })
    .await;
    eventually("the old admin token is refused", START, || async {
        let old = call(&tls, &host, "GET", "/v1/leases", admin, None).await;
        (old.status == 401).then_some(())
    })
    .await;
    assert_eq!(put("/v1/objects/nodes/n3", rotated).await.status, 201);
    // The other tokens were re-read and stand.
    assert_eq!(
        call(&tls, &host, "GET", "/v1/leases", viewer, None)
            .await
            .status,
        200
    );
    let log = host.log();
    for secret in [admin, viewer, team, rotated] {
        assert!(!log.contains(secret), "the log shows a token:\n{log}");
    }
}

#[tokio::test]
async fn check_reads_the_tls_and_token_files_and_names_each_problem() {
    let dir = TempDir::new();
    let ca = Pki::new(dir.path(), "api");
    let one = ca.server("one", &["127.0.0.1"]);
    let two = ca.server("two", &["127.0.0.1"]);
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let secret = "token-that-must-not-show-0123456789";
    let token = token_file(dir.path(), "ops", secret);
    let run_check = |http: String| {
        let path = dir.path().join("check.toml");
        std::fs::write(
            &path,
            format!("cluster = \"c\"\nholder = \"h\"\n\n[http]\nlisten = \"127.0.0.1:1\"\n{http}"),
        )
        .unwrap();
        let (code, out, err) = leasehold_tests::process::run_to_end(
            &["check", "--config", path.to_str().unwrap()],
            &[],
        );
        (code, format!("{out}{err}"))
    };
    let cases = [
        (
            format!(
                "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
                one.cert.display(),
                two.key.display()
            ),
            "http.tls_key",
            "does not match the certificate",
        ),
        (
            format!(
                "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
                not_pem.display(),
                one.key.display()
            ),
            "http.tls_cert",
            "holds no PEM certificate",
        ),
        (
            format!(
                "tls_cert = \"{}\"\ntls_key = \"{}\"\ntls_client_ca = \"{}\"\n",
                one.cert.display(),
                one.key.display(),
                dir.path().join("absent.pem").display()
            ),
            "http.tls_client_ca",
            "No such file",
        ),
        (
            format!(
                "[[http.tokens]]\nname = \"ops\"\nfile = \"{}\"\nrole = \"read\"\n",
                dir.path().join("absent.token").display()
            ),
            "token \"ops\"",
            "No such file",
        ),
        (
            format!(
                "[[http.tokens]]\nname = \"ops\"\nfile = \"{token}\"\nrole = \"read\"\n\
                 [[http.tokens]]\nname = \"ops2\"\nfile = \"{token}\"\nrole = \"write\"\n"
            ),
            "\"ops\" and \"ops2\"",
            "are the same token",
        ),
    ];
    for (http, key, problem) in cases {
        let (code, output) = run_check(http);
        assert_ne!(code, 0, "{output}");
        let line = output
            .lines()
            .find(|l| l.contains(problem))
            .unwrap_or_else(|| panic!("no {problem:?} in:\n{output}"));
        assert!(line.contains(key), "{key} not named: {line}");
        assert!(!output.contains(secret), "check shows a token:\n{output}");
    }
    // All in order: check says how the API is protected.
    let (code, output) = run_check(format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n[[http.tokens]]\nname = \"ops\"\nfile = \"{token}\"\nrole = \"read\"\n",
        one.cert.display(),
        one.key.display()
    ));
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("HTTPS"), "{output}");
    assert!(output.contains("needs one of the tokens ops"), "{output}");
    assert!(!output.contains(secret), "{output}");
}
