//! Headless Chromium for the console's tests, driven over the DevTools
//! protocol.
//!
//! The browser is Debian's `chromium` package, pinned by the package
//! manager: [`chromium`] installs it with `apt-get install -y chromium`
//! the first time a test needs it and `/usr/bin/chromium` is missing (as
//! root; anyone else is told the command). Nothing is downloaded at run
//! time, and the browser reaches only the hosts the test started (its
//! background networking, component updates, sync and QUIC are off).
//!
//! The protocol runs over a pipe (`--remote-debugging-pipe`: commands on
//! the browser's file descriptor 3, answers and events on 4, each message
//! JSON ended by a NUL byte), so no debugging port is opened and no
//! WebSocket client is needed: a shell maps the child's stdin and stdout
//! onto 3 and 4 before it becomes the browser. One thread reads the
//! answers and events; a command is a future that waits for its answer.
//!
//! Every page's console messages, uncaught exceptions and browser log
//! entries are kept ([`Page::logs`]), so a test can require that a page
//! logged no error ([`Page::assert_clean`]). Every wait here is bounded
//! and polls observable state (an expression in the page), never a sleep
//! standing in for an order.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::TempDir;

/// Where Debian's package puts the browser.
const DEBIAN_CHROMIUM: &str = "/usr/bin/chromium";

/// Longest one protocol command may take (a navigation's answer comes
/// once the request was sent, not when the page loaded).
const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// How often [`Page::wait_for`] looks again: often enough that a measured
/// latency (a change appearing) is not rounded up much.
const POLL: Duration = Duration::from_millis(20);

/// Longest the browser gets to close before it is killed.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);

/// The browser's viewport: wide enough for the console's tables.
const VIEWPORT: (u32, u32) = (1280, 900);

/// The browser to run: `LEASEHOLD_CHROMIUM` if set, else Debian's
/// `chromium`, installed with apt-get on first use when missing.
pub fn chromium() -> PathBuf {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("LEASEHOLD_CHROMIUM") {
                return Ok(PathBuf::from(path));
            }
            let path = PathBuf::from(DEBIAN_CHROMIUM);
            if !path.is_file() {
                install_chromium()?;
            }
            Ok(path)
        })
        .clone()
        .unwrap_or_else(|why| panic!("{why}"))
}

/// `apt-get install -y chromium`, after `apt-get update` when the package
/// lists do not know it yet (a fresh machine).
fn install_chromium() -> Result<(), String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let uid = status.lines().find(|l| l.starts_with("Uid:"))?;
            Some(uid.split_whitespace().nth(1)? == "0")
        })
        .unwrap_or(false);
    if !root {
        return Err(format!(
            "the console tests need Debian's chromium at {DEBIAN_CHROMIUM}: install it with \
             `sudo apt-get install -y chromium` (or set LEASEHOLD_CHROMIUM to a Chromium)"
        ));
    }
    let apt = |args: &[&str]| {
        eprintln!(
            "installing the console tests' browser: apt-get {}",
            args.join(" ")
        );
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("apt-get could not run: {e}"))
    };
    let first = apt(&["install", "-y", "chromium"])?;
    if first.status.success() {
        return Ok(());
    }
    let update = apt(&["update"])?;
    let second = apt(&["install", "-y", "chromium"])?;
    if second.status.success() {
        return Ok(());
    }
    Err(format!(
        "`apt-get install -y chromium` failed (after `apt-get update`, which {}): {}",
        if update.status.success() {
            "succeeded"
        } else {
            "failed"
        },
        String::from_utf8_lossy(&second.stderr)
    ))
}

/// The `--ignore-certificate-errors-spki-list` value that makes the browser
/// accept exactly the key of `cert` (PEM): the base64 SHA-256 of its
/// SubjectPublicKeyInfo. Pinning the one key the test's host serves,
/// rather than ignoring certificate errors, keeps every other TLS check.
pub fn spki_pin(cert: &Path) -> String {
    let public = openssl(&["x509", "-in", path_str(cert), "-pubkey", "-noout"], &[]);
    let der = openssl(&["pkey", "-pubin", "-outform", "der"], &public);
    let digest = openssl(&["dgst", "-sha256", "-binary"], &der);
    let pin = openssl(&["base64", "-A"], &digest);
    String::from_utf8(pin)
        .expect("base64 is text")
        .trim()
        .to_string()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

fn openssl(args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("openssl not runnable ({e})"));
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(input)
        .expect("write to openssl");
    let output = child.wait_with_output().expect("openssl output");
    assert!(
        output.status.success(),
        "openssl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// A message a page logged: a console call, an uncaught exception, or a
/// browser log entry (a failed request, a refused resource, an
/// intervention).
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// The page's session (none: the browser's own).
    pub session: Option<String>,
    /// `console`, `exception`, or a log entry's source (`network`,
    /// `security`, `javascript`, `violation`, ...).
    pub source: String,
    /// `error`, `warning`, `info`, `log`, `debug`, `verbose`, ...
    pub level: String,
    /// What it said.
    pub text: String,
    /// The URL it concerns, when given.
    pub url: Option<String>,
}

impl LogEntry {
    /// An error or a warning (an uncaught exception is an error).
    pub fn is_problem(&self) -> bool {
        matches!(self.level.as_str(), "error" | "warning" | "assert")
    }
}

/// What the reading thread shares with the commands.
#[derive(Default)]
struct Shared {
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>,
    logs: Mutex<Vec<LogEntry>>,
    /// Set when the browser's end of the pipe closed.
    gone: Mutex<Option<String>>,
}

/// One headless Chromium with a fresh profile, closed when dropped.
pub struct Browser {
    child: Child,
    commands: Mutex<ChildStdin>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    log: PathBuf,
    _profile: TempDir,
}

impl Browser {
    /// Start the browser. `extra` flags are added to the fixed ones (say,
    /// `--ignore-certificate-errors-spki-list=...` from [`spki_pin`]).
    pub fn start(extra: &[String]) -> Self {
        let binary = chromium();
        let profile = TempDir::new();
        let log = profile.path().join("chromium.log");
        let mut args: Vec<String> = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--remote-debugging-pipe",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!(
            "--user-data-dir={}",
            profile.path().join("profile").display()
        ));
        args.extend(extra.iter().cloned());
        args.push("about:blank".to_string());
        // The shell gives the browser our stdin as its descriptor 3 and our
        // stdout as 4 (the pipe protocol's), and its own stdout goes to
        // the log with its stderr.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 3<&0 4>&1 0</dev/null 1>&2")
            .arg(&binary)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("the browser's log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let commands = child.stdin.take().expect("piped");
        let answers = child.stdout.take().expect("piped");
        let shared = Arc::new(Shared::default());
        let reading = shared.clone();
        std::thread::Builder::new()
            .name("chromium-pipe".into())
            .spawn(move || read_messages(answers, &reading))
            .expect("a thread to read the browser");
        Self {
            child,
            commands: Mutex::new(commands),
            shared,
            next_id: AtomicU64::new(1),
            log,
            _profile: profile,
        }
    }

    /// Send `method` with `params` (to a page's `session`, or the browser)
    /// and wait for its answer.
    pub async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = session.into();
        }
        let mut bytes = serde_json::to_vec(&message).expect("JSON");
        bytes.push(0);
        if let Some(why) = self.gone() {
            return Err(format!("{method}: the browser is gone ({why})"));
        }
        self.commands
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write_all(&bytes)
            .map_err(|e| format!("{method}: cannot write to the browser: {e}"))?;
        match tokio::time::timeout(COMMAND_LIMIT, rx).await {
            Ok(Ok(answer)) => answer.map_err(|e| format!("{method}: {e}")),
            Ok(Err(_)) => Err(format!(
                "{method}: the browser closed its pipe ({})",
                self.gone().unwrap_or_default()
            )),
            Err(_) => Err(format!(
                "{method}: no answer within {COMMAND_LIMIT:?}; browser log:\n{}",
                self.log_tail()
            )),
        }
    }

    fn gone(&self) -> Option<String> {
        self.shared
            .gone
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The end of the browser's own log (its stderr).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// A new tab (its own session storage), attached, with its console,
    /// exceptions and log recorded.
    pub async fn new_page(&self) -> Page<'_> {
        let target = self
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await
            .expect("a new tab");
        let target = target["targetId"].as_str().expect("targetId").to_string();
        let attached = self
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
            )
            .await
            .expect("attach to the tab");
        let session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        let page = Page {
            browser: self,
            session,
            target,
        };
        for method in ["Runtime.enable", "Log.enable", "Page.enable"] {
            page.command(method, json!({})).await;
        }
        page.command(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": VIEWPORT.0, "height": VIEWPORT.1, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await;
        page
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ask it to close (its helper processes go with it), then make sure.
        if let Ok(mut commands) = self.commands.lock() {
            let _ = commands.write_all(b"{\"id\":0,\"method\":\"Browser.close\"}\0");
        }
        let started = Instant::now();
        while started.elapsed() < CLOSE_LIMIT {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(POLL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read NUL-ended messages until the pipe closes: answers go to their
/// command, log events to the log.
fn read_messages(mut pipe: impl Read, shared: &Shared) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let why = loop {
        let n = match pipe.read(&mut chunk) {
            Ok(0) => break "the pipe closed".to_string(),
            Ok(n) => n,
            Err(e) => break format!("reading the pipe failed: {e}"),
        };
        buffer.extend_from_slice(&chunk[..n]);
        while let Some(end) = buffer.iter().position(|&b| b == 0) {
            let message: Vec<u8> = buffer.drain(..=end).collect();
            match serde_json::from_slice::<Value>(&message[..message.len() - 1]) {
                Ok(message) => dispatch(message, shared),
                Err(e) => eprintln!("the browser sent a message that is not JSON: {e}"),
            }
        }
    };
    *shared.gone.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
    // Whoever still waits learns at once.
    shared
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
}

fn dispatch(message: Value, shared: &Shared) {
    if let Some(id) = message["id"].as_u64() {
        let waiting = shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        if let Some(waiting) = waiting {
            let answer = match message.get("error") {
                Some(error) => Err(error.to_string()),
                None => Ok(message["result"].clone()),
            };
            let _ = waiting.send(answer);
        }
        return;
    }
    let session = message["sessionId"].as_str().map(str::to_string);
    let params = &message["params"];
    let entry = match message["method"].as_str() {
        Some("Runtime.consoleAPICalled") => LogEntry {
            session,
            source: "console".into(),
            level: params["type"].as_str().unwrap_or("log").to_string(),
            text: params["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|arg| {
                    arg["value"]
                        .as_str()
                        .map(str::to_string)
                        .or_else(|| arg["description"].as_str().map(str::to_string))
                        .unwrap_or_else(|| arg["value"].to_string())
                })
                .collect::<Vec<_>>()
                .join(" "),
            url: params["stackTrace"]["callFrames"][0]["url"]
                .as_str()
                .map(str::to_string),
        },
        Some("Runtime.exceptionThrown") => {
            let details = &params["exceptionDetails"];
            LogEntry {
                session,
                source: "exception".into(),
                level: "error".into(),
                text: details["exception"]["description"]
                    .as_str()
                    .or(details["text"].as_str())
                    .unwrap_or("an exception")
                    .to_string(),
                url: details["url"].as_str().map(str::to_string),
            }
        }
        Some("Log.entryAdded") => {
            let entry = &params["entry"];
            LogEntry {
                session,
                source: entry["source"].as_str().unwrap_or("other").to_string(),
                level: entry["level"].as_str().unwrap_or("info").to_string(),
                text: entry["text"].as_str().unwrap_or_default().to_string(),
                url: entry["url"].as_str().map(str::to_string),
            }
        }
        Some("Inspector.targetCrashed") => LogEntry {
            session,
            source: "crash".into(),
            level: "error".into(),
            text: "the page crashed".into(),
            url: None,
        },
        _ => return,
    };
    shared
        .logs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(entry);
}

/// One tab of a [`Browser`].
pub struct Page<'a> {
    browser: &'a Browser,
    session: String,
    target: String,
}

impl Page<'_> {
    /// A command to this tab; a failure fails the test.
    pub async fn command(&self, method: &str, params: Value) -> Value {
        self.browser
            .call(Some(&self.session), method, params)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Load `url` (the answer comes once the request is on its way; wait
    /// for what the page shows with [`Page::wait_for`]).
    pub async fn goto(&self, url: &str) {
        // Mark the document being left, so waiting for the new one cannot
        // be answered by the old (the same URL loaded again, say).
        self.eval("window.__leaving = true").await;
        let answer = self.command("Page.navigate", json!({"url": url})).await;
        if let Some(error) = answer["errorText"].as_str() {
            panic!(
                "navigating to {url} failed: {error}\n{}",
                self.browser.log_tail()
            );
        }
        self.wait_for(
            &format!("{url} loaded"),
            "window.__leaving === undefined && document.readyState === 'complete'",
            COMMAND_LIMIT,
        )
        .await;
    }

    /// The value of `expression` in the page (a promise is awaited), or
    /// the exception it threw. A page being replaced answers with a protocol error ("navigated or
    /// closed"), also returned as an error, so [`Page::wait_for`] looks
    /// again.
    pub async fn try_eval(&self, expression: &str) -> Result<Value, String> {
        let answer = self
            .browser
            .call(
                Some(&self.session),
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(details) = answer.get("exceptionDetails") {
            return Err(details["exception"]["description"]
                .as_str()
                .or(details["text"].as_str())
                .unwrap_or("an exception")
                .to_string());
        }
        Ok(answer["result"]["value"].clone())
    }

    /// [`Page::try_eval`], failing the test on an exception.
    pub async fn eval(&self, expression: &str) -> Value {
        self.try_eval(expression)
            .await
            .unwrap_or_else(|e| panic!("`{expression}` threw: {e}"))
    }

    /// Poll `expression` until it is neither null, false nor undefined (nor
    /// throws), and return it; fail naming `what` after `limit`, with what
    /// the page shows and logged.
    pub async fn wait_for(&self, what: &str, expression: &str, limit: Duration) -> Value {
        let started = Instant::now();
        loop {
            let value = self.try_eval(expression).await;
            if let Ok(value) = &value
                && !matches!(value, Value::Null | Value::Bool(false))
            {
                return value.clone();
            }
            if started.elapsed() > limit {
                let shown = self
                    .try_eval("document.body ? document.body.innerText : ''")
                    .await
                    .unwrap_or_default();
                panic!(
                    "timed out after {limit:?} waiting until {what} (`{expression}` gave \
                     {value:?}); the page shows:\n{}\nits log: {:#?}",
                    shown.as_str().unwrap_or_default(),
                    self.logs()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Wait until the console says what it shows (`data-state` on
    /// `<html>`: `ready`, `token` or `error`) and return it.
    pub async fn settled(&self, limit: Duration) -> String {
        self.wait_for(
            "the console shows a page",
            "['ready', 'token', 'error'].includes(document.documentElement.dataset.state) && \
             document.documentElement.dataset.state",
            limit,
        )
        .await
        .as_str()
        .expect("a state")
        .to_string()
    }

    /// The rows of the table `selector` as maps from each column's header
    /// text to the cell's text.
    pub async fn table(&self, selector: &str) -> Vec<BTreeMap<String, String>> {
        let expression = format!(
            "(() => {{ const t = document.querySelector({sel}); if (!t) return null; \
             const heads = [...t.tHead.rows[0].cells].map((c) => c.innerText.trim()); \
             return [...t.tBodies[0].rows].map((r) => Object.fromEntries(\
             [...r.cells].map((c, i) => [heads[i], c.innerText.trim()]))); }})()",
            sel = serde_json::to_string(selector).expect("JSON")
        );
        let rows = self.eval(&expression).await;
        serde_json::from_value(rows)
            .unwrap_or_else(|e| panic!("no table {selector} on the page ({e})"))
    }

    /// Type `text` where the focus is, as a keyboard would.
    pub async fn type_text(&self, text: &str) {
        self.command("Input.insertText", json!({"text": text}))
            .await;
    }

    /// Press and release one key: `Enter`, `Tab`, `Escape`, `ArrowLeft`,
    /// `ArrowRight`, `ArrowUp`, `ArrowDown`, `Home` or `End`.
    pub async fn press(&self, key: &str) {
        let code = match key {
            "Enter" => 13,
            "Tab" => 9,
            "Escape" => 27,
            "End" => 35,
            "Home" => 36,
            "ArrowLeft" => 37,
            "ArrowUp" => 38,
            "ArrowRight" => 39,
            "ArrowDown" => 40,
            other => panic!("no key code for {other}"),
        };
        let mut down =
            json!({"type": "keyDown", "key": key, "code": key, "windowsVirtualKeyCode": code});
        if key == "Enter" {
            down["text"] = "\r".into();
        }
        self.command("Input.dispatchKeyEvent", down).await;
        self.command(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key, "code": key, "windowsVirtualKeyCode": code}),
        )
        .await;
    }

    /// A PNG of the whole page (not only the viewport) at `path`.
    pub async fn screenshot(&self, path: &Path) {
        let metrics = self.command("Page.getLayoutMetrics", json!({})).await;
        let size = &metrics["cssContentSize"];
        let width = size["width"].as_f64().unwrap_or(f64::from(VIEWPORT.0));
        let height = size["height"].as_f64().unwrap_or(f64::from(VIEWPORT.1));
        let shot = self
            .command(
                "Page.captureScreenshot",
                json!({
                    "format": "png",
                    "captureBeyondViewport": true,
                    "clip": {"x": 0, "y": 0, "width": width.max(f64::from(VIEWPORT.0)),
                             "height": height.max(1.0), "scale": 1},
                }),
            )
            .await;
        let png = base64_decode(shot["data"].as_str().expect("screenshot data"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("the screenshot folder");
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// Everything this tab logged so far.
    pub fn logs(&self) -> Vec<LogEntry> {
        self.browser
            .shared
            .logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|e| e.session.as_deref() == Some(self.session.as_str()))
            .cloned()
            .collect()
    }

    /// Fail if this tab logged an error or a warning that `expected` does
    /// not accept.
    pub fn assert_clean(&self, what: &str, expected: impl Fn(&LogEntry) -> bool) {
        let problems: Vec<LogEntry> = self
            .logs()
            .into_iter()
            .filter(|e| e.is_problem() && !expected(e))
            .collect();
        assert!(
            problems.is_empty(),
            "{what}: the browser logged {problems:#?}"
        );
    }

    /// Close the tab.
    pub async fn close(self) {
        let _ = self
            .browser
            .call(None, "Target.closeTarget", json!({"targetId": self.target}))
            .await;
    }
}

/// Standard base64 (the protocol's encoding of binary data).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            other => panic!("{:?} is not base64", char::from(other)),
        }
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for group in digits.chunks(4) {
        let mut bits = 0u32;
        for (i, &c) in group.iter().enumerate() {
            bits |= value(c) << (18 - 6 * i);
        }
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..group.len()]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64_decode;

    #[test]
    fn base64_decodes_every_padding() {
        assert_eq!(base64_decode("TWFu"), b"Man");
        assert_eq!(base64_decode("TWE="), b"Ma");
        assert_eq!(base64_decode("TQ=="), b"M");
        assert_eq!(base64_decode(""), b"");
        assert_eq!(base64_decode("iVBORw0KGgo="), b"\x89PNG\r\n\x1a\n");
    }
}
