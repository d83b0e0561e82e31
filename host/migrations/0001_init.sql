-- Leasehold schema, version 1.
--
-- Every table is keyed by cluster: several clusters may share one database
-- without contending. No table is UNLOGGED and no lease row is ever deleted:
-- epochs must never be reused (L1).

-- The identity of this database, created once. Hosts compare it (with the
-- server's system identifier) against their pinned expectation before they
-- acquire anything.
CREATE TABLE leasehold_database (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    id         uuid        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO leasehold_database (id) VALUES (gen_random_uuid());

-- One row per lease ever granted. Times are the database clock's.
CREATE TABLE leasehold_leases (
    cluster     text        NOT NULL,
    name        text        NOT NULL,
    holder      text        NOT NULL,
    epoch       bigint      NOT NULL CHECK (epoch > 0),
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    released    boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (cluster, name)
);

-- Every tenure (L6): who led, when, how it ended, what it wrote.
CREATE TABLE leasehold_tenures (
    cluster       text        NOT NULL,
    lease         text        NOT NULL,
    epoch         bigint      NOT NULL,
    holder        text        NOT NULL,
    endpoint      text        NOT NULL,
    acquired_at   timestamptz NOT NULL,
    ended_at      timestamptz,
    end_reason    text CHECK (end_reason IN ('released', 'expired', 'lost', 'superseded')),
    writes        bigint      NOT NULL DEFAULT 0,
    last_write_at timestamptz,
    PRIMARY KEY (cluster, lease, epoch)
);

-- The per-cluster commit counter. Every commit takes the next revision and
-- a contiguous range of event sequence numbers under this row's lock, as
-- the last step before COMMIT: commits of one cluster are thereby ordered,
-- and a reader never sees sequence n+1 without n (no gaps, no reordering).
CREATE TABLE leasehold_feed (
    cluster  text   PRIMARY KEY,
    revision bigint NOT NULL DEFAULT 0,
    last_seq bigint NOT NULL DEFAULT 0
);

-- Current objects. `version` is the revision of the commit that last wrote
-- the object. `value` is compact JSON text, normalized by the host.
CREATE TABLE leasehold_objects (
    cluster    text        NOT NULL,
    kind       text        NOT NULL,
    name       text        NOT NULL,
    version    bigint      NOT NULL,
    value      text        NOT NULL,
    updated_at timestamptz NOT NULL,
    -- Attribution: the lease and epoch of the guest write, or NULL for an
    -- API write.
    lease      text,
    epoch      bigint,
    holder     text,
    PRIMARY KEY (cluster, kind, name)
);

-- The append-only event log, in commit order.
CREATE TABLE leasehold_events (
    cluster  text        NOT NULL,
    seq      bigint      NOT NULL,
    revision bigint      NOT NULL,
    at       timestamptz NOT NULL,
    kind     text        NOT NULL,
    name     text        NOT NULL,
    reason   text        NOT NULL,
    message  text        NOT NULL,
    lease    text,
    epoch    bigint,
    holder   text,
    PRIMARY KEY (cluster, seq)
);
