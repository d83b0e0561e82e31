-- Leasehold schema, version 13: retention of the event log, the change
-- stream and tenure history.
--
-- A host trims, in the background and in bounded batches, the events and
-- object changes older than `[store] event_retention` and the tenures of a
-- lease beyond the newest `[store] tenure_retention` (never the live one).
-- This table records, per cluster, how far each stream has been trimmed:
-- every event with `seq <= events_floor` and every change with
-- `position <= changes_floor` may be gone; everything above is kept. A
-- floor is raised in the same transaction as the DELETE it covers, so a
-- reader that reads its rows and the floor in one statement either sees
-- the rows or a floor above its cursor ("too old: re-list"), never a gap
-- it cannot tell from "nothing new". A cluster without a row has never
-- been trimmed (both floors 0).
CREATE TABLE leasehold_retention (
    cluster       text        PRIMARY KEY,
    events_floor  bigint      NOT NULL DEFAULT 0 CHECK (events_floor >= 0),
    changes_floor bigint      NOT NULL DEFAULT 0 CHECK (changes_floor >= 0),
    trimmed_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
