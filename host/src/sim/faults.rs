//! The faults a simulation injects, their weights, and the seeded choice
//! of which strikes where.
//!
//! A fault strikes at an *opportunity*: a guest's store read, its commit,
//! its outbound request, or the moment between two reconciles. Each
//! opportunity of a run has a place, (step, n-th opportunity of the step),
//! and every fault injected is recorded with its place, so a run can be
//! repeated with a fixed list of faults instead of random ones: that is
//! how a failed run is shrunk.

use std::fmt;

use crate::limits::{SIM_LATE_DELIVERY_MAX_STEPS, SIM_MAX_FAULT_WEIGHT};
use crate::timeouts::SIM_CLOCK_JUMP_MAX;

/// The chance that one fault kind of weight 1 strikes at one opportunity
/// where it can: with every kind at weight 1, about one reconcile in six
/// meets a fault, and a run of 200 steps a few dozen.
pub const BASE_CHANCE: f64 = 0.02;

/// Where a fault can strike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opportunity {
    /// Between two reconciles.
    Between,
    /// A guest's store read (`get`, `list`).
    Read,
    /// A guest's commit.
    Commit,
    /// A guest's outbound request, after the host admitted it.
    Send,
}

/// The kinds of fault, each named by its key in a world file's `[faults]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// The lease is lost: the guest is aborted as in production, a new
    /// tenure starts later at the next epoch and resyncs.
    LeaseLost,
    /// Someone else writes the commit's first object just before it.
    Conflict,
    /// The store cannot be reached: nothing read or written.
    StoreUnavailable,
    /// The commit lands, its reply is lost: the guest hears `unavailable`.
    CommitReplyLost,
    /// The request is refused before it is sent (connection refused).
    RequestRefused,
    /// The request times out before the service saw it.
    RequestTimeout,
    /// The service applies the request, and the reply is lost.
    ReplyLost,
    /// The service answers 503 and applies nothing.
    ServerError,
    /// The service answers late (the virtual clock moves on).
    Slow,
    /// The key reconciled last is woken again, as by a change delivered
    /// twice.
    DuplicateWakeup,
    /// The change stream is read late: changes wait and merge with later
    /// ones into fewer reconciles.
    MergedWakeup,
    /// The virtual clock jumps ahead.
    ClockJump,
    /// The guest instance is replaced by a fresh one within its tenure
    /// (its memory lost), which resyncs.
    FreshInstance,
}

impl FaultKind {
    /// Every kind, in the order weights and traces list them.
    pub const ALL: [FaultKind; 13] = [
        FaultKind::LeaseLost,
        FaultKind::Conflict,
        FaultKind::StoreUnavailable,
        FaultKind::CommitReplyLost,
        FaultKind::RequestRefused,
        FaultKind::RequestTimeout,
        FaultKind::ReplyLost,
        FaultKind::ServerError,
        FaultKind::Slow,
        FaultKind::DuplicateWakeup,
        FaultKind::MergedWakeup,
        FaultKind::ClockJump,
        FaultKind::FreshInstance,
    ];

    /// The key in a world file's `[faults]`, and the name in traces.
    pub fn key(self) -> &'static str {
        match self {
            FaultKind::LeaseLost => "lease_lost",
            FaultKind::Conflict => "conflict",
            FaultKind::StoreUnavailable => "store_unavailable",
            FaultKind::CommitReplyLost => "commit_reply_lost",
            FaultKind::RequestRefused => "request_refused",
            FaultKind::RequestTimeout => "request_timeout",
            FaultKind::ReplyLost => "reply_lost",
            FaultKind::ServerError => "server_error",
            FaultKind::Slow => "slow",
            FaultKind::DuplicateWakeup => "duplicate_wakeup",
            FaultKind::MergedWakeup => "merged_wakeup",
            FaultKind::ClockJump => "clock_jump",
            FaultKind::FreshInstance => "fresh_instance",
        }
    }

    /// The kind a `[faults]` key names.
    pub fn parse(key: &str) -> Option<FaultKind> {
        Self::ALL.into_iter().find(|kind| kind.key() == key)
    }

    fn strikes_at(self, opportunity: Opportunity) -> bool {
        use FaultKind::*;
        match opportunity {
            Opportunity::Between => matches!(
                self,
                LeaseLost | DuplicateWakeup | MergedWakeup | ClockJump | FreshInstance
            ),
            Opportunity::Read => matches!(self, LeaseLost | StoreUnavailable),
            Opportunity::Commit => {
                matches!(
                    self,
                    LeaseLost | Conflict | StoreUnavailable | CommitReplyLost
                )
            }
            Opportunity::Send => matches!(
                self,
                LeaseLost | RequestRefused | RequestTimeout | ReplyLost | ServerError | Slow
            ),
        }
    }

    /// How many variants the kind has at `opportunity` (a lease lost
    /// before or after a commit, say).
    fn variants(self, opportunity: Opportunity) -> u64 {
        match (self, opportunity) {
            (FaultKind::LeaseLost, Opportunity::Commit) => 2,
            (FaultKind::LeaseLost, Opportunity::Send) => 3,
            _ => 1,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// How often each kind strikes, relative to [`BASE_CHANCE`]: 1 by
/// default, 0 off, at most [`SIM_MAX_FAULT_WEIGHT`].
#[derive(Debug, Clone, PartialEq)]
pub struct Weights([f64; FaultKind::ALL.len()]);

impl Default for Weights {
    fn default() -> Self {
        Self([1.0; FaultKind::ALL.len()])
    }
}

impl Weights {
    /// Set `kind`'s weight; what is wrong with `weight` otherwise.
    pub fn set(&mut self, kind: FaultKind, weight: f64) -> Result<(), String> {
        if !weight.is_finite() || !(0.0..=SIM_MAX_FAULT_WEIGHT).contains(&weight) {
            return Err(format!(
                "is {weight}; a weight is a number from 0 (off) to {SIM_MAX_FAULT_WEIGHT} \
                 (1 is the default)"
            ));
        }
        self.0[kind as usize] = weight;
        Ok(())
    }

    /// The weight of `kind`.
    pub fn get(&self, kind: FaultKind) -> f64 {
        self.0[kind as usize]
    }
}

/// One fault injected into a run: where, what, and its parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    /// The step.
    pub step: u64,
    /// Which opportunity of the step (0 = the first).
    pub at: u32,
    /// What kind of opportunity it struck at.
    pub opportunity: Opportunity,
    /// The kind.
    pub kind: FaultKind,
    /// Which form of the kind (see [`Injected::describe`]).
    pub variant: u64,
    /// Its size: milliseconds of delay or of a clock jump, steps before a
    /// late delivery, an index for a duplicate wake-up.
    pub amount: u64,
}

impl Injected {
    /// What the fault does, for traces.
    pub fn describe(&self) -> String {
        match (self.kind, self.variant) {
            (FaultKind::LeaseLost, _) => format!("lease_lost ({})", self.lease_lost_form()),
            (FaultKind::Slow, _) => format!("slow (answered after {} ms)", self.amount),
            (FaultKind::ClockJump, _) => format!("clock_jump (+{} ms)", self.amount),
            (kind, _) => kind.key().to_string(),
        }
    }

    fn lease_lost_form(&self) -> String {
        match (self.opportunity, self.variant) {
            (Opportunity::Commit, 0) => "before the commit".into(),
            (Opportunity::Commit, _) => "after the commit landed, before its reply".into(),
            (Opportunity::Send, 0) => "before the request was sent".into(),
            (Opportunity::Send, 1) => format!(
                "while the request was in flight; it arrives {} step(s) later",
                self.amount
            ),
            (Opportunity::Send, _) => {
                "after the service applied the request, before its reply".into()
            }
            (Opportunity::Read, _) => "during a read".into(),
            (Opportunity::Between, _) => "between reconciles".into(),
        }
    }
}

/// SplitMix64: small, fast and the same on every platform and in every
/// build, which replays need (a library generator may change its stream
/// between versions).
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A number in `[low, high]` (`low` if the range is empty).
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low + 1)
    }
}

/// How a run's faults are chosen.
#[derive(Debug, Clone)]
enum Mode {
    /// At random, by the weights.
    Random { rng: SplitMix, weights: Weights },
    /// Exactly these, at their places (a shrinking run).
    Scheduled(Vec<Injected>),
}

/// The faults of one run: chosen at each opportunity, recorded.
#[derive(Debug, Clone)]
pub struct Plan {
    mode: Mode,
    step: u64,
    at: u32,
    enabled: bool,
    injected: Vec<Injected>,
}

impl Plan {
    /// Faults drawn at random from `seed` by `weights`.
    pub fn random(seed: u64, weights: Weights) -> Self {
        Self::with(Mode::Random {
            rng: SplitMix::new(seed),
            weights,
        })
    }

    /// Exactly `faults`, each at its place if the run reaches it with an
    /// opportunity it can strike at.
    pub fn scheduled(faults: Vec<Injected>) -> Self {
        Self::with(Mode::Scheduled(faults))
    }

    fn with(mode: Mode) -> Self {
        Self {
            mode,
            step: 0,
            at: 0,
            enabled: true,
            injected: Vec::new(),
        }
    }

    /// A new step begins: its opportunities count from 0.
    pub fn begin_step(&mut self, step: u64) {
        self.step = step;
        self.at = 0;
    }

    /// Stop injecting (the world settles).
    pub fn disable(&mut self) {
        self.enabled = false;
    }

    /// Every fault injected so far, in order.
    pub fn injected(&self) -> &[Injected] {
        &self.injected
    }

    /// The fault that strikes at this opportunity, if any (recorded).
    pub fn decide(&mut self, opportunity: Opportunity) -> Option<Injected> {
        if !self.enabled {
            return None;
        }
        let (step, at) = (self.step, self.at);
        self.at += 1;
        let chosen = match &mut self.mode {
            Mode::Random { rng, weights } => {
                let kinds: Vec<(FaultKind, f64)> = FaultKind::ALL
                    .into_iter()
                    .filter(|kind| kind.strikes_at(opportunity))
                    .map(|kind| (kind, weights.get(kind) * BASE_CHANCE))
                    .filter(|(_, chance)| *chance > 0.0)
                    .collect();
                let total: f64 = kinds.iter().map(|(_, chance)| chance).sum();
                // Two draws at every opportunity, struck or not, so the
                // stream stays in step with the run.
                let (strike, pick) = (rng.unit(), rng.unit());
                if kinds.is_empty() || strike >= total.min(1.0) {
                    return None;
                }
                let mut left = pick * total;
                let kind = kinds
                    .iter()
                    .find(|(_, chance)| {
                        left -= chance;
                        left < 0.0
                    })
                    .map_or(kinds[kinds.len() - 1].0, |(kind, _)| *kind);
                let variant = rng.between(0, kind.variants(opportunity) - 1);
                let amount = match (kind, variant) {
                    (FaultKind::Slow, _) => rng.between(1, 5_000),
                    (FaultKind::ClockJump, _) => {
                        rng.between(1_000, SIM_CLOCK_JUMP_MAX.as_millis() as u64)
                    }
                    (FaultKind::LeaseLost, 1) if opportunity == Opportunity::Send => {
                        rng.between(1, SIM_LATE_DELIVERY_MAX_STEPS)
                    }
                    (FaultKind::DuplicateWakeup, _) => rng.between(0, 1 << 20),
                    _ => 0,
                };
                Injected {
                    step,
                    at,
                    opportunity,
                    kind,
                    variant,
                    amount,
                }
            }
            Mode::Scheduled(faults) => {
                let found = faults
                    .iter()
                    .position(|f| f.step == step && f.at == at && f.opportunity == opportunity)?;
                faults.remove(found)
            }
        };
        self.injected.push(chosen.clone());
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same seed injects the same faults at the same places; a
    /// scheduled plan injects exactly its list where the kinds fit.
    #[test]
    fn faults_repeat_with_their_seed_and_a_schedule_replays_them() {
        let draw = |seed| {
            let mut plan = Plan::random(seed, Weights::default());
            for step in 1..=300 {
                plan.begin_step(step);
                for opportunity in [
                    Opportunity::Between,
                    Opportunity::Read,
                    Opportunity::Commit,
                    Opportunity::Send,
                ] {
                    plan.decide(opportunity);
                }
            }
            plan.injected().to_vec()
        };
        let faults = draw(11);
        assert_eq!(faults, draw(11));
        assert_ne!(faults, draw(12));
        assert!(faults.len() > 10, "{}", faults.len());
        let kinds: std::collections::BTreeSet<_> = faults.iter().map(|f| f.kind).collect();
        assert!(kinds.len() >= 8, "most kinds appear: {kinds:?}");

        let mut replay = Plan::scheduled(faults.clone());
        for step in 1..=300 {
            replay.begin_step(step);
            for opportunity in [
                Opportunity::Between,
                Opportunity::Read,
                Opportunity::Commit,
                Opportunity::Send,
            ] {
                replay.decide(opportunity);
            }
        }
        assert_eq!(replay.injected(), faults.as_slice());
    }

    /// A weight of 0 turns a kind off; the others still strike.
    #[test]
    fn a_zero_weight_turns_a_kind_off() {
        let mut weights = Weights::default();
        weights.set(FaultKind::LeaseLost, 0.0).unwrap();
        let mut plan = Plan::random(3, weights);
        for step in 1..=2000 {
            plan.begin_step(step);
            plan.decide(Opportunity::Send);
        }
        assert!(!plan.injected().is_empty());
        assert!(
            plan.injected()
                .iter()
                .all(|f| f.kind != FaultKind::LeaseLost)
        );
        assert!(Weights::default().set(FaultKind::Slow, -1.0).is_err());
        assert!(Weights::default().set(FaultKind::Slow, f64::NAN).is_err());
    }
}
