//! The durable state: versioned objects and an append-only event log, per
//! cluster.
//!
//! Owns: objects, the change stream (every committed create, update and
//! delete), events, the commit order (revisions and positions), size and
//! syntax limits, change-feed wake-ups.
//!
//! Writes come two ways only: fenced commits from guests (checked against
//! the lease inside the same transaction, via the authority's fence check)
//! and versioned API writes from users. Must never: call back into the
//! supervisor or runtime, or know about Wasm.
//!
//! The rules, the same in every backend and in the SDK's fake: the model
//! crate's ([`leasehold_model`]: validation, JSON, planning), applied here
//! through [`validate`] and [`plan`]; the conformance table
//! (`tests/conformance/store/`) holds every backend to them:
//!
//! - Cluster names, kinds and object names are DNS labels (1–63 of `a-z`,
//!   `0-9`, `-`, starting and ending with a letter or digit). Listings are
//!   in byte order of the name.
//! - A value is JSON text, stored in its canonical form
//!   ([`leasehold_model::json`]: compact, keys sorted, `1.0` kept, `1e9` as
//!   `1000000000.0`), at most [`crate::limits::MAX_VALUE_BYTES`] given and
//!   stored. Refused as invalid: numbers out of a double's range, integers
//!   outside the 64-bit range, a NUL character anywhere, nesting deeper
//!   than [`crate::limits::MAX_JSON_DEPTH`].
//! - A commit has at most [`crate::limits::MAX_OPS_PER_COMMIT`] operations
//!   and [`crate::limits::MAX_EVENTS_PER_COMMIT`] events, at least one of
//!   either, and names each object at most once. An event's reason is one
//!   PascalCase word of at most [`crate::limits::MAX_EVENT_REASON_BYTES`];
//!   its message at most [`crate::limits::MAX_EVENT_MESSAGE_BYTES`].
//!   Anything over a limit is [`StoreError::TooLarge`]; malformed input is
//!   [`StoreError::Invalid`].
//! - Every successful commit (fenced or API) takes a revision, and one
//!   position per object it writes (a [`Change`]) and per event it appends
//!   (the event's `seq`), all from one increasing series of numbers shared
//!   by every cluster of the backend. Numbers are unique and may have gaps
//!   (a commit that failed, another cluster's commits). An object's version
//!   is the revision that last wrote it: per object, versions strictly
//!   grow and are never reused, even across delete and re-create. On
//!   PostgreSQL they are never reused across a failover either: the first
//!   commit on a new WAL timeline (or on an adopted copy) jumps to that
//!   timeline's floor, above every number the former one can have issued
//!   (migration 19, [`postgres`]).
//! - Readers ([`Store::changes`], [`Store::events`]) see positions in
//!   increasing order and only up to a high-water mark below which every
//!   commit is final: a reader that resumes after the last position it was
//!   given never skips a committed change or event and never sees one
//!   twice, and per object the order is commit order. (PostgreSQL: see
//!   [`postgres`]; memory: commits are applied whole under one lock.)
//! - Pages hold at most [`crate::limits::MAX_PAGE_SIZE`] items; a limit of
//!   0 asks for [`crate::limits::DEFAULT_PAGE_SIZE`].
//!
//! Metadata, status and deletion ([`Metadata`], [`Object`]; decided in
//! [`plan`], the same on every backend):
//!
//! - Beside its value (the spec) an object has `labels` (at most
//!   [`crate::limits::MAX_LABELS`]; keys of letters, digits, `-`, `_`, `.`,
//!   `/`, values of letters, digits, `-`, `_`, `.`), an optional `owner`,
//!   `finalizers` (at most [`crate::limits::MAX_FINALIZERS`] distinct
//!   names), a `status` (JSON, like a value) and a `generation`. Only
//!   [`Op::CreateWith`], [`Op::Replace`] and a user's [`ApiWrite::Put`]
//!   with metadata set metadata; [`Op::Update`] and [`Store::put`] keep it,
//!   and every write but a status write keeps the status.
//! - `generation` is 1 at creation and grows by one with each write that
//!   changes the value or the metadata, a deletion mark included; a status
//!   write ([`Op::Status`], optionally conditional on the generation) never
//!   changes it, so controllers write status without conflicting with
//!   users' spec writes. Every write, status included, takes a new
//!   `version` and is a change in the watch stream.
//! - A delete request of an object with finalizers marks it instead
//!   (`deleting_since`, the commit's time; a `Updated` change): it stays
//!   readable with its last value, can be written (its value, status, or
//!   fewer finalizers, never more), and is removed (a `Deleted` change) by
//!   the write that leaves it without finalizers. A second delete request
//!   writes nothing.
//! - Garbage collection happens in the deleting commit: the first delete
//!   request of an object is a delete request of each object it owns,
//!   transitively (removed, or marked if it has finalizers), at most
//!   [`crate::limits::MAX_COLLECTED_PER_COMMIT`] of them (beyond it the
//!   commit is [`StoreError::TooLarge`] and nothing is written). A commit
//!   that deletes an owner and writes an owned object otherwise is
//!   invalid. A write that gives an object an owner needs that owner to
//!   exist unmarked (or be created by the same commit), else `Conflict`;
//!   so no object is ever left owned by an absent owner.
//! - [`Op::Check`] writes nothing: the commit fails with `Conflict`, whole,
//!   unless the object is at the version given (0: absent).

pub mod memory;
mod plan;
pub mod postgres;
mod postgres_feed;
pub mod retention;
pub mod sqlite;
mod validate;

pub(crate) use validate::check_label_key;

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod postgres_history_tests;
#[cfg(test)]
mod postgres_tests;

pub use memory::MemoryStore;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// The model's types, as every caller of the store names them.
pub use leasehold_model::{ApiWrite, Metadata, NewEvent, ObjectKey, Op, Selector};

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use thiserror::Error;

use crate::authority::AuthorityError;
use crate::fence::{Epoch, Fence, FenceCause};

/// A stored object, its deletion mark in the backend's clock (see
/// [`leasehold_model::Object`]).
pub type Object = leasehold_model::Object<DateTime<Utc>>;

/// What an [`ApiWrite`] did to the object it names (see
/// [`leasehold_model::Written`]).
pub type Written = leasehold_model::Written<DateTime<Utc>>;

/// Who made a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Origin {
    /// A user, through the API.
    Api {
        /// The name of the API token the request carried (`[[http.tokens]]`
        /// or `default`); absent when the API takes no token.
        #[serde(skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// A guest, under a lease.
    Guest {
        /// The lease name.
        lease: String,
        /// The tenure's epoch.
        epoch: Epoch,
        /// The replica.
        holder: String,
    },
}

impl Origin {
    /// An API write, by the token of the request being served on this
    /// task ([`with_api_token`]), if any.
    pub fn api() -> Self {
        Origin::Api {
            token: API_TOKEN.try_with(Clone::clone).ok().flatten(),
        }
    }
}

tokio::task_local! {
    static API_TOKEN: Option<String>;
}

/// Run `future` (an API write) recording `token` (the name of the token
/// the request carried) as the author of every change and event it
/// commits.
pub async fn with_api_token<F: std::future::Future>(token: Option<String>, future: F) -> F::Output {
    API_TOKEN.scope(token, future).await
}

/// An event from the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Position in the backend's order: increasing and unique, with gaps
    /// (see the module documentation).
    pub seq: u64,
    /// The commit's revision.
    pub revision: u64,
    /// Commit time (backend clock).
    pub at: DateTime<Utc>,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// Short reason (`Created`, `Updated`, `Deleted` for API writes).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Who wrote it.
    pub origin: Origin,
}

/// What a write did to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// The object was created.
    Created,
    /// The object's value was replaced.
    Updated,
    /// The object was deleted.
    Deleted,
}

impl ChangeKind {
    /// The stored spelling (`created`, `updated`, `deleted`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Updated => "updated",
            ChangeKind::Deleted => "deleted",
        }
    }

    /// The kind a stored spelling names, if any.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "created" => Some(ChangeKind::Created),
            "updated" => Some(ChangeKind::Updated),
            "deleted" => Some(ChangeKind::Deleted),
            _ => None,
        }
    }
}

/// One committed change of an object: the watch stream. Every create,
/// update and delete, by the API or a guest, is one, whether or not its
/// commit appended an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Position in the backend's order: increasing, unique, with gaps.
    pub position: u64,
    /// The commit's revision.
    pub revision: u64,
    /// Commit time (backend clock).
    pub at: DateTime<Utc>,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// What happened to it.
    pub change: ChangeKind,
    /// The object's version after the change; for a delete, the version it
    /// had.
    pub version: u64,
    /// Who wrote it.
    pub origin: Origin,
    /// The W3C trace context of the write, when it had one (an API write
    /// with a `traceparent` header, a guest commit inside a traced
    /// reconcile): the reconcile this change wakes joins that trace. Set
    /// from [`crate::telemetry::with_write_context`] by both backends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<crate::telemetry::TraceParent>,
    /// The object's owner and labels after the change; for a delete, those
    /// it had. What a watcher that maps changes to related objects (the
    /// owner, or the object a label names) needs, without reading the
    /// object again (it may be gone).
    pub relations: Relations,
    /// The owner and labels before the change, only when an update changed
    /// either (`None` for a create, a delete, and an update that kept
    /// both): a watcher wakes both the object the change left and the one
    /// it joined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<Relations>,
}

/// What a [`Change`] records of an object's relations to others.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Relations {
    /// The owning object, if any.
    pub owner: Option<ObjectKey>,
    /// The labels, by key.
    pub labels: BTreeMap<String, String>,
}

impl Relations {
    /// The relations of an object with `meta`.
    pub fn of(meta: &Metadata) -> Self {
        Relations {
            owner: meta.owner.clone(),
            labels: meta.labels.clone(),
        }
    }

    /// The relations a write records: `after` (for a delete, what the
    /// object had), and `before` as `previous` only if it differs.
    pub fn change(before: Option<&Metadata>, after: &Metadata) -> (Relations, Option<Relations>) {
        let now = Relations::of(after);
        let previous = before
            .map(Relations::of)
            .filter(|previous| *previous != now);
        (now, previous)
    }
}

/// A page of the change stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangePage {
    /// Changes in position order.
    pub changes: Vec<Change>,
    /// The stream has been read through this position: every change of the
    /// asked kinds at a position up to it is in `changes` or in an earlier
    /// page. The next read continues after it. Never below the cursor it
    /// was read after.
    pub through: u64,
}

/// A successful commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The commit's revision: the new version of every created or updated
    /// object.
    pub revision: u64,
    /// Sequence numbers of the appended events, in input order (and so
    /// increasing).
    pub event_seqs: Vec<u64>,
    /// Every object the commit wrote, as it left it: `Some` at `revision`
    /// (created, rewritten or marked for deletion), `None` removed; the
    /// objects garbage collection deleted or marked included. Objects a
    /// check named are not written. A guest's host calls keep them to
    /// answer later reads (`runtime/host/own_writes.rs`).
    pub written: Vec<(ObjectKey, Option<Object>)>,
}

/// A page of objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Objects in name order.
    pub objects: Vec<Object>,
    /// Cursor for the next page (the last name), if there may be more.
    pub next: Option<String>,
}

/// Store failures. Each names what it is about.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The fence is no longer current; nothing was written.
    #[error("fenced: {fence} is no longer current ({reason}); nothing was written")]
    Fenced {
        /// The stale fence.
        fence: Fence,
        /// Why, typed.
        cause: FenceCause,
        /// What the authority saw.
        reason: String,
    },
    /// A version precondition failed; nothing was written.
    #[error("conflict on {key}: {reason}")]
    Conflict {
        /// The object.
        key: ObjectKey,
        /// Expected vs. actual.
        reason: String,
    },
    /// The object does not exist.
    #[error("{key} not found")]
    NotFound {
        /// The object.
        key: ObjectKey,
    },
    /// Bad input: syntax, JSON, sizes, counts.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The value or request is over a size limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// The backend failed or is unreachable; a commit's outcome is unknown.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A read of the event log or the change stream asked for what the
    /// store cannot serve after `after`: positions that retention has
    /// trimmed (see [`retention`]), or a cursor this store never issued in
    /// the history it has now ([`TooOldCause::NotIssued`]). The reader
    /// re-lists the objects it follows and resumes after `oldest_kept -
    /// 1`, from which every position is kept.
    #[error("{}", cause.describe(cluster, stream, *after, *oldest_kept))]
    TooOld {
        /// The cluster.
        cluster: String,
        /// Which stream: `event log` or `change stream`.
        stream: &'static str,
        /// The cursor asked for.
        after: u64,
        /// The lowest position guaranteed kept (the trimmed floor plus
        /// one, or the high-water mark plus one): every position from here
        /// on is still readable.
        oldest_kept: u64,
        /// Why the cursor cannot be served.
        cause: TooOldCause,
    },
}

/// Why a cursor cannot be served ([`StoreError::TooOld`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooOldCause {
    /// Retention trimmed positions after it.
    Trimmed,
    /// The store never issued it in the history it has now: it is beyond
    /// the last position handed out, or in the gap a failover or an
    /// adopted copy left (PostgreSQL: a promoted standby that lacked the
    /// former primary's last commits, whose positions it will never
    /// issue, since its own start above its timeline's floor). What the
    /// reader read up to it may include changes this store does not have.
    NotIssued,
}

impl TooOldCause {
    fn describe(self, cluster: &str, stream: &str, after: u64, oldest_kept: u64) -> String {
        let resume = oldest_kept.saturating_sub(1);
        match self {
            TooOldCause::Trimmed => format!(
                "too old: the {stream} of cluster {cluster} no longer keeps what followed \
                 position {after}; positions from {oldest_kept} on are kept: re-list, then \
                 resume after {resume}"
            ),
            TooOldCause::NotIssued => format!(
                "too old: position {after} of the {stream} of cluster {cluster} was not issued \
                 by this database as it is now (beyond the last position handed out, or in a \
                 history a failover or an adopted copy lost): what was read up to it may be \
                 gone; re-list, then resume after {resume}"
            ),
        }
    }
}

/// The name of the event log in [`StoreError::TooOld`].
pub const EVENT_LOG: &str = "event log";
/// The name of the change stream in [`StoreError::TooOld`].
pub const CHANGE_STREAM: &str = "change stream";

/// [`StoreError::TooOld`] when `after` is below `floor` (every position up
/// to `floor` may have been trimmed), else nothing.
pub fn check_floor(
    cluster: &str,
    stream: &'static str,
    after: u64,
    floor: u64,
) -> Result<(), StoreError> {
    if after < floor {
        return Err(StoreError::TooOld {
            cluster: cluster.to_string(),
            stream,
            after,
            oldest_kept: floor + 1,
            cause: TooOldCause::Trimmed,
        });
    }
    Ok(())
}

/// [`StoreError::TooOld`] ([`TooOldCause::NotIssued`]) when `after` is
/// above `head`, the last position the store handed out: a cursor it never
/// issued. `mark` (at most `head`: every position up to it is final) is
/// where the reader resumes once it re-listed.
pub fn check_issued(
    cluster: &str,
    stream: &'static str,
    after: u64,
    head: u64,
    mark: u64,
) -> Result<(), StoreError> {
    if after > head {
        return Err(not_issued(cluster, stream, after, mark));
    }
    Ok(())
}

/// [`StoreError::TooOld`] for a cursor `after` the store never issued;
/// the reader resumes after `mark` once it re-listed.
pub(crate) fn not_issued(cluster: &str, stream: &'static str, after: u64, mark: u64) -> StoreError {
    StoreError::TooOld {
        cluster: cluster.to_string(),
        stream,
        after,
        oldest_kept: mark.saturating_add(1),
        cause: TooOldCause::NotIssued,
    }
}

impl From<AuthorityError> for StoreError {
    /// The fence check's verdict, as the store reports it. Backend failures
    /// keep the authority's message (which names the endpoint, never a
    /// password).
    fn from(error: AuthorityError) -> Self {
        match error {
            AuthorityError::Fenced {
                fence,
                cause,
                reason,
            } => StoreError::Fenced {
                fence,
                cause,
                reason,
            },
            AuthorityError::InvalidName(e) => StoreError::Invalid(e.to_string()),
            e @ AuthorityError::Invalid { .. } => StoreError::Invalid(e.to_string()),
            // Whatever else keeps the lease backend from answering: the
            // outcome of the write is unknown to the caller.
            e => StoreError::Unavailable(e.to_string()),
        }
    }
}

/// One state backend. Implementations: PostgreSQL and memory.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Read one object.
    async fn get(&self, cluster: &str, key: &ObjectKey) -> Result<Option<Object>, StoreError>;

    /// List a kind in name order after `after`, at most `limit` (capped at
    /// [`crate::limits::MAX_PAGE_SIZE`]).
    async fn list(
        &self,
        cluster: &str,
        kind: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError>;

    /// List the objects of a kind that `selector` selects, in name order
    /// after `after`, at most `limit` (capped at
    /// [`crate::limits::MAX_PAGE_SIZE`], 0 for the default), like
    /// [`Store::list`]: `next` is the last name of the page when more may
    /// follow. An empty selector lists exactly what [`Store::list`] does.
    /// Both backends serve it from an index (PostgreSQL: GIN indexes on the
    /// labels and on the value; see [`postgres`]).
    ///
    /// The default serves the empty selector through [`Store::list`] and
    /// refuses any other: a store must serve selectors itself (wrappers
    /// pass them on).
    async fn list_selected(
        &self,
        cluster: &str,
        kind: &str,
        selector: &Selector,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        if selector.is_empty() {
            return self.list(cluster, kind, after, limit).await;
        }
        Err(StoreError::Unavailable(format!(
            "this store does not serve selective lists (kind {kind} in cluster {cluster})"
        )))
    }

    /// Apply `ops` and append `events` in one transaction that first checks
    /// `fence` (the lease row shows its holder and epoch, unexpired, and its
    /// tenure is open: the tenure row, locked by the write's count, is what
    /// a grant waits for), and records the write against the tenure. All or
    /// nothing.
    async fn commit_fenced(
        &self,
        fence: &Fence,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<Committed, StoreError>;

    /// API write: create or replace the value, optionally only if the
    /// current version is `expected_version` (0 = must not exist), keeping
    /// the metadata and status of an existing object. Appends a `Created`
    /// or `Updated` event.
    async fn put(
        &self,
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected_version: Option<u64>,
    ) -> Result<Object, StoreError>;

    /// API delete request, optionally only at `expected_version`: removes
    /// the object, or marks it if finalizers remain (see the module
    /// documentation). Appends a `Deleted` or `DeletionRequested` event.
    /// `NotFound` if absent.
    async fn delete(
        &self,
        cluster: &str,
        key: &ObjectKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError>;

    /// A user's write with metadata or status, or a delete that reports
    /// whether finalizers hold the object; versioned like [`Store::put`].
    ///
    /// The default refuses: a store must serve it itself (wrappers pass it
    /// on).
    async fn write(&self, cluster: &str, write: &ApiWrite) -> Result<Written, StoreError> {
        let _ = write;
        Err(StoreError::Unavailable(format!(
            "this store does not serve metadata and status writes in cluster {cluster}"
        )))
    }

    /// Events with `seq > after`, in order, at most `limit`, up to the
    /// high-water mark (see the module documentation): resuming after the
    /// last seq returned skips and repeats nothing. [`StoreError::TooOld`]
    /// when retention trimmed events above `after`, or when the store
    /// never issued `after` ([`TooOldCause::NotIssued`], as for
    /// [`Store::changes`]).
    async fn events(
        &self,
        cluster: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError>;

    /// Object changes of `kinds` (all kinds if empty) with `position >
    /// after`, in order, at most `limit`, up to the high-water mark;
    /// resuming after the page's `through` skips and repeats nothing.
    /// [`StoreError::TooOld`] when retention trimmed changes above `after`,
    /// and when the store never issued `after` in the history it has now
    /// ([`TooOldCause::NotIssued`]: beyond its head, or a position a
    /// failover or an adopted copy lost): never a page that silently skips
    /// what it cannot serve. A page's `through` is never beyond the store's
    /// head.
    ///
    /// The default refuses: a store must serve the watch stream itself
    /// (wrappers pass it on).
    async fn changes(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        let _ = (kinds, after, limit);
        Err(StoreError::Unavailable(format!(
            "this store does not serve the change stream of cluster {cluster}"
        )))
    }

    /// [`changes`](Self::changes), read no further than `through`: a
    /// position this store's [`watch`](Self::watch) published for `cluster`.
    /// Every position up to such a value is final already, so a backend
    /// need not find the high-water mark again (PostgreSQL: one statement
    /// less per read, the change feed's workers' read after each wake-up).
    /// Passing anything else breaks the no-skip guarantee.
    ///
    /// The default reads up to the current mark, which is as correct.
    async fn changes_through(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        through: u64,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        let _ = through;
        self.changes(cluster, kinds, after, limit).await
    }

    /// Trim one batch of what `policy` no longer keeps in `cluster` (see
    /// [`retention`]): events and changes past the retention, tenures beyond
    /// the newest kept per lease. Readers behind what was trimmed get
    /// [`StoreError::TooOld`].
    ///
    /// The default trims nothing: a store that keeps no log of its own
    /// (a wrapper that does not pass it on) has nothing to trim.
    async fn trim(
        &self,
        cluster: &str,
        policy: &retention::Policy,
    ) -> Result<retention::Trimmed, StoreError> {
        let _ = (cluster, policy);
        Ok(retention::Trimmed::default())
    }

    /// A receiver of a number that grows whenever `cluster` has new changes
    /// or events below the high-water mark (the last such position; NOTIFY
    /// for PostgreSQL, with a polling fallback). A watcher reads after its
    /// own cursor when it changes.
    ///
    /// The channel closes (its sender is dropped) when the stream it
    /// followed ended: the PostgreSQL feed found its database in another
    /// history (another WAL timeline after a failover, an adopted copy,
    /// positions it saw handed out gone), so what it published, and what a
    /// watcher read, may be gone. A watcher then subscribes again, reads
    /// from its cursor up to the store's own mark ([`Store::changes`], not
    /// [`Store::changes_through`]), where a cursor the store never issued
    /// is [`StoreError::TooOld`], and re-lists what it follows.
    fn watch(&self, cluster: &str) -> tokio::sync::watch::Receiver<u64>;

    /// How many objects of `kind` exist, counting no further than `limit`
    /// (a caller asking "more than N?" passes N + 1, so the cost stays
    /// bounded however large the kind grows). Backs the write quotas.
    ///
    /// The default pages through [`Store::list`]; both backends answer in
    /// one step instead.
    async fn count(&self, cluster: &str, kind: &str, limit: u64) -> Result<u64, StoreError> {
        let mut counted = 0u64;
        let mut after: Option<String> = None;
        while counted < limit {
            let page = self
                .list(
                    cluster,
                    kind,
                    after.as_deref(),
                    crate::limits::MAX_PAGE_SIZE,
                )
                .await?;
            counted += page.objects.len() as u64;
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(counted.min(limit))
    }
}
