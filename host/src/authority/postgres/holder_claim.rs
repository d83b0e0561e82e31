//! The PostgreSQL holder claim: one dedicated, never-pooled session per
//! host holds a session-level advisory lock on `(cluster, holder)` for the
//! life of the process, so a second live host configured with the same
//! holder name finds it taken and leads nothing.
//!
//! Why an advisory lock on its own session: the server releases it the
//! moment the session ends, however it ends — a clean exit, SIGKILL (the
//! kernel closes the socket), `pg_terminate_backend` — so a restarted host
//! with the same name claims it again at once, with no expiry to wait out.
//! A host that vanished without closing its socket (a crashed machine, a
//! partition) is noticed by the server's TCP keepalives, which the session
//! tightens ([`HOLDER_CLAIM_KEEPALIVE_IDLE`] and friends) so the name is
//! free again in about the time its leases take to expire. The lock is
//! never taken on a pooled session (that would leak it to whoever borrows
//! the session next) and holds no lease: leases stay rows with epochs
//! (point 3 of `docs/design.md`); the claim only gates who may ask for
//! them.
//!
//! The key lives in the single-bigint advisory key space: a stable 64-bit
//! FNV-1a hash of a fixed domain tag, the cluster and the holder (names
//! cannot contain NUL, so the encoding is unambiguous), never equal to the
//! migration lock's key. Stable across builds and platforms on purpose:
//! every host version must compute the same key for the same name.
//!
//! The claim session is also the host's **liveness session** (crash
//! detection `session`): each grant records the pid of the session it was
//! made under, and a standby's grant may take a lease over once no session
//! with that pid holds the claim key (see `leasehold_leases.holder_pid`,
//! migration 6). Because the lock's absence is read from `pg_locks`, which
//! every role may read, this needs no privilege beyond the tables
//! ([`check_liveness`] tells `leasehold check` when `pg_locks` cannot be
//! read). Once claimed, the session registers the host in
//! `leasehold_hosts` (its pid and `backend_start`, the process start,
//! version and controllers; again whenever the controllers change), best
//! effort: the registry is for display, never for a grant's decision.
//!
//! Must never: take the lock on a pooled session; keep running as the
//! holder after its claim session ended without claiming again; publish a
//! session as claimed before the server granted its lock.

#[cfg(test)]
use std::time::Duration;
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_postgres::Client;
#[cfg(test)]
use tokio_postgres::NoTls;

use crate::authority::claim::{
    ClaimSession, ClaimState, ClaimView, HolderClaim, HostInfo, Liveness,
};
use crate::authority::{AuthorityError, DatabaseIdentity};
use crate::limits::HOLDER_CLAIM_KEEPALIVE_COUNT;
use crate::timeouts::{
    DATABASE_STATEMENT, HOLDER_CLAIM_KEEPALIVE_IDLE, HOLDER_CLAIM_KEEPALIVE_INTERVAL,
    HOLDER_CLAIM_RETRY, HOST_ROW_RETENTION, IDENTITY_RECHECK_FAILING, LIVENESS_BUDGET,
    LIVENESS_CHECK, LIVENESS_MARGIN, claim_session_drop,
};

/// The key `db::Database::migrate` serializes migrators on
/// (`pg_advisory_xact_lock(7263414711)`); no holder claim may use it.
const MIGRATION_LOCK_KEY: i64 = 7_263_414_711;

/// Separates holder claims from any other use of the same hash.
const CLAIM_DOMAIN: &[u8] = b"leasehold holder claim\0";

/// Prefix of the claim session's `application_name`, followed by this
/// process's claim instance: lets a host recognise (and end) its own
/// earlier claim session that the server has not yet noticed is gone.
pub const CLAIM_APPLICATION: &str = "leasehold-claim";

/// The advisory lock key of `(cluster, holder)`.
pub fn claim_key(cluster: &str, holder: &str) -> i64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0100_0000_01b3;
    let bytes = CLAIM_DOMAIN
        .iter()
        .chain(cluster.as_bytes())
        .chain(b"\0")
        .chain(holder.as_bytes());
    let hash = bytes.fold(FNV_OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(FNV_PRIME)
    });
    // Keep the bits; only the one key the project already uses is moved.
    let key = hash as i64;
    if key == MIGRATION_LOCK_KEY {
        key ^ 1
    } else {
        key
    }
}

/// Who holds a claim key, as the server shows it.
const WHO_HOLDS: &str = "
    SELECT a.pid, coalesce(a.application_name, ''),
           coalesce(host(a.client_addr), 'a local socket'), coalesce(a.client_port, 0),
           a.backend_start
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND l.classid = (($1::bigint >> 32) & 4294967295)::oid
       AND l.objid = ($1::bigint & 4294967295)::oid
     LIMIT 1";

/// Claim the key on this session, and say which session holds it.
const TRY_CLAIM: &str = "
    SELECT pg_try_advisory_lock($1), pg_backend_pid(),
           (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())";

/// The host's registration, written on its claim session once claimed.
const REGISTER: &str = "
    INSERT INTO leasehold_hosts AS h (cluster, holder, claim_key, session_pid, session_started_at,
                                      process_started_at, version, controllers, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, clock_timestamp())
    ON CONFLICT (cluster, holder) DO UPDATE
       SET claim_key = EXCLUDED.claim_key, session_pid = EXCLUDED.session_pid,
           session_started_at = EXCLUDED.session_started_at,
           process_started_at = EXCLUDED.process_started_at, version = EXCLUDED.version,
           controllers = EXCLUDED.controllers, updated_at = EXCLUDED.updated_at";

/// Forget hosts of the cluster that are gone for good: no session holds
/// their claim key, no lease is held in their name, and their row was last
/// written more than $3 seconds ago ([`HOST_ROW_RETENTION`]). Run by each
/// host after it registers, so the registry stays as large as the set of
/// hosts seen within the retention. A host that comes back simply writes
/// its row again.
const PRUNE: &str = "
    DELETE FROM leasehold_hosts h
     WHERE h.cluster = $1 AND h.holder <> $2
       AND h.updated_at < clock_timestamp() - make_interval(secs => $3::float8)
       AND NOT EXISTS (
           SELECT 1 FROM pg_locks k
            WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
              AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND k.classid = ((h.claim_key >> 32) & 4294967295)::oid
              AND k.objid = (h.claim_key & 4294967295)::oid)
       AND NOT EXISTS (
           SELECT 1 FROM leasehold_leases x
            WHERE x.cluster = h.cluster AND x.holder = h.holder
              AND NOT x.released AND x.expires_at > clock_timestamp())";

/// The identity the lease authority verified at `[database] url`
/// (verifying it first if it has not yet), or why it cannot tell now.
pub(super) type VerifiedIdentity = std::sync::Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = Result<DatabaseIdentity, String>> + Send>>
        + Send
        + Sync,
>;

/// The database a claim session must reach: the one this host verified at
/// `[database] url`.
#[derive(Clone)]
pub(super) struct Verified {
    /// Where it was verified (redacted).
    pub endpoint: String,
    /// The identity verified there.
    pub identity: VerifiedIdentity,
}

/// Start claiming `holder` of `cluster` on sessions opened to `target`
/// (never a pooler's: the lock and the pid must be the server's own
/// session's), at `endpoint` (redacted, for messages), registering `host`
/// with each claimed session; each session is first checked to reach the
/// `verified` database. The claim is kept (and re-made after a reconnect)
/// until the returned handle is dropped. Also returns the host's
/// [`Liveness`], which each claimed session keeps up to date.
pub(super) fn start(
    target: &crate::db_tls::Target,
    endpoint: &str,
    cluster: &str,
    holder: &str,
    host: HostInfo,
    verified: Verified,
) -> (HolderClaim, Liveness) {
    let instance = uuid::Uuid::new_v4().simple().to_string();
    let application = format!("{CLAIM_APPLICATION}-{instance}");
    let mut target = target.clone();
    target.config.application_name(&application);
    let (tx, rx) = watch::channel(ClaimView::pending());
    let liveness = Liveness::new();
    let claimer = Claimer {
        target,
        application,
        endpoint: endpoint.to_string(),
        cluster: cluster.to_string(),
        holder: holder.to_string(),
        key: claim_key(cluster, holder),
        state: tx,
        host,
        generation: std::sync::atomic::AtomicU64::new(0),
        verified,
        liveness: liveness.clone(),
    };
    (HolderClaim::new(rx, tokio::spawn(claimer.run())), liveness)
}

struct Claimer {
    target: crate::db_tls::Target,
    application: String,
    /// Where the claim sessions connect (redacted).
    endpoint: String,
    cluster: String,
    holder: String,
    key: i64,
    state: watch::Sender<ClaimView>,
    host: HostInfo,
    /// Sessions claimed so far (see [`ClaimSession::generation`]).
    generation: std::sync::atomic::AtomicU64,
    verified: Verified,
    liveness: Liveness,
}

/// Why a claim session stopped serving.
struct Lost(String);

/// How a claim session ended.
enum Ended {
    /// It failed or stopped answering; claimed again on a new session.
    Lost(Lost),
    /// It reaches another database than the verified one: refused, and
    /// looked at again later.
    WrongDatabase(String),
}

impl From<Lost> for Ended {
    fn from(lost: Lost) -> Self {
        Ended::Lost(lost)
    }
}

impl Claimer {
    async fn run(mut self) {
        loop {
            let ended = match self.connect().await {
                Ok((client, driver)) => {
                    let ended = self.claim_and_keep(&client, driver).await;
                    // Dropping the client closes the session (and with it
                    // the lock, if the server still thinks it is held).
                    drop(client);
                    ended
                }
                Err(lost) => Ended::Lost(lost),
            };
            // Whatever kept this host alive to the server is gone: its
            // `session` tenures refuse outbound requests from now on.
            self.liveness.end(self.liveness.generation());
            let lost = match ended {
                Ended::Lost(lost) => lost,
                Ended::WrongDatabase(reason) => {
                    if !matches!(self.state.borrow().state, ClaimState::WrongDatabase { .. }) {
                        tracing::error!(
                            cluster = self.cluster,
                            holder = self.holder,
                            "REFUSING TO LEAD: {reason}"
                        );
                    }
                    self.publish(ClaimState::WrongDatabase { reason });
                    tokio::time::sleep(IDENTITY_RECHECK_FAILING).await;
                    continue;
                }
            };
            if self.state.borrow().state.claimed() {
                tracing::warn!(
                    cluster = self.cluster,
                    holder = self.holder,
                    endpoint = self.endpoint,
                    reason = lost.0,
                    "the session holding this host's holder name ended; no new lease is \
                     acquired until the name is claimed again"
                );
            }
            self.publish(ClaimState::Unreachable {
                reason: format!(
                    "cannot claim holder name {} of cluster {} at {}: {}",
                    self.holder, self.cluster, self.endpoint, lost.0
                ),
            });
            tokio::time::sleep(HOLDER_CLAIM_RETRY).await;
        }
    }

    /// Publish `state` (no session: not claimed).
    fn publish(&self, state: ClaimState) {
        self.publish_view(ClaimView {
            state,
            session: None,
        });
    }

    fn publish_view(&self, view: ClaimView) {
        self.state.send_if_modified(|current| {
            if *current == view {
                false
            } else {
                *current = view;
                true
            }
        });
    }

    /// A dedicated session whose server side drops it (and the lock) soon
    /// after this host vanishes without closing its socket, and that no
    /// server-side timeout the role or database may set ends while it is
    /// idle between checks.
    async fn connect(&self) -> Result<(Client, tokio::task::JoinHandle<()>), Lost> {
        let (client, connection) = self
            .target
            .connect()
            .await
            .map_err(|e| Lost(describe(&e)))?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        match bounded(client.batch_execute(&session_settings())).await {
            Ok(()) => Ok((client, driver)),
            Err(lost) => {
                driver.abort();
                Err(lost)
            }
        }
    }

    /// Check that `client` reaches the verified database, then claim the
    /// name on it, retrying while another host holds it; once claimed,
    /// keep checking the session until it fails.
    async fn claim_and_keep(
        &mut self,
        client: &Client,
        mut driver: tokio::task::JoinHandle<()>,
    ) -> Ended {
        let ended = match self.reaches_the_verified_database(client).await {
            Err(lost) => Ended::Lost(lost),
            Ok(Err(reason)) => Ended::WrongDatabase(reason),
            Ok(Ok(())) => self.claim(client, &mut driver).await.into(),
        };
        driver.abort();
        ended
    }

    /// Whether the claim session reaches the database this host verified
    /// (`Ok(Err)` names what differs, and both endpoints); `Err` when the
    /// session did not answer.
    async fn reaches_the_verified_database(
        &self,
        client: &Client,
    ) -> Result<Result<(), String>, Lost> {
        let verified = (self.verified.identity)().await.map_err(|reason| {
            Lost(format!(
                "the database identity at {} is not verified: {reason}",
                self.verified.endpoint
            ))
        })?;
        let found =
            match tokio::time::timeout(DATABASE_STATEMENT, client.query_opt(super::IDENTITY, &[]))
                .await
            {
                Err(_) => {
                    return Err(Lost(format!(
                        "reading its database identity: no answer within {}",
                        humantime::format_duration(DATABASE_STATEMENT)
                    )));
                }
                Ok(Err(e)) if e.as_db_error().is_none() => return Err(Lost(describe(&e))),
                Ok(Err(e)) => Err(describe(&e)),
                Ok(Ok(row)) => {
                    super::identity_of(row.as_ref(), &self.endpoint).map_err(|e| match e {
                        AuthorityError::WrongDatabase { problems, .. } => problems,
                        AuthorityError::Schema { reason, .. } => reason,
                        other => other.to_string(),
                    })
                }
            };
        Ok(session_refusal(&verified, found)
            .map(|problems| self.wrong_database(&verified, &problems))
            .map_or(Ok(()), Err))
    }

    /// The refusal of a claim session that reaches another database.
    fn wrong_database(&self, verified: &DatabaseIdentity, problems: &str) -> String {
        wrong_database(&self.endpoint, &self.verified.endpoint, verified, problems)
    }

    /// Claim the name on `client`, retrying while another host holds it;
    /// once claimed, keep checking the session until it fails.
    async fn claim(&mut self, client: &Client, driver: &mut tokio::task::JoinHandle<()>) -> Lost {
        loop {
            let sent = Instant::now();
            let claimed = bounded(async {
                let row = client.query_one(TRY_CLAIM, &[&self.key]).await?;
                Ok::<_, tokio_postgres::Error>((row.get::<_, bool>(0), row.get(1), row.get(2)))
            })
            .await;
            match claimed {
                Err(lost) => break lost,
                Ok((true, pid, backend_start)) => {
                    let generation = self
                        .generation
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                        + 1;
                    let session = ClaimSession {
                        generation,
                        pid,
                        backend_start,
                        key: self.key,
                    };
                    // Alive from the claim's send: the server saw this host
                    // no earlier than that.
                    self.liveness.begin(generation, sent);
                    tracing::info!(
                        cluster = self.cluster,
                        holder = self.holder,
                        session_pid = pid,
                        "holder name claimed: no other live host runs as this holder; this \
                         session is the host's liveness session"
                    );
                    self.publish_view(ClaimView {
                        state: ClaimState::Claimed,
                        session: Some(session.clone()),
                    });
                    break self.keep(client, driver, &session).await;
                }
                Ok((false, _, _)) => {}
            }
            match self.who_holds(client).await {
                Err(lost) => break lost,
                // Our own earlier claim session, not yet noticed gone by the
                // server (this host reconnected after a partition): end it
                // and claim again at once.
                Ok(Some(other)) if other.application == self.application => {
                    let _ =
                        bounded(client.execute("SELECT pg_terminate_backend($1)", &[&other.pid]))
                            .await;
                    continue;
                }
                Ok(other) => {
                    let reason = self.taken_reason(other.as_ref());
                    if !matches!(self.state.borrow().state, ClaimState::Taken { .. }) {
                        tracing::error!(
                            cluster = self.cluster,
                            holder = self.holder,
                            "REFUSING TO LEAD: {reason}"
                        );
                    }
                    self.publish(ClaimState::Taken { reason });
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(HOLDER_CLAIM_RETRY) => {}
                _ = &mut *driver => break Lost("the claim session closed".into()),
            }
        }
    }

    /// Run one statement on the claimed session `generation`, waiting for
    /// its answer at most until the host's liveness lapses (the last
    /// answered statement's send plus [`LIVENESS_BUDGET`]); an answer (an
    /// error the server sent included) keeps the host alive from this
    /// statement's send. No answer in time, or a broken connection, loses
    /// the session.
    async fn alive<T>(
        &self,
        generation: u64,
        what: &str,
        call: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<Result<T, tokio_postgres::Error>, Lost> {
        let sent = Instant::now();
        let Some(until) = self.liveness.until() else {
            return Err(Lost(format!("{what}: the liveness session already lapsed")));
        };
        match tokio::time::timeout_at(until.into(), call).await {
            Err(_) => Err(Lost(format!(
                "{what}: no answer {} after the last statement this session answered was sent \
                 (the liveness budget): the server may drop this session, and a standby take \
                 this host's leases over, {} later",
                humantime::format_duration(LIVENESS_BUDGET),
                humantime::format_duration(LIVENESS_MARGIN)
            ))),
            Ok(Err(e)) if e.as_db_error().is_none() => {
                Err(Lost(format!("{what}: {}", describe(&e))))
            }
            Ok(answered) => {
                self.liveness.answered(generation, sent);
                Ok(answered)
            }
        }
    }

    /// Hold the claim: the session must keep answering, each statement
    /// within the liveness budget. Registers the host now and again
    /// whenever its controllers change.
    async fn keep(
        &mut self,
        client: &Client,
        driver: &mut tokio::task::JoinHandle<()>,
        session: &ClaimSession,
    ) -> Lost {
        let mut register = true;
        let mut controllers_open = true;
        loop {
            if register {
                register = false;
                if let Err(lost) = self.register(client, session).await {
                    return lost;
                }
            }
            tokio::select! {
                _ = &mut *driver => return Lost("the claim session closed".into()),
                changed = self.host.controllers.changed(), if controllers_open => {
                    match changed {
                        Ok(()) => register = true,
                        // Nobody reports controllers any more (shutdown).
                        Err(_) => controllers_open = false,
                    }
                }
                _ = tokio::time::sleep(LIVENESS_CHECK) => {
                    let checked = self
                        .alive(session.generation, "liveness check", client.simple_query(""))
                        .await;
                    match checked {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Lost(format!("liveness check: {}", describe(&e))),
                        Err(lost) => return lost,
                    }
                }
            }
        }
    }

    /// Write this host's row in `leasehold_hosts`, inside the liveness
    /// budget. Best effort: a refused statement (a missing privilege, an
    /// older schema) is logged and the claim goes on; a session that does
    /// not answer within the budget is lost.
    async fn register(&mut self, client: &Client, session: &ClaimSession) -> Result<(), Lost> {
        let controllers = self.host.controllers.borrow_and_update().clone();
        let written = self
            .alive(
                session.generation,
                "registering the host",
                client.execute(
                    REGISTER,
                    &[
                        &self.cluster,
                        &self.holder,
                        &self.key,
                        &session.pid,
                        &session.backend_start,
                        &self.host.started_at,
                        &self.host.version,
                        &controllers,
                    ],
                ),
            )
            .await?;
        match written {
            Ok(_) => self.prune(client, session).await,
            Err(e) => {
                tracing::warn!(
                    cluster = self.cluster,
                    holder = self.holder,
                    error = describe(&e),
                    "could not register this host in leasehold_hosts; leases show no session \
                     start for it (crash detection does not depend on it)"
                );
                Ok(())
            }
        }
    }

    /// Delete the rows of hosts gone for good ([`PRUNE`]), inside the
    /// liveness budget. Best effort: a refused statement is logged at debug
    /// level and retried at the next registration; a session that does not
    /// answer within the budget is lost.
    async fn prune(&self, client: &Client, session: &ClaimSession) -> Result<(), Lost> {
        let retention = HOST_ROW_RETENTION.as_secs_f64();
        let pruned = self
            .alive(
                session.generation,
                "pruning the host registry",
                client.execute(PRUNE, &[&self.cluster, &self.holder, &retention]),
            )
            .await?;
        match pruned {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                cluster = self.cluster,
                pruned = n,
                "forgot hosts gone for more than {}",
                humantime::format_duration(HOST_ROW_RETENTION)
            ),
            Err(e) => tracing::debug!(
                cluster = self.cluster,
                error = describe(&e),
                "could not prune leasehold_hosts"
            ),
        }
        Ok(())
    }

    async fn who_holds(&self, client: &Client) -> Result<Option<Session>, Lost> {
        let row = bounded(client.query_opt(WHO_HOLDS, &[&self.key])).await?;
        Ok(row.map(|row| Session {
            pid: row.get(0),
            application: row.get(1),
            address: row.get(2),
            port: row.get(3),
            since: row.get(4),
        }))
    }

    fn taken_reason(&self, other: Option<&Session>) -> String {
        let who = match other {
            Some(s) => format!(
                " (its claim session: server pid {}, from {} port {}, connected since {})",
                s.pid,
                s.address,
                s.port,
                s.since.map_or_else(
                    || "an unknown time".to_string(),
                    |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                )
            ),
            None => String::new(),
        };
        format!(
            "a live host already runs as holder {} of cluster {}{who}; two hosts must never \
             run as one holder. Give each replica its own `holder` in its config. This host \
             acquires no lease until that host stops",
            self.holder, self.cluster
        )
    }
}

/// The server session holding a claim.
struct Session {
    pid: i32,
    application: String,
    address: String,
    port: i32,
    since: Option<DateTime<Utc>>,
}

/// Bound a claim-session call by [`DATABASE_STATEMENT`].
async fn bounded<T>(
    call: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, Lost> {
    match tokio::time::timeout(DATABASE_STATEMENT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Lost(describe(&e))),
        Err(_) => Err(Lost(format!(
            "no answer within {}",
            humantime::format_duration(DATABASE_STATEMENT)
        ))),
    }
}

/// The driver's message with its SQLSTATE or cause (never a URL).
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

/// What `leasehold check` reports about crash detection on `db`: `Ok` with
/// a note when this role can read `pg_locks` (every `session` grant judges
/// a holder's liveness there; readable by every role unless an
/// administrator revoked it) and write its row in `leasehold_hosts`;
/// `Err` naming what is missing and what to do.
pub async fn check_liveness(db: &crate::db::Database) -> Result<String, String> {
    let endpoint = db.endpoint();
    let checked = tokio::time::timeout(DATABASE_STATEMENT, async {
        let client = db.pool().get().await.map_err(|e| e.to_string())?;
        let locks = client
            .query_typed_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'",
                &[],
            )
            .await;
        if let Err(e) = locks {
            return Err(format!(
                "crash detection: this role cannot read pg_locks at {endpoint} ({}); \
                 crash_detection = \"session\" judges a holder's liveness there. Let it \
                 read pg_locks again (GRANT EXECUTE ON FUNCTION pg_catalog.pg_lock_status() \
                 TO the role, and GRANT SELECT ON pg_catalog.pg_locks), or set \
                 crash_detection = \"ttl\"",
                describe(&e)
            ));
        }
        let may_register = client
            .query_typed_one(
                "SELECT has_table_privilege('leasehold_hosts', 'INSERT')
                        AND has_table_privilege('leasehold_hosts', 'UPDATE')",
                &[],
            )
            .await
            .map_err(|e| {
                format!(
                    "crash detection: cannot check the host registry at {endpoint} ({}); \
                     run `leasehold migrate`",
                    describe(&e)
                )
            })?;
        if !may_register.get::<_, bool>(0) {
            return Err(format!(
                "crash detection: this role may not write leasehold_hosts at {endpoint}; \
                 GRANT INSERT, UPDATE ON leasehold_hosts TO the role (hosts register their \
                 liveness session there for display)"
            ));
        }
        Ok(format!(
            "crash detection: pg_locks is readable and leasehold_hosts writable at {endpoint}: \
             a standby can take over a lease whose holder's liveness session ended without \
             waiting for its ttl (controllers with crash_detection = \"session\")"
        ))
    })
    .await;
    checked.unwrap_or_else(|_| {
        Err(format!(
            "crash detection: no answer from {endpoint} within {}",
            humantime::format_duration(DATABASE_STATEMENT)
        ))
    })
}

/// The settings of a claim session (one message, before anything else):
/// server-side TCP keepalives that drop it within [`claim_session_drop`]
/// of the last packet from a host that vanished without closing its
/// socket, and every server-side timeout that could end (or cancel the
/// statements of) a session idle between its checks switched off for this
/// session, whatever the role or database sets: `idle_session_timeout`
/// (PostgreSQL 14), `transaction_timeout` (17) where the server has them,
/// `idle_in_transaction_session_timeout` and `statement_timeout`. The
/// claim bounds its own statements (by the liveness budget).
fn session_settings() -> String {
    format!(
        "SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; \
         SET tcp_keepalives_count = {}; SET tcp_user_timeout = {}; \
         SET idle_in_transaction_session_timeout = 0; SET statement_timeout = 0; \
         SELECT set_config(name, '0', false) FROM pg_settings \
          WHERE name IN ('idle_session_timeout', 'transaction_timeout')",
        HOLDER_CLAIM_KEEPALIVE_IDLE.as_secs().max(1),
        HOLDER_CLAIM_KEEPALIVE_INTERVAL.as_secs().max(1),
        HOLDER_CLAIM_KEEPALIVE_COUNT,
        claim_session_drop().as_millis()
    )
}

/// What makes a claim session's database unfit, given the identity this
/// host verified at `url` and what the session found (`Err`: why it could
/// not read an identity, such as an unmigrated database): `None` when it
/// is the same database, on a primary, on a timeline this process has not
/// seen surpassed.
fn session_refusal(
    verified: &DatabaseIdentity,
    found: Result<DatabaseIdentity, String>,
) -> Option<String> {
    let found = match found {
        Ok(found) => found,
        Err(problem) => return Some(problem),
    };
    let mut problems = verified.differences(&found);
    if found.in_recovery {
        problems.push("the server is in recovery (a standby)".to_string());
    }
    if let Some(timeline) = found.timeline
        && let Some(former) =
            crate::authority::sight_timeline(found.system_identifier, found.database_oid, timeline)
    {
        problems.push(former);
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// The refusal of a session at `session` (redacted) that does not reach
/// the database verified at `url` (redacted), naming both.
pub fn wrong_database(
    session: &str,
    url: &str,
    verified: &DatabaseIdentity,
    problems: &str,
) -> String {
    format!(
        "the liveness session at {session} (database.session_url) does not reach the database \
         verified at {url} (database {:?}, id {}, system identifier {}): {problems}. A holder \
         claim and liveness session there prove nothing where leases are granted, so this host \
         leads nothing: point session_url at the same database as url, on the primary",
        verified.database_name, verified.database_id, verified.system_identifier
    )
}

/// What `leasehold check` says of the dedicated sessions at `session_url`
/// (`target`, redacted `endpoint`): `Ok` with a note when a session there
/// reaches the database verified at `url` (`verified`, at `url_endpoint`),
/// `Err` naming both endpoints and what differs.
pub async fn check_session(
    target: &crate::db_tls::Target,
    endpoint: &str,
    url_endpoint: &str,
    verified: &DatabaseIdentity,
) -> Result<String, String> {
    let checked = tokio::time::timeout(DATABASE_STATEMENT, async {
        let (client, connection) = target.connect().await?;
        let driver = tokio::spawn(connection);
        let row = client.query_opt(super::IDENTITY, &[]).await;
        drop(client);
        driver.abort();
        row
    })
    .await;
    let found = match checked {
        Err(_) => {
            return Err(format!(
                "database.session_url {endpoint}: no answer within {}",
                humantime::format_duration(DATABASE_STATEMENT)
            ));
        }
        Ok(Err(e)) if e.as_db_error().is_none() => {
            return Err(format!("database.session_url {endpoint}: {}", describe(&e)));
        }
        Ok(Err(e)) => Err(describe(&e)),
        Ok(Ok(row)) => super::identity_of(row.as_ref(), endpoint).map_err(|e| match e {
            AuthorityError::WrongDatabase { problems, .. } => problems,
            AuthorityError::Schema { reason, .. } => reason,
            other => other.to_string(),
        }),
    };
    match session_refusal(verified, found) {
        Some(problems) => Err(format!(
            "REFUSING TO LEAD: {}",
            wrong_database(endpoint, url_endpoint, verified, &problems)
        )),
        None => Ok(format!(
            "database.session_url {endpoint}: the liveness session and listeners reach the \
             database verified at {url_endpoint}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_keys_are_stable_and_tell_names_apart() {
        assert_ne!(
            claim_key("east", "replica-a"),
            claim_key("east", "replica-b")
        );
        assert_ne!(
            claim_key("east", "replica-a"),
            claim_key("west", "replica-a")
        );
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(claim_key("ab", "c"), claim_key("a", "bc"));
        // Pinned: every host version must compute the same key, or two
        // versions of the host could run as one holder at once.
        assert_eq!(claim_key("east", "replica-a"), FNV_EAST_REPLICA_A);
    }

    /// FNV-1a 64 of "leasehold holder claim\0east\0replica-a", computed
    /// independently.
    const FNV_EAST_REPLICA_A: i64 = 2_580_651_173_687_056_789;

    #[test]
    fn the_migration_lock_key_is_the_one_db_rs_takes() {
        let source = include_str!("../../db.rs");
        assert!(
            source.contains(&format!("pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")),
            "db.rs no longer takes advisory lock {MIGRATION_LOCK_KEY}: update MIGRATION_LOCK_KEY"
        );
    }

    async fn reaches(
        claim: &HolderClaim,
        what: &str,
        want: impl Fn(&ClaimState) -> bool,
    ) -> ClaimState {
        reaches_view(claim, what, |v| want(&v.state)).await.state
    }

    async fn reaches_view(
        claim: &HolderClaim,
        what: &str,
        want: impl Fn(&ClaimView) -> bool,
    ) -> ClaimView {
        let mut view = claim.view();
        let reached = tokio::time::timeout(Duration::from_secs(10), async {
            view.wait_for(|v| want(v)).await.map(|v| v.clone())
        })
        .await;
        match reached {
            Ok(reached) => reached.expect("claim task alive"),
            Err(_) => panic!(
                "the claim never became {what}: {:?}",
                *claim.view().borrow()
            ),
        }
    }

    /// Host information for a test claim, with the sender of its
    /// controller list.
    fn host(controllers: &[&str]) -> (HostInfo, watch::Sender<Vec<String>>) {
        let (tx, rx) = watch::channel(controllers.iter().map(|c| c.to_string()).collect());
        (HostInfo::this_process(rx), tx)
    }

    /// The identity of `db` (migrated here if it is not yet), as the
    /// claims of a host verified at it expect it.
    async fn verified(db: &crate::db::Database) -> Verified {
        db.migrate().await.unwrap();
        let identity = super::super::PostgresAuthority::new(
            db.clone(),
            crate::authority::ExpectedIdentity::default(),
        )
        .verify()
        .await
        .unwrap();
        Verified {
            endpoint: db.endpoint().to_string(),
            identity: std::sync::Arc::new(move || {
                let identity = identity.clone();
                Box::pin(async move { Ok(identity) })
            }),
        }
    }

    /// A claim of `holder` of `cluster` by a host that verified `db`,
    /// registering `info`.
    async fn start_with(
        db: &crate::db::Database,
        cluster: &str,
        holder: &str,
        info: HostInfo,
    ) -> (HolderClaim, Liveness) {
        start(
            &db.session_target(),
            db.endpoint(),
            cluster,
            holder,
            info,
            verified(db).await,
        )
    }

    async fn start_test(db: &crate::db::Database, cluster: &str, holder: &str) -> HolderClaim {
        start_with(db, cluster, holder, host(&[]).0).await.0
    }

    #[tokio::test]
    async fn a_live_holder_name_is_refused_until_its_host_lets_go() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        let claim = |holder: &'static str| start_test(&db, "east", holder);
        let first = claim("replica-a").await;
        reaches(&first, "claimed", ClaimState::claimed).await;

        let second = claim("replica-a").await;
        let taken = reaches(&second, "taken", |s| matches!(s, ClaimState::Taken { .. })).await;
        let ClaimState::Taken { reason } = taken else {
            unreachable!()
        };
        assert!(
            reason.contains("replica-a") && reason.contains("its own `holder`"),
            "{reason}"
        );
        // Another name, or the same name in another cluster, is free.
        reaches(&claim("replica-b").await, "claimed", ClaimState::claimed).await;
        let west = start_test(&db, "west", "replica-a").await;
        reaches(&west, "claimed", ClaimState::claimed).await;

        drop(first);
        reaches(&second, "claimed", ClaimState::claimed).await;
    }

    #[tokio::test]
    async fn a_terminated_claim_session_claims_the_name_again() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        let claim = start_test(&db, "east", "replica-a").await;
        let first = reaches_view(&claim, "claimed", |v| v.state.claimed()).await;
        let mut state = claim.view();
        state.borrow_and_update();
        let (admin, connection) = tokio_postgres::connect(test.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        let ended: i64 = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE datname = current_database() AND application_name LIKE $1",
                &[&format!("{CLAIM_APPLICATION}-%")],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(ended, 1, "one claim session");
        let lost = tokio::time::timeout(
            Duration::from_secs(10),
            state.wait_for(|v| !v.state.claimed()),
        )
        .await
        .expect("the loss is noticed")
        .unwrap()
        .clone();
        assert_eq!(lost.session, None, "a lost claim shows no session");
        let again = reaches_view(&claim, "claimed again", |v| v.state.claimed()).await;
        let (first, again) = (first.session.unwrap(), again.session.unwrap());
        assert_eq!(again.generation, first.generation + 1, "a new session");
        assert_ne!(again.pid, first.pid);
    }

    /// The session a claim shows is the server's session holding the lock,
    /// and the host registers it, with its controllers, again when they
    /// change and when it claims on a new session.
    #[tokio::test]
    async fn a_claimed_session_is_the_one_holding_the_lock_and_registers_the_host() {
        let test = crate::testing::TestDatabase::create().await;
        test.database(1).migrate().await.unwrap();
        let db = test.database(1);
        let (info, controllers) = host(&["scheduler"]);
        let (claim, _) = start_with(&db, "east", "replica-a", info).await;
        let view = reaches_view(&claim, "claimed", |v| v.state.claimed()).await;
        let session = view.session.expect("a claimed view names its session");
        assert_eq!(session.key, claim_key("east", "replica-a"));
        let (admin, connection) = tokio_postgres::connect(test.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        let holder: i32 = admin
            .query_one(
                "SELECT pid FROM pg_locks
                  WHERE locktype = 'advisory' AND granted AND objsubid = 1
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND classid = (($1::bigint >> 32) & 4294967295)::oid
                    AND objid = ($1::bigint & 4294967295)::oid",
                &[&session.key],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(holder, session.pid);

        let registered = |want: Vec<String>, pid: i32| {
            let admin = &admin;
            async move {
                for _ in 0..200 {
                    let row = admin
                        .query_opt(
                            "SELECT session_pid, session_started_at IS NOT NULL, controllers,
                                    claim_key, version
                               FROM leasehold_hosts WHERE cluster = 'east' AND holder = 'replica-a'",
                            &[],
                        )
                        .await
                        .unwrap();
                    if let Some(row) = row
                        && row.get::<_, i32>(0) == pid
                        && row.get::<_, Vec<String>>(2) == want
                    {
                        assert!(row.get::<_, bool>(1), "backend_start recorded");
                        assert_eq!(row.get::<_, i64>(3), claim_key("east", "replica-a"));
                        assert_eq!(row.get::<_, String>(4), env!("CARGO_PKG_VERSION"));
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                panic!("the host row never showed pid {pid} running {want:?}");
            }
        };
        registered(vec!["scheduler".into()], session.pid).await;
        controllers
            .send(vec!["rollout".into(), "scheduler".into()])
            .unwrap();
        registered(vec!["rollout".into(), "scheduler".into()], session.pid).await;

        admin
            .execute("SELECT pg_terminate_backend($1)", &[&session.pid])
            .await
            .unwrap();
        let again = reaches_view(&claim, "claimed on a new session", |v| {
            v.session.as_ref().is_some_and(|s| s.pid != session.pid)
        })
        .await
        .session
        .unwrap();
        registered(vec!["rollout".into(), "scheduler".into()], again.pid).await;
    }

    #[tokio::test]
    async fn a_registering_host_forgets_only_hosts_gone_for_good() {
        use crate::authority::Authority;
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(2);
        let (admin, connection) = tokio_postgres::connect(test.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        // Four rows of other hosts: gone for good; written recently; old
        // but its liveness session still holds its claim; old, no session,
        // but a lease is held in its name.
        for (holder, age_hours) in [("gone", 48), ("recent", 0), ("locked", 48), ("leading", 48)] {
            admin
                .execute(
                    "INSERT INTO leasehold_hosts (cluster, holder, claim_key, session_pid,
                                                  process_started_at, version, updated_at)
                     VALUES ('east', $1, $2, 1, clock_timestamp(), 'old',
                             clock_timestamp() - make_interval(hours => $3))",
                    &[&holder, &claim_key("east", holder), &age_hours],
                )
                .await
                .unwrap();
        }
        let (locker, connection) = tokio_postgres::connect(test.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        locker
            .execute(
                "SELECT pg_advisory_lock($1)",
                &[&claim_key("east", "locked")],
            )
            .await
            .unwrap();
        let leases = crate::authority::postgres::PostgresAuthority::new(
            test.database(1),
            crate::authority::ExpectedIdentity::default(),
        );
        assert!(matches!(
            leases
                .acquire(&crate::authority::conformance::request(
                    "east", "rollout", "leading"
                ))
                .await
                .unwrap(),
            crate::authority::Acquired::Granted(_)
        ));

        let (info, _controllers) = host(&["scheduler"]);
        let (claim, _) = start_with(&db, "east", "replica-a", info).await;
        reaches_view(&claim, "claimed", |v| v.state.claimed()).await;
        let hosts = || async {
            admin
                .query(
                    "SELECT holder FROM leasehold_hosts WHERE cluster = 'east' ORDER BY holder",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
        };
        let want = ["leading", "locked", "recent", "replica-a"];
        for _ in 0..200 {
            if hosts().await == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "the registry should keep {want:?}, it holds {:?}",
            hosts().await
        );
    }

    #[tokio::test]
    async fn check_liveness_reports_a_role_that_cannot_read_pg_locks() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        db.migrate().await.unwrap();
        let note = check_liveness(&db).await.expect("the owner may");
        assert!(note.contains("pg_locks is readable"), "{note}");

        // A role without the registry's privileges is told what to grant.
        let role = format!("lh_probe_{}", uuid::Uuid::new_v4().simple());
        let (admin, connection) = tokio_postgres::connect(test.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        admin
            .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
            .await
            .unwrap();
        let mut url = url::Url::parse(test.url()).unwrap();
        url.set_username(&role).unwrap();
        let probe = crate::db::Database::new(url.as_str(), 1).unwrap();
        let problem = check_liveness(&probe).await.expect_err("no privileges");
        assert!(
            problem.contains("GRANT INSERT, UPDATE ON leasehold_hosts"),
            "{problem}"
        );
        drop(probe);
        admin
            .batch_execute(&format!(
                "REASSIGN OWNED BY {role} TO CURRENT_USER; DROP OWNED BY {role}; DROP ROLE {role}"
            ))
            .await
            .unwrap();
    }

    /// Two hosts on one migrated database: `a` claims its name and holds
    /// `east/scheduler` under crash detection `mode`; `b` waits for it.
    struct Takeover {
        test: crate::testing::TestDatabase,
        a: super::super::PostgresAuthority,
        b: super::super::PostgresAuthority,
        _claim: HolderClaim,
        session: ClaimSession,
        epoch: crate::fence::Epoch,
        admin: Client,
    }

    const TTL: Duration = Duration::from_secs(30);

    fn request(holder: &str) -> crate::authority::AcquireRequest {
        crate::authority::AcquireRequest {
            key: crate::fence::LeaseKey::new("east", "scheduler"),
            holder: holder.to_string(),
            ttl: TTL,
        }
    }

    impl Takeover {
        async fn start(mode: crate::authority::CrashDetection) -> Self {
            use crate::authority::{Acquired, Authority, ExpectedIdentity};
            let test = crate::testing::TestDatabase::create().await;
            test.database(1).migrate().await.unwrap();
            let a =
                super::super::PostgresAuthority::new(test.database(2), ExpectedIdentity::default());
            let b =
                super::super::PostgresAuthority::new(test.database(2), ExpectedIdentity::default());
            let claim = a
                .claim_holder("east", "host-a", host(&["scheduler"]).0)
                .expect("PostgreSQL claims holder names");
            let session = reaches_view(&claim, "claimed", |v| v.state.claimed())
                .await
                .session
                .unwrap();
            let epoch = match a.acquire_detected(&request("host-a"), mode).await.unwrap() {
                Acquired::Granted(grant) => grant.fence.epoch,
                Acquired::Held { .. } => panic!("a fresh lease is held"),
            };
            let (admin, connection) = tokio_postgres::connect(test.url(), NoTls).await.unwrap();
            tokio::spawn(connection);
            Self {
                test,
                a,
                b,
                _claim: claim,
                session,
                epoch,
                admin,
            }
        }

        /// What `b` gets when it asks now, under crash detection `session`.
        async fn b_asks(&self) -> crate::authority::Acquired {
            use crate::authority::{Authority, CrashDetection};
            self.b
                .acquire_detected(&request("host-b"), CrashDetection::Session)
                .await
                .unwrap()
        }

        /// End `a`'s liveness session from the server side.
        async fn terminate_a(&self) {
            let ended: bool = self
                .admin
                .query_one("SELECT pg_terminate_backend($1)", &[&self.session.pid])
                .await
                .unwrap()
                .get(0);
            assert!(ended, "a's liveness session was running");
        }

        /// Wait until the server no longer shows `a`'s old session.
        async fn session_gone(&self) {
            for _ in 0..500 {
                let alive: i64 = self
                    .admin
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                        &[&self.session.pid],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if alive == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the terminated session is still there");
        }
    }

    /// A `session` grant records its holder's liveness session; while that
    /// session lives the lease is held, and once it is gone a standby's
    /// grant takes it over at the next epoch without waiting for the ttl,
    /// ending the old tenure as superseded. The standby's scan wakes it.
    #[tokio::test]
    async fn a_session_grant_is_taken_over_once_its_liveness_session_is_gone() {
        use crate::authority::{Acquired, Authority, CrashDetection, EndReason};
        let t = Takeover::start(CrashDetection::Session).await;
        let key = request("host-a").key;
        let leases = t.b.observe("east").await.unwrap();
        assert_eq!(leases[0].crash_detection, CrashDetection::Session);
        let shown = leases[0]
            .holder_session
            .clone()
            .expect("the session is shown");
        assert_eq!(shown.pid, t.session.pid);
        assert!(
            matches!(t.b_asks().await, Acquired::Held { .. }),
            "a is alive"
        );

        let mut woken =
            t.b.dead_holder(&key)
                .expect("PostgreSQL looks for dead holders");
        woken.borrow_and_update();
        t.terminate_a().await;
        tokio::time::timeout(Duration::from_secs(5), woken.changed())
            .await
            .expect("the scan wakes the standby when the holder's session is gone")
            .unwrap();
        t.session_gone().await;
        let Acquired::Granted(grant) = t.b_asks().await else {
            panic!("the lease of a dead session is taken over");
        };
        assert_eq!(grant.fence.epoch.0, t.epoch.0 + 1);
        assert!(
            grant.expires_at - grant.acquired_at == chrono::TimeDelta::from_std(TTL).unwrap(),
            "a fresh grant"
        );
        let history = t.b.history(&key, 2).await.unwrap();
        assert_eq!(history[1].end_reason, Some(EndReason::Superseded));
        // a claims its name again on a new session; that session does not
        // revive the old tenure: a's renewal is refused.
        let renewed =
            t.a.renew(
                &[crate::fence::Fence {
                    key,
                    epoch: t.epoch,
                    holder: "host-a".into(),
                }],
                TTL,
            )
            .await
            .unwrap();
        assert_eq!(renewed, [crate::authority::Renewed::Lost]);
        drop(t.test);
    }

    /// The same, but `a` reclaims its name on a new session before anyone
    /// asks: the lease still records the old session, so it is free.
    #[tokio::test]
    async fn a_new_session_of_the_same_holder_does_not_keep_its_old_leases() {
        use crate::authority::{Acquired, CrashDetection};
        let t = Takeover::start(CrashDetection::Session).await;
        let mut view = t._claim.view();
        view.borrow_and_update();
        t.terminate_a().await;
        tokio::time::timeout(
            Duration::from_secs(10),
            view.wait_for(|v| v.session.as_ref().is_some_and(|s| s.pid != t.session.pid)),
        )
        .await
        .expect("a claims again")
        .unwrap();
        assert!(matches!(t.b_asks().await, Acquired::Granted(_)));
    }

    /// A `ttl` grant is never taken over by session: only expiry frees it.
    #[tokio::test]
    async fn a_ttl_grant_outlives_its_holders_session_until_it_expires() {
        use crate::authority::{Acquired, CrashDetection};
        let t = Takeover::start(CrashDetection::Ttl).await;
        t.terminate_a().await;
        t.session_gone().await;
        let Acquired::Held { epoch, .. } = t.b_asks().await else {
            panic!("a ttl lease was taken over before it expired");
        };
        assert_eq!(epoch, t.epoch);
    }

    #[test]
    fn a_dead_host_loses_its_claim_before_its_leases_expire() {
        assert!(claim_session_drop() <= crate::timeouts::LEASE_TTL);
    }
    /// The host's liveness follows its claim session: alive from the
    /// claim's send for the budget, extended by each answered statement,
    /// lapsed for a tenure of an earlier session and once ended.
    #[test]
    fn liveness_counts_from_the_last_answered_send_and_belongs_to_one_session() {
        let liveness = Liveness::new();
        let t0 = Instant::now();
        assert!(liveness.lapsed_at(0, t0), "no session yet");
        liveness.begin(1, t0);
        assert!(!liveness.lapsed_at(1, t0 + LIVENESS_BUDGET - Duration::from_millis(1)));
        assert!(liveness.lapsed_at(1, t0 + LIVENESS_BUDGET));
        // An answer extends from its statement's send, never backwards.
        liveness.answered(1, t0 + Duration::from_secs(2));
        assert!(!liveness.lapsed_at(1, t0 + LIVENESS_BUDGET + Duration::from_secs(1)));
        liveness.answered(1, t0 + Duration::from_secs(1));
        assert_eq!(
            liveness.until(),
            Some(t0 + Duration::from_secs(2) + LIVENESS_BUDGET)
        );
        // A later session: tenures of the first lapse at once, and an
        // answer reported for the first no longer counts.
        liveness.begin(2, t0 + Duration::from_secs(3));
        assert!(liveness.lapsed_at(1, t0 + Duration::from_secs(3)));
        assert!(!liveness.lapsed_at(2, t0 + Duration::from_secs(3)));
        liveness.answered(1, t0 + Duration::from_secs(9));
        assert_eq!(
            liveness.until(),
            Some(t0 + Duration::from_secs(3) + LIVENESS_BUDGET)
        );
        // Ended: lapsed now, whatever the clock says.
        liveness.end(1);
        assert!(
            !liveness.lapsed_at(2, t0 + Duration::from_secs(3)),
            "not its session"
        );
        liveness.end(2);
        assert!(liveness.lapsed_at(2, t0 + Duration::from_secs(3)));
        assert_eq!(liveness.until(), None);
    }

    fn identity_like(
        database_id: uuid::Uuid,
        oid: u32,
        in_recovery: bool,
        timeline: Option<u32>,
    ) -> DatabaseIdentity {
        DatabaseIdentity {
            database_id,
            system_identifier: 7_000_000_000_000_000_001,
            database_oid: oid,
            database_name: format!("db{oid}"),
            timeline,
            in_recovery,
            read_only: false,
            endpoint: "postgres://app:***@db/x".into(),
        }
    }

    /// A claim session must reach the verified database: not another one
    /// (another uuid or oid), not a standby of it, not an unmigrated one.
    #[test]
    fn a_claim_session_elsewhere_is_refused_naming_what_differs() {
        let id = uuid::Uuid::new_v4();
        let verified = identity_like(id, 16_384, false, Some(1));
        assert_eq!(
            session_refusal(&verified, Ok(verified.clone())),
            None,
            "the same database"
        );
        let other = session_refusal(
            &verified,
            Ok(identity_like(uuid::Uuid::new_v4(), 16_999, false, Some(1))),
        )
        .expect("another database");
        assert!(
            other.contains("database id is") && other.contains("oid 16999"),
            "{other}"
        );
        let standby = session_refusal(&verified, Ok(identity_like(id, 16_384, true, None)))
            .expect("a standby");
        assert!(standby.contains("in recovery"), "{standby}");
        let unmigrated = session_refusal(
            &verified,
            Err("relation \"leasehold_database\" does not exist (SQLSTATE 42P01)".into()),
        )
        .expect("an unmigrated database");
        assert!(unmigrated.contains("42P01"), "{unmigrated}");
        let said = wrong_database(
            "postgres://app:***@other/y",
            "postgres://app:***@db/x",
            &verified,
            &standby,
        );
        assert!(
            said.contains("postgres://app:***@other/y") && said.contains("postgres://app:***@db/x"),
            "both endpoints are named: {said}"
        );
    }

    /// A claim whose session reaches another database than the one the
    /// host verified (here: another Leasehold database of the same server)
    /// is refused, naming both endpoints, and claims nothing there.
    #[tokio::test]
    async fn a_claim_session_at_another_database_is_refused_naming_both_endpoints() {
        let test = crate::testing::TestDatabase::create().await;
        let other = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        let elsewhere = other.database(1);
        let (claim, liveness) = start(
            &elsewhere.session_target(),
            elsewhere.endpoint(),
            "east",
            "replica-a",
            host(&[]).0,
            verified(&db).await,
        );
        let refused = reaches(&claim, "refused", |s| {
            matches!(s, ClaimState::WrongDatabase { .. })
        })
        .await;
        let ClaimState::WrongDatabase { reason } = refused else {
            unreachable!()
        };
        assert!(
            reason.contains(elsewhere.endpoint()) && reason.contains(db.endpoint()),
            "{reason}"
        );
        assert!(reason.contains("database id is"), "{reason}");
        assert_eq!(liveness.until(), None, "never alive there");
        let (admin, connection) = tokio_postgres::connect(other.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        let locks: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(locks, 0, "no claim was taken there");
    }

    /// The claim session keeps its name across server-side idle bounds
    /// the database sets for every session: it switches them off for
    /// itself, so it is still the first session after several checks.
    #[tokio::test]
    async fn the_claim_session_outlives_an_idle_session_timeout() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        let (admin, connection) = tokio_postgres::connect(test.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        admin
            .batch_execute(
                "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET idle_session_timeout = 200', \
                 current_database()); END $$",
            )
            .await
            .unwrap();
        let (claim, liveness) = start_with(&db, "east", "replica-a", host(&[]).0).await;
        let first = reaches_view(&claim, "claimed", |v| v.state.claimed()).await;
        let generation = first.session.as_ref().unwrap().generation;
        let alive_until = liveness.until().expect("alive once claimed");
        // Three checks answered on this session (each idle in between for
        // far longer than the database's bound).
        let mut view = claim.view();
        let answered = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if liveness
                    .until()
                    .is_some_and(|until| until >= alive_until + LIVENESS_CHECK * 3)
                {
                    return;
                }
                tokio::select! {
                    _ = view.changed() => {}
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        })
        .await;
        let now = claim.view().borrow().clone();
        assert!(
            answered.is_ok(),
            "the claim session stopped answering: {now:?} {liveness:?}"
        );
        assert_eq!(
            now.session.map(|s| s.generation),
            Some(generation),
            "the claim was made again on a new session"
        );
    }

    /// A statement of the claim session that never answers (here the
    /// registry's prune, blocked behind a row another transaction holds)
    /// loses the claim, and the host's liveness, when the liveness budget
    /// since the last answered statement's send is spent: its timeout is
    /// not swallowed and it does not run on past the budget.
    #[tokio::test]
    async fn a_statement_that_never_answers_loses_the_claim_within_the_liveness_budget() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        db.migrate().await.unwrap();
        let (admin, connection) = tokio_postgres::connect(test.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        // A host gone for good that the prune would delete, its row held.
        admin
            .execute(
                "INSERT INTO leasehold_hosts (cluster, holder, claim_key, session_pid,
                                              process_started_at, version, updated_at)
                 VALUES ('east', 'gone', $1, 1, clock_timestamp(), 'old',
                         clock_timestamp() - interval '48 hours')",
                &[&claim_key("east", "gone")],
            )
            .await
            .unwrap();
        admin
            .batch_execute("BEGIN; SELECT 1 FROM leasehold_hosts WHERE holder = 'gone' FOR UPDATE")
            .await
            .unwrap();
        let (claim, liveness) = start_with(&db, "east", "replica-a", host(&["scheduler"]).0).await;
        let claimed = reaches_view(&claim, "claimed", |v| v.state.claimed()).await;
        let generation = claimed.session.unwrap().generation;
        let mut view = claim.view();
        view.borrow_and_update();
        let lost = tokio::time::timeout(
            LIVENESS_BUDGET + Duration::from_secs(5),
            view.wait_for(|v| !v.state.claimed()),
        )
        .await
        .map(|v| v.map(|v| v.clone()));
        let deadline_missed = lost.is_err();
        admin.batch_execute("ROLLBACK").await.unwrap();
        assert!(
            !deadline_missed,
            "a claim whose prune never answers was still held {:?} after it was claimed",
            LIVENESS_BUDGET + Duration::from_secs(5)
        );
        assert!(
            liveness.lapsed_at(generation, Instant::now()),
            "the liveness of the lost session lapsed"
        );
        let ClaimState::Unreachable { reason } = lost.unwrap().unwrap().state else {
            panic!("the claim is lost")
        };
        assert!(
            reason.contains("pruning the host registry") && reason.contains("liveness budget"),
            "{reason}"
        );
    }
}
