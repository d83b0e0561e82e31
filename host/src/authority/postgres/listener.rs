//! The release listener: one dedicated session per authority that LISTENs
//! for release notifications and wakes the candidates of that cluster.
//!
//! The session is opened with its own `connect`, never taken from the pool,
//! and is closed (dropped) when it fails or the authority goes away: a
//! LISTEN registration is session state, and session state must not leak
//! into pooled connections (docs/design.md, point 3).
//!
//! Notifications sent while the session is down are lost, so every
//! (re)established session wakes all waiters once; candidates then retry
//! acquiring, which is always safe.
//!
//! The same session looks for dead holders (crash detection `session`):
//! while any standby of this host waits for a lease
//! ([`ReleaseWakes::waited_leases`]), it asks every
//! [`TAKEOVER_SCAN`] (jittered) in one statement which of those leases an
//! acquire would take now — released, expired, or held under a `session`
//! grant whose holder's liveness session is gone — and wakes their
//! standbys. One statement per host per interval, whatever the number of
//! leases; none while nobody waits. Its answer doubles as the session's
//! liveness check.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::AsyncMessage;

use crate::authority::wakes::ReleaseWakes;
use crate::fence::LeaseKey;
use crate::timeouts::{
    BACKOFF_MAX, BACKOFF_MIN, DATABASE_CONNECT, DATABASE_STATEMENT, RENEW_INTERVAL, TAKEOVER_SCAN,
};

/// Which of the waited-for leases ($1 clusters, $2 names) an acquire would
/// take now: released, expired, or its holder's liveness session gone.
const TAKEOVER_CANDIDATES: &str = concat!(
    "
    SELECT l.cluster, l.name
      FROM leasehold_leases l
      JOIN unnest($1::text[], $2::text[]) AS w(cluster, name)
        ON w.cluster = l.cluster AND w.name = l.name
     WHERE l.released OR l.expires_at <= clock_timestamp() OR ",
    holder_session_gone!()
);

/// The NOTIFY channel; the payload is the cluster name.
pub(crate) const RELEASE_CHANNEL: &str = "leasehold_release";

/// The listener session's `application_name`, so operators (and tests) can
/// tell it from pooled sessions in `pg_stat_activity`.
pub const LISTENER_APPLICATION: &str = "leasehold-release-listener";

/// A running listener; stops (and closes its session) when dropped.
pub(super) struct Listener {
    task: JoinHandle<()>,
    sessions: watch::Receiver<u64>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Start listening on `handle`'s runtime.
    pub(super) fn start(
        handle: &tokio::runtime::Handle,
        mut target: crate::db_tls::Target,
        endpoint: String,
        wakes: Arc<ReleaseWakes>,
    ) -> Self {
        target.config.application_name(LISTENER_APPLICATION);
        if target.config.get_connect_timeout().is_none() {
            target.config.connect_timeout(DATABASE_CONNECT);
        }
        let (sessions_tx, sessions) = watch::channel(0);
        let task = handle.spawn(run(target, endpoint, wakes, sessions_tx));
        Self { task, sessions }
    }

    /// Counts the LISTEN sessions established so far.
    pub(super) fn sessions(&self) -> watch::Receiver<u64> {
        self.sessions.clone()
    }
}

async fn run(
    target: crate::db_tls::Target,
    endpoint: String,
    wakes: Arc<ReleaseWakes>,
    sessions: watch::Sender<u64>,
) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let (established, error) = session(&target, &wakes, &sessions).await;
        if established {
            backoff = BACKOFF_MIN;
        }
        tracing::warn!(
            endpoint = %endpoint,
            error = %error,
            "release listener lost its session; reconnecting (standbys fall back to their retry backoff meanwhile)"
        );
        // Jitter: hosts that lost the database together must not reconnect
        // in lockstep.
        let pause = rand::rng().random_range(backoff / 2..=backoff);
        tokio::time::sleep(pause).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One session: connect, LISTEN, forward notifications until it fails.
/// Returns whether LISTEN was established, and why the session ended.
async fn session(
    target: &crate::db_tls::Target,
    wakes: &ReleaseWakes,
    sessions: &watch::Sender<u64>,
) -> (bool, String) {
    let connected = tokio::time::timeout(DATABASE_CONNECT, target.connect()).await;
    let (client, mut connection) = match connected {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return (false, format!("connect: {}", crate::db::describe(&e))),
        Err(_) => return (false, "connect: no answer in time".to_string()),
    };
    let mut established = false;
    // The client's requests only progress while the connection is polled,
    // so both run in this one task; dropping both closes the socket.
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    let control = async {
        if let Err(e) = client
            .batch_execute(&format!("LISTEN {RELEASE_CHANNEL}"))
            .await
        {
            return format!("LISTEN: {}", crate::db::describe(&e));
        }
        established = true;
        // Wake first, then announce the session: whoever waits for the
        // announcement has already seen the catch-up wake.
        wakes.wake_all();
        sessions.send_modify(|n| *n += 1);
        // A half-open TCP connection never errors by itself; a periodic
        // empty query (or scan) finds it within one renewal interval, the
        // cadence at which holders find a dead database.
        let mut last_answer = tokio::time::Instant::now();
        let mut scan = None;
        loop {
            tokio::time::sleep(scan_pause()).await;
            let waited = wakes.waited_leases();
            if waited.is_empty() {
                if last_answer.elapsed() < RENEW_INTERVAL {
                    continue;
                }
                match tokio::time::timeout(DATABASE_STATEMENT, client.simple_query("")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return format!("liveness query: {}", crate::db::describe(&e)),
                    Err(_) => return "liveness query: no answer in time".to_string(),
                }
            } else {
                let found = tokio::time::timeout(DATABASE_STATEMENT, async {
                    let statement = match &scan {
                        Some(statement) => statement,
                        None => scan.insert(client.prepare(TAKEOVER_CANDIDATES).await?),
                    };
                    takeover_candidates(&client, statement, &waited).await
                });
                match found.await {
                    Ok(Ok(found)) => {
                        for key in &found {
                            wakes.wake_lease(key);
                        }
                    }
                    Ok(Err(e)) => return format!("takeover scan: {}", crate::db::describe(&e)),
                    Err(_) => return "takeover scan: no answer in time".to_string(),
                }
            }
            last_answer = tokio::time::Instant::now();
        }
    };
    let forward = async {
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) if n.channel() == RELEASE_CHANNEL => {
                    wakes.wake(n.payload());
                }
                Ok(_) => {}
                Err(e) => return format!("connection: {}", crate::db::describe(&e)),
            }
        }
        "connection closed by the server".to_string()
    };
    let error = tokio::select! {
        error = control => error,
        error = forward => error,
    };
    (established, error)
}

/// The pause before the next scan: [`TAKEOVER_SCAN`] jittered by half
/// either way, so hosts started together do not scan in lockstep.
fn scan_pause() -> Duration {
    rand::rng().random_range(TAKEOVER_SCAN / 2..=TAKEOVER_SCAN * 3 / 2)
}

/// The leases among `waited` an acquire would take now.
async fn takeover_candidates(
    client: &tokio_postgres::Client,
    statement: &tokio_postgres::Statement,
    waited: &[LeaseKey],
) -> Result<Vec<LeaseKey>, tokio_postgres::Error> {
    let clusters: Vec<&str> = waited.iter().map(|k| k.cluster.as_str()).collect();
    let names: Vec<&str> = waited.iter().map(|k| k.name.as_str()).collect();
    let rows = client.query(statement, &[&clusters, &names]).await?;
    Ok(rows
        .iter()
        .map(|row| LeaseKey::new(row.get::<_, String>(0), row.get::<_, String>(1)))
        .collect())
}
