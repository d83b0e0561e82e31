//! The conformance table's runner for the host's stores: every case of
//! `tests/conformance/store/*.json` (the cases the SDK's three fakes run
//! too) against one backend, each in a cluster of its own, through the
//! entry points production uses: fenced commits, reads, selective lists
//! (a `contains` given as JSON text is parsed as the API and the runtime
//! parse it), and, for cases that need the HTTP API, the real router on a
//! loopback listener.
//!
//! Numbers in a case are those a fresh fake gives (the first number handed
//! out is 1). Every backend of one store shares a series of numbers across
//! clusters, so a case's numbers are offset by a base: the first
//! successful commit (or API write) fixes it from the revision the case
//! expects; every later revision, position and sequence number must then
//! be that offset exactly, which is what holds the gaps to the host's.
//!
//! Every disagreement of every case is collected and reported at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::fence::Fence;
use crate::quota::{AdmitError, QuotaLimits, WriteQuota};

use super::Backend;
use crate::store::{Metadata, NewEvent, Object, ObjectKey, Op, Page, Selector, Store, StoreError};

/// Where the table lives, from this crate's folder.
fn table_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/store")
}

/// Every case of the table, with the file it came from.
pub(super) fn cases() -> Vec<(String, Value)> {
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

/// Run every case against `b`; panic naming each case that disagreed and
/// how.
pub(super) async fn run_all(b: &Backend) {
    let cases = cases();
    assert!(
        cases.len() >= 150,
        "the table has only {} cases",
        cases.len()
    );
    let mut failures = Vec::new();
    for (i, (file, case)) in cases.iter().enumerate() {
        let name = case["name"].as_str().expect("a case's name");
        let cluster = format!("case-{i}");
        let mut run = Run {
            b,
            cluster: cluster.clone(),
            fence: b.leases.grant(&cluster, "ctl", "host-a").await,
            base: None,
            problems: Vec::new(),
            quota: case.get("quota").map(quota),
        };
        run.case(case).await;
        if !run.problems.is_empty() {
            failures.push(format!(
                "{file}: {name}:\n    {}",
                run.problems.join("\n    ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} conformance cases disagree:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

struct Run<'b> {
    b: &'b Backend,
    cluster: String,
    fence: Fence,
    /// What the case's numbers are offset by on this backend, once known.
    base: Option<u64>,
    problems: Vec<String>,
    /// The controller's write quotas, for a case that sets them: every
    /// commit is admitted by them first, as the runtime admits a guest's.
    quota: Option<WriteQuota>,
}

/// A case's quotas: the host's defaults where it names none.
fn quota(limits: &Value) -> WriteQuota {
    let defaults = QuotaLimits::default();
    WriteQuota::new(
        "ctl",
        QuotaLimits {
            creates_per_second: limits["max_creates_per_second"]
                .as_u64()
                .map_or(defaults.creates_per_second, |n| n as u32),
            create_burst: limits["create_burst"]
                .as_u64()
                .map_or(defaults.create_burst, |n| n as u32),
            objects_per_kind: limits["max_objects_per_kind"]
                .as_u64()
                .unwrap_or(defaults.objects_per_kind),
        },
    )
}

impl Run<'_> {
    fn store(&self) -> &dyn Store {
        self.b.store.as_ref()
    }

    async fn case(&mut self, case: &Value) {
        for (i, step) in case["steps"].as_array().expect("steps").iter().enumerate() {
            let before = self.problems.len();
            self.step(step).await;
            for problem in &mut self.problems[before..] {
                *problem = format!("step {i}: {problem}");
            }
        }
        if let Some(objects) = case.get("objects").and_then(Value::as_object) {
            for (key, want) in objects {
                let key = parse_key(&Value::String(key.clone()));
                match self.store().get(&self.cluster, &key).await {
                    Ok(got) => self.compare_object(&format!("final {key}"), got.as_ref(), want),
                    Err(e) => self
                        .problems
                        .push(format!("final {key}: reading failed: {e}")),
                }
            }
        }
        if let Some(events) = case.get("events") {
            self.compare_events(events).await;
        }
        if let Some(changes) = case.get("changes") {
            self.compare_changes(changes).await;
        }
    }

    async fn step(&mut self, step: &Value) {
        let expect = &step["expect"];
        if let Some(commit) = step.get("commit") {
            let ops: Vec<Op> = commit["ops"]
                .as_array()
                .map(|ops| ops.iter().flat_map(|op| self.ops(op)).collect())
                .unwrap_or_default();
            let events: Vec<NewEvent> = commit["events"]
                .as_array()
                .map(|events| events.iter().map(event).collect())
                .unwrap_or_default();
            let result = match &self.quota {
                None => self.store().commit_fenced(&self.fence, &ops, &events).await,
                Some(quota) => match quota.admit(self.store(), &self.fence, &ops).await {
                    // A guest is told `invalid` with the refusal's text.
                    Err(AdmitError::Refused(refused)) => {
                        Err(StoreError::Invalid(refused.to_string()))
                    }
                    Err(AdmitError::Store(e)) => Err(e),
                    Ok(mut permit) => {
                        permit.sent();
                        let result = self.store().commit_fenced(&self.fence, &ops, &events).await;
                        permit.settle(&result).await;
                        result
                    }
                },
            };
            match result {
                Ok(committed) => {
                    if expect.get("revision").is_none() && expect.get("error").is_none() {
                        self.problems.push(
                            "the case gives a successful commit no revision: every one fixes or checks the numbers"
                                .into(),
                        );
                    }
                    if expect.get("error").is_some() {
                        self.problems.push(format!(
                            "committed at {}, expected {expect}",
                            committed.revision
                        ));
                        return;
                    }
                    self.number("revision", committed.revision, &expect["revision"]);
                    if let Some(seqs) = expect.get("events").and_then(Value::as_array) {
                        if seqs.len() != committed.event_seqs.len() {
                            self.problems.push(format!(
                                "event seqs {:?}, expected {seqs:?}",
                                committed.event_seqs
                            ));
                        }
                        for (got, want) in committed.event_seqs.iter().zip(seqs) {
                            self.number("event seq", *got, want);
                        }
                    }
                }
                Err(e) => self.error(&e, expect),
            }
        } else if let Some(key) = step.get("get") {
            let key = parse_key(key);
            match self.store().get(&self.cluster, &key).await {
                Ok(got) => {
                    if expect.get("error").is_some() {
                        self.problems
                            .push(format!("read {got:?}, expected {expect}"));
                    } else {
                        self.compare_object(&format!("get {key}"), got.as_ref(), &expect["object"]);
                    }
                }
                Err(e) => self.error(&e, expect),
            }
        } else if let Some(list) = step.get("list") {
            match self.list(list).await {
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
        } else if let Some(api) = step.get("api") {
            self.api(api, expect).await;
        } else {
            panic!("a step of an unknown kind: {step}");
        }
    }

    /// A table number (0 is absent, never offset) on this backend.
    fn input(&self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            n + self.base.unwrap_or(0)
        }
    }

    /// Compare a number this backend gave with the case's: the first one
    /// fixes the base.
    fn number(&mut self, what: &str, got: u64, want: &Value) {
        let Some(want) = want.as_u64() else {
            return;
        };
        let base = *self.base.get_or_insert(got.wrapping_sub(want));
        if got != want.wrapping_add(base) {
            self.problems.push(format!(
                "{what} {} (base {base}), expected {want}",
                got.wrapping_sub(base)
            ));
        }
    }

    fn ops(&self, op: &Value) -> Vec<Op> {
        if let Some(range) = op.get("create_range") {
            return create_range(range)
                .into_iter()
                .map(|(key, value, meta)| Op::CreateWith { key, value, meta })
                .collect();
        }
        let version = |name: &str| self.input(op[name].as_u64().unwrap_or(0));
        let one = if let Some(key) = op.get("create") {
            let key = parse_key(key);
            let value = text(&op["value"]);
            match op.get("meta") {
                Some(meta) => Op::CreateWith {
                    key,
                    value,
                    meta: metadata(meta),
                },
                None => Op::Create { key, value },
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

    async fn list(&self, list: &Value) -> Result<Page, StoreError> {
        let kind = list["kind"].as_str().expect("a list's kind");
        let after = list["after"].as_str();
        let limit = list["limit"].as_u64().unwrap_or(0) as usize;
        let labels = labels(&list["labels"]);
        let contains = match list.get("contains") {
            // As the API's `contains=` and a guest's selector are parsed.
            Some(contains) => Some(leasehold_model::validate::parse_contains(
                kind,
                &text(contains),
                crate::limits::MAX_VALUE_BYTES,
            )?),
            None => None,
        };
        if labels.is_empty() && contains.is_none() {
            return self.store().list(&self.cluster, kind, after, limit).await;
        }
        let selector = Selector { labels, contains };
        self.store()
            .list_selected(&self.cluster, kind, &selector, after, limit)
            .await
    }

    fn error(&mut self, error: &StoreError, expect: &Value) {
        let Some(code) = expect["error"].as_str() else {
            self.problems
                .push(format!("failed: {error}, expected {expect}"));
            return;
        };
        let (got, key) = match error {
            StoreError::Conflict { key, .. } => ("conflict", Some(key)),
            StoreError::NotFound { key } => ("not_found", Some(key)),
            StoreError::Invalid(_) => ("invalid", None),
            StoreError::TooLarge(_) => ("too_large", None),
            _ => ("other", None),
        };
        if got != code {
            self.problems
                .push(format!("failed as {got} ({error}), expected {code}"));
        }
        if let (Some(want), Some(key)) = (expect.get("object"), key)
            && parse_key(want) != *key
        {
            self.problems
                .push(format!("failed naming {key}, expected {want}"));
        }
        if let Some(fragment) = expect["message"].as_str()
            && !error.to_string().contains(fragment)
        {
            self.problems
                .push(format!("message {error:?} lacks {fragment:?}"));
        }
    }

    fn compare_object(&mut self, what: &str, got: Option<&Object>, want: &Value) {
        let (got, want) = match (got, want) {
            (None, Value::Null) => return,
            (Some(got), Value::Object(want)) => (got, want),
            (got, want) => {
                self.problems
                    .push(format!("{what}: {got:?}, expected {want}"));
                return;
            }
        };
        if let Some(version) = want.get("version").and_then(Value::as_u64)
            && got.version != self.input(version)
        {
            self.problems.push(format!(
                "{what}: version {} (base {:?}), expected {version}",
                got.version.wrapping_sub(self.base.unwrap_or(0)),
                self.base
            ));
        }
        if let Some(value) = want.get("value")
            && got.value != text(value)
        {
            self.problems.push(format!(
                "{what}: value {}, expected {}",
                got.value,
                text(value)
            ));
        }
        if let Some(generation) = want.get("generation").and_then(Value::as_u64)
            && got.generation != generation
        {
            self.problems.push(format!(
                "{what}: generation {}, expected {generation}",
                got.generation
            ));
        }
        if let Some(status) = want.get("status") {
            let expected = match status {
                Value::Null => None,
                status => Some(text(status)),
            };
            if got.status != expected {
                self.problems.push(format!(
                    "{what}: status {:?}, expected {expected:?}",
                    got.status
                ));
            }
        }
        if let Some(deleting) = want.get("deleting").and_then(Value::as_bool)
            && got.deleting_since.is_some() != deleting
        {
            self.problems.push(format!(
                "{what}: deleting_since {:?}, expected marked: {deleting}",
                got.deleting_since
            ));
        }
        if let Some(l) = want.get("labels")
            && got.meta.labels != labels(l)
        {
            self.problems.push(format!(
                "{what}: labels {:?}, expected {l}",
                got.meta.labels
            ));
        }
        if let Some(owner) = want.get("owner") {
            let expected = (!owner.is_null()).then(|| parse_key(owner));
            if got.meta.owner != expected {
                self.problems.push(format!(
                    "{what}: owner {:?}, expected {owner}",
                    got.meta.owner
                ));
            }
        }
        if let Some(finalizers) = want.get("finalizers") {
            let expected: Vec<String> = strings(finalizers);
            if got.meta.finalizers != expected {
                self.problems.push(format!(
                    "{what}: finalizers {:?}, expected {finalizers}",
                    got.meta.finalizers
                ));
            }
        }
    }

    async fn compare_events(&mut self, want: &Value) {
        let got = match self.store().events(&self.cluster, 0, 500).await {
            Ok(events) => events,
            Err(e) => {
                self.problems.push(format!("events: {e}"));
                return;
            }
        };
        let want = want.as_array().expect("events");
        if got.len() != want.len() {
            self.problems.push(format!(
                "{} events ({:?}), expected {}",
                got.len(),
                got.iter().map(|e| &e.reason).collect::<Vec<_>>(),
                want.len()
            ));
            return;
        }
        for (got, want) in got.iter().zip(want) {
            self.number("event seq", got.seq, &want["seq"]);
            self.number("event revision", got.revision, &want["revision"]);
            let about = format!("{}/{}", got.kind, got.name);
            if want["about"].as_str() != Some(about.as_str())
                || want["reason"].as_str() != Some(got.reason.as_str())
                || want
                    .get("message")
                    .is_some_and(|m| m.as_str() != Some(got.message.as_str()))
            {
                self.problems.push(format!(
                    "event {about} {} {:?}, expected {want}",
                    got.reason, got.message
                ));
            }
        }
    }

    async fn compare_changes(&mut self, want: &Value) {
        let got = match self.store().changes(&self.cluster, &[], 0, 500).await {
            Ok(page) => page.changes,
            Err(e) => {
                self.problems.push(format!("changes: {e}"));
                return;
            }
        };
        let want = want.as_array().expect("changes");
        if got.len() != want.len() {
            self.problems.push(format!(
                "{} changes ({:?}), expected {}",
                got.len(),
                got.iter()
                    .map(|c| format!("{}/{} {}", c.kind, c.name, c.change.as_str()))
                    .collect::<Vec<_>>(),
                want.len()
            ));
            return;
        }
        for (got, want) in got.iter().zip(want) {
            self.number("change position", got.position, &want["position"]);
            self.number("change revision", got.revision, &want["revision"]);
            let object = format!("{}/{}", got.kind, got.name);
            if want["object"].as_str() != Some(object.as_str())
                || want["change"].as_str() != Some(got.change.as_str())
            {
                self.problems.push(format!(
                    "change {object} {}, expected {want}",
                    got.change.as_str()
                ));
            }
        }
    }

    /// An HTTP request through the real API router, on this case's
    /// cluster and this backend's store.
    async fn api(&mut self, api: &Value, expect: &Value) {
        let state = crate::api::ApiState {
            cluster: self.cluster.clone(),
            holder: "host-a".into(),
            status: Arc::new(crate::status::Status::new(
                self.cluster.clone(),
                "host-a".into(),
                &[],
            )),
            authority: Arc::new(crate::authority::memory::MemoryAuthority::new()),
            store: self.b.store.clone(),
            access: Arc::new(crate::api::auth::Access::open()),
            stopping: tokio::sync::watch::channel(false).1,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crate::api::serve(
            listener,
            crate::api::router(state),
            crate::api::ServeLimits::for_this_process().0,
            None,
            async move {
                let _ = stopped.await;
            },
        ));
        let method = api["method"].as_str().expect("a request's method");
        let path = api["path"].as_str().expect("a request's path");
        let body = api.get("body").map(text).unwrap_or_default();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: conformance\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(headers) = api["headers"].as_object() {
            for (name, value) in headers {
                request.push_str(&format!(
                    "{name}: {}\r\n",
                    value.as_str().unwrap_or_default()
                ));
            }
        }
        request.push_str("\r\n");
        request.push_str(&body);
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(super::WAIT, stream.read_to_end(&mut answer))
            .await
            .expect("the API answers")
            .unwrap();
        let _ = stop.send(());
        let _ = server.await;
        let answer = String::from_utf8_lossy(&answer).to_string();
        let status: u64 = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        if Some(status) != expect["status"].as_u64() {
            self.problems.push(format!(
                "{method} {path}: {status} {body}, expected {expect}"
            ));
            return;
        }
        if let Some(code) = expect["code"].as_str()
            && json["code"].as_str() != Some(code)
        {
            self.problems.push(format!(
                "{method} {path}: code {}, expected {code}",
                json["code"]
            ));
        }
        if let Some(fragment) = expect["message"].as_str()
            && !json["error"]
                .as_str()
                .unwrap_or_default()
                .contains(fragment)
        {
            self.problems.push(format!(
                "{method} {path}: error {}, lacks {fragment:?}",
                json["error"]
            ));
        }
        if let Some(version) = expect.get("version") {
            let got = json["version"].as_u64().unwrap_or(0);
            self.number("version", got, version);
        }
        if let Some(value) = expect.get("value") {
            // The answer's value as canonical text: what the store keeps.
            let answered = json["value"].to_string();
            if answered != text(value) {
                self.problems.push(format!(
                    "{method} {path}: value {answered}, expected {}",
                    text(value)
                ));
            }
        }
    }
}

/// A key written `kind/name`, or `{"kind", "name"}` for a name holding a
/// slash.
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

/// JSON text as the table gives it: a string is the text itself; an
/// object generates a long one (`string_of`: a JSON string of that many
/// `x`; `array_of` + `times`: that element repeated in an array;
/// `nested`: that many arrays, one in the other).
pub(super) fn text(value: &Value) -> String {
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

fn labels(value: &Value) -> BTreeMap<String, String> {
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

/// `create_range`: `count` objects `kind/PREFIXnnnn` from `from`, each
/// with `value` and `meta`.
fn create_range(range: &Value) -> Vec<(ObjectKey, String, Metadata)> {
    let kind = range["kind"].as_str().expect("a range's kind");
    let prefix = range["prefix"].as_str().expect("a range's prefix");
    let from = range["from"].as_u64().unwrap_or(0);
    let count = range["count"].as_u64().expect("a range's count");
    let value = text(&range["value"]);
    let meta = range.get("meta").map(metadata).unwrap_or_default();
    (from..from + count)
        .map(|i| {
            (
                ObjectKey::new(kind, format!("{prefix}{i:04}")),
                value.clone(),
                meta.clone(),
            )
        })
        .collect()
}
