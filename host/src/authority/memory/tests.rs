//! Memory-only lease tests: deterministic loss, held renewals, partitions
//! and the paused clock. Every ordering is a channel, a fault guard or
//! `tokio::time::advance`; no test sleeps.

use std::time::Duration;

use tokio::sync::oneshot;

use super::MemoryAuthority;
use crate::authority::conformance::{TTL, grant, refused, request};
use crate::authority::fence_check::FenceLock;
use crate::authority::{Authority, AuthorityError, EndReason, LeaseTiming, Renewed};
use crate::fence::Epoch;

/// The smallest step of the paused clock these tests take.
const TICK: Duration = Duration::from_millis(1);

fn is_unavailable(result: &Result<impl std::fmt::Debug, AuthorityError>) -> bool {
    matches!(result, Err(AuthorityError::Unavailable { .. }))
}

#[tokio::test(start_paused = true)]
async fn loss_injected_mid_work_is_observed_at_the_next_renewal() {
    let authority = MemoryAuthority::new();
    let faults = authority.faults();
    let held = grant(&authority, &request("east", "scheduler", "host-a")).await;

    // The tenure's work: announces it started, waits until the test has
    // injected the loss, then tries to write under its fence.
    let (started_tx, started) = oneshot::channel();
    let (injected_tx, injected) = oneshot::channel::<()>();
    let work = tokio::spawn({
        let authority = authority.clone();
        let fence = held.fence.clone();
        async move {
            started_tx.send(()).unwrap();
            injected.await.unwrap();
            let mut wrote = false;
            let result = authority.while_fenced(&fence, &mut || {
                wrote = true;
                true
            });
            (result, wrote)
        }
    });

    started.await.unwrap();
    let phantom = faults.steal(&held.fence.key, "phantom");
    assert_eq!(phantom.epoch, Epoch(2));
    // The holder observes the loss at its next renewal ...
    let renewed = authority
        .renew(std::slice::from_ref(&held.fence), TTL)
        .await
        .unwrap();
    assert_eq!(renewed, vec![Renewed::Lost]);
    injected_tx.send(()).unwrap();
    // ... and the work it still had in flight is refused without running.
    let (result, wrote) = work.await.unwrap();
    assert!(
        matches!(result, Err(AuthorityError::Fenced { .. })),
        "{result:?}"
    );
    assert!(!wrote, "a stale write must not run");

    // Recording the loss leaves the phantom's tenure alone.
    authority
        .release(&held.fence, EndReason::Lost)
        .await
        .unwrap();
    let history = authority.history(&held.fence.key, 10).await.unwrap();
    assert_eq!(history[0].holder, "phantom");
    assert!(history[0].end_reason.is_none());
    assert_eq!(history[1].end_reason, Some(EndReason::Superseded));
    assert!(authority.observe("east").await.unwrap()[0].active);
}

#[tokio::test(start_paused = true)]
async fn expiry_follows_the_backend_clock_exactly() {
    let authority = MemoryAuthority::new();
    let held = grant(&authority, &request("east", "scheduler", "host-a")).await;
    assert_eq!(
        (held.expires_at - held.acquired_at).to_std().unwrap(),
        TTL,
        "UTC times follow the monotonic clock"
    );
    let other = request("east", "scheduler", "host-b");

    tokio::time::advance(TTL - TICK).await;
    assert_eq!(
        refused(&authority, &other).await,
        ("host-a".into(), Epoch(1))
    );
    tokio::time::advance(TICK).await;
    let taken = grant(&authority, &other).await;
    assert_eq!(taken.fence.epoch, Epoch(2));
    assert_eq!(taken.acquired_at, held.expires_at);
    let history = authority.history(&held.fence.key, 10).await.unwrap();
    assert_eq!(history[1].end_reason, Some(EndReason::Expired));
    assert_eq!(
        history[1].ended_at,
        Some(held.expires_at),
        "ended when it expired"
    );
}

#[tokio::test(start_paused = true)]
async fn a_renewal_held_past_the_ttl_reports_lost() {
    let authority = MemoryAuthority::new();
    let faults = authority.faults();
    let held = grant(&authority, &request("east", "scheduler", "host-a")).await;

    let hold = faults.hold_renewals();
    let renewal = tokio::spawn({
        let authority = authority.clone();
        let fence = held.fence.clone();
        async move { authority.renew(&[fence], TTL).await }
    });
    hold.parked(1).await;
    tokio::time::advance(TTL).await;
    hold.release();
    assert_eq!(renewal.await.unwrap().unwrap(), vec![Renewed::Lost]);
    assert!(!authority.observe("east").await.unwrap()[0].active);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_held_within_the_ttl_extends_from_when_it_lands() {
    let authority = MemoryAuthority::new();
    let faults = authority.faults();
    let held = grant(&authority, &request("east", "scheduler", "host-a")).await;

    let hold = faults.hold_renewals();
    let renewal = tokio::spawn({
        let authority = authority.clone();
        let fence = held.fence.clone();
        async move { authority.renew(&[fence], TTL).await }
    });
    hold.parked(1).await;
    let delay = TTL / 2;
    tokio::time::advance(delay).await;
    drop(hold);
    let expected = held.acquired_at + chrono::TimeDelta::from_std(delay + TTL).unwrap();
    assert_eq!(
        renewal.await.unwrap().unwrap(),
        vec![Renewed::Extended {
            expires_at: expected
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_parked_renewal_leaves_no_trace() {
    let authority = MemoryAuthority::new();
    let faults = authority.faults();
    let held = grant(&authority, &request("east", "scheduler", "host-a")).await;
    let hold = faults.hold_renewals();
    let renewal = tokio::spawn({
        let authority = authority.clone();
        async move { authority.renew(&[held.fence], TTL).await }
    });
    hold.parked(1).await;
    renewal.abort();
    assert!(renewal.await.unwrap_err().is_cancelled());
    assert_eq!(faults.parked_renewals(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_holder_fences_itself_before_anyone_else_can_be_granted() {
    // L3 with the default timing: a holder whose renewals fail gives up at
    // `lost_at`, while the lease cannot be granted elsewhere until the ttl.
    let timing = LeaseTiming::default();
    timing.validate().unwrap();
    let authority = MemoryAuthority::new();
    let faults = authority.faults();
    let sent = tokio::time::Instant::now();
    let held = grant(&authority, &request("east", "scheduler", "host-a")).await;
    let failing = faults.fail_renewals();

    let lost_at = timing.lost_at(sent);
    let mut next_renewal = sent;
    while next_renewal + timing.renew_interval < lost_at {
        next_renewal += timing.renew_interval;
        tokio::time::advance(next_renewal - tokio::time::Instant::now()).await;
        let result = authority
            .renew(std::slice::from_ref(&held.fence), TTL)
            .await;
        assert!(is_unavailable(&result), "{result:?}");
    }
    tokio::time::advance(lost_at - tokio::time::Instant::now()).await;
    // The holder now treats the lease as lost; the lease is still its own
    // by the backend's clock, so nobody else is running the controller yet.
    let other = request("east", "scheduler", "host-b");
    assert_eq!(
        refused(&authority, &other).await,
        ("host-a".into(), Epoch(1))
    );
    drop(failing);
    tokio::time::advance(timing.ttl - timing.renew_deadline).await;
    assert_eq!(grant(&authority, &other).await.fence.epoch, Epoch(2));
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_extend_nothing() {
    let authority = MemoryAuthority::new();
    let faults = authority.faults();
    let held = grant(&authority, &request("east", "scheduler", "host-a")).await;
    let failing = faults.fail_renewals();
    let result = authority
        .renew(std::slice::from_ref(&held.fence), TTL)
        .await;
    assert!(is_unavailable(&result), "{result:?}");
    assert_eq!(
        authority.observe("east").await.unwrap()[0].expires_at,
        held.expires_at
    );
    drop(failing);
    assert!(matches!(
        authority.renew(&[held.fence], TTL).await.unwrap()[0],
        Renewed::Extended { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_holder_is_cut_off_while_another_takes_over() {
    let authority = MemoryAuthority::new();
    let faults = authority.faults();
    let held = grant(&authority, &request("east", "scheduler", "host-a")).await;
    let partition = faults.partition("host-a");

    assert!(is_unavailable(
        &authority
            .renew(std::slice::from_ref(&held.fence), TTL)
            .await
    ));
    assert!(is_unavailable(
        &authority.while_fenced(&held.fence, &mut || true)
    ));
    assert!(is_unavailable(
        &authority.release(&held.fence, EndReason::Released).await
    ));
    assert!(is_unavailable(
        &authority.acquire(&request("east", "other", "host-a")).await
    ));

    tokio::time::advance(TTL).await;
    let taken = grant(&authority, &request("east", "scheduler", "host-b")).await;
    drop(partition);
    assert_eq!(
        authority
            .renew(std::slice::from_ref(&held.fence), TTL)
            .await
            .unwrap(),
        vec![Renewed::Lost]
    );
    assert!(matches!(
        authority.while_fenced(&held.fence, &mut || true),
        Err(AuthorityError::Fenced { .. })
    ));
    authority.while_fenced(&taken.fence, &mut || true).unwrap();
}

#[tokio::test(start_paused = true)]
async fn only_applied_writes_are_counted() {
    let authority = MemoryAuthority::new();
    let held = grant(&authority, &request("east", "scheduler", "host-a")).await;
    authority.while_fenced(&held.fence, &mut || false).unwrap();
    authority.while_fenced(&held.fence, &mut || true).unwrap();
    let tenure = &authority.history(&held.fence.key, 1).await.unwrap()[0];
    assert_eq!(tenure.writes, 1);
    assert_eq!(tenure.last_write_at, Some(held.acquired_at));
}

#[tokio::test(start_paused = true)]
async fn the_memory_identity_never_matches_a_pinned_database() {
    let identity = MemoryAuthority::new().identity().await.unwrap();
    assert_eq!(identity.system_identifier, 0);
    assert!(!identity.in_recovery);
    assert!(identity.endpoint.contains("memory"));
    let pinned = crate::authority::ExpectedIdentity {
        database_id: Some(uuid::Uuid::new_v4()),
        system_identifier: None,
    };
    assert!(matches!(
        pinned.verify(&identity),
        Err(AuthorityError::WrongDatabase { .. })
    ));
}
