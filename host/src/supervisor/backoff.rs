//! Bounded exponential backoff with jitter.

use std::time::Duration;

use rand::Rng;

/// Delays that double from `min` up to `max`; each is drawn uniformly from
/// its upper half so that replicas restarted together do not retry in step.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// A backoff between `min` and `max` (`max` is raised to `min` if lower).
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max: max.max(min),
            attempt: 0,
        }
    }

    /// The upper bound of the next delay, without jitter.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(31)).unwrap_or(u32::MAX);
        self.min.saturating_mul(factor).min(self.max)
    }

    /// The next delay, and advance.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let half = ceiling / 2;
        let spread = (ceiling - half).as_nanos() as u64;
        let jitter = if spread == 0 {
            0
        } else {
            rand::rng().random_range(0..=spread)
        };
        (half + Duration::from_nanos(jitter)).max(self.min.min(ceiling))
    }

    /// Start over after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// How many delays were taken since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_within_bounds_and_reset() {
        let min = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        let mut backoff = Backoff::new(min, max);
        let mut ceilings = Vec::new();
        for _ in 0..10 {
            let ceiling = backoff.ceiling();
            let delay = backoff.next_delay();
            assert!(
                delay >= min && delay <= ceiling,
                "{delay:?} outside [{min:?}, {ceiling:?}]"
            );
            assert!(delay >= ceiling / 2);
            ceilings.push(ceiling);
        }
        assert_eq!(ceilings[0], min);
        assert_eq!(ceilings[1], min * 2);
        assert_eq!(*ceilings.last().unwrap(), max);
        backoff.reset();
        assert_eq!(backoff.ceiling(), min);
    }
}
