//! Crash handover through the liveness session (issue 16, items 1–4):
//! real `leasehold` processes on PostgreSQL, each behind its own fault
//! proxy, plus one in-process supervisor on the memory backends.
//!
//! - SIGKILL of the leader under crash detection `session` (the default):
//!   the standby is granted the lease well inside the ttl (10 s here),
//!   measured from the kill to the grant on the database's own clock;
//! - `pg_terminate_backend` of the leader's liveness (claim) session only,
//!   while the leader runs: the leader gives its lease up and aborts its
//!   guest before (or as) the standby is granted the next epoch, and the
//!   checker finds no write out of its tenure;
//! - the same SIGKILL under `crash_detection = "ttl"`: the standby waits
//!   for the expiry, as before;
//! - in process: a tenure ends the moment the gate reports its liveness
//!   session gone, or a later session than the one it was granted under.
//!
//! Ordering comes from observable state (lease rows, a host's `/metrics`,
//! its log); every wait is bounded.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use leasehold_host::authority::postgres::holder_claim::CLAIM_APPLICATION;
use leasehold_host::authority::{Authority, LeaseTiming};
use leasehold_host::runtime::{CompiledController, EngineConfig, GuestLimits, Runtime};
use leasehold_host::status::{ControllerState, Status};
use leasehold_host::supervisor::{IdentityCheck, Renewer, Supervisor, SupervisorConfig};
use leasehold_tests::faults::rig::{Rig, RigSpec, Timing};
use leasehold_tests::process::eventually;
use leasehold_tests::{MemoryBackends, guest};
use tokio::sync::watch;

const SCHEDULER: &str = "scheduler";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The defaults (10 s / 2 s / 7 s): a takeover faster than two seconds
/// cannot be an expiry.
const DEFAULT_TIMING: Timing = Timing {
    ttl: Duration::from_secs(10),
    renew_interval: Duration::from_secs(2),
    renew_deadline: Duration::from_secs(7),
};

/// What "fast" means here: far inside the default ttl, with room for a
/// debug build on a busy two-core machine (the scan waits 50–150 ms).
const FAST_HANDOVER: Duration = Duration::from_secs(2);

/// The multi-process tests run one at a time: their timing assertions
/// must not measure each other's load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The database clock now, as text (kept as the server wrote it: the tests
/// only ever hand it back to the server).
async fn db_now(rig: &Rig) -> String {
    rig.sql()
        .await
        .query_one("SELECT clock_timestamp()::text", &[])
        .await
        .expect("read the database clock")
        .get(0)
}

/// Seconds from `since` (from [`db_now`]) to the grant of `epoch` of the
/// scheduler's lease, on the database clock.
async fn granted_after(rig: &Rig, since: &str, epoch: i64) -> f64 {
    rig.sql()
        .await
        .query_one(
            "SELECT extract(epoch FROM acquired_at - $3::text::timestamptz)::float8
               FROM leasehold_tenures WHERE cluster = $1 AND lease = $2 AND epoch = $4",
            &[&rig.cluster, &SCHEDULER, &since, &epoch],
        )
        .await
        .expect("read the grant")
        .get(0)
}

/// SIGKILL the scheduler's leader; returns (old leader, old epoch, new
/// leader, new epoch, seconds from the kill to the new grant).
async fn kill_leader(rig: &mut Rig, limit: Duration) -> (usize, i64, usize, i64, f64) {
    let (leader, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let killed = db_now(rig).await;
    rig.hosts[leader].replica.kill().await;
    let (next, next_epoch) = rig.leader_after(SCHEDULER, epoch, limit).await;
    let took = granted_after(rig, &killed, next_epoch).await;
    (leader, epoch, next, next_epoch, took)
}

/// The crash detection mode and holder session a host shows for `lease`
/// in `GET /v1/leases`.
async fn shown(rig: &Rig, i: usize, lease: &str) -> serde_json::Value {
    let leases = rig.hosts[i].replica.leases().await.expect("GET /v1/leases");
    leases
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["name"] == lease)
        .cloned()
        .unwrap_or_else(|| panic!("{lease} is not listed: {leases}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_session_detection_hands_over_well_inside_the_ttl() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut spec = RigSpec::scheduler(2);
    spec.timing = DEFAULT_TIMING;
    let mut rig = Rig::start(spec).await;
    rig.nodes(&[("n1", 100), ("n2", 100)]).await;
    let (leader, _) = rig.leader(SCHEDULER, secs(30)).await;

    // The lease shows its mode and the leader's liveness session.
    let view = shown(&rig, 1 - leader, SCHEDULER).await;
    assert_eq!(view["crash_detection"], "session", "{view}");
    assert!(view["holder_session"]["pid"].as_i64().is_some(), "{view}");
    assert!(
        view["holder_session"]["backend_start"].is_string(),
        "{view}"
    );

    let load = rig.workload("t", ms(50));
    load.wait_acknowledged(3, secs(20)).await;
    let mut handovers = Vec::new();
    for round in 0..3 {
        // Spread the kill over the renew cycle: the session, not the last
        // renewal, decides.
        tokio::time::sleep(DEFAULT_TIMING.renew_interval * round / 3).await;
        let (old, epoch, next, next_epoch, took) =
            kill_leader(&mut rig, DEFAULT_TIMING.ttl + secs(5)).await;
        eprintln!(
            "round {round}: SIGKILL of host-{old} -> host-{next} granted epoch {next_epoch} \
             {:.0} ms later (ttl {:?})",
            took * 1000.0,
            DEFAULT_TIMING.ttl
        );
        assert_eq!((next, next_epoch), (1 - old, epoch + 1));
        assert!(
            took < FAST_HANDOVER.as_secs_f64(),
            "the standby was granted the lease {took:.3} s after the kill; a dead holder's \
             session must hand over well inside the ttl ({:?})",
            DEFAULT_TIMING.ttl
        );
        let history = rig.history(SCHEDULER).await;
        assert_eq!(
            history[epoch as usize - 1].end_reason.as_deref(),
            Some("superseded"),
            "{history:?}"
        );
        handovers.push(took);
        // The killed host comes back as the standby.
        rig.hosts[old].replica.restart();
        rig.hosts[old].replica.wait_healthy(secs(60)).await;
        eventually(&format!("host-{old} stands by"), secs(20), || async {
            let (_, body) = rig.hosts[old].replica.readyz().await?;
            (body["controllers"][SCHEDULER]["state"] == "standby").then_some(())
        })
        .await;
    }
    handovers.sort_by(f64::total_cmp);
    eprintln!(
        "SIGKILL -> grant under session detection, ms: {:?}",
        handovers
            .iter()
            .map(|s| (s * 1000.0).round())
            .collect::<Vec<_>>()
    );
    load.wait_acknowledged(load.acknowledged() + 3, secs(20))
        .await;
    load.stop().await;
    rig.settled(secs(30)).await;
    let report = rig.check().await;
    eprintln!("session SIGKILL: {report}");
    report.assert_clean("session SIGKILL");
}

/// The leader's liveness (claim) session on the server, found by its
/// `application_name` among the sessions through the leader's proxy;
/// terminated, with the database clock just before.
async fn terminate_claim_session(rig: &Rig, i: usize) -> String {
    let ports: Vec<i32> = rig.hosts[i]
        .proxy
        .upstream_ports()
        .into_iter()
        .map(i32::from)
        .collect();
    let sql = rig.sql().await;
    let before = db_now(rig).await;
    let terminated: i64 = sql
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
              WHERE datname = $1 AND client_port = ANY($2) AND application_name LIKE $3 || '-%'",
            &[&rig.database_name(), &ports, &CLAIM_APPLICATION],
        )
        .await
        .expect("terminate the claim session")
        .get(0);
    assert_eq!(terminated, 1, "exactly one liveness session per host");
    before
}

/// The time of the first log line of `log` containing `needle` (the
/// line's leading RFC 3339 timestamp, colours stripped).
fn logged_at(log: &str, needle: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains(needle))?;
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An ANSI colour sequence: ESC [ ... m
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain.split_whitespace().next().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_liveness_session_makes_the_leader_abort_before_the_standby_leads() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let rig = Rig::start(RigSpec::scheduler(2)).await;
    rig.nodes(&[("n1", 100), ("n2", 100)]).await;
    let (leader, epoch) = rig.leader(SCHEDULER, secs(30)).await;
    let standby = 1 - leader;
    let load = rig.workload("t", ms(40));
    load.wait_acknowledged(5, secs(20)).await;
    let aborted = |i: usize| {
        let replica = &rig.hosts[i].replica;
        async move {
            replica
                .metric(&format!(
                    "leasehold_aborts_total{{controller=\"{SCHEDULER}\",reason=\"lease_lost\"}}"
                ))
                .await
                .unwrap_or(0.0)
        }
    };
    let aborts_before = aborted(leader).await;

    // Only the liveness session: the leader's pool, listener and renewals
    // go on; nothing but its own claim tells it anything happened.
    let terminated = terminate_claim_session(&rig, leader).await;
    let (next, next_epoch) = rig
        .leader_after(SCHEDULER, epoch, Timing::SCENARIO.ttl)
        .await;
    assert_eq!((next, next_epoch), (standby, epoch + 1));
    let took = granted_after(&rig, &terminated, next_epoch).await;
    eprintln!(
        "liveness session of host-{leader} terminated: host-{standby} granted epoch {next_epoch} \
         {:.0} ms later",
        took * 1000.0
    );

    // The leader noticed its own session first: it lost the lease for
    // that reason (not by a refused renewal or a fenced write) and aborted
    // its guest, no later than the standby's grant.
    let replica = &rig.hosts[leader].replica;
    let lost = eventually("the leader counts the loss", secs(10), || async {
        replica
            .metric(&format!(
                "leasehold_losses_total{{controller=\"{SCHEDULER}\",reason=\"claim_lost\"}}"
            ))
            .await
            .filter(|n| *n >= 1.0)
    })
    .await;
    assert_eq!(lost, 1.0);
    assert!(
        aborted(leader).await > aborts_before,
        "the guest was aborted"
    );
    let gave_up = logged_at(&replica.log(), "giving up the lease: claim lost")
        .expect("the leader logs why it gave the lease up");
    let lead: f64 = rig
        .sql()
        .await
        .query_one(
            "SELECT extract(epoch FROM acquired_at - $3::text::timestamptz)::float8
               FROM leasehold_tenures WHERE cluster = $1 AND lease = $2 AND epoch = $4",
            &[&rig.cluster, &SCHEDULER, &gave_up, &next_epoch],
        )
        .await
        .expect("compare the abort with the grant")
        .get(0);
    eprintln!(
        "the leader gave the lease up {:.0} ms before the standby's grant",
        lead * 1000.0
    );
    // One machine, one clock; a few milliseconds of logging delay allowed.
    assert!(
        lead >= -0.010,
        "the leader gave the lease up {:.0} ms after the standby was granted it",
        -lead * 1000.0
    );

    // The old leader claims its name again and stands by.
    eventually("the old leader stands by", secs(20), || async {
        let (_, body) = rig.hosts[leader].replica.readyz().await?;
        (body["controllers"][SCHEDULER]["state"] == "standby").then_some(())
    })
    .await;
    load.wait_acknowledged(load.acknowledged() + 5, secs(20))
        .await;
    load.stop().await;
    rig.settled(secs(30)).await;
    let report = rig.check().await;
    eprintln!("terminated liveness session: {report}");
    report.assert_clean("terminated liveness session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_ttl_detection_waits_for_the_expiry() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let timing = Timing {
        ttl: secs(4),
        renew_interval: ms(800),
        renew_deadline: ms(2800),
    };
    let mut spec = RigSpec::scheduler(2).configure(SCHEDULER, "crash_detection = \"ttl\"");
    spec.timing = timing;
    let mut rig = Rig::start(spec).await;
    let (leader, _) = rig.leader(SCHEDULER, secs(30)).await;
    let view = shown(&rig, 1 - leader, SCHEDULER).await;
    assert_eq!(view["crash_detection"], "ttl", "{view}");
    assert!(view["holder_session"].is_null(), "{view}");

    let (_, epoch, next, next_epoch, took) = kill_leader(&mut rig, timing.ttl + secs(5)).await;
    eprintln!(
        "SIGKILL under ttl detection: granted {:.0} ms later (ttl {:?})",
        took * 1000.0,
        timing.ttl
    );
    assert_eq!((next, next_epoch), (1 - leader, epoch + 1));
    // The last renewal came at most one interval before the kill.
    let floor = (timing.ttl - timing.renew_interval).as_secs_f64() - 0.1;
    assert!(
        took >= floor,
        "under ttl detection the lease was taken over {took:.3} s after the kill, before it \
         could have expired ({floor:.1} s)"
    );
    let history = rig.history(SCHEDULER).await;
    assert_eq!(
        history[epoch as usize - 1].end_reason.as_deref(),
        Some("expired"),
        "{history:?}"
    );
}

/// A guest that idles (it watches kinds nobody writes here).
fn compiled() -> CompiledController {
    static SHARED: OnceLock<CompiledController> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let runtime = Runtime::new(&EngineConfig {
                max_guests: 4,
                memory_bytes: 64 << 20,
                pooling: false,
                cache_dir: None,
            })
            .expect("engine");
            runtime
                .load(
                    SCHEDULER,
                    &guest(SCHEDULER),
                    GuestLimits::default(),
                    Vec::new(),
                )
                .expect("load")
        })
        .clone()
}

/// In process: a tenure granted under liveness session 1 ends the moment
/// the gate shows that session gone, and also when it shows session 2
/// without the loss in between (a coalesced change); each time the guest
/// is aborted and the loss counted as `claim_lost`.
#[tokio::test]
async fn a_tenure_ends_when_its_liveness_session_ends_or_is_replaced() {
    const CLUSTER: &str = "crash";
    let backends = MemoryBackends::new();
    let status = Status::new(CLUSTER.into(), "host-a".into(), &[SCHEDULER.to_string()]);
    let status = status.controller(SCHEDULER).unwrap();
    let identity = backends.authority.identity().await.unwrap();
    let claimed = |session| IdentityCheck::Claimed {
        identity: identity.clone(),
        session,
    };
    let (gate, gate_rx) = watch::channel(claimed(1));
    let (shutdown, shutdown_rx) = watch::channel(false);
    let authority: Arc<dyn Authority> = backends.authority.clone();
    let supervisor = Supervisor::new(
        SupervisorConfig {
            cluster: CLUSTER.into(),
            holder: "host-a".into(),
            timing: LeaseTiming {
                ttl: secs(20),
                renew_interval: secs(2),
                renew_deadline: secs(14),
            },
            backoff_min: ms(10),
            backoff_max: ms(100),
            max_queue: 100,
            shutdown_grace: secs(2),
        },
        authority.clone(),
        Renewer::start(authority.clone()),
        backends.store.clone(),
        compiled(),
        status.clone(),
        gate_rx,
        shutdown_rx,
    );
    let task = tokio::spawn(supervisor.run());
    let leading = |epoch: u64| {
        let status = status.clone();
        async move {
            let mut state = status.subscribe();
            tokio::time::timeout(
                leasehold_tests::TEST_WAIT,
                state.wait_for(
                    |s| matches!(s, ControllerState::Leading { epoch: e, .. } if *e == epoch),
                ),
            )
            .await
            .unwrap_or_else(|_| panic!("never led at epoch {epoch}: {:?}", status.get()))
            .unwrap();
        }
    };
    let losses = || {
        status
            .metrics
            .losses
            .lock()
            .unwrap()
            .get("claim_lost")
            .copied()
            .unwrap_or(0)
    };
    leading(1).await;

    // The session ends: the tenure ends at once, long before any deadline.
    let started = Instant::now();
    gate.send(IdentityCheck::Unclaimed("the claim session closed".into()))
        .unwrap();
    let mut state = status.subscribe();
    tokio::time::timeout(
        leasehold_tests::TEST_WAIT,
        state.wait_for(|s| !matches!(s, ControllerState::Leading { .. })),
    )
    .await
    .expect("the tenure ends")
    .unwrap();
    assert!(
        started.elapsed() < secs(2),
        "ended by the gate, not a deadline"
    );
    assert_eq!(losses(), 1);
    let history = backends
        .authority
        .history(&leasehold_host::fence::LeaseKey::new(CLUSTER, SCHEDULER), 1)
        .await
        .unwrap();
    assert_eq!(
        history[0].end_reason,
        Some(leasehold_host::authority::EndReason::Lost)
    );

    // Claimed again on session 2: a new tenure under it.
    gate.send(claimed(2)).unwrap();
    leading(2).await;
    // Session 3 without the loss of 2 in between: tenure 2 was granted
    // under session 2, so it ends too, and a tenure under 3 follows.
    gate.send(claimed(3)).unwrap();
    leading(3).await;
    assert_eq!(losses(), 2);
    let aborts = status
        .metrics
        .aborts
        .lock()
        .unwrap()
        .get("lease_lost")
        .copied()
        .unwrap_or(0);
    assert!(
        aborts >= 2,
        "each lost tenure's guest is aborted ({aborts})"
    );

    shutdown.send(true).unwrap();
    tokio::time::timeout(leasehold_tests::TEST_WAIT, task)
        .await
        .expect("the supervisor stops")
        .unwrap();
}

/// A renewal cut off between its UPDATE and its COMMIT (the COMMIT held at
/// the leader's proxy, as a partition or a paused host would) must not keep
/// the lease row locked until the server notices the connection is gone:
/// the server ends the idle renewal within its bound (a tenth of the ttl),
/// and the lease goes on having a leader. Before the bound, the row stayed
/// locked, every later renewal and every grant failed on it, and the lease
/// had no leader at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_held_before_its_commit_does_not_lock_the_lease_for_good() {
    use leasehold_tests::proxy::AtCommit;
    let _serial = ONE_AT_A_TIME.lock().await;
    let rig = Rig::start(RigSpec::scheduler(2)).await;
    let (leader, _) = rig.leader(SCHEDULER, secs(30)).await;
    // Only a renewal sends this in its transaction.
    let struck = rig.hosts[leader]
        .proxy
        .arm_carrying(AtCommit::Hold, b"SET LOCAL lock_timeout");
    tokio::time::timeout(secs(10), struck)
        .await
        .expect("the leader renews")
        .expect("strike reported");

    // The held renewal's transaction is ended by the server.
    let ports: Vec<i32> = rig.hosts[leader]
        .proxy
        .upstream_ports()
        .into_iter()
        .map(i32::from)
        .collect();
    let sql = rig.sql().await;
    eventually(
        "the server ends the renewal left idle in its transaction",
        secs(3),
        || async {
            let idle: i64 = sql
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE datname = $1 AND client_port = ANY($2)
                        AND state LIKE 'idle in transaction%'",
                    &[&rig.database_name(), &ports],
                )
                .await
                .ok()?
                .get(0);
            (idle == 0).then_some(())
        },
    )
    .await;
    // And the lease has a leader, at an unexpired row, a ttl later.
    let (_, epoch) = rig.leader(SCHEDULER, Timing::SCENARIO.ttl * 3).await;
    eprintln!("renewal held before its COMMIT: the lease is led at epoch {epoch}");
    rig.hosts[leader].proxy.release();
}
