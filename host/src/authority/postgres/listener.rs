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

use std::sync::Arc;

use futures::StreamExt;
use rand::Rng;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::authority::wakes::ReleaseWakes;
use crate::timeouts::{
    BACKOFF_MAX, BACKOFF_MIN, DATABASE_CONNECT, DATABASE_STATEMENT, RENEW_INTERVAL,
};

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
        mut config: tokio_postgres::Config,
        endpoint: String,
        wakes: Arc<ReleaseWakes>,
    ) -> Self {
        config.application_name(LISTENER_APPLICATION);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DATABASE_CONNECT);
        }
        let (sessions_tx, sessions) = watch::channel(0);
        let task = handle.spawn(run(config, endpoint, wakes, sessions_tx));
        Self { task, sessions }
    }

    /// Counts the LISTEN sessions established so far.
    pub(super) fn sessions(&self) -> watch::Receiver<u64> {
        self.sessions.clone()
    }
}

async fn run(
    config: tokio_postgres::Config,
    endpoint: String,
    wakes: Arc<ReleaseWakes>,
    sessions: watch::Sender<u64>,
) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let (established, error) = session(&config, &wakes, &sessions).await;
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
    config: &tokio_postgres::Config,
    wakes: &ReleaseWakes,
    sessions: &watch::Sender<u64>,
) -> (bool, String) {
    let connected = tokio::time::timeout(DATABASE_CONNECT, config.connect(NoTls)).await;
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
        // empty query finds it within one renewal interval, the cadence at
        // which holders find a dead database.
        loop {
            tokio::time::sleep(RENEW_INTERVAL).await;
            match tokio::time::timeout(DATABASE_STATEMENT, client.simple_query("")).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return format!("liveness query: {}", crate::db::describe(&e)),
                Err(_) => return "liveness query: no answer in time".to_string(),
            }
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
