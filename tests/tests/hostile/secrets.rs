//! Hostile cases: secrets. A database password in every form PostgreSQL
//! clients accept, and the HTTP token, never reach a person or a table:
//! not the log (human and JSON), `/readyz`, `/metrics`, the history API,
//! `leasehold leases` (table and JSON) or the stored tenure rows; config
//! errors from `check`, `run` and a refused reload name line and key but
//! never a value; and database errors keep their cause (SQLSTATE and the
//! server's message).
//!
//! Each password is a marker unique to the test, for a role created on the
//! test server (trust authentication accepts any password, so the marker
//! is only something to look for) and dropped afterwards.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold_host::db::{DEFAULT_URL, URL_ENV};
use leasehold_host::testing::TestDatabase;
use leasehold_tests::TempDir;
use leasehold_tests::process::{binary, eventually, free_port, run_to_end};
use leasehold_tests::{guest_dir, http};

/// Short lease timing, as in the service suite.
const TIMING: &str =
    "lease_ttl = \"2000ms\"\nrenew_interval = \"200ms\"\nrenew_deadline = \"1400ms\"\n";

/// Bound on each wait for a host to start, lead or log something.
const NOTICE: Duration = Duration::from_secs(30);

/// Bound on a graceful stop (SIGTERM: finish, release, exit).
const STOP: Duration = Duration::from_secs(15);

/// The server the test databases live on.
fn admin_url() -> String {
    std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.to_string())
}

fn unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Run one statement on the server as the admin, on a thread of its own
/// so it works inside and outside a runtime (a `Drop` needs both).
fn admin_execute(sql: String) -> Result<(), String> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(async move {
                let (client, conn) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(conn);
                client.batch_execute(&sql).await.map_err(|e| e.to_string())
            })
    })
    .join()
    .expect("admin thread")
}

/// A login role whose password is the test's marker; dropped with the
/// value.
struct Role {
    name: String,
}

impl Role {
    fn create(password: &str) -> Self {
        let name = format!("secret_{}", &unique()[..12]);
        // Superuser: the role only stands in for the test's own admin, and
        // trust authentication ignores the password anyway.
        admin_execute(format!(
            "CREATE ROLE {name} LOGIN SUPERUSER PASSWORD '{}'",
            password.replace('\'', "''")
        ))
        .expect("create role");
        Self { name }
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let _ = admin_execute(format!("DROP ROLE IF EXISTS {}", self.name));
    }
}

/// Where the test database is: (host, port, database name).
fn location(db: &TestDatabase) -> (String, u16, String) {
    let url = url::Url::parse(db.url()).expect("test database url");
    (
        url.host_str().expect("host").to_string(),
        url.port().unwrap_or(5432),
        url.path().trim_start_matches('/').to_string(),
    )
}

/// A TOML basic string holding `text`.
fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A host config running the scheduler; `url` absent leaves the database
/// to `LEASEHOLD_DATABASE_URL`.
fn config(cluster: &str, holder: &str, port: u16, url: Option<&str>, token: &str) -> String {
    let database = url.map_or(String::new(), |url| {
        format!("[database]\nurl = {}\n\n", toml_string(url))
    });
    format!(
        "cluster = \"{cluster}\"\nholder = \"{holder}\"\n\n{database}[http]\nlisten = \"127.0.0.1:{port}\"\n\
         token = {}\n\n[runtime]\ncache_dir = \"{}\"\n\n[[controllers]]\nname = \"scheduler\"\n\
         component = \"{}/scheduler.wasm\"\n{TIMING}",
        toml_string(token),
        guest_dir().join("../../leasehold-test-cache").display(),
        guest_dir().display()
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Human,
    Json,
}

impl LogFormat {
    fn flag(self) -> &'static str {
        match self {
            LogFormat::Human => "human",
            LogFormat::Json => "json",
        }
    }
}

/// A running `leasehold run` with its log format and environment; killed
/// when dropped. (The shared `Replica` starts with fixed arguments.)
struct Host {
    addr: String,
    /// Its `[http] token`: every `/v1` read needs it too.
    token: Option<String>,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Host {
    fn start(
        dir: &Path,
        name: &str,
        port: u16,
        config: &str,
        format: LogFormat,
        env: &[(&str, &str)],
    ) -> Self {
        let config_path = dir.join(format!("{name}.toml"));
        std::fs::write(&config_path, config).expect("write config");
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(binary());
        command
            .args(["--log-format", format.flag(), "run", "--config"])
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .env_remove(URL_ENV)
            .env_remove("RUST_LOG");
        for (key, value) in env {
            command.env(key, value);
        }
        let token = config
            .parse::<toml::Table>()
            .ok()
            .and_then(|t| t.get("http")?.get("token")?.as_str().map(str::to_string));
        Self {
            addr: format!("127.0.0.1:{port}"),
            token,
            config: config_path,
            log,
            child: Some(command.spawn().expect("spawn leasehold")),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// The exit code once the process ended by itself within `limit`.
    async fn exit_code(&mut self, limit: Duration) -> i32 {
        let child = self.child.as_mut().expect("running");
        let status = eventually("the host exits", limit, || {
            let status = child.try_wait().expect("wait");
            async move { status }
        })
        .await;
        self.child = None;
        status.code().unwrap_or(-1)
    }

    /// SIGTERM and wait for a clean exit.
    async fn stop(&mut self) {
        self.signal("TERM");
        let code = self.exit_code(STOP).await;
        assert_eq!(code, 0, "the host did not stop cleanly:\n{}", self.log());
    }

    async fn get(&self, path: &str) -> Option<String> {
        self.read(path).await.map(|r| r.body)
    }

    /// `GET path` with the host's token.
    async fn read(&self, path: &str) -> Option<http::Response> {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("Authorization", a)])
            .unwrap_or_default();
        http::request(&self.addr, "GET", path, &headers, None)
            .await
            .ok()
    }

    /// Wait until this host leads `lease`, by its own API.
    async fn wait_leading(&self, lease: &str) {
        eventually(
            &format!("the host at {} leads {lease}", self.addr),
            NOTICE,
            || async {
                let r = self.read("/v1/leases").await?;
                let page: serde_json::Value = serde_json::from_str(&r.body).ok()?;
                page["items"]
                    .as_array()?
                    .iter()
                    .any(|l| l["name"] == lease && l["held_here"] == true)
                    .then_some(())
            },
        )
        .await;
    }

    /// Wait until the log contains `text`.
    async fn wait_logged(&self, text: &str) -> String {
        eventually(&format!("the log says {text:?}"), NOTICE, || async {
            let log = self.log();
            log.contains(text).then_some(log)
        })
        .await
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every output a person or a table gets, by name.
type Outputs = Vec<(String, String)>;

/// Fail naming the output if any of `secrets` is in it.
fn assert_nowhere(outputs: &Outputs, secrets: &[&str]) {
    for (name, text) in outputs {
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{secret:?} leaked into {name}:\n{text}"
            );
        }
    }
}

/// What the API of a leading host serves.
async fn api_outputs(host: &Host, label: &str) -> Outputs {
    let mut outputs = Vec::new();
    for path in ["/readyz", "/metrics", "/v1/leases/scheduler/history"] {
        let body = host
            .get(path)
            .await
            .unwrap_or_else(|| panic!("{path} did not answer"));
        outputs.push((format!("{path} ({label})"), body));
    }
    outputs
}

/// What `leasehold leases` prints for `config`, table and JSON, lease
/// list and history.
fn cli_outputs(config: &Path, env: &[(&str, &str)]) -> Outputs {
    let config = config.to_str().expect("utf-8 path");
    let mut outputs = Vec::new();
    for args in [
        vec!["leases", "--config", config],
        vec!["leases", "--config", config, "--json"],
        vec!["leases", "--config", config, "--history", "scheduler"],
        vec![
            "leases",
            "--config",
            config,
            "--history",
            "scheduler",
            "--json",
        ],
    ] {
        let (code, stdout, stderr) = run_to_end(&args, env);
        assert_eq!(code, 0, "{args:?} failed:\n{stdout}\n{stderr}");
        outputs.push((format!("`leasehold {}`", args.join(" ")), stdout + &stderr));
    }
    outputs
}

/// The tenure rows' stored endpoints, read with SQL.
async fn stored_endpoints(db: &TestDatabase) -> Vec<String> {
    let (client, conn) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    client
        .query("SELECT endpoint FROM leasehold_tenures ORDER BY epoch", &[])
        .await
        .expect("read tenures")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Run a host on `url` (or, with `via_env`, on `LEASEHOLD_DATABASE_URL`
/// holding it) once with each log format, one after the other, and check
/// that none of `secrets` (the password and the token) reaches any output.
/// Returns the stored endpoints, for the caller's own checks of what the
/// redacted endpoint still shows.
async fn assert_no_output_shows(
    db: &TestDatabase,
    url: &str,
    via_env: bool,
    secrets: &[&str],
) -> Vec<String> {
    let token = secrets.last().expect("the token is the last secret");
    let dir = TempDir::new();
    let cluster = format!("secrets-{}", &unique()[..12]);
    let env: Vec<(&str, &str)> = if via_env {
        vec![(URL_ENV, url)]
    } else {
        vec![]
    };
    let config_url = (!via_env).then_some(url);
    let mut outputs: Outputs = Vec::new();
    let mut last_config = PathBuf::new();
    for format in [LogFormat::Human, LogFormat::Json] {
        let name = format.flag();
        let port = free_port();
        let text = config(&cluster, &format!("host-{name}"), port, config_url, token);
        let mut host = Host::start(dir.path(), name, port, &text, format, &env);
        host.wait_leading("scheduler").await;
        outputs.extend(api_outputs(&host, name).await);
        host.stop().await;
        outputs.push((format!("the {name} log"), host.log()));
        last_config = host.config.clone();
    }
    outputs.extend(cli_outputs(&last_config, &env));
    let stored = stored_endpoints(db).await;
    assert_eq!(stored.len(), 2, "one tenure per host: {stored:?}");
    outputs.push(("the stored tenure endpoints".into(), stored.join("\n")));
    assert_nowhere(&outputs, secrets);
    // The logs are real logs: the check above read records about the
    // controller, in each format.
    let human_log = &outputs
        .iter()
        .find(|(name, _)| name == "the human log")
        .expect("human log")
        .1;
    assert!(
        human_log.contains("scheduler") && !human_log.starts_with('{'),
        "the human log has no lines about the scheduler:\n{human_log}"
    );
    let json_log = &outputs
        .iter()
        .find(|(name, _)| name == "the json log")
        .expect("json log")
        .1;
    assert!(
        json_log
            .lines()
            .any(|l| l.starts_with('{') && l.contains("\"scheduler\"")),
        "the JSON log has no records about the scheduler:\n{json_log}"
    );
    stored
}

#[tokio::test]
async fn password_in_url_user_part_reaches_no_output() {
    let db = TestDatabase::create().await;
    let password = format!("hunter2-{}", unique());
    let role = Role::create(&password);
    let (host, port, name) = location(&db);
    let url = format!("postgres://{}:{password}@{host}:{port}/{name}", role.name);
    let token = format!("tok-{}", unique());
    let stored = assert_no_output_shows(&db, &url, false, &[&password, &token]).await;
    for endpoint in stored {
        assert_eq!(
            endpoint,
            format!("postgres://{}:***@{host}:{port}/{name}", role.name)
        );
    }
}

#[tokio::test]
async fn password_in_url_parameter_reaches_no_output() {
    let db = TestDatabase::create().await;
    let password = format!("hunter2-{}", unique());
    let role = Role::create(&password);
    let (host, port, name) = location(&db);
    let url = format!(
        "postgres://{}@{host}:{port}/{name}?application_name=secrets&password={password}",
        role.name
    );
    let token = format!("tok-{}", unique());
    let stored = assert_no_output_shows(&db, &url, false, &[&password, &token]).await;
    for endpoint in stored {
        assert!(endpoint.ends_with("&password=***"), "{endpoint}");
    }
}

#[tokio::test]
async fn password_in_key_value_form_reaches_no_output_and_the_endpoint_still_shows_where() {
    let db = TestDatabase::create().await;
    let marker = unique();
    // Quoted, with a space and an escaped quote: a redaction that stops at
    // the space or the quote leaks the rest.
    let password = format!("hunter2 {marker}'s");
    let role = Role::create(&password);
    let (host, port, name) = location(&db);
    let url = format!(
        "host={host} port={port} user={} dbname={name} password='hunter2 {marker}\\'s'",
        role.name
    );
    let token = format!("tok-{}", unique());
    let stored = assert_no_output_shows(&db, &url, false, &[&marker, "hunter2", &token]).await;
    for endpoint in stored {
        // Not "<unparseable database url>": the operator still sees where.
        assert_eq!(
            endpoint,
            format!(
                "host={host} port={port} user={} dbname={name} password=***",
                role.name
            )
        );
    }
}

#[tokio::test]
async fn password_from_the_environment_reaches_no_output() {
    let db = TestDatabase::create().await;
    let password = format!("hunter2-{}", unique());
    let role = Role::create(&password);
    let (host, port, name) = location(&db);
    let url = format!(
        "postgres://{}@{host}:{port}/{name}?password={password}",
        role.name
    );
    let token = format!("tok-{}", unique());
    assert_no_output_shows(&db, &url, true, &[&password, &token]).await;
}

/// A config whose line starting with `replaced` is `bad` instead, and
/// `check` and `run` on it: both refuse, name that line and `key`, and
/// never print `secret`.
fn assert_refused_without_echo(replaced: &str, bad: &str, key: &str, secret: &str) {
    let dir = TempDir::new();
    let text = config(
        "c",
        "h",
        free_port(),
        Some("postgres://u@127.0.0.1/db"),
        "tok",
    );
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(replaced))
        .unwrap_or_else(|| panic!("no line starts with {replaced:?}"));
    lines[at] = bad.to_string();
    let line = at + 1;
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let path = path.to_str().unwrap();
    for command in ["check", "run"] {
        let (code, stdout, stderr) = run_to_end(&[command, "--config", path], &[]);
        let output = format!("{stdout}{stderr}");
        assert_ne!(code, 0, "`{command}` accepted the config:\n{output}");
        assert!(
            !output.contains(secret),
            "`{command}` echoed the secret:\n{output}"
        );
        assert!(
            output.contains(&format!("line {line}:")),
            "`{command}` names no line {line}:\n{output}"
        );
        assert!(
            output.contains(&format!("key `{key}`")),
            "`{command}` names no key {key}:\n{output}"
        );
    }
}

#[test]
fn syntax_error_in_a_url_line_never_echoes_the_password() {
    let marker = format!("hunter2-{}", unique());
    assert_refused_without_echo(
        "url = ",
        &format!("url = \"postgres://u:{marker}@127.0.0.1:5432/postgres"),
        "database.url",
        &marker,
    );
}

#[test]
fn syntax_error_in_a_token_line_never_echoes_the_token() {
    let marker = format!("tok-{}", unique());
    assert_refused_without_echo(
        "token = ",
        &format!("token = \"{marker}\" x"),
        "http.token",
        &marker,
    );
}

#[test]
fn misspelt_key_is_named_without_its_value() {
    let marker = format!("tok-{}", unique());
    assert_refused_without_echo(
        "token = ",
        &format!("tokn = \"{marker}\""),
        "http.tokn",
        &marker,
    );
}

#[tokio::test]
async fn refused_reload_never_echoes_the_secret() {
    let dir = TempDir::new();
    let port = free_port();
    // The embedded backend: the reload is what is under test, not the
    // database.
    let good = config("c", "h", port, None, "tok");
    let mut host = Host::start(dir.path(), "reload", port, &good, LogFormat::Human, &[]);
    host.wait_leading("scheduler").await;
    let marker = format!("hunter2-{}", unique());
    let bad = good.replace(
        "token = \"tok\"",
        &format!("token = \"postgres://u:{marker}@h/db"),
    );
    assert_ne!(bad, good);
    std::fs::write(&host.config, bad).unwrap();
    host.signal("HUP");
    let log = host.wait_logged("config reload refused").await;
    assert!(
        !log.contains(&marker),
        "the refusal echoed the secret:\n{log}"
    );
    let line = 1 + good
        .lines()
        .position(|l| l.starts_with("token = "))
        .expect("a token line");
    assert!(log.contains(&format!("line {line}:")), "{log}");
    assert!(log.contains("key `http.token`"), "{log}");
    // Refused whole: the host still runs on the old config.
    host.wait_leading("scheduler").await;
    host.stop().await;
}

#[test]
fn migrate_against_a_missing_database_names_sqlstate_3d000() {
    let mut url = url::Url::parse(&admin_url()).unwrap();
    let name = format!("no_such_db_{}", unique());
    url.set_path(&name);
    let (code, stdout, stderr) = run_to_end(&["migrate", "--database-url", url.as_str()], &[]);
    let output = format!("{stdout}{stderr}");
    assert_ne!(code, 0, "{output}");
    assert!(output.contains("SQLSTATE 3D000"), "{output}");
    assert!(
        output.contains(&format!("database \"{name}\" does not exist")),
        "{output}"
    );
    assert!(!output.contains("db error"), "{output}");
}

#[test]
fn migrate_as_a_missing_role_names_sqlstate_28000() {
    let mut url = url::Url::parse(&admin_url()).unwrap();
    let role = format!("no_such_role_{}", &unique()[..12]);
    url.set_username(&role).unwrap();
    let marker = format!("hunter2-{}", unique());
    url.set_password(Some(&marker)).unwrap();
    let (code, stdout, stderr) = run_to_end(&["migrate", "--database-url", url.as_str()], &[]);
    let output = format!("{stdout}{stderr}");
    assert_ne!(code, 0, "{output}");
    assert!(output.contains("SQLSTATE 28000"), "{output}");
    assert!(
        output.contains(&format!("role \"{role}\" does not exist")),
        "{output}"
    );
    assert!(!output.contains(&marker), "{output}");
}

#[test]
fn run_against_a_missing_database_names_sqlstate_3d000() {
    let dir = TempDir::new();
    let mut url = url::Url::parse(&admin_url()).unwrap();
    let name = format!("no_such_db_{}", unique());
    url.set_path(&name);
    let path = dir.path().join("missing.toml");
    std::fs::write(
        &path,
        config("c", "h", free_port(), Some(url.as_str()), "tok"),
    )
    .unwrap();
    let (code, stdout, stderr) = run_to_end(&["run", "--config", path.to_str().unwrap()], &[]);
    let output = format!("{stdout}{stderr}");
    assert_ne!(code, 0, "{output}");
    assert!(output.contains("SQLSTATE 3D000"), "{output}");
    assert!(output.contains(&name), "{output}");
    assert!(!output.contains("db error"), "{output}");
}
