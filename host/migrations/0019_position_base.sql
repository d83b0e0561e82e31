-- Leasehold schema, version 19: a timeline floor for positions (and so
-- for revisions, object versions and event sequence numbers, which come
-- from the same sequence), like the epochs' (version 15).
--
-- The sequence `leasehold_positions` is WAL-logged like any other change:
-- a standby promoted after an asynchronous failover that lost commits
-- carries on from the last value it replayed, and would hand out again
-- positions and versions the former primary already gave to readers,
-- watchers and `If-Match` callers. Now every number a commit takes is at
-- least the floor of the server's WAL timeline, relative to a base kept
-- with the identity:
--
--   floor(T) = (position_base_bucket + max(T - position_base_timeline, 0)) * 2^44 + 1
--
-- so the first commit on a promoted standby jumps above every number the
-- former timeline can have issued (fewer than 2^44 per timeline: a
-- hundred thousand a second for five years). This migration records the
-- current timeline and the bucket the sequence is in now: nothing jumps
-- until the next failover or adoption. Adopting a copy (README, "Running
-- in production") moves the base to the adoption's timeline and to a
-- bucket above every number the copy holds and above the floor it had, as
-- the epochs' trigger does.
--
-- A commit that finds the sequence below its timeline's floor writes
-- nothing and is refused (SQLSTATE LH001); the store then raises the
-- sequence (`leasehold_raise_positions`) and tries again. Before it does,
-- it records the gap (`leasehold_record_position_gap`), in a transaction
-- of its own: the highest position the database still holds from before
-- (`kept`) and the floor. A cursor strictly between the two was given by
-- a history this database no longer has (a lost timeline, or the original
-- of an adopted copy): readers are told to re-list (HTTP 410) rather than
-- resume from it.
ALTER TABLE leasehold_database
    ADD COLUMN position_base_timeline bigint,
    ADD COLUMN position_base_bucket   bigint;

-- The server's WAL timeline, from its WAL insert position (which moves to
-- the new timeline at promotion; the last checkpoint's record lags until
-- the next checkpoint), or NULL in recovery.
CREATE FUNCTION leasehold_timeline() RETURNS bigint
    LANGUAGE sql VOLATILE
    AS $$
        SELECT CASE WHEN pg_is_in_recovery() THEN NULL
                    ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8
               END
    $$;

UPDATE leasehold_database
   SET position_base_timeline = leasehold_timeline(),
       position_base_bucket = (SELECT (last_value - CASE WHEN is_called THEN 0 ELSE 1 END) >> 44
                                 FROM leasehold_positions);

ALTER TABLE leasehold_database
    ALTER COLUMN position_base_timeline SET NOT NULL,
    ALTER COLUMN position_base_bucket   SET NOT NULL,
    ADD CONSTRAINT leasehold_database_position_base_check
        CHECK (position_base_timeline >= 1 AND position_base_bucket >= 0);

-- The least number a commit on `timeline` may take (NULL for a NULL
-- timeline: a server in recovery takes no writes).
CREATE FUNCTION leasehold_position_floor(timeline bigint) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
        SELECT coalesce(
            (SELECT ((position_base_bucket
                      + greatest(timeline - position_base_timeline, 0)) << 44) + 1
               FROM leasehold_database),
            ((timeline - 1) << 44) + 1)
    $$;

-- What a commit calls when the sequence is below its timeline's floor:
-- it refuses, before the commit takes any number, so the store raises
-- the sequence and tries again.
CREATE FUNCTION leasehold_positions_below_floor(head bigint, floor bigint) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    AS $$
    BEGIN
        RAISE EXCEPTION 'positions are below this timeline''s floor: the last one handed out is %, the floor is %', head, floor
            USING ERRCODE = 'LH001',
                  HINT = 'the store raises the sequence to the floor and retries';
    END
    $$;

-- Where a history ended: `kept` is the highest position the database
-- held from before when the sequence was raised to `floor` on `timeline`.
CREATE TABLE leasehold_position_gaps (
    floor     bigint      PRIMARY KEY,
    kept      bigint      NOT NULL,
    timeline  bigint      NOT NULL,
    raised_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (kept >= 0 AND kept < floor)
);

-- The highest position this database holds (a change, an event, a
-- retention floor, a lease's settled position), found per cluster through
-- the primary keys, not by reading every row.
CREATE FUNCTION leasehold_positions_kept() RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
        WITH RECURSIVE
            change_clusters(cluster) AS (
                SELECT min(cluster) FROM leasehold_changes
                UNION ALL
                SELECT (SELECT min(c.cluster) FROM leasehold_changes c
                         WHERE c.cluster > change_clusters.cluster)
                  FROM change_clusters WHERE change_clusters.cluster IS NOT NULL),
            event_clusters(cluster) AS (
                SELECT min(cluster) FROM leasehold_events
                UNION ALL
                SELECT (SELECT min(e.cluster) FROM leasehold_events e
                         WHERE e.cluster > event_clusters.cluster)
                  FROM event_clusters WHERE event_clusters.cluster IS NOT NULL)
        SELECT greatest(
            (SELECT max((SELECT max(c.position) FROM leasehold_changes c
                          WHERE c.cluster = change_clusters.cluster))
               FROM change_clusters WHERE cluster IS NOT NULL),
            (SELECT max((SELECT max(e.seq) FROM leasehold_events e
                          WHERE e.cluster = event_clusters.cluster))
               FROM event_clusters WHERE cluster IS NOT NULL),
            (SELECT max(greatest(events_floor, changes_floor)) FROM leasehold_retention),
            (SELECT max(settled) FROM leasehold_leases),
            0)
    $$;

-- Record the gap the sequence's raise to this timeline's floor leaves,
-- before the raise (in a transaction of its own, committed durably): so a
-- raised sequence always has its gap on record. Returns the floor, or
-- NULL in recovery. Serialized with the raise by a transaction lock.
CREATE FUNCTION leasehold_record_position_gap() RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    AS $$
    DECLARE
        on_timeline bigint := leasehold_timeline();
        new_floor bigint;
        head bigint;
    BEGIN
        IF on_timeline IS NULL THEN
            RETURN NULL;
        END IF;
        PERFORM set_config('synchronous_commit', 'on', true);
        PERFORM pg_advisory_xact_lock(7263414712);
        new_floor := leasehold_position_floor(on_timeline);
        SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END INTO head
          FROM leasehold_positions;
        IF head + 1 < new_floor THEN
            INSERT INTO leasehold_position_gaps (floor, kept, timeline)
            VALUES (new_floor, least(leasehold_positions_kept(), head), on_timeline)
            ON CONFLICT DO NOTHING;
        END IF;
        RETURN new_floor;
    END
    $$;

-- Raise the sequence to this timeline's floor once its gap is on record
-- (else refuse: the caller records it first). Returns the floor, or NULL
-- in recovery.
CREATE FUNCTION leasehold_raise_positions() RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    AS $$
    DECLARE
        on_timeline bigint := leasehold_timeline();
        new_floor bigint;
        head bigint;
    BEGIN
        IF on_timeline IS NULL THEN
            RETURN NULL;
        END IF;
        PERFORM set_config('synchronous_commit', 'on', true);
        PERFORM pg_advisory_xact_lock(7263414712);
        new_floor := leasehold_position_floor(on_timeline);
        SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END INTO head
          FROM leasehold_positions;
        IF head + 1 < new_floor THEN
            IF NOT EXISTS (SELECT 1 FROM leasehold_position_gaps g WHERE g.floor = new_floor) THEN
                RAISE EXCEPTION 'the gap below position floor % is not on record', new_floor
                    USING ERRCODE = 'LH002';
            END IF;
            PERFORM setval('leasehold_positions', new_floor, false);
        END IF;
        RETURN new_floor;
    END
    $$;

-- Adoption (the identity row moved to another system identifier or
-- database oid): the base moves to this timeline and to a bucket above
-- every number the copy holds and above the floor it had here. (Like the
-- epochs', the floor cannot know of failovers the original had after the
-- copy was taken.)
CREATE FUNCTION leasehold_position_base_on_adoption() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
    DECLARE
        on_timeline bigint := leasehold_timeline();
    BEGIN
        NEW.position_base_timeline := on_timeline;
        NEW.position_base_bucket := greatest(
            (SELECT ((last_value - CASE WHEN is_called THEN 0 ELSE 1 END) >> 44) + 1
               FROM leasehold_positions),
            OLD.position_base_bucket + greatest(on_timeline - OLD.position_base_timeline, 0) + 1);
        RETURN NEW;
    END
    $$;

CREATE TRIGGER leasehold_database_adopted_positions
    BEFORE UPDATE ON leasehold_database
    FOR EACH ROW
    WHEN (OLD.system_identifier IS DISTINCT FROM NEW.system_identifier
          OR OLD.database_oid IS DISTINCT FROM NEW.database_oid)
    EXECUTE FUNCTION leasehold_position_base_on_adoption();
