//! The database server restarts under running hosts (issue 16): real
//! `leasehold` processes on a PostgreSQL cluster of the test's own
//! (`pg_createcluster`), restarted with `pg_ctlcluster … restart` (fast
//! shutdown: every session ends, open transactions roll back) while the
//! scheduler assigns a stream of tasks.
//!
//! Every session of every host dies at once, the liveness sessions among
//! them: each holder gives its leases up for that reason (`claim_lost`),
//! and every lease is granted again under a new session at a higher epoch,
//! to one host only. The checker
//! then finds no write outside its tenure, and every acknowledged task is
//! assigned once.

use std::time::Duration;

use leasehold_host::testing::TestDatabase;
use leasehold_tests::faults::rig::{Rig, RigSpec};
use leasehold_tests::pgcluster::ScratchCluster;
use leasehold_tests::process::eventually;

const SCHEDULER: &str = "scheduler";
const ROLLOUT: &str = "rollout";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The liveness session's backend pid a lease's row records for its
/// holder.
async fn holder_session(rig: &Rig, lease: &str) -> Option<i32> {
    rig.sql()
        .await
        .query_one(
            "SELECT holder_pid FROM leasehold_leases WHERE cluster = $1 AND name = $2",
            &[&rig.cluster, &lease],
        )
        .await
        .expect("read the lease's holder session")
        .get(0)
}

/// Which hosts say they lead `lease` (their `leasehold_leader` gauge).
async fn leading(rig: &Rig, lease: &str) -> Vec<usize> {
    let mut leading = Vec::new();
    for (i, host) in rig.hosts.iter().enumerate() {
        if host.replica.leads(lease).await == Some(true) {
            leading.push(i);
        }
    }
    leading
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_ends_every_tenure_and_each_lease_is_held_once_again() {
    // Declared first, dropped last: the rig drops its database on it.
    let server = ScratchCluster::create();
    let db = TestDatabase::create_on(&server.url()).await;
    let mut spec = RigSpec::scheduler(2);
    spec.controllers = vec![SCHEDULER, ROLLOUT];
    let rig = Rig::start_on(spec, db).await;
    rig.nodes(&[("n1", 1000), ("n2", 1000)]).await;

    let mut before = Vec::new();
    for lease in [SCHEDULER, ROLLOUT] {
        let (leader, epoch) = rig.leader(lease, secs(30)).await;
        let session = holder_session(&rig, lease).await;
        assert!(session.is_some(), "{lease} records its holder's session");
        before.push((lease, leader, epoch, session));
    }
    let load = rig.workload("t", Duration::from_millis(40));
    load.wait_acknowledged(5, secs(20)).await;

    eprintln!("restarting the server under {} hosts", rig.hosts.len());
    server.restart();

    for &(lease, old_leader, old_epoch, old_session) in &before {
        let (leader, epoch) = rig.leader_after(lease, old_epoch, secs(30)).await;
        eprintln!(
            "{lease}: host-{old_leader} epoch {old_epoch} -> host-{leader} epoch {epoch} \
             after the restart"
        );
        // Never continued under the old session: the tenure that ran
        // through the restart ended, and its successor names a session
        // of the new server.
        let history = rig.history(lease).await;
        let ended = &history[old_epoch as usize - 1];
        assert!(
            ended.end_reason.is_some(),
            "{lease}: the tenure of epoch {old_epoch} did not end with the server: {history:?}"
        );
        let session = holder_session(&rig, lease).await;
        assert!(session.is_some(), "{lease}: no holder session recorded");
        assert_ne!(
            session, old_session,
            "{lease}: granted again under the dead session"
        );
        // The holder heard of it itself: its liveness session ended with
        // the server, and it gave the lease up for that reason (L8), not
        // at a renew deadline or by a refused renewal.
        let replica = &rig.hosts[old_leader].replica;
        eventually(
            &format!("host-{old_leader} counts the loss of {lease} as claim_lost"),
            secs(20),
            || async {
                replica
                    .metric(&format!(
                        "leasehold_losses_total{{controller=\"{lease}\",reason=\"claim_lost\"}}"
                    ))
                    .await
                    .filter(|n| *n >= 1.0)
            },
        )
        .await;
        // Held once: one host leads it, the others stand by.
        eventually(
            &format!("exactly one host leads {lease}"),
            secs(20),
            || async {
                let leading = leading(&rig, lease).await;
                (leading == [leader]).then_some(())
            },
        )
        .await;
    }

    // The scheduler keeps assigning after the restart.
    load.wait_acknowledged(load.acknowledged() + 5, secs(30))
        .await;
    load.stop().await;
    rig.settled(secs(30)).await;
    let report = rig.check().await;
    eprintln!("server restart: {report}");
    report.assert_clean("server restart");
    for lease in [SCHEDULER, ROLLOUT] {
        assert_eq!(
            leading(&rig, lease).await.len(),
            1,
            "{lease} is held once at the end"
        );
    }
}
