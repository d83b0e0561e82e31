//! The embedded database's schema, versioned like PostgreSQL's migrations:
//! each entry is applied once, in order, in one transaction with the
//! version it brings (`PRAGMA user_version`). A database migrated by a
//! newer host is refused ("upgrade this host").
//!
//! The tables mirror PostgreSQL's; where they differ:
//!
//! - times are integers: microseconds since the Unix epoch (wall clock,
//!   for people), and for lease expiry the machine's monotonic clock and
//!   the boot it belongs to (`expires_mono`, `boot`; see
//!   [`super::clock`]);
//! - `leasehold_positions` is a counter, not a sequence: SQLite runs one
//!   write transaction at a time, so numbers are taken in commit order and
//!   the last one taken by a committed transaction is the high-water mark;
//! - each tenure records `granted_mark` and `released_mark`, the last
//!   position committed when its grant (its release) committed: the
//!   embedded form of PostgreSQL's grant and release snapshots. A write
//!   with a revision at or below a mark committed before that grant
//!   (release), one above it after;
//! - `leasehold_feeds` keeps per cluster the last position committed and a
//!   count of releases, which other processes poll to wake their watchers
//!   and standbys (there is no `NOTIFY`);
//! - `leasehold_hosts.incarnation` names the claim a live host holds on
//!   its holder name (its file lock), and a grant under crash detection
//!   `session` records the incarnation it was made under.
//!
//! Version 2 (PostgreSQL's migration 21): each controller's recorded
//! sharding (`leasehold_shardings`; `every_shard` a JSON array) and which
//! controller runs each of its leases (`leasehold_sharded_leases`), see
//! [`crate::authority::sharding`].

/// Every migration, in order: (version, SQL).
pub const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "
CREATE TABLE leasehold_database (
    only INTEGER PRIMARY KEY CHECK (only = 1),
    database_id TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE leasehold_positions (
    only INTEGER PRIMARY KEY CHECK (only = 1),
    last INTEGER NOT NULL CHECK (last >= 0)
);
INSERT INTO leasehold_positions (only, last) VALUES (1, 0);

CREATE TABLE leasehold_leases (
    cluster TEXT NOT NULL,
    name TEXT NOT NULL,
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL CHECK (epoch > 0),
    acquired_at INTEGER NOT NULL,
    renewed_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    expires_mono INTEGER NOT NULL,
    boot TEXT NOT NULL,
    released INTEGER NOT NULL DEFAULT 0,
    crash_detection TEXT NOT NULL DEFAULT 'ttl',
    incarnation TEXT,
    holder_pid INTEGER,
    handover_reason TEXT,
    move_reason TEXT,
    move_at INTEGER,
    move_from TEXT,
    move_to TEXT,
    settled INTEGER,
    PRIMARY KEY (cluster, name)
) WITHOUT ROWID;

CREATE TABLE leasehold_tenures (
    cluster TEXT NOT NULL,
    lease TEXT NOT NULL,
    epoch INTEGER NOT NULL CHECK (epoch > 0),
    holder TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    acquired_at INTEGER NOT NULL,
    ended_at INTEGER,
    end_reason TEXT,
    writes INTEGER NOT NULL DEFAULT 0,
    last_write_at INTEGER,
    outbound_requests INTEGER NOT NULL DEFAULT 0,
    last_outbound_at INTEGER,
    granted_mark INTEGER NOT NULL,
    released_mark INTEGER,
    PRIMARY KEY (cluster, lease, epoch)
) WITHOUT ROWID;

CREATE TABLE leasehold_objects (
    cluster TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version > 0),
    value TEXT NOT NULL,
    generation INTEGER NOT NULL,
    status TEXT,
    labels TEXT NOT NULL DEFAULT '{}',
    owner_kind TEXT,
    owner_name TEXT,
    finalizers TEXT NOT NULL DEFAULT '[]',
    deleting_since INTEGER,
    lease TEXT,
    epoch INTEGER,
    holder TEXT,
    token TEXT,
    PRIMARY KEY (cluster, kind, name)
) WITHOUT ROWID;
CREATE INDEX leasehold_objects_owner
    ON leasehold_objects (cluster, owner_kind, owner_name, kind, name)
    WHERE owner_kind IS NOT NULL;

CREATE TABLE leasehold_changes (
    cluster TEXT NOT NULL,
    position INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    change TEXT NOT NULL,
    version INTEGER NOT NULL,
    lease TEXT,
    epoch INTEGER,
    holder TEXT,
    token TEXT,
    traceparent TEXT,
    owner_kind TEXT,
    owner_name TEXT,
    labels TEXT NOT NULL,
    previous INTEGER NOT NULL DEFAULT 0,
    previous_owner_kind TEXT,
    previous_owner_name TEXT,
    previous_labels TEXT,
    PRIMARY KEY (cluster, position)
) WITHOUT ROWID;

CREATE TABLE leasehold_events (
    cluster TEXT NOT NULL,
    seq INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    reason TEXT NOT NULL,
    message TEXT NOT NULL,
    lease TEXT,
    epoch INTEGER,
    holder TEXT,
    token TEXT,
    PRIMARY KEY (cluster, seq)
) WITHOUT ROWID;

CREATE TABLE leasehold_retention (
    cluster TEXT PRIMARY KEY,
    events_floor INTEGER NOT NULL DEFAULT 0,
    changes_floor INTEGER NOT NULL DEFAULT 0,
    trimmed_at INTEGER
) WITHOUT ROWID;

CREATE TABLE leasehold_feeds (
    cluster TEXT PRIMARY KEY,
    last INTEGER NOT NULL DEFAULT 0,
    releases INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE leasehold_hosts (
    cluster TEXT NOT NULL,
    holder TEXT NOT NULL,
    incarnation TEXT,
    pid INTEGER,
    started_at INTEGER,
    version TEXT,
    controllers TEXT NOT NULL DEFAULT '[]',
    heartbeat_mono INTEGER,
    heartbeat_boot TEXT,
    registered_at INTEGER NOT NULL,
    PRIMARY KEY (cluster, holder)
) WITHOUT ROWID;
",
    ),
    (
        2,
        "
CREATE TABLE leasehold_shardings (
    cluster TEXT NOT NULL,
    controller TEXT NOT NULL,
    shards INTEGER CHECK (shards IS NULL OR shards BETWEEN 1 AND 64),
    shard_label TEXT,
    every_shard TEXT NOT NULL DEFAULT '[]',
    recorded_by TEXT NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (cluster, controller)
) WITHOUT ROWID;

CREATE TABLE leasehold_sharded_leases (
    cluster TEXT NOT NULL,
    lease TEXT NOT NULL,
    controller TEXT NOT NULL,
    shard INTEGER,
    PRIMARY KEY (cluster, lease)
) WITHOUT ROWID;
",
    ),
];

/// The newest schema version this host knows.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |(version, _)| *version)
}
