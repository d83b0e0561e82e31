-- Leasehold schema, version 5: each tenure counts the outbound HTTP
-- requests its guests sent, and when the last one left.
--
-- `outbound_requests` counts requests that left the host (the URL was in
-- the controller's `http_allow` and the lease was still held when the
-- request was sent); refused ones are not counted. `last_outbound_at` is
-- when the last one left, by the sending host's clock: a statistic, never
-- compared with the database's times. The host writes both when the tenure
-- ends, after its guest stopped, with `greatest` so a late or repeated
-- write never lowers them; a host that crashed leaves them at 0 and NULL.
-- Existing tenures get 0 and NULL (adding a column with a constant default
-- rewrites nothing).
ALTER TABLE leasehold_tenures
    ADD COLUMN outbound_requests bigint      NOT NULL DEFAULT 0,
    ADD COLUMN last_outbound_at  timestamptz;
