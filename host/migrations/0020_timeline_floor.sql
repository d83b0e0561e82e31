-- Leasehold schema, version 20: the highest WAL timeline hosts saw this
-- database on, kept with its identity.
--
-- A host never leads, grants or writes on a timeline lower than one it
-- saw the same database (system identifier and database oid) on: a lower
-- timeline is a former primary that a failover left behind and that came
-- back without a rewind. Hosts kept that floor in memory only, so a host
-- restarted against such a server led there. Now the highest timeline a
-- host verified the database on is recorded here (and, when the host has
-- one, in its data_dir), and an identity read on a lower timeline is
-- refused, whichever host reads it.
--
-- This migration records the current timeline. Adopting a copy (README,
-- "Running in production": the identity row moves to another system
-- identifier or database oid) starts the record again at the adoption's
-- timeline, since a copy restored onto another server counts its own
-- timelines.
ALTER TABLE leasehold_database
    ADD COLUMN highest_timeline bigint;

UPDATE leasehold_database
   SET highest_timeline = ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8;

ALTER TABLE leasehold_database
    ALTER COLUMN highest_timeline SET NOT NULL,
    ADD CONSTRAINT leasehold_database_highest_timeline_check
        CHECK (highest_timeline >= 1);

CREATE FUNCTION leasehold_timeline_on_adoption() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
    BEGIN
        NEW.highest_timeline :=
            ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8;
        RETURN NEW;
    END
    $$;

CREATE TRIGGER leasehold_database_timeline_adopted
    BEFORE UPDATE ON leasehold_database
    FOR EACH ROW
    WHEN (OLD.system_identifier IS DISTINCT FROM NEW.system_identifier
          OR OLD.database_oid IS DISTINCT FROM NEW.database_oid)
    EXECUTE FUNCTION leasehold_timeline_on_adoption();
