//! The `leasehold-receiver` binary: it says where it listens, serves the
//! API, and its record file holds the same record as `GET /_record`.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use leasehold_receiver::{Outcome, RecordEntry, check, read_record_file};
use serde_json::json;
use support::{Req, until};

/// The child process, killed (by its own handle) when the test ends.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A file path of this test's own, removed when the test ends.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        Self(std::env::temp_dir().join(format!(
            "leasehold-receiver-{}-{nanos}-{name}",
            std::process::id()
        )))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn spawn(args: &[&str]) -> (Process, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold-receiver"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start leasehold-receiver");
    let stdout = child.stdout.take().expect("piped stdout");
    let process = Process(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the first line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line {line:?}"))
        .parse()
        .expect("an address");
    (process, addr)
}

#[tokio::test]
async fn the_record_file_follows_the_record() {
    let file = TempFile::new("record.jsonl");
    let path = file.0.to_str().expect("a UTF-8 temp path");
    let (_process, addr) = spawn(&["--listen", "127.0.0.1:0", "--record-file", path]);

    let spec = json!({"size_gb": 5, "region": "eu"});
    assert_eq!(
        Req::put("a", "demo/p", 2, "k1", &spec)
            .send(addr)
            .await
            .status,
        201
    );
    assert_eq!(
        Req::put("a", "demo/p", 1, "k2", &spec)
            .send(addr)
            .await
            .status,
        409
    );
    assert_eq!(
        Req::put("a", "demo/p", 2, "k1", &spec)
            .send(addr)
            .await
            .status,
        201
    );

    let over_http: Vec<RecordEntry> =
        serde_json::from_slice(&Req::get("/_record").send(addr).await.body).expect("a record");
    assert_eq!(
        over_http.iter().map(|e| e.outcome).collect::<Vec<_>>(),
        vec![Outcome::Applied, Outcome::Stale, Outcome::Replayed]
    );
    // Each line is flushed as its request is decided, before the answer.
    let mut from_file = Vec::new();
    until("the record file to hold three entries", || {
        from_file = read_record_file(&file.0).expect("a readable record file");
        from_file.len() == 3
    })
    .await;
    assert_eq!(from_file, over_http);
    assert_eq!(check(&from_file), vec![]);

    // Without --test-hooks there are no faults.
    let reply = Req::new("POST", "/_faults")
        .body(r#"{"kind": "hang"}"#)
        .send(addr)
        .await;
    assert_eq!(reply.status, 404);
}

#[tokio::test]
async fn test_hooks_are_enabled_by_the_flag() {
    let (_process, addr) = spawn(&["--listen", "127.0.0.1:0", "--test-hooks"]);
    let reply = Req::new("POST", "/_faults")
        .body(r#"{"kind": "drop_after_apply"}"#)
        .send(addr)
        .await;
    assert_eq!(reply.status, 200);
    let spec = json!({"size_gb": 5, "region": "eu"});
    assert!(
        Req::put("a", "demo/p", 1, "k1", &spec)
            .send_head(addr)
            .await
            .is_err()
    );
    let bucket = Req::get("/buckets/a").send(addr).await;
    assert_eq!(bucket.json()["generation"], 1);
}

#[test]
fn an_address_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("an address").to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold-receiver"))
        .args(["--listen", &addr])
        .output()
        .expect("run leasehold-receiver");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
}
