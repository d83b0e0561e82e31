//! Seeded random fault schedules over a rig of hosts.
//!
//! A [`Schedule`] is generated from a seed alone: which faults, on which
//! hosts, starting when and lasting how long. Running it against real
//! processes is not deterministic (the operating system schedules them),
//! but replaying a seed replays the same faults at the same offsets, which
//! is what makes a failure worth chasing. A target is either a fixed host
//! or "whoever leads the scheduler when the fault strikes", resolved when
//! it strikes: faults aimed at the leader are the ones that exercise
//! handover.
//!
//! Two kinds strike at a guest's `COMMIT` in flight (a partition, or a
//! pause with the proxy holding the `COMMIT`) and heal after a successor
//! can be granted but before the server's idle-in-transaction bound ends
//! the stalled transaction ([`HEAL_AT_COMMIT`], or later, once a successor
//! holds the lease, when a loaded machine let it in late; never past
//! [`heal_at_latest`]): the one window in which only the fence keeps a
//! stale commit from landing after the next grant.
//! Each schedule's first fault is one of them, struck while the scheduler
//! is still assigning (once every node is full it commits nothing), so a
//! build without the fence is caught by most schedules; later faults are
//! drawn from the kinds that strike at any moment (a fault at a commit
//! keeps every host for about five seconds: more of them would double a
//! schedule's length).
//!
//! Which seeds a run plays is [`super::seeds`]' business; this module must
//! never pick a seed itself.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::reader::{FeedReader, FeedRecord};
use super::rig::{Rig, Timing};
use crate::proxy::{AtCommit, Mode};

/// Hosts a random schedule runs over: enough for a leader-aimed fault to
/// leave two candidates, few enough for two busy cores.
pub const HOSTS: usize = 3;

// The lease every random schedule watches (faults aimed at "the leader"
// strike its holder) is the example scheduler's, or its shard 0's when it
// runs sharded ([`Rig::scheduler_lease`]). The rig's hosts also run the
// provisioner (and the other shards), whose leases move with the faults
// but are not aimed at.

/// Quiet time after the last fault heals, inside the fault phase.
const TAIL: Duration = Duration::from_millis(200);

/// Longest an orderly shutdown (SIGTERM) may take before a restart fault
/// kills the host instead, as an operator would: the host's own shutdown
/// grace plus start-up slack for a debug build.
const ORDERLY_EXIT: Duration = Duration::from_secs(10);

/// How long a fault striking at a commit waits for the leader's next guest
/// commit before it is given up (disarmed, nothing struck): a task arrives
/// every few tens of milliseconds and the leader assigns it within a
/// reconcile, so a leader that commits nothing for this long has no node
/// with room (or is not running the scheduler any more).
pub const ARM_WINDOW: Duration = Duration::from_secs(1);

/// What the proxy looks for to strike at a guest's commit: only the
/// scheduler writes a task as assigned (the workload creates them
/// pending), so a transaction that sent this is a guest's assignment.
pub const GUEST_COMMIT_MARK: &[u8] = br#""status":"assigned""#;

/// When a fault that struck at a guest's commit heals, after the strike,
/// for lease timing `timing`: half-way between the earliest moment a
/// successor can be granted (the ttl after the last renewal, which came at
/// most a renew interval before the strike, plus a standby's poll at the
/// renew interval) and the server's idle-in-transaction bound
/// ([`leasehold_host::timeouts::DATABASE_STATEMENT`], set by every write
/// transaction), which rolls the stalled transaction back. Healing inside
/// that window delivers the held `COMMIT` while the server still waits for
/// it: the real build's grant is still waiting for it (the fence holds the
/// lease row), a build without the fence has granted already.
pub const fn heal_at_commit(timing: Timing) -> Duration {
    let earliest = timing
        .ttl
        .saturating_add(timing.renew_interval)
        .saturating_add(timing.renew_interval);
    let bound = leasehold_host::timeouts::DATABASE_STATEMENT;
    Duration::from_millis(((earliest.as_millis() + bound.as_millis()) / 2) as u64)
}

/// The latest a fault that struck at a guest's commit heals, after the
/// strike: early enough before the server's idle-in-transaction bound that
/// the held `COMMIT` still reaches a transaction waiting for it.
pub const fn heal_at_latest(_timing: Timing) -> Duration {
    leasehold_host::timeouts::DATABASE_STATEMENT.saturating_sub(HEAL_MARGIN)
}

/// How long before the server's idle bound [`heal_at_latest`] is.
const HEAL_MARGIN: Duration = Duration::from_millis(700);

/// How often a stalled commit's fault looks whether a successor holds the
/// lease.
const SUCCESSOR_POLL: Duration = Duration::from_millis(20);

/// [`heal_at_commit`] for the random schedules' timing.
pub const HEAL_AT_COMMIT: Duration = heal_at_commit(Timing::FAST);

// The window exists: a successor can be granted well before the server
// ends the stalled transaction.
const _: () = assert!(
    HEAL_AT_COMMIT.as_millis()
        > Timing::FAST.ttl.as_millis() + 2 * Timing::FAST.renew_interval.as_millis()
);
const _: () = assert!(HEAL_AT_COMMIT.as_millis() < heal_at_latest(Timing::FAST).as_millis());

/// A small, fast, seedable generator (SplitMix64): enough for schedules,
/// and identical on every platform, so a seed means the same schedule
/// everywhere.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator starting at `seed`.
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

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// What strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL; restarted when the fault ends.
    Kill,
    /// SIGSTOP; SIGCONT when the fault ends.
    Stop,
    /// Black-hole the host's database proxy; healed when the fault ends.
    Partition,
    /// `pg_terminate_backend` on every session of the host (instant).
    Terminate,
    /// `pg_terminate_backend` on the host's liveness (claim) session only
    /// (instant): the process, its pool and its other sessions go on, and
    /// under `crash_detection = "session"` (the default) a standby may be
    /// granted its leases at once while it still runs, so the host must
    /// end every tenure as its session ends, never continue one.
    TerminateLiveness,
    /// SIGTERM (orderly shutdown); started again when the fault ends.
    Restart,
    /// Black-hole the leader's proxy the moment its guest's `COMMIT` is in
    /// flight (the `COMMIT` held); healed [`HEAL_AT_COMMIT`] after the
    /// strike or once a successor holds the lease, whichever is later
    /// (at most [`heal_at_latest`]), delivering it. Always aimed at the
    /// leader.
    PartitionAtCommit,
    /// Hold the leader's guest `COMMIT` in its proxy and SIGSTOP the
    /// leader (a host paused between its last statement and its
    /// `COMMIT`); healed as [`FaultKind::PartitionAtCommit`] is, the
    /// `COMMIT` going on and the host getting SIGCONT. Always aimed at the
    /// leader.
    PauseAtCommit,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 8] = [
        FaultKind::Kill,
        FaultKind::Stop,
        FaultKind::Partition,
        FaultKind::Terminate,
        FaultKind::TerminateLiveness,
        FaultKind::Restart,
        FaultKind::PartitionAtCommit,
        FaultKind::PauseAtCommit,
    ];

    /// The kinds that strike at any moment: every fault after a
    /// schedule's first.
    pub const ANY_TIME: [FaultKind; 6] = [
        FaultKind::Kill,
        FaultKind::Stop,
        FaultKind::Partition,
        FaultKind::Terminate,
        FaultKind::TerminateLiveness,
        FaultKind::Restart,
    ];

    /// The kinds that strike at a guest's commit in flight: a schedule's
    /// first fault.
    pub const AT_COMMIT: [FaultKind; 2] = [FaultKind::PartitionAtCommit, FaultKind::PauseAtCommit];

    /// Whether this kind strikes at a guest's commit in flight.
    pub fn at_commit(self) -> bool {
        Self::AT_COMMIT.contains(&self)
    }
}

/// Which host a fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// This host.
    Host(usize),
    /// Whoever leads the scheduler when the fault strikes (a fixed host if
    /// nobody does).
    Leader,
}

/// One fault of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// Offset from the start of the fault phase.
    pub at: Duration,
    /// What.
    pub kind: FaultKind,
    /// Where.
    pub target: Target,
    /// How long until it is healed.
    pub lasts: Duration,
}

/// A seeded schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The seed it was generated from.
    pub seed: u64,
    /// Hosts it runs over.
    pub hosts: usize,
    /// Node capacities.
    pub nodes: Vec<u64>,
    /// Faults, by start time.
    pub faults: Vec<Fault>,
    /// How long the fault phase lasts (every fault is healed by its end).
    pub length: Duration,
}

impl Schedule {
    /// The schedule of `seed` over `hosts` hosts with lease timing
    /// `timing`.
    pub fn generate(seed: u64, hosts: usize, timing: Timing) -> Self {
        let mut rng = SplitMix::new(seed);
        let ttl_ms = timing.ttl.as_millis() as u64;
        // 30 to 75 slots: some schedules fill every node (capacity is then
        // what the scheduler must respect), most keep assigning throughout.
        let nodes = (0..3).map(|_| 10 + rng.below(16)).collect();
        let count = 4 + rng.below(4) as usize;
        // Each host is free again once its current fault is healed; faults
        // on different hosts may overlap.
        let mut free_at = vec![Duration::ZERO; hosts];
        let mut faults = Vec::new();
        let mut at = Duration::ZERO;
        for n in 0..count {
            at += rng.millis(150, 900);
            // The first fault strikes at a commit, while every schedule's
            // scheduler still has room to assign (see the module comment).
            let kind = if n == 0 {
                FaultKind::AT_COMMIT[rng.below(FaultKind::AT_COMMIT.len() as u64) as usize]
            } else {
                FaultKind::ANY_TIME[rng.below(FaultKind::ANY_TIME.len() as u64) as usize]
            };
            // Only the leader makes guest commits.
            let target = if kind.at_commit() || rng.below(2) == 0 {
                Target::Leader
            } else {
                Target::Host(rng.below(hosts as u64) as usize)
            };
            let lasts = match kind {
                // Waiting for the commit, then the heal: the whole slot,
                // so nothing else strikes meanwhile.
                FaultKind::PartitionAtCommit | FaultKind::PauseAtCommit => {
                    ARM_WINDOW + heal_at_commit(timing)
                }
                FaultKind::Terminate | FaultKind::TerminateLiveness => Duration::ZERO,
                // Past the ttl about half of the time.
                FaultKind::Stop | FaultKind::Partition => rng.millis(ttl_ms / 3, ttl_ms * 5 / 2),
                FaultKind::Kill | FaultKind::Restart => rng.millis(100, ttl_ms * 2),
            };
            // A leader-aimed fault may land on any host: it waits until
            // every host is free; a fixed one waits for its host.
            let ready = match target {
                Target::Host(h) => free_at[h],
                Target::Leader => free_at.iter().copied().max().unwrap_or_default(),
            };
            at = at.max(ready);
            match target {
                Target::Host(h) => free_at[h] = at + lasts,
                Target::Leader => free_at.iter_mut().for_each(|f| *f = at + lasts),
            }
            faults.push(Fault {
                at,
                kind,
                target,
                lasts,
            });
        }
        let length = faults
            .iter()
            .map(|f| f.at + f.lasts)
            .max()
            .unwrap_or_default()
            + TAIL;
        Self {
            seed,
            hosts,
            nodes,
            faults,
            length,
        }
    }

    /// How many faults of each kind.
    pub fn mix(&self) -> BTreeMap<FaultKind, usize> {
        let mut mix = BTreeMap::new();
        for f in &self.faults {
            *mix.entry(f.kind).or_default() += 1;
        }
        mix
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} ({} hosts, nodes {:?}, {:?}):",
            self.seed, self.hosts, self.nodes, self.length
        )?;
        for fault in &self.faults {
            write!(
                f,
                " {:?}@{}ms {:?} for {}ms;",
                fault.kind,
                fault.at.as_millis(),
                fault.target,
                fault.lasts.as_millis()
            )?;
        }
        Ok(())
    }
}

/// What happened while a schedule ran.
#[derive(Debug, Clone, Default)]
pub struct Struck {
    /// The fault, and the host it struck, in order.
    pub faults: Vec<(FaultKind, usize)>,
    /// Epochs of [`Rig::scheduler_lease`] whose holder a kill, an orderly
    /// restart or the end of its liveness session (one that was there to
    /// end) struck
    /// while the database showed it holding the lease actively. Each of
    /// these tenures certainly ends (killed, released on SIGTERM, or ended
    /// by its host as its liveness session ends: a tenure never continues
    /// into a later session), and a grant is the only way to lead again
    /// (L2), so every one of them is followed by a grant at a higher epoch
    /// before anyone leads again.
    pub leader_epochs: BTreeSet<i64>,
    /// Faults at a commit that struck a guest's commit in flight.
    pub commits_struck: usize,
    /// Liveness-session terminations that ended a session (the others
    /// found none: the host was down, or had not claimed its name again
    /// since an earlier fault).
    pub liveness_ended: usize,
    /// Faults at a commit given up after [`ARM_WINDOW`]: the leader made no
    /// guest commit (no node had room).
    pub commits_missed: usize,
    /// What the schedule's feed reader was given: also the checker's copy
    /// of what retention may trim.
    pub feed: FeedRecord,
}

impl Struck {
    /// Handovers the faults that struck make certain: the epoch must
    /// advance at least once per distinct epoch in
    /// [`leader_epochs`](Self::leader_epochs) (with `k` of them, all at or
    /// above the epoch when the faults began, the next leader's epoch is
    /// above the highest, so at least `k` above the first).
    pub fn certain_handovers(&self) -> i64 {
        self.leader_epochs.len() as i64
    }
}

enum Event {
    Strike(usize),
    Heal(usize),
}

/// Run the fault phase of `schedule` against `rig` (whose hosts must run
/// the scheduler): strike and heal every fault at its offset. Every fault
/// is healed when this returns.
pub async fn run(schedule: &Schedule, rig: &mut Rig) -> Struck {
    let mut timeline: Vec<(Duration, Event)> = Vec::new();
    for (i, f) in schedule.faults.iter().enumerate() {
        timeline.push((f.at, Event::Strike(i)));
        timeline.push((f.at + f.lasts, Event::Heal(i)));
    }
    // Heals before strikes at the same instant.
    timeline.sort_by_key(|(at, event)| (*at, matches!(event, Event::Strike(_))));
    // A reader of the change stream and the event log for the whole
    // schedule, across every fault (commits held open at the proxy, rolled
    // back by a partition or a terminated session), beside the API
    // workload and the controllers: the checker's feed rule judges what it
    // was given.
    let reader = FeedReader::start(rig.db.url(), &rig.cluster, "the schedule's feed reader");
    let started = Instant::now();
    let mut hit: Vec<Option<usize>> = vec![None; schedule.faults.len()];
    let mut struck = Struck::default();
    for (at, event) in timeline {
        // The schedule's own clock: faults strike at their offsets.
        tokio::time::sleep_until(started + at).await;
        match event {
            Event::Strike(i) => {
                let fault = schedule.faults[i];
                let host = match fault.target {
                    Target::Host(h) => h,
                    Target::Leader => current_leader(rig).await.unwrap_or(i % schedule.hosts),
                };
                // Read before the strike: after it the row may show a
                // successor already.
                let held = if matches!(
                    fault.kind,
                    FaultKind::Kill | FaultKind::Restart | FaultKind::TerminateLiveness
                ) {
                    held_by(rig, host).await
                } else {
                    None
                };
                if fault.kind.at_commit() {
                    // Struck and healed here: the heal is timed from the
                    // strike, not from the schedule's offsets.
                    if strike_at_commit(rig, fault.kind, host).await {
                        struck.commits_struck += 1;
                        struck.faults.push((fault.kind, host));
                    } else {
                        struck.commits_missed += 1;
                    }
                    continue;
                }
                let ended = strike(rig, fault.kind, host).await;
                if ended && fault.kind == FaultKind::TerminateLiveness {
                    struck.liveness_ended += 1;
                }
                if ended && let Some(epoch) = held {
                    struck.leader_epochs.insert(epoch);
                }
                hit[i] = Some(host);
                struck.faults.push((fault.kind, host));
            }
            Event::Heal(i) => {
                if let Some(host) = hit[i] {
                    heal(rig, schedule.faults[i].kind, host).await;
                }
            }
        }
    }
    // Retention stops before the reader does, so nothing is trimmed that
    // the reader (the checker's copy) did not read.
    rig.stop_trimmer().await;
    // Every fault is healed: a commit still held open ends within the
    // server's idle-in-transaction bound.
    let record = reader
        .finish(leasehold_host::timeouts::DATABASE_STATEMENT * 4)
        .await;
    let violations =
        super::checker::check_feed(rig.db.url(), &rig.cluster, std::slice::from_ref(&record)).await;
    assert!(
        violations.is_empty(),
        "seed {}: the feed reader was not given every committed change and event exactly once ({} given, read through {:?}): {violations:#?}",
        schedule.seed,
        record.delivered.len(),
        record.through
    );
    struck.feed = record;
    struck
}

/// The epoch at which running host `host` holds [`Rig::scheduler_lease`]
/// actively by the
/// lease row, if it does.
async fn held_by(rig: &mut Rig, host: usize) -> Option<i64> {
    if !rig.hosts[host].replica.running() {
        return None;
    }
    let row = rig.lease(&rig.scheduler_lease()).await?;
    (row.active && row.holder == rig.hosts[host].holder).then_some(row.epoch)
}

/// Who leads the scheduler by the lease row, if anyone.
async fn current_leader(rig: &Rig) -> Option<usize> {
    let row = rig.lease(&rig.scheduler_lease()).await?;
    if row.active {
        rig.index_of(&row.holder)
    } else {
        None
    }
}

/// Arm host `host`'s proxy for its guest's next commit; if that comes
/// within [`ARM_WINDOW`], stall it (`kind`), wait [`heal_at_commit`] of the
/// host's timing from the strike, and heal. Whether it struck.
async fn strike_at_commit(rig: &mut Rig, kind: FaultKind, host: usize) -> bool {
    let h = &mut rig.hosts[host];
    if !h.replica.running() {
        return false;
    }
    let at = match kind {
        FaultKind::PauseAtCommit => AtCommit::Hold,
        _ => AtCommit::Partition,
    };
    let armed = h.proxy.arm_carrying(at, GUEST_COMMIT_MARK);
    match tokio::time::timeout(ARM_WINDOW, armed).await {
        Ok(Ok(())) => {}
        // No guest commit within the window (or the proxy went away).
        _ => {
            h.proxy.disarm();
            return false;
        }
    }
    let struck = Instant::now();
    if at == AtCommit::Hold {
        h.replica.signal("STOP");
    }
    let timing = h.timing;
    // The fault's own length: the stall must outlast the ttl and end
    // before the server's idle bound. Past the planned heal, it lasts
    // until a successor holds the lease (so a stale commit delivered now
    // lands after the next grant, however late a loaded machine let the
    // successor in), but never past `heal_at_latest`. A real build's
    // successor cannot be granted while the stalled commit holds its
    // tenure's fence, so there the stall lasts to that bound.
    let stalled_epoch = rig.lease(&rig.scheduler_lease()).await.map(|row| row.epoch);
    tokio::time::sleep_until(struck + heal_at_commit(timing)).await;
    while Instant::now() < struck + heal_at_latest(timing) {
        let now = rig.lease(&rig.scheduler_lease()).await.map(|row| row.epoch);
        if now > stalled_epoch {
            break;
        }
        tokio::time::sleep(SUCCESSOR_POLL).await;
    }
    let h = &mut rig.hosts[host];
    match at {
        AtCommit::Hold => {
            h.proxy.release();
            h.replica.signal("CONT");
        }
        _ => h.proxy.set(Mode::Pass),
    }
    true
}

/// Strike `kind` at host `host`. Whether it certainly ends the host's
/// tenures (for [`Struck::leader_epochs`]): a kill, an orderly restart of
/// a running host, or a liveness session that was there to terminate (none
/// is while the host reconnects after an earlier fault; it then holds no
/// tenure it could continue anyway).
async fn strike(rig: &mut Rig, kind: FaultKind, host: usize) -> bool {
    let h = &mut rig.hosts[host];
    match kind {
        FaultKind::Kill => {
            h.replica.kill().await;
            true
        }
        FaultKind::Stop => {
            if h.replica.running() {
                h.replica.signal("STOP");
            }
            false
        }
        FaultKind::Partition => {
            h.proxy.set(Mode::Blackhole);
            false
        }
        FaultKind::Terminate => {
            rig.terminate_backends(host).await;
            false
        }
        FaultKind::TerminateLiveness => rig.terminate_liveness(host).await > 0,
        FaultKind::Restart => {
            let running = h.replica.running();
            if running {
                h.replica.signal("TERM");
            }
            running
        }
        // Struck and healed by `strike_at_commit`.
        FaultKind::PartitionAtCommit | FaultKind::PauseAtCommit => false,
    }
}

async fn heal(rig: &mut Rig, kind: FaultKind, host: usize) {
    let h = &mut rig.hosts[host];
    match kind {
        FaultKind::Kill => {
            if !h.replica.running() {
                h.replica.restart();
            }
        }
        FaultKind::Stop => {
            if h.replica.running() {
                h.replica.signal("CONT");
            }
        }
        FaultKind::Partition => h.proxy.set(Mode::Pass),
        FaultKind::Terminate | FaultKind::TerminateLiveness => {}
        FaultKind::Restart => {
            // An orderly shutdown finishes within its grace period; a host
            // that did not is killed, as an operator would.
            if h.replica.exited(ORDERLY_EXIT).await.is_none() {
                h.replica.kill().await;
            }
            h.replica.restart();
        }
        FaultKind::PartitionAtCommit | FaultKind::PauseAtCommit => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::faults::rig::Timing;
    use crate::faults::seeds;

    /// Seed 1 over [`HOSTS`] hosts with [`Timing::FAST`]. Re-pinned
    /// deliberately twice: when the kinds that strike at a commit were
    /// added (the first fault of every schedule is one of them since), and
    /// when the liveness session's termination joined the kinds that strike
    /// at any moment (issue 16). Neither time had a seed that found a bug
    /// been recorded, so no recorded seed changed meaning.
    const PINNED_SEED_1: &str = "seed 1 (3 hosts, nodes [11, 17, 24], 8.651s): \
        PartitionAtCommit@217ms Leader for 4150ms; Terminate@4367ms Leader for 0ms; \
        Terminate@4641ms Leader for 0ms; TerminateLiveness@5439ms Leader for 0ms; \
        Terminate@5641ms Host(2) for 0ms; TerminateLiveness@5854ms Leader for 0ms; \
        Partition@6569ms Host(1) for 1882ms;";

    /// Replaying a seed (`LEASEHOLD_FAULT_SEED`) replays its schedule: for
    /// every seed CI runs and a few fresh ones, generating twice gives the
    /// same nodes, faults, targets, offsets and lengths, and so the same
    /// printed line.
    #[test]
    fn a_seed_always_makes_the_same_schedule() {
        let ttl = Timing::FAST;
        let fresh: Vec<u64> = (0..3).map(|_| seeds::fresh()).collect();
        for &seed in seeds::FIXED.iter().chain(&fresh) {
            let a = Schedule::generate(seed, HOSTS, ttl);
            let b = Schedule::generate(seed, HOSTS, ttl);
            assert_eq!(a, b, "seed {seed}");
            assert_eq!(a.to_string(), b.to_string(), "seed {seed}");
            assert_ne!(a, Schedule::generate(seed + 1, HOSTS, ttl), "seed {seed}");
        }
        // Pinned: the generator is the same on every platform and in every
        // later version, or a recorded seed stops meaning what it found.
        assert_eq!(Schedule::generate(1, HOSTS, ttl).to_string(), PINNED_SEED_1);
    }

    #[test]
    fn faults_on_one_host_never_overlap() {
        for seed in 0..200 {
            let s = Schedule::generate(seed, HOSTS, Timing::FAST);
            for (i, a) in s.faults.iter().enumerate() {
                for b in &s.faults[i + 1..] {
                    let same = match (a.target, b.target) {
                        (Target::Host(x), Target::Host(y)) => x == y,
                        _ => true,
                    };
                    assert!(
                        !same || b.at >= a.at + a.lasts,
                        "seed {seed}: {a:?} overlaps {b:?}"
                    );
                }
            }
        }
    }

    /// Every schedule can catch a build without the fence: its first fault
    /// strikes the leader at a commit, aimed at the leader (only it makes
    /// guest commits) and keeping the slot for its wait and its heal; the
    /// others strike at any moment.
    #[test]
    fn every_schedule_strikes_the_leader_at_a_commit_first() {
        for seed in 0..200 {
            let s = Schedule::generate(seed, HOSTS, Timing::FAST);
            assert!(s.faults[0].kind.at_commit(), "seed {seed}: {s}");
            assert!(
                s.faults[1..].iter().all(|f| !f.kind.at_commit()),
                "seed {seed}: {s}"
            );
            for f in s.faults.iter().filter(|f| f.kind.at_commit()) {
                assert_eq!(f.target, Target::Leader, "seed {seed}: {s}");
                assert_eq!(f.lasts, ARM_WINDOW + HEAL_AT_COMMIT, "seed {seed}: {s}");
            }
        }
    }
}
