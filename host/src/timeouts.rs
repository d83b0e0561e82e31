//! Every duration Leasehold depends on, declared once with its default and
//! the reason for it. Config may override the per-controller ones; nothing
//! else in the code base spells a duration literal.

use std::time::Duration;

macro_rules! declare_timeouts {
    ($( $(#[doc = $doc:literal])* $name:ident = $value:expr; )*) => {
        $( $(#[doc = $doc])* pub const $name: Duration = $value; )*

        /// Every declared duration, by name, for documentation and `check`.
        pub const ALL: &[(&str, Duration)] = &[ $( (stringify!($name), $name), )* ];
    };
}

declare_timeouts! {
    /// How long a grant lasts without renewal, judged by the database clock.
    /// Also the worst-case takeover time after a holder vanishes silently.
    LEASE_TTL = Duration::from_secs(10);
    /// How often a holder renews. Several renewals fit in one deadline, so a
    /// single slow or failed round trip does not lose the lease.
    RENEW_INTERVAL = Duration::from_secs(2);
    /// After the last renewal *sent* that succeeded, the holder treats the
    /// lease as lost once this has passed (L3). Below the ttl, so the holder
    /// has aborted its guest before anyone else can be granted the lease;
    /// the gap (3 s by default) absorbs clock-rate drift and scheduling delay.
    RENEW_DEADLINE = Duration::from_secs(7);
    /// Longest a renewal waits for the lease row's lock (its `lock_timeout`;
    /// a tenth of the ttl when that is less). It waits only behind a grant
    /// or a release of the same lease, which hold the lock for one round
    /// trip; past this the renewal fails and the next one, one interval
    /// later, tries again.
    RENEW_LOCK_TIMEOUT = Duration::from_millis(500);
    /// Longest an acquire waits for the lease row's lock once the lease
    /// looked grantable (its `lock_timeout`). It waits behind fenced writes
    /// still in flight (L4); one left open by a partitioned holder lasts
    /// until the server ends it, and the acquire must not hold one of the
    /// authority's few connections meanwhile. Past this the lease counts as
    /// still held and the standby asks again at its next poll.
    GRANT_LOCK_TIMEOUT = Duration::from_millis(250);
    /// How long the host registry keeps the row of a host that is gone (no
    /// liveness session, no lease held in its name) before a registering
    /// host deletes it.
    HOST_ROW_RETENTION = Duration::from_secs(24 * 3600);
    /// Longest a single reconcile call may run before the guest is torn down.
    RECONCILE_DEADLINE = Duration::from_secs(30);
    /// Longest a guest's outbound request may take to connect (TCP and
    /// TLS). A guest may ask for less, never more.
    HTTP_OUT_CONNECT = Duration::from_secs(5);
    /// Longest a guest's outbound request waits for the response head once
    /// sent. Below the reconcile deadline, so a receiver that never answers
    /// fails the request with a typed error and the reconcile goes on.
    HTTP_OUT_FIRST_BYTE = Duration::from_secs(10);
    /// Longest silence between two chunks of an outbound response body.
    HTTP_OUT_BETWEEN_BYTES = Duration::from_secs(10);
    /// Longest a guest's outbound request may take in all, from the
    /// connect to the last byte of the response body: a reply dripping a
    /// byte every few seconds stays under the between-bytes bound forever,
    /// and only this ends it, with a typed timeout the guest handles, well
    /// before the reconcile deadline would tear the guest down (and its
    /// next reconcile send the request again). A controller whose
    /// `reconcile_deadline` is shorter gets two thirds of it instead.
    HTTP_OUT_REQUEST_TOTAL = Duration::from_secs(20);
    /// First retry delay of a supervisor that failed to acquire or whose
    /// guest failed.
    BACKOFF_MIN = Duration::from_millis(100);
    /// Retry delays grow exponentially up to this bound (with jitter).
    BACKOFF_MAX = Duration::from_secs(30);
    /// On shutdown, how long a running reconcile may finish before it is
    /// aborted and the lease released anyway.
    SHUTDOWN_GRACE = Duration::from_secs(5);
    /// Interval of the engine's epoch ticker: the granularity at which a
    /// CPU-bound guest yields to the executor and checks its deadline.
    EPOCH_TICK = Duration::from_millis(1);
    /// How long to wait for a database connection from the pool before a
    /// call is reported `unavailable`.
    DATABASE_CONNECT = Duration::from_secs(5);
    /// Upper bound on a single database statement issued by the host.
    DATABASE_STATEMENT = Duration::from_secs(5);
    /// How long a host starting up waits for another host's migration (the
    /// migration lock) before it gives up, naming the holder.
    MIGRATION_LOCK_WAIT = Duration::from_secs(30);
    /// `lock_timeout` of each statement of a migration once the migration
    /// lock is held: a schema change waiting for a table lock queues every
    /// later query of that table behind it, so it gives up instead (and is
    /// tried again at the next start).
    MIGRATION_STATEMENT_LOCK = Duration::from_secs(5);
    /// `idle_in_transaction_session_timeout` of a migration: a host that
    /// stalls mid-migration must not hold its locks (the migration lock
    /// and whatever tables it altered) until the server notices.
    MIGRATION_IDLE = Duration::from_secs(10);
    /// Longest `GET /v1/events` long-poll before it returns an empty page.
    EVENTS_LONG_POLL_MAX = Duration::from_secs(30);
    /// Longest time from the first byte of an HTTP request to the end of
    /// its header. A header is a few hundred bytes, sent at once by any
    /// client; past this the sender is stuck or hostile (slowloris) and the
    /// connection is closed.
    HTTP_HEADER_READ = Duration::from_secs(5);
    /// Longest time to receive a whole request body (at most
    /// [`crate::limits::HTTP_BODY_BYTES`], so 26 KiB/s is enough); past it
    /// the request is answered 408 and the connection closed.
    HTTP_BODY_READ = Duration::from_secs(10);
    /// Longest an HTTP connection stays open without a request in flight
    /// and without sending a byte. Above the 60 s idle timeout common in
    /// load balancers, so a proxy never reuses a connection the host has
    /// just closed; idle connections are also the first let go when the
    /// connection cap is reached.
    HTTP_KEEP_ALIVE_IDLE = Duration::from_secs(75);
    /// First wait after `accept` failed for want of resources (file
    /// descriptors, memory), so the loop does not spin on the error.
    HTTP_ACCEPT_BACKOFF_MIN = Duration::from_millis(10);
    /// The accept backoff doubles up to this, short enough that the API
    /// comes back within a second of resources being freed.
    HTTP_ACCEPT_BACKOFF_MAX = Duration::from_secs(1);
    /// At most one warning per this interval about refused or evicted
    /// connections and accept failures, so a flood does not flood the log.
    HTTP_OVERLOAD_LOG_EVERY = Duration::from_secs(10);
    /// How often a running host re-checks the database identity, so one
    /// whose connection string now reaches another server stops leading.
    IDENTITY_RECHECK = Duration::from_secs(5);
    /// How soon the identity is checked again while the last check failed
    /// (unreachable, wrong database, read-only), so a host leads again
    /// within about a second of the database recovering.
    IDENTITY_RECHECK_FAILING = Duration::from_secs(1);
    /// How often a host whose holder name is taken by another live host,
    /// or whose claim session failed, tries to claim the name again: the
    /// delay before it leads after the other host stopped.
    HOLDER_CLAIM_RETRY = Duration::from_millis(500);
    /// Embedded backend: how often a host checks that the file lock
    /// holding its holder name is still the one its name leads to, so a
    /// host whose lock file was removed stops acquiring within about this
    /// long (the renew interval's default).
    HOLDER_CLAIM_CHECK = Duration::from_secs(2);
    /// PostgreSQL: how often the session holding the holder name (the
    /// host's liveness session) is asked whether it answers (an empty
    /// query). Each answer extends the host's liveness
    /// ([`LIVENESS_BUDGET`]); several checks fit in it, so one slow answer
    /// costs nothing.
    LIVENESS_CHECK = Duration::from_secs(1);
    /// How long after it *sent* the last statement its liveness (claim)
    /// session answered a host still counts as alive to the server, under
    /// crash detection `session`: past it the host refuses every outbound
    /// request of its `session` tenures and aborts them, whether or not it
    /// has heard that the session ended (a silent partition, a statement
    /// that never returns). Each statement on that session (the checks,
    /// the host's registration and pruning included) waits at most until
    /// then. The server drops the session of a host that vanished
    /// silently no sooner than [`claim_session_drop`] (8 s) after the last
    /// packet it received from it, which came no earlier than that send;
    /// this stays below it by [`LIVENESS_MARGIN`], so the host has stopped
    /// before a standby can take its leases over. And it is at least the
    /// renew deadline, so a stalled check ends a tenure no sooner than a
    /// stalled renewal would.
    LIVENESS_BUDGET = Duration::from_secs(7);
    /// How much [`LIVENESS_BUDGET`] keeps below the time the server needs
    /// to drop a silent host's liveness session ([`claim_session_drop`]):
    /// room for the abort to reach the guest once the budget is spent, and
    /// for a request admitted just before it to reach its receiver.
    LIVENESS_MARGIN = Duration::from_secs(1);
    /// Server-side TCP keepalive idle time of the claim session: with
    /// [`HOLDER_CLAIM_KEEPALIVE_INTERVAL`] and
    /// [`crate::limits::HOLDER_CLAIM_KEEPALIVE_COUNT`], the server frees
    /// the holder name of a host that vanished without closing its socket
    /// within 8 s, before its leases (10 s ttl) expire, so a replacement
    /// with the same name is not held up longer than the leases are.
    HOLDER_CLAIM_KEEPALIVE_IDLE = Duration::from_secs(5);
    /// Interval between the claim session's unanswered keepalive probes.
    HOLDER_CLAIM_KEEPALIVE_INTERVAL = Duration::from_secs(1);
    /// Longest wait for recording the end of a tenure (the release); past
    /// it the lease simply expires.
    TENURE_END_RECORD = Duration::from_secs(3);
    /// Longest delay a guest may ask for (requeue or retry-after) before
    /// a key is reconciled again: a day is already "later"; the guest's
    /// raw milliseconds could overflow the clock.
    MAX_REQUEUE = Duration::from_secs(24 * 3600);
    /// Slack on top of [`SHUTDOWN_GRACE`] and [`TENURE_END_RECORD`] when
    /// waiting for a supervisor to stop (see
    /// `service::controllers::stop_bound`): its scheduling and the guest's
    /// abort. A supervisor that misses the bound is aborted, and the abort
    /// is awaited for at most this long again.
    SUPERVISOR_STOP_MARGIN = Duration::from_secs(1);
    /// Longest a controller's echo (a key queued only by changes its own
    /// tenure wrote) waits behind other ready keys before it runs anyway
    /// (`supervisor/queue.rs`). Long against a reconcile (milliseconds), so
    /// a batch's echoes do not stand in front of the next user's change;
    /// short enough that a stream of other work never starves them.
    ECHO_DEFER = Duration::from_secs(1);
    /// Shortest time between two reads of the change feed by one worker
    /// while the key it runs next is an echo (`supervisor/worker.rs`): a
    /// batch's echoes, each answered without a database read, then run
    /// without a feed read (a round trip) between every two of them. A new
    /// change waits at most this long (plus the reconcile running when it
    /// comes due) before it is read; before any other key, and when
    /// nothing is ready, the feed is read at once.
    FEED_ECHO_PACE = Duration::from_millis(5);
    /// Pooled sessions unused for longer than this are checked with an
    /// empty query before they are handed out (`db.rs`); sessions in
    /// steady use are handed out without that round trip. A session that
    /// died while idle (a server restart, a failover, a middlebox that
    /// dropped it) is still found before a caller gets it.
    SESSION_VERIFY_IDLE = Duration::from_secs(1);
    /// Fallback poll of the change feed when no notification arrives
    /// (notifications can be lost across a reconnect).
    FEED_POLL = Duration::from_secs(1);
    /// First re-read of the change feed while a commit in flight holds its
    /// high-water mark below the positions handed out (doubling while the
    /// mark does not move, up to [`FEED_POLL`]): a commit that rolls back
    /// sends no notification, and the commits behind it must not wait a
    /// whole poll for that.
    FEED_SETTLE = Duration::from_millis(5);
    /// Least time between two of one process's change-feed notifications
    /// (`NOTIFY` transactions). An idle process notifies at once; under a
    /// stream of commits the notifier waits this long after each NOTIFY
    /// and then names every cluster committed to meanwhile in one: each
    /// NOTIFY is a transaction of its own, and one per commit cost a fifth
    /// of the write throughput at 8 writers. Other processes see a commit
    /// at most this much later.
    FEED_NOTIFY_INTERVAL = Duration::from_millis(5);
    /// How long the start-up notification self-test waits for a `NOTIFY`
    /// sent through the pool to arrive on the LISTEN session (at
    /// `[database] session_url`) before it warns that notifications are
    /// lost on the way (a pooler or proxy between): one round trip each
    /// way, with room for a busy server.
    NOTIFICATION_SELF_TEST = Duration::from_secs(5);
    /// How long `leasehold run` keeps retrying, with backoff, a database
    /// that is unreachable or drops its connections while the host starts
    /// (a restart or failover in progress, sessions terminated), before it
    /// exits with the error. Retried: whatever the database layer reports
    /// as unavailable — a refused or dropped connection, and also a server
    /// still in recovery (a failover in progress) or a schema a newer host
    /// migrated, which then fail after this long. Not retried: a wrong
    /// database (identity), an invalid URL, a missing schema.
    STARTUP_DATABASE_RETRY = Duration::from_secs(15);
    /// A controller whose reconciles fail without one success for this
    /// long is listed as degraded in `/readyz` (`degraded_after`), however
    /// few they were: one failing key retried with backoff fails a handful
    /// of times in five minutes and still deserves a look.
    DEGRADED_AFTER = Duration::from_secs(300);
    /// Shortest `degraded_after`: below it a short outage of a service the
    /// controller calls would flag it at once.
    MIN_DEGRADED_AFTER = Duration::from_secs(10);
    /// Longest `degraded_after`.
    MAX_DEGRADED_AFTER = Duration::from_secs(86_400);
    /// Embedded backend: longest a transaction waits for SQLite's write
    /// lock, which one transaction of one process on the data directory
    /// holds at a time (every transaction is a few statements run on a
    /// thread without awaiting anything, so it is held for a commit's
    /// fsync at most). Past it the write or grant fails as unavailable: a
    /// process stopped (SIGSTOP, a debugger) inside a transaction holds
    /// every other writer back until it runs again, and this bounds how
    /// long each of them waits for it.
    EMBEDDED_BUSY_TIMEOUT = Duration::from_secs(5);
    /// Embedded backend: the pause between two attempts at a lock another
    /// process holds. SQLite's own waits grow to 100 ms, which a handover
    /// would pay; one millisecond is a few system calls.
    EMBEDDED_BUSY_STEP = Duration::from_millis(1);
    /// Embedded backend: how often a process looks for what other
    /// processes on the data directory committed (new changes for its
    /// watchers, releases for its standbys): one read of SQLite's change
    /// counter, and a read of the per-cluster positions only when it moved.
    /// A release by another process is seen at most this much later.
    EMBEDDED_FEED_POLL = Duration::from_millis(10);
    /// Embedded backend: how often a host with standbys under crash
    /// detection `session` tries the file lock of each holder it waits
    /// behind (`data_dir/hosts/<holder>.lock`): the kernel frees it the
    /// moment that process dies, so a SIGKILLed leader is replaced about
    /// this long later. A non-blocking `flock` per waited holder.
    EMBEDDED_TAKEOVER_SCAN = Duration::from_millis(25);

    // Floors and ceilings of the configurable durations. `leasehold check`
    // refuses a value outside them, naming the key, the bound and the
    // reason given here.

    /// Shortest `lease_ttl`. A grant must outlive several renewal round
    /// trips and a scheduling hiccup of a busy host; below a second, leases
    /// flap between replicas on ordinary latency (100 ms flapped 4,461
    /// times in 12 s), and every flap is a tenure row kept for good.
    MIN_LEASE_TTL = Duration::from_secs(1);
    /// Longest `lease_ttl`: it is also the worst-case takeover time after a
    /// holder vanishes silently, so anything longer is surely a typo.
    MAX_LEASE_TTL = Duration::from_secs(3600);
    /// Shortest `renew_interval`: each renewal is a database round trip;
    /// renewing more often than ten times a second buys no safety and only
    /// loads the database and the host (1 ns ran the host at 73 % CPU).
    MIN_RENEW_INTERVAL = Duration::from_millis(100);
    /// Least time between `renew_interval` and `renew_deadline` beyond the
    /// renewal's own lock wait ([`min_renew_slack`]): the last renewal sent
    /// before the deadline needs room for its round trip (and a slow
    /// database) to come back before the holder gives up.
    MIN_RENEW_SLACK = Duration::from_millis(200);
    /// Least time between `renew_deadline` and `lease_ttl`: the margin (L3)
    /// in which the holder aborts its guest before anyone else can be
    /// granted the lease, absorbing scheduling delay and clock-rate drift.
    /// The fault suite's fastest timing (1 s / 150 ms / 700 ms) keeps 300 ms.
    MIN_EXPIRY_MARGIN = Duration::from_millis(250);
    /// Shortest `reconcile_deadline`: it also bounds the instantiation and
    /// `describe` of a fresh guest, which take tens of milliseconds in a
    /// debug build on a busy host; below a second healthy guests are torn
    /// down and restarted in a loop.
    MIN_RECONCILE_DEADLINE = Duration::from_secs(1);
    /// Longest `reconcile_deadline`: a reconcile that may run an hour
    /// blocks every other key of its controller; longer is surely a typo.
    MAX_RECONCILE_DEADLINE = Duration::from_secs(3600);
    /// Shortest `backoff_min`: the first retry of a failed acquire or guest
    /// may come quickly, but not in a busy loop.
    MIN_BACKOFF_MIN = Duration::from_millis(10);
    /// Shortest `backoff_max`: at steady state a controller that keeps
    /// failing retries at most once a second, so it cannot flood the log,
    /// the database or the tenure history.
    MIN_BACKOFF_MAX = Duration::from_secs(1);
    /// Longest `backoff_max` (and so `backoff_min`): an hour between
    /// retries is already a controller that has stopped.
    MAX_BACKOFF = Duration::from_secs(3600);
    /// Shortest resync period a guest may ask for (`describe`); a shorter
    /// one is raised to this. A resync lists every watched object, so a
    /// guest asking for one every millisecond would keep the database busy.
    MIN_RESYNC_PERIOD = Duration::from_secs(1);
    /// Longest resync period a guest may ask for; a longer one is lowered
    /// to this (a day is already "never"; the guest's raw value could
    /// overflow the clock).
    MAX_RESYNC_PERIOD = Duration::from_secs(24 * 3600);
    /// How long a controller's count of the objects of one kind (for its
    /// `max_objects_per_kind` quota) is trusted before it is counted again
    /// in the store. In between, the controller's own creates and deletes
    /// keep it exact; other writers (the API, other controllers) are seen
    /// at the next count. Counting is bounded (`LIMIT cap + 1`) but not
    /// free, so it is not repeated for every commit.
    QUOTA_RECOUNT = Duration::from_secs(1);
    /// How often a host with standbys under crash detection `session` asks
    /// the database (one statement for all of them, on its dedicated
    /// listener session) whether any lease it waits for is held by a
    /// holder whose liveness session is gone; each pause is drawn from
    /// half to one and a half times this, so hosts do not ask in lockstep.
    /// The takeover after a crash waits about half of it on average; the
    /// cost is about ten small statements a second per standby host, and
    /// none on a host that stands by for nothing.
    TAKEOVER_SCAN = Duration::from_millis(100);
    /// Placement (`[placement] min_tenure` default): a lease is never
    /// handed over to a fairer host before it was held this long, so a
    /// lease does not flap while hosts come and go.
    PLACEMENT_MIN_TENURE = Duration::from_secs(10);
    /// Longest pause between two placement heartbeats of a host (it beats
    /// at its shortest renew interval when that is shorter): one statement
    /// per host per beat, however many leases it holds. Also about how
    /// long hosts take to notice a host that joined.
    PLACEMENT_BEAT = Duration::from_secs(1);
    /// Shortest pause between placement heartbeats a refused acquire or a
    /// finished handover asks for at once: a burst of them costs one.
    PLACEMENT_REFRESH_MIN = Duration::from_millis(20);

    // `leasehold sim`: durations of the simulated world, on its virtual
    // clock (none of them is waited for in real time).

    /// Virtual time one reconcile takes in a simulation, so that timers
    /// and the periodic resync come due as reconciles go by.
    SIM_RECONCILE_TIME = Duration::from_millis(10);
    /// Virtual time between a simulated lease loss and its successor's
    /// grant: the old lease runs out first, as after a crash.
    SIM_TAKEOVER_GAP = LEASE_TTL;
    /// Longest jump of the virtual clock the simulation's `clock_jump`
    /// fault makes: past every timer and resync period a controller is
    /// likely to set, short of the timers' own cap of a day.
    SIM_CLOCK_JUMP_MAX = Duration::from_secs(3600);

    // `leasehold build`: the tools that build a controller's component.

    /// Longest a version probe of a tool (`python3 -c`, `node --version`,
    /// `cargo --version`, `rustup target list`) may take: they answer at
    /// once, so this only catches a tool that hangs.
    TOOL_PROBE_DEADLINE = Duration::from_secs(60);
    /// Longest one install step of the pinned tools may take (a virtual
    /// environment, pip from PyPI, `npm ci`, `rustup target add`): a
    /// download of a few hundred MiB on a slow link, with room to spare.
    TOOL_INSTALL_DEADLINE = Duration::from_secs(20 * 60);
    /// Longest one build of a component may take (cargo, componentize-py,
    /// componentize-js): a first cargo build compiles the SDK's
    /// dependencies on a small machine in a few minutes.
    TOOL_BUILD_DEADLINE = Duration::from_secs(30 * 60);
    /// Longest a build waits for another one that is installing the same
    /// tool folder: above an install's own deadline, so a waiter outlasts
    /// a healthy install.
    TOOL_LOCK_WAIT = Duration::from_secs(25 * 60);
    /// How often a build looks at a running tool, or at a tool folder's
    /// lock it waits for.
    TOOL_POLL = Duration::from_millis(50);
    /// Longest a compile waits for another process sharing its compile
    /// cache to finish compiling (`runtime/compile_lock.rs`), then
    /// compiles without waiting: a debug build compiles an interpreter
    /// component in under a minute, a release build in seconds.
    COMPILE_LOCK_WAIT = Duration::from_secs(10 * 60);
    /// How often a compile waiting for that lock looks again.
    COMPILE_LOCK_POLL = Duration::from_millis(50);
}

const _: () = assert!(TOOL_LOCK_WAIT.as_secs() > TOOL_INSTALL_DEADLINE.as_secs());

// A dead holder is looked for far more often than the standby's own poll
// (which waits for expiry), or the scan would buy nothing.
const _: () = assert!(TAKEOVER_SCAN.as_nanos() * 3 / 2 < RENEW_INTERVAL.as_nanos());
// The same for the embedded backend's file-lock scan, which is also no
// slower than PostgreSQL's.
const _: () = assert!(EMBEDDED_TAKEOVER_SCAN.as_nanos() <= TAKEOVER_SCAN.as_nanos());
// Another process's commits reach this one's watchers no later than the
// PostgreSQL feed's fallback poll would.
const _: () = assert!(EMBEDDED_FEED_POLL.as_nanos() <= FEED_POLL.as_nanos());
// A write waiting for SQLite's lock gives up within the host's bound on a
// database statement, in steps far shorter than it.
const _: () = assert!(EMBEDDED_BUSY_TIMEOUT.as_nanos() <= DATABASE_STATEMENT.as_nanos());
const _: () = assert!(EMBEDDED_BUSY_STEP.as_nanos() * 100 <= EMBEDDED_BUSY_TIMEOUT.as_nanos());

/// `renew_deadline` must be at least this many times `renew_interval`, so
/// that at least two renewals are sent within each deadline and one lost
/// or slow round trip does not lose the lease.
pub const MIN_RENEWALS_PER_DEADLINE: u32 = 2;

/// The renew interval a `lease_ttl` implies when the config does not set
/// one: the default proportion ([`RENEW_INTERVAL`] of [`LEASE_TTL`], 2 s
/// of 10 s).
pub const fn derived_renew_interval(ttl: Duration) -> Duration {
    scale(ttl, RENEW_INTERVAL, LEASE_TTL)
}

/// The renew deadline a `lease_ttl` implies when the config does not set
/// one: the default proportion ([`RENEW_DEADLINE`] of [`LEASE_TTL`], 7 s
/// of 10 s).
pub const fn derived_renew_deadline(ttl: Duration) -> Duration {
    scale(ttl, RENEW_DEADLINE, LEASE_TTL)
}

/// `value * part / whole`, in nanoseconds (a ttl of at most an hour times
/// a default of seconds fits a u128 with room to spare).
const fn scale(value: Duration, part: Duration, whole: Duration) -> Duration {
    let nanos = value.as_nanos() * part.as_nanos() / whole.as_nanos();
    Duration::from_nanos(nanos as u64)
}

/// How long a renewal of a lease with `ttl` waits for the row's lock: a
/// tenth of the ttl, at most [`RENEW_LOCK_TIMEOUT`].
pub const fn renew_lock_timeout(ttl: Duration) -> Duration {
    let tenth = ttl.as_nanos() / 10;
    if tenth < RENEW_LOCK_TIMEOUT.as_nanos() {
        Duration::from_nanos(tenth as u64)
    } else {
        RENEW_LOCK_TIMEOUT
    }
}

/// Least time between `renew_interval` and `renew_deadline` for a lease
/// with `ttl`: the database bounds of the last renewal sent before the
/// deadline, its wait for the row's lock ([`renew_lock_timeout`]) and its
/// round trip ([`MIN_RENEW_SLACK`]).
pub const fn min_renew_slack(ttl: Duration) -> Duration {
    MIN_RENEW_SLACK.saturating_add(renew_lock_timeout(ttl))
}

/// Whether a lease timing keeps every floor and ratio above; `const` so the
/// defaults are checked when the crate compiles.
pub const fn timing_keeps_floors(ttl: Duration, interval: Duration, deadline: Duration) -> bool {
    let slack = min_renew_slack(ttl).as_nanos();
    let (ttl, interval, deadline) = (ttl.as_nanos(), interval.as_nanos(), deadline.as_nanos());
    ttl >= MIN_LEASE_TTL.as_nanos()
        && ttl <= MAX_LEASE_TTL.as_nanos()
        && interval >= MIN_RENEW_INTERVAL.as_nanos()
        && interval < deadline
        && deadline < ttl
        && deadline >= interval * MIN_RENEWALS_PER_DEADLINE as u128
        && deadline - interval >= slack
        && ttl - deadline >= MIN_EXPIRY_MARGIN.as_nanos()
}

// The defaults keep their own rules, and so does the timing any allowed
// ttl derives: a config that sets only `lease_ttl` is always valid.
const _: () = assert!(timing_keeps_floors(
    LEASE_TTL,
    RENEW_INTERVAL,
    RENEW_DEADLINE
));
const _: () = assert!(timing_keeps_floors(
    MIN_LEASE_TTL,
    derived_renew_interval(MIN_LEASE_TTL),
    derived_renew_deadline(MIN_LEASE_TTL)
));
const _: () = assert!(timing_keeps_floors(
    MAX_LEASE_TTL,
    derived_renew_interval(MAX_LEASE_TTL),
    derived_renew_deadline(MAX_LEASE_TTL)
));
const _: () = assert!(derived_renew_interval(LEASE_TTL).as_nanos() == RENEW_INTERVAL.as_nanos());
const _: () = assert!(derived_renew_deadline(LEASE_TTL).as_nanos() == RENEW_DEADLINE.as_nanos());
const _: () = assert!(
    MIN_RECONCILE_DEADLINE.as_nanos() <= RECONCILE_DEADLINE.as_nanos()
        && RECONCILE_DEADLINE.as_nanos() <= MAX_RECONCILE_DEADLINE.as_nanos()
);
const _: () = assert!(
    MIN_BACKOFF_MIN.as_nanos() <= BACKOFF_MIN.as_nanos()
        && BACKOFF_MIN.as_nanos() <= BACKOFF_MAX.as_nanos()
        && MIN_BACKOFF_MAX.as_nanos() <= BACKOFF_MAX.as_nanos()
        && BACKOFF_MAX.as_nanos() <= MAX_BACKOFF.as_nanos()
);
// A floor of the ceiling must not exceed the largest allowed floor, or no
// backoff_min/backoff_max pair could be written at all.
const _: () = assert!(MIN_BACKOFF_MAX.as_nanos() <= MAX_BACKOFF.as_nanos());
const _: () = assert!(MIN_RESYNC_PERIOD.as_nanos() < MAX_RESYNC_PERIOD.as_nanos());

/// How long the server takes, at the least, to drop the liveness (claim)
/// session of a host that vanished without closing its socket, counted
/// from the last packet it received from that host: the session's
/// server-side keepalive idle time, then [`crate::limits::HOLDER_CLAIM_KEEPALIVE_COUNT`]
/// unanswered probes [`HOLDER_CLAIM_KEEPALIVE_INTERVAL`] apart (its
/// `tcp_user_timeout` is the same total). 8 s.
pub const fn claim_session_drop() -> Duration {
    Duration::from_nanos(
        (HOLDER_CLAIM_KEEPALIVE_IDLE.as_nanos()
            + HOLDER_CLAIM_KEEPALIVE_INTERVAL.as_nanos()
                * (crate::limits::HOLDER_CLAIM_KEEPALIVE_COUNT as u128)) as u64,
    )
}

// The holder claim of a host that vanished is freed before its leases
// expire (see HOLDER_CLAIM_KEEPALIVE_IDLE), so a replacement with the same
// name is not held up longer than the leases are.
const _: () = assert!(claim_session_drop().as_nanos() < LEASE_TTL.as_nanos());
// Crash detection `session` (L8): a host stops calling out and aborts its
// `session` tenures once its liveness session has not answered for
// LIVENESS_BUDGET, a margin before the server can drop that session and a
// standby take the leases over (the budget counts from a statement's send,
// which is no later than the server's last sight of the host).
const _: () = assert!(
    LIVENESS_BUDGET.as_nanos() + LIVENESS_MARGIN.as_nanos() <= claim_session_drop().as_nanos()
);
// A stalled liveness check ends a `session` tenure no sooner than a
// stalled renewal would end it (the default renew deadline).
const _: () = assert!(LIVENESS_BUDGET.as_nanos() >= RENEW_DEADLINE.as_nanos());
// Several checks fit in the budget: one slow answer costs nothing.
const _: () = assert!(LIVENESS_CHECK.as_nanos() * 4 <= LIVENESS_BUDGET.as_nanos());
// Rechecks come sooner while failing, never later.
const _: () = assert!(IDENTITY_RECHECK_FAILING.as_nanos() <= IDENTITY_RECHECK.as_nanos());
const _: () = assert!(HTTP_ACCEPT_BACKOFF_MIN.as_nanos() <= HTTP_ACCEPT_BACKOFF_MAX.as_nanos());
// Above the 60 s idle timeout common in load balancers.
const _: () = assert!(HTTP_KEEP_ALIVE_IDLE.as_secs() > 60);
// A guest's requeue ceiling is at least its longest resync period.
const _: () = assert!(MAX_RESYNC_PERIOD.as_nanos() <= MAX_REQUEUE.as_nanos());

/// Longest the readiness check waits for the database to answer. Short:
/// a load balancer polling `/readyz` wants an answer, not a hung request,
/// and a database that needs longer than this is not healthy.
pub const READINESS_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long one readiness probe result is reused, so frequent polling (or
/// many pollers) costs at most one database round trip per interval.
pub const READINESS_PROBE_MAX_AGE: Duration = Duration::from_secs(1);

// An outbound request that never answers fails before the reconcile's own
// deadline, so the guest sees a typed timeout rather than being torn down.
const _: () = assert!(
    HTTP_OUT_CONNECT.as_nanos() + HTTP_OUT_FIRST_BYTE.as_nanos() < RECONCILE_DEADLINE.as_nanos()
);
// A request ends, whatever its pace, before the reconcile that sent it is
// torn down.
const _: () = assert!(HTTP_OUT_REQUEST_TOTAL.as_nanos() < RECONCILE_DEADLINE.as_nanos());
const _: () = assert!(
    HTTP_OUT_CONNECT.as_nanos() + HTTP_OUT_FIRST_BYTE.as_nanos()
        <= HTTP_OUT_REQUEST_TOTAL.as_nanos()
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_defaults_keep_the_holder_fencing_itself_first() {
        assert!(RENEW_INTERVAL < RENEW_DEADLINE);
        assert!(RENEW_DEADLINE < LEASE_TTL);
        assert!(ALL.iter().all(|(_, d)| !d.is_zero()));
    }

    #[test]
    fn a_ttl_derives_the_default_proportions() {
        assert_eq!(
            derived_renew_interval(Duration::from_secs(5)),
            Duration::from_secs(1)
        );
        assert_eq!(
            derived_renew_deadline(Duration::from_secs(5)),
            Duration::from_millis(3500)
        );
        assert_eq!(
            derived_renew_deadline(Duration::from_secs(1)),
            Duration::from_millis(700)
        );
    }

    #[test]
    fn each_floor_and_ratio_is_checked() {
        let ms = Duration::from_millis;
        assert!(timing_keeps_floors(ms(1000), ms(150), ms(700)));
        // ttl below its floor.
        assert!(!timing_keeps_floors(ms(900), ms(150), ms(600)));
        // interval below its floor.
        assert!(!timing_keeps_floors(ms(1000), ms(90), ms(700)));
        // Fewer than two renewals per deadline.
        assert!(!timing_keeps_floors(ms(2000), ms(600), ms(1100)));
        // No slack for the last renewal's round trip.
        assert!(!timing_keeps_floors(ms(1000), ms(100), ms(250)));
        // No margin between the holder's deadline and expiry.
        assert!(!timing_keeps_floors(ms(1000), ms(150), ms(800)));
    }
}
