//! The conformance table's runner for this fake: every case of
//! `tests/conformance/store/*.json` (the cases the host's stores and the
//! Python and JavaScript fakes run too) against a fresh [`FakeHost`],
//! through the calls a guest makes (the [`Host`] seam: commit, get, list,
//! list-selected). Cases that need the host's HTTP API are the host's
//! alone and are skipped here (counted).
//!
//! What the wire cannot carry is compared as the wire carries it: a
//! `too_large` refusal is an `invalid` one whose text begins `too large: `,
//! and a conflict names its object but says nothing more. A selector's
//! `contains` arrives at the host as JSON text, which the host parses; a
//! Rust guest hands a `serde_json::Value` over, so this runner parses the
//! case's text by the host's rules first (the model's).
//!
//! Numbers: a case's numbers are a fresh fake's, so the base is 0.
//!
//! The HTTP table (`tests/conformance/http/*.json`) runs through the SDK's
//! own requests (`crate::http::Request`), as a controller sends them.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{ChangeKind, FakeHost};
use crate::sys::native::Host;
use crate::sys::{Metadata, NewEvent, ObjectKey, Op, RawObject, RawPage, Selector, WireError};

fn table_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/store")
}

/// Every case of the table, with its file.
fn cases() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(table_dir())
        .expect("the conformance table's folder")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a table file");
        let doc: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", file.display()));
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        for case in doc["cases"].as_array().expect("a file's cases") {
            cases.push((name.clone(), case.clone()));
        }
    }
    cases
}

#[test]
fn the_conformance_table_holds_on_the_rust_fake() {
    let cases = cases();
    let mut failures = Vec::new();
    let mut ran = 0;
    for (file, case) in &cases {
        if case["needs"]
            .as_array()
            .is_some_and(|needs| needs.iter().any(|n| n == "api"))
        {
            continue;
        }
        ran += 1;
        let mut run = Run {
            host: FakeHost::new(),
            problems: Vec::new(),
        };
        if let Some(limits) = case.get("quota") {
            let defaults = super::QuotaLimits::default();
            run.host.set_quotas(super::QuotaLimits {
                max_creates_per_second: limits["max_creates_per_second"]
                    .as_u64()
                    .map_or(defaults.max_creates_per_second, |n| n as u32),
                create_burst: limits["create_burst"]
                    .as_u64()
                    .map_or(defaults.create_burst, |n| n as u32),
                max_objects_per_kind: limits["max_objects_per_kind"]
                    .as_u64()
                    .unwrap_or(defaults.max_objects_per_kind),
            });
        }
        run.case(case);
        if !run.problems.is_empty() {
            failures.push(format!(
                "{file}: {}:\n    {}",
                case["name"].as_str().unwrap_or_default(),
                run.problems.join("\n    ")
            ));
        }
    }
    assert!(ran >= 150, "only {ran} cases ran");
    assert!(
        failures.is_empty(),
        "{} of {ran} conformance cases disagree on the Rust FakeHost:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

struct Run {
    host: FakeHost,
    problems: Vec<String>,
}

impl Run {
    fn case(&mut self, case: &Value) {
        for (i, step) in case["steps"].as_array().expect("steps").iter().enumerate() {
            let before = self.problems.len();
            self.step(step);
            for problem in &mut self.problems[before..] {
                *problem = format!("step {i}: {problem}");
            }
        }
        if let Some(objects) = case.get("objects").and_then(Value::as_object) {
            for (key, want) in objects {
                let key = parse_key(&Value::String(key.clone()));
                match Host::get(&self.host, &key.kind, &key.name) {
                    Ok(got) => self.compare_object(&format!("final {key}"), got.as_ref(), want),
                    Err(e) => self.problems.push(format!("final {key}: {e:?}")),
                }
            }
        }
        if let Some(want) = case.get("events").and_then(Value::as_array) {
            let got = self.host.events();
            if got.len() != want.len() {
                self.problems
                    .push(format!("{} events, expected {}", got.len(), want.len()));
            } else {
                for (got, want) in got.iter().zip(want) {
                    let same = Some(got.seq) == want["seq"].as_u64()
                        && Some(got.revision) == want["revision"].as_u64()
                        && want["about"].as_str() == Some(got.key.to_string().as_str())
                        && want["reason"].as_str() == Some(got.reason.as_str())
                        && want
                            .get("message")
                            .is_none_or(|m| m.as_str() == Some(got.message.as_str()));
                    if !same {
                        self.problems
                            .push(format!("event {got:?}, expected {want}"));
                    }
                }
            }
        }
        if let Some(want) = case.get("changes").and_then(Value::as_array) {
            let got = self.host.changes();
            if got.len() != want.len() {
                self.problems
                    .push(format!("{} changes, expected {}", got.len(), want.len()));
            } else {
                for (got, want) in got.iter().zip(want) {
                    let kind = match got.kind {
                        ChangeKind::Created => "created",
                        ChangeKind::Updated => "updated",
                        ChangeKind::Deleted => "deleted",
                    };
                    let same = Some(got.position) == want["position"].as_u64()
                        && Some(got.revision) == want["revision"].as_u64()
                        && want["object"].as_str() == Some(got.key.to_string().as_str())
                        && want["change"].as_str() == Some(kind);
                    if !same {
                        self.problems.push(format!(
                            "change {} {} {kind} at {}, expected {want}",
                            got.position, got.key, got.revision
                        ));
                    }
                }
            }
        }
    }

    fn step(&mut self, step: &Value) {
        let expect = &step["expect"];
        if let Some(commit) = step.get("commit") {
            let ops: Vec<Op> = commit["ops"]
                .as_array()
                .map(|ops| ops.iter().flat_map(ops_of).collect())
                .unwrap_or_default();
            let events: Vec<NewEvent> = commit["events"]
                .as_array()
                .map(|events| events.iter().map(event).collect())
                .unwrap_or_default();
            match Host::commit(&self.host, &ops, &events) {
                Ok(committed) => {
                    let seqs: Option<Vec<u64>> = expect["events"]
                        .as_array()
                        .map(|s| s.iter().filter_map(Value::as_u64).collect());
                    if expect.get("error").is_some()
                        || Some(committed.revision) != expect["revision"].as_u64()
                        || seqs.is_some_and(|s| s != committed.event_seqs)
                    {
                        self.problems.push(format!(
                            "committed at {} with events {:?}, expected {expect}",
                            committed.revision, committed.event_seqs
                        ));
                    }
                }
                Err(e) => self.error(&e, expect),
            }
        } else if let Some(key) = step.get("get") {
            let key = parse_key(key);
            match Host::get(&self.host, &key.kind, &key.name) {
                Ok(got) if expect.get("error").is_none() => {
                    self.compare_object(&format!("get {key}"), got.as_ref(), &expect["object"]);
                }
                Ok(got) => self
                    .problems
                    .push(format!("read {got:?}, expected {expect}")),
                Err(e) => self.error(&e, expect),
            }
        } else if let Some(list) = step.get("list") {
            match self.list(list) {
                Ok(page) => {
                    let names: Vec<&str> = page.objects.iter().map(|o| o.name.as_str()).collect();
                    let want: Vec<&str> = expect["names"]
                        .as_array()
                        .map(|n| n.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    if expect.get("error").is_some() || names != want {
                        self.problems
                            .push(format!("listed {names:?}, expected {expect}"));
                    }
                    if expect.get("next").is_some()
                        && page.next.as_deref() != expect["next"].as_str()
                    {
                        self.problems
                            .push(format!("next {:?}, expected {}", page.next, expect["next"]));
                    }
                }
                Err(e) => self.error(&e, expect),
            }
        } else {
            panic!("a step of an unknown kind: {step}");
        }
    }

    fn list(&self, list: &Value) -> Result<RawPage, WireError> {
        let kind = list["kind"].as_str().expect("a list's kind");
        let after = list["after"].as_str();
        let limit = list["limit"].as_u64().unwrap_or(0) as u32;
        let labels = labels(&list["labels"]);
        let contains = match list.get("contains") {
            Some(text_of) => Some(
                leasehold_model::validate::parse_contains(
                    kind,
                    &text(text_of),
                    crate::limits::MAX_VALUE_BYTES,
                )
                .map_err(super::store::wire)?,
            ),
            None => None,
        };
        if labels.is_empty() && contains.is_none() {
            return Host::list(&self.host, kind, after, limit);
        }
        let selector = Selector { labels, contains };
        Host::list_selected(&self.host, kind, &selector, after, limit)
    }

    fn error(&mut self, error: &WireError, expect: &Value) {
        let Some(code) = expect["error"].as_str() else {
            self.problems
                .push(format!("failed: {error:?}, expected {expect}"));
            return;
        };
        let ok = match (error, code) {
            (WireError::Conflict(key), "conflict") | (WireError::NotFound(key), "not_found") => {
                if let Some(want) = expect.get("object")
                    && parse_key(want) != *key
                {
                    self.problems
                        .push(format!("failed naming {key}, expected {want}"));
                }
                true
            }
            // The wire has no `too_large`: the host sends it as `invalid`
            // with its text.
            (WireError::Invalid(why), "too_large") => why.starts_with("too large: "),
            (WireError::Invalid(_), "invalid") => true,
            _ => false,
        };
        if !ok {
            self.problems
                .push(format!("failed as {error:?}, expected {code}"));
        }
        if let (WireError::Invalid(why), Some(fragment)) = (error, expect["message"].as_str())
            && !why.contains(fragment)
        {
            self.problems
                .push(format!("message {why:?} lacks {fragment:?}"));
        }
    }

    fn compare_object(&mut self, what: &str, got: Option<&RawObject>, want: &Value) {
        let (got, want) = match (got, want) {
            (None, Value::Null) => return,
            (Some(got), Value::Object(want)) => (got, want),
            (got, want) => {
                self.problems
                    .push(format!("{what}: {got:?}, expected {want}"));
                return;
            }
        };
        let mut differs = |field: &str, got: String, want: String| {
            if got != want {
                self.problems
                    .push(format!("{what}: {field} {got}, expected {want}"));
            }
        };
        if let Some(v) = want.get("version") {
            differs("version", got.version.to_string(), v.to_string());
        }
        if let Some(v) = want.get("value") {
            differs("value", got.value.clone(), text(v));
        }
        if let Some(v) = want.get("generation") {
            differs("generation", got.generation.to_string(), v.to_string());
        }
        if let Some(v) = want.get("status") {
            let want = match v {
                Value::Null => None,
                v => Some(text(v)),
            };
            differs("status", format!("{:?}", got.status), format!("{want:?}"));
        }
        if let Some(v) = want.get("deleting") {
            differs(
                "deleting",
                got.deleting_since_ms.is_some().to_string(),
                v.to_string(),
            );
        }
        if let Some(v) = want.get("labels") {
            differs(
                "labels",
                format!("{:?}", got.meta.labels),
                format!("{:?}", labels(v)),
            );
        }
        if let Some(v) = want.get("owner") {
            let want = (!v.is_null()).then(|| parse_key(v));
            differs(
                "owner",
                format!("{:?}", got.meta.owner),
                format!("{want:?}"),
            );
        }
        if let Some(v) = want.get("finalizers") {
            differs(
                "finalizers",
                format!("{:?}", got.meta.finalizers),
                format!("{:?}", strings(v)),
            );
        }
    }
}

fn parse_key(key: &Value) -> ObjectKey {
    match key {
        Value::String(text) => {
            let (kind, name) = text.split_once('/').unwrap_or((text, ""));
            ObjectKey::new(kind, name)
        }
        _ => ObjectKey::new(
            key["kind"].as_str().unwrap_or_default(),
            key["name"].as_str().unwrap_or_default(),
        ),
    }
}

/// JSON text as the table gives it (see the table's README: a string, or
/// `string_of`, `array_of` + `times`, `nested`).
fn text(value: &Value) -> String {
    if let Some(text) = value.as_str() {
        return text.to_string();
    }
    if let Some(n) = value["string_of"].as_u64() {
        return format!("\"{}\"", "x".repeat(n as usize));
    }
    if let Some(element) = value["array_of"].as_str() {
        let times = value["times"].as_u64().unwrap_or(0) as usize;
        return format!("[{}]", vec![element; times].join(","));
    }
    if let Some(n) = value["nested"].as_u64() {
        return format!("{}{}", "[".repeat(n as usize), "]".repeat(n as usize));
    }
    panic!("not a JSON text of the table: {value}");
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|s| s.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn labels(value: &Value) -> std::collections::BTreeMap<String, String> {
    value
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn metadata(meta: &Value) -> Metadata {
    Metadata {
        labels: labels(&meta["labels"]),
        owner: match &meta["owner"] {
            Value::Null => None,
            owner => Some(parse_key(owner)),
        },
        finalizers: strings(&meta["finalizers"]),
    }
}

fn event(event: &Value) -> NewEvent {
    NewEvent {
        key: parse_key(&event["about"]),
        reason: event["reason"].as_str().unwrap_or_default().to_string(),
        message: event["message"].as_str().unwrap_or_default().to_string(),
    }
}

fn ops_of(op: &Value) -> Vec<Op> {
    if let Some(range) = op.get("create_range") {
        let kind = range["kind"].as_str().expect("a range's kind");
        let prefix = range["prefix"].as_str().expect("a range's prefix");
        let from = range["from"].as_u64().unwrap_or(0);
        let count = range["count"].as_u64().expect("a range's count");
        let meta = range.get("meta").map(metadata).unwrap_or_default();
        return (from..from + count)
            .map(|i| Op::CreateWith {
                key: ObjectKey::new(kind, format!("{prefix}{i:04}")),
                value: text(&range["value"]),
                meta: meta.clone(),
            })
            .collect();
    }
    let version = |name: &str| op[name].as_u64().unwrap_or(0);
    let one = if let Some(key) = op.get("create") {
        let key = parse_key(key);
        match op.get("meta") {
            Some(meta) => Op::CreateWith {
                key,
                value: text(&op["value"]),
                meta: metadata(meta),
            },
            None => Op::Create {
                key,
                value: text(&op["value"]),
            },
        }
    } else if let Some(key) = op.get("update") {
        Op::Update {
            key: parse_key(key),
            expected_version: version("version"),
            value: text(&op["value"]),
        }
    } else if let Some(key) = op.get("replace") {
        Op::Replace {
            key: parse_key(key),
            expected_version: version("version"),
            value: op.get("value").map(text),
            meta: op.get("meta").map(metadata),
        }
    } else if let Some(key) = op.get("delete") {
        Op::Delete {
            key: parse_key(key),
            expected_version: version("version"),
        }
    } else if let Some(key) = op.get("status") {
        Op::Status {
            key: parse_key(key),
            expected_generation: op["generation"].as_u64(),
            status: match &op["value"] {
                Value::Null => None,
                value => Some(text(value)),
            },
        }
    } else if let Some(key) = op.get("check") {
        Op::Check {
            key: parse_key(key),
            expected_version: version("version"),
        }
    } else {
        panic!("an operation of an unknown kind: {op}");
    };
    vec![one]
}

// ----- outbound HTTP: tests/conformance/http/*.json ------------------------

/// Every case of the HTTP table against a fresh fake, through the SDK's
/// own requests (`crate::http::Request`), as a controller sends them.
#[test]
fn the_http_conformance_table_holds_on_the_rust_fake() {
    use super::{HttpFault, HttpReply};
    use crate::http::{HttpError, Method, Request};

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/http");
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the HTTP table's folder")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for file in files {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for case in doc["cases"].as_array().expect("cases") {
            ran += 1;
            let host = FakeHost::new();
            let mut problems = Vec::new();
            let entries: Vec<String> = strings(&case["allow"]);
            if !entries.is_empty() {
                host.allow_http(entries);
            }
            for route in case["respond"].as_array().into_iter().flatten() {
                let status = route["status"].as_u64().expect("a status") as u16;
                host.respond(
                    route["pattern"].as_str().expect("a pattern"),
                    HttpReply::status(status),
                );
            }
            for (i, step) in case["steps"].as_array().expect("steps").iter().enumerate() {
                if step.get("revoke").is_some() {
                    host.revoke();
                    continue;
                }
                if step.get("new_tenure").is_some() {
                    host.new_tenure();
                    continue;
                }
                let send = &step["send"];
                if let Some(fault) = step["fault"].as_str() {
                    host.fail_next_http(match fault {
                        "reply_lost" => HttpFault::ReplyLost,
                        "reply_timed_out" => HttpFault::ReplyTimedOut,
                        "refused" => HttpFault::Refused,
                        "timeout" => HttpFault::Timeout,
                        "fenced" => HttpFault::Fenced,
                        other => panic!("an HTTP fault of an unknown kind: {other}"),
                    });
                }
                let method = match send["method"].as_str().unwrap_or("GET") {
                    "GET" => Method::Get,
                    "POST" => Method::Post,
                    "PUT" => Method::Put,
                    "DELETE" => Method::Delete,
                    other => panic!("a method the table does not use: {other}"),
                };
                let mut request = Request::new(method, send["url"].as_str().expect("a url"));
                for (name, value) in send["headers"].as_object().into_iter().flatten() {
                    request = request.header(name.as_str(), value.as_str().unwrap_or_default());
                }
                if let Some(body) = send["body"].as_str() {
                    request = request.body(body.as_bytes().to_vec());
                }
                let got = match request.send() {
                    Ok(response) => format!("status {}", response.status),
                    Err(HttpError::Denied { .. }) => "denied".into(),
                    Err(HttpError::Fenced(_)) => "fenced".into(),
                    Err(HttpError::Connection(_)) => "connection".into(),
                    Err(HttpError::Timeout(_)) => "timeout".into(),
                    Err(other) => format!("{other:?}"),
                };
                let expect = &step["expect"];
                let want = match (expect["status"].as_u64(), expect["error"].as_str()) {
                    (Some(status), _) => format!("status {status}"),
                    (None, Some(error)) => error.to_string(),
                    _ => panic!("a step without an expectation"),
                };
                if got != want {
                    problems.push(format!("step {i}: {got}, expected {want}"));
                }
            }
            let records = host.http_requests();
            let want = case["requests"].as_array().expect("requests");
            if records.len() != want.len() {
                problems.push(format!(
                    "{} requests left ({:?}), expected {}",
                    records.len(),
                    records.iter().map(|r| &r.url).collect::<Vec<_>>(),
                    want.len()
                ));
            } else {
                for (record, want) in records.iter().zip(want) {
                    let same = want["url"].as_str() == Some(record.url.as_str())
                        && want["method"].as_str() == Some(record.method.as_str())
                        && want["delivered"].as_bool() == Some(record.delivered)
                        && want["status"].as_u64() == record.status.map(u64::from);
                    if !same {
                        problems.push(format!("request {record:?}, expected {want}"));
                    }
                    for (name, value) in want["headers"].as_object().into_iter().flatten() {
                        if record.header(name) != value.as_str() {
                            problems.push(format!(
                                "request {}: header {name} {:?}, expected {value}",
                                record.url,
                                record.header(name)
                            ));
                        }
                    }
                }
            }
            if !problems.is_empty() {
                failures.push(format!(
                    "{}: {}:\n    {}",
                    file.display(),
                    case["name"].as_str().unwrap_or_default(),
                    problems.join("\n    ")
                ));
            }
        }
    }
    assert!(ran >= 10, "only {ran} HTTP cases ran");
    assert!(
        failures.is_empty(),
        "{} HTTP conformance cases disagree on the Rust FakeHost:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
