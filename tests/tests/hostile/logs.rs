//! Hostile cases: logs. A user who can write an object a controller logs
//! tries to forge host log lines through the guest's log import and its
//! stdout: newlines, carriage returns, terminal escapes and Unicode line
//! separators, in both log formats of a real `leasehold` process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_tests::TempDir;
use leasehold_tests::process::{Replica, binary, eventually, free_port};
use leasehold_tests::{guest_dir, http};

/// The start of the line the guest tries to forge.
const FORGED: &str = "2026-12-01T00:00:00Z  INFO leasehold: lease granted";

/// The object value (a JSON string the `echo` command of the misbehaving
/// fixture logs decoded): a forged line after a newline, another after a
/// carriage return, a terminal escape that clears the line, and a Unicode
/// line separator.
fn payload() -> String {
    let forged = serde_json::to_string(FORGED).unwrap();
    let forged = forged.trim_matches('"');
    format!("\"done\\n{forged} forged=1\\r{forged} forged=2\\u001b[2K\\u2028{forged} forged=3\"")
}

/// How long the host may take to start, compile the fixture and run the
/// reconcile.
const LIMIT: Duration = Duration::from_secs(60);

/// A script that runs `leasehold` with `args` before the subcommand.
fn with_args(dir: &Path, args: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("leasehold-with-args");
    std::fs::write(
        &path,
        format!("#!/bin/sh\nexec '{}' {args} \"$@\"\n", binary().display()),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Start a host running the misbehaving fixture (embedded backend) with
/// `binary`, have it echo the forged text, and return its log once the
/// echo is in it.
async fn echo_forged_text(dir: &TempDir, binary: PathBuf) -> String {
    let port = free_port();
    let cache = guest_dir().join("../../leasehold-test-cache");
    let config = format!(
        "cluster = \"hostile\"\nholder = \"h\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n\
         [runtime]\ncache_dir = \"{}\"\n\n[[controllers]]\nname = \"echo\"\n\
         component = \"{}\"\n",
        cache.display(),
        leasehold_tests::guest("misbehaving").display()
    );
    let replica = Replica::start_binary(binary, dir.path(), "echo", port, &config);
    replica.wait_healthy(LIMIT).await;
    let written = http::request(
        &replica.addr,
        "PUT",
        "/v1/objects/cmd/echo",
        &[],
        Some(&payload()),
    )
    .await
    .unwrap();
    assert_eq!(written.status, 201, "{written:?}");
    // The log import, stdout and the failed reconcile's reason have all
    // echoed the third forged line (its marker is last in the text).
    eventually(
        "the guest echoed the forged text three times",
        LIMIT,
        || async {
            let log = replica.log();
            (log.matches("forged=3").count() >= 3).then_some(())
        },
    )
    .await;
    replica.log()
}

#[tokio::test]
async fn a_guest_cannot_forge_a_host_log_line() {
    let dir = TempDir::new();
    let log = echo_forged_text(&dir, binary()).await;
    let forged: Vec<&str> = log.lines().filter(|l| l.starts_with(FORGED)).collect();
    assert!(
        forged.is_empty(),
        "forged lines in the host log: {forged:#?}\n{log}"
    );
    // No carriage return, line-clearing escape or line separator of the
    // guest's reached the log raw (the host's own colours are not these).
    for (raw, name) in [('\r', "carriage return"), ('\u{2028}', "line separator")] {
        assert!(!log.contains(raw), "a raw {name} in the log:\n{log:?}");
    }
    assert!(
        !log.contains("\u{1b}[2K"),
        "a raw terminal escape in the log:\n{log:?}"
    );
    // It is all there, visibly escaped, on the lines the host began.
    assert!(
        log.contains(&format!("done\\n{FORGED} forged=1\\r{FORGED}")),
        "the guest's text is not in the log escaped:\n{log}"
    );
}

#[tokio::test]
async fn json_logs_stay_one_object_per_line_with_host_chosen_fields() {
    let dir = TempDir::new();
    let log = echo_forged_text(&dir, with_args(dir.path(), "--log-format json")).await;
    let mut echoed = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let object: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a log line is not one JSON object ({e}): {line:?}"));
        let fields = object
            .as_object()
            .unwrap_or_else(|| panic!("a log line is not a JSON object: {line:?}"));
        let message = fields
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or_default();
        if message.contains(FORGED) {
            echoed += 1;
            // The guest chose the message, never a field name.
            for key in fields.keys() {
                assert!(
                    [
                        "timestamp",
                        "level",
                        "target",
                        "message",
                        "controller",
                        "epoch",
                        "stream",
                        "object",
                        "retry_in",
                        "reason",
                        // The host's reconcile span, as the JSON format
                        // prints it (the current span and the span list).
                        "span",
                        "spans"
                    ]
                    .contains(&key.as_str()),
                    "a field the host did not choose: {key:?} in {line}"
                );
            }
            // The span's fields are the host's too.
            let spans = fields.get("spans").and_then(|s| s.as_array());
            let current = fields.get("span").into_iter();
            for span in spans.into_iter().flatten().chain(current) {
                for key in span.as_object().into_iter().flat_map(|o| o.keys()) {
                    assert!(
                        ["name", "controller", "epoch", "object", "reason"].contains(&key.as_str()),
                        "a span field the host did not choose: {key:?} in {line}"
                    );
                }
            }
            // One line, as printed: the controls arrive escaped.
            assert!(
                !message.contains(['\n', '\r', '\u{1b}', '\u{2028}']),
                "{message:?}"
            );
        }
    }
    assert!(echoed >= 3, "the echo is missing from the JSON log:\n{log}");
}

/// At the most verbose level an operator can ask for, third-party crates
/// that log statement parameters (object values) and request paths with
/// their queries (`?token=…`, denied requests included) are held to their
/// clamp: neither a value nor a query reaches the log.
#[tokio::test]
async fn the_most_verbose_log_shows_no_object_value_and_no_request_query() {
    let dir = TempDir::new();
    let db = leasehold_host::testing::TestDatabase::create().await;
    let port = free_port();
    let cache = guest_dir().join("../../leasehold-test-cache");
    let config = format!(
        "cluster = \"hostile\"\nholder = \"h\"\n\n[database]\nurl = \"{}\"\n\n\
         [http]\nlisten = \"127.0.0.1:{port}\"\n\n[runtime]\ncache_dir = \"{}\"\n\n\
         [[controllers]]\nname = \"calls\"\ncomponent = \"{}\"\n\
         http_allow = [\"http://127.0.0.1:9/hooks\"]\n",
        db.url(),
        cache.display(),
        leasehold_tests::guest("caller").display()
    );
    let binary = with_args(
        dir.path(),
        "--log-level 'trace,tokio_postgres=trace,wasmtime_wasi_http=trace,hyper=trace'",
    );
    let replica = Replica::start_binary(binary, dir.path(), "verbose", port, &config);
    replica.wait_healthy(LIMIT).await;
    for (path, body) in [
        ("/v1/objects/nodes/n1", r#"{"secret": "VALUE-MARKER-7731"}"#),
        (
            "/v1/objects/calls/denied",
            r#"{"url": "http://127.0.0.1:9/other?token=QUERY-MARKER-1"}"#,
        ),
        (
            "/v1/objects/calls/allowed",
            r#"{"url": "http://127.0.0.1:9/hooks/x?token=QUERY-MARKER-2"}"#,
        ),
    ] {
        let put = http::request(&replica.addr, "PUT", path, &[], Some(body))
            .await
            .unwrap();
        assert_eq!(put.status, 201, "{path}: {put:?}");
    }
    // The guest tried both calls and recorded their outcomes.
    eventually("both calls have results", LIMIT, || async {
        for name in ["denied", "allowed"] {
            let r = http::get(&replica.addr, &format!("/v1/objects/results/{name}"))
                .await
                .ok()?;
            (r.status == 200).then_some(())?;
        }
        Some(())
    })
    .await;
    let log = replica.log();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "the log is not verbose at all:\n{log}"
    );
    for marker in ["VALUE-MARKER-7731", "QUERY-MARKER-1", "QUERY-MARKER-2"] {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(marker)).collect();
        assert!(lines.is_empty(), "{marker} in the log:\n{lines:#?}");
    }
}
