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
    /// Longest a single reconcile call may run before the guest is torn down.
    RECONCILE_DEADLINE = Duration::from_secs(30);
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
    /// Longest `GET /v1/events` long-poll before it returns an empty page.
    EVENTS_LONG_POLL_MAX = Duration::from_secs(30);
    /// How often a running host re-checks the database identity, so one
    /// whose connection string now reaches another server stops leading.
    IDENTITY_RECHECK = Duration::from_secs(5);
    /// Longest wait for recording the end of a tenure (the release); past
    /// it the lease simply expires.
    TENURE_END_RECORD = Duration::from_secs(3);
    /// Fallback poll of the change feed when no notification arrives
    /// (notifications can be lost across a reconnect).
    FEED_POLL = Duration::from_secs(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_defaults_keep_the_holder_fencing_itself_first() {
        assert!(RENEW_INTERVAL < RENEW_DEADLINE);
        assert!(RENEW_DEADLINE < LEASE_TTL);
        assert!(ALL.iter().all(|(_, d)| !d.is_zero()));
    }
}
