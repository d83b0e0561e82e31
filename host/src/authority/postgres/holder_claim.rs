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
//! Must never: take the lock on a pooled session; keep running as the
//! holder after its claim session ended without claiming again.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_postgres::{Client, NoTls};

use crate::authority::claim::{ClaimState, HolderClaim};
use crate::limits::HOLDER_CLAIM_KEEPALIVE_COUNT;
use crate::timeouts::{
    DATABASE_STATEMENT, HOLDER_CLAIM_CHECK, HOLDER_CLAIM_KEEPALIVE_IDLE,
    HOLDER_CLAIM_KEEPALIVE_INTERVAL, HOLDER_CLAIM_RETRY,
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

/// Start claiming `holder` of `cluster` on sessions opened from `config`;
/// the claim is kept (and re-made after a reconnect) until the returned
/// handle is dropped.
pub(super) fn start(
    config: &tokio_postgres::Config,
    endpoint: &str,
    cluster: &str,
    holder: &str,
) -> HolderClaim {
    let instance = uuid::Uuid::new_v4().simple().to_string();
    let application = format!("{CLAIM_APPLICATION}-{instance}");
    let mut config = config.clone();
    config.application_name(&application);
    let (tx, rx) = watch::channel(ClaimState::Pending);
    let claimer = Claimer {
        config,
        application,
        endpoint: endpoint.to_string(),
        cluster: cluster.to_string(),
        holder: holder.to_string(),
        key: claim_key(cluster, holder),
        state: tx,
    };
    HolderClaim::new(rx, tokio::spawn(claimer.run()))
}

struct Claimer {
    config: tokio_postgres::Config,
    application: String,
    endpoint: String,
    cluster: String,
    holder: String,
    key: i64,
    state: watch::Sender<ClaimState>,
}

/// Why a claim session stopped serving.
struct Lost(String);

impl Claimer {
    async fn run(self) {
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
            if self.state.borrow().claimed() {
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

    fn publish(&self, state: ClaimState) {
        self.state.send_if_modified(|current| {
            if *current == state {
                false
            } else {
                *current = state;
                true
            }
        });
    }

    /// A dedicated session whose server side drops it (and the lock) soon
    /// after this host vanishes without closing its socket.
    async fn connect(&self) -> Result<(Client, tokio::task::JoinHandle<()>), Lost> {
        let (client, connection) = self
            .config
            .connect(NoTls)
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
        &self,
        client: &Client,
        mut driver: tokio::task::JoinHandle<()>,
    ) -> Lost {
        let lost = loop {
            let claimed = bounded(async {
                let row = client
                    .query_one("SELECT pg_try_advisory_lock($1)", &[&self.key])
                    .await?;
                Ok::<bool, tokio_postgres::Error>(row.get(0))
            })
            .await;
            match claimed {
                Err(lost) => break lost,
                Ok(true) => {
                    tracing::info!(
                        cluster = self.cluster,
                        holder = self.holder,
                        "holder name claimed: no other live host runs as this holder"
                    );
                    self.publish(ClaimState::Claimed);
                    break self.keep(client, &mut driver).await;
                }
                Ok(false) => {}
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
                    if !matches!(*self.state.borrow(), ClaimState::Taken { .. }) {
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

    /// Hold the claim: the session must keep answering.
    async fn keep(&self, client: &Client, driver: &mut tokio::task::JoinHandle<()>) -> Lost {
        loop {
            tokio::select! {
                _ = &mut *driver => return Lost("the claim session closed".into()),
                _ = tokio::time::sleep(HOLDER_CLAIM_CHECK) => {
                    if let Err(lost) = bounded(client.simple_query("")).await {
                        return lost;
                    }
                }
            }
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
        let mut state = claim.state();
        let reached = tokio::time::timeout(Duration::from_secs(10), async {
            state.wait_for(|s| want(s)).await.map(|s| s.clone())
        })
        .await;
        match reached {
            Ok(reached) => reached.expect("claim task alive"),
            Err(_) => panic!(
                "the claim never became {what}: {:?}",
                *claim.state().borrow()
            ),
        }
    }

    #[tokio::test]
    async fn a_live_holder_name_is_refused_until_its_host_lets_go() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        let claim = |holder: &str| start(db.config(), db.endpoint(), "east", holder);
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
        let west = start(db.config(), db.endpoint(), "west", "replica-a");
        reaches(&west, "claimed", ClaimState::claimed).await;

        drop(first);
        reaches(&second, "claimed", ClaimState::claimed).await;
    }

    #[tokio::test]
    async fn a_terminated_claim_session_claims_the_name_again() {
        let test = crate::testing::TestDatabase::create().await;
        let db = test.database(1);
        let claim = start(db.config(), db.endpoint(), "east", "replica-a");
        reaches(&claim, "claimed", ClaimState::claimed).await;
        let mut state = claim.state();
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
        tokio::time::timeout(Duration::from_secs(10), state.wait_for(|s| !s.claimed()))
            .await
            .expect("the loss is noticed")
            .unwrap();
        reaches(&claim, "claimed again", ClaimState::claimed).await;
    }

    #[test]
    fn a_dead_host_loses_its_claim_before_its_leases_expire() {
        assert!(dead_host_release() <= crate::timeouts::LEASE_TTL);
    }
}
