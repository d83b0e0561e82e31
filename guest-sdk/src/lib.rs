//! Write Leasehold controllers in Rust.
//!
//! A controller is a reconcile loop that the Leasehold host runs as a
//! WebAssembly component, only while it holds the controller's lease. Every
//! write it makes is stamped with the lease's fencing epoch, so a deposed
//! leader can never overwrite its successor's work. This crate is what a
//! controller author uses:
//!
//! - the [`Controller`] trait: [`Controller::describe`] (watched kinds and
//!   resync period), [`Controller::reconcile`] (told why it is called:
//!   [`Context::reason`], a [`Reason`]) and [`Controller::error_policy`],
//!   in the shape kube-rs users know;
//! - typed reads through [`Api`] and [`Object<T>`] (serde), and typed
//!   kinds: a [`Kind`] value type knows the kind it is stored under, so
//!   `Api::<Task>::typed()` reads tasks and
//!   [`Transaction::update_typed`] cannot write a task into a node;
//! - atomic, fenced writes through the [`Transaction`] builder, whose
//!   [`StoreError`] tells *fenced* (stop) from *conflict* (re-read, retry),
//!   and [`retry_on_conflict`], the bounded re-read-and-retry loop;
//! - [`finalizer`]: apply while an object lives, clean up before it goes,
//!   the finalizer added and removed in conditional commits, with
//!   [`FinalizerError`] telling which step failed;
//! - status [`Condition`]s shaped like Kubernetes' (`set_condition`,
//!   `get_condition`, `remove_condition`) and typed events
//!   ([`EventType`], [`Transaction::warning`]);
//! - the current [`Fence`] (cluster, lease, epoch, holder);
//! - the controller's settings from the host's config, typed through
//!   serde ([`settings`]), and the wall clock ([`clock::now`]); the
//!   requeue ([`Outcome::RequeueAfter`], [`Outcome::wake_at`]) is the
//!   timer that wakes a reconcile of a key at a time;
//! - outbound HTTP under the lease ([`http`]): deny by default, stamped by
//!   the host with the lease's epoch, refused once the lease is lost, with
//!   [`http::IdempotencyKey`] for receivers that deduplicate;
//! - logging macros ([`info!`], [`warn!`], ...) that end up in the host's
//!   log with the controller name and epoch attached;
//! - [`export_controller!`], the one line that turns a crate into a
//!   component;
//! - on native targets, [`FakeHost`]: an in-memory host with the real
//!   host's preconditions and limits, injectable faults and recorded
//!   commits, events and log lines, so `cargo test` exercises the
//!   controller's logic with no Wasm build, host or database.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use leasehold_guest::{
//!     Api, Context, Controller, Description, Error, FakeHost, Outcome, Reply, Transaction,
//! };
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Greeting {
//!     to: String,
//!     #[serde(default)]
//!     greeted: bool,
//! }
//!
//! #[derive(Default)]
//! struct Greeter;
//!
//! impl Controller for Greeter {
//!     fn describe(&self) -> Description {
//!         Description::watching(["greetings"]).resync_every(Duration::from_secs(60))
//!     }
//!
//!     fn reconcile(&self, _ctx: &Context, _kind: &str, name: &str) -> Result<Outcome, Error> {
//!         let greetings = Api::<Greeting>::new("greetings");
//!         let Some(greeting) = greetings.get(name)? else {
//!             return Ok(Outcome::Done);
//!         };
//!         if greeting.value.greeted {
//!             return Ok(Outcome::Done);
//!         }
//!         let updated = Greeting { to: greeting.value.to.clone(), greeted: true };
//!         let message = format!("hello, {}", updated.to);
//!         Transaction::new()
//!             .update(&greeting, &updated)
//!             .event("greetings", name, "Greeted", &message)
//!             .commit()?;
//!         leasehold_guest::info!("greeted {name}");
//!         Ok(Outcome::Done)
//!     }
//! }
//!
//! // In a controller crate this line exports `Greeter` as the component's
//! // `reconciler`; on native targets it only checks the type.
//! leasehold_guest::export_controller!(Greeter);
//!
//! // A unit test: no Wasm, no host, no database.
//! let host = FakeHost::new();
//! host.seed("greetings", "world", &serde_json::json!({ "to": "world" }));
//! assert_eq!(host.reconcile(&Greeter, "greetings", "world"), Reply::Done);
//! assert_eq!(host.events_with_reason("Greeted").len(), 1);
//! // Reconciling again is a no-op: the object records that it was greeted.
//! assert_eq!(host.reconcile(&Greeter, "greetings", "world"), Reply::Done);
//! assert_eq!(host.commits().len(), 1);
//! ```
//!
//! # Layers
//!
//! Everything above is re-exported at the crate root; the modules behind
//! it are private and layered, each importing only modules below it, so
//! there is no import cycle (`tests/layering.rs` reads the sources and
//! fails on an upward import):
//!
//! | layer | module | owns |
//! |---|---|---|
//! | 0 | `limits` | the host's default sizes and counts |
//! | 1 | `sys` | the seam: the wire types ([`ObjectKey`], [`Op`], [`NewEvent`], [`Committed`], [`Fence`], [`Level`], [`http::Method`], raw objects and pages, the wire's store errors, outbound requests and responses and `wasi:http`'s `error-code`) and the eight calls (store, tenure, logging, settings, wall clock, outbound HTTP), answered by the WIT imports (and `wasi:http/outgoing-handler`) on `wasm32` and by the host installed on the thread natively |
//! | 2 | `http` | outbound requests: the builder, the URL taken apart, the classification of `error-code`s into [`http::HttpError`], responses, idempotency keys |
//! | 3 | `error`, `clock`, `fence`, `log` | typed errors (a wire error becomes a [`StoreError`], a quota refusal is recognized, a fenced store or HTTP error ends the reconcile as fenced), the wall clock, the current fence, logging |
//! | 4 | `object`, `settings`, `condition` | [`Api`], [`Object`], [`Page`], [`Kind`]: typed reads decoded from the wire, typed kinds; the controller's settings decoded as the author's type, errors naming the key; status [`Condition`]s and their list helpers |
//! | 5 | `transaction`, `retry` | [`Transaction`]: fenced, atomic writes (typed ones for a [`Kind`]) and events ([`EventType`]); [`retry_on_conflict`]: re-read and retry a failed precondition, bounded |
//! | 6 | `controller` | the [`Controller`] trait, [`Context`], [`Reason`], [`Reply`], [`Outcome`] and the one mapping of a reconcile's result to a reply |
//! | 7 | `finalizer` | [`finalizer`]: apply, or clean up and let go, under a finalizer; [`FinalizerError`] |
//! | 8 | `export` | the `wasm32` glue of [`export_controller!`] |
//! | 9 | `fake` | [`FakeHost`]: a native host that installs itself into `sys` and drives controllers |
//!
//! `sys` imports nothing of the crate: the native side calls through a
//! `Host` trait object that the fake installs, so `sys` never names the
//! fake, and the wasm side's export glue lives in `export`, above the
//! controller it calls.

// Every public item is documented: this crate is what controller authors
// read, so a missing doc is an error, not a warning.
#![deny(missing_docs)]

pub mod clock;
mod condition;
mod controller;
mod error;
mod export;
mod fence;
mod finalizer;
pub mod http;
mod limits;
mod log;
mod object;
mod retry;
mod settings;
mod sys;
mod transaction;

#[cfg(not(target_arch = "wasm32"))]
mod fake;

pub use condition::{Condition, ConditionStatus, get_condition, remove_condition, set_condition};
pub use controller::{
    Context, Controller, Description, Map, Outcome, Reason, Related, Reply, Retry,
};
pub use error::{Error, QUOTA_EXCEEDED_PREFIX, Quota, QuotaExceeded, StoreError};
pub use fence::{Fence, Shard, fence, shard};
pub use finalizer::{FinalizerError, finalizer};
pub use limits::{
    DEFAULT_PAGE_SIZE, LOG_LINE_BYTES, Limits, MAX_CALL_PAYLOAD_BYTES, MAX_COLLECTED_PER_COMMIT,
    MAX_EVENT_MESSAGE_BYTES, MAX_EVENT_REASON_BYTES, MAX_EVENTS_PER_COMMIT, MAX_FINALIZER_BYTES,
    MAX_FINALIZERS, MAX_HTTP_REQUEST_BODY_BYTES, MAX_HTTP_REQUESTS_PER_RECONCILE,
    MAX_HTTP_RESPONSE_BODY_BYTES, MAX_LABEL_KEY_BYTES, MAX_LABEL_LEN, MAX_LABEL_VALUE_BYTES,
    MAX_LABELS, MAX_OPS_PER_COMMIT, MAX_PAGE_SIZE, MAX_SELECTOR_CONTAINS_BYTES,
    MAX_SELECTOR_CONTAINS_DEPTH, MAX_SELECTOR_LABELS, MAX_SETTINGS_BYTES, MAX_VALUE_BYTES,
};
pub use log::{Level, log};
pub use object::{Api, Kind, Metadata, Object, ObjectKey, Page, Selector};
pub use retry::{DEFAULT_CONFLICT_ATTEMPTS, retry_on_conflict};
pub use settings::{settings, settings_json};
pub use transaction::{Committed, EventType, NewEvent, Op, Transaction, UnknownEventType};

#[cfg(not(target_arch = "wasm32"))]
pub use fake::{
    At, CallCounts, Change, ChangeKind, CommitRecord, EventRecord, FakeHost, Fault, HttpFault,
    HttpRecord, HttpReply, LogLine, QuotaLimits, Relations,
};

/// Export a [`Controller`] as the component's `reconciler`.
///
/// Put this once at the top level of a controller crate (whose
/// `crate-type` includes `"cdylib"`). On `wasm32` it generates the
/// component exports: the host's `describe` and `reconcile` calls go to one
/// instance of the controller, created on first use and kept for the
/// guest instance's life (one tenure: the host starts a fresh instance for
/// every new tenure). The controller is built with [`Default`], or with the
/// expression after `=>`.
///
/// On native targets the macro exports nothing and only checks that the
/// type is a [`Controller`], so the same crate builds and unit-tests with
/// plain `cargo test`.
///
/// A [`StoreError::Fenced`] returned from `reconcile` becomes the WIT
/// `reconcile-error::fenced`; every other error becomes `failed` with the
/// retry delay chosen by [`Controller::error_policy`] (see [`Reply`]).
///
/// # Examples
///
/// With [`Default`]:
///
/// ```
/// use leasehold_guest::{Context, Controller, Description, Error, Outcome};
///
/// #[derive(Default)]
/// struct Noop;
///
/// impl Controller for Noop {
///     fn describe(&self) -> Description {
///         Description::watching(["things"])
///     }
///     fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
///         Ok(Outcome::Done)
///     }
/// }
///
/// leasehold_guest::export_controller!(Noop);
/// ```
///
/// With an explicit constructor:
///
/// ```
/// use leasehold_guest::{Context, Controller, Description, Error, Outcome};
///
/// struct Configured {
///     kind: &'static str,
/// }
///
/// impl Controller for Configured {
///     fn describe(&self) -> Description {
///         Description::watching([self.kind])
///     }
///     fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
///         Ok(Outcome::Done)
///     }
/// }
///
/// leasehold_guest::export_controller!(Configured => Configured { kind: "things" });
/// ```
#[macro_export]
macro_rules! export_controller {
    ($ty:ty) => {
        $crate::export_controller!($ty => <$ty as ::core::default::Default>::default());
    };
    ($ty:ty => $init:expr) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            ::std::thread_local! {
                // One controller per guest instance. The host never calls a
                // guest concurrently (reconciles of one controller run one
                // at a time), and a new tenure gets a new instance, so
                // nothing here outlives the tenure (G1).
                static CONTROLLER: $ty = $init;
            }

            struct LeaseholdReconciler;

            impl $crate::__private::Guest for LeaseholdReconciler {
                fn describe() -> $crate::__private::WitDescription {
                    CONTROLLER.with(|controller| $crate::__private::describe(controller))
                }

                fn reconcile(
                    kind: ::std::string::String,
                    name: ::std::string::String,
                    reason: $crate::__private::WitReconcileReason,
                ) -> ::core::result::Result<
                    $crate::__private::WitOutcome,
                    $crate::__private::WitReconcileError,
                > {
                    CONTROLLER.with(|controller| {
                        $crate::__private::reconcile(controller, &kind, &name, reason)
                    })
                }
            }

            $crate::__private::bindings::__export!(
                LeaseholdReconciler with_types_in $crate::__private::bindings
            );
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            // Native builds export nothing; this only proves at compile time
            // that the wasm32 build would find a controller here.
            #[allow(dead_code)]
            fn leasehold_check_controller() -> impl $crate::Controller {
                let controller: $ty = $init;
                controller
            }
        };
    };
}

/// Log a line through the host at an explicit [`Level`].
///
/// The arguments are those of [`format!`]. Prefer the level macros
/// ([`info!`], [`warn!`], ...).
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Level};
///
/// let host = FakeHost::new();
/// leasehold_guest::log!(Level::Info, "{} tasks pending", 3);
/// assert_eq!(host.logs()[0].message, "3 tasks pending");
/// ```
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)+) => {
        $crate::log($level, &::std::format!($($arg)+))
    };
}

/// Log a [`Level::Trace`] line through the host.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Level};
///
/// let host = FakeHost::new();
/// leasehold_guest::trace!("looked at {}", "tasks/a");
/// assert_eq!(host.logs()[0].level, Level::Trace);
/// ```
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Trace, $($arg)+) };
}

/// Log a [`Level::Debug`] line through the host.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Level};
///
/// let host = FakeHost::new();
/// leasehold_guest::debug!("{} nodes listed", 2);
/// assert_eq!(host.logs()[0].level, Level::Debug);
/// ```
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Debug, $($arg)+) };
}

/// Log a [`Level::Info`] line through the host.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Level};
///
/// let host = FakeHost::new();
/// leasehold_guest::info!("assigned {} to {}", "t1", "n1");
/// assert_eq!(host.logs()[0].level, Level::Info);
/// assert_eq!(host.logs()[0].message, "assigned t1 to n1");
/// ```
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Info, $($arg)+) };
}

/// Log a [`Level::Warn`] line through the host.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Level};
///
/// let host = FakeHost::new();
/// leasehold_guest::warn!("skipping malformed {}", "tasks/x");
/// assert_eq!(host.logs()[0].level, Level::Warn);
/// ```
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Warn, $($arg)+) };
}

/// Log a [`Level::Error`] line through the host.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Level};
///
/// let host = FakeHost::new();
/// leasehold_guest::error!("cannot place {}", "tasks/x");
/// assert_eq!(host.logs()[0].level, Level::Error);
/// ```
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Error, $($arg)+) };
}

/// Support for [`export_controller!`]; not part of the public API.
#[doc(hidden)]
pub mod __private {
    #[cfg(target_arch = "wasm32")]
    pub use crate::export::{describe, reconcile};
    #[cfg(target_arch = "wasm32")]
    pub use crate::sys::wasm::{
        Guest, WitDescription, WitOutcome, WitReconcileError, WitReconcileReason, bindings,
    };
}

#[cfg(test)]
mod tests {
    /// The guide's code is `examples/admission.rs`, which `cargo test`
    /// compiles and tests; this keeps the README from drifting from it.
    #[test]
    fn the_readme_shows_the_tested_example_verbatim() {
        let readme = include_str!("../README.md");
        let example = include_str!("../examples/admission.rs");
        assert!(
            readme.contains(&format!("```rust\n{example}```")),
            "README.md must show examples/admission.rs verbatim in a rust block"
        );
        let walkthrough = include_str!("../examples/usage.rs");
        assert!(
            readme.contains(&format!("```rust\n{walkthrough}```")),
            "README.md must show examples/usage.rs verbatim in a rust block"
        );
    }
}
