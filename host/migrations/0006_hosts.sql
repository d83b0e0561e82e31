-- Leasehold schema, version 6: fast crash detection through each host's
-- liveness session.
--
-- Every host keeps one dedicated, never-pooled session that holds a
-- session-level advisory lock on its `(cluster, holder)` for the life of
-- the process (the holder claim, L7). The server drops that lock the
-- moment the session ends, however it ends (SIGKILL of the host, a
-- terminated backend, a server restart), so the lock's absence in
-- `pg_locks` is the database's own verdict that the holder is gone.
-- `pg_locks` is readable by every role: no `pg_read_all_stats` is needed.
--
-- `leasehold_hosts` records each host that claimed a holder name: its
-- liveness session (backend pid and `backend_start`, as that session saw
-- itself), the claim's advisory key, when the process started, its version
-- and the controllers it runs. Written by the host itself, best effort,
-- when it (re)claims the name and when its controller set changes; read
-- only for display (`leasehold leases`, `GET /v1/leases`). A lease row
-- refers to its host row by `(cluster, holder)`; there is no foreign key:
-- a grant never waits on, or fails for, the registry, and lease rows
-- written before this version have no host row.
CREATE TABLE leasehold_hosts (
    cluster            text        NOT NULL,
    holder             text        NOT NULL,
    claim_key          bigint      NOT NULL,
    session_pid        integer     NOT NULL,
    session_started_at timestamptz,
    process_started_at timestamptz NOT NULL,
    version            text        NOT NULL,
    controllers        text[]      NOT NULL DEFAULT '{}',
    updated_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (cluster, holder)
);

-- Each grant records how its tenure may be taken over when its holder dies
-- (`crash_detection`, the holder's configured mode) and the liveness
-- session it was granted under (`holder_pid`, `holder_claim_key`). With
-- 'session', a grant may also succeed while the row is neither released
-- nor expired if no session with pid `holder_pid` holds advisory lock
-- `holder_claim_key` any more: the tenure's own session is gone, so its
-- holder is dead or has revoked its guests (it ends every tenure the moment
-- its liveness session ends). The grant still locks the row FOR UPDATE
-- first, so it waits for in-flight fenced writes (L4). With 'ttl' (and on
-- every row granted before this version) only release or expiry frees the
-- lease, as before. Adding columns with constant defaults rewrites nothing.
ALTER TABLE leasehold_leases
    ADD COLUMN crash_detection  text NOT NULL DEFAULT 'ttl'
        CHECK (crash_detection IN ('session', 'ttl')),
    ADD COLUMN holder_pid       integer,
    ADD COLUMN holder_claim_key bigint;
