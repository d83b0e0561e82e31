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

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_postgres::Client;
#[cfg(test)]
use tokio_postgres::NoTls;

use crate::authority::claim::{ClaimSession, ClaimState, ClaimView, HolderClaim, HostInfo};
use crate::limits::HOLDER_CLAIM_KEEPALIVE_COUNT;
use crate::timeouts::{
    DATABASE_STATEMENT, HOLDER_CLAIM_CHECK, HOLDER_CLAIM_KEEPALIVE_IDLE,
    HOLDER_CLAIM_KEEPALIVE_INTERVAL, HOLDER_CLAIM_RETRY, HOST_ROW_RETENTION,
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

/// Start claiming `holder` of `cluster` on sessions opened to `target`
/// (never a pooler's: the lock and the pid must be the server's own
/// session's), registering `host` with each claimed session; the claim is
/// kept (and re-made after a reconnect) until the returned handle is
/// dropped.
pub(super) fn start(
    target: &crate::db_tls::Target,
    endpoint: &str,
    cluster: &str,
    holder: &str,
    host: HostInfo,
) -> HolderClaim {
    let instance = uuid::Uuid::new_v4().simple().to_string();
    let application = format!("{CLAIM_APPLICATION}-{instance}");
    let mut target = target.clone();
    target.config.application_name(&application);
    let (tx, rx) = watch::channel(ClaimView::pending());
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
    };
    HolderClaim::new(rx, tokio::spawn(claimer.run()))
}

struct Claimer {
    target: crate::db_tls::Target,
    application: String,
    endpoint: String,
    cluster: String,
    holder: String,
    key: i64,
    state: watch::Sender<ClaimView>,
    host: HostInfo,
    /// Sessions claimed so far (see [`ClaimSession::generation`]).
    generation: std::sync::atomic::AtomicU64,
}

/// Why a claim session stopped serving.
struct Lost(String);

impl Claimer {
    async fn run(mut self) {
        loop {
            let lost = match self.connect().await {
                Ok((client, driver)) => {
                    let lost = self.claim_and_keep(&client, driver).await;
                    // Dropping the client closes the session (and with it
                    // the lock, if the server still thinks it is held).
                    drop(client);
                    lost
                }
                Err(lost) => lost,
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
    /// after this host vanishes without closing its socket.
    async fn connect(&self) -> Result<(Client, tokio::task::JoinHandle<()>), Lost> {
        let (client, connection) = self
            .target
            .connect()
            .await
            .map_err(|e| Lost(describe(&e)))?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let keepalives = format!(
            "SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; \
             SET tcp_keepalives_count = {}; SET tcp_user_timeout = {}",
            HOLDER_CLAIM_KEEPALIVE_IDLE.as_secs().max(1),
            HOLDER_CLAIM_KEEPALIVE_INTERVAL.as_secs().max(1),
            HOLDER_CLAIM_KEEPALIVE_COUNT,
            (HOLDER_CLAIM_KEEPALIVE_IDLE
                + HOLDER_CLAIM_KEEPALIVE_INTERVAL * HOLDER_CLAIM_KEEPALIVE_COUNT)
                .as_millis()
        );
        match bounded(client.batch_execute(&keepalives)).await {
            Ok(()) => Ok((client, driver)),
            Err(lost) => {
                driver.abort();
                Err(lost)
            }
        }
    }

    /// Claim the name on `client`, retrying while another host holds it;
    /// once claimed, keep checking the session until it fails.
    async fn claim_and_keep(
        &mut self,
        client: &Client,
        mut driver: tokio::task::JoinHandle<()>,
    ) -> Lost {
        let lost = loop {
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
                    break self.keep(client, &mut driver, &session).await;
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
                _ = &mut driver => break Lost("the claim session closed".into()),
            }
        };
        driver.abort();
        lost
    }

    /// Hold the claim: the session must keep answering. Registers the
    /// host now and again whenever its controllers change.
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
                _ = tokio::time::sleep(HOLDER_CLAIM_CHECK) => {
                    if let Err(lost) = bounded(client.simple_query("")).await {
                        return lost;
                    }
                }
            }
        }
    }

    /// Write this host's row in `leasehold_hosts`. Best effort: a refused
    /// statement (a missing privilege, an older schema) is logged and the
    /// claim goes on; only a session that stopped answering is lost.
    async fn register(&mut self, client: &Client, session: &ClaimSession) -> Result<(), Lost> {
        let controllers = self.host.controllers.borrow_and_update().clone();
        let written = tokio::time::timeout(
            DATABASE_STATEMENT,
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
        .await;
        match written {
            Ok(Ok(_)) => {
                self.prune(client).await;
                Ok(())
            }
            Ok(Err(e)) if e.as_db_error().is_some() => {
                tracing::warn!(
                    cluster = self.cluster,
                    holder = self.holder,
                    error = describe(&e),
                    "could not register this host in leasehold_hosts; leases show no session \
                     start for it (crash detection does not depend on it)"
                );
                Ok(())
            }
            Ok(Err(e)) => Err(Lost(describe(&e))),
            Err(_) => Err(Lost(format!(
                "registering the host: no answer within {}",
                humantime::format_duration(DATABASE_STATEMENT)
            ))),
        }
    }

    /// Delete the rows of hosts gone for good ([`PRUNE`]). Best effort: a
    /// failure is logged at debug level and retried at the next
    /// registration.
    async fn prune(&self, client: &Client) {
        let retention = HOST_ROW_RETENTION.as_secs_f64();
        let pruned = tokio::time::timeout(
            DATABASE_STATEMENT,
            client.execute(PRUNE, &[&self.cluster, &self.holder, &retention]),
        )
        .await;
        match pruned {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!(
                cluster = self.cluster,
                pruned = n,
                "forgot hosts gone for more than {}",
                humantime::format_duration(HOST_ROW_RETENTION)
            ),
            Ok(Err(e)) => tracing::debug!(
                cluster = self.cluster,
                error = describe(&e),
                "could not prune leasehold_hosts"
            ),
            Err(_) => tracing::debug!(cluster = self.cluster, "pruning leasehold_hosts timed out"),
        }
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

/// How long the server takes, at most, to drop the claim of a host that
/// vanished without closing its socket.
pub const fn dead_host_release() -> Duration {
    Duration::from_secs(
        HOLDER_CLAIM_KEEPALIVE_IDLE.as_secs()
            + HOLDER_CLAIM_KEEPALIVE_INTERVAL.as_secs() * HOLDER_CLAIM_KEEPALIVE_COUNT as u64,
    )
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

    fn start_test(db: &crate::db::Database, cluster: &str, holder: &str) -> HolderClaim {
        start(
            &db.session_target(),
            db.endpoint(),
            cluster,
            holder,
            host(&[]).0,
        )
    }

    #[tokio::test]
    async fn a_live_holder_name_is_refused_until_its_host_lets_go() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        let claim = |holder: &str| start_test(&db, "east", holder);
        let first = claim("replica-a");
        reaches(&first, "claimed", ClaimState::claimed).await;

        let second = claim("replica-a");
        let taken = reaches(&second, "taken", |s| matches!(s, ClaimState::Taken { .. })).await;
        let ClaimState::Taken { reason } = taken else {
            unreachable!()
        };
        assert!(
            reason.contains("replica-a") && reason.contains("its own `holder`"),
            "{reason}"
        );
        // Another name, or the same name in another cluster, is free.
        reaches(&claim("replica-b"), "claimed", ClaimState::claimed).await;
        let west = start_test(&db, "west", "replica-a");
        reaches(&west, "claimed", ClaimState::claimed).await;

        drop(first);
        reaches(&second, "claimed", ClaimState::claimed).await;
    }

    #[tokio::test]
    async fn a_terminated_claim_session_claims_the_name_again() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        let claim = start_test(&db, "east", "replica-a");
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
        let claim = start(
            &db.session_target(),
            db.endpoint(),
            "east",
            "replica-a",
            info,
        );
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
        let claim = start(
            &db.session_target(),
            db.endpoint(),
            "east",
            "replica-a",
            info,
        );
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
        assert!(dead_host_release() <= crate::timeouts::LEASE_TTL);
    }
}
