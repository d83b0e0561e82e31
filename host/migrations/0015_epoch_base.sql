-- Leasehold schema, version 15: the epoch floor, relative to a base.
--
-- A grant's epoch is at least the floor of the server's WAL timeline, so
-- the first grant after a failover jumps above every epoch the former
-- timeline can have issued, grants the promoted standby never received
-- among them. The floor was (timeline - 1) * 2^32 + 1, which assumes the
-- epochs of timeline T stay below T * 2^32. Adopting a copy (a restore or
-- pg_upgrade, README "Running in production") moves every epoch up a
-- 2^32 bucket on a server that may still be at timeline 1, and the floor
-- of its next failover would no longer clear them.
--
-- The floor is now relative to a base kept with the identity: the bucket
-- `epoch_base_bucket` is the highest bucket of epochs issued up to the
-- timeline `epoch_base_timeline`, and each timeline after it starts a
-- bucket higher:
--
--   floor(T) = (epoch_base_bucket + max(T - epoch_base_timeline, 0)) * 2^32 + 1
--
-- This migration records the current timeline, and as bucket the higher
-- of (timeline - 1) (the former floor's) and the highest bucket any lease
-- is in (a database adopted before this migration): for a database never
-- adopted the floor is what it was. Adopting a copy updates the identity
-- row (system identifier, database oid), and a trigger then records the
-- adoption's timeline and a bucket above every epoch the copy holds and
-- above the floor it had: its next failover clears them again, and its
-- next grants already start above every epoch the original gave.
ALTER TABLE leasehold_database
    ADD COLUMN epoch_base_timeline bigint,
    ADD COLUMN epoch_base_bucket   bigint;

UPDATE leasehold_database
   SET epoch_base_timeline = ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8,
       epoch_base_bucket = greatest(
           ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8 - 1,
           (SELECT coalesce(max(epoch >> 32), 0) FROM leasehold_leases));

ALTER TABLE leasehold_database
    ALTER COLUMN epoch_base_timeline SET NOT NULL,
    ALTER COLUMN epoch_base_bucket   SET NOT NULL,
    ADD CONSTRAINT leasehold_database_epoch_base_check
        CHECK (epoch_base_timeline >= 1 AND epoch_base_bucket >= 0);

-- The least epoch a grant on `timeline` may give. Grants call it with
-- the timeline of their own statement's WAL insert position. Without a
-- leasehold_database row (which the identity check refuses first) it is
-- the former floor.
CREATE FUNCTION leasehold_epoch_floor(timeline bigint) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
        SELECT coalesce(
            (SELECT ((epoch_base_bucket + greatest(timeline - epoch_base_timeline, 0)) << 32) + 1
               FROM leasehold_database),
            ((timeline - 1) << 32) + 1)
    $$;

-- Adoption: the identity row moved to another system identifier or
-- database oid. The base moves to this timeline and to a bucket above
-- every lease's epoch and above the floor the copy had here, whatever
-- order the operator's statements run in.
CREATE FUNCTION leasehold_epoch_base_on_adoption() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
    DECLARE
        timeline bigint := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8;
    BEGIN
        NEW.epoch_base_timeline := timeline;
        NEW.epoch_base_bucket := greatest(
            (SELECT coalesce(max(epoch >> 32), 0) + 1 FROM leasehold_leases),
            OLD.epoch_base_bucket + greatest(timeline - OLD.epoch_base_timeline, 0) + 1,
            timeline - 1);
        RETURN NEW;
    END
    $$;

CREATE TRIGGER leasehold_database_adopted
    BEFORE UPDATE ON leasehold_database
    FOR EACH ROW
    WHEN (OLD.system_identifier IS DISTINCT FROM NEW.system_identifier
          OR OLD.database_oid IS DISTINCT FROM NEW.database_oid)
    EXECUTE FUNCTION leasehold_epoch_base_on_adoption();
