//! Compiling controllers once and running one guest instance per tenure.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::engine::{self, CacheStats, EngineConfig};
use super::environment::{
    GuestEnvironment, SeededRandom, SimulatedMonotonicClock, SimulatedWallClock,
};
use super::host::{
    http::{HttpHost, OutboundPolicy},
    logging::LoggingHost,
    settings::SettingsHost,
    store::StoreHost,
    tenure::TenureHost,
};
use super::state::{GuestLimiter, GuestState, Interrupt};
use super::stdio::CapturedOutput;
use super::worlds::{self, Answer, Bound, Pre, WorldVersion};
use super::{
    CommitCounters, ComponentError, DirGrant, GuestError, GuestLimits, Revocation, RuntimeError,
};
use crate::fence::Fence;
use crate::outbound::{OutboundCounters, TenureOutbound};
use crate::quota::WriteQuota;
use crate::shard::Shard;
use crate::store::Store as StoreBackend;

/// The shared engine and the linker every controller is instantiated with.
#[derive(Clone)]
pub struct Runtime {
    engine: Engine,
    linker: Arc<Linker<GuestState>>,
    pooling: bool,
    /// What the engine was sized for at start-up (the pool's slots).
    sized_for: (u32, usize),
    /// The on-disk compile cache, if configured.
    cache: Option<wasmtime::Cache>,
    /// Its folder, where compiles sharing it take turns
    /// ([`super::compile_lock`]).
    cache_dir: Option<std::path::PathBuf>,
}

impl Runtime {
    /// Build the engine, start its epoch ticker, and prepare the linker
    /// (WASI p2 without ambient authority, plus the Leasehold interfaces of
    /// every supported version, [`WorldVersion::SUPPORTED`]).
    pub fn new(config: &EngineConfig) -> Result<Self, RuntimeError> {
        let built = engine::build(config)?;
        engine::spawn_ticker(&built.engine, crate::timeouts::EPOCH_TICK)?;
        let mut linker = Linker::<GuestState>::new(&built.engine);
        let link_err = |e: wasmtime::Error| RuntimeError::Engine(format!("linking host APIs: {e}"));
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link_err)?;
        // Only `wasi:http/outgoing-handler` and its types: the guest gets no
        // incoming handler, and every request passes `host::http`'s hooks.
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(link_err)?;
        worlds::link(&mut linker).map_err(link_err)?;
        Ok(Self {
            engine: built.engine,
            linker: Arc::new(linker),
            pooling: built.pooling,
            sized_for: (config.max_guests, config.memory_bytes),
            cache_dir: built.cache.as_ref().and(config.cache_dir.clone()),
            cache: built.cache,
        })
    }

    /// What the on-disk compile cache did for this engine so far; `None`
    /// without a `cache_dir`.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(CacheStats::of)
    }

    /// Whether controllers that need `config` fit this engine, or why they
    /// need a restart: the pooling allocator's slots were sized at start-up
    /// for a number of guests, each with a largest memory. Without the pool
    /// everything fits.
    pub fn fits(&self, config: &EngineConfig) -> Result<(), String> {
        let (guests, memory) = self.sized_for;
        if !self.pooling {
            return Ok(());
        }
        if config.max_guests > guests {
            return Err(format!(
                "{} controllers, but the engine's pool was sized at start-up for {guests}",
                config.max_guests
            ));
        }
        if config.memory_bytes > memory {
            return Err(format!(
                "a memory_limit of {} bytes, but the engine's pool was sized at start-up for at most {memory}",
                config.memory_bytes
            ));
        }
        Ok(())
    }

    /// Whether the pooling allocator is in use.
    pub fn pooling(&self) -> bool {
        self.pooling
    }

    /// The shared engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Load, compile (or fetch from the cache) and link a controller's
    /// component file.
    pub fn load(
        &self,
        controller: &str,
        path: &Path,
        limits: GuestLimits,
        grants: Vec<DirGrant>,
    ) -> Result<CompiledController, ComponentError> {
        let problem = |problem: String| ComponentError {
            controller: controller.to_string(),
            path: path.display().to_string(),
            problem,
        };
        let bytes = std::fs::read(path).map_err(|e| problem(format!("cannot read it: {e}")))?;
        self.compile(
            controller,
            &path.display().to_string(),
            &bytes,
            limits,
            grants,
        )
    }

    /// Compile and link a controller from bytes; `origin` names them in
    /// errors. The version of `leasehold:controller` the component targets
    /// is read from its exports and imports ([`worlds::detect`]); a
    /// component of a version this host does not run is refused with a
    /// message naming that version and the supported ones.
    pub fn compile(
        &self,
        controller: &str,
        origin: &str,
        bytes: &[u8],
        limits: GuestLimits,
        grants: Vec<DirGrant>,
    ) -> Result<CompiledController, ComponentError> {
        let problem = |problem: String| ComponentError {
            controller: controller.to_string(),
            path: origin.to_string(),
            problem,
        };
        check_header(bytes).map_err(problem)?;
        for grant in &grants {
            if !grant.host_path.is_dir() {
                return Err(problem(format!(
                    "granted directory {} does not exist or is not a directory",
                    grant.host_path.display()
                )));
            }
        }
        // Replicas sharing the cache take turns: the first compiles and
        // stores, the others then read what it stored.
        let turn = self
            .cache_dir
            .as_deref()
            .and_then(|dir| super::compile_lock::hold(dir, bytes));
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| problem(format!("cannot compile it: {e:#}")))?;
        drop(turn);
        let version = {
            let ty = component.component_type();
            let imports: Vec<&str> = ty.imports(&self.engine).map(|(name, _)| name).collect();
            let exports: Vec<&str> = ty.exports(&self.engine).map(|(name, _)| name).collect();
            worlds::detect(&imports, &exports).map_err(problem)?
        };
        let pre = self.linker.instantiate_pre(&component).map_err(|e| {
            problem(format!(
                "it targets {version} but does not fit its world `controller` (build it \
                 against that version's WIT, e.g. with the leasehold-guest SDK): {e:#}"
            ))
        })?;
        let pre = Pre::new(version, pre).map_err(|e| {
            let export = format!("{}/reconciler@{}", worlds::PACKAGE, version.number());
            let diagnosis =
                match worlds::missing_reconciler_functions(&self.engine, &component, version) {
                    Some(missing) if !missing.is_empty() => format!(
                        "its {export} export lacks {}: the host calls describe and reconcile \
                         (rebuild it against that version's WIT; with componentize-py, \
                         define both methods on the exported `Reconciler`)",
                        missing.join(" and ")
                    ),
                    Some(_) => format!(
                        "its {export} export has describe and reconcile, but not with the \
                         types {version} gives them (built from an edited or older copy of \
                         the WIT?)"
                    ),
                    None => format!("it has no {export} export instance"),
                };
            problem(format!(
                "it does not export {export} as that version defines it: {diagnosis}: {e:#}"
            ))
        })?;
        let http_tls =
            crate::outbound::controller_tls(limits.http_ca.as_deref()).map_err(problem)?;
        Ok(CompiledController {
            name: controller.to_string(),
            pre,
            engine: self.engine.clone(),
            quota: Arc::new(WriteQuota::new(controller, limits.quota)),
            outbound: Arc::default(),
            http_tls,
            limits,
            grants,
            shard: None,
            led_sharding: None,
            environment: GuestEnvironment::Host,
        })
    }
}

/// Tell a component from a core module or from something that is not Wasm
/// at all, before compiling, so the error says what to do.
fn check_header(bytes: &[u8]) -> Result<(), String> {
    const MAGIC: &[u8] = b"\0asm";
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err("it is not a WebAssembly file (no \\0asm header)".into());
    }
    // Core modules have version 1 with layer 0; components have layer 1.
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(
            "it is a core WebAssembly module, not a component; build the controller \
             for the wasm32-wasip2 target"
                .into(),
        );
    }
    Ok(())
}

/// A controller compiled once and linked against the host APIs: the
/// template every tenure's instance is created from.
#[derive(Clone)]
pub struct CompiledController {
    name: String,
    pre: Pre,
    engine: Engine,
    limits: GuestLimits,
    grants: Vec<DirGrant>,
    /// Shared by every instance and tenure made from this controller.
    quota: Arc<WriteQuota>,
    /// Outbound request tallies of every instance and tenure.
    outbound: Arc<OutboundCounters>,
    /// The roots its outbound HTTPS trusts (the public ones, plus
    /// `http_ca`).
    http_tls: Arc<rustls::ClientConfig>,
    /// The shard this unit of a sharded controller runs as; `None`: the
    /// controller is not sharded and owns every object.
    shard: Option<Shard>,
    /// The shard label and every-shard kinds (sorted) its leases are led
    /// under, as the host judged them against the database's record
    /// ([`crate::authority::sharding`]): a `describe` that declares others
    /// fails the guest's start. `None`: not compared.
    led_sharding: Option<(Option<String>, Vec<String>)>,
    /// Where its instances' clocks, randomness and outbound requests come
    /// from: the machine's, or a simulation's (`leasehold sim`).
    environment: GuestEnvironment,
}

/// What a controller says it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    /// Kinds whose changes trigger a reconcile.
    pub watches: Vec<String>,
    /// Periodic full resync; `None` for never (besides tenure start).
    pub resync_period: Option<Duration>,
    /// Kinds whose changes reconcile the objects they map to (0.2.0
    /// `description.related`; none for a 0.1.0 guest), as the guest gave
    /// them: [`RelatedWatch::check`] tells a usable one.
    pub related: Vec<RelatedWatch>,
    /// The label whose value decides an object's shard (0.3.0
    /// `description.shard-label`; none before), as the guest gave it:
    /// [`Description::check_sharding`] tells a usable one.
    pub shard_label: Option<String>,
    /// Kinds every shard watches (0.3.0 `description.every-shard`; none
    /// before).
    pub every_shard: Vec<String>,
    /// The settings' JSON Schema (0.4.0 `description.settings-schema`;
    /// none before), as the guest gave it: the config's settings are
    /// validated against it ([`crate::settings_schema`]).
    pub settings_schema: Option<String>,
}

impl Description {
    /// Whether the sharding this description declares is usable: a shard
    /// label of the syntax of a label key, and every-shard kinds of the
    /// syntax of a kind. `Err` names the first that is not.
    pub fn check_sharding(&self) -> Result<(), String> {
        check_sharding(self.shard_label.as_deref(), &self.every_shard)
    }
}

/// [`Description::check_sharding`] of what a `describe` answered, before
/// it becomes a [`Description`].
fn check_sharding(label: Option<&str>, every_shard: &[String]) -> Result<(), String> {
    if let Some(label) = label {
        crate::store::check_label_key(label).map_err(|e| format!("shard label: {e}"))?;
    }
    for kind in every_shard {
        crate::names::check_label("every-shard kind", kind).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// "Watch `kind` and map each change through `map`" (the WIT's
/// `related-watch`): the keys it maps to are reconciled with
/// [`ReconcileReason::Related`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelatedWatch {
    /// The kind whose changes are mapped.
    pub kind: String,
    /// How.
    pub map: RelatedMap,
}

/// How a change of a related kind maps to keys (the WIT's `related-map`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RelatedMap {
    /// To the changed object's owner; with `kind`, only owners of it.
    Owner {
        /// The owner kind queued, or `None` for any.
        kind: Option<String>,
    },
    /// Label `key` with value `V` maps to `target_kind/V`.
    Label {
        /// The label key.
        key: String,
        /// The kind the label's value names.
        target_kind: String,
    },
}

/// At most this many related watches in one description.
pub const MAX_RELATED_WATCHES: usize = 32;

impl RelatedWatch {
    /// Whether the watch is usable: every kind a DNS label, the label key
    /// of label-key syntax. The error names what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let named = |what: &'static str, kind: &str| {
            crate::names::check_label(what, kind)
                .map_err(|e| format!("related watch of kind {:?}: {e}", self.kind))
        };
        named("related kind", &self.kind)?;
        match &self.map {
            RelatedMap::Owner { kind: None } => Ok(()),
            RelatedMap::Owner { kind: Some(owner) } => named("owner kind", owner),
            RelatedMap::Label { key, target_kind } => {
                crate::store::check_label_key(key)
                    .map_err(|e| format!("related watch of kind {}: {e}", self.kind))?;
                named("target kind", target_kind)
            }
        }
    }
}

impl std::fmt::Display for RelatedWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.map {
            RelatedMap::Owner { kind: None } => write!(f, "{} by owner", self.kind),
            RelatedMap::Owner { kind: Some(kind) } => {
                write!(f, "{} by owner of kind {kind}", self.kind)
            }
            RelatedMap::Label { key, target_kind } => {
                write!(f, "{} by label {key} naming {target_kind}", self.kind)
            }
        }
    }
}

/// Why the host calls a reconcile: the 0.2.0 `reconcile-reason`, which a
/// 0.1.0 guest never sees.
///
/// The work queue holds one entry per key; when several causes meet in one
/// entry, the strongest is its reason ([`ReconcileReason::strongest`]):
/// `Change`, then `Related`, then `Retry`, then `Requeue`, then `Resync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileReason {
    /// The object itself was created, updated or deleted (the change
    /// stream of its kind).
    Change,
    /// The guest's timer (`requeue-after`) came due.
    Requeue,
    /// A full resync: tenure start, the guest's period, a queue overflow.
    Resync,
    /// The previous reconcile of the key failed and its backoff passed.
    Retry,
    /// A change of an object of a related kind mapped to this key
    /// ([`RelatedWatch`]).
    Related,
}

impl ReconcileReason {
    /// The rank in the merge order: higher wins.
    fn rank(self) -> u8 {
        match self {
            ReconcileReason::Resync => 0,
            ReconcileReason::Requeue => 1,
            ReconcileReason::Retry => 2,
            ReconcileReason::Related => 3,
            ReconcileReason::Change => 4,
        }
    }

    /// The reason of an entry that both causes were merged into: a change
    /// is work the guest has not seen (of the object itself, then of a
    /// related one), a retry repeats work that failed, a
    /// requeue is the guest's own timer, a resync only the safety net.
    pub fn strongest(self, other: ReconcileReason) -> ReconcileReason {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }

    /// The WIT name: `change`, `requeue`, `resync`, `retry`, `related`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileReason::Change => "change",
            ReconcileReason::Requeue => "requeue",
            ReconcileReason::Resync => "resync",
            ReconcileReason::Retry => "retry",
            ReconcileReason::Related => "related",
        }
    }
}

impl std::fmt::Display for ReconcileReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of a reconcile from a healthy guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// Nothing more to do.
    Done,
    /// Reconcile again after the delay.
    RequeueAfter(Duration),
    /// The guest reported a failure; retry with backoff or after the delay.
    Failed {
        /// The guest's message.
        message: String,
        /// The guest's requested delay.
        retry_after: Option<Duration>,
    },
    /// The guest saw `fenced` and stopped.
    Fenced,
}

impl CompiledController {
    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version of `leasehold:controller` its component targets.
    pub fn world(&self) -> WorldVersion {
        self.pre.version()
    }

    /// The limits its instances run under.
    pub fn limits(&self) -> &GuestLimits {
        &self.limits
    }

    /// The same compiled controller with other limits (no recompilation)
    /// and fresh quota state.
    pub fn with_limits(&self, limits: GuestLimits) -> Self {
        Self {
            quota: Arc::new(WriteQuota::new(&self.name, limits.quota)),
            limits: self.keeping_http_ca(limits),
            ..self.clone()
        }
    }

    /// `limits` with this controller's `http_ca`: the roots its outbound
    /// HTTPS trusts are read when it is compiled, and stay those of the
    /// compiled controller (a new `http_ca` needs a new compile, as a
    /// reload does).
    fn keeping_http_ca(&self, limits: GuestLimits) -> GuestLimits {
        GuestLimits {
            http_ca: self.limits.http_ca.clone(),
            ..limits
        }
    }

    /// The same compiled component as another controller `name`, with
    /// `limits` and state of its own (write quotas, outbound tallies): no
    /// recompilation, nothing shared with `self` but the code (and the
    /// roots of its outbound HTTPS, see `keeping_http_ca`).
    pub fn as_controller(&self, name: &str, limits: GuestLimits) -> Self {
        let limits = self.keeping_http_ca(limits);
        Self {
            name: name.to_string(),
            quota: Arc::new(WriteQuota::new(name, limits.quota)),
            outbound: Arc::default(),
            limits,
            ..self.clone()
        }
    }

    /// The same unit as shard `shard` of its controller: its worker is
    /// woken for, and resyncs, only the objects of that shard, and its
    /// writes keep the rule for other shards' objects
    /// ([`Shard::check_write`]).
    pub fn with_shard(self, shard: Shard) -> Self {
        Self {
            shard: Some(shard),
            ..self
        }
    }

    /// The shard this unit runs as, if its controller is sharded.
    pub fn shard(&self) -> Option<Shard> {
        self.shard
    }

    /// The same unit, led under the shard label `label` and the
    /// every-shard kinds `every_shard` (the host's sharding, which the
    /// database's record agreed with): a tenure whose guest describes
    /// others fails its start ([`GuestError::Described`]) instead of
    /// reconciling by them.
    pub fn led_under(self, label: Option<String>, mut every_shard: Vec<String>) -> Self {
        every_shard.sort();
        every_shard.dedup();
        Self {
            led_sharding: Some((label, every_shard)),
            ..self
        }
    }

    /// The same unit whose instances live in `environment`: the machine's
    /// clocks, randomness and network ([`GuestEnvironment::Host`], what
    /// [`Runtime::compile`] gives), or a simulation's. The fence, the
    /// allow list, the bounds and the abort are the same in both.
    pub fn with_environment(self, environment: GuestEnvironment) -> Self {
        Self {
            environment,
            ..self
        }
    }

    /// The write quota state every instance of this controller shares.
    pub fn quota(&self) -> &Arc<WriteQuota> {
        &self.quota
    }

    /// The outbound request tallies every instance of this controller
    /// adds to (kept across [`with_limits`](Self::with_limits)).
    pub fn outbound(&self) -> &Arc<OutboundCounters> {
        &self.outbound
    }

    /// A new revocation switch for an instance of this controller. Create
    /// it before [`instantiate`](Self::instantiate) so the tenure's owner
    /// can abort even an instantiation that hangs.
    pub fn revocation(&self) -> Revocation {
        Revocation::new(&self.engine)
    }

    /// A fresh store and instance for the tenure `fence` (G1), aborted when
    /// `revocation` is revoked.
    pub async fn instantiate(
        &self,
        fence: Fence,
        backend: Arc<dyn StoreBackend>,
        counters: Arc<CommitCounters>,
        revocation: Revocation,
    ) -> Result<GuestInstance, GuestError> {
        self.instantiate_with(fence, backend, counters, revocation, Arc::default())
            .await
    }

    /// [`instantiate`](Self::instantiate), with the tally of the tenure's
    /// outbound requests kept by the caller (for the tenure history).
    pub async fn instantiate_with(
        &self,
        fence: Fence,
        backend: Arc<dyn StoreBackend>,
        counters: Arc<CommitCounters>,
        revocation: Revocation,
        tenure_outbound: Arc<TenureOutbound>,
    ) -> Result<GuestInstance, GuestError> {
        let limits = &self.limits;
        let fence_text = fence.to_string();
        let mut wasi = WasiCtxBuilder::new();
        // No inherited stdio, environment, arguments, network or files: the
        // builder starts empty; only what is configured here is granted.
        wasi.stdout(CapturedOutput::new(
            self.name.clone(),
            fence.epoch,
            "stdout",
            limits.stdio_bytes / 2,
            limits.log_line_bytes,
        ))
        .stderr(CapturedOutput::new(
            self.name.clone(),
            fence.epoch,
            "stderr",
            limits.stdio_bytes / 2,
            limits.log_line_bytes,
        ))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
        if let GuestEnvironment::Simulated(simulation) = &self.environment {
            // A simulated guest must be reproducible from its run's seed:
            // its clocks are the simulation's virtual ones, and both of its
            // random sources are seeded.
            let seed = simulation.random_seed();
            wasi.wall_clock(SimulatedWallClock(simulation.clone()))
                .monotonic_clock(SimulatedMonotonicClock(simulation.clone()))
                .secure_random(SeededRandom::new(seed))
                .insecure_random(SeededRandom::new(seed.rotate_left(32) ^ 0x5EED))
                .insecure_random_seed(u128::from(seed));
        }
        for grant in &self.grants {
            let perms = if grant.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            wasi.preopened_dir(&grant.host_path, &grant.guest_path, perms)
                .map_err(|e| GuestError::Trap {
                    controller: self.name.clone(),
                    fence: fence_text.clone(),
                    message: format!(
                        "cannot open granted directory {}: {e}",
                        grant.host_path.display()
                    ),
                })?;
        }
        let state = GuestState {
            wasi: wasi.build(),
            table: Default::default(),
            limiter: GuestLimiter {
                memory_bytes: limits.memory_bytes,
                table_elements: limits.table_elements,
                instances: limits.instances,
                tables: limits.tables,
                memories: limits.memories,
            },
            store: StoreHost::new(
                backend,
                fence.clone(),
                revocation.clone(),
                limits.payload_bytes,
                counters,
                self.quota.clone(),
            )
            .with_shard(self.shard),
            tenure: TenureHost::new(fence.clone(), self.shard.unwrap_or(Shard::WHOLE)),
            logging: LoggingHost::new(self.name.clone(), fence.epoch, limits.log_line_bytes),
            settings: SettingsHost::new(limits.settings.clone()),
            http: HttpHost::new(
                self.name.clone(),
                fence.clone(),
                revocation.clone(),
                OutboundPolicy {
                    allow: limits.http_allow.clone(),
                    limits: limits.http,
                    counters: self.outbound.clone(),
                    tls: self.http_tls.clone(),
                    forwarded: limits.http_forwarded_headers.clone(),
                    environment: self.environment.clone(),
                },
                tenure_outbound,
            ),
            revocation: revocation.clone(),
            deadline: None,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_callback(|ctx| {
            let state = ctx.data();
            if state.revocation.is_revoked() {
                return Err(Interrupt::Revoked.into());
            }
            if state.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Interrupt::Deadline.into());
            }
            // Yield at every tick so the task running us can observe a
            // revocation and drop this future even if the guest never calls
            // the host.
            Ok(UpdateDeadline::Yield(1))
        });
        store.set_epoch_deadline(1);
        let mut instance = GuestInstance {
            controller: self.name.clone(),
            fence,
            fence_text,
            store,
            bindings: None,
            revocation,
            deadline: limits.reconcile_deadline,
            memory_limit: limits.memory_bytes,
            counts: [
                ("instance", "max_instances", limits.instances),
                ("table", "max_tables", limits.tables),
                ("memory", "max_memories", limits.memories),
            ],
            poisoned: false,
            led_sharding: self.led_sharding.clone(),
        };
        let pre = self.pre.clone();
        let bindings = instance
            .guarded(|store| Box::pin(async move { pre.instantiate(store).await }))
            .await?;
        instance.bindings = Some(bindings);
        Ok(instance)
    }
}

/// One guest instance, alive for (at most) one tenure.
pub struct GuestInstance {
    controller: String,
    fence: Fence,
    fence_text: String,
    store: Store<GuestState>,
    bindings: Option<Bound>,
    revocation: Revocation,
    deadline: Duration,
    memory_limit: usize,
    /// The store's count limits: (what wasmtime counts, config key, limit).
    counts: [(&'static str, &'static str, usize); 3],
    poisoned: bool,
    /// [`CompiledController::led_under`].
    led_sharding: Option<(Option<String>, Vec<String>)>,
}

type CallFuture<'a, R> =
    std::pin::Pin<Box<dyn std::future::Future<Output = wasmtime::Result<R>> + Send + 'a>>;

impl GuestInstance {
    /// The handle that hard-aborts this instance.
    pub fn revocation(&self) -> Revocation {
        self.revocation.clone()
    }

    /// The tenure's fence.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// What this instance's commits wrote, kept to answer its reads; the
    /// worker confirms it from the change feed
    /// ([`OwnWrites::observe`](crate::runtime::host::own_writes::OwnWrites::observe)).
    pub fn own_writes(&self) -> Arc<crate::runtime::host::own_writes::OwnWrites> {
        self.store.data().store.own_writes()
    }

    /// Ask the guest what it watches.
    pub async fn describe(&mut self) -> Result<Description, GuestError> {
        let bindings = self.bindings()?;
        let description = self
            .guarded(|store| Box::pin(async move { bindings.describe(store).await }))
            .await?;
        let checked = check_sharding(description.shard_label.as_deref(), &description.every_shard);
        if let Err(problem) = checked {
            return Err(GuestError::Described {
                controller: self.controller.clone(),
                fence: self.fence_text.clone(),
                problem,
            });
        }
        if let Some((label, kinds)) = &self.led_sharding
            && self.store.data().tenure.shard().count > 1
        {
            let mut declared = description.every_shard.clone();
            declared.sort();
            declared.dedup();
            if description.shard_label != *label || declared != *kinds {
                return Err(GuestError::Described {
                    controller: self.controller.clone(),
                    fence: self.fence_text.clone(),
                    problem: format!(
                        "it describes the shard label {:?} and every-shard kinds {declared:?}, \
                         but its leases are led under the label {label:?} and kinds {kinds:?} \
                         (as the database records the controller's sharding): its description \
                         changed since this host started it; restart the controller to judge \
                         the new one",
                        description.shard_label
                    ),
                });
            }
        }
        if self.store.data().tenure.shard().count > 1 {
            self.store.data_mut().store.described(
                description.shard_label.clone(),
                description.every_shard.clone(),
            );
        }
        Ok(Description {
            watches: description.watches,
            related: description.related,
            shard_label: description.shard_label,
            every_shard: description.every_shard,
            settings_schema: description.settings_schema,
            resync_period: match description.resync_period_ms {
                0 => None,
                ms => Some(self.resync_period(Duration::from_millis(ms))),
            },
        })
    }

    /// Reconcile one object because it changed: the same as
    /// [`reconcile_because`](Self::reconcile_because) with
    /// [`ReconcileReason::Change`].
    pub async fn reconcile(&mut self, kind: &str, name: &str) -> Result<Reconciled, GuestError> {
        self.reconcile_because(kind, name, ReconcileReason::Change)
            .await
    }

    /// Reconcile one object, telling a 0.2.0 guest `reason` (a 0.1.0 guest
    /// is called as before, without it).
    pub async fn reconcile_because(
        &mut self,
        kind: &str,
        name: &str,
        reason: ReconcileReason,
    ) -> Result<Reconciled, GuestError> {
        let bindings = self.bindings()?;
        let (kind, name) = (kind.to_string(), name.to_string());
        let result = self
            .guarded(|store| {
                Box::pin(async move { bindings.reconcile(store, &kind, &name, reason).await })
            })
            .await?;
        Ok(match result {
            Answer::Done => Reconciled::Done,
            Answer::RequeueAfter(ms) => Reconciled::RequeueAfter(Duration::from_millis(ms)),
            Answer::Fenced => Reconciled::Fenced,
            Answer::Failed {
                message,
                retry_after_ms,
            } => Reconciled::Failed {
                message: crate::text::truncate(&message, 4096).to_string(),
                retry_after: retry_after_ms.map(Duration::from_millis),
            },
        })
    }

    /// The guest's resync period within [`crate::timeouts::MIN_RESYNC_PERIOD`]
    /// and [`crate::timeouts::MAX_RESYNC_PERIOD`]: a guest must not make
    /// the host list its kinds in a loop, nor overflow the clock.
    fn resync_period(&self, asked: Duration) -> Duration {
        use crate::timeouts::{MAX_RESYNC_PERIOD, MIN_RESYNC_PERIOD};
        let period = asked.clamp(MIN_RESYNC_PERIOD, MAX_RESYNC_PERIOD);
        if period != asked {
            tracing::warn!(
                controller = self.controller,
                epoch = self.fence.epoch.0,
                asked = ?asked,
                using = ?period,
                min = ?MIN_RESYNC_PERIOD,
                max = ?MAX_RESYNC_PERIOD,
                "the guest's resync period is out of bounds; using the nearest bound"
            );
        }
        period
    }

    fn bindings(&self) -> Result<Bound, GuestError> {
        match (&self.bindings, self.poisoned) {
            (Some(b), false) => Ok(b.clone()),
            _ => Err(GuestError::Poisoned {
                controller: self.controller.clone(),
                fence: self.fence_text.clone(),
            }),
        }
    }

    /// Run one guest call under the revocation and the deadline. Any
    /// failure poisons the instance: the caller must drop it (G3, G4).
    async fn guarded<R: Send>(
        &mut self,
        call: impl for<'a> FnOnce(&'a mut Store<GuestState>) -> CallFuture<'a, R>,
    ) -> Result<R, GuestError> {
        if self.poisoned {
            return Err(GuestError::Poisoned {
                controller: self.controller.clone(),
                fence: self.fence_text.clone(),
            });
        }
        let revocation = self.revocation.clone();
        if revocation.is_revoked() {
            self.poisoned = true;
            return Err(self.aborted());
        }
        let deadline = self.deadline;
        self.store.data_mut().deadline = Some(Instant::now() + deadline);
        self.store.data_mut().http.begin_call();
        let outcome = {
            let future = call(&mut self.store);
            tokio::select! {
                biased;
                // Dropping `future` here cancels the guest wherever it is:
                // yielded at an epoch tick or blocked in a host call (whose
                // database future is dropped with it).
                _ = revocation.revoked() => Err(Interrupt::Revoked.into()),
                result = tokio::time::timeout(deadline, future) => match result {
                    Ok(result) => result,
                    Err(_) => Err(Interrupt::Deadline.into()),
                },
            }
        };
        self.store.data_mut().deadline = None;
        // A guest can finish in the same poll as the revocation (e.g. it got
        // the error of its cancelled outbound request and returned): the
        // tenure is over either way, so the call reports the abort, not
        // whatever the guest made of it.
        let outcome = match outcome {
            Ok(_) if revocation.is_revoked() => Err(Interrupt::Revoked.into()),
            other => other,
        };
        outcome.map_err(|error| {
            self.poisoned = true;
            self.classify(error)
        })
    }

    fn aborted(&self) -> GuestError {
        GuestError::Aborted {
            controller: self.controller.clone(),
            fence: self.fence_text.clone(),
        }
    }

    fn classify(&self, error: wasmtime::Error) -> GuestError {
        let interrupt = error.downcast_ref::<Interrupt>().copied();
        match interrupt {
            Some(Interrupt::Revoked) => self.aborted(),
            _ if self.revocation.is_revoked() => self.aborted(),
            Some(Interrupt::Deadline) => GuestError::DeadlineExceeded {
                controller: self.controller.clone(),
                fence: self.fence_text.clone(),
                deadline: self.deadline,
            },
            Some(Interrupt::Memory) => GuestError::OutOfMemory {
                controller: self.controller.clone(),
                fence: self.fence_text.clone(),
                limit: self.memory_limit,
            },
            // A trap's report names guest functions (from the guest's own
            // name section) and spans lines: escaped once here, where it
            // becomes host text, so no log line it reaches can be forged.
            None => {
                let mut message = crate::text::escape(&format!("{error:?}")).into_owned();
                // A store count over its limit (the component makes more
                // core instances, tables or memories than the controller
                // allows): name the config key that allows more.
                let text = format!("{error:#}");
                if let Some((_, key, limit)) = self.counts.iter().find(|(counted, _, _)| {
                    text.contains(&format!(
                        "resource limit exceeded: {counted} count too high"
                    ))
                }) {
                    message = format!(
                        "the component needs more than the controller's {key} ({limit}); \
                         raise {key} in its [[controllers]] entry: {message}"
                    );
                }
                GuestError::Trap {
                    controller: self.controller.clone(),
                    fence: self.fence_text.clone(),
                    message,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(label: Option<&str>, every_shard: &[&str]) -> Description {
        Description {
            watches: vec!["tasks".into()],
            resync_period: None,
            related: Vec::new(),
            shard_label: label.map(str::to_string),
            every_shard: every_shard.iter().map(|k| k.to_string()).collect(),
            settings_schema: None,
        }
    }

    /// What `describe` says of sharding is checked before the guest runs
    /// (a tenure's start fails with `GuestError::Described`, and `leasehold
    /// check` refuses it): a shard label of label-key syntax and
    /// every-shard kinds of kind syntax pass; anything else is refused,
    /// naming it.
    #[test]
    fn a_malformed_shard_label_or_every_shard_kind_is_refused_by_name() {
        assert_eq!(described(None, &[]).check_sharding(), Ok(()));
        assert_eq!(
            described(Some("example.com/tenant"), &["nodes"]).check_sharding(),
            Ok(())
        );
        let label = described(Some("-bad label-"), &[])
            .check_sharding()
            .unwrap_err();
        assert!(
            label.contains("shard label") && label.contains("-bad label-"),
            "{label}"
        );
        let kind = described(None, &["Nodes!"]).check_sharding().unwrap_err();
        assert!(
            kind.contains("every-shard kind") && kind.contains("Nodes!"),
            "{kind}"
        );
    }
}
