//! Every size and count Leasehold bounds, declared once with its default.

// The store's bounds are the model's (`model/src/limits.rs`, shared with
// the SDK's fake), named here beside the host's own so this stays the one
// table of every bound.
pub use leasehold_model::limits::{
    DEFAULT_PAGE_SIZE, MAX_COLLECTED_PER_COMMIT, MAX_EVENT_MESSAGE_BYTES, MAX_EVENT_REASON_BYTES,
    MAX_EVENTS_PER_COMMIT, MAX_FINALIZER_BYTES, MAX_FINALIZERS, MAX_HOLDER_LEN, MAX_JSON_DEPTH,
    MAX_JSON_INTEGER, MAX_LABEL_KEY_BYTES, MAX_LABEL_LEN, MAX_LABEL_VALUE_BYTES, MAX_LABELS,
    MAX_OPS_PER_COMMIT, MAX_PAGE_SIZE, MAX_SELECTOR_CONTAINS_BYTES, MAX_SELECTOR_CONTAINS_DEPTH,
    MAX_SELECTOR_LABELS, MAX_VALUE_BYTES, MIN_JSON_INTEGER,
};
/// Most kinds one `GET /v1/changes` may ask for (`kind=`, repeated): a
/// reader follows the few kinds it watches, or every kind by naming none.
pub const MAX_CHANGE_KINDS: usize = 32;
/// Most objects a guest instance's cache of its own commits keeps
/// (`runtime/host/own_writes.rs`): a few large batches' worth (a commit
/// writes at most [`MAX_OPS_PER_COMMIT`] objects, plus what garbage
/// collection deletes); beyond it the oldest commit's objects are read from
/// the database again.
pub const OWN_WRITES_CACHED: usize = 4096;
/// Largest tenure history returned in one call.
pub const MAX_HISTORY: usize = 1000;
/// Default linear memory a guest may grow to.
pub const GUEST_MEMORY_BYTES: usize = 64 * 1024 * 1024;
/// Default `max_tables` of a controller: most tables per guest store.
/// Measured: a Rust guest, a componentize-js one and a componentize-py one
/// each define 2.
pub const GUEST_TABLES: usize = 20;
/// Default `max_instances` of a controller: most core instances per guest
/// store. Measured: a Rust guest makes 3, a componentize-js one 4, a
/// componentize-py one 14 (the interpreter, its C library and the WASI
/// adapter are linked as separate core modules, and each native extension
/// module adds one), so the default leaves room for a few extensions.
pub const GUEST_INSTANCES: usize = 20;
/// Default `max_memories` of a controller: most linear memories per guest
/// store. Measured: 1 for each of the three toolchains.
pub const GUEST_MEMORIES: usize = 20;
/// Largest `max_instances`: a Python controller with a hundred native
/// extension modules is far past anything seen.
pub const MAX_GUEST_INSTANCES: usize = 1000;
/// Largest `max_tables`.
pub const MAX_GUEST_TABLES: usize = 1000;
/// Largest `max_memories`: each pooled memory reserves address space.
pub const MAX_GUEST_MEMORIES: usize = 100;
/// Largest payload (sum of strings) a guest may pass in one host call.
pub const HOST_CALL_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;
/// Longest guest log line; longer lines are truncated.
pub const LOG_LINE_BYTES: usize = 8 * 1024;
/// Most bytes of guest stdout/stderr captured per tenure.
pub const GUEST_STDIO_BYTES: usize = 64 * 1024;
/// Largest `[controllers.settings]` table, as the JSON text the guest
/// reads: settings are configuration, not data (data belongs in objects),
/// and every guest instance holds a copy.
pub const MAX_SETTINGS_BYTES: usize = 64 * 1024;
/// Most distinct keys waiting in one controller's work queue.
pub const WORK_QUEUE_KEYS: usize = 100_000;
/// Most controllers one host runs.
pub const MAX_CONTROLLERS: usize = 10_000;
/// Fewest controllers the engine's instance pool is sized for, so a config
/// reload can add controllers up to this many without a restart.
pub const POOLED_CONTROLLERS: usize = 16;
/// Largest HTTP request body.
pub const HTTP_BODY_BYTES: usize = MAX_VALUE_BYTES + 4096;
/// Most HTTP connections open at once (lowered further to
/// [`HTTP_CONNECTIONS_FD_SHARE_PERCENT`] of the file-descriptor limit).
/// The API serves operators and tooling, not the public: a thousand
/// clients at once is already far beyond that, and each costs a file
/// descriptor and a task.
pub const HTTP_MAX_CONNECTIONS: usize = 1024;
/// Share (percent) of the process's file-descriptor limit HTTP connections
/// may take. The rest is for the database pool, guests, the compile cache
/// and log files: with the common limit of 1,024, 1,100 idle sockets used
/// to exhaust it and make `accept` (and the database) fail.
pub const HTTP_CONNECTIONS_FD_SHARE_PERCENT: u64 = 50;
/// Default `max_creates_per_second` of a controller: the steady rate at
/// which its guest may create objects. Generous for a controller that
/// creates an object per input, yet 800 times below what a runaway guest
/// reached unthrottled (80,000 creates in 15 s).
pub const DEFAULT_CREATES_PER_SECOND: u32 = 100;
/// Largest `max_creates_per_second`; more is no limit at all (surely a
/// typo).
pub const MAX_CREATES_PER_SECOND: u32 = 100_000;
/// Default `create_burst`: creates a controller may make at once before
/// the rate applies (e.g. catching up after a resync).
pub const DEFAULT_CREATE_BURST: u32 = 1_000;
/// Largest `create_burst`.
pub const MAX_CREATE_BURST: u32 = 1_000_000;
/// Default `max_objects_per_kind`: most objects of one kind a controller's
/// creates may bring about. The same as [`WORK_QUEUE_KEYS`]: a watched
/// kind with more objects than a work queue holds overflows it anyway.
pub const DEFAULT_OBJECTS_PER_KIND: u64 = 100_000;
/// Largest `max_objects_per_kind`: the quota counts up to `cap + 1` index
/// entries in the store, which past ten million takes seconds.
pub const MAX_OBJECTS_PER_KIND: u64 = 10_000_000;
/// Unanswered server-side keepalive probes after which the server drops a
/// host's holder-claim session (see
/// [`crate::timeouts::HOLDER_CLAIM_KEEPALIVE_IDLE`]).
pub const HOLDER_CLAIM_KEEPALIVE_COUNT: u32 = 3;

/// Largest request body a guest may send to an external service.
pub const HTTP_OUT_REQUEST_BODY_BYTES: u64 = 1024 * 1024;
/// Largest response body a guest may read from an external service; past
/// it the body fails with `HTTP-response-body-size` (an endless body
/// cannot fill the guest's memory or hold its reconcile).
pub const HTTP_OUT_RESPONSE_BODY_BYTES: u64 = 4 * 1024 * 1024;
/// Most outbound requests of one guest in flight at once.
pub const HTTP_OUT_CONCURRENT_REQUESTS: usize = 16;
/// Most outbound requests one reconcile (or describe) may send: a guest
/// looping on a failing call is stopped long before its deadline.
pub const HTTP_OUT_REQUESTS_PER_RECONCILE: u32 = 64;
/// Most entries of one controller's `http_allow`.
pub const MAX_HTTP_ALLOW_ENTRIES: usize = 64;
/// Longest `http_allow` entry.
pub const MAX_HTTP_ALLOW_ENTRY_BYTES: usize = 2048;

// Relations between the bounds, checked when the crate compiles.

// The largest value fits in one host call's payload, and in one API body.
const _: () = assert!(MAX_VALUE_BYTES <= HOST_CALL_PAYLOAD_BYTES);
const _: () = assert!(MAX_VALUE_BYTES < HTTP_BODY_BYTES);
// A single log line fits in the stdio a tenure captures.
const _: () = assert!(LOG_LINE_BYTES <= GUEST_STDIO_BYTES);
// Every quota default is one the config accepts.
const _: () = assert!(DEFAULT_CREATES_PER_SECOND <= MAX_CREATES_PER_SECOND);
const _: () = assert!(DEFAULT_CREATE_BURST <= MAX_CREATE_BURST);
const _: () = assert!(DEFAULT_OBJECTS_PER_KIND <= MAX_OBJECTS_PER_KIND);
// The per-kind cap's default is the work queue's bound (see
// DEFAULT_OBJECTS_PER_KIND).
const _: () = assert!(DEFAULT_OBJECTS_PER_KIND == WORK_QUEUE_KEYS as u64);
// An outbound request body may carry the largest object value.
const _: () = assert!(MAX_VALUE_BYTES as u64 <= HTTP_OUT_REQUEST_BODY_BYTES);
// Concurrency never exceeds what one reconcile may send.
const _: () =
    assert!(HTTP_OUT_CONCURRENT_REQUESTS as u64 <= HTTP_OUT_REQUESTS_PER_RECONCILE as u64);
// Every default count of a guest is one the config accepts.
const _: () = assert!(GUEST_INSTANCES >= 1 && GUEST_INSTANCES <= MAX_GUEST_INSTANCES);
const _: () = assert!(GUEST_TABLES >= 1 && GUEST_TABLES <= MAX_GUEST_TABLES);
const _: () = assert!(GUEST_MEMORIES >= 1 && GUEST_MEMORIES <= MAX_GUEST_MEMORIES);
// The pool sized for a reload never exceeds the controllers a host runs.
const _: () = assert!(POOLED_CONTROLLERS <= MAX_CONTROLLERS);
// HTTP connections take a share of the descriptors, never all of them.
const _: () =
    assert!(HTTP_CONNECTIONS_FD_SHARE_PERCENT > 0 && HTTP_CONNECTIONS_FD_SHARE_PERCENT < 100);
// The default guest memory is one the config accepts.
const _: () = assert!(
    MIN_GUEST_MEMORY_BYTES <= GUEST_MEMORY_BYTES && GUEST_MEMORY_BYTES <= MAX_GUEST_MEMORY_BYTES
);

/// Default `[database] max_connections`: enough for every supervisor's
/// renewals plus API traffic on a small host.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// Largest `[database] max_connections`: PostgreSQL's own default
/// `max_connections` is 100 for the whole server; more than this from one
/// host is a mistake, not a tuning choice.
pub const MAX_DATABASE_CONNECTIONS: usize = 256;

/// Largest config file read. A config is a few kilobytes; anything near
/// this is not a config file.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Smallest `memory_limit`: a Rust guest needs several 64 KiB pages just
/// to start.
pub const MIN_GUEST_MEMORY_BYTES: usize = 1024 * 1024;

/// Largest `memory_limit`: the whole 32-bit address space of a wasm32
/// guest.
pub const MAX_GUEST_MEMORY_BYTES: usize = 4 * 1024 * 1024 * 1024;

/// Most directories granted to one controller.
pub const MAX_DIRS: usize = 16;

/// Longest guest path of a granted directory.
pub const MAX_GUEST_PATH_BYTES: usize = 1024;

/// Longest `[http] token`.
pub const MAX_TOKEN_BYTES: usize = 1024;

/// A token shorter than this is warned about at start and by `leasehold
/// check` (not refused: a test setup may mean it): 16 random printable
/// characters are about 100 bits.
pub const MIN_TOKEN_BYTES: usize = 16;

/// A controller whose reconciles fail this many times in a row (any key)
/// is listed as degraded in `/readyz` (`degraded_after_failures`).
pub const DEGRADED_AFTER_FAILURES: u64 = 10;

/// Largest `degraded_after_failures`.
pub const MAX_DEGRADED_AFTER_FAILURES: u64 = 1_000_000;

/// The last error `/readyz` shows of a degraded controller is cut to this
/// many bytes (after escaping).
pub const DEGRADED_ERROR_BYTES: usize = 512;

/// How often an unconditional `PUT` re-reads the version when another
/// writer races it, before it writes without a precondition. The re-reads
/// only serve to tell 201 from 200; the write itself never needs them.
pub const PUT_ATTEMPTS: usize = 3;

/// How often an unconditional put is retried when the object it found
/// absent was created by a concurrent commit before its own insert (it then
/// exists and can be locked): a bound, not an expected path.
pub const LOST_CREATE_RETRIES: usize = 3;

/// Connections of the lease authority's own pool: renewals, grants,
/// releases, tenure records and identity checks, never the store's guest
/// writes or the HTTP API, which share `[database] max_connections`. So a
/// flood of API reads or a burst of guest writes cannot make a renewal
/// wait for a connection. Small on purpose: the host renews every lease of
/// one timing in one statement per interval, a grant or release is one
/// short transaction, and each connection is a server backend.
pub const AUTHORITY_POOL_CONNECTIONS: usize = 4;
/// Most HTTP API requests served at once, events excepted (see
/// [`HTTP_MAX_EVENT_REQUESTS`]); `/healthz`, `/readyz` and `/metrics` are
/// exempt: they never wait on the database beyond the shared, cached
/// readiness probe. Four times the default pool: enough to keep every
/// pooled connection busy, few enough that the requests waiting for one
/// cannot hold the host's memory or the pool's queue for long.
pub const HTTP_MAX_IN_FLIGHT: usize = 64;
/// Most API requests waiting for one of the [`HTTP_MAX_IN_FLIGHT`] slots;
/// beyond it a request is answered 503 `overloaded` at once.
pub const HTTP_MAX_QUEUED: usize = 64;
/// Longest an API request waits in that queue before it is answered 503
/// `overloaded`: a client that retries after [`HTTP_OVERLOADED_RETRY_AFTER`]
/// loses less than one that waits on a host that is not catching up.
pub const HTTP_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
/// What an `overloaded` answer asks the client to wait (`Retry-After`,
/// whole seconds: HTTP has no finer unit).
pub const HTTP_OVERLOADED_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
/// Most `GET /v1/events` and `GET /v1/changes` (the long-polled feeds)
/// requests served at once, a budget of their own (labelled `events`):
/// a long poll holds its slot for up to its whole wait while costing
/// nothing but a task, so counting it with the other requests would let a
/// few dozen held polls answer every other client 503. Beyond it such a
/// request is answered 503 `overloaded` at once (a poll would wait seconds
/// for a slot).
pub const HTTP_MAX_EVENT_REQUESTS: usize = 256;
/// Share (percent) of the machine's cores the HTTP API's own runtime has
/// threads for (at least one; `service::http`). The rest run the
/// supervisors, the renewer and the guests, which a flood of requests then
/// cannot crowd out.
pub const HTTP_RUNTIME_CORES_PERCENT: usize = 50;

/// Embedded backend: SQLite connections one process keeps open on the
/// data directory's database (readers run side by side in WAL mode; a
/// process's writers take turns before they reach SQLite's lock, so
/// connections beyond a few only wait).
pub const EMBEDDED_CONNECTIONS: usize = 8;
/// Embedded backend: the write-ahead log is copied back into the database
/// (a checkpoint) once it holds this many pages (SQLite's page is 4 KiB:
/// about 4 MiB), by whichever commit crosses it, without waiting for
/// readers (SQLite's `wal_autocheckpoint`).
pub const EMBEDDED_WAL_AUTOCHECKPOINT_PAGES: u32 = 1000;
/// Embedded backend: after a checkpoint the write-ahead log file is cut
/// back to at most this (`journal_size_limit`); a burst of writes may grow
/// it past this meanwhile, never for good.
pub const EMBEDDED_WAL_SIZE_LIMIT_BYTES: u64 = 64 * 1024 * 1024;
/// Embedded backend: the largest the database file may grow
/// (`max_page_count`); a write that needs more fails with the store
/// unavailable, naming the bound, instead of filling the disk. Retention
/// keeps a healthy cluster far below it.
pub const EMBEDDED_MAX_DATABASE_BYTES: u64 = 64 * 1024 * 1024 * 1024;
/// Embedded backend: SQLite's page size, in bytes (its default).
pub const EMBEDDED_PAGE_BYTES: u64 = 4096;

// The write-ahead log is bounded well below the database it belongs to,
// and its checkpoint threshold below its own bound.
const _: () = assert!(EMBEDDED_WAL_SIZE_LIMIT_BYTES < EMBEDDED_MAX_DATABASE_BYTES);
const _: () = assert!(
    EMBEDDED_WAL_AUTOCHECKPOINT_PAGES as u64 * EMBEDDED_PAGE_BYTES < EMBEDDED_WAL_SIZE_LIMIT_BYTES
);
// Several readers and one writer at once, as the lease authority's pool.
const _: () = assert!(EMBEDDED_CONNECTIONS >= AUTHORITY_POOL_CONNECTIONS);

// A renewal given up after one interval may still hold its connection
// while the next one goes out, and a grant or release may run beside them.
const _: () = assert!(AUTHORITY_POOL_CONNECTIONS >= 3);
// The request limits refuse with 503 `overloaded` before the connection cap
// has to refuse connections: every request they admit or queue fits under
// it, with room for health checks and idle keep-alive connections.
const _: () =
    assert!(HTTP_MAX_IN_FLIGHT + HTTP_MAX_QUEUED + HTTP_MAX_EVENT_REQUESTS < HTTP_MAX_CONNECTIONS);
// The API can keep every connection of the default pool busy.
const _: () = assert!(HTTP_MAX_IN_FLIGHT >= DEFAULT_MAX_CONNECTIONS);
// The API's runtime leaves cores to the rest, and has some.
const _: () = assert!(HTTP_RUNTIME_CORES_PERCENT > 0 && HTTP_RUNTIME_CORES_PERCENT < 100);
// A queued request never waits longer than it is told to stay away after.
const _: () = assert!(HTTP_QUEUE_WAIT.as_nanos() < HTTP_OVERLOADED_RETRY_AFTER.as_nanos());
// `Retry-After` is whole seconds, at least one.
const _: () = assert!(
    HTTP_OVERLOADED_RETRY_AFTER.as_secs() >= 1 && HTTP_OVERLOADED_RETRY_AFTER.subsec_nanos() == 0
);

// `leasehold sim` (host/src/sim/): how much one command simulates.

/// Runs `leasehold sim` makes without `--runs`.
pub const SIM_DEFAULT_RUNS: u64 = 100;
/// Most runs one `leasehold sim` makes (`--runs`).
pub const SIM_MAX_RUNS: u64 = 1_000_000;
/// Steps of a simulated run without `--steps`: the fault phase's steps,
/// and the most reconciles the world then gets to settle.
pub const SIM_DEFAULT_STEPS: u64 = 200;
/// Most steps of one simulated run (`--steps`).
pub const SIM_MAX_STEPS: u64 = 100_000;
/// A world that still has work queued after `--steps` reconciles without
/// faults is quiescent only if this many reconciles in a row (at most the
/// steps) changed nothing: a controller that polls is idle, one that keeps
/// writing is not.
pub const SIM_QUIET_RECONCILES: u64 = 20;
/// Most runs the shrinking of one failed run makes (each drops faults
/// and runs again).
pub const SIM_SHRINK_MAX_RUNS: u64 = 200;
/// Largest weight of a fault kind in a world file's `[faults]` (default
/// 1; 0 turns the kind off).
pub const SIM_MAX_FAULT_WEIGHT: f64 = 100.0;
/// Longest value shown in a simulation's trace line (a commit's value, a
/// request's body); the digest covers what the line shows.
pub const SIM_TRACE_VALUE_BYTES: usize = 240;
/// Most steps a request cut off by a simulated lease loss may wait before
/// it arrives at its service anyway (`lease_lost` in flight).
pub const SIM_LATE_DELIVERY_MAX_STEPS: u64 = 20;
/// Guests alive at once in a simulation's engine: one tenure's, and the
/// next one's while the old one is dropped.
pub const SIM_MAX_GUESTS: u32 = 4;
const _: () = assert!(SIM_DEFAULT_RUNS <= SIM_MAX_RUNS && SIM_DEFAULT_STEPS <= SIM_MAX_STEPS);
const _: () = assert!(SIM_QUIET_RECONCILES >= 1);

/// Most of a build tool's output kept for its error message (the last
/// bytes it printed, where its error is): enough for a compiler's or
/// pip's error, not a whole log.
pub const MAX_TOOL_OUTPUT_BYTES: usize = 64 * 1024;
/// Largest project manifest `leasehold build` reads to learn a project's
/// name (`Cargo.toml`, `pyproject.toml`, `package.json`).
pub const MAX_PROJECT_MANIFEST_BYTES: usize = 1024 * 1024;
/// Lock files a compile cache folder holds for the compiles sharing it
/// (`runtime/compile_lock.rs`): a component's digest picks one, so two
/// different components seldom wait for each other and the files stay few.
pub const COMPILE_LOCK_SHARDS: usize = 16;
