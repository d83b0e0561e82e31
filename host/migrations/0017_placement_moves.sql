-- Leasehold schema, version 17: each lease's last placement move, with
-- its reason, recorded by the lease authority in the very transactions
-- that make the move.
--
-- A placement move is one of:
--   * `over_share`: the holder was above its fair share and handed the
--     lease over by orderly release; the next grant to another holder
--     completes the move;
--   * `no_other_host`: a host took the lease beyond its own share because
--     no other live host able to run it was below its own;
--   * `lapsed`: a host took the lease beyond its own share because its
--     holder stopped renewing it.
--
-- `handover_reason` is written by the release placement asked for, in the
-- release's own statement, and only when that release marks the row
-- released (a stale holder's release changes nothing). Every grant clears
-- it. `last_move_*` is written by the grant that moves the lease, in the
-- grant's own statement: the handover reason the release left, else the
-- reason the acquiring host gave (`no_other_host`, `lapsed`), when the new
-- holder differs from the previous one (a grant back to the same holder
-- moves nothing, and the last move stays as it was). So the record can
-- never disagree with the grant and release it describes, and every
-- replica reads the same record.
--
-- NULL everywhere: never moved by placement (or granted before this
-- version). `last_move_from` is NULL for a move that was the lease's first
-- grant. Adding nullable columns without defaults rewrites nothing; the
-- checks scan the lease rows once (one row per controller).
ALTER TABLE leasehold_leases
    ADD COLUMN handover_reason  text CHECK (handover_reason IN ('over_share')),
    ADD COLUMN last_move_reason text
        CHECK (last_move_reason IN ('over_share', 'no_other_host', 'lapsed')),
    ADD COLUMN last_move_at     timestamptz,
    ADD COLUMN last_move_from   text,
    ADD COLUMN last_move_to     text,
    ADD CONSTRAINT leasehold_leases_last_move_whole CHECK (
        (last_move_reason IS NULL) = (last_move_at IS NULL)
        AND (last_move_reason IS NULL) = (last_move_to IS NULL)
        AND (last_move_reason IS NOT NULL OR last_move_from IS NULL));
