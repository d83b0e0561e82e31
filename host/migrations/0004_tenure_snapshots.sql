-- Leasehold schema, version 4: each tenure records where its grant and its
-- release stand in PostgreSQL's own commit order.
--
-- `granted_snapshot` is `pg_current_snapshot()` taken by the grant's
-- statement after the lease row was locked `FOR UPDATE` (in READ
-- COMMITTED a statement takes its snapshot when it starts, and the lock was
-- taken by an earlier statement of the same transaction): every fenced
-- write of an earlier epoch, which held the row `FOR SHARE`, has committed
-- or rolled back by then, so each committed one is visible in it.
-- `released_snapshot` is the same for the statement that ended the tenure
-- on its holder's own release. Nothing in the host reads them: they let
-- an outside checker order every write against grants and releases by
-- commit order (`pg_visible_in_snapshot` on the row's `xmin`), without
-- trusting a host's clock or its stamps. NULL on tenures granted before
-- this version.
ALTER TABLE leasehold_tenures
    ADD COLUMN granted_snapshot  pg_snapshot,
    ADD COLUMN released_snapshot pg_snapshot;
