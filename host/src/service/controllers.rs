//! The controllers a running host supervises, and how a config reload
//! changes them: a removed controller is stopped (its running reconcile
//! finishes within the grace period, its guest is dropped and its lease
//! released, L5) while the others keep their tenures; an added one starts;
//! a changed one (its settings or its component's bytes) is stopped and
//! started again with the new ones. A change of settings alone (limits,
//! quotas, `http_allow`, timing) keeps the compiled component and its
//! outbound request counters; the next tenure's guest runs under the new
//! settings.
//!
//! Must never: stop anything before every new or changed component has
//! compiled (a reload that cannot be applied whole changes nothing), or
//! apply settings that only take effect at start-up.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::authority::{Authority, ShardingRule};
use crate::config::{Config, ControllerConfig};
use crate::runtime::{CompiledController, Runtime};
use crate::status::Status;
use crate::store::Store;
use crate::supervisor::identity::IdentityCheck;
use crate::supervisor::{Renewer, Supervisor, SupervisorConfig};

/// Longest wait for one supervisor to stop: its reconcile's grace, the
/// tenure's end record, and a margin.
pub(crate) fn stop_bound() -> Duration {
    crate::timeouts::SHUTDOWN_GRACE
        + crate::timeouts::TENURE_END_RECORD
        + crate::timeouts::SUPERVISOR_STOP_MARGIN
}

/// What every supervisor of this host shares.
pub(crate) struct Shared {
    pub cluster: String,
    pub holder: String,
    pub authority: Arc<dyn Authority>,
    pub renewer: Renewer,
    pub store: Arc<dyn Store>,
    pub status: Arc<Status>,
    pub identity: watch::Receiver<IdentityCheck>,
    /// Where each tenure's loop beats (the service manager's watchdog).
    pub heartbeat: crate::notify::Heartbeat,
}

/// A controller's settings and component, compiled, ready to start.
pub(crate) struct Prepared {
    settings: ControllerConfig,
    digest: u64,
    compiled: CompiledController,
    /// How it runs as leases, once described ([`check_settings`]): its
    /// `shards` and its guest's shard label and every-shard kinds, which
    /// every acquire of its leases is judged by; `Err`: its component
    /// could not be asked how it shards.
    sharding: Option<Result<ShardingRule, String>>,
}

impl Prepared {
    /// The controller's name.
    pub(crate) fn name(&self) -> &str {
        &self.settings.name
    }

    /// Ask a throwaway instance of the component what it watches, and
    /// check the answer as the worker does (`leasehold check`): `Ok` with a
    /// note, or every problem (a malformed watched kind or related watch,
    /// more related watches than the host keeps), each naming the
    /// controller. The instance runs on an empty in-memory store under a
    /// fence no authority granted, so any write it tried would be refused;
    /// a component that cannot be instantiated or described is a note, not
    /// a problem (the start reports it).
    pub(crate) async fn check_description(&self, cluster: &str) -> Result<String, Vec<String>> {
        let name = self.name();
        let description = match self.describe_offline(cluster).await {
            Ok(description) => description,
            Err(e) => {
                return Ok(format!(
                    "controller {name}: could not ask the component what it watches ({e})"
                ));
            }
        };
        let mut problems = Vec::new();
        for kind in &description.watches {
            if let Err(e) = crate::names::check_label("watched kind", kind) {
                problems.push(format!("controller {name}: {e}"));
            }
        }
        for watch in &description.related {
            if let Err(e) = watch.check() {
                problems.push(format!("controller {name}: {e}"));
            }
        }
        let related = description.related.len();
        if related > crate::runtime::MAX_RELATED_WATCHES {
            problems.push(format!(
                "controller {name}: describes {related} related watches; the host keeps the first {}",
                crate::runtime::MAX_RELATED_WATCHES
            ));
        }
        problems.extend(self.settings_problems(&description));
        if !problems.is_empty() {
            return Err(problems);
        }
        let related: Vec<String> = description
            .related
            .iter()
            .map(ToString::to_string)
            .collect();
        let mut sharding = String::new();
        if let Some(label) = &description.shard_label {
            sharding.push_str(&format!(", shards by label {label}"));
        }
        if !description.every_shard.is_empty() {
            sharding.push_str(&format!(
                ", watched by every shard: {:?}",
                description.every_shard
            ));
        }
        Ok(format!(
            "controller {name}: watches {:?}{}{sharding}",
            description.watches,
            if related.is_empty() {
                String::new()
            } else {
                format!(", related: {}", related.join("; "))
            }
        ))
    }

    /// Where its guest may send HTTP requests.
    pub(crate) fn http_allow(&self) -> &crate::outbound::AllowList {
        &self.settings.http_allow
    }

    /// How it runs as leases, from its config's `shards` and what its
    /// component's `describe` answered (`Err`: why it could not be asked);
    /// a controller of one lease per shard's worth of objects (unsharded,
    /// or one shard) needs no answer.
    fn rule_from(
        &self,
        described: Result<&crate::runtime::Description, String>,
    ) -> Result<ShardingRule, String> {
        rule_of(&self.settings, described)
    }

    /// How it runs as leases ([`Prepared::rule_from`]), asking its
    /// component when it is sharded: what `leasehold check` and `leasehold
    /// reshard` compare with the database's record.
    pub(crate) async fn sharding_rule(&self, cluster: &str) -> Result<ShardingRule, String> {
        if self.settings.shards.is_none_or(|n| n <= 1) {
            return self.rule_from(Err(String::new()));
        }
        let described = self.describe_offline(cluster).await;
        self.rule_from(described.as_ref().map_err(ToString::to_string))
    }

    /// What a throwaway instance's `describe` answers: on an empty
    /// in-memory store under a fence no authority granted (any write it
    /// tried would be refused).
    async fn describe_offline(
        &self,
        cluster: &str,
    ) -> Result<crate::runtime::Description, crate::runtime::GuestError> {
        let authority = Arc::new(crate::authority::memory::MemoryAuthority::new());
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new(authority));
        let fence = crate::fence::Fence {
            key: crate::fence::LeaseKey::new(cluster, self.name()),
            epoch: crate::fence::Epoch(1),
            holder: "leasehold-check".into(),
        };
        let revocation = self.compiled.revocation();
        let mut instance = self
            .compiled
            .instantiate(fence, store, Arc::default(), revocation)
            .await?;
        instance.describe().await
    }

    /// Every way its `[controllers.settings]` break the schema its
    /// component describes (none without one), each naming the controller
    /// and the key, never a value.
    fn settings_problems(&self, description: &crate::runtime::Description) -> Vec<String> {
        let name = self.name();
        let Some(text) = &description.settings_schema else {
            return Vec::new();
        };
        let schema = match crate::settings_schema::SettingsSchema::parse(text) {
            Ok(schema) => schema,
            Err(e) => return vec![format!("controller {name}: {e}")],
        };
        let settings: serde_json::Value =
            serde_json::from_str(self.settings.settings.as_json()).unwrap_or_default();
        schema
            .validate(&settings)
            .into_iter()
            .map(|problem| {
                format!(
                    "controller {name}: [controllers.settings] do not fit its schema: {problem}"
                )
            })
            .collect()
    }

    /// Settings values that are `http(s)` URLs `http_allow` does not
    /// cover, for a warning: the guest could not call them.
    pub(crate) fn uncovered_urls(&self) -> Vec<String> {
        let settings: serde_json::Value =
            serde_json::from_str(self.settings.settings.as_json()).unwrap_or_default();
        crate::settings_schema::uncovered_urls(&settings, &self.settings.http_allow)
    }
}

/// How `settings` runs as leases (see [`Prepared::rule_from`]).
fn rule_of(
    settings: &ControllerConfig,
    described: Result<&crate::runtime::Description, String>,
) -> Result<ShardingRule, String> {
    let shards = settings.shards;
    if shards.is_none_or(|n| n <= 1) {
        return Ok(ShardingRule::new(&settings.name, shards, None, Vec::new()));
    }
    let description = described.map_err(|e| {
        format!(
            "controller {}: could not ask its component how it shards ({e})",
            settings.name
        )
    })?;
    Ok(ShardingRule::new(
        &settings.name,
        shards,
        description.shard_label.clone(),
        description.every_shard.clone(),
    ))
}

/// Refuse controllers whose settings do not fit the schema their
/// component describes: every problem of every controller, each naming
/// the controller and the key. A component that cannot be described here
/// is left to its tenure's start, which reports it. Each controller keeps
/// how it runs as leases, from the same answer ([`Prepared::rule_from`]).
pub(crate) async fn check_settings(
    prepared: &mut [Prepared],
    cluster: &str,
) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    for controller in prepared {
        let described = controller.describe_offline(cluster).await;
        if let Ok(description) = &described {
            problems.extend(controller.settings_problems(description));
        }
        controller.sharding =
            Some(controller.rule_from(described.as_ref().map_err(ToString::to_string)));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// One supervised controller.
struct Running {
    settings: ControllerConfig,
    /// A hash of the component's bytes when it was loaded.
    digest: u64,
    /// What it runs, kept so a change of settings alone need not compile
    /// again (nor start its outbound counters over).
    compiled: CompiledController,
    /// One supervised lease per shard (one alone when not sharded).
    units: Vec<Unit>,
}

/// The supervisor of one of a controller's leases.
struct Unit {
    lease: String,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Whether a controller running with `current` settings from a component
/// hashing to `current_digest` can take `next` without compiling again:
/// the bytes are the same, and so are the directory grants (linked into
/// the compiled controller); everything else the guest runs under is in
/// its limits ([`CompiledController::with_limits`]).
fn keeps_compiled(
    current: &ControllerConfig,
    current_digest: u64,
    next: &ControllerConfig,
    next_digest: u64,
) -> bool {
    // The roots of `http_ca` are read when a controller is compiled.
    current_digest == next_digest && current.dirs == next.dirs && current.http_ca == next.http_ca
}

/// What a reload changed, by controller name.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ReloadSummary {
    /// Started.
    pub added: Vec<String>,
    /// Stopped, leases released.
    pub removed: Vec<String>,
    /// Stopped and started again with new settings or a new component.
    pub restarted: Vec<String>,
    /// Left running as they were.
    pub unchanged: Vec<String>,
}

/// Wait up to `bound` for a stopping supervisor's `task`; past it, abort
/// the task (dropping its tenure revokes and aborts its guest, and its
/// lease expires) and wait for the abort to land. Returns whether the
/// supervisor stopped by itself.
async fn end_supervisor(
    name: &str,
    holder: &str,
    mut task: JoinHandle<()>,
    bound: Duration,
) -> bool {
    if tokio::time::timeout(bound, &mut task).await.is_ok() {
        return true;
    }
    tracing::error!(
        controller = name,
        holder,
        "the controller did not stop in time; ending its supervisor (its lease will expire)"
    );
    task.abort();
    if tokio::time::timeout(crate::timeouts::SUPERVISOR_STOP_MARGIN, &mut task)
        .await
        .is_err()
    {
        tracing::error!(
            controller = name,
            holder,
            "the controller's supervisor did not end after its abort"
        );
    }
    false
}

/// The supervised controllers of one host.
pub(crate) struct Controllers {
    shared: Shared,
    running: BTreeMap<String, Running>,
}

fn digest(bytes: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// A controller's settings and its component's bytes, read.
struct Source {
    settings: ControllerConfig,
    bytes: Vec<u8>,
    /// A hash of `bytes`.
    digest: u64,
}

/// Read the component of each of `settings`, reporting every failure.
fn read(settings: Vec<ControllerConfig>) -> Result<Vec<Source>, Vec<String>> {
    let mut sources = Vec::new();
    let mut problems = Vec::new();
    for settings in settings {
        match std::fs::read(&settings.component) {
            Ok(bytes) => sources.push(Source {
                digest: digest(&bytes),
                settings,
                bytes,
            }),
            Err(e) => problems.push(format!(
                "controller {}: component {}: cannot read it: {e}",
                settings.name,
                settings.component.display()
            )),
        }
    }
    if problems.is_empty() {
        Ok(sources)
    } else {
        Err(problems)
    }
}

/// Compile `sources`, reporting every failure (one line each), off the
/// async threads.
async fn compile(runtime: &Runtime, sources: Vec<Source>) -> Result<Vec<Prepared>, Vec<String>> {
    let runtime = runtime.clone();
    tokio::task::spawn_blocking(move || {
        let mut prepared = Vec::new();
        let mut problems = Vec::new();
        for Source {
            settings,
            bytes,
            digest,
        } in sources
        {
            match runtime.compile(
                &settings.name,
                &settings.component.display().to_string(),
                &bytes,
                settings.guest_limits(),
                settings.dir_grants(),
            ) {
                Ok(compiled) => prepared.push(Prepared {
                    digest,
                    settings,
                    compiled,
                    sharding: None,
                }),
                Err(e) => problems.push(e.to_string()),
            }
        }
        if problems.is_empty() {
            Ok(prepared)
        } else {
            Err(problems)
        }
    })
    .await
    .unwrap_or_else(|e| Err(vec![format!("compiling components failed: {e}")]))
}

/// Read and compile the components of `settings`, reporting every failure.
pub(crate) async fn prepare(
    runtime: &Runtime,
    settings: Vec<ControllerConfig>,
) -> Result<Vec<Prepared>, Vec<String>> {
    compile(runtime, read(settings)?).await
}

/// A controller's `shards` as a user reads it: the key absent is "unset".
fn shard_count(shards: Option<u32>) -> String {
    shards.map_or_else(|| "unset".to_string(), |n| n.to_string())
}

/// The sections a reload cannot change, by their config names, where
/// `next` differs from `current`.
fn fixed_changes(current: &Config, next: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if current.cluster != next.cluster {
        changed.push("cluster");
    }
    if current.holder != next.holder {
        changed.push("holder");
    }
    if current.database != next.database {
        changed.push("[database]");
    }
    if current.data_dir != next.data_dir {
        changed.push("data_dir");
    }
    if current.http != next.http {
        changed.push("[http]");
    }
    if current.runtime != next.runtime {
        changed.push("[runtime]");
    }
    changed
}

impl Controllers {
    pub(crate) fn new(shared: Shared) -> Self {
        Self {
            shared,
            running: BTreeMap::new(),
        }
    }

    /// Start supervising a prepared controller: one supervisor per lease
    /// it runs as (its shards' `NAME-0 …`, or `NAME` alone).
    pub(crate) fn start(&mut self, prepared: Prepared) {
        let Prepared {
            settings,
            digest,
            compiled,
            sharding,
        } = prepared;
        // Every acquire of its leases is judged by how it runs as leases
        // (ARCHITECTURE, "Sharded controllers"); a sharded controller whose
        // component was not asked leads nothing.
        let sharding =
            sharding.unwrap_or_else(|| rule_of(&settings, Err("it was not described".into())));
        let units = settings
            .leases()
            .into_iter()
            .map(|(lease, shard)| {
                let unit = match shard {
                    // Each shard is its own controller unit: its own
                    // write quotas and outbound tallies, the same code.
                    Some(shard) => {
                        self.shared.status.set_shard(&lease, &settings.name, shard);
                        let unit = compiled
                            .as_controller(&lease, settings.guest_limits())
                            .with_shard(shard);
                        match &sharding {
                            Ok(rule) if shard.count > 1 => {
                                unit.led_under(rule.label.clone(), rule.every_shard.clone())
                            }
                            _ => unit,
                        }
                    }
                    None => compiled.clone(),
                };
                self.start_unit(&settings, lease, unit, sharding.clone())
            })
            .collect();
        self.running.insert(
            settings.name.clone(),
            Running {
                settings,
                digest,
                compiled,
                units,
            },
        );
    }

    fn start_unit(
        &self,
        settings: &ControllerConfig,
        lease: String,
        compiled: CompiledController,
        sharding: Result<ShardingRule, String>,
    ) -> Unit {
        let (stop, stopping) = watch::channel(false);
        let status = self.shared.status.add_controller(&lease);
        status.metrics.health.set_rule(settings.degraded);
        // The status outlives restarts of the controller: /metrics keeps
        // counting across them.
        status.metrics.outbound.attach(compiled.outbound().clone());
        let supervisor = Supervisor::new(
            SupervisorConfig {
                cluster: self.shared.cluster.clone(),
                holder: self.shared.holder.clone(),
                timing: settings.timing(),
                backoff_min: settings.backoff_min,
                backoff_max: settings.backoff_max,
                max_queue: settings.max_queue,
                shutdown_grace: crate::timeouts::SHUTDOWN_GRACE,
            },
            self.shared.authority.clone(),
            self.shared.renewer.clone(),
            self.shared.store.clone(),
            compiled,
            status,
            self.shared.identity.clone(),
            stopping,
        )
        .with_crash_detection(settings.crash_detection)
        .with_heartbeat(self.shared.heartbeat.clone())
        .with_sharding(sharding);
        Unit {
            lease,
            stop,
            task: tokio::spawn(supervisor.run()),
        }
    }

    /// Stop the named controllers together and wait for each (bounded by
    /// [`stop_bound`]): each finishes or aborts its reconcile and releases
    /// its lease before its supervisor returns. A supervisor that misses
    /// the bound is ended, not left behind: its task is aborted, which
    /// revokes and aborts its guest, and awaited, so a controller started
    /// again under the same name never runs beside its old supervisor.
    pub(crate) async fn stop(&mut self, names: &[String]) {
        let stopping: Vec<Unit> = names
            .iter()
            .filter_map(|name| self.running.remove(name))
            .flat_map(|running| running.units)
            .collect();
        for unit in &stopping {
            let _ = unit.stop.send(true);
        }
        for unit in stopping {
            end_supervisor(&unit.lease, &self.shared.holder, unit.task, stop_bound()).await;
        }
    }

    /// Stop every controller (shutdown).
    pub(crate) async fn stop_all(&mut self) {
        let names: Vec<String> = self.running.keys().cloned().collect();
        self.stop(&names).await;
    }

    /// Apply a reloaded config: refuse it whole (changing nothing) when it
    /// changes a setting that only takes effect at start-up, does not fit
    /// the engine, or has a component that does not compile; otherwise
    /// stop the removed and changed controllers, then start the changed
    /// and added ones. Controllers left as they were keep their tenures.
    pub(crate) async fn reload(
        &mut self,
        runtime: &Runtime,
        current: &Config,
        next: &Config,
    ) -> Result<ReloadSummary, Vec<String>> {
        let fixed = fixed_changes(current, next);
        if !fixed.is_empty() {
            return Err(vec![format!(
                "{} changed: these apply only at start-up; restart the host to change them",
                fixed.join(", ")
            )]);
        }
        runtime.fits(&next.engine_config()).map_err(|e| {
            vec![format!(
                "the new controllers need {e}; restart the host to apply them"
            )]
        })?;

        // Resharding is not a reload: the running shards would hand
        // objects over while the new ones start (see ARCHITECTURE,
        // "Sharded controllers", for the procedure).
        let resharded: Vec<String> = next
            .controllers
            .iter()
            .filter_map(|c| {
                let running = self.running.get(&c.name)?;
                (running.settings.shards != c.shards).then(|| {
                    format!(
                        "controller {:?}: shards changed from {} to {}; a reload cannot reshard a \
                         running controller. Remove it from the config on every host and reload, \
                         wait until `leasehold leases` shows its leases released, record the new \
                         count with `leasehold reshard --config FILE NAME`, then add it back \
                         with the new count (docs/operations.md, \"Changing a controller's \
                         sharding\")",
                        c.name,
                        shard_count(running.settings.shards),
                        shard_count(c.shards)
                    )
                })
            })
            .collect();
        if !resharded.is_empty() {
            return Err(resharded);
        }

        // Restart a controller only when its settings or its component's
        // bytes changed; compile only what will start, and only when its
        // settings alone cannot be applied to what runs now.
        let mut summary = ReloadSummary::default();
        let mut changed = Vec::new();
        let mut reused = Vec::new();
        for source in read(next.controllers.clone())? {
            let name = source.settings.name.clone();
            match self.running.get(&name) {
                None => summary.added.push(name),
                Some(running)
                    if running.settings == source.settings && running.digest == source.digest =>
                {
                    summary.unchanged.push(name);
                    continue;
                }
                Some(running) => {
                    summary.restarted.push(name);
                    if keeps_compiled(
                        &running.settings,
                        running.digest,
                        &source.settings,
                        source.digest,
                    ) {
                        reused.push(Prepared {
                            compiled: running.compiled.with_limits(source.settings.guest_limits()),
                            settings: source.settings,
                            digest: source.digest,
                            sharding: None,
                        });
                        continue;
                    }
                }
            }
            changed.push(source);
        }
        let mut to_start = compile(runtime, changed).await?;
        to_start.extend(reused);
        // Settings that no longer fit the schema refuse the reload whole,
        // before anything stops.
        check_settings(&mut to_start, &next.cluster).await?;
        summary.removed = self
            .running
            .keys()
            .filter(|name| !next.controllers.iter().any(|c| &c.name == *name))
            .cloned()
            .collect();

        let removed_leases: Vec<String> = summary
            .removed
            .iter()
            .filter_map(|name| self.running.get(name))
            .flat_map(|running| running.units.iter().map(|unit| unit.lease.clone()))
            .collect();
        let mut stopping = summary.removed.clone();
        stopping.extend(summary.restarted.iter().cloned());
        self.stop(&stopping).await;
        for lease in &removed_leases {
            self.shared.status.remove_controller(lease);
        }
        for prepared in to_start {
            self.start(prepared);
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_supervisor_that_misses_its_stop_bound_is_ended_not_detached() {
        let (guard, mut dropped) = tokio::sync::oneshot::channel::<()>();
        let stuck = tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await
        });
        let stopped = end_supervisor("c", "h", stuck, Duration::from_secs(1)).await;
        assert!(!stopped, "a stuck supervisor reported as stopped");
        // Its future (and the guard with it) was dropped before
        // `end_supervisor` returned: nothing of it runs on.
        assert_eq!(
            dropped.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Closed),
            "the stuck supervisor was left running"
        );

        let quick = tokio::spawn(async {});
        assert!(end_supervisor("c", "h", quick, Duration::from_secs(1)).await);
    }

    #[test]
    fn a_change_of_settings_alone_keeps_the_compiled_component() {
        let dir = std::env::temp_dir().join(format!("leasehold-reload-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("c.wasm"), b"").unwrap();
        let parse = |extra: &str| {
            let text = format!(
                "cluster = \"a\"\n[[controllers]]\nname = \"c\"\ncomponent = \"c.wasm\"\n{extra}\n"
            );
            let config =
                Config::parse_with(&text, &dir, &crate::config::Environment::default()).unwrap();
            config.controllers[0].clone()
        };
        let before = parse("http_allow = [\"https://a.example.com\"]");
        for next in [
            parse("http_allow = [\"https://b.example.com\"]"),
            parse(""),
            parse("memory_limit = \"32MiB\"\nmax_creates_per_second = 3"),
            parse("lease_ttl = \"20s\""),
        ] {
            assert_ne!(before, next);
            assert!(keeps_compiled(&before, 7, &next, 7), "{next:?}");
        }
        // New bytes, or other directories linked in: compile again.
        assert!(!keeps_compiled(&before, 7, &before, 8));
        let granted = parse("dirs = [{ host = \"data\", guest = \"/data\" }]");
        assert!(!keeps_compiled(&before, 7, &granted, 7));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn settings_fixed_at_start_up_are_named() {
        let text = |cluster: &str, listen: &str| {
            format!("cluster = \"{cluster}\"\nholder = \"h\"\n[http]\nlisten = \"{listen}\"\n")
        };
        let base = Config::parse(&text("east", "127.0.0.1:8080"), ".").unwrap();
        let same = Config::parse(&text("east", "127.0.0.1:8080"), ".").unwrap();
        let moved = Config::parse(&text("west", "127.0.0.1:9090"), ".").unwrap();
        assert!(fixed_changes(&base, &same).is_empty());
        assert_eq!(fixed_changes(&base, &moved), vec!["cluster", "[http]"]);
    }
}
