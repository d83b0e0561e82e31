use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::IntOrText;
use super::units::{parse_duration, parse_size};
use super::*;
use crate::limits::{GUEST_MEMORY_BYTES, MAX_CONTROLLERS, WORK_QUEUE_KEYS};

/// A folder of its own under the system temp dir, removed on drop, laid out
/// like a checkout: `<root>/examples` holds the config, `<root>/target/...`
/// the default guest dir.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let root = std::env::temp_dir().join(format!("leasehold-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(root.join("examples")).unwrap();
        Self { root }
    }

    fn config_dir(&self) -> PathBuf {
        self.root.join("examples")
    }

    /// Create an (empty) file at `relative` under the config folder.
    fn file(&self, relative: &str) -> PathBuf {
        let path = self.config_dir().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"\0asm").unwrap();
        path
    }

    fn dir(&self, relative: &str) -> PathBuf {
        let path = self.config_dir().join(relative);
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    fn parse(&self, text: &str) -> Result<Config, ConfigError> {
        Config::parse_with(text, self.config_dir(), &Environment::default())
    }

    fn parse_env(&self, text: &str, env: &Environment) -> Result<Config, ConfigError> {
        Config::parse_with(text, self.config_dir(), env)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

const ONE: &str = r#"
cluster = "demo"

[[controllers]]
name = "scheduler"
component = "scheduler.wasm"
"#;

fn problems(error: ConfigError) -> Vec<Problem> {
    match error {
        ConfigError::Invalid { problems, .. } => problems,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn syntax(error: ConfigError) -> Problem {
    match error {
        ConfigError::Syntax { problem, .. } => problem,
        other => panic!("expected Syntax, got {other:?}"),
    }
}

fn has(problems: &[Problem], line: Option<usize>, needle: &str) -> bool {
    problems
        .iter()
        .any(|p| p.line == line && p.message.contains(needle))
}

#[track_caller]
fn assert_has(problems: &[Problem], line: Option<usize>, needle: &str) {
    assert!(
        has(problems, line, needle),
        "no problem at line {line:?} containing {needle:?} in {problems:#?}"
    );
}

#[test]
fn a_minimal_config_gets_every_default() {
    let s = Scratch::new();
    let component = s.file("scheduler.wasm");
    let config = s.parse(ONE).unwrap();
    assert_eq!(config.cluster, "demo");
    assert_eq!(config.holder.as_deref(), Some(default_holder()));
    assert_eq!(config.holder(), default_holder());
    assert!(config.is_embedded());
    assert_eq!(config.database, DatabaseConfig::default());
    assert_eq!(config.database.max_connections, 16);
    assert_eq!(config.http.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(config.http.token, None);
    assert_eq!(config.runtime, RuntimeConfig::default());
    assert!(config.runtime.pooling);
    assert_eq!(config.base_dir, s.config_dir());
    let [c] = config.controllers.as_slice() else {
        panic!("one controller expected")
    };
    assert_eq!(c.name, "scheduler");
    assert_eq!(c.component, component);
    assert_eq!(c.timing(), crate::authority::LeaseTiming::default());
    assert_eq!(c.reconcile_deadline, crate::timeouts::RECONCILE_DEADLINE);
    assert_eq!(c.backoff_min, crate::timeouts::BACKOFF_MIN);
    assert_eq!(c.backoff_max, crate::timeouts::BACKOFF_MAX);
    assert_eq!(c.memory_limit, GUEST_MEMORY_BYTES);
    assert_eq!(c.max_queue, WORK_QUEUE_KEYS);
    assert!(c.dirs.is_empty());
    assert_eq!(c.quota, crate::quota::QuotaLimits::default());
    assert_eq!(c.guest_limits().quota, crate::quota::QuotaLimits::default());
    // Fast crash detection is on unless a config says otherwise.
    assert_eq!(c.crash_detection, crate::authority::CrashDetection::Session);
    assert_eq!(config.database.session_url, None);
}

#[test]
fn crash_detection_defaults_at_the_top_and_is_set_per_controller() {
    use crate::authority::CrashDetection;
    let s = Scratch::new();
    s.file("a.wasm");
    let text = r#"
cluster = "demo"
crash_detection = "ttl"

[[controllers]]
name = "a"
component = "a.wasm"

[[controllers]]
name = "b"
component = "a.wasm"
crash_detection = "session"
"#;
    let config = s.parse(text).unwrap();
    assert_eq!(config.controllers[0].crash_detection, CrashDetection::Ttl);
    assert_eq!(
        config.controllers[1].crash_detection,
        CrashDetection::Session
    );
    // Without the top-level key, a controller's own key still decides.
    let text = text.replace("crash_detection = \"ttl\"\n", "");
    let config = s.parse(&text).unwrap();
    assert_eq!(
        config.controllers[0].crash_detection,
        CrashDetection::Session
    );
}

#[test]
fn a_bad_crash_detection_names_the_key_and_the_allowed_values() {
    let s = Scratch::new();
    s.file("a.wasm");
    let text = r#"cluster = "demo"
crash_detection = "fast"

[[controllers]]
name = "a"
component = "a.wasm"
crash_detection = "lease"
"#;
    let problems = problems(s.parse(text).unwrap_err());
    assert_has(
        &problems,
        Some(2),
        "crash_detection is \"fast\"; it must be one of \"session\", \"ttl\"",
    );
    assert_has(
        &problems,
        Some(7),
        "controller \"a\": crash_detection is \"lease\"; it must be one of \"session\", \"ttl\"",
    );
    // A wrong type is the reader's own error, naming the key.
    let problem = syntax(
        s.parse("cluster = \"demo\"\ncrash_detection = 1\n")
            .unwrap_err(),
    );
    assert!(problem.message.contains("crash_detection"), "{problem}");
}

#[test]
fn a_session_url_is_checked_and_kept_apart_from_the_pool_url() {
    let s = Scratch::new();
    let text = r#"cluster = "demo"
[database]
url = "postgres://app:pw@pgbouncer:6432/db"
session_url = "postgres://app:hunter2@db:5432/db"
"#;
    let config = s.parse(text).unwrap();
    assert_eq!(
        config.database.session_url.as_deref(),
        Some("postgres://app:hunter2@db:5432/db")
    );
    assert!(!format!("{:?}", config.database).contains("hunter2"));
    let problems = problems(
        s.parse("cluster = \"demo\"\n[database]\nsession_url = \"postgres://x@db/y\"\n")
            .unwrap_err(),
    );
    assert_has(
        &problems,
        Some(3),
        "session_url is set but database.url is not",
    );
    let problems = problems_of(
        &s,
        "cluster = \"demo\"\n[database]\nurl = \"postgres://x@db/y\"\nsession_url = \"\"\n",
    );
    assert_has(&problems, Some(4), "database.session_url is empty");
    let problems = problems_of(
        &s,
        "cluster = \"demo\"\n[database]\nurl = \"postgres://x@db/y\"\nsession_url = \"postgres://u:hunter2@db:notaport/y\"\n",
    );
    assert_has(&problems, Some(4), "is not a PostgreSQL URL");
    assert!(
        problems.iter().all(|p| !p.message.contains("hunter2")),
        "{problems:?}"
    );
}

#[test]
fn the_transaction_pooler_mode_needs_a_session_url_and_no_options() {
    use crate::db::Pooler;
    let s = Scratch::new();
    let config = s
        .parse("cluster = \"demo\"\n[database]\nurl = \"postgres://x@db/y\"\n")
        .unwrap();
    assert_eq!(config.database.pooler, Pooler::None, "off by default");
    let config = s
        .parse(
            "cluster = \"demo\"\n[database]\nurl = \"postgres://x@pgbouncer:6432/y\"\n\
             session_url = \"postgres://x@db:5432/y\"\npooler = \"transaction\"\n",
        )
        .unwrap();
    assert_eq!(config.database.pooler, Pooler::Transaction);
    let explicit_none = s
        .parse("cluster = \"demo\"\n[database]\nurl = \"postgres://x@db/y\"\npooler = \"none\"\n")
        .unwrap();
    assert_eq!(explicit_none.database.pooler, Pooler::None);

    let problems = problems_of(
        &s,
        "cluster = \"demo\"\n[database]\nurl = \"postgres://x@pgbouncer:6432/y\"\npooler = \"transaction\"\n",
    );
    assert_has(
        &problems,
        Some(4),
        "database.pooler = \"transaction\" needs database.session_url",
    );
    let problems = problems_of(
        &s,
        "cluster = \"demo\"\n[database]\n\
         url = \"postgres://x@pgbouncer:6432/y?options=-c%20statement_timeout%3D5s\"\n\
         session_url = \"postgres://x@db:5432/y\"\npooler = \"transaction\"\n",
    );
    assert_has(&problems, Some(5), "database.url sets options");
    let problems = problems_of(
        &s,
        "cluster = \"demo\"\n[database]\nurl = \"postgres://x@db/y\"\npooler = \"session\"\n",
    );
    assert_has(&problems, Some(4), "database.pooler is \"session\"");
}

fn problems_of(s: &Scratch, text: &str) -> Vec<Problem> {
    problems(s.parse(text).unwrap_err())
}

#[test]
fn every_key_is_read() {
    let s = Scratch::new();
    s.file("bin/a.wasm");
    let data = s.dir("data");
    let text = r#"
cluster = "prod-eu"
holder = "replica-a"

[database]
url = "postgres://app:s3cret@db.internal:5432/leasehold"
max_connections = 8
expected_database_id = "7b0e3c55-3f5c-4a53-9c7a-0d7f5c1d8e21"
expected_system_identifier = "18446744073709551615"

[http]
listen = "0.0.0.0:9090"
token = "t0ken-with-symbols_.~"

[runtime]
pooling = false
cache_dir = "cache"

[[controllers]]
name = "a"
component = "bin/a.wasm"
lease_ttl = "2s"
renew_interval = "500ms"
renew_deadline = "1s 500ms"
reconcile_deadline = "1m"
backoff_min = "10ms"
backoff_max = "5s"
memory_limit = "128MiB"
max_queue = 10
max_creates_per_second = 5
create_burst = 7
max_objects_per_kind = 9
dirs = [{ host = "data", guest = "/data", writable = true }]

[[controllers]]
name = "b"
component = "bin/a.wasm"
memory_limit = 2097152
"#;
    let config = s.parse(text).unwrap();
    assert_eq!(config.cluster, "prod-eu");
    assert_eq!(config.holder(), "replica-a");
    assert!(!config.is_embedded());
    assert_eq!(config.database.max_connections, 8);
    assert_eq!(
        config.database.expected_identity(),
        crate::authority::ExpectedIdentity {
            database_id: Some("7b0e3c55-3f5c-4a53-9c7a-0d7f5c1d8e21".parse().unwrap()),
            system_identifier: Some(u64::MAX),
        }
    );
    assert_eq!(config.http.listen, "0.0.0.0:9090".parse().unwrap());
    assert_eq!(config.http.token.as_deref(), Some("t0ken-with-symbols_.~"));
    assert!(!config.runtime.pooling);
    assert_eq!(config.runtime.cache_dir, Some(s.config_dir().join("cache")));

    let a = &config.controllers[0];
    assert_eq!(a.lease_ttl, Duration::from_secs(2));
    assert_eq!(a.renew_interval, Duration::from_millis(500));
    assert_eq!(a.renew_deadline, Duration::from_millis(1500));
    assert_eq!(a.reconcile_deadline, Duration::from_secs(60));
    assert_eq!(a.backoff_min, Duration::from_millis(10));
    assert_eq!(a.backoff_max, Duration::from_secs(5));
    assert_eq!(a.memory_limit, 128 << 20);
    assert_eq!(a.max_queue, 10);
    let quota = crate::quota::QuotaLimits {
        creates_per_second: 5,
        create_burst: 7,
        objects_per_kind: 9,
    };
    assert_eq!(a.quota, quota);
    assert_eq!(a.guest_limits().quota, quota);
    assert_eq!(
        a.dirs,
        vec![DirConfig {
            host: data.clone(),
            guest: "/data".into(),
            writable: true
        }]
    );
    let grants = a.dir_grants();
    assert_eq!(grants[0].host_path, data);
    assert_eq!(grants[0].guest_path, "/data");
    assert!(grants[0].writable);
    let limits = a.guest_limits();
    assert_eq!(limits.memory_bytes, 128 << 20);
    assert_eq!(limits.reconcile_deadline, Duration::from_secs(60));
    assert_eq!(
        limits.payload_bytes,
        crate::runtime::GuestLimits::default().payload_bytes
    );

    assert_eq!(config.controllers[1].memory_limit, 2 << 20);
    let engine = config.engine_config();
    // Room for controllers a reload adds.
    assert_eq!(engine.max_guests, crate::limits::POOLED_CONTROLLERS as u32);
    assert_eq!(engine.memory_bytes, 128 << 20);
    assert!(!engine.pooling);
}

#[test]
fn an_unknown_top_level_key_is_named_with_its_line() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let text = format!("clsuter = \"x\"\n{ONE}");
    let error = s.parse(&text).unwrap_err();
    let problem = syntax(error);
    assert!(
        problem.message.contains("unknown field `clsuter`"),
        "{problem}"
    );
    assert!(problem.message.contains("expected one of"), "{problem}");
    assert!(problem.message.contains("`cluster`"), "{problem}");
    assert_eq!(problem.line, Some(1));
}

#[test]
fn an_unknown_controller_key_is_named_with_its_line() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let text = format!("{ONE}lease_tll = \"10s\"\n");
    let problem = syntax(s.parse(&text).unwrap_err());
    assert!(
        problem.message.contains("unknown field `lease_tll`"),
        "{problem}"
    );
    assert!(problem.message.contains("`lease_ttl`"), "{problem}");
    assert_eq!(problem.line, Some(7));
}

#[test]
fn unknown_keys_in_every_section_are_refused() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    for (section, key) in [
        ("[database]", "uri = \"x\""),
        ("[http]", "port = 1"),
        ("[runtime]", "jit = true"),
    ] {
        let text = format!("{ONE}{section}\n{key}\n");
        let problem = syntax(s.parse(&text).unwrap_err());
        assert!(problem.message.contains("unknown field"), "{problem}");
        assert_eq!(problem.line, Some(8), "{problem}");
    }
    let text = format!("{ONE}dirs = [{{ host = \".\", guest = \"/d\", mode = \"rw\" }}]\n");
    let problem = syntax(s.parse(&text).unwrap_err());
    assert!(
        problem.message.contains("unknown field `mode`"),
        "{problem}"
    );
}

#[test]
fn a_wrong_value_type_says_what_to_write() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let text = format!("{ONE}lease_ttl = 10\n");
    let problem = syntax(s.parse(&text).unwrap_err());
    assert!(
        problem
            .message
            .contains("a duration string such as \"10s\""),
        "{problem}"
    );
    assert_eq!(problem.line, Some(7));
}

#[test]
fn invalid_toml_is_a_syntax_error_with_a_line() {
    let s = Scratch::new();
    let problem = syntax(s.parse("cluster = \"demo\"\n[http\n").unwrap_err());
    assert_eq!(problem.line, Some(2));
}

#[test]
fn cluster_is_required_and_a_dns_label() {
    let s = Scratch::new();
    let p = problems(s.parse("").unwrap_err());
    assert_has(&p, None, "`cluster` is required");
    let p = problems(s.parse("cluster = \"Demo_1\"\n").unwrap_err());
    assert_has(&p, Some(1), "invalid cluster \"Demo_1\"");
}

#[test]
fn a_bad_holder_is_refused() {
    let s = Scratch::new();
    let p = problems(
        s.parse("cluster = \"a\"\nholder = \"has space\"\n")
            .unwrap_err(),
    );
    assert_has(&p, Some(2), "invalid holder");
}

#[test]
fn the_default_holder_is_stable_and_valid() {
    let holder = default_holder();
    crate::names::check_holder(holder).unwrap();
    assert!(
        holder.contains(&format!("-{}-", std::process::id())),
        "{holder}"
    );
    let suffix = holder.rsplit('-').next().unwrap();
    assert_eq!(suffix.len(), 4);
    assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(default_holder(), holder);
}

#[test]
fn controller_names_must_be_labels_and_unique() {
    let s = Scratch::new();
    s.file("c.wasm");
    let text = r#"cluster = "demo"
[[controllers]]
name = "a"
component = "c.wasm"
[[controllers]]
name = "a"
component = "c.wasm"
[[controllers]]
name = "Bad_Name"
component = "c.wasm"
[[controllers]]
component = "c.wasm"
"#;
    let p = problems(s.parse(text).unwrap_err());
    assert_has(&p, Some(6), "\"a\" is already used on line 3");
    assert_has(&p, Some(9), "invalid controller name \"Bad_Name\"");
    assert_has(&p, Some(11), "controllers[3] has no `name`");
    assert_eq!(p.len(), 3, "{p:#?}");
}

#[test]
fn shards_name_the_leases_a_controller_runs_as() {
    let s = Scratch::new();
    s.file("c.wasm");
    let config = s
        .parse(
            r#"cluster = "demo"
[[controllers]]
name = "a"
component = "c.wasm"
shards = 3
[[controllers]]
name = "b"
component = "c.wasm"
shards = 1
[[controllers]]
name = "c"
component = "c.wasm"
"#,
        )
        .unwrap();
    let leases =
        |i: usize| -> Vec<(String, Option<crate::shard::Shard>)> { config.controllers[i].leases() };
    let shard = |index, count| Some(crate::shard::Shard { index, count });
    assert_eq!(config.controllers[0].shards, Some(3));
    assert_eq!(
        leases(0),
        vec![
            ("a-0".to_string(), shard(0, 3)),
            ("a-1".to_string(), shard(1, 3)),
            ("a-2".to_string(), shard(2, 3)),
        ]
    );
    assert_eq!(leases(1), vec![("b-0".to_string(), shard(0, 1))]);
    assert_eq!(config.controllers[2].shards, None);
    assert_eq!(leases(2), vec![("c".to_string(), None)]);
    assert_eq!(config.controller_names(), ["a", "b", "c"]);
    assert_eq!(config.lease_names(), ["a-0", "a-1", "a-2", "b-0", "c"]);
    // Each shard runs a guest of its own in the engine's pool.
    let weights: Vec<usize> = config.controllers.iter().map(|c| c.pool_weight()).collect();
    assert_eq!(weights, [3, 1, 1]);
}

#[test]
fn shards_out_of_bounds_too_long_or_colliding_are_refused() {
    let s = Scratch::new();
    s.file("c.wasm");
    let long = "x".repeat(61);
    let text = format!(
        r#"cluster = "demo"
[[controllers]]
name = "a"
component = "c.wasm"
shards = 0
[[controllers]]
name = "b"
component = "c.wasm"
shards = 65
[[controllers]]
name = "{long}"
component = "c.wasm"
shards = 11
[[controllers]]
name = "d"
component = "c.wasm"
shards = 2
[[controllers]]
name = "d-1"
component = "c.wasm"
"#
    );
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(
        &p,
        Some(5),
        "controller \"a\": shards is 0; it must be between 1 and 64",
    );
    assert_has(&p, Some(9), "shards is 65; it must be between 1 and 64");
    assert_has(
        &p,
        Some(13),
        &format!("named up to \"{long}-10\", which must be at most 63 characters"),
    );
    assert_has(
        &p,
        Some(18),
        "controller \"d-1\" runs lease \"d-1\", which controller \"d\" runs too",
    );
    assert_eq!(p.len(), 4, "{p:#?}");
    // 61 characters and 10 shards fit: the last index has one digit.
    let fits = text.replace("shards = 11", "shards = 10");
    let p = problems(s.parse(&fits).unwrap_err());
    assert_eq!(p.len(), 3, "{p:#?}");
}

#[test]
fn lease_timing_must_keep_the_holder_fencing_itself_first() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    // deadline >= ttl: another replica could be granted the lease while
    // this one still runs its guest.
    let text = format!("{ONE}lease_ttl = \"5s\"\nrenew_deadline = \"5s\"\n");
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(&p, Some(8), "renew_interval < renew_deadline < lease_ttl");
    assert_has(&p, Some(8), "controller \"scheduler\"");
    // interval >= deadline.
    let text = format!("{ONE}renew_interval = \"7s\"\n");
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(&p, Some(7), "renew_interval < renew_deadline < lease_ttl");
    // The ordering problem alone: the ratios would only repeat it.
    assert_eq!(p.len(), 1, "{p:#?}");
}

#[test]
fn a_ttl_alone_derives_interval_and_deadline_in_the_default_proportions() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    for (ttl, interval, deadline) in [
        ("3s", 600, 2100),
        ("1s", 200, 700),
        ("1h", 720_000, 2_520_000),
    ] {
        let text = format!("{ONE}lease_ttl = \"{ttl}\"\n");
        let config = s.parse(&text).unwrap();
        let c = &config.controllers[0];
        assert_eq!(c.renew_interval, Duration::from_millis(interval), "{ttl}");
        assert_eq!(c.renew_deadline, Duration::from_millis(deadline), "{ttl}");
    }
    // A key the file sets is kept; only the other one is derived.
    let text = format!("{ONE}lease_ttl = \"5s\"\nrenew_deadline = \"4s\"\n");
    let c = s.parse(&text).unwrap().controllers.remove(0);
    assert_eq!(c.renew_interval, Duration::from_secs(1));
    assert_eq!(c.renew_deadline, Duration::from_secs(4));
}

#[test]
fn a_100ms_ttl_with_a_1ns_interval_names_both_keys_their_floors_and_why() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let text = format!("{ONE}lease_ttl = \"100ms\"\nrenew_interval = \"1ns\"\n");
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(
        &p,
        Some(7),
        "controller \"scheduler\": lease_ttl is 100ms; it must be at least 1s: shorter leases flap",
    );
    assert_has(
        &p,
        Some(8),
        "controller \"scheduler\": renew_interval is 1ns; it must be at least 100ms: each renewal is a database round trip",
    );
    assert_eq!(p.len(), 2, "{p:#?}");
}

#[test]
fn renewals_per_deadline_have_a_floor() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let text =
        format!("{ONE}lease_ttl = \"10s\"\nrenew_interval = \"3s\"\nrenew_deadline = \"5s\"\n");
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(
        &p,
        Some(9),
        "renew_deadline (5s) must be at least 2 × renew_interval (3s), i.e. 6s: at least 2 renewals",
    );
    assert_eq!(p.len(), 1, "{p:#?}");
}

#[test]
fn the_last_renewal_before_the_deadline_has_room_for_its_round_trip() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let text = format!(
        "{ONE}lease_ttl = \"1s\"\nrenew_interval = \"100ms\"\nrenew_deadline = \"250ms\"\n"
    );
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(
        &p,
        Some(9),
        "renew_deadline (250ms) is only 150ms after renew_interval (100ms); it must be at least 300ms after it: the last renewal sent before the deadline may wait 100ms for the lease row's lock (a tenth of lease_ttl, at most 500ms) and needs 200ms for its round trip; raise renew_deadline to 400ms",
    );
    assert_eq!(p.len(), 1, "{p:#?}");
}

#[test]
fn the_slack_covers_the_renewals_lock_wait_of_a_long_ttl() {
    // A tenth of an hour is capped at 500 ms: a renewal may wait that long
    // for the row's lock, and 500 ms of slack leave nothing for its round
    // trip (the rule before counted only the round trip, and passed this).
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let text =
        format!("{ONE}lease_ttl = \"1h\"\nrenew_interval = \"500ms\"\nrenew_deadline = \"1s\"\n");
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(
        &p,
        Some(9),
        "renew_deadline (1s) is only 500ms after renew_interval (500ms); it must be at least 700ms after it: the last renewal sent before the deadline may wait 500ms for the lease row's lock (a tenth of lease_ttl, at most 500ms) and needs 200ms for its round trip; raise renew_deadline to 1s 200ms or lower renew_interval to 300ms",
    );
    assert_eq!(p.len(), 1, "{p:#?}");
}

#[test]
fn the_holder_stops_with_a_margin_before_the_ttl() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let text = format!(
        "{ONE}lease_ttl = \"1s\"\nrenew_interval = \"150ms\"\nrenew_deadline = \"800ms\"\n"
    );
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(
        &p,
        Some(9),
        "renew_deadline (800ms) is only 200ms below lease_ttl (1s); it must be at least 250ms below",
    );
    assert_has(&p, Some(9), "(L3)");
    assert_eq!(p.len(), 1, "{p:#?}");
}

#[test]
fn the_timings_the_test_suites_use_stay_valid() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    // The fault rig's scenario and fast timings, and the service suite's.
    for (ttl, interval, deadline) in [("2000ms", "200ms", "1400ms"), ("1000ms", "150ms", "700ms")] {
        let text = format!(
            "{ONE}lease_ttl = \"{ttl}\"\nrenew_interval = \"{interval}\"\nrenew_deadline = \"{deadline}\"\nbackoff_max = \"1s\"\n"
        );
        s.parse(&text).unwrap();
    }
}

#[test]
fn other_durations_have_floors_with_reasons() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let cases = [
        (
            "reconcile_deadline = \"500ms\"",
            "reconcile_deadline is 500ms; it must be at least 1s: it also bounds a fresh guest's start",
        ),
        (
            "backoff_min = \"1ms\"",
            "backoff_min is 1ms; it must be at least 10ms: the first retry",
        ),
        (
            "backoff_max = \"500ms\"",
            "backoff_max is 500ms; it must be at least 1s: a controller that keeps failing",
        ),
        (
            "renew_interval = \"2h\"",
            "renew_interval is 2h; it must be at most 1h: it must be below lease_ttl",
        ),
        (
            "renew_deadline = \"2h\"",
            "renew_deadline is 2h; it must be at most 1h",
        ),
    ];
    for (line, needle) in cases {
        let text = format!("{ONE}{line}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(7), needle);
        assert_eq!(p.len(), 1, "{line}: {p:#?}");
    }
}

#[test]
fn quota_keys_are_bounded() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let cases = [
        (
            "max_creates_per_second = 0",
            "max_creates_per_second is 0; it must be between 1 and 100000 (default 100)",
        ),
        (
            "max_creates_per_second = 100001",
            "max_creates_per_second is 100001",
        ),
        (
            "create_burst = -1",
            "create_burst is -1; it must be between 1 and 1000000 (default 1000)",
        ),
        (
            "max_objects_per_kind = 10000001",
            "max_objects_per_kind is 10000001; it must be between 1 and 10000000 (default 100000)",
        ),
    ];
    for (line, needle) in cases {
        let text = format!("{ONE}{line}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(7), needle);
    }
}

#[test]
fn zero_durations_are_refused() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    for key in [
        "lease_ttl",
        "renew_interval",
        "renew_deadline",
        "reconcile_deadline",
        "backoff_min",
        "backoff_max",
    ] {
        let text = format!("{ONE}{key} = \"0s\"\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(7), &format!("{key} must be greater than zero"));
        // No follow-on noise: the zero value is replaced by its default.
        assert_eq!(p.len(), 1, "{key}: {p:#?}");
    }
}

#[test]
fn durations_must_parse_and_stay_in_bounds() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let cases = [
        ("lease_ttl = \"10 parsecs\"", "is not a duration"),
        (
            "lease_ttl = \"2h\"",
            "lease_ttl is 2h; it must be at most 1h",
        ),
        (
            "lease_ttl = \"50ms\"",
            "lease_ttl is 50ms; it must be at least 1s",
        ),
        ("reconcile_deadline = \"2h\"", "it must be at most 1h"),
        ("backoff_max = \"1day\"", "it must be at most 1h"),
        (
            "backoff_min = \"10s\"\nbackoff_max = \"1s\"",
            "backoff_min (10s) is larger than backoff_max (1s)",
        ),
    ];
    for (line, needle) in cases {
        let text = format!("{ONE}{line}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(7), needle);
    }
}

#[test]
fn memory_and_queue_limits_are_bounded() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let cases = [
        (
            "memory_limit = \"512KiB\"",
            "memory_limit is 512KiB; it must be between 1MiB and 4GiB",
        ),
        (
            "memory_limit = \"5GiB\"",
            "it must be between 1MiB and 4GiB",
        ),
        ("memory_limit = -1", "it is negative"),
        (
            "memory_limit = \"64 furlongs\"",
            "unknown unit \"furlongs\"",
        ),
        ("max_queue = 0", "max_queue is 0; it must be between 1 and"),
        ("max_queue = 100000000", "max_queue is 100000000"),
    ];
    for (line, needle) in cases {
        let text = format!("{ONE}{line}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(7), needle);
    }
    let text = format!("{ONE}memory_limit = \"1MiB\"\nmax_queue = {WORK_QUEUE_KEYS}\n");
    let config = s.parse(&text).unwrap();
    assert_eq!(config.controllers[0].memory_limit, 1 << 20);
}

#[test]
fn database_settings_are_checked() {
    let s = Scratch::new();
    let cases = [
        ("max_connections = 0", "between 1 and 256"),
        ("max_connections = 1000", "between 1 and 256"),
        ("expected_database_id = \"nope\"", "is not a UUID"),
        ("expected_system_identifier = -4", "must not be negative"),
        ("url = \"\"", "database.url is empty"),
        (
            "url = \"postgres://u:pw@h:notaport/db\"",
            "is not a PostgreSQL URL",
        ),
    ];
    for (line, needle) in cases {
        let text = format!("cluster = \"a\"\n[database]\n{line}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(3), needle);
    }
    let text = "cluster = \"a\"\n[database]\nurl = \"postgres://u:hunter2@h:notaport/db\"\n";
    let error = s.parse(text).unwrap_err();
    assert!(!error.to_string().contains("hunter2"), "{error}");
}

#[test]
fn the_environment_overrides_the_database_url() {
    let mut db = DatabaseConfig::default();
    assert!(!db.apply_url_override(None));
    assert!(!db.apply_url_override(Some("  ".into())));
    assert_eq!(db.url, None);
    assert!(db.apply_url_override(Some("postgres://x@y/z".into())));
    assert_eq!(db.url.as_deref(), Some("postgres://x@y/z"));

    let s = Scratch::new();
    let env = Environment {
        database_url: Some("postgres://postgres@127.0.0.1:5432/other".into()),
        guest_dir: None,
        ..Default::default()
    };
    let text =
        "cluster = \"a\"\n[database]\nurl = \"postgres://postgres@127.0.0.1:5432/postgres\"\n";
    let config = s.parse_env(text, &env).unwrap();
    assert_eq!(
        config.database.url.as_deref(),
        Some("postgres://postgres@127.0.0.1:5432/other")
    );
    // With no [database] url at all, the variable still selects PostgreSQL.
    let config = s.parse_env("cluster = \"a\"\n", &env).unwrap();
    assert!(!config.is_embedded());

    let env = Environment {
        database_url: Some("postgres://u:hunter2@h:notaport/db".into()),
        guest_dir: None,
        ..Default::default()
    };
    let error = s.parse_env("cluster = \"a\"\n", &env).unwrap_err();
    let text = error.to_string();
    assert!(text.contains("LEASEHOLD_DATABASE_URL"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
fn debug_output_hides_secrets() {
    let db = DatabaseConfig {
        url: Some("postgres://u:hunter2@h/db".into()),
        ..DatabaseConfig::default()
    };
    let http = HttpConfig {
        token: Some("sesame-open".into()),
        ..HttpConfig::default()
    };
    let shown = format!("{db:?} {http:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(!shown.contains("sesame-open"), "{shown}");
    assert!(db.endpoint().contains("***"));
}

#[test]
fn http_settings_are_checked() {
    let s = Scratch::new();
    let cases = [
        ("listen = \"localhost:80\"", "is not an IP address and port"),
        ("listen = \"127.0.0.1\"", "is not an IP address and port"),
        ("token = \"\"", "http.token is empty"),
        ("token = \"two words\"", "printable ASCII without spaces"),
    ];
    for (line, needle) in cases {
        let text = format!("cluster = \"a\"\n[http]\n{line}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(3), needle);
    }
    let long = "x".repeat(MAX_TOKEN_BYTES + 1);
    let p = problems(
        s.parse(&format!("cluster = \"a\"\n[http]\ntoken = \"{long}\"\n"))
            .unwrap_err(),
    );
    assert_has(&p, Some(3), "longer than 1024 bytes");
}

#[test]
fn a_misspelt_table_name_is_named() {
    let s = Scratch::new();
    let text = "cluster = \"a\"\n[[controllers]]\nname = \"x\"\ncomponent = \"x.wasm\"\n\
                [controllers.setings]\nsecret = \"hunter2\"\n";
    let error = s.parse(text).unwrap_err().to_string();
    assert!(error.contains("unknown field `setings`"), "{error}");
    assert!(error.contains("line 5"), "{error}");
    assert!(!error.contains("hunter2"), "{error}");
}

#[test]
fn tokens_and_tls_keys_are_checked_naming_each_problem() {
    let s = Scratch::new();
    let cases: &[(&str, usize, &str)] = &[
        ("tls_cert = \"c.pem\"", 3, "without http.tls_key"),
        ("tls_key = \"k.pem\"", 3, "without http.tls_cert"),
        (
            "tls_client_ca = \"ca.pem\"",
            3,
            "needs http.tls_cert and http.tls_key",
        ),
        (
            "tls_cert = \"\"\ntls_key = \"k.pem\"",
            3,
            "http.tls_cert is empty",
        ),
        (
            "[[http.tokens]]\nfile = \"t\"\nrole = \"read\"",
            3,
            "http.tokens[0] has no `name`",
        ),
        (
            "[[http.tokens]]\nname = \"Ops\"\nfile = \"t\"\nrole = \"read\"",
            4,
            "token name",
        ),
        (
            "[[http.tokens]]\nname = \"ops\"\nrole = \"read\"",
            3,
            "has no `file`",
        ),
        (
            "[[http.tokens]]\nname = \"ops\"\nfile = \"t\"",
            3,
            "has no `role`",
        ),
        (
            "[[http.tokens]]\nname = \"ops\"\nfile = \"t\"\nrole = \"admin\"",
            6,
            "role \"admin\" is not \"read\" or \"write\"",
        ),
        (
            "[[http.tokens]]\nname = \"ops\"\nfile = \"t\"\nrole = \"read\"\nkinds = []",
            7,
            "kinds is empty",
        ),
        (
            "[[http.tokens]]\nname = \"ops\"\nfile = \"t\"\nrole = \"read\"\nkinds = [\"Tasks\"]",
            7,
            "kinds[0]",
        ),
        (
            "[[http.tokens]]\nname = \"ops\"\nfile = \"a\"\nrole = \"read\"\n\
             [[http.tokens]]\nname = \"ops\"\nfile = \"b\"\nrole = \"write\"",
            8,
            "already used on line 4",
        ),
        (
            "token = \"shorthand-token-0123\"\n[[http.tokens]]\nname = \"default\"\n\
             file = \"a\"\nrole = \"read\"",
            5,
            "taken by the [http] token shorthand",
        ),
    ];
    for (lines, line, needle) in cases {
        let text = format!("cluster = \"a\"\n[http]\n{lines}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(*line), needle);
    }
    // A valid set resolves paths against the config's folder.
    let config = s
        .parse(
            "cluster = \"a\"\n[http]\ntls_cert = \"tls/c.pem\"\ntls_key = \"tls/k.pem\"\n\
             [[http.tokens]]\nname = \"ops\"\nfile = \"tokens/ops\"\nrole = \"write\"\n\
             kinds = [\"tasks\", \"nodes\", \"tasks\"]\n",
        )
        .unwrap();
    let tls = config.http.tls.expect("tls");
    assert_eq!(tls.cert, s.config_dir().join("tls/c.pem"));
    assert_eq!(config.http.tokens.len(), 1);
    let token = &config.http.tokens[0];
    assert_eq!(token.file, s.config_dir().join("tokens/ops"));
    assert_eq!(token.role, crate::config::TokenRole::Write);
    assert_eq!(
        token.kinds.as_deref(),
        Some(&["tasks".to_string(), "nodes".to_string()][..])
    );
}

#[test]
fn database_urls_take_libpqs_tls_parameters_and_refuse_bad_ones_by_name() {
    let s = Scratch::new();
    let ok = s
        .parse(
            "cluster = \"a\"\n[database]\nurl = \"postgres://u@h/d?sslmode=verify-full&sslrootcert=/x/ca.pem\"\n",
        )
        .unwrap();
    assert!(ok.database.url.is_some());
    for (params, needle) in [
        ("sslmode=verify-full", "needs sslrootcert"),
        ("sslmode=allow", "sslmode \"allow\" is not one of"),
        ("sslcert=c.pem", "sslcert is given without sslkey"),
    ] {
        let text = format!("cluster = \"a\"\n[database]\nurl = \"postgres://u@h/d?{params}\"\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(3), needle);
    }
}

#[test]
fn an_empty_cache_dir_is_refused() {
    let s = Scratch::new();
    let p = problems(
        s.parse("cluster = \"a\"\n[runtime]\ncache_dir = \" \"\n")
            .unwrap_err(),
    );
    assert_has(&p, Some(3), "runtime.cache_dir is empty");
}

#[test]
fn a_missing_component_is_named_by_its_path() {
    let s = Scratch::new();
    let p = problems(s.parse(ONE).unwrap_err());
    let expected = s.config_dir().join("scheduler.wasm");
    assert_has(
        &p,
        Some(6),
        &format!("component file {} does not exist", expected.display()),
    );
    let p = problems(
        s.parse("cluster = \"a\"\n[[controllers]]\nname = \"x\"\n")
            .unwrap_err(),
    );
    assert_has(&p, Some(2), "controller \"x\" has no `component`");
    let text = format!("{}\n", ONE.replace("scheduler.wasm", "sub"));
    s.dir("sub");
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(&p, Some(6), "is not a file");
}

#[test]
fn the_guest_dir_placeholder_expands_from_the_environment() {
    let s = Scratch::new();
    let elsewhere = s.root.join("built");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("scheduler.wasm"), b"").unwrap();
    let text = ONE.replace("scheduler.wasm", "${LEASEHOLD_GUEST_DIR}/scheduler.wasm");
    let env = Environment {
        database_url: None,
        guest_dir: Some(elsewhere.clone()),
        ..Default::default()
    };
    let config = s.parse_env(&text, &env).unwrap();
    assert_eq!(
        config.controllers[0].component,
        elsewhere.join("scheduler.wasm")
    );
}

#[test]
fn the_guest_dir_placeholder_defaults_under_the_config_folders_parent() {
    let s = Scratch::new();
    let text = ONE.replace("scheduler.wasm", "${LEASEHOLD_GUEST_DIR}/scheduler.wasm");
    let expected = s.root.join(DEFAULT_GUEST_DIR).join("scheduler.wasm");
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(&p, Some(6), &expected.display().to_string());
    assert_has(&p, Some(6), "cargo xtask guests");
    assert_has(&p, Some(6), GUEST_DIR_ENV);

    std::fs::create_dir_all(expected.parent().unwrap()).unwrap();
    std::fs::write(&expected, b"").unwrap();
    let config = s.parse(&text).unwrap();
    assert_eq!(config.controllers[0].component, expected);
}

#[test]
fn only_the_guest_dir_placeholder_is_expanded() {
    let s = Scratch::new();
    let text = ONE.replace("scheduler.wasm", "${HOME}/scheduler.wasm");
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(&p, Some(6), "only ${LEASEHOLD_GUEST_DIR} is expanded");
}

#[test]
fn granted_directories_are_checked() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    s.dir("data");
    s.file("plain");
    let cases = [
        (
            "dirs = [{ host = \"nowhere\", guest = \"/d\" }]",
            "host directory",
        ),
        (
            "dirs = [{ host = \"plain\", guest = \"/d\" }]",
            "is not a directory",
        ),
        (
            "dirs = [{ host = \"data\", guest = \"d\" }]",
            "must be absolute",
        ),
        (
            "dirs = [{ host = \"data\", guest = \"/a/../b\" }]",
            "must not contain",
        ),
        ("dirs = [{ host = \"data\" }]", "has no `guest` path"),
        ("dirs = [{ guest = \"/d\" }]", "has no `host` directory"),
        (
            "dirs = [{ host = \"data\", guest = \"/d\" }, { host = \"data\", guest = \"/d\" }]",
            "guest path \"/d\" is granted twice",
        ),
    ];
    for (line, needle) in cases {
        let text = format!("{ONE}{line}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(7), needle);
    }
    let many: Vec<String> = (0..=MAX_DIRS)
        .map(|i| format!("{{ host = \"data\", guest = \"/d{i}\" }}"))
        .collect();
    let text = format!("{ONE}dirs = [{}]\n", many.join(", "));
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(&p, Some(4), "grants 17 directories; at most 16");
}

/// The `http_allow` of the one controller in `text`.
fn allow_of(config: &Config) -> &crate::outbound::AllowList {
    &config.controllers[0].http_allow
}

fn uri(text: &str) -> http::Uri {
    text.parse().unwrap()
}

#[test]
fn http_allow_is_read_and_reaches_the_guest_limits() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let config = s.parse(ONE).unwrap();
    assert!(allow_of(&config).is_empty(), "absent: no network");
    assert!(config.controllers[0].guest_limits().http_allow.is_empty());
    let config = s.parse(&format!("{ONE}http_allow = []\n")).unwrap();
    assert!(allow_of(&config).is_empty(), "empty: no network");

    let text = format!(
        "{ONE}http_allow = [\n  \"https://api.example.com\",\n  \"http://127.0.0.1:9000/hooks/\",\n]\n"
    );
    let config = s.parse(&text).unwrap();
    let expected = crate::outbound::AllowList::parse(&[
        "https://api.example.com",
        "http://127.0.0.1:9000/hooks/",
    ])
    .unwrap();
    assert_eq!(allow_of(&config), &expected);
    let limits = config.controllers[0].guest_limits();
    assert_eq!(*limits.http_allow, expected);
    // What the runtime checks each request against.
    assert!(
        limits
            .http_allow
            .check(&uri("https://api.example.com/v1/x"))
            .is_ok()
    );
    assert!(
        limits
            .http_allow
            .check(&uri("http://127.0.0.1:9000/hooks/a"))
            .is_ok()
    );
    assert!(
        limits
            .http_allow
            .check(&uri("http://127.0.0.1:9000/admin"))
            .is_err()
    );
    assert!(
        limits
            .http_allow
            .check(&uri("https://other.example.com/"))
            .is_err()
    );
}

#[test]
fn every_bad_http_allow_entry_is_reported_on_its_line() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let text = format!(
        "{ONE}http_allow = [\n  \"api.example.com\",\n  \"https://ok.example.com\",\n  \"ftp://files.example.com\",\n  \"http://\",\n  \"http://x/a/../b\",\n]\n"
    );
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(
        &p,
        Some(8),
        "controller \"scheduler\": http_allow[0]: no scheme",
    );
    assert_has(
        &p,
        Some(10),
        "http_allow[2]: a scheme other than http or https",
    );
    assert_has(&p, Some(11), "http_allow[3]: not a URL");
    assert_has(&p, Some(12), "http_allow[4]: a `.` or `..` path segment");
    assert_eq!(p.len(), 4, "{p:#?}");

    // A controller whose name is unusable is named by its index.
    let text = "cluster = \"demo\"\n[[controllers]]\nname = \"Bad Name\"\n\
                component = \"scheduler.wasm\"\nhttp_allow = [\"nope\"]\n";
    let p = problems(s.parse(text).unwrap_err());
    assert_has(&p, Some(5), "controllers[0]: http_allow[0]: no scheme");
}

#[test]
fn http_allow_errors_never_show_a_credential() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    const SECRET: &str = "hunter2-77d1";
    for (entry, needle) in [
        (
            format!("https://bob:{SECRET}@api.example.com"),
            "user information",
        ),
        (format!("bob:{SECRET}@api.example.com"), "no scheme"),
        (
            format!("ftp://bob:{SECRET}@files.example.com"),
            "other than http or https",
        ),
        (format!("http://bob:{SECRET}@"), "not a URL"),
        (format!("https://api.example.com/?token={SECRET}"), "query"),
        (
            format!("https://api.example.com/#{SECRET}"),
            "query or fragment",
        ),
        (format!("api.example.com/?key={SECRET}"), "no scheme"),
    ] {
        let text = format!("{ONE}http_allow = [\"{entry}\"]\n");
        let error = s.parse(&text).unwrap_err();
        let shown = error.to_string();
        assert!(
            !shown.contains(SECRET),
            "{entry}: the secret leaked: {shown}"
        );
        assert!(
            !shown.contains("hunter2"),
            "{entry}: the secret leaked: {shown}"
        );
        let p = problems(error);
        assert_has(&p, Some(7), "http_allow[0]: ");
        assert_has(&p, Some(7), needle);
    }
    // A value of the wrong type is not quoted either.
    let text = format!("{ONE}http_allow = \"https://bob:{SECRET}@api.example.com\"\n");
    let problem = syntax(s.parse(&text).unwrap_err());
    assert!(!problem.message.contains(SECRET), "{problem}");
    assert!(
        problem.message.contains("key `controllers.http_allow`"),
        "{problem}"
    );
    assert_eq!(problem.line, Some(7));
}

#[test]
fn http_allow_has_a_bounded_number_of_entries() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let max = crate::limits::MAX_HTTP_ALLOW_ENTRIES;
    let entries = |n: usize| {
        (0..n)
            .map(|i| format!("\"http://10.0.0.1:{}\"", 1000 + i))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let config = s
        .parse(&format!("{ONE}http_allow = [{}]\n", entries(max)))
        .unwrap();
    assert_eq!(allow_of(&config).entries().len(), max);
    let p = problems(
        s.parse(&format!("{ONE}http_allow = [{}]\n", entries(max + 1)))
            .unwrap_err(),
    );
    assert_has(
        &p,
        Some(7),
        &format!(
            "controller \"scheduler\": http_allow: {} entries; at most {max} are allowed",
            max + 1
        ),
    );
    assert_eq!(p.len(), 1, "{p:#?}");
}

#[test]
fn a_reload_that_changes_only_http_allow_is_a_change_of_the_controller() {
    // A reload restarts a controller whose settings differ (see
    // `service::controllers`); the new tenure's guest gets the new list.
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let before = s
        .parse(&format!("{ONE}http_allow = [\"https://a.example.com\"]\n"))
        .unwrap();
    let same = s
        .parse(&format!("{ONE}http_allow = [\"https://a.example.com\"]\n"))
        .unwrap();
    let after = s
        .parse(&format!("{ONE}http_allow = [\"https://b.example.com\"]\n"))
        .unwrap();
    let removed = s.parse(ONE).unwrap();
    assert_eq!(before.controllers, same.controllers);
    assert_ne!(before.controllers, after.controllers);
    assert_ne!(before.controllers, removed.controllers);
    let (old, new) = (&before.controllers[0], &after.controllers[0]);
    // Nothing else differs: the change is the list alone.
    let mut unchanged = new.clone();
    unchanged.http_allow = old.http_allow.clone();
    assert_eq!(&unchanged, old);
    let limits = new.guest_limits();
    assert!(
        limits
            .http_allow
            .check(&uri("https://b.example.com/x"))
            .is_ok()
    );
    assert!(
        limits
            .http_allow
            .check(&uri("https://a.example.com/x"))
            .is_err()
    );
    assert!(
        removed.controllers[0]
            .guest_limits()
            .http_allow
            .check(&uri("https://a.example.com/x"))
            .is_err()
    );
}

#[test]
fn too_many_controllers_are_refused() {
    let s = Scratch::new();
    s.file("c.wasm");
    let mut text = String::from("cluster = \"a\"\n");
    for i in 0..=MAX_CONTROLLERS {
        text.push_str(&format!(
            "[[controllers]]\nname = \"c{i}\"\ncomponent = \"c.wasm\"\n"
        ));
    }
    let p = problems(s.parse(&text).unwrap_err());
    assert_has(
        &p,
        None,
        "10001 controllers are configured; one host runs at most 10000",
    );
    assert_eq!(p.len(), 1);
}

#[test]
fn every_problem_is_reported_at_once() {
    let s = Scratch::new();
    let text = r#"cluster = "Not A Label"
[http]
listen = "nowhere"
[[controllers]]
name = "a"
component = "missing.wasm"
lease_ttl = "0s"
[[controllers]]
name = "a"
component = "missing.wasm"
memory_limit = "8GiB"
"#;
    let error = s.parse(text).unwrap_err();
    let shown = error.to_string();
    let p = problems(error);
    assert_has(&p, Some(1), "invalid cluster");
    assert_has(&p, Some(3), "http.listen");
    assert_has(&p, Some(6), "missing.wasm does not exist");
    assert_has(&p, Some(7), "lease_ttl must be greater than zero");
    assert_has(&p, Some(9), "already used on line 5");
    assert_has(&p, Some(10), "missing.wasm does not exist");
    assert_has(&p, Some(11), "memory_limit is 8GiB");
    assert_eq!(p.len(), 7, "{p:#?}");
    // In file order, one per line, under a header naming the file.
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[0], "invalid config <config> (7 problems):");
    assert_eq!(lines.len(), 8);
    assert!(lines[1].starts_with("  line 1: "));
    assert!(lines[7].starts_with("  line 11: "));
}

#[test]
fn load_names_the_file_and_resolves_against_its_folder() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let path = s.config_dir().join("leasehold.toml");
    std::fs::write(&path, ONE).unwrap();
    let config = Config::load_with(&path, &Environment::default()).unwrap();
    assert_eq!(config.base_dir, s.config_dir());
    assert_eq!(
        config.controllers[0].component,
        s.config_dir().join("scheduler.wasm")
    );

    std::fs::write(&path, "cluster = \"a\"\nbogus = 1\n").unwrap();
    let error = Config::load_with(&path, &Environment::default()).unwrap_err();
    let shown = error.to_string();
    assert_eq!(shown.lines().count(), 1, "{shown}");
    assert!(
        shown.starts_with(&format!(
            "invalid config {}: line 2: unknown field `bogus`",
            path.display()
        )),
        "{shown}"
    );
    assert_eq!(error.problems().len(), 1);

    let missing = s.config_dir().join("absent.toml");
    let error = Config::load_with(&missing, &Environment::default()).unwrap_err();
    assert!(
        matches!(&error, ConfigError::Read { reason, .. } if reason.kind() == std::io::ErrorKind::NotFound)
    );
    // The reason is in the message, not chained again below it.
    assert!(std::error::Error::source(&error).is_none());
    assert!(error.to_string().contains("absent.toml"), "{error}");
}

#[test]
fn an_oversized_file_is_refused_before_reading() {
    let s = Scratch::new();
    let path = s.config_dir().join("huge.toml");
    let filler = "#".repeat(MAX_CONFIG_BYTES as usize + 1);
    std::fs::write(&path, filler).unwrap();
    let error = Config::load_with(&path, &Environment::default()).unwrap_err();
    assert!(
        error.to_string().contains("at most 1048576 bytes"),
        "{error}"
    );
}

#[test]
fn the_example_configs_are_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let examples = root.join("examples");
    // Components may not be built; point the guest dir at stand-ins so the
    // test checks the files' keys and values, not the build.
    let s = Scratch::new();
    let guests = s.root.join("guests");
    std::fs::create_dir_all(&guests).unwrap();
    for name in ["scheduler.wasm", "rollout.wasm"] {
        std::fs::write(guests.join(name), b"").unwrap();
    }
    let env = Environment {
        database_url: None,
        guest_dir: Some(guests),
        ..Default::default()
    };
    let demo = Config::load_with(examples.join("leasehold.toml"), &env).unwrap();
    assert_eq!(demo.cluster, "demo");
    assert!(demo.is_embedded());
    // The example spells out the retention defaults.
    assert_eq!(demo.store, StoreConfig::default());
    assert_eq!(demo.http.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(demo.controller_names(), ["scheduler", "rollout"]);

    let a = Config::load_with(examples.join("leasehold-postgres.toml"), &env).unwrap();
    let b = Config::load_with(examples.join("leasehold-postgres-b.toml"), &env).unwrap();
    for config in [&a, &b] {
        assert_eq!(
            config.database.url.as_deref(),
            Some("postgres://postgres@127.0.0.1:5432/postgres")
        );
        assert_eq!(config.controller_names(), ["scheduler", "rollout"]);
    }
    assert_eq!(a.cluster, b.cluster);
    assert_eq!(a.http.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(b.http.listen, "127.0.0.1:8081".parse().unwrap());

    // The commented-out settings example is valid once uncommented, and
    // reaches the scheduler as JSON.
    let text = std::fs::read_to_string(examples.join("leasehold.toml")).unwrap();
    let commented =
        "\n# [controllers.settings]\n# max_tasks_per_node = 8\n# zones = [\"a\", \"b\"]\n";
    assert!(
        text.contains(commented),
        "leasehold.toml shows a settings table"
    );
    let text = text.replacen(
        commented,
        "\n[controllers.settings]\nmax_tasks_per_node = 8\nzones = [\"a\", \"b\"]\n",
        1,
    );
    let config = Config::parse_with(&text, &examples, &env).unwrap();
    assert_eq!(
        config.controllers[0].settings.as_json(),
        r#"{"max_tasks_per_node":8,"zones":["a","b"]}"#
    );
    assert!(config.controllers[1].settings.is_empty());

    // The commented-out http_allow examples are valid once uncommented.
    for file in ["leasehold.toml", "leasehold-postgres.toml"] {
        let text = std::fs::read_to_string(examples.join(file)).unwrap();
        assert!(text.contains("\n# http_allow = ["), "{file}");
        let text = text.replacen("\n# http_allow = [", "\nhttp_allow = [", 1);
        let config = Config::parse_with(&text, &examples, &env).unwrap();
        assert_eq!(
            config.controllers[0].http_allow.to_string(),
            "[https://api.example.com, http://127.0.0.1:9000/hooks/]",
            "{file}"
        );
    }
}

#[test]
fn sizes_parse_with_units() {
    let text = |s: &str| IntOrText::Text(s.to_string());
    assert_eq!(parse_size(&IntOrText::Int(1024)), Ok(1024));
    assert_eq!(parse_size(&text("64MiB")), Ok(64 << 20));
    assert_eq!(parse_size(&text("512 KiB")), Ok(512 << 10));
    assert_eq!(parse_size(&text("1gib")), Ok(1 << 30));
    assert_eq!(parse_size(&text("2MB")), Ok(2_000_000));
    assert_eq!(parse_size(&text("4096")), Ok(4096));
    assert!(parse_size(&text("MiB")).is_err());
    assert!(parse_size(&text("1.5GiB")).is_err());
    assert!(parse_size(&text("99999999999999999999GiB")).is_err());
    assert!(parse_size(&text("18446744073709551615GiB")).is_err());
}

#[test]
fn durations_parse_like_humantime() {
    assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
    let error = parse_duration("ten seconds").unwrap_err();
    assert!(error.contains("write it like \"10s\""), "{error}");
}

#[test]
fn settings_become_the_json_object_the_guest_reads() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let config = s.parse(ONE).unwrap();
    assert!(config.controllers[0].settings.is_empty(), "absent: {{}}");
    assert_eq!(
        config.controllers[0].guest_limits().settings.as_json(),
        "{}"
    );

    let text = format!(
        "{ONE}\n[controllers.settings]\nmax_tasks = 10\nratio = 0.5\nregions = [\"eu\", \"us\"]\n\
         enabled = true\nsince = 2026-01-02T03:04:05Z\nday = 2026-01-02\n\
         [controllers.settings.nested]\ndeep = {{ key = \"v\" }}\n"
    );
    let config = s.parse(&text).unwrap();
    let settings = &config.controllers[0].settings;
    let json: serde_json::Value = serde_json::from_str(settings.as_json()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "max_tasks": 10,
            "ratio": 0.5,
            "regions": ["eu", "us"],
            "enabled": true,
            "since": "2026-01-02T03:04:05Z",
            "day": "2026-01-02",
            "nested": { "deep": { "key": "v" } },
        })
    );
    // What the runtime hands the guest.
    assert_eq!(&config.controllers[0].guest_limits().settings, settings);
    // An inline table is the same table.
    let inline = s
        .parse(&format!("{ONE}settings = {{ max_tasks = 10 }}\n"))
        .unwrap();
    assert_eq!(
        inline.controllers[0].settings.as_json(),
        r#"{"max_tasks":10}"#
    );
}

#[test]
fn settings_that_are_not_a_table_or_not_json_are_refused_by_key() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let problems = |text: &str| match s.parse(text) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("expected problems, got {other:?}"),
    };
    let found = problems(&format!("{ONE}settings = \"hunter2\"\n"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].message.contains("settings must be a table"),
        "{found:?}"
    );
    assert!(found[0].message.contains("not a string"), "{found:?}");
    assert!(!found[0].message.contains("hunter2"), "{found:?}");
    assert_eq!(found[0].line, Some(ONE.lines().count() + 1));

    let found = problems(&format!(
        "{ONE}[controllers.settings]\nrate = nan\nlimits = [1.0, inf]\n"
    ));
    let messages: Vec<&str> = found.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages
            .iter()
            .any(|m| m.contains("settings.rate: nan and infinite floats")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("settings.limits[1]:")),
        "{messages:?}"
    );
    assert!(
        messages.iter().all(|m| m.contains("controller")),
        "{messages:?}"
    );
}

#[test]
fn settings_larger_than_the_bound_are_refused() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let limit = crate::limits::MAX_SETTINGS_BYTES;
    // `{"blob":"…"}` is 11 bytes of JSON around the string.
    let fits = "x".repeat(limit - 11);
    let config = s
        .parse(&format!("{ONE}[controllers.settings]\nblob = \"{fits}\"\n"))
        .unwrap();
    assert_eq!(config.controllers[0].settings.len(), limit);
    let over = "x".repeat(limit - 10);
    match s.parse(&format!("{ONE}[controllers.settings]\nblob = \"{over}\"\n")) {
        Err(ConfigError::Invalid { problems, .. }) => {
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(
                problems[0]
                    .message
                    .contains(&format!("at most {limit} bytes")),
                "{problems:?}"
            );
            assert!(!problems[0].message.contains("xxxx"), "{problems:?}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn settings_never_show_in_debug() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let config = s
        .parse(&format!(
            "{ONE}[controllers.settings]\napi_key = \"hunter2-5e1\"\n"
        ))
        .unwrap();
    let shown = format!("{config:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("bytes of JSON"), "{shown}");
}

#[test]
fn leasehold_holder_names_the_host_over_the_file() {
    let s = Scratch::new();
    let env = Environment {
        holder: Some("web-7d9f-abcde".into()),
        ..Default::default()
    };
    let config = s
        .parse_env("cluster = \"a\"\nholder = \"from-file\"\n", &env)
        .unwrap();
    assert_eq!(config.holder.as_deref(), Some("web-7d9f-abcde"));
    // Without it, the file's name (and without both, the default).
    let config = s
        .parse_env(
            "cluster = \"a\"\nholder = \"from-file\"\n",
            &Environment::default(),
        )
        .unwrap();
    assert_eq!(config.holder.as_deref(), Some("from-file"));

    // A name the holder rules refuse is refused, naming the variable.
    let env = Environment {
        holder: Some("bad name".into()),
        ..Default::default()
    };
    let text = s
        .parse_env("cluster = \"a\"\n", &env)
        .unwrap_err()
        .to_string();
    assert!(text.contains("LEASEHOLD_HOLDER"), "{text}");
}

#[test]
fn telemetry_is_off_unless_an_endpoint_is_given_and_the_file_wins() {
    let s = Scratch::new();
    let config = s
        .parse_env("cluster = \"a\"\n", &Environment::default())
        .unwrap();
    assert_eq!(config.telemetry, TelemetryConfig::default());
    assert_eq!(config.telemetry.otlp_endpoint, None);
    assert_eq!(config.telemetry.sample_ratio, 1.0);

    let env = Environment {
        otlp_endpoint: Some("http://collector.local:4318/".into()),
        ..Default::default()
    };
    let config = s.parse_env("cluster = \"a\"\n", &env).unwrap();
    assert_eq!(
        config.telemetry.otlp_endpoint.as_deref(),
        Some("http://collector.local:4318")
    );
    let text = "cluster = \"a\"\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318/otlp\"\nsample_ratio = 0.1\n";
    let config = s.parse_env(text, &env).unwrap();
    assert_eq!(
        config.telemetry.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318/otlp")
    );
    assert_eq!(config.telemetry.sample_ratio, 0.1);
}

#[test]
fn bad_telemetry_settings_are_refused_by_line_without_credentials() {
    let s = Scratch::new();
    let text = "cluster = \"a\"\n[telemetry]\notlp_endpoint = \"https://collector:4318\"\nsample_ratio = 1.5\n";
    let problems = s
        .parse_env(text, &Environment::default())
        .unwrap_err()
        .problems();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("line 3") && problems[0].contains("must use http"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("line 4") && problems[1].contains("sample_ratio 1.5"),
        "{problems:?}"
    );

    for (value, why) in [
        ("http://user:secret-pw@collector:4318", "user information"),
        ("collector:4318", "must use http"),
        ("http://collector:4318/?token=x", "no query"),
        ("not a url", "is not a URL"),
    ] {
        let text = format!("cluster = \"a\"\n[telemetry]\notlp_endpoint = \"{value}\"\n");
        let problems = s
            .parse_env(&text, &Environment::default())
            .unwrap_err()
            .problems();
        assert!(problems[0].contains(why), "{value}: {problems:?}");
        assert!(!problems[0].contains("secret-pw"), "{problems:?}");
    }
    for ratio in ["-0.1", "nan"] {
        let text = format!("cluster = \"a\"\n[telemetry]\nsample_ratio = {ratio}\n");
        assert!(
            s.parse_env(&text, &Environment::default()).is_err(),
            "{ratio}"
        );
    }
    // The environment's value is checked too, and named.
    let env = Environment {
        otlp_endpoint: Some("grpc://collector:4317".into()),
        ..Default::default()
    };
    let problems = s
        .parse_env("cluster = \"a\"\n", &env)
        .unwrap_err()
        .problems();
    assert!(
        problems[0].contains("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "{problems:?}"
    );
}

#[test]
fn store_retention_has_defaults_bounds_and_names_its_keys() {
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let config = s.parse(ONE).unwrap();
    assert_eq!(config.store, StoreConfig::default());
    assert_eq!(
        config.store.event_retention,
        Duration::from_secs(7 * 24 * 3600)
    );
    assert_eq!(config.store.tenure_retention, 1000);

    let text = format!("{ONE}\n[store]\nevent_retention = \"36h\"\ntenure_retention = 5\n");
    let config = s.parse(&text).unwrap();
    assert_eq!(config.store.event_retention, Duration::from_secs(36 * 3600));
    assert_eq!(config.store.tenure_retention, 5);

    let cases = [
        (
            "event_retention = \"30s\"",
            "store: event_retention is 30s; it must be at least 1m",
        ),
        (
            "event_retention = \"20years\"",
            "store: event_retention is 20years",
        ),
        ("event_retention = \"a week\"", "store: event_retention: "),
        (
            "event_retention = \"0s\"",
            "store: event_retention must be greater than zero",
        ),
        (
            "tenure_retention = 0",
            "store.tenure_retention is 0; it must be between 1 and 1000000",
        ),
        ("tenure_retention = -3", "store.tenure_retention is -3"),
    ];
    for (line, needle) in cases {
        let text = format!("{ONE}\n[store]\n{line}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(9), needle);
    }
    let unknown = s
        .parse(&format!("{ONE}\n[store]\nevent_retention_days = 3\n"))
        .unwrap_err();
    assert!(
        unknown.to_string().contains("store.event_retention_days"),
        "{unknown}"
    );
}

#[test]
fn store_counts_of_a_guest_are_per_controller_and_bounded() {
    use crate::limits::{GUEST_INSTANCES, GUEST_MEMORIES, GUEST_TABLES, POOLED_CONTROLLERS};
    let s = Scratch::new();
    s.file("scheduler.wasm");
    let cases = [
        (
            "max_instances = 0",
            "controller \"scheduler\": max_instances is 0; it must be between 1 and 1000 \
             (default 20)",
        ),
        ("max_instances = 1001", "max_instances is 1001"),
        (
            "max_tables = -3",
            "max_tables is -3; it must be between 1 and 1000",
        ),
        (
            "max_memories = 101",
            "max_memories is 101; it must be between 1 and 100",
        ),
    ];
    for (line, needle) in cases {
        let text = format!("{ONE}{line}\n");
        let p = problems(s.parse(&text).unwrap_err());
        assert_has(&p, Some(7), needle);
    }

    // Unset: the defaults, which every toolchain's components fit.
    let config = s.parse(ONE).unwrap();
    let c = &config.controllers[0];
    assert_eq!(
        (c.max_instances, c.max_tables, c.max_memories),
        (GUEST_INSTANCES, GUEST_TABLES, GUEST_MEMORIES)
    );
    assert_eq!(c.pool_weight(), 1);
    let limits = c.guest_limits();
    assert_eq!(
        (limits.instances, limits.tables, limits.memories),
        (GUEST_INSTANCES, GUEST_TABLES, GUEST_MEMORIES)
    );

    // Set: the guest's store gets them, and the pool counts the
    // controller as that many default guests.
    let text = format!("{ONE}max_instances = 100\nmax_tables = 30\nmax_memories = 3\n");
    let config = s.parse(&text).unwrap();
    let c = &config.controllers[0];
    let limits = c.guest_limits();
    assert_eq!(
        (limits.instances, limits.tables, limits.memories),
        (100, 30, 3)
    );
    assert_eq!(c.pool_weight(), 5);
    let mut many = String::from("cluster = \"demo\"\n");
    for i in 0..POOLED_CONTROLLERS {
        many.push_str(&format!(
            "[[controllers]]\nname = \"c{i}\"\ncomponent = \"scheduler.wasm\"\n"
        ));
    }
    let plain = s.parse(&many).unwrap();
    assert_eq!(
        plain.engine_config().max_guests as usize,
        POOLED_CONTROLLERS
    );
    many.push_str(
        "[[controllers]]\nname = \"python\"\ncomponent = \"scheduler.wasm\"\nmax_tables = 41\n",
    );
    let heavy = s.parse(&many).unwrap();
    assert_eq!(
        heavy.engine_config().max_guests as usize,
        POOLED_CONTROLLERS + 3,
        "41 tables take three default guests' slots"
    );
}

#[test]
fn no_url_means_the_embedded_backend_in_data_dir_and_memory_is_asked_for() {
    let s = Scratch::new();
    let text = "cluster = \"demo\"\n";
    let config = s.parse(text).unwrap();
    assert_eq!(config.database.backend(), Backend::Embedded);
    assert!(config.is_embedded());
    assert_eq!(config.data_dir, s.config_dir().join(DEFAULT_DATA_DIR));
    let config = s
        .parse("cluster = \"demo\"\ndata_dir = \"../state\"\n")
        .unwrap();
    assert_eq!(config.data_dir, s.config_dir().join("../state"));
    let config = s
        .parse("cluster = \"demo\"\ndata_dir = \"/var/lib/lh\"\n")
        .unwrap();
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/lh"));
    let memory = s
        .parse("cluster = \"demo\"\n[database]\nurl = \"memory:\"\n")
        .unwrap();
    assert_eq!(memory.database.backend(), Backend::Memory);
    assert!(!memory.is_embedded());
    assert!(memory.database.endpoint().contains("not durable"));
    // The environment may ask for it too, and for PostgreSQL over it.
    let env = Environment {
        database_url: Some("memory:".into()),
        ..Default::default()
    };
    assert_eq!(
        s.parse_env(text, &env).unwrap().database.backend(),
        Backend::Memory
    );
    let problems = problems_of(&s, "cluster = \"demo\"\ndata_dir = \"\"\n");
    assert_has(&problems, Some(2), "data_dir is empty");
    // Sessions are PostgreSQL's: not with the embedded or in-memory backend.
    for database in ["", "url = \"memory:\"\n"] {
        let text = format!(
            "cluster = \"demo\"\n[database]\n{database}session_url = \"postgres://h/db\"\n"
        );
        let problems = problems_of(&s, &text);
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("not a PostgreSQL URL")),
            "{problems:?}"
        );
    }
}

#[test]
fn the_second_embedded_example_shares_the_first_ones_data_directory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let examples = root.join("examples");
    let s = Scratch::new();
    let guests = s.root.join("guests");
    std::fs::create_dir_all(&guests).unwrap();
    for name in ["scheduler.wasm", "rollout.wasm"] {
        std::fs::write(guests.join(name), b"").unwrap();
    }
    let env = Environment {
        guest_dir: Some(guests),
        ..Default::default()
    };
    let a = Config::load_with(examples.join("leasehold.toml"), &env).unwrap();
    let b = Config::load_with(examples.join("leasehold-b.toml"), &env).unwrap();
    assert!(a.is_embedded() && b.is_embedded());
    assert_eq!(a.data_dir, examples.join("leasehold-data"));
    assert_eq!(a.data_dir, b.data_dir);
    assert_eq!(a.cluster, b.cluster);
    assert_ne!(a.http.listen, b.http.listen);
    assert_eq!(a.controller_names(), b.controller_names());
}
