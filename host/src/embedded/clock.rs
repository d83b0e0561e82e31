//! The embedded backend's clock: what "now" is for every process on one
//! data directory.
//!
//! Expiry is judged by the machine's monotonic clock since boot
//! (`CLOCK_BOOTTIME`, shared by every process of the machine and counting
//! suspended time) together with the boot's id: a wall-clock step neither
//! extends nor shortens a lease, and a grant made before the machine
//! restarted is expired after it (every process that could hold it died
//! with the boot). Times shown and stored for people (grants, events,
//! changes, tenure history) are the wall clock, in microseconds since the
//! Unix epoch, as PostgreSQL keeps them.

use std::sync::OnceLock;

use chrono::{DateTime, Utc};

/// One reading of both clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Wall clock, microseconds since the Unix epoch.
    pub utc: i64,
    /// `CLOCK_BOOTTIME`, microseconds.
    pub mono: i64,
}

impl Now {
    /// Read both clocks.
    pub fn read() -> Self {
        Self {
            utc: micros(Utc::now()),
            mono: boottime_micros(),
        }
    }

    /// The wall-clock reading as a time.
    pub fn at(&self) -> DateTime<Utc> {
        time(self.utc)
    }
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), read once. Where
/// the kernel does not say, one id per process: every deadline of another
/// process then counts as passed, which errs towards expiry (a takeover
/// waits for nothing) only where the host cannot tell boots apart.
pub fn boot_id() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|id| id.trim().to_string())
            .ok()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("process-{}", uuid::Uuid::new_v4()))
    })
}

/// `CLOCK_BOOTTIME` in microseconds.
fn boottime_micros() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(result, 0, "CLOCK_BOOTTIME is readable on Linux");
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000
}

/// Microseconds since the Unix epoch.
pub fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// The time `micros` microseconds after the Unix epoch.
pub fn time(micros: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_micros(micros).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `duration` in microseconds, saturating.
pub fn duration_micros(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_only_grows_and_the_boot_has_one_id() {
        let a = Now::read();
        let b = Now::read();
        assert!(b.mono >= a.mono);
        assert_eq!(boot_id(), boot_id());
        assert!(!boot_id().is_empty());
        assert_eq!(time(micros(a.at())), a.at());
    }
}
