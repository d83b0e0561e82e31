//! Fair placement of leases across the live hosts of a cluster.
//!
//! Each host beats its heartbeat into the host registry
//! ([`HostRegistry::heartbeat`]: one round trip per beat, however many
//! leases it holds) and learns there the other live hosts, the
//! controllers each can run and how many leases each holds. From that
//! view a host's **fair share** is ⌈Σ 1/kₗ⌉ over the leases ℓ it can run,
//! kₗ being the live hosts (itself included) able to run ℓ: with every
//! host able to run every lease, ⌈leases ÷ live hosts⌉ ([`fair_share`]).
//!
//! - **Acquiring**: a supervisor asks its [`Seat`] before each acquire. It
//!   may go ahead while this host holds (or is acquiring) fewer than its
//!   share + `slack` leases, or when its lease lapsed (neither released
//!   nor live by the database clock: its holder stopped renewing, so
//!   placement never delays a takeover the lease protocol allows, however
//!   live that holder still looks in the registry), or when no other live
//!   host able to run the lease is below its own share + `slack` (so
//!   placement never leaves a lease without a holder: a single host takes
//!   every lease at once, and the survivors of a crash take the dead
//!   host's leases at once); that last case is decided only on a view
//!   fetched after the supervisor asked (one registry round trip), never
//!   on a regular beat's, which may not show a host that joined since and
//!   for which another host released the lease. A refused supervisor stands by and asks again
//!   whenever the view changes; a refusal on a view from the regular beat
//!   also asks for a fresh view at once (one per beat: a refusal on a view
//!   fetched for a refusal waits for the next beat).
//! - **Handing over**: a host holding more than its share + `slack`, while
//!   another live host able to run one of its leases holds fewer than its
//!   share, hands one lease over by orderly release (the ≤ 100 ms path:
//!   the guest finishes its reconcile, the lease is released and standbys
//!   are woken), one at a time, each with a fresh view, never below its
//!   share, and only a lease held at least `min_tenure` (no flapping).
//!
//! Must never: decide a grant (the authority does; placement only decides
//! whether to ask), or hand a lease over while another handover of this
//! host is in flight.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::authority::LeaseTiming;
use crate::authority::hosts::{HostRegistry, PeerHost, RegistryView};

/// Placement settings (`[placement]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementSettings {
    /// Whether placement runs at all (the default, since the fault suite's
    /// random schedules run with it; before, the default was off); off,
    /// every host takes every free lease it can.
    pub enabled: bool,
    /// How many leases above its fair share a host may hold before it
    /// hands one over (and may take while others are below theirs).
    pub slack: usize,
    /// A lease is never handed over before it was held this long.
    pub min_tenure: Duration,
}

impl Default for PlacementSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            slack: 0,
            min_tenure: crate::timeouts::PLACEMENT_MIN_TENURE,
        }
    }
}

/// Why a placement decision moved a lease (the `reason` label of
/// `leasehold_placement_moves_total`, and the reason the lease authority
/// records with the lease's last move).
pub use crate::authority::MoveReason;

/// One host as the share arithmetic sees it: the leases it can run.
pub trait Runs {
    /// Whether this host can run lease `name`.
    fn runs(&self, name: &str) -> bool;
}

impl Runs for PeerHost {
    fn runs(&self, name: &str) -> bool {
        self.controllers.iter().any(|c| c == name)
    }
}

impl Runs for Vec<String> {
    fn runs(&self, name: &str) -> bool {
        self.iter().any(|c| c == name)
    }
}

/// The fair share of a host able to run `leases`, among the live hosts
/// `others` (itself not included): ⌈Σ 1/kₗ⌉, kₗ = 1 + the others able to
/// run ℓ. Exact (rational) arithmetic: 12 leases on 3 hosts is 4, never 5.
pub fn fair_share<R: Runs>(leases: &[String], others: &[R]) -> usize {
    // Group the leases by how many hosts can run them: Σ count_k / k.
    let mut by_hosts: BTreeMap<u128, u128> = BTreeMap::new();
    for lease in leases {
        let k = 1 + others.iter().filter(|o| o.runs(lease)).count() as u128;
        *by_hosts.entry(k).or_default() += 1;
    }
    let mut denominator: u128 = 1;
    for k in by_hosts.keys() {
        denominator = lcm(denominator, *k);
        if denominator > 1 << 64 {
            // Beyond any real cluster; a float is close enough there.
            let sum: f64 = by_hosts.iter().map(|(k, n)| *n as f64 / *k as f64).sum();
            return sum.ceil() as usize;
        }
    }
    let numerator: u128 = by_hosts.iter().map(|(k, n)| n * (denominator / k)).sum();
    numerator.div_ceil(denominator) as usize
}

fn gcd(a: u128, b: u128) -> u128 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: u128, b: u128) -> u128 {
    a / gcd(a, b) * b
}

/// The view of the other live hosts, as the last heartbeat found it.
#[derive(Debug, Clone, Default)]
struct View {
    peers: Vec<PeerHost>,
    /// This host's leases that lapsed (see [`RegistryView::lapsed`]).
    lapsed: Vec<String>,
    /// Fetched because a seat asked for a fresh view (a refusal, or a take
    /// beyond the share, which is only decided on such a view): a refusal
    /// on this view waits for the next regular beat instead of asking
    /// again.
    answers_refusal: bool,
}

impl View {
    fn from_registry(view: RegistryView, answers_refusal: bool) -> Self {
        Self {
            peers: view.peers,
            lapsed: view.lapsed,
            answers_refusal,
        }
    }
}

impl View {
    /// `peer`'s own share (as this host sees the cluster: `mine` runs on
    /// this host).
    fn share_of(&self, peer: &PeerHost, mine: &Vec<String>) -> usize {
        let mut others: Vec<&dyn Runs> = self
            .peers
            .iter()
            .filter(|p| p.holder != peer.holder)
            .map(|p| p as &dyn Runs)
            .collect();
        others.push(mine);
        let others: Vec<DynRuns<'_>> = others.into_iter().map(DynRuns).collect();
        fair_share(&peer.controllers, &others)
    }
}

struct DynRuns<'a>(&'a dyn Runs);

impl Runs for DynRuns<'_> {
    fn runs(&self, name: &str) -> bool {
        self.0.runs(name)
    }
}

/// Where one controller of this host stands.
#[derive(Debug)]
enum Seated {
    /// Not holding its lease (nor asking for it).
    Standby,
    /// Allowed to acquire; the acquire is in flight.
    Acquiring,
    /// Leading since the instant.
    Leading(Instant),
}

struct Member {
    state: Seated,
    timing: LeaseTiming,
    /// Set to true to ask the tenure to hand its lease over.
    handover: watch::Sender<bool>,
}

struct Local {
    members: BTreeMap<String, Member>,
    view: View,
    /// A handover asked for and not yet ended.
    handing_over: Option<String>,
    /// A refusal asked for a fresh view that no beat has begun to fetch.
    refresh_asked: bool,
    /// Deregistered: no more heartbeats.
    stopped: bool,
}

impl Local {
    fn names(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    fn held(&self) -> usize {
        self.members
            .values()
            .filter(|m| !matches!(m.state, Seated::Standby))
            .count()
    }
}

struct Inner {
    registry: Arc<dyn HostRegistry>,
    cluster: String,
    holder: String,
    settings: PlacementSettings,
    local: Mutex<Local>,
    /// Bumped whenever the view or a seat changed: standbys ask again.
    changed: watch::Sender<u64>,
    /// Wakes the loop for a fresh heartbeat now.
    refresh: Notify,
}

impl Inner {
    fn local(&self) -> std::sync::MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// This host's placement: a handle shared by its supervisors (through the
/// [`super::Renewer`]) and its service. Cheap to clone.
#[derive(Clone)]
pub struct Placement {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placement")
            .field("cluster", &self.inner.cluster)
            .field("holder", &self.inner.holder)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Placement {
    /// Start placing the leases of `holder` in `cluster` with `settings`,
    /// beating into `registry`. The beat loop ends when the last handle is
    /// dropped or [`Placement::deregister`] was called.
    pub fn start(
        registry: Arc<dyn HostRegistry>,
        cluster: &str,
        holder: &str,
        settings: PlacementSettings,
    ) -> Self {
        let (changed, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            registry,
            cluster: cluster.to_string(),
            holder: holder.to_string(),
            settings,
            local: Mutex::new(Local {
                members: BTreeMap::new(),
                view: View::default(),
                handing_over: None,
                refresh_asked: false,
                stopped: false,
            }),
            changed,
            refresh: Notify::new(),
        });
        if settings.enabled {
            tokio::spawn(beat_loop(Arc::downgrade(&inner)));
        }
        Self { inner }
    }

    /// Seat the controller `name` (its lease) with `timing`; dropping the
    /// seat removes it.
    pub fn join(&self, name: &str, timing: LeaseTiming) -> Seat {
        let (handover, handover_rx) = watch::channel(false);
        self.inner.local().members.insert(
            name.to_string(),
            Member {
                state: Seated::Standby,
                timing,
                handover,
            },
        );
        self.inner.refresh.notify_one();
        Seat {
            inner: self.inner.clone(),
            name: name.to_string(),
            handover: handover_rx,
            changed: self.inner.changed.subscribe(),
            moving: None,
        }
    }

    /// Orderly shutdown: stop beating and tell the registry this host is
    /// no longer live, so the others count it out (best effort, bounded).
    pub async fn deregister(&self) {
        self.inner.local().stopped = true;
        self.inner.refresh.notify_one();
        if !self.inner.settings.enabled {
            return;
        }
        let done = tokio::time::timeout(
            crate::timeouts::DATABASE_STATEMENT,
            self.inner
                .registry
                .deregister(&self.inner.cluster, &self.inner.holder),
        )
        .await;
        match done {
            Ok(Ok(())) => tracing::info!(
                cluster = self.inner.cluster,
                holder = self.inner.holder,
                "deregistered from the host registry"
            ),
            Ok(Err(e)) => tracing::warn!(
                cluster = self.inner.cluster,
                holder = self.inner.holder,
                error = %e,
                "could not deregister from the host registry; the others count this host \
                 out once its heartbeat is older than the lease ttl"
            ),
            Err(_) => tracing::warn!(
                cluster = self.inner.cluster,
                holder = self.inner.holder,
                "deregistering from the host registry timed out"
            ),
        }
    }
}

/// One controller's place in this host's placement.
pub struct Seat {
    inner: Arc<Inner>,
    name: String,
    handover: watch::Receiver<bool>,
    changed: watch::Receiver<u64>,
    /// Why the last [`Seat::may_acquire`] allowed an acquire beyond this
    /// host's share (`None`: within it, or refused).
    moving: Option<MoveReason>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut local = self.inner.local();
        local.members.remove(&self.name);
        if local.handing_over.as_deref() == Some(self.name.as_str()) {
            local.handing_over = None;
        }
        drop(local);
        self.inner.bump();
    }
}

impl Seat {
    /// Whether to ask for the lease now (see the module doc). When yes, the
    /// seat counts as held until [`Seat::not_granted`] or
    /// [`Seat::ended`], so concurrent acquires of this host never overshoot
    /// its share together.
    pub fn may_acquire(&mut self) -> bool {
        self.changed.borrow_and_update();
        let settings = self.inner.settings;
        let mut local = self.inner.local();
        // Allowed, and why beyond this host's share.
        let decision: Option<Option<MoveReason>> = if !settings.enabled {
            Some(None)
        } else {
            let names = local.names();
            let cap = fair_share(&names, &local.view.peers) + settings.slack;
            let held = local.held();
            if held < cap {
                Some(None)
            } else if local.view.lapsed.contains(&self.name) {
                // Its holder stopped renewing: the lease protocol lets any
                // host take it now, and placement does not hold that back
                // (the holder may look live for a ttl more: cut off by a
                // partition, its sessions stay open). The share is
                // restored later by orderly handover.
                tracing::info!(
                    controller = self.name,
                    holder = self.inner.holder,
                    held,
                    cap,
                    reason = MoveReason::Lapsed.as_str(),
                    "placement: taking a lapsed lease beyond this host's share"
                );
                Some(Some(MoveReason::Lapsed))
            } else {
                let someone_else = local.view.peers.iter().find(|peer| {
                    peer.runs(&self.name)
                        && peer.held < local.view.share_of(peer, &names) + settings.slack
                });
                match someone_else {
                    Some(_) => None,
                    // Only on a view fetched since this host was asked: a
                    // regular beat's view is up to a beat old, and may not
                    // show yet a host that joined since, for which another
                    // host has just released this very lease (taking it
                    // here would need one more handover, away again).
                    // Asked below; decided again when it comes.
                    None if !local.view.answers_refusal => None,
                    None => {
                        tracing::info!(
                            controller = self.name,
                            holder = self.inner.holder,
                            held,
                            cap,
                            reason = MoveReason::NoOtherHost.as_str(),
                            "placement: taking a lease beyond this host's share, no other live \
                             host able to run it is below its own"
                        );
                        Some(Some(MoveReason::NoOtherHost))
                    }
                }
            }
        };
        let allowed = decision.is_some();
        self.moving = decision.flatten();
        if allowed && let Some(member) = local.members.get_mut(&self.name) {
            member.state = Seated::Acquiring;
        }
        // The view may be stale (a host left, a lease lapsed): ask for a
        // fresh one, unless this view is the fresh one a refusal asked for
        // (every refused seat wakes at each view: asking again would beat
        // without pause).
        let ask = !allowed && {
            let ask = !local.view.answers_refusal && !local.refresh_asked;
            local.refresh_asked |= ask;
            ask
        };
        drop(local);
        if ask {
            self.inner.refresh.notify_one();
        }
        allowed
    }

    /// Why the acquire the last [`Seat::may_acquire`] allowed goes beyond
    /// this host's share ([`MoveReason::Lapsed`] or
    /// [`MoveReason::NoOtherHost`]), for the grant to record
    /// ([`crate::authority::Authority::acquire_placed`]); `None` within the
    /// share, or after a refusal.
    pub fn move_reason(&self) -> Option<MoveReason> {
        self.moving
    }

    /// The acquire allowed by [`Seat::may_acquire`] did not get the lease.
    pub fn not_granted(&self) {
        self.set(Seated::Standby);
    }

    /// The lease was granted: leading from now on.
    pub fn granted(&mut self) {
        self.set(Seated::Leading(Instant::now()));
        if let Some(member) = self.inner.local().members.get_mut(&self.name) {
            member.handover.send_replace(false);
        }
        self.handover.borrow_and_update();
    }

    /// The tenure ended (released, handed over or lost).
    pub fn ended(&self) {
        let mut local = self.inner.local();
        if let Some(member) = local.members.get_mut(&self.name) {
            member.state = Seated::Standby;
            member.handover.send_replace(false);
        }
        let was_handing_over = local.handing_over.as_deref() == Some(self.name.as_str());
        if was_handing_over {
            local.handing_over = None;
        }
        drop(local);
        self.inner.bump();
        if was_handing_over {
            // The next handover (if any) is decided on a fresh view.
            self.inner.refresh.notify_one();
        }
    }

    fn set(&self, state: Seated) {
        if let Some(member) = self.inner.local().members.get_mut(&self.name) {
            member.state = state;
        }
        self.inner.bump();
    }

    /// Resolves when placement asks this seat's tenure to hand its lease
    /// over; never while placement is off.
    pub async fn handover_requested(&mut self) {
        if self.handover.wait_for(|asked| *asked).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves when the view or another seat changed (a standby refused
    /// by [`Seat::may_acquire`] asks again then).
    pub async fn changed(&mut self) {
        if self.changed.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// How often a host beats: the shortest renew interval of its
/// controllers, at most [`crate::timeouts::PLACEMENT_BEAT`]; and how old a
/// heartbeat may be for its host to count as live: the longest lease ttl.
fn cadence(local: &Local) -> (Duration, Duration) {
    let beat = local
        .members
        .values()
        .map(|m| m.timing.renew_interval)
        .min()
        .unwrap_or(crate::timeouts::PLACEMENT_BEAT)
        .min(crate::timeouts::PLACEMENT_BEAT);
    let live_within = local
        .members
        .values()
        .map(|m| m.timing.ttl)
        .max()
        .unwrap_or(crate::timeouts::LEASE_TTL);
    (beat, live_within)
}

async fn beat_loop(inner: Weak<Inner>) {
    // Failed beats in a row; after a lease ttl of them the view is
    // dropped (acting alone, as without placement).
    let mut failing_since: Option<Instant> = None;
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let (names, beat, live_within, stopped, answers_refusal) = {
            let mut local = strong.local();
            let (beat, live_within) = cadence(&local);
            let answers_refusal = std::mem::take(&mut local.refresh_asked);
            (
                local.names(),
                beat,
                live_within,
                local.stopped,
                answers_refusal,
            )
        };
        if stopped {
            return;
        }
        let answer = tokio::time::timeout(
            crate::timeouts::DATABASE_STATEMENT,
            strong
                .registry
                .heartbeat(&strong.cluster, &strong.holder, &names, live_within),
        )
        .await;
        match answer {
            Ok(Ok(view)) => {
                failing_since = None;
                strong.local().view = View::from_registry(view, answers_refusal);
                strong.bump();
                rebalance(&strong);
            }
            Ok(Err(e)) => {
                tracing::debug!(holder = strong.holder, error = %e, "placement heartbeat failed");
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= live_within {
                    strong.local().view = View::default();
                    strong.bump();
                }
            }
            Err(_) => {
                tracing::debug!(holder = strong.holder, "placement heartbeat timed out");
            }
        }
        let refresh = async {
            strong.refresh.notified().await;
        };
        tokio::select! {
            _ = tokio::time::sleep(beat) => {}
            _ = refresh => {
                // Coalesce a burst of refusals into one beat.
                tokio::time::sleep(crate::timeouts::PLACEMENT_REFRESH_MIN).await;
            }
        }
    }
}

/// After a fresh view: hand one lease over if this host is above its
/// share + slack and a live host able to run it is below its share.
fn rebalance(inner: &Inner) {
    let settings = inner.settings;
    let mut local = inner.local();
    if local.handing_over.is_some() || local.stopped {
        return;
    }
    let names = local.names();
    let share = fair_share(&names, &local.view.peers);
    let held = local
        .members
        .values()
        .filter(|m| matches!(m.state, Seated::Leading(_)))
        .count();
    if held <= share + settings.slack {
        return;
    }
    // Oldest tenure first: the newest leases stay where they just went.
    let mut candidates: Vec<(&String, Instant)> = local
        .members
        .iter()
        .filter_map(|(name, m)| match m.state {
            Seated::Leading(since) if since.elapsed() >= settings.min_tenure => Some((name, since)),
            _ => None,
        })
        .collect();
    candidates.sort_by_key(|(_, since)| *since);
    let choice = candidates.into_iter().find_map(|(name, _)| {
        local
            .view
            .peers
            .iter()
            .find(|peer| peer.runs(name) && peer.held < local.view.share_of(peer, &names))
            .map(|peer| (name.clone(), peer.holder.clone(), peer.held))
    });
    let Some((name, to, their_held)) = choice else {
        return;
    };
    tracing::info!(
        controller = name,
        holder = inner.holder,
        held,
        share,
        slack = settings.slack,
        below_share = to,
        their_held,
        reason = MoveReason::OverShare.as_str(),
        "placement: handing a lease over by orderly release"
    );
    if let Some(member) = local.members.get_mut(&name) {
        member.handover.send_replace(true);
    }
    local.handing_over = Some(name);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn names(n: usize, prefix: &str) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn peer(holder: &str, controllers: &[String], held: usize) -> PeerHost {
        PeerHost {
            holder: holder.into(),
            controllers: controllers.to_vec(),
            held,
        }
    }

    #[test]
    fn the_share_is_the_ceiling_of_leases_over_live_hosts() {
        let all = names(12, "c");
        assert_eq!(fair_share::<PeerHost>(&all, &[]), 12, "alone: every lease");
        let b = peer("b", &all, 0);
        let c = peer("c", &all, 0);
        assert_eq!(fair_share(&all, std::slice::from_ref(&b)), 6);
        // Exact: 12 × 1/3 is 4, not 5 as a float sum would round up to.
        assert_eq!(fair_share(&all, &[b.clone(), c.clone()]), 4);
        let eleven = names(11, "c");
        assert_eq!(fair_share(&eleven, &[b.clone(), c.clone()]), 4);
        let thirteen = names(13, "c");
        assert_eq!(fair_share(&thirteen, &[b, c]), 5);
        assert_eq!(fair_share::<PeerHost>(&[], &[]), 0);
    }

    #[test]
    fn only_hosts_able_to_run_a_lease_share_it() {
        // Six leases only this host runs, six every one of three runs:
        // 6 × 1 + 6 × 1/3 = 8.
        let mut mine = names(6, "only");
        let shared = names(6, "shared");
        mine.extend(shared.clone());
        let b = peer("b", &shared, 0);
        let c = peer("c", &shared, 0);
        assert_eq!(fair_share(&mine, &[b.clone(), c.clone()]), 8);
        // And a peer that runs none of them changes nothing.
        let d = peer("d", &names(4, "other"), 0);
        assert_eq!(fair_share(&mine, &[b, c, d]), 8);
    }

    fn parse(text: &str) -> Result<crate::config::Config, String> {
        let env = crate::config::Environment::default();
        crate::config::Config::parse_with(text, std::env::temp_dir(), &env)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_placement_section_has_defaults_and_bounds() {
        let config = parse("cluster = \"east\"\n").unwrap();
        assert_eq!(config.placement, PlacementSettings::default());
        assert_eq!(
            PlacementSettings::default(),
            PlacementSettings {
                enabled: true,
                slack: 0,
                min_tenure: Duration::from_secs(10),
            }
        );
        let config = parse(
            "cluster = \"east\"\n[placement]\nenabled = true\nslack = 2\nmin_tenure = \"1500ms\"\n",
        )
        .unwrap();
        assert_eq!(
            config.placement,
            PlacementSettings {
                enabled: true,
                slack: 2,
                min_tenure: Duration::from_millis(1500),
            }
        );
        let refused =
            parse("cluster = \"east\"\n[placement]\nslack = -1\nmin_tenure = \"2days\"\n")
                .unwrap_err();
        assert!(refused.contains("placement.slack is -1"), "{refused}");
        assert!(refused.contains("min_tenure"), "{refused}");
        let unknown = parse("cluster = \"east\"\n[placement]\nslak = 1\n").unwrap_err();
        assert!(unknown.contains("slak"), "{unknown}");
    }

    fn timing() -> LeaseTiming {
        LeaseTiming::default()
    }

    struct NoRegistry;

    #[async_trait::async_trait]
    impl HostRegistry for NoRegistry {
        async fn heartbeat(
            &self,
            _: &str,
            _: &str,
            _: &[String],
            _: Duration,
        ) -> Result<RegistryView, crate::authority::AuthorityError> {
            std::future::pending().await
        }
        async fn deregister(
            &self,
            _: &str,
            _: &str,
        ) -> Result<(), crate::authority::AuthorityError> {
            Ok(())
        }
    }

    /// The default settings with placement switched on.
    fn on() -> PlacementSettings {
        PlacementSettings {
            enabled: true,
            ..PlacementSettings::default()
        }
    }

    fn placement(view: Vec<PeerHost>, settings: PlacementSettings) -> Placement {
        let p = Placement::start(Arc::new(NoRegistry), "east", "a", settings);
        p.inner.local().view = View {
            peers: view,
            ..View::default()
        };
        p
    }

    #[tokio::test]
    async fn a_host_at_its_share_leaves_a_free_lease_to_a_host_below_its_own() {
        let all = names(12, "c");
        let b = peer("b", &all, 4);
        let c = peer("c", &all, 3);
        let p = placement(vec![b, c], on());
        let mut seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        for seat in seats.iter_mut().take(4) {
            assert!(seat.may_acquire());
            assert_eq!(seat.move_reason(), None, "within the share: no move");
            seat.granted();
        }
        // At the share (4), with c below its own (3 < 4): refused.
        assert!(!seats[4].may_acquire());
        assert_eq!(seats[4].move_reason(), None);
        // c reaches its share: nobody else can take it, so this host does,
        // with the reason its grant is to record, once a fresh view says
        // so: a regular beat's view may not show a host that joined since.
        p.inner.local().view.peers[1].held = 4;
        assert!(!seats[4].may_acquire(), "decided on a regular beat's view");
        assert!(
            p.inner.local().refresh_asked,
            "the refusal asks for a fresh view"
        );
        p.inner.local().view.answers_refusal = true;
        assert!(seats[4].may_acquire());
        assert_eq!(seats[4].move_reason(), Some(MoveReason::NoOtherHost));
    }

    #[tokio::test]
    async fn concurrent_acquires_of_one_host_never_pass_its_share_together() {
        let all = names(12, "c");
        let b = peer("b", &all, 0);
        let c = peer("c", &all, 0);
        let p = placement(vec![b, c], on());
        let mut seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        let allowed = seats
            .iter_mut()
            .map(|s| s.may_acquire())
            .filter(|a| *a)
            .count();
        assert_eq!(allowed, 4, "asking counts as holding until answered");
        // An acquire that found the lease held frees its place.
        seats[0].not_granted();
        assert!(seats[11].may_acquire());
    }

    #[tokio::test]
    async fn alone_a_host_takes_every_lease_and_slack_raises_the_cap() {
        let all = names(12, "c");
        let p = placement(vec![], on());
        let mut seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        assert!(seats.iter_mut().all(|s| s.may_acquire()));

        let b = peer("b", &all, 0);
        let slack = PlacementSettings { slack: 2, ..on() };
        let p = placement(vec![b], slack);
        let mut seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        assert_eq!(
            seats
                .iter_mut()
                .map(|s| s.may_acquire())
                .filter(|a| *a)
                .count(),
            8
        );
    }

    fn leading_since(p: &Placement, name: &str, since: Instant) {
        p.inner.local().members.get_mut(name).unwrap().state = Seated::Leading(since);
    }

    #[tokio::test]
    async fn a_host_over_its_share_hands_over_one_old_lease_at_a_time() {
        let all = names(12, "c");
        let b = peer("b", &all, 0);
        let settings = PlacementSettings {
            min_tenure: Duration::from_secs(10),
            ..on()
        };
        let p = placement(vec![b], settings);
        let seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        let now = Instant::now();
        let old = now - Duration::from_secs(60);
        for (i, name) in all.iter().enumerate() {
            // Only c5 and c7 were held for the minimum tenure.
            let since = if i == 5 || i == 7 { old } else { now };
            leading_since(&p, name, since);
        }
        rebalance(&p.inner);
        let asked: Vec<usize> = (0..12).filter(|i| *seats[*i].handover.borrow()).collect();
        assert_eq!(asked.len(), 1, "one at a time: {asked:?}");
        // While it is in flight, nothing else is asked.
        rebalance(&p.inner);
        assert_eq!((0..12).filter(|i| *seats[*i].handover.borrow()).count(), 1);
        let first = asked[0];
        assert!(
            first == 5 || first == 7,
            "a lease held long enough: {first}"
        );
        seats[first].ended();
        rebalance(&p.inner);
        let second: Vec<usize> = (0..12).filter(|i| *seats[*i].handover.borrow()).collect();
        assert_eq!(second.len(), 1);
        assert!(second[0] == 5 || second[0] == 7);
        assert_ne!(second[0], first);
        seats[second[0]].ended();
        // No other lease is old enough: none is handed over.
        rebalance(&p.inner);
        assert_eq!((0..12).filter(|i| *seats[*i].handover.borrow()).count(), 0);
    }

    #[tokio::test]
    async fn a_host_never_hands_over_below_its_share_nor_within_the_slack() {
        let all = names(12, "c");
        let old = Instant::now() - Duration::from_secs(60);
        // 4 held, share 4 (three hosts): balanced, nothing moves.
        let p = placement(vec![peer("b", &all, 4), peer("c", &all, 4)], on());
        let seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        for name in all.iter().take(4) {
            leading_since(&p, name, old);
        }
        rebalance(&p.inner);
        assert!(seats.iter().all(|s| !*s.handover.borrow()));

        // 6 held against share 4 + slack 2: within the slack.
        let slack = PlacementSettings { slack: 2, ..on() };
        let p = placement(vec![peer("b", &all, 3), peer("c", &all, 3)], slack);
        let seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        for name in all.iter().take(6) {
            leading_since(&p, name, old);
        }
        rebalance(&p.inner);
        assert!(seats.iter().all(|s| !*s.handover.borrow()));

        // 5 held against share 4, but no host below its share: nobody to
        // hand to.
        let p = placement(vec![peer("b", &all, 4), peer("c", &all, 4)], on());
        let seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        for name in all.iter().take(5) {
            leading_since(&p, name, old);
        }
        rebalance(&p.inner);
        assert!(seats.iter().all(|s| !*s.handover.borrow()));
    }

    #[tokio::test]
    async fn a_host_at_its_share_takes_a_lapsed_lease_at_once() {
        let all = names(12, "c");
        // b held c4 and stopped renewing it (cut off by a partition, its
        // sessions open): live to the registry, and below its share now
        // that the lapsed lease no longer counts for it.
        let p = placement(vec![peer("b", &all, 3), peer("c", &all, 4)], on());
        let mut seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        for seat in seats.iter_mut().take(4) {
            assert!(seat.may_acquire());
            seat.granted();
        }
        assert!(
            !seats[4].may_acquire(),
            "a free lease at the share goes to b"
        );
        p.inner.local().view.lapsed = vec!["c4".to_string()];
        assert!(seats[4].may_acquire(), "lapsed: taken at once");
        assert_eq!(seats[4].move_reason(), Some(MoveReason::Lapsed));
        // Only the lapsed lease: the others still go to b.
        assert!(!seats[5].may_acquire());
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_stopped_renewing_does_not_hold_back_its_lease_however_live_it_looks() {
        use crate::authority::memory::MemoryAuthority;
        use crate::authority::{AcquireRequest, Acquired, Authority};
        use crate::fence::LeaseKey;

        let authority = MemoryAuthority::new();
        let runs = vec!["a".to_string(), "b".to_string()];
        let timing = timing();
        // h1 runs both leases, beats, and holds a.
        authority
            .heartbeat("east", "h1", &runs, timing.ttl)
            .await
            .unwrap();
        let request = AcquireRequest {
            key: LeaseKey::new("east", "a"),
            holder: "h1".into(),
            ttl: timing.ttl,
        };
        assert!(matches!(
            authority.acquire(&request).await.unwrap(),
            Acquired::Granted(_)
        ));
        // h2 runs both too: its share is 1, and it leads b.
        let p = Placement::start(Arc::new(authority.clone()), "east", "h2", on());
        let mut a = p.join("a", timing);
        let mut b = p.join("b", timing);
        a.changed().await;
        assert_eq!(p.inner.local().view.peers.len(), 1, "h2 sees h1");
        assert!(b.may_acquire());
        b.granted();
        // h1 stops renewing a but keeps beating: a lapses while h1 looks
        // live, holding nothing, below its share.
        tokio::time::advance(timing.ttl).await;
        authority
            .heartbeat("east", "h1", &runs, timing.ttl)
            .await
            .unwrap();
        a.changed.borrow_and_update();
        a.changed().await;
        {
            let local = p.inner.local();
            assert_eq!(local.view.peers.len(), 1, "h1 still looks live");
            assert_eq!(local.view.peers[0].held, 0);
        }
        assert!(
            a.may_acquire(),
            "a lapsed lease is taken at once, not left to its live-looking holder"
        );
        let request = AcquireRequest {
            holder: "h2".into(),
            ..request
        };
        assert!(matches!(
            authority.acquire(&request).await.unwrap(),
            Acquired::Granted(_)
        ));
    }

    /// Counts heartbeats; answers a peer below its share that runs every
    /// lease, so this host's seats beyond its share are refused for good.
    struct CountingRegistry {
        beats: AtomicU64,
        runs: Vec<String>,
    }

    #[async_trait::async_trait]
    impl HostRegistry for CountingRegistry {
        async fn heartbeat(
            &self,
            _: &str,
            _: &str,
            _: &[String],
            _: Duration,
        ) -> Result<RegistryView, crate::authority::AuthorityError> {
            self.beats.fetch_add(1, Ordering::Relaxed);
            Ok(RegistryView {
                peers: vec![peer("b", &self.runs, 0)],
                lapsed: Vec::new(),
            })
        }
        async fn deregister(
            &self,
            _: &str,
            _: &str,
        ) -> Result<(), crate::authority::AuthorityError> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn refused_standbys_ask_for_at_most_one_fresh_view_per_beat() {
        let all = names(4, "c");
        let registry = Arc::new(CountingRegistry {
            beats: AtomicU64::new(0),
            runs: all.clone(),
        });
        let p = Placement::start(registry.clone(), "east", "a", on());
        let mut seats: Vec<Seat> = all.iter().map(|n| p.join(n, timing())).collect();
        seats[0].changed().await;
        // Share 2 of 4: two lead, two stand by, each asking again at every
        // change as a supervisor does.
        for seat in seats.iter_mut().take(2) {
            assert!(seat.may_acquire());
            seat.granted();
        }
        let standbys: Vec<_> = seats
            .drain(2..)
            .map(|mut seat| {
                tokio::spawn(async move {
                    while !seat.may_acquire() {
                        seat.changed().await;
                    }
                })
            })
            .collect();
        let start = registry.beats.load(Ordering::Relaxed);
        let span = Duration::from_secs(10);
        tokio::time::sleep(span).await;
        let beats = registry.beats.load(Ordering::Relaxed) - start;
        let regular = (span.as_millis() / crate::timeouts::PLACEMENT_BEAT.as_millis()) as u64;
        assert!(
            beats <= 2 * regular + 2,
            "{beats} heartbeats in {span:?} (regular beats: {regular})"
        );
        assert!(standbys.iter().all(|t| !t.is_finished()), "still refused");
        for standby in standbys {
            standby.abort();
        }
    }
}
