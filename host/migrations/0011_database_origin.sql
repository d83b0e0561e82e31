-- Leasehold schema, version 11: where this database was created.
--
-- `leasehold_database` is an ordinary table, so `CREATE DATABASE ...
-- TEMPLATE`, pg_dump and restore, and physical backups all copy its uuid.
-- The row now also records the server's system identifier and the oid of
-- the database it was created in. A template copy or a restore gets a new
-- oid (and a restore on another server a new system identifier), so a
-- database whose own differ from what its row records is a copy, and
-- hosts refuse to lead or write there: a copy has its own epoch counter
-- and would issue epochs the original already issued. A streaming standby
-- promoted by a failover keeps both, and stays the same database.
--
-- A database migrated from an earlier version records where it is now.
ALTER TABLE leasehold_database
    ADD COLUMN system_identifier bigint,
    ADD COLUMN database_oid      oid,
    ADD COLUMN database_name     text;

UPDATE leasehold_database
   SET system_identifier = (SELECT system_identifier FROM pg_control_system()),
       database_oid      = (SELECT oid FROM pg_database WHERE datname = current_database()),
       database_name     = current_database();

ALTER TABLE leasehold_database
    ALTER COLUMN system_identifier SET NOT NULL,
    ALTER COLUMN database_oid      SET NOT NULL,
    ALTER COLUMN database_name     SET NOT NULL;
