-- Leasehold schema, version 7: commit positions without a hot row, and
-- object changes as the watch stream.
--
-- Before this version every commit took its revision and event sequence
-- numbers from one counter row per cluster (`leasehold_feed`), locked as
-- its last step and held until COMMIT: all writes of a cluster queued on
-- that row for the length of a commit, fsync included. Now every number a
-- commit takes (its revision, one position per object change, one per
-- event) comes from one sequence, taken freely: gaps are allowed (a
-- transaction that rolls back leaves its numbers unused), and readers are
-- bounded by a high-water mark instead (see the store's documentation and
-- ARCHITECTURE.md, "Store"): each writer holds a shared advisory
-- transaction lock whose key is a floor below every number it takes, and
-- a reader reads no further than the lowest floor still held.
--
-- CACHE 1 is required, not a tuning choice: the high-water mark reads the
-- sequence's `last_value` as "every number up to here has been handed
-- out", which a per-session cache would make false.
--
-- Existing positions stay valid: the sequence starts above every revision
-- and event sequence number already given out, in any cluster, so an
-- `after=SEQ` cursor taken before this version still means "everything
-- after SEQ", and object versions keep growing.
CREATE SEQUENCE leasehold_positions AS bigint MINVALUE 1 CACHE 1 NO CYCLE;
-- The next number is one above the highest given out (1 in a new
-- database, as in the memory backend).
SELECT setval('leasehold_positions',
              greatest(0,
                       (SELECT max(greatest(revision, last_seq)) FROM leasehold_feed),
                       (SELECT max(seq) FROM leasehold_events),
                       (SELECT max(revision) FROM leasehold_events),
                       (SELECT max(version) FROM leasehold_objects)) + 1,
              false);

-- Every committed create, update and delete of an object, by the API or
-- by a guest, whether or not the commit appended an event: the stream that
-- wakes the controllers watching the object's kind. `position` comes from
-- `leasehold_positions`; `revision` is the commit's; `version` is the
-- object's version after the change (for a delete, the version it had).
-- Insert-only, like the event log.
CREATE TABLE leasehold_changes (
    cluster  text        NOT NULL,
    position bigint      NOT NULL,
    revision bigint      NOT NULL,
    at       timestamptz NOT NULL,
    kind     text COLLATE "C" NOT NULL,
    name     text COLLATE "C" NOT NULL,
    change   text        NOT NULL CHECK (change IN ('created', 'updated', 'deleted')),
    version  bigint      NOT NULL,
    lease    text,
    epoch    bigint,
    holder   text,
    PRIMARY KEY (cluster, position)
);

-- The counter row is gone. A host of an earlier version still running
-- against this database fails its writes on the missing table instead of
-- numbering events in the old way beside the new one: stop every host
-- before migrating (docs/operations.md).
DROP TABLE leasehold_feed;
