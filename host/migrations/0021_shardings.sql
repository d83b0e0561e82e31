-- Leasehold schema, version 21: each controller's sharding, recorded with
-- its leases, so that every host of a cluster runs a controller's leases
-- alike.
--
-- A controller runs as one lease named as it (unsharded, `shards` NULL),
-- or as `shards` leases `NAME-0 … NAME-(shards-1)`, each reconciling the
-- objects of its shard: by FNV-1a 64 of `kind/name` modulo `shards`, or,
-- for an object carrying the guest's `shard_label`, of the label's value;
-- every shard also watches the kinds of `every_shard`. Two hosts that
-- disagree on any of these would each reconcile some of the same objects
-- under different leases, so neither's fence would stop the other.
--
-- The first acquire of any lease of a controller records the acquiring
-- host's rule (`recorded_by` = `holder NAME`) and which leases it runs
-- (`leasehold_sharded_leases`), in the acquire's own transaction; every
-- later acquire is judged against the record in its own transaction,
-- holding the record's row `FOR SHARE` until it commits, and a host whose
-- rule differs is refused, naming both. A lease belongs to one controller
-- (its primary key): an unsharded controller `x-1` and shard 1 of `x` are
-- refused whichever host recorded the other first. Only `leasehold
-- reshard` changes a record (`recorded_by` = `leasehold reshard, config
-- of holder NAME`): it locks the row `FOR UPDATE`, then refuses while any of the
-- controller's leases is held.
--
-- A controller that runs on a host of an older version stays unrecorded
-- until a host of this version acquires one of its leases. New tables:
-- nothing is rewritten.
CREATE TABLE leasehold_shardings (
    cluster     text        NOT NULL,
    controller  text        NOT NULL,
    shards      integer     CHECK (shards BETWEEN 1 AND 64),
    shard_label text,
    every_shard text[]      NOT NULL DEFAULT '{}',
    recorded_by text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (cluster, controller)
);

CREATE TABLE leasehold_sharded_leases (
    cluster    text    NOT NULL,
    lease      text    NOT NULL,
    controller text    NOT NULL,
    shard      integer CHECK (shard >= 0),
    PRIMARY KEY (cluster, lease),
    FOREIGN KEY (cluster, controller)
        REFERENCES leasehold_shardings (cluster, controller) ON DELETE CASCADE
);
CREATE INDEX leasehold_sharded_leases_controller
    ON leasehold_sharded_leases (cluster, controller);
