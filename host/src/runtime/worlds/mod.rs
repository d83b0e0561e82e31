//! The versions of the `leasehold:controller` WIT package this host runs,
//! side by side: bindings generated from each version's WIT text
//! (`wit/controller.wit` for the current 0.4.0; `wit/0.1.0/`, `wit/0.2.0/`
//! and `wit/0.3.0/` kept unchanged), all linked into the one `Linker`, and the rule that
//! tells which version a component targets.
//!
//! Owns: [`WorldVersion`], [`detect`] (from a component's import and
//! export names), the per-version `InstancePre` and instance handles
//! ([`Pre`], [`Bound`]), and the conversion of each version's `describe`
//! and `reconcile` answers into the runtime's own types. Each version's
//! module only converts between its generated types and the host slices
//! of `runtime/host/`, where the behaviour lives, so every version gets
//! the same rules.
//!
//! Must never: run a component against another version's bindings, accept
//! a component that mixes versions, or let an unknown version fail with a
//! bare link error (the refusal names the version the component targets
//! and the versions this host supports).
//!
//! Adding a version: a module generated from its WIT (keep the older text
//! in `wit/<version>/`, and generate the older module from
//! `["../wit", "../wit/<version>"]`: its generated modules are then named
//! `controller<version>`), a variant in [`WorldVersion`], [`Pre`] and
//! [`Bound`], and its line in [`link`]. The conversions versions share
//! unchanged are written once, as macros expanded in each version's
//! module against its own generated types: [`shared_conversions`] (every
//! version), `fence_only_tenure` (0.1.0 and 0.2.0), `since_0_2`
//! (0.2.0 on) and `shard_tenure` (0.3.0 on).

/// The conversions between a version's generated types and the host's
/// that are the same text in every version so far: keys, store errors,
/// events, the reconcile outcome, and the `logging` host.
/// Expanded inside a version's module, where `types`, `store`, `tenure`,
/// `logging` and `reconciler` name that version's generated modules (and
/// `CallError`, `ObjectKey`, `NewEvent`, `Answer`, `Level`, `TenureHost`
/// and `LoggingHost` the host's types). A version whose shapes differ
/// writes that conversion itself instead.
macro_rules! shared_conversions {
    () => {
        fn wit_key(key: ObjectKey) -> types::ObjectKey {
            types::ObjectKey {
                kind: key.kind,
                name: key.name,
            }
        }

        fn wit_error(error: CallError) -> store::StoreError {
            match error {
                CallError::Fenced(why) => store::StoreError::Fenced(why),
                CallError::Conflict(key) => store::StoreError::Conflict(wit_key(key)),
                CallError::NotFound(key) => store::StoreError::NotFound(wit_key(key)),
                CallError::Invalid(why) => store::StoreError::Invalid(why),
                CallError::Unavailable(why) => store::StoreError::Unavailable(why),
            }
        }

        fn key(kind: String, name: String) -> ObjectKey {
            ObjectKey { kind, name }
        }

        fn event(event: store::NewEvent) -> NewEvent {
            NewEvent {
                key: key(event.kind, event.name),
                reason: event.reason,
                message: event.message,
            }
        }

        fn answer(result: Result<reconciler::Outcome, reconciler::ReconcileError>) -> Answer {
            match result {
                Ok(reconciler::Outcome::Done) => Answer::Done,
                Ok(reconciler::Outcome::RequeueAfter(ms)) => Answer::RequeueAfter(ms),
                Err(reconciler::ReconcileError::Fenced) => Answer::Fenced,
                Err(reconciler::ReconcileError::Failed(failure)) => Answer::Failed {
                    message: failure.message,
                    retry_after_ms: failure.retry_after_ms,
                },
            }
        }

        impl logging::Host for LoggingHost {
            fn log(&mut self, level: logging::Level, message: String) -> wasmtime::Result<()> {
                let level = match level {
                    logging::Level::Trace => Level::Trace,
                    logging::Level::Debug => Level::Debug,
                    logging::Level::Info => Level::Info,
                    logging::Level::Warn => Level::Warn,
                    logging::Level::Error => Level::Error,
                };
                self.log_line(level, &message);
                Ok(())
            }
        }
    };
}

/// The `tenure` host of the versions whose tenure is the fence alone
/// (0.1.0 and 0.2.0), expanded as [`shared_conversions`] is.
macro_rules! fence_only_tenure {
    () => {
        impl tenure::Host for TenureHost {
            fn current(&mut self) -> wasmtime::Result<tenure::Fence> {
                Ok(wit_fence(self.fence()))
            }
        }

        fn wit_fence(fence: &crate::fence::Fence) -> tenure::Fence {
            tenure::Fence {
                cluster: fence.key.cluster.clone(),
                lease: fence.key.name.clone(),
                epoch: fence.epoch.0,
                holder: fence.holder.clone(),
            }
        }
    };
}

/// The `tenure` host of 0.3.0 on: the fence and the shard the tenure
/// runs. Expanded in each version's module against its generated `tenure`.
macro_rules! shard_tenure {
    () => {
        impl tenure::Host for TenureHost {
            fn current(&mut self) -> wasmtime::Result<tenure::Fence> {
                let fence = self.fence();
                Ok(tenure::Fence {
                    cluster: fence.key.cluster.clone(),
                    lease: fence.key.name.clone(),
                    epoch: fence.epoch.0,
                    holder: fence.holder.clone(),
                })
            }

            fn shard(&mut self) -> wasmtime::Result<tenure::ShardInfo> {
                let shard = TenureHost::shard(self);
                Ok(tenure::ShardInfo {
                    index: shard.index,
                    count: shard.count,
                })
            }
        }
    };
}

#[macro_use]
mod since_0_2;
pub(crate) mod v0_1_0;
pub(crate) mod v0_2_0;
pub(crate) mod v0_3_0;
pub(crate) mod v0_4_0;

use std::fmt;
use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::{InstancePre, Linker};

use super::guest::ReconcileReason;
use super::state::GuestState;

/// The WIT package every controller world belongs to.
pub const PACKAGE: &str = "leasehold:controller";

/// A version of [`PACKAGE`] this host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorldVersion {
    /// `leasehold:controller@0.1.0`: store, tenure, logging and outbound
    /// HTTP.
    V0_1_0,
    /// `leasehold:controller@0.2.0`: 0.1.0 plus the controller's
    /// settings, the wall clock, the reconcile reason, metadata, status,
    /// selective lists and related watches.
    V0_2_0,
    /// `leasehold:controller@0.3.0`: 0.2.0 plus the tenure's shard and
    /// what `describe` says of sharding.
    V0_3_0,
    /// `leasehold:controller@0.4.0`, the current world: 0.3.0 plus the
    /// settings' schema `describe` may give.
    V0_4_0,
}

impl WorldVersion {
    /// Every version this host runs, oldest first.
    pub const SUPPORTED: [WorldVersion; 4] = [
        WorldVersion::V0_1_0,
        WorldVersion::V0_2_0,
        WorldVersion::V0_3_0,
        WorldVersion::V0_4_0,
    ];

    /// The version the guest SDK and the example controllers target.
    pub const CURRENT: WorldVersion = WorldVersion::V0_4_0;

    /// The version number, e.g. `0.2.0`.
    pub fn number(self) -> &'static str {
        match self {
            WorldVersion::V0_1_0 => "0.1.0",
            WorldVersion::V0_2_0 => "0.2.0",
            WorldVersion::V0_3_0 => "0.3.0",
            WorldVersion::V0_4_0 => "0.4.0",
        }
    }

    /// The version of that number, if this host runs it.
    pub fn parse(number: &str) -> Option<Self> {
        Self::SUPPORTED
            .into_iter()
            .find(|version| version.number() == number)
    }

    /// `leasehold:controller@0.1.0, …, leasehold:controller@0.3.0 and
    /// leasehold:controller@0.4.0`: the supported versions, for messages.
    pub fn supported_text() -> String {
        let all: Vec<String> = Self::SUPPORTED.iter().map(ToString::to_string).collect();
        match all.as_slice() {
            [one] => one.clone(),
            [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
            [] => String::new(),
        }
    }
}

impl fmt::Display for WorldVersion {
    /// `leasehold:controller@<number>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PACKAGE}@{}", self.number())
    }
}

/// Link the host side of every supported version's interfaces.
pub(crate) fn link(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    v0_1_0::link(linker)?;
    v0_2_0::link(linker)?;
    v0_3_0::link(linker)?;
    v0_4_0::link(linker)
}

/// One import or export name of a component, taken apart:
/// `namespace:package/interface@version`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ItemName<'a> {
    full: &'a str,
    /// `namespace:package`, or the whole name for a plain (non-interface)
    /// name.
    package: &'a str,
    interface: Option<&'a str>,
    version: Option<&'a str>,
}

impl<'a> ItemName<'a> {
    fn parse(full: &'a str) -> Self {
        let (path, version) = match full.split_once('@') {
            Some((path, version)) => (path, Some(version)),
            None => (full, None),
        };
        let (package, interface) = match path.split_once('/') {
            Some((package, interface)) => (package, Some(interface)),
            None => (path, None),
        };
        Self {
            full,
            package,
            interface,
            version,
        }
    }

    /// `namespace:package@version`, or without the version when it has
    /// none.
    fn package_version(&self) -> String {
        match self.version {
            Some(version) => format!("{}@{version}", self.package),
            None => format!("{} (no version)", self.package),
        }
    }
}

/// Most names a refusal lists before it says "and N more".
const NAMES_SHOWN: usize = 8;

fn listing(names: &[&str]) -> String {
    if names.is_empty() {
        return "nothing".to_string();
    }
    let mut shown = names
        .iter()
        .take(NAMES_SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMES_SHOWN {
        shown.push_str(&format!(" and {} more", names.len() - NAMES_SHOWN));
    }
    shown
}

/// What a controller component must export, and how each toolchain gets
/// there: the end of every refusal of a component that exports no
/// Leasehold reconciler.
fn expected_export() -> String {
    let number = WorldVersion::CURRENT.number();
    format!(
        "a controller exports {PACKAGE}/reconciler@{number} (functions describe and \
         reconcile), the world {PACKAGE}/controller@{number} of wit/controller.wit: with \
         componentize-py pass `-d wit -w {PACKAGE}/controller@{number}` and define \
         `Reconciler` in the app module (the Python SDK's `export`); in Rust use the \
         leasehold-guest SDK's export macro in a library (cdylib) built for wasm32-wasip2"
    )
}

/// What a component that exports no Leasehold reconciler was built as,
/// from its exports, for the refusal: a WASI command (a program with a
/// `main`: exports `wasi:cli/run`), a component of another world (it
/// exports other interfaces), or nothing the host can call.
fn built_for(exported: &[ItemName<'_>]) -> String {
    if exported
        .iter()
        .any(|name| name.package == "wasi:cli" && name.interface == Some("run"))
    {
        return ": it is a WASI command (the world wasi:cli/command: a program with a `main`), \
                not a controller"
            .to_string();
    }
    let interfaces: Vec<&str> = exported
        .iter()
        .filter(|name| name.interface.is_some())
        .map(|name| name.full)
        .collect();
    if interfaces.is_empty() {
        ": it exports nothing the host can call".to_string()
    } else {
        format!(
            ": it was built against another world, one that exports {} (a componentize-py \
             or cargo-component build given the wrong world name?)",
            listing(&interfaces)
        )
    }
}

/// The functions a component's `reconciler` export of `version` lacks,
/// for the refusal of a component the typed bindings cannot use: `None`
/// when the component has no such export instance at all, an empty list
/// when every function is there (then their types differ).
pub(crate) fn missing_reconciler_functions(
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
    version: WorldVersion,
) -> Option<Vec<&'static str>> {
    use wasmtime::component::types::ComponentItem;
    const FUNCTIONS: [&str; 2] = ["describe", "reconcile"];
    let wanted = format!("{PACKAGE}/reconciler@{}", version.number());
    let ty = component.component_type();
    let instance = ty.exports(engine).find_map(|(name, item)| match item.ty {
        ComponentItem::ComponentInstance(instance) if name == wanted => Some(instance),
        _ => None,
    })?;
    let present: Vec<String> = instance
        .exports(engine)
        .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentFunc(_)))
        .map(|(name, _)| name.to_string())
        .collect();
    Some(
        FUNCTIONS
            .into_iter()
            .filter(|f| !present.iter().any(|p| p == f))
            .collect(),
    )
}

/// Which version of [`PACKAGE`] a component targets, from the names of its
/// imports and exports: the version of the `reconciler` interface it
/// exports. Refused, with a message that names what the component targets
/// and the versions this host supports: a component that exports no
/// Leasehold reconciler (another package's included), one of a version
/// this host does not run, one without a version, and one that imports
/// interfaces of another version of the package than it exports.
pub fn detect(imports: &[&str], exports: &[&str]) -> Result<WorldVersion, String> {
    let supported = WorldVersion::supported_text();
    let exported: Vec<ItemName<'_>> = exports.iter().map(|name| ItemName::parse(name)).collect();
    let reconcilers: Vec<&ItemName<'_>> = exported
        .iter()
        .filter(|name| name.interface == Some("reconciler"))
        .collect();
    let ours: Vec<&ItemName<'_>> = reconcilers
        .iter()
        .copied()
        .filter(|name| name.package == PACKAGE)
        .collect();
    let target = match ours.as_slice() {
        [one] => *one,
        [] => {
            return Err(match reconcilers.first() {
                Some(other) => format!(
                    "it targets {}, not {PACKAGE} (it exports {}); this host supports \
                     {supported}: build it against one of those",
                    other.package_version(),
                    other.full
                ),
                None => format!(
                    "it exports no {PACKAGE}/reconciler interface, so it targets no Leasehold \
                     controller world (it exports {}){}; this host supports {supported}: build \
                     it against one of those (the leasehold-guest SDK does); {}",
                    listing(exports),
                    built_for(&exported),
                    expected_export()
                ),
            });
        }
        many => {
            let names: Vec<&str> = many.iter().map(|name| name.full).collect();
            return Err(format!(
                "it exports {PACKAGE}/reconciler of several versions ({}); a component \
                 targets one version: this host supports {supported}",
                listing(&names)
            ));
        }
    };
    let Some(number) = target.version else {
        return Err(format!(
            "it targets {PACKAGE} without a version (it exports {}); this host supports \
             {supported}: build it against one of those",
            target.full
        ));
    };
    let Some(version) = WorldVersion::parse(number) else {
        return Err(format!(
            "it targets {PACKAGE}@{number}, a version this host does not run; this host \
             supports {supported}: build it against one of those, or run it on a host that \
             supports {PACKAGE}@{number}"
        ));
    };
    let mixed: Vec<&str> = imports
        .iter()
        .map(|name| ItemName::parse(name))
        .filter(|name| name.package == PACKAGE && name.version != Some(number))
        .map(|name| name.full)
        .collect();
    if !mixed.is_empty() {
        return Err(format!(
            "it mixes versions of {PACKAGE}: it exports {} but imports {}; build it against \
             one world ({supported} are supported)",
            target.full,
            listing(&mixed)
        ));
    }
    Ok(version)
}

/// A compiled component, linked and typed for the version it targets.
#[derive(Clone)]
pub(crate) enum Pre {
    /// Targets 0.1.0.
    V0_1_0(v0_1_0::ControllerPre<GuestState>),
    /// Targets 0.2.0.
    V0_2_0(v0_2_0::ControllerPre<GuestState>),
    /// Targets 0.3.0.
    V0_3_0(v0_3_0::ControllerPre<GuestState>),
    /// Targets 0.4.0.
    V0_4_0(v0_4_0::ControllerPre<GuestState>),
}

impl Pre {
    /// Type `pre` as a component of `version` (its exports are looked up).
    pub(crate) fn new(
        version: WorldVersion,
        pre: InstancePre<GuestState>,
    ) -> wasmtime::Result<Self> {
        Ok(match version {
            WorldVersion::V0_1_0 => Pre::V0_1_0(v0_1_0::ControllerPre::new(pre)?),
            WorldVersion::V0_2_0 => Pre::V0_2_0(v0_2_0::ControllerPre::new(pre)?),
            WorldVersion::V0_3_0 => Pre::V0_3_0(v0_3_0::ControllerPre::new(pre)?),
            WorldVersion::V0_4_0 => Pre::V0_4_0(v0_4_0::ControllerPre::new(pre)?),
        })
    }

    /// The version it targets.
    pub(crate) fn version(&self) -> WorldVersion {
        match self {
            Pre::V0_1_0(_) => WorldVersion::V0_1_0,
            Pre::V0_2_0(_) => WorldVersion::V0_2_0,
            Pre::V0_3_0(_) => WorldVersion::V0_3_0,
            Pre::V0_4_0(_) => WorldVersion::V0_4_0,
        }
    }

    /// A new instance in `store`.
    pub(crate) async fn instantiate(
        &self,
        store: &mut Store<GuestState>,
    ) -> wasmtime::Result<Bound> {
        Ok(match self {
            Pre::V0_1_0(pre) => Bound::V0_1_0(Arc::new(pre.instantiate_async(store).await?)),
            Pre::V0_2_0(pre) => Bound::V0_2_0(Arc::new(pre.instantiate_async(store).await?)),
            Pre::V0_3_0(pre) => Bound::V0_3_0(Arc::new(pre.instantiate_async(store).await?)),
            Pre::V0_4_0(pre) => Bound::V0_4_0(Arc::new(pre.instantiate_async(store).await?)),
        })
    }
}

/// What `describe` answered, in any version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Described {
    pub watches: Vec<String>,
    pub resync_period_ms: u64,
    /// Related watches (0.2.0); none from a 0.1.0 guest.
    pub related: Vec<crate::runtime::RelatedWatch>,
    /// The shard label (0.3.0); none from older guests.
    pub shard_label: Option<String>,
    /// Kinds every shard watches (0.3.0); none from older guests.
    pub every_shard: Vec<String>,
    /// The settings' JSON Schema (0.4.0); none from older guests.
    pub settings_schema: Option<String>,
}

/// What `reconcile` answered, in any version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Done,
    RequeueAfter(u64),
    Fenced,
    Failed {
        message: String,
        retry_after_ms: Option<u64>,
    },
}

/// An instance's exports, for the version it targets.
#[derive(Clone)]
pub(crate) enum Bound {
    /// Targets 0.1.0.
    V0_1_0(Arc<v0_1_0::Controller>),
    /// Targets 0.2.0.
    V0_2_0(Arc<v0_2_0::Controller>),
    /// Targets 0.3.0.
    V0_3_0(Arc<v0_3_0::Controller>),
    /// Targets 0.4.0.
    V0_4_0(Arc<v0_4_0::Controller>),
}

impl Bound {
    /// Call `describe`.
    pub(crate) async fn describe(
        &self,
        store: &mut Store<GuestState>,
    ) -> wasmtime::Result<Described> {
        match self {
            Bound::V0_1_0(bindings) => v0_1_0::describe(bindings, store).await,
            Bound::V0_2_0(bindings) => v0_2_0::describe(bindings, store).await,
            Bound::V0_3_0(bindings) => v0_3_0::describe(bindings, store).await,
            Bound::V0_4_0(bindings) => v0_4_0::describe(bindings, store).await,
        }
    }

    /// Call `reconcile` for `kind/name`. `reason` reaches guests of the
    /// versions that have it (0.2.0 on); a 0.1.0 guest's `reconcile` has no
    /// such argument and is called as it always was.
    pub(crate) async fn reconcile(
        &self,
        store: &mut Store<GuestState>,
        kind: &str,
        name: &str,
        reason: ReconcileReason,
    ) -> wasmtime::Result<Answer> {
        match self {
            Bound::V0_1_0(bindings) => v0_1_0::reconcile(bindings, store, kind, name).await,
            Bound::V0_2_0(bindings) => v0_2_0::reconcile(bindings, store, kind, name, reason).await,
            Bound::V0_3_0(bindings) => v0_3_0::reconcile(bindings, store, kind, name, reason).await,
            Bound::V0_4_0(bindings) => v0_4_0::reconcile(bindings, store, kind, name, reason).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WASI: &[&str] = &[
        "wasi:cli/environment@0.2.6",
        "wasi:io/streams@0.2.6",
        "wasi:clocks/wall-clock@0.2.12",
    ];

    fn imports(extra: &[&'static str]) -> Vec<&'static str> {
        WASI.iter().chain(extra).copied().collect()
    }

    #[test]
    fn the_version_is_the_exported_reconcilers() {
        let old = imports(&[
            "leasehold:controller/store@0.1.0",
            "leasehold:controller/logging@0.1.0",
        ]);
        assert_eq!(
            detect(&old, &["leasehold:controller/reconciler@0.1.0"]),
            Ok(WorldVersion::V0_1_0)
        );
        let new = imports(&["leasehold:controller/settings@0.2.0"]);
        assert_eq!(
            detect(&new, &["leasehold:controller/reconciler@0.2.0"]),
            Ok(WorldVersion::V0_2_0)
        );
        let newest = imports(&["leasehold:controller/tenure@0.3.0"]);
        assert_eq!(
            detect(&newest, &["leasehold:controller/reconciler@0.3.0"]),
            Ok(WorldVersion::V0_3_0)
        );
        let current = imports(&["leasehold:controller/tenure@0.4.0"]);
        assert_eq!(
            detect(&current, &["leasehold:controller/reconciler@0.4.0"]),
            Ok(WorldVersion::V0_4_0)
        );
        // A component that imports nothing of the package still targets
        // the version of its export.
        assert_eq!(
            detect(&imports(&[]), &["leasehold:controller/reconciler@0.1.0"]),
            Ok(WorldVersion::V0_1_0)
        );
    }

    #[test]
    fn an_unknown_version_is_named_with_the_supported_ones() {
        let refusal = detect(
            &imports(&["leasehold:controller/store@0.5.0"]),
            &["leasehold:controller/reconciler@0.5.0"],
        )
        .unwrap_err();
        assert!(
            refusal.contains("it targets leasehold:controller@0.5.0"),
            "{refusal}"
        );
        assert!(
            refusal.contains(
                "leasehold:controller@0.1.0, leasehold:controller@0.2.0, \
                 leasehold:controller@0.3.0 and leasehold:controller@0.4.0"
            ),
            "{refusal}"
        );
        let refusal = detect(&[], &["leasehold:controller/reconciler@0.2.1"]).unwrap_err();
        assert!(refusal.contains("leasehold:controller@0.2.1"), "{refusal}");
        let refusal = detect(&[], &["leasehold:controller/reconciler"]).unwrap_err();
        assert!(refusal.contains("without a version"), "{refusal}");
    }

    #[test]
    fn another_package_or_no_reconciler_is_refused_by_name() {
        let refusal = detect(&imports(&[]), &["acme:controller/reconciler@1.0.0"]).unwrap_err();
        assert!(
            refusal.contains("it targets acme:controller@1.0.0"),
            "{refusal}"
        );
        assert!(refusal.contains("leasehold:controller@0.2.0"), "{refusal}");
        let refusal = detect(&imports(&[]), &["wasi:cli/run@0.2.0"]).unwrap_err();
        assert!(
            refusal.contains("exports no leasehold:controller/reconciler"),
            "{refusal}"
        );
        assert!(refusal.contains("wasi:cli/run@0.2.0"), "{refusal}");
        assert!(refusal.contains("leasehold:controller@0.1.0"), "{refusal}");
    }

    #[test]
    fn mixing_versions_is_refused() {
        let refusal = detect(
            &imports(&[
                "leasehold:controller/store@0.1.0",
                "leasehold:controller/logging@0.2.0",
            ]),
            &["leasehold:controller/reconciler@0.2.0"],
        )
        .unwrap_err();
        assert!(refusal.contains("mixes versions"), "{refusal}");
        assert!(
            refusal.contains("leasehold:controller/store@0.1.0"),
            "{refusal}"
        );
        assert!(!refusal.contains("logging"), "{refusal}");
        let refusal = detect(
            &[],
            &[
                "leasehold:controller/reconciler@0.1.0",
                "leasehold:controller/reconciler@0.2.0",
            ],
        )
        .unwrap_err();
        assert!(refusal.contains("several versions"), "{refusal}");
    }

    #[test]
    fn supported_versions_read_as_a_list() {
        assert_eq!(
            WorldVersion::supported_text(),
            "leasehold:controller@0.1.0, leasehold:controller@0.2.0, leasehold:controller@0.3.0 \
             and leasehold:controller@0.4.0"
        );
        assert_eq!(WorldVersion::parse("0.2.0"), Some(WorldVersion::V0_2_0));
        assert_eq!(WorldVersion::parse("0.3.0"), Some(WorldVersion::V0_3_0));
        assert_eq!(WorldVersion::parse("0.4.0"), Some(WorldVersion::V0_4_0));
        assert_eq!(WorldVersion::parse("0.5.0"), None);
    }
}
