//! The durable state backend: objects, the change stream and the event log
//! in PostgreSQL, in the same database (and migrations) as the leases.
//!
//! # One commit, one transaction
//!
//! Every write — a guest's fenced commit or a user's put or delete — is one
//! transaction of the same shape; the server runs its statements in this
//! order:
//!
//! 0. `BEGIN`, and bound the transaction's idle time
//!    ([`BOUND_IDLE_TRANSACTION`]), in one message: a host that stalls
//!    before `COMMIT` (paused, partitioned) loses the transaction and its
//!    locks — the lease row above all — after that long, instead of
//!    holding them until the server notices the connection is gone;
//! 1. and 2. the authority's fence check and the tenure's write count, in
//!    one statement (guests only; see
//!    [`crate::authority::fence_check::check_fence_and_count`]): the count
//!    updates the tenure row only while the tenure is open, which holds
//!    that row until the transaction ends, and the lease row is read to
//!    check holder, epoch, not released, not expired. The test-only
//!    unfenced build skips both and counts the write after `COMMIT` in its
//!    own statement, so nothing in its transaction touches a row the next
//!    grant locks;
//! 3. the position floor ([`FLOOR_SQL`]): a shared advisory transaction
//!    lock whose key is the sequence's `last_value`, a number below every
//!    position this commit will take (see "Positions" below);
//! 4. the name claims ([`CLAIM_SQL`], only for a commit that may create):
//!    an exclusive advisory transaction lock per object it may create, in
//!    key order, so creates of one name are serialized like updates of one
//!    row;
//! 5. lock the rows of every object the commit names (`FOR UPDATE`, in key
//!    order so concurrent commits cannot deadlock), and the owners its
//!    metadata names, and read their state; the store then checks each
//!    precondition against them ([`super::plan`]); a commit that deletes
//!    objects then locks and reads what they own ([`OWNED_SQL`], one
//!    round trip per level of ownership, only when there is any);
//! 6. in one statement ([`WRITE_SQL`]): take the revision and then one
//!    position per object change and per event from the sequence
//!    `leasehold_positions`, write the objects (version = that revision,
//!    attributed to the writer), append one change per written object and
//!    the events;
//! 7. `COMMIT`, sent only once the fence check has answered "current";
//! 8. after `COMMIT`, wake this process's watchers and hand the cluster to
//!    the notifier, which sends `NOTIFY leasehold_feed, '<cluster>'` in a
//!    transaction of its own (see [`super::postgres_feed`]).
//!
//! Steps 0–5 share one network flight, step 6 is the second, `COMMIT` the
//! third. The transaction is begun and ended by hand (not through
//! `tokio_postgres::Transaction`, whose `BEGIN` costs a round trip of its
//! own); a connection goes back to the pool only after its `COMMIT` or
//! `ROLLBACK` was answered, and is closed otherwise.
//!
//! Fencing (L4) rests on the open tenure's row being held (by the count's
//! `UPDATE`) from the check to `COMMIT`: a grant or release locks that row
//! before it ends the tenure, so it waits for this commit or, if it came
//! first, the count finds the tenure ended and nothing is written. The
//! lease row is only read, so no fenced commit delays a renewal. A stale
//! commit's count and locks are undone by its rollback.
//!
//! # Positions, and why no lock is held across COMMIT for them
//!
//! Nothing of the commit order is serialized any more: the sequence hands
//! out numbers without a transactional lock, and `COMMIT`s of different
//! objects proceed (and share fsyncs, PostgreSQL's group commit) in any
//! order. What the order still promises:
//!
//! - **Per object, positions follow commit order.** Two commits that write
//!   one object are serialized by its row lock (update, delete) or by its
//!   name claim (create): the second takes its revision and positions in
//!   step 6, after the lock it waited for in steps 4–5 was released by the
//!   first one's end, and the sequence only grows. So an object's versions
//!   strictly increase and are never reused, even across delete and
//!   re-create (a create of a deleted name took its claim after the
//!   delete's row lock was released, or it would have found the row).
//! - **A reader never skips a committed entry and never sees one twice.**
//!   Positions are read in order, but only up to a high-water mark at
//!   which every position below is final; see [`PostgresStore::high_water`].
//!   A cursor is the last position delivered; everything after it that
//!   commits later is above the mark the cursor came from.
//!
//! The fence check (with the write count) is prepared once per session,
//! before the transaction (like the store's own statements), and pipelined
//! with the store's statements: one network flight carries its execution
//! with the locks. Fencing therefore costs the server one statement and a
//! row update (the count, which is also the fence's lock), but no extra
//! round trip.
//!
//! Lock order everywhere: lease row, tenure row, position floor (shared,
//! never waited for: nobody takes it exclusively), name claims (in key
//! order), object rows (in key order). The authority's grant and release
//! take the lease row, then the tenure row; a fenced commit takes its
//! tenure row, floor, claims, objects; an API write takes floor, claims,
//! objects: so no cycle.
//!
//! Must never: hand back a connection whose transaction outcome is unknown
//! (a timed-out commit's connection is closed, not pooled); report a
//! credential in an error; take a position before its floor is held.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::authority::AuthorityError;
use crate::authority::fence_check::{
    BOUND_IDLE_TRANSACTION, COUNTS_WRITES_IN_TRANSACTION, FenceStatements, check_fence_and_count,
    record_write_after_commit,
};
use crate::db::{Database, bounded};
use crate::fence::{Epoch, Fence};
use crate::limits::{LOST_CREATE_RETRIES, MAX_COLLECTED_PER_COMMIT};

use super::plan::{Batch, Current, Deleting, Plan, Planned, api_batch, written};
use super::postgres_feed::{Feed, HIGH_WATER_SQL, Mark, high_water};
use super::validate::{
    check_change_request, check_cluster, check_key, check_list_request, page_limit,
};
use super::{
    ApiWrite, CHANGE_STREAM, Change, ChangeKind, ChangePage, Committed, EVENT_LOG, Event, Metadata,
    NewEvent, Object, ObjectKey, Op, Origin, Page, Selector, Store, StoreError, Written,
    check_floor, check_issued, not_issued,
};

/// Step 3: the position floor. A shared advisory transaction lock in the
/// two-key space (which the holder claim and the migration lock, one-key
/// locks, never share), its key the sequence's `last_value`: every number
/// `nextval` gives this transaction later is above it. Encoded as
/// `(FLOOR_TAG << 16 | (floor >> 31) mod 2^16, floor mod 2^31)`: the floor
/// modulo 2^47, which a reader decodes as the highest number at most the
/// head with those low bits (see [`HIGH_WATER_SQL`]; a floor is never 2^47
/// behind the head: that many numbers would be taken while one commit is
/// open).
///
/// The same statement refuses (SQLSTATE [`BELOW_FLOOR`]) before the commit
/// takes any number when the sequence is below its timeline's floor
/// (migration 19: a promoted standby, or an adopted copy, that has not
/// raised it yet): the store raises it ([`PostgresStore::raise_positions`])
/// and tries again, so no number is ever issued below the floor. On a
/// server in recovery the floor is unknown (NULL) and nothing is refused
/// here: the write itself fails as read-only.
const FLOOR_SQL: &str = "
SELECT pg_advisory_xact_lock_shared(
           ((19526::int8 << 16) | ((s.floor >> 31) & 65535))::int4,
           (s.floor & 2147483647)::int4)
  FROM (SELECT CASE WHEN p.head + 1 < f.floor
                    THEN leasehold_positions_below_floor(p.head, f.floor)
                    ELSE p.head END AS floor
          FROM (SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END AS head
                  FROM leasehold_positions) AS p,
               (SELECT leasehold_position_floor(leasehold_timeline()) AS floor) AS f) AS s";

/// What [`FLOOR_SQL`] answers when the sequence is below its timeline's
/// floor (raised by `leasehold_positions_below_floor`, migration 19).
const BELOW_FLOOR: &str = "LH001";

/// How often one commit raises the sequence and tries again before it
/// gives up (a floor that moves again while it raises: another failover).
const FLOOR_RAISES: usize = 3;

/// The sequence's raise to its timeline's floor, in two transactions of
/// their own: the gap it leaves is recorded (and committed) first, then
/// the sequence is raised (`setval`, which no transaction undoes), so a
/// raised sequence always has its gap on record. Each answers the floor.
const RECORD_GAP_SQL: &str = "SELECT leasehold_record_position_gap()";
const RAISE_SQL: &str = "SELECT leasehold_raise_positions()";

/// The highest position this database kept from before the raise to the
/// latest floor, and that floor: what the warning of a raise names.
const LAST_GAP_SQL: &str = "
SELECT kept, floor, timeline FROM leasehold_position_gaps ORDER BY floor DESC LIMIT 1";

/// The tag in the upper half of a floor lock's first key (`LF`), below
/// 2^15 so the key stays a positive `int4`. [`FLOOR_SQL`] spells it.
pub(crate) const FLOOR_TAG: i64 = 19526;

/// Step 4: the name claims of a commit that may create, in key order. The
/// first key (`LC` in its upper half) differs from every floor lock's
/// upper half, so a claim and a floor never meet.
const CLAIM_SQL: &str = "
SELECT count(pg_advisory_xact_lock(1279459328, c.key))
  FROM (SELECT DISTINCT hashtext($1::text || '/' || k.kind || '/' || k.name) AS key
          FROM unnest($2::text[], $3::text[]) AS k(kind, name)
         ORDER BY 1) AS c";

/// The columns of an object's state, in the order [`current_at`] reads
/// them.
macro_rules! state_columns {
    () => {
        "o.version, o.value, o.generation, o.status, o.labels::text, o.owner_kind, \
         o.owner_name, o.finalizers, o.deleting_since"
    };
}

/// Step 5: lock the objects the commit names (and the owners it names in
/// metadata), in key order, and read their state.
///
/// Each key is looked up by itself, through the primary key (a `LATERAL`
/// subquery that names every column of it): the server plans this
/// statement once per pooled session (see [`BEGIN_BOUNDED`]), often while
/// the table is still small, and a join the planner may choose from such
/// statistics — hash the keys, scan every object of the cluster — would
/// stay the plan as the table grows. The keys are sorted first, in the
/// columns' byte order (`"C"`), so the rows are locked in key order.
const LOCK_SQL: &str = concat!(
    "
SELECT o.kind, o.name, ",
    state_columns!(),
    "
  FROM (SELECT k.kind, k.name
          FROM unnest($2::text[], $3::text[]) AS k(kind, name)
         ORDER BY k.kind COLLATE \"C\", k.name COLLATE \"C\") AS k
 CROSS JOIN LATERAL (
       SELECT *
         FROM leasehold_objects o
        WHERE o.cluster = $1::text AND o.kind = k.kind AND o.name = k.name
          FOR UPDATE) AS o
 ORDER BY o.kind, o.name"
);

/// Step 5, garbage collection: lock and read the objects owned by `$2/$3`,
/// in key order, at most `$4` (the plan refuses more than its bound).
///
/// Planned once per session like [`LOCK_SQL`], and written the same way:
/// the owned objects are found per owner through the owner index, sorted
/// in key order, and then each is locked through the primary key. An
/// object whose owner changed while this waited for its lock is left out
/// (its new owner is not being deleted: every owner named here is locked
/// by this commit, so nobody can make it an owner meanwhile). Past the
/// bound the commit is refused, so locking more than `$4` objects then
/// (this may lock them all) holds nothing for long.
const OWNED_SQL: &str = concat!(
    "
SELECT o.kind, o.name, ",
    state_columns!(),
    "
  FROM (SELECT p.kind, p.name, p.owner_kind, p.owner_name
          FROM unnest($2::text[], $3::text[]) AS k(kind, name)
         CROSS JOIN LATERAL (
               SELECT q.kind, q.name, q.owner_kind, q.owner_name
                 FROM leasehold_objects q
                WHERE q.cluster = $1::text AND q.owner_kind = k.kind
                  AND q.owner_name = k.name
               OFFSET 0) AS p
         ORDER BY p.kind COLLATE \"C\", p.name COLLATE \"C\") AS c
 CROSS JOIN LATERAL (
       SELECT *
         FROM leasehold_objects o
        WHERE o.cluster = $1::text AND o.kind = c.kind AND o.name = c.name
          AND o.owner_kind = c.owner_kind AND o.owner_name = c.owner_name
          FOR UPDATE) AS o
 ORDER BY o.kind, o.name
 LIMIT $4::int8"
);

/// Step 6: positions, objects, changes and events in one statement.
///
/// `revision` takes the commit's revision (its first number), then
/// `change_positions` one number per object change in input order, then
/// `event_positions` one per event in input order (each reads the one
/// before, so its numbers are taken after). `rows` are the objects created
/// (`c`) or rewritten (`u`), with their whole new state; a row marked by
/// this commit (`mark`) takes the commit's time as `deleting_since`.
/// `created` uses `ON CONFLICT DO NOTHING` so a create that lost a race is
/// reported (by its absence from the result) instead of aborting the
/// transaction.
///
/// `targets` finds each row to rewrite or delete by itself, through the
/// primary key, as [`LOCK_SQL`] does and for the same reason (a plan made
/// once per session must not join against a scan of the cluster's
/// objects); `updated` and `deleted` then reach those rows by their
/// physical address (a TID scan). The addresses cannot move under the
/// statement: step 5 holds every such row locked. They name no key column
/// of the row beside the address, so no join through the primary key's
/// range is open to the planner either; kind and name are compared again
/// as a check.
const WRITE_SQL: &str = "
WITH revision AS MATERIALIZED (
    SELECT nextval('leasehold_positions') AS revision, clock_timestamp() AS at
), change_positions AS MATERIALIZED (
    SELECT w.kind, w.name, w.change, w.version, w.ord, w.owner_kind, w.owner_name,
           w.labels::jsonb AS labels, w.previous, w.previous_owner_kind,
           w.previous_owner_name, w.previous_labels::jsonb AS previous_labels,
           nextval('leasehold_positions') AS position
      FROM revision,
           unnest($23::text[], $24::text[], $25::text[], $26::int8[], $28::text[],
                  $29::text[], $30::text[], $31::bool[], $32::text[], $33::text[],
                  $34::text[])
           WITH ORDINALITY AS w(kind, name, change, version, owner_kind, owner_name, labels,
                                previous, previous_owner_kind, previous_owner_name,
                                previous_labels, ord)
), event_positions AS MATERIALIZED (
    SELECT e.kind, e.name, e.reason, e.message, e.ord,
           nextval('leasehold_positions') AS seq
      FROM (SELECT count(*) FROM change_positions) AS changes_first,
           unnest($16::text[], $17::text[], $18::text[], $19::text[])
           WITH ORDINALITY AS e(kind, name, reason, message, ord)
), rows AS MATERIALIZED (
    SELECT w.op, w.kind, w.name, w.value, w.labels::jsonb AS labels,
           w.owner_kind, w.owner_name,
           ARRAY(SELECT jsonb_array_elements_text(w.finalizers::jsonb)) AS finalizers,
           w.status, w.generation,
           CASE WHEN w.mark THEN r.at ELSE w.deleting_since END AS deleting_since
      FROM revision r,
           unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                  $8::text[], $9::text[], $10::text[], $11::int8[], $12::timestamptz[],
                  $13::bool[])
           AS w(op, kind, name, value, labels, owner_kind, owner_name, finalizers, status,
                generation, deleting_since, mark)
), created AS (
    INSERT INTO leasehold_objects AS o
           (cluster, kind, name, version, value, updated_at, lease, epoch, holder,
            labels, owner_kind, owner_name, finalizers, status, generation, deleting_since)
    SELECT $1::text, c.kind, c.name, r.revision, c.value, r.at,
           $20::text, $21::int8, $22::text,
           c.labels, c.owner_kind, c.owner_name, c.finalizers, c.status, c.generation,
           c.deleting_since
      FROM revision r, rows c
     WHERE c.op = 'c'
    ON CONFLICT (cluster, kind, name) DO NOTHING
    RETURNING o.kind, o.name
), targets AS MATERIALIZED (
    SELECT k.op, t.tid, k.kind, k.name
      FROM (SELECT 'u' AS op, u.kind, u.name FROM rows u WHERE u.op = 'u'
            UNION ALL
            SELECT 'd', d.kind, d.name
              FROM unnest($14::text[], $15::text[]) AS d(kind, name)) AS k
     CROSS JOIN LATERAL (
           SELECT o.ctid AS tid
             FROM leasehold_objects o
            WHERE o.cluster = $1::text AND o.kind = k.kind AND o.name = k.name
           OFFSET 0) AS t
), updated AS (
    UPDATE leasehold_objects o
       SET version = r.revision, value = u.value, updated_at = r.at,
           lease = $20::text, epoch = $21::int8, holder = $22::text,
           labels = u.labels, owner_kind = u.owner_kind, owner_name = u.owner_name,
           finalizers = u.finalizers, status = u.status, generation = u.generation,
           deleting_since = u.deleting_since
      FROM revision r, rows u, targets t
     WHERE u.op = 'u' AND t.op = 'u' AND t.kind = u.kind AND t.name = u.name
       AND o.ctid = t.tid AND o.kind = t.kind AND o.name = t.name
    RETURNING 1
), deleted AS (
    DELETE FROM leasehold_objects o
     USING targets t
     WHERE t.op = 'd' AND o.ctid = t.tid AND o.kind = t.kind AND o.name = t.name
    RETURNING 1
), recorded AS (
    INSERT INTO leasehold_changes
           (cluster, position, revision, at, kind, name, change, version, lease, epoch, holder,
            traceparent, owner_kind, owner_name, labels, previous, previous_owner_kind,
            previous_owner_name, previous_labels)
    SELECT $1::text, w.position, r.revision, r.at, w.kind, w.name, w.change,
           coalesce(w.version, r.revision), $20::text, $21::int8, $22::text, $27::text,
           w.owner_kind, w.owner_name, w.labels, w.previous, w.previous_owner_kind,
           w.previous_owner_name, w.previous_labels
      FROM revision r, change_positions w
    RETURNING 1
), appended AS (
    INSERT INTO leasehold_events
           (cluster, seq, revision, at, kind, name, reason, message, lease, epoch, holder)
    SELECT $1::text, e.seq, r.revision, r.at,
           e.kind, e.name, e.reason, e.message, $20::text, $21::int8, $22::text
      FROM revision r, event_positions e
    RETURNING 1
)
SELECT r.revision, r.at,
       ARRAY(SELECT seq FROM event_positions ORDER BY ord) AS event_seqs,
       ARRAY(SELECT kind FROM created) AS created_kinds,
       ARRAY(SELECT name FROM created) AS created_names,
       (SELECT count(*) FROM updated) AS updated,
       (SELECT count(*) FROM deleted) AS deleted,
       (SELECT count(*) FROM recorded) AS recorded,
       (SELECT count(*) FROM appended) AS appended
  FROM revision r";

/// What a write reads about the database it reaches (see
/// [`PostgresStore::pin_database`]): its uuid, the server's system
/// identifier, the database's oid and name, whether the server is in
/// recovery, the newest schema migration applied, and the WAL timeline
/// (none in recovery).
pub(super) const DATABASE_ID_SQL: &str = "
SELECT d.id,
       (SELECT system_identifier FROM pg_control_system()),
       (SELECT oid FROM pg_database WHERE datname = current_database())::int8,
       current_database()::text,
       pg_is_in_recovery(),
       (SELECT max(version) FROM leasehold_migrations),
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8 END
  FROM leasehold_database d";

const GET_SQL: &str = concat!(
    "
SELECT ",
    state_columns!(),
    "
  FROM leasehold_objects o
 WHERE o.cluster = $1::text AND o.kind = $2::text AND o.name = $3::text"
);

/// A list of a kind's objects after a cursor, in name order, with the
/// selector's conditions (if any) between the key range and the order.
/// Names compare in the `C` collation (migration 3), the byte order the
/// memory backend uses; '' sorts before every valid name.
macro_rules! list_sql {
    ($($condition:literal),*) => {
        concat!(
            "
SELECT o.name, ",
            state_columns!(),
            "
  FROM leasehold_objects o
 WHERE o.cluster = $1::text AND o.kind = $2::text AND o.name > $3::text",
            $($condition,)*
            "
 ORDER BY o.name
 LIMIT $4::int8"
        )
    };
}

const LIST_SQL: &str = list_sql!();

/// Selective lists, one statement per shape of selector (an absent
/// condition is not a neutral `@> '{}'`: that would scan a whole GIN
/// index, and `{}` is not contained in an array or scalar value), each
/// run unnamed so that it is planned for the selector's values. Labels use
/// `leasehold_objects_labels` (migration 8), containment of the value the
/// expression index `leasehold_objects_value` on `(value::jsonb)`
/// (migration 12): the condition is written exactly as that expression so
/// the planner can use it. Where a condition matches most of a kind, the
/// planner may walk the primary key in name order instead and stop at the
/// page's end; both plans answer the same rows.
pub(super) const LIST_LABELS_SQL: &str = list_sql!(
    "
   AND o.labels @> $5::jsonb"
);

/// See [`LIST_LABELS_SQL`].
pub(super) const LIST_CONTAINS_SQL: &str = list_sql!(
    "
   AND (o.value::jsonb) @> $5::jsonb"
);

/// See [`LIST_LABELS_SQL`].
pub(super) const LIST_SELECTED_SQL: &str = list_sql!(
    "
   AND o.labels @> $5::jsonb
   AND (o.value::jsonb) @> $6::jsonb"
);

/// Bounded by the limit inside, so the primary key's index is scanned at
/// most `limit` entries deep however many objects the kind has.
const COUNT_SQL: &str = "
SELECT count(*) FROM (
  SELECT 1 FROM leasehold_objects
   WHERE cluster = $1::text AND kind = $2::text
   LIMIT $3::int8
) AS bounded";

/// What a read of the event log or the change stream checks of its cursor
/// `$2`, in the same statement as its rows: `head`, the last position the
/// sequence handed out (a cursor above it was never issued here), and
/// `lost`: when the cursor lies in a gap a raise of the sequence to its
/// timeline's floor left (migration 19), between the highest position the
/// database kept from before and the floor's eve, where only a history the
/// database no longer has (a former primary's lost commits, the original
/// of an adopted copy) can have given it, that highest position kept (the
/// lowest, if gaps nest): a reader resumes after it, since every position
/// above it is of the history the database has now.
macro_rules! cursor_checks {
    () => {
        ",
               (SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END
                  FROM leasehold_positions) AS head,
               (SELECT min(g.kept) FROM leasehold_position_gaps g
                 WHERE $2::int8 > g.kept AND $2::int8 < g.floor - 1) AS lost"
    };
}

/// Bounded by the high-water mark `$4`, read by an earlier statement (see
/// [`PostgresStore::high_water`]). The first column is the cluster's
/// retention floor for events, read in the same statement (one snapshot)
/// as the rows: a cursor below it has lost events to trimming (see
/// [`super::retention`]); the last two are [`cursor_checks`]. One row with
/// NULL event columns when no event follows.
const EVENTS_SQL: &str = concat!(
    "
SELECT f.floor, e.seq, e.revision, e.at, e.kind, e.name, e.reason, e.message, e.lease,
       e.epoch, e.holder, f.head, f.lost
  FROM (SELECT coalesce((SELECT events_floor FROM leasehold_retention
                          WHERE cluster = $1::text), 0) AS floor",
    cursor_checks!(),
    ") AS f
  LEFT JOIN LATERAL (
       SELECT seq, revision, at, kind, name, reason, message, lease, epoch, holder
         FROM leasehold_events
        WHERE cluster = $1::text AND seq > $2::int8 AND seq <= $4::int8
        ORDER BY seq
        LIMIT $3::int8) AS e ON true
 ORDER BY e.seq"
);

/// The columns of [`EVENTS_SQL`] holding [`cursor_checks`].
const EVENTS_CHECKS: usize = 11;

/// Bounded like [`EVENTS_SQL`] (by a mark, or by a position the feed
/// published from one), with the change stream's retention floor first and
/// [`cursor_checks`] last the same way; an empty kind list means every
/// kind.
const CHANGES_SQL: &str = concat!(
    "
SELECT f.floor, c.position, c.revision, c.at, c.kind, c.name, c.change, c.version, c.lease,
       c.epoch, c.holder, c.traceparent, c.owner_kind, c.owner_name, c.labels::text,
       c.previous, c.previous_owner_kind, c.previous_owner_name, c.previous_labels::text,
       f.head, f.lost
  FROM (SELECT coalesce((SELECT changes_floor FROM leasehold_retention
                          WHERE cluster = $1::text), 0) AS floor",
    cursor_checks!(),
    ") AS f
  LEFT JOIN LATERAL (
       SELECT position, revision, at, kind, name, change, version, lease, epoch, holder,
              traceparent, owner_kind, owner_name, labels, previous, previous_owner_kind,
              previous_owner_name, previous_labels
         FROM leasehold_changes
        WHERE cluster = $1::text AND position > $2::int8 AND position <= $4::int8
          AND (cardinality($5::text[]) = 0 OR kind = ANY($5::text[]))
        ORDER BY position
        LIMIT $3::int8) AS c ON true
 ORDER BY c.position"
);

/// The columns of [`CHANGES_SQL`] holding [`cursor_checks`].
const CHANGES_CHECKS: usize = 19;

const WRITTEN_BY_SQL: &str = "
SELECT lease, epoch, holder FROM leasehold_objects
 WHERE cluster = $1::text AND kind = $2::text AND name = $3::text";

/// Objects, events and the change feed in PostgreSQL.
pub struct PostgresStore {
    db: Database,
    feed: std::sync::Arc<Feed>,
    /// The database every write must find itself in (see
    /// [`PostgresStore::pin_database`]).
    pinned: std::sync::OnceLock<crate::authority::WritePin>,
    #[cfg(test)]
    pub(super) before_commit: Option<tests_hook::BeforeCommit>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("endpoint", &self.db.endpoint())
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.feed.stop();
    }
}

/// How one attempt at a commit ended, short of success.
enum Failed {
    /// Report this.
    Error(StoreError),
    /// An unconditional put's create lost a race; try again.
    LostCreate(ObjectKey),
    /// The `COMMIT` itself failed: report this; the transaction is over
    /// (or the connection is), so there is nothing to roll back.
    Commit(StoreError),
    /// The sequence is below its timeline's floor ([`FLOOR_SQL`]); nothing
    /// was written. Raise it and try again.
    BelowFloor,
}

/// How a commit's statements are planned, set for each commit's
/// transaction (the baseline of the store-writes benchmark sets the same).
///
/// `plan_cache_mode = force_generic_plan`: every statement of a commit
/// finds rows by key, and the server's default (a custom plan for each
/// execution while it judges that cheaper than a generic one) planned
/// [`LOCK_SQL`] anew on every commit — it never switched — and
/// [`WRITE_SQL`] on each pooled session's first executions: planning cost
/// more than executing them.
///
/// `enable_seqscan = off`: a generic plan is made once per pooled session
/// and kept, and the statistics it is made from may say the objects table
/// is a page or two (a new cluster, or analysed while small). A sequential
/// scan per key looked up would then stay the plan as the table grows: on
/// a cluster of 2,000 objects, a commit assigning 45 tasks spent 33–41 ms
/// in its `UPDATE` instead of 4 ms. The statements are written so that the
/// only other way to each row is the primary key or the row's address
/// ([`LOCK_SQL`], [`WRITE_SQL`]); nothing a commit runs needs a sequential
/// scan of a table (the sequence's one row is still read, by the only
/// plan there is).
///
/// `jit = off`: a disabled plan keeps its place but is costed beyond
/// `jit_above_cost`, so the sequence's read would be compiled on every
/// session's first commit (240 ms each, measured) — and no statement of a
/// commit runs long enough for compiling to pay.
const COMMIT_PLANNING: &str = "SET LOCAL plan_cache_mode = force_generic_plan; \
     SET LOCAL enable_seqscan = off; SET LOCAL jit = off";

/// Step 0 with the `BEGIN` before it, as one simple-protocol message (see
/// [`BOUND_IDLE_TRANSACTION`]), and [`COMMIT_PLANNING`].
static BEGIN_BOUNDED: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("BEGIN; {}; {COMMIT_PLANNING}", *BOUND_IDLE_TRANSACTION));

/// A pooled connection carrying a hand-made transaction. Back to the pool
/// only once [`Session::finish`] says the transaction ended (committed or
/// rolled back); dropped unfinished — an error before the rollback, a
/// timeout, a caller that gave up — the connection is closed instead, and
/// the server rolls back whatever did not commit.
struct Session {
    client: Option<deadpool_postgres::Object>,
    finished: bool,
}

impl Session {
    fn new(client: deadpool_postgres::Object) -> Self {
        Self {
            client: Some(client),
            finished: false,
        }
    }

    fn client(&self) -> &deadpool_postgres::Object {
        self.client
            .as_ref()
            .expect("a session holds its connection until dropped")
    }

    fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.finished
            && let Some(client) = self.client.take()
        {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Self {
        Failed::Error(error)
    }
}

impl PostgresStore {
    /// A store over `db` (migrated). The change feed polls every
    /// [`crate::timeouts::FEED_POLL`] when no notification arrives.
    /// Nothing connects until the first call.
    pub fn new(db: Database) -> Self {
        Self::with_feed_poll(db, crate::timeouts::FEED_POLL)
    }

    /// Like [`Self::new`] with another fallback poll interval for the
    /// change feed.
    pub fn with_feed_poll(db: Database, feed_poll: std::time::Duration) -> Self {
        Self {
            feed: Feed::new(db.clone(), feed_poll),
            db,
            pinned: std::sync::OnceLock::new(),
            #[cfg(test)]
            before_commit: None,
        }
    }

    /// Refuse every later write unless the database it reaches is this
    /// one: the identity the host verified (a
    /// [`crate::authority::DatabaseIdentity`]: its uuid, the server's
    /// system identifier and the database's oid, and no schema newer than
    /// this host knows), or at least this uuid. Every write through a
    /// server in recovery is refused too, and through a server on a lower
    /// timeline than writes found before (a former primary). A pool reconnects on its own,
    /// and a connection string that now reaches another database (a DNS
    /// change, a restore or a template copy put in the original's place, a
    /// standby) would otherwise have API writes acknowledged into it until
    /// the next identity re-check. The check is one more statement in each
    /// write's first flight, not a round trip. Pinning twice keeps the
    /// first pin.
    pub fn pin_database(&self, pin: impl Into<crate::authority::PinnedDatabase>) {
        let _ = self.pinned.set(crate::authority::WritePin::new(pin.into()));
    }

    /// The database this store writes to.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// A user's batch of operations and events: the same transaction as
    /// [`Store::commit_fenced`] without the fence check and tenure count,
    /// attributed to the API rather than to any lease. Versioned and
    /// all-or-nothing like every write. (Also the benchmark's baseline.)
    pub async fn commit_api(
        &self,
        cluster: &str,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<Committed, StoreError> {
        let batch = Batch::ops(cluster, Origin::api(), ops, events)?;
        self.commit(&batch, None).await
    }

    /// Who last wrote an object (a lease, epoch and holder, or the API).
    pub async fn written_by(
        &self,
        cluster: &str,
        key: &ObjectKey,
    ) -> Result<Option<Origin>, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        let client = self.client().await?;
        let row = bounded(&self.db, async {
            let statement = self.db.prepare(&client, WRITTEN_BY_SQL).await?;
            statement
                .query_opt(&client, &[&cluster, &key.kind, &key.name])
                .await
        })
        .await
        .map_err(unavailable)?;
        Ok(row.map(|r| origin(r.get(0), r.get(1), r.get(2))))
    }

    /// Bumped each time the change feed's LISTEN session is (re)established;
    /// zero until the first `watch`. For readiness checks and tests.
    pub fn feed_sessions(&self) -> watch::Receiver<u64> {
        self.feed.sessions()
    }

    /// Where the stream stands now: the last position handed out and the
    /// high-water mark (see [`super::postgres_feed`]), below which every
    /// position is final. For benchmarks and tests; readers use
    /// [`Store::changes`] and [`Store::events`], which apply it.
    pub async fn high_water(&self) -> Result<(u64, u64), StoreError> {
        let client = self.client().await?;
        let mark = self.mark(&client).await?;
        Ok((mark.head, mark.high_water))
    }

    async fn mark(&self, client: &deadpool_postgres::Object) -> Result<Mark, StoreError> {
        bounded(&self.db, async {
            let statement = self.db.prepare(client, HIGH_WATER_SQL).await?;
            high_water(client, &statement).await
        })
        .await
        .map_err(unavailable)
    }

    /// The changes of `kinds` after `after` up to `bound`: the high-water
    /// mark, or a value the feed published from one (final already): what
    /// [`Store::changes`] and [`Store::changes_through`] read.
    ///
    /// A cursor this database never issued as it is now (beyond its head,
    /// or in the gap a failover or an adoption left: [`cursor_checks`]) is
    /// [`StoreError::TooOld`] ([`super::TooOldCause::NotIssued`]), never a
    /// page: what its reader read up to it may be gone. A published value
    /// above the head is no mark of this database (the feed published it
    /// from a history before a failover, and has not seen the new one
    /// yet): the read goes up to the mark instead, so a page is never read
    /// through, nor a cursor moved past, a position this database has not
    /// handed out.
    async fn changes_below(
        &self,
        client: &deadpool_postgres::Object,
        cluster: &str,
        kinds: &[String],
        after: u64,
        bound: Bound,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        let limit = page_limit(limit);
        let mut bound = bound;
        let (rows, through) = loop {
            let through = match bound {
                Bound::Mark(mark) => {
                    check_issued(cluster, CHANGE_STREAM, after, mark.head, mark.high_water)?;
                    if mark.high_water <= after {
                        // Nothing final after the cursor. (A cursor in a
                        // gap is below the mark: the raise that left the
                        // gap moved the head, and every floor, to its
                        // floor's eve.)
                        return Ok(ChangePage {
                            changes: Vec::new(),
                            through: after,
                        });
                    }
                    mark.high_water
                }
                Bound::Published(published) => published,
            };
            let (after_sql, through_sql, limit_sql) =
                (sql_seq(after), sql_seq(through), limit as i64);
            let rows = bounded(&self.db, async {
                let statement = self.db.prepare(client, CHANGES_SQL).await?;
                statement
                    .query(
                        client,
                        &[&cluster, &after_sql, &limit_sql, &through_sql, &kinds],
                    )
                    .await
            })
            .await
            .map_err(unavailable)?;
            let (head, lost) = cursor_checked(&rows, CHANGES_CHECKS);
            if let Some(kept) = lost {
                return Err(not_issued(cluster, CHANGE_STREAM, after, kept));
            }
            if after > head {
                let mark = self.mark(client).await?;
                return Err(not_issued(cluster, CHANGE_STREAM, after, mark.high_water));
            }
            if through > head {
                // Published from another history: read up to the mark.
                bound = Bound::Mark(self.mark(client).await?);
                continue;
            }
            break (rows, through.max(after));
        };
        check_floor(cluster, CHANGE_STREAM, after, floor_of(&rows))?;
        let mut changes = Vec::with_capacity(rows.len());
        for r in &rows {
            let Some(position) = r.get::<_, Option<i64>>(1) else {
                continue;
            };
            let position = position as u64;
            let text: String = r.get(6);
            let Some(change) = ChangeKind::parse(&text) else {
                return Err(StoreError::Unavailable(format!(
                    "database {}: change {position} of cluster {cluster} is {text:?}, not created, updated or deleted",
                    self.db.endpoint()
                )));
            };
            changes.push(Change {
                position,
                revision: r.get::<_, i64>(2) as u64,
                at: r.get::<_, DateTime<Utc>>(3),
                kind: r.get(4),
                name: r.get(5),
                change,
                version: r.get::<_, i64>(7) as u64,
                origin: origin(r.get(8), r.get(9), r.get(10)),
                // Checked when written; a value that does not parse (written
                // by hand) is no context at all.
                traceparent: r
                    .get::<_, Option<&str>>(11)
                    .and_then(crate::telemetry::TraceParent::parse),
                relations: relations_at(r, 12, cluster, position)?,
                previous: if r.get::<_, bool>(15) {
                    Some(relations_at(r, 16, cluster, position)?)
                } else {
                    None
                },
            });
        }
        // A full page was read through its last change; a short one through
        // the bound.
        let through = match changes.last() {
            Some(last) if changes.len() >= limit => last.position,
            _ => through,
        };
        Ok(ChangePage { changes, through })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.db.client().await.map_err(unavailable)
    }

    /// Raise the sequence to its timeline's floor (migration 19), after
    /// recording the gap it leaves, each in a transaction of its own (a
    /// commit found it below the floor: the first on a promoted standby,
    /// or on an adopted copy). Idempotent: a raise another session made
    /// meanwhile leaves nothing to do. Logged once per raise, with the gap.
    pub async fn raise_positions(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        let (before, floor) = bounded(&self.db, async {
            let head = self.db.prepare(&client, HIGH_WATER_SQL).await?;
            let before = high_water(&client, &head).await?.head;
            let record = self.db.prepare(&client, RECORD_GAP_SQL).await?;
            record.query_one(&client, &[]).await?;
            let raise = self.db.prepare(&client, RAISE_SQL).await?;
            let floor: Option<i64> = raise.query_one(&client, &[]).await?.get(0);
            Ok::<_, tokio_postgres::Error>((before, floor))
        })
        .await
        .map_err(unavailable)?;
        let Some(floor) = floor else {
            // In recovery: the write fails as read-only when tried again.
            return Ok(());
        };
        if before + 1 < floor as u64 {
            let gap = bounded(&self.db, async {
                let statement = self.db.prepare(&client, LAST_GAP_SQL).await?;
                statement.query_opt(&client, &[]).await
            })
            .await
            .map_err(unavailable)?;
            let (kept, timeline) = gap.map_or((None, None), |row| {
                (Some(row.get::<_, i64>(0)), Some(row.get::<_, i64>(2)))
            });
            tracing::warn!(
                database = %self.db.endpoint(),
                timeline,
                head = before,
                floor,
                kept,
                "positions were below this timeline's floor (a failover to a standby, or an \
                 adopted copy): raised them to the floor; a reader whose cursor lies above \
                 the last position kept from before is told to re-list"
            );
        }
        Ok(())
    }

    /// Run `batch` as one transaction, checked against `fence` if given.
    /// (Tests call it without a fence to prove their checkers catch an
    /// unfenced write.)
    pub(super) async fn commit(
        &self,
        batch: &Batch,
        fence: Option<&Fence>,
    ) -> Result<Committed, StoreError> {
        self.commit_planned(batch, fence)
            .await
            .map(|(committed, _, _)| committed)
    }

    /// [`Self::commit`], also handing back the plan it carried out and the
    /// commit's time (for an API write's answer).
    async fn commit_planned(
        &self,
        batch: &Batch,
        fence: Option<&Fence>,
    ) -> Result<(Committed, Plan, DateTime<Utc>), StoreError> {
        let mut attempt = 0;
        let mut raised = 0;
        loop {
            let mut session = Session::new(self.client().await?);
            // The statement bound covers the whole transaction: a commit
            // waits on other commits' row locks at most that long.
            let outcome = tokio::time::timeout(
                crate::timeouts::DATABASE_STATEMENT,
                self.transact(&mut session, batch, fence),
            )
            .await;
            match outcome {
                Ok(Ok(committed)) => {
                    // Wake this process's watchers now (once the high-water
                    // mark passes the commit); others hear the NOTIFY.
                    self.feed.committed(&batch.cluster);
                    return Ok(committed);
                }
                Ok(Err(Failed::Error(error) | Failed::Commit(error))) => return Err(error),
                Ok(Err(Failed::BelowFloor)) => {
                    drop(session);
                    raised += 1;
                    if raised > FLOOR_RAISES {
                        return Err(StoreError::Unavailable(format!(
                            "database {}: the position sequence is still below its timeline's \
                             floor after {FLOOR_RAISES} raises; nothing was written to cluster {}",
                            self.db.endpoint(),
                            batch.cluster
                        )));
                    }
                    self.raise_positions().await?;
                }
                Ok(Err(Failed::LostCreate(key))) => {
                    attempt += 1;
                    if attempt > LOST_CREATE_RETRIES {
                        return Err(StoreError::Conflict {
                            key,
                            reason: format!(
                                "created and deleted concurrently {attempt} times while this put ran"
                            ),
                        });
                    }
                }
                Err(_elapsed) => {
                    // The transaction may still be open, or its COMMIT in
                    // flight: `session` is dropped unfinished, so it is
                    // closed (the server then rolls back whatever did not
                    // commit) instead of pooled.
                    drop(session);
                    return Err(StoreError::Unavailable(format!(
                        "database {}: no answer within {}; whether the commit to cluster {} was applied is unknown",
                        self.db.endpoint(),
                        humantime::format_duration(crate::timeouts::DATABASE_STATEMENT),
                        batch.cluster
                    )));
                }
            }
        }
    }

    /// One attempt: the transaction described in the module comment. The
    /// transaction is begun and ended by hand rather than through
    /// [`tokio_postgres::Transaction`], whose `BEGIN` is a round trip of its
    /// own: here `BEGIN` travels in the first flight with the statements
    /// after it. Ends the transaction (COMMIT, or ROLLBACK on any failure)
    /// before it returns, and marks `session` finished once it has; a
    /// session left unfinished is closed, never pooled.
    async fn transact(
        &self,
        session: &mut Session,
        batch: &Batch,
        fence: Option<&Fence>,
    ) -> Result<(Committed, Plan, DateTime<Utc>), Failed> {
        let result = self.transact_open(session.client(), batch, fence).await;
        let client = session.client();
        match &result {
            // Committed, or the COMMIT failed: the transaction is over on
            // a live connection, or the connection is broken (and the pool
            // drops it when it sees it closed).
            Ok(_) | Err(Failed::Commit(_)) => session.finish(),
            // Anything else: roll back, so the pooled session is idle.
            Err(_) => {
                if client.batch_execute("ROLLBACK").await.is_ok() {
                    session.finish();
                }
            }
        }
        result.map_err(|failed| match failed {
            Failed::Commit(error) => Failed::Error(error),
            other => other,
        })
    }

    /// [`Self::transact`] up to and including its `COMMIT`; on failure the
    /// transaction may still be open.
    async fn transact_open(
        &self,
        client: &deadpool_postgres::Object,
        batch: &Batch,
        fence: Option<&Fence>,
    ) -> Result<(Committed, Plan, DateTime<Utc>), Failed> {
        let db_error =
            |e: tokio_postgres::Error| Failed::Error(unavailable(self.db.unavailable(e)));
        let authority_error = |e: AuthorityError| Failed::Error(self.authority_error(e));
        let floor = self.db.prepare(client, FLOOR_SQL).await.map_err(db_error)?;
        let claim = self.db.prepare(client, CLAIM_SQL).await.map_err(db_error)?;
        let lock = self.db.prepare(client, LOCK_SQL).await.map_err(db_error)?;
        let owned = self.db.prepare(client, OWNED_SQL).await.map_err(db_error)?;
        let write = self.db.prepare(client, WRITE_SQL).await.map_err(db_error)?;
        let fencing = match fence {
            Some(fence) => Some((
                fence,
                FenceStatements::prepare(&self.db, client)
                    .await
                    .map_err(db_error)?,
            )),
            None => None,
        };
        let database_id = match self.pinned.get() {
            Some(pinned) => Some((
                pinned,
                self.db
                    .prepare(client, DATABASE_ID_SQL)
                    .await
                    .map_err(db_error)?,
            )),
            None => None,
        };
        let tx: &tokio_postgres::Client = client;
        let keys = batch.keys();
        let kinds: Vec<&str> = keys.iter().map(|k| k.kind.as_str()).collect();
        let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
        let creatable = batch.may_create();
        let creatable_kinds: Vec<&str> = creatable.iter().map(|k| k.kind.as_str()).collect();
        let creatable_names: Vec<&str> = creatable.iter().map(|k| k.name.as_str()).collect();

        // BEGIN, and bound the transaction's idle time: a host that stalls
        // before COMMIT must not hold the lease row (and the objects) for
        // longer than this. One simple-protocol message.
        let begun = async { tx.batch_execute(&BEGIN_BOUNDED).await.map_err(db_error) };
        let database_checked = async {
            let Some((pinned, statement)) = &database_id else {
                return Ok(());
            };
            let row = statement.query_one(tx, &[]).await.map_err(db_error)?;
            match pinned.refusal(&write_target(&row)) {
                None => Ok(()),
                Some(problems) => Err(Failed::Error(StoreError::Unavailable(format!(
                    "database {} is not the one this host verified, or cannot take writes: \
                     {problems}; refusing to write",
                    self.db.endpoint()
                )))),
            }
        };
        // The fence check and the tenure's write count, in one statement
        // (the unfenced test build does neither here).
        let fence_checked = async {
            match &fencing {
                Some((fence, statements)) if COUNTS_WRITES_IN_TRANSACTION => {
                    check_fence_and_count(tx, statements, fence)
                        .await
                        .map_err(authority_error)
                }
                _ => Ok(()),
            }
        };
        // Before any position is taken (step 6, the next flight).
        let floored = async {
            floor.execute(tx, &[]).await.map(drop).map_err(|e| {
                if e.code().is_some_and(|c| c.code() == BELOW_FLOOR) {
                    Failed::BelowFloor
                } else {
                    db_error(e)
                }
            })
        };
        let claimed = async {
            if creatable.is_empty() {
                return Ok(());
            }
            claim
                .execute(tx, &[&batch.cluster, &creatable_kinds, &creatable_names])
                .await
                .map(drop)
                .map_err(db_error)
        };
        let written = async {
            let rows = lock
                .query(tx, &[&batch.cluster, &kinds, &names])
                .await
                .map_err(db_error)?;
            let mut current: HashMap<ObjectKey, Current> = rows
                .iter()
                .map(|r| Ok((key_at(r), current_at(r, 2)?)))
                .collect::<Result<_, StoreError>>()?;
            let mut plan = batch.resolve(|k| current.get(k)).map_err(Failed::from)?;
            // Garbage collection: lock and read what the deleted objects
            // own, transitively (a round trip per level, only when a delete
            // found owned objects).
            loop {
                let owners = plan.owners_to_collect();
                if owners.is_empty() {
                    break;
                }
                let kinds: Vec<&str> = owners.iter().map(|k| k.kind.as_str()).collect();
                let names: Vec<&str> = owners.iter().map(|k| k.name.as_str()).collect();
                let bound = MAX_COLLECTED_PER_COMMIT as i64 + 1;
                let rows = owned
                    .query(tx, &[&batch.cluster, &kinds, &names, &bound])
                    .await
                    .map_err(db_error)?;
                let found = rows
                    .iter()
                    .map(|r| Ok((key_at(r), current_at(r, 2)?)))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                // What collection deletes or marks records its relations
                // too.
                current.extend(found.iter().cloned());
                plan.collect(batch, found)?;
            }
            let params = WriteParams::new(&plan, &batch.origin, &current);
            let row = write
                .query_one(tx, &params.as_sql(&batch.cluster))
                .await
                .map_err(db_error)?;
            Ok::<_, Failed>((plan, row))
        };
        // `biased`: poll in this order, so each flight's requests reach the
        // server in this order — BEGIN and the idle bound, the database id
        // (when pinned), the fence check with the tenure's write count,
        // the position floor, the name claims and the store's statements
        // (see the module comment). Each future sends its next request as
        // soon as its previous answer is in, so they share network round
        // trips.
        let (begun, database_checked, fence_checked, floored, claimed, written) = tokio::join!(
            biased;
            begun,
            database_checked,
            fence_checked,
            floored,
            claimed,
            written
        );
        // The wrong database explains every other failure.
        begun?;
        database_checked?;
        // Report the cause, not a consequence: the server ran them in this
        // order — fence check (and count), floor, lock, write — and once one
        // fails every later one fails with "transaction is aborted". A
        // stale fence is thus also reported over a conflict: the guest must
        // stop rather than retry.
        fence_checked?;
        floored?;
        claimed?;
        let (plan, row) = written?;
        let outcome = WriteOutcome::from_row(&row);
        outcome.check(&plan, batch)?;

        #[cfg(test)]
        if let Some(hook) = &self.before_commit {
            hook.pause().await;
        }
        tx.batch_execute("COMMIT").await.map_err(|e| {
            Failed::Commit(StoreError::Unavailable(format!(
                "{}; whether the commit to cluster {} was applied is unknown",
                self.db.unavailable(e),
                batch.cluster
            )))
        })?;
        if !COUNTS_WRITES_IN_TRANSACTION && let Some((fence, statements)) = &fencing {
            // Unfenced test build only: counted after the commit, so the
            // write's transaction never touched the tenure row. The write
            // is committed whatever happens here, so a failure is logged,
            // not reported as a failed commit.
            if let Err(error) = record_write_after_commit(tx, statements, fence).await {
                tracing::warn!(%error, "counting a committed write of {fence} failed");
            }
        }
        let at = outcome.at;
        Ok((
            Committed {
                revision: outcome.revision,
                event_seqs: outcome.event_seqs,
                written: plan.written(outcome.revision, at),
            },
            plan,
            at,
        ))
    }

    /// The same lock and write statements as a fenced commit of `ops` and
    /// `events` under `fence`, run raw on `client`: `BEGIN`, [`LOCK_SQL`],
    /// [`WRITE_SQL`], `COMMIT`, and nothing else — no fence check or write
    /// count, no position floor, no idle bound or plan setting, no
    /// notification, no pooled-session guard. The raw PostgreSQL baseline
    /// of the store-writes benchmark ("the same statements without the
    /// ordering machinery"); a commit made this way breaks the change
    /// feed's promise and is never made by the host. Answers the revision.
    #[doc(hidden)]
    pub async fn commit_unordered_for_benchmark(
        client: &deadpool_postgres::Object,
        fence: &Fence,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<u64, String> {
        let error = |e: tokio_postgres::Error| e.to_string();
        let batch = Batch::fenced(fence, ops, events).map_err(|e| e.to_string())?;
        let lock = client.prepare_cached(LOCK_SQL).await.map_err(error)?;
        let write = client.prepare_cached(WRITE_SQL).await.map_err(error)?;
        // Planned as the store's commits are (see COMMIT_PLANNING): the
        // baseline is the same statements at their best, not slowed by
        // planning on every execution.
        client
            .batch_execute(&format!("BEGIN; {COMMIT_PLANNING}"))
            .await
            .map_err(error)?;
        let result = async {
            let keys = batch.keys();
            let kinds: Vec<&str> = keys.iter().map(|k| k.kind.as_str()).collect();
            let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
            let rows = client
                .query(&lock, &[&batch.cluster, &kinds, &names])
                .await
                .map_err(error)?;
            let current: HashMap<ObjectKey, Current> = rows
                .iter()
                .map(|r| Ok((key_at(r), current_at(r, 2)?)))
                .collect::<Result<_, StoreError>>()
                .map_err(|e| e.to_string())?;
            let plan = batch
                .resolve(|k| current.get(k))
                .map_err(|e| e.to_string())?;
            let params = WriteParams::new(&plan, &batch.origin, &current);
            let row = client
                .query_one(&write, &params.as_sql(&batch.cluster))
                .await
                .map_err(error)?;
            client.batch_execute("COMMIT").await.map_err(error)?;
            Ok::<_, String>(row)
        }
        .await;
        let row = match result {
            Ok(row) => row,
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                return Err(e);
            }
        };
        Ok(WriteOutcome::from_row(&row).revision)
    }

    /// The fence check's errors, with this store's endpoint on backend
    /// failures (the fence check does not know it).
    fn authority_error(&self, error: AuthorityError) -> StoreError {
        match error {
            AuthorityError::Unavailable { reason, .. } => {
                StoreError::Unavailable(format!("database {}: {reason}", self.db.endpoint()))
            }
            other => other.into(),
        }
    }
}

/// The arrays and attribution bound to [`WRITE_SQL`].
struct WriteParams<'a> {
    /// `c` or `u`, kind, name, value per written row.
    rows: [Vec<&'a str>; 4],
    /// Labels as a JSON object, per row.
    labels: Vec<String>,
    owner_kind: Vec<Option<&'a str>>,
    owner_name: Vec<Option<&'a str>>,
    /// Finalizers as a JSON array, per row.
    finalizers: Vec<String>,
    status: Vec<Option<&'a str>>,
    generation: Vec<i64>,
    /// The mark a row keeps, if any.
    deleting_since: Vec<Option<DateTime<Utc>>>,
    /// Whether this commit marks the row (at its own time).
    mark: Vec<bool>,
    delete: [Vec<&'a str>; 2],
    event: [Vec<&'a str>; 4],
    change: [Vec<&'a str>; 3],
    /// The version each change records: `None` for the commit's revision
    /// (create, update), the deleted version for a delete.
    change_version: Vec<Option<i64>>,
    /// Each change's relations ([`Change::relations`]): owner kind and
    /// name, labels as a JSON object (`None` for none).
    change_owner: [Vec<Option<&'a str>>; 2],
    change_labels: Vec<Option<String>>,
    /// Whether an update changed them, and what they were before.
    change_previous: Vec<bool>,
    change_previous_owner: [Vec<Option<&'a str>>; 2],
    change_previous_labels: Vec<Option<String>>,
    lease: Option<&'a str>,
    epoch: Option<i64>,
    holder: Option<&'a str>,
    /// The write's trace context, recorded with each change
    /// ([`crate::telemetry::write_context`]).
    traceparent: Option<String>,
}

impl<'a> WriteParams<'a> {
    /// `before`: the metadata every object the plan updates or deletes had
    /// before it (as locked and read), for the relations its change
    /// records.
    fn new(plan: &'a Plan, origin: &'a Origin, before: &'a HashMap<ObjectKey, Current>) -> Self {
        let n = plan.writes.len();
        let mut params = WriteParams {
            rows: Default::default(),
            labels: Vec::with_capacity(n),
            owner_kind: Vec::with_capacity(n),
            owner_name: Vec::with_capacity(n),
            finalizers: Vec::with_capacity(n),
            status: Vec::with_capacity(n),
            generation: Vec::with_capacity(n),
            deleting_since: Vec::with_capacity(n),
            mark: Vec::with_capacity(n),
            delete: Default::default(),
            event: Default::default(),
            change: Default::default(),
            change_version: Vec::with_capacity(n),
            change_owner: Default::default(),
            change_labels: Vec::with_capacity(n),
            change_previous: Vec::with_capacity(n),
            change_previous_owner: Default::default(),
            change_previous_labels: Vec::with_capacity(n),
            lease: None,
            epoch: None,
            holder: None,
            traceparent: crate::telemetry::write_context().map(|t| t.as_str().to_string()),
        };
        for write in &plan.writes {
            match write {
                Planned::Create { key, row } | Planned::Update { key, row } => {
                    let (op, change) = match write {
                        Planned::Create { .. } => ("c", "created"),
                        _ => ("u", "updated"),
                    };
                    push(&mut params.rows, [op, &key.kind, &key.name, &row.value]);
                    params.labels.push(json_text(&row.meta.labels));
                    params
                        .owner_kind
                        .push(row.meta.owner.as_ref().map(|o| o.kind.as_str()));
                    params
                        .owner_name
                        .push(row.meta.owner.as_ref().map(|o| o.name.as_str()));
                    params.finalizers.push(json_text(&row.meta.finalizers));
                    params.status.push(row.status.as_deref());
                    params.generation.push(sql_seq(row.generation));
                    let (since, mark) = match row.deleting {
                        Deleting::No => (None, false),
                        Deleting::Since(at) => (Some(at), false),
                        Deleting::Now => (None, true),
                    };
                    params.deleting_since.push(since);
                    params.mark.push(mark);
                    push(&mut params.change, [&key.kind, &key.name, change]);
                    params.change_version.push(None);
                    let previous = match write {
                        Planned::Update { .. } => before
                            .get(key)
                            .map(|c| &c.meta)
                            .filter(|m| m.owner != row.meta.owner || m.labels != row.meta.labels),
                        _ => None,
                    };
                    params.push_relations(&row.meta, previous);
                }
                Planned::Delete { key, version } => {
                    push(&mut params.delete, [&key.kind, &key.name]);
                    push(&mut params.change, [&key.kind, &key.name, "deleted"]);
                    params.change_version.push(Some(sql_seq(*version)));
                    match before.get(key) {
                        Some(current) => params.push_relations(&current.meta, None),
                        None => params.push_relations(&NO_METADATA, None),
                    }
                }
            }
        }
        for event in &plan.events {
            push(
                &mut params.event,
                [
                    &event.key.kind,
                    &event.key.name,
                    &event.reason,
                    &event.message,
                ],
            );
        }
        match origin {
            Origin::Guest {
                lease,
                epoch,
                holder,
            } => {
                params.lease = Some(lease);
                params.epoch = Some(epoch.0 as i64);
                params.holder = Some(holder);
            }
            // The token's name in the holder column, lease and epoch null:
            // see `origin`.
            Origin::Api { token } => params.holder = token.as_deref(),
        }
        params
    }

    /// The relations of one change: `meta` after it, `previous` before it
    /// when an update changed them.
    fn push_relations(&mut self, meta: &'a Metadata, previous: Option<&'a Metadata>) {
        let labels = |m: &Metadata| (!m.labels.is_empty()).then(|| json_text(&m.labels));
        self.change_owner[0].push(meta.owner.as_ref().map(|o| o.kind.as_str()));
        self.change_owner[1].push(meta.owner.as_ref().map(|o| o.name.as_str()));
        self.change_labels.push(labels(meta));
        self.change_previous.push(previous.is_some());
        let owner = previous.and_then(|m| m.owner.as_ref());
        self.change_previous_owner[0].push(owner.map(|o| o.kind.as_str()));
        self.change_previous_owner[1].push(owner.map(|o| o.name.as_str()));
        self.change_previous_labels.push(previous.and_then(labels));
    }

    fn as_sql<'s>(
        &'s self,
        cluster: &'s String,
    ) -> [&'s (dyn tokio_postgres::types::ToSql + Sync); 34] {
        [
            cluster,
            &self.rows[0],
            &self.rows[1],
            &self.rows[2],
            &self.rows[3],
            &self.labels,
            &self.owner_kind,
            &self.owner_name,
            &self.finalizers,
            &self.status,
            &self.generation,
            &self.deleting_since,
            &self.mark,
            &self.delete[0],
            &self.delete[1],
            &self.event[0],
            &self.event[1],
            &self.event[2],
            &self.event[3],
            &self.lease,
            &self.epoch,
            &self.holder,
            &self.change[0],
            &self.change[1],
            &self.change[2],
            &self.change_version,
            &self.traceparent,
            &self.change_owner[0],
            &self.change_owner[1],
            &self.change_labels,
            &self.change_previous,
            &self.change_previous_owner[0],
            &self.change_previous_owner[1],
            &self.change_previous_labels,
        ]
    }
}

/// Labels or finalizers as the JSON text [`WRITE_SQL`] reads back.
fn json_text(value: &impl serde::Serialize) -> String {
    // Maps of strings and lists of strings always serialize.
    serde_json::to_string(value).unwrap_or_else(|_| String::from("null"))
}

/// The metadata of an object the lock did not find (a delete always finds
/// it; this only keeps [`WriteParams::new`] total).
static NO_METADATA: Metadata = Metadata {
    labels: std::collections::BTreeMap::new(),
    owner: None,
    finalizers: Vec::new(),
};

/// A change's relations from [`CHANGES_SQL`]'s owner kind, owner name and
/// labels columns starting at `first`.
fn relations_at(
    row: &Row,
    first: usize,
    cluster: &str,
    position: u64,
) -> Result<super::Relations, StoreError> {
    let owner = match (
        row.get::<_, Option<String>>(first),
        row.get::<_, Option<String>>(first + 1),
    ) {
        (Some(kind), Some(name)) => Some(ObjectKey { kind, name }),
        _ => None,
    };
    let labels = match row.get::<_, Option<&str>>(first + 2) {
        None => Default::default(),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            StoreError::Unavailable(format!(
                "change {position} of cluster {cluster}: stored labels are not a JSON object \
                 of strings ({e}): {text:.80}"
            ))
        })?,
    };
    Ok(super::Relations { owner, labels })
}

/// The address in columns 0 and 1.
fn key_at(row: &Row) -> ObjectKey {
    ObjectKey {
        kind: row.get(0),
        name: row.get(1),
    }
}

/// An object's state from the columns of [`state_columns`] starting at
/// `first`.
fn current_at(row: &Row, first: usize) -> Result<Current, StoreError> {
    let labels: String = row.get(first + 4);
    let labels = serde_json::from_str(&labels).map_err(|e| {
        StoreError::Unavailable(format!(
            "stored labels are not a JSON object of strings ({e}): {labels:.80}"
        ))
    })?;
    let owner = match (
        row.get::<_, Option<String>>(first + 5),
        row.get::<_, Option<String>>(first + 6),
    ) {
        (Some(kind), Some(name)) => Some(ObjectKey { kind, name }),
        _ => None,
    };
    Ok(Current {
        version: row.get::<_, i64>(first) as u64,
        value: row.get(first + 1),
        generation: row.get::<_, i64>(first + 2) as u64,
        status: row.get(first + 3),
        meta: Metadata {
            labels,
            owner,
            finalizers: row.get(first + 7),
        },
        deleting_since: row.get(first + 8),
    })
}

fn push<'a, const N: usize>(columns: &mut [Vec<&'a str>; N], values: [&'a str; N]) {
    for (column, value) in columns.iter_mut().zip(values) {
        column.push(value);
    }
}

/// What [`WRITE_SQL`] reports.
struct WriteOutcome {
    revision: u64,
    at: DateTime<Utc>,
    event_seqs: Vec<u64>,
    created: Vec<(String, String)>,
    updated: i64,
    deleted: i64,
    recorded: i64,
    appended: i64,
}

impl WriteOutcome {
    fn from_row(row: &Row) -> Self {
        let kinds: Vec<String> = row.get("created_kinds");
        let names: Vec<String> = row.get("created_names");
        Self {
            revision: row.get::<_, i64>("revision") as u64,
            at: row.get("at"),
            event_seqs: row
                .get::<_, Vec<i64>>("event_seqs")
                .into_iter()
                .map(|seq| seq as u64)
                .collect(),
            created: kinds.into_iter().zip(names).collect(),
            updated: row.get("updated"),
            deleted: row.get("deleted"),
            recorded: row.get("recorded"),
            appended: row.get("appended"),
        }
    }

    /// Every planned write happened. Updates and deletes hit rows this
    /// transaction holds locked, so only a create can have lost a race.
    fn check(&self, plan: &Plan, batch: &Batch) -> Result<(), Failed> {
        let mut want = [0i64; 2];
        for write in &plan.writes {
            match write {
                Planned::Create { key, .. } => {
                    let made = self
                        .created
                        .iter()
                        .any(|(kind, name)| *kind == key.kind && *name == key.name);
                    if !made {
                        if batch.retries_lost_create() {
                            return Err(Failed::LostCreate(key.clone()));
                        }
                        return Err(Failed::Error(StoreError::Conflict {
                            key: key.clone(),
                            reason: "it was created by a concurrent commit".into(),
                        }));
                    }
                }
                Planned::Update { .. } => want[0] += 1,
                Planned::Delete { .. } => want[1] += 1,
            }
        }
        let events = plan.events.len() as i64;
        let changes = plan.writes.len() as i64;
        if [self.updated, self.deleted] != want
            || self.appended != events
            || self.recorded != changes
        {
            // Rows locked in step 5 cannot vanish; if they did, refuse to
            // commit rather than report writes that did not happen.
            return Err(Failed::Error(StoreError::Unavailable(format!(
                "commit to cluster {} wrote {} updates, {} deletes, {} changes and {} events where {}, {}, {changes} and {events} were planned; nothing was written",
                batch.cluster,
                self.updated,
                self.deleted,
                self.recorded,
                self.appended,
                want[0],
                want[1]
            ))));
        }
        // Input order is position order (each position is taken after the
        // one before); a commit whose numbers came back otherwise would
        // break the order its events promise.
        if self.event_seqs.len() != plan.events.len()
            || self.event_seqs.windows(2).any(|w| w[0] >= w[1])
            || self
                .event_seqs
                .first()
                .is_some_and(|&first| first <= self.revision)
        {
            return Err(Failed::Error(StoreError::Unavailable(format!(
                "commit to cluster {} at revision {} was given event positions {:?} for {events} events in input order; nothing was written",
                batch.cluster, self.revision, self.event_seqs
            ))));
        }
        Ok(())
    }
}

/// A write's author, from its attribution columns.
/// A write's author from its attribution columns: a guest's lease, epoch
/// and holder; for an API write lease and epoch are null and `holder`
/// holds the name of the token it carried (null when none).
fn origin(lease: Option<String>, epoch: Option<i64>, holder: Option<String>) -> Origin {
    match (lease, epoch, holder) {
        (Some(lease), Some(epoch), Some(holder)) => Origin::Guest {
            lease,
            epoch: Epoch(epoch as u64),
            holder,
        },
        (None, None, token) => Origin::Api { token },
        _ => Origin::Api { token: None },
    }
}

/// What [`DATABASE_ID_SQL`] read: the database a write (or a trim) would
/// reach, for [`crate::authority::WritePin::refusal`].
pub(super) fn write_target(row: &Row) -> crate::authority::WriteTarget {
    crate::authority::WriteTarget {
        database_id: row.get(0),
        // Unsigned 64-bit, shown through a signed bigint.
        system_identifier: row.get::<_, i64>(1) as u64,
        database_oid: u32::try_from(row.get::<_, i64>(2)).unwrap_or_default(),
        database_name: row.get(3),
        in_recovery: row.get(4),
        schema_version: row.get(5),
        timeline: row
            .get::<_, Option<i64>>(6)
            .and_then(|t| u32::try_from(t).ok()),
    }
}

fn unavailable(error: crate::db::DbError) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

/// The retention floor the first column of [`EVENTS_SQL`] and
/// [`CHANGES_SQL`] carries (on every row, and there is always one).
fn floor_of(rows: &[tokio_postgres::Row]) -> u64 {
    rows.first().map_or(0, |r| r.get::<_, i64>(0).max(0) as u64)
}

/// The head, and the highest position kept before the gap the cursor lies
/// in if it does ([`cursor_checks`]), from the columns starting at `first`
/// of the rows of [`EVENTS_SQL`] or [`CHANGES_SQL`] (on every row, and
/// there is always one).
fn cursor_checked(rows: &[tokio_postgres::Row], first: usize) -> (u64, Option<u64>) {
    rows.first().map_or((u64::MAX, None), |r| {
        (
            r.get::<_, Option<i64>>(first).unwrap_or(0).max(0) as u64,
            r.get::<_, Option<i64>>(first + 1)
                .map(|kept| kept.max(0) as u64),
        )
    })
}

/// How far a read of the change stream may go.
#[derive(Debug, Clone, Copy)]
enum Bound {
    /// The high-water mark, read by an earlier statement.
    Mark(Mark),
    /// A position the feed published (final when it was published; a
    /// value above the head was published from another history).
    Published(u64),
}

/// Clamp a cursor to the database's integer range.
fn sql_seq(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for PostgresStore {
    async fn get(&self, cluster: &str, key: &ObjectKey) -> Result<Option<Object>, StoreError> {
        check_cluster(cluster)?;
        check_key(key)?;
        let client = self.client().await?;
        let row = bounded(&self.db, async {
            let statement = self.db.prepare(&client, GET_SQL).await?;
            statement
                .query_opt(&client, &[&cluster, &key.kind, &key.name])
                .await
        })
        .await
        .map_err(unavailable)?;
        row.map(|r| current_at(&r, 0).map(|c| c.object(key)))
            .transpose()
    }

    async fn list(
        &self,
        cluster: &str,
        kind: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.list_selected(cluster, kind, &Selector::default(), after, limit)
            .await
    }

    async fn list_selected(
        &self,
        cluster: &str,
        kind: &str,
        selector: &Selector,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        check_list_request(cluster, kind, after, selector)?;
        let limit = page_limit(limit);
        let after = after.unwrap_or_default();
        // One more than asked tells whether another page exists.
        let fetch = limit as i64 + 1;
        let labels = (!selector.labels.is_empty()).then(|| {
            serde_json::Value::Object(
                selector
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            )
        });
        let conditions: Vec<(&(dyn ToSql + Sync), Type)> = match (&labels, &selector.contains) {
            (None, None) => Vec::new(),
            (Some(labels), None) => vec![(labels, Type::JSONB)],
            (None, Some(contains)) => vec![(contains, Type::JSONB)],
            (Some(labels), Some(contains)) => {
                vec![(labels, Type::JSONB), (contains, Type::JSONB)]
            }
        };
        let client = self.client().await?;
        let rows = if conditions.is_empty() {
            bounded(&self.db, async {
                let statement = self.db.prepare(&client, LIST_SQL).await?;
                statement
                    .query(&client, &[&cluster, &kind, &after, &fetch])
                    .await
            })
            .await
        } else {
            // Unnamed, and so planned for this selector's own values, in
            // the same one round trip: whether the GIN index or the name
            // order is the cheaper way depends on how many objects match
            // (`{"status": "pending"}` among mostly finished tasks, or the
            // reverse), which a cached generic plan could not know.
            let sql = match (&labels, &selector.contains) {
                (Some(_), None) => LIST_LABELS_SQL,
                (None, Some(_)) => LIST_CONTAINS_SQL,
                _ => LIST_SELECTED_SQL,
            };
            let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
                (&cluster, Type::TEXT),
                (&kind, Type::TEXT),
                (&after, Type::TEXT),
                (&fetch, Type::INT8),
            ];
            params.extend(conditions);
            bounded(&self.db, client.query_typed(sql, &params)).await
        }
        .map_err(unavailable)?;
        let mut objects: Vec<Object> = rows
            .iter()
            .map(|r| {
                let key = ObjectKey {
                    kind: kind.to_string(),
                    name: r.get(0),
                };
                current_at(r, 1).map(|c| c.object(&key))
            })
            .collect::<Result<_, _>>()?;
        let next = if objects.len() > limit {
            objects.truncate(limit);
            objects.last().map(|o| o.name.clone())
        } else {
            None
        };
        Ok(Page { objects, next })
    }

    async fn commit_fenced(
        &self,
        fence: &Fence,
        ops: &[Op],
        events: &[NewEvent],
    ) -> Result<Committed, StoreError> {
        let batch = Batch::fenced(fence, ops, events)?;
        self.commit(&batch, Some(fence)).await
    }

    async fn put(
        &self,
        cluster: &str,
        key: &ObjectKey,
        value: &str,
        expected_version: Option<u64>,
    ) -> Result<Object, StoreError> {
        let batch = Batch::put(cluster, key, value, expected_version)?;
        let (committed, plan, at) = self.commit_planned(&batch, None).await?;
        plan.object(key, committed.revision, at).ok_or_else(|| {
            StoreError::Unavailable(format!(
                "the put of {key} in cluster {cluster} committed at revision {} removed the object",
                committed.revision
            ))
        })
    }

    async fn write(&self, cluster: &str, write: &ApiWrite) -> Result<Written, StoreError> {
        let batch = api_batch(cluster, write)?;
        let (committed, plan, at) = self.commit_planned(&batch, None).await?;
        written(&batch, plan, committed.revision, at)
    }

    async fn delete(
        &self,
        cluster: &str,
        key: &ObjectKey,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        let batch = Batch::delete(cluster, key, expected_version)?;
        self.commit(&batch, None).await?;
        Ok(())
    }

    async fn events(
        &self,
        cluster: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        check_cluster(cluster)?;
        let limit = page_limit(limit) as i64;
        let after = sql_seq(after);
        let client = self.client().await?;
        // The mark first; the rows by a later statement (see
        // `postgres_feed`).
        let marked = self.mark(&client).await?;
        check_issued(
            cluster,
            EVENT_LOG,
            after as u64,
            marked.head,
            marked.high_water,
        )?;
        let mark = sql_seq(marked.high_water);
        if mark <= after {
            // As in `changes_below`: a cursor in a gap is below the mark.
            return Ok(Vec::new());
        }
        let rows = bounded(&self.db, async {
            let statement = self.db.prepare(&client, EVENTS_SQL).await?;
            statement
                .query(&client, &[&cluster, &after, &limit, &mark])
                .await
        })
        .await
        .map_err(unavailable)?;
        if let (_, Some(kept)) = cursor_checked(&rows, EVENTS_CHECKS) {
            return Err(not_issued(cluster, EVENT_LOG, after as u64, kept));
        }
        check_floor(cluster, EVENT_LOG, after as u64, floor_of(&rows))?;
        Ok(rows
            .iter()
            .filter(|r| r.get::<_, Option<i64>>(1).is_some())
            .map(|r| Event {
                seq: r.get::<_, i64>(1) as u64,
                revision: r.get::<_, i64>(2) as u64,
                at: r.get::<_, DateTime<Utc>>(3),
                kind: r.get(4),
                name: r.get(5),
                reason: r.get(6),
                message: r.get(7),
                origin: origin(r.get(8), r.get(9), r.get(10)),
            })
            .collect())
    }

    async fn changes(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        check_change_request(cluster, kinds)?;
        let client = self.client().await?;
        let mark = self.mark(&client).await?;
        self.changes_below(&client, cluster, kinds, after, Bound::Mark(mark), limit)
            .await
    }

    async fn changes_through(
        &self,
        cluster: &str,
        kinds: &[String],
        after: u64,
        through: u64,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        check_change_request(cluster, kinds)?;
        let client = self.client().await?;
        self.changes_below(
            &client,
            cluster,
            kinds,
            after,
            Bound::Published(through),
            limit,
        )
        .await
    }

    async fn trim(
        &self,
        cluster: &str,
        policy: &super::retention::Policy,
    ) -> Result<super::retention::Trimmed, StoreError> {
        check_cluster(cluster)?;
        super::retention::trim_postgres(&self.db, self.pinned.get(), cluster, policy).await
    }

    fn watch(&self, cluster: &str) -> watch::Receiver<u64> {
        self.feed.subscribe(cluster)
    }

    async fn count(&self, cluster: &str, kind: &str, limit: u64) -> Result<u64, StoreError> {
        check_cluster(cluster)?;
        crate::names::check_label("object kind", kind)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let row = bounded(&self.db, async {
            let statement = self.db.prepare(&client, COUNT_SQL).await?;
            statement
                .query_one(&client, &[&cluster, &kind, &limit])
                .await
        })
        .await
        .map_err(unavailable)?;
        Ok(row.get::<_, i64>(0) as u64)
    }
}

#[cfg(test)]
pub(super) mod tests_hook {
    //! A pause point just before `COMMIT`, so a test can act while a
    //! commit holds its locks.

    use std::sync::Arc;

    use tokio::sync::{Mutex, mpsc};

    /// Tells the test "paused before COMMIT", then waits for its go.
    #[derive(Clone)]
    pub struct BeforeCommit {
        pub paused: mpsc::Sender<()>,
        pub resume: Arc<Mutex<mpsc::Receiver<()>>>,
    }

    impl BeforeCommit {
        pub async fn pause(&self) {
            let _ = self.paused.send(()).await;
            let _ = self.resume.lock().await.recv().await;
        }
    }
}
