//! The lease conformance suite: every case is written once, against
//! [`Authority`], and runs against every backend (`memory_backend::*`,
//! `postgres_backend::*` and the embedded `sqlite_backend::*`). A backend supplies a [`Backend`]: two handles on
//! the same lease state (two pools for PostgreSQL), a way to make a grant
//! expire by the backend's own clock, and the fenced-write path the store
//! uses.
//!
//! Order comes from awaited calls and notifications, never from sleeping.

use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use tokio::sync::watch;

use super::memory::MemoryAuthority;
use super::postgres::PostgresAuthority;
use super::{
    AcquireRequest, Acquired, Authority, AuthorityError, CrashDetection, EndReason,
    ExpectedIdentity, Grant, MoveReason, PlacementMove, Renewed, TenureRecord,
};
use crate::db::Database;
use crate::fence::{Epoch, Fence, FenceCause, LeaseKey};
use crate::testing::TestDatabase;
use crate::timeouts::{DATABASE_STATEMENT, LEASE_TTL};

/// Long enough that nothing expires unless a test makes it.
pub(super) const TTL: Duration = LEASE_TTL;

/// How long a test waits for a wake-up that must come promptly.
pub(super) const PROMPT: Duration = DATABASE_STATEMENT;

/// What a backend gives the suite.
#[async_trait]
pub(super) trait Backend: Send + Sync {
    /// One handle on the lease state.
    fn first(&self) -> &dyn Authority;
    /// Another handle on the same state (PostgreSQL: another pool).
    fn second(&self) -> &dyn Authority;
    /// Make the current grant of `key` expire by the backend's clock.
    async fn expire(&self, key: &LeaseKey);
    /// Commit one fenced write the way the store does.
    async fn fenced_write(&self, fence: &Fence) -> Result<(), AuthorityError>;
    /// A release receiver of `second` for `cluster` that is known to be
    /// listening already, with every wake so far marked seen.
    async fn listen(&self, cluster: &str) -> watch::Receiver<u64>;
}

pub(super) fn request(cluster: &str, name: &str, holder: &str) -> AcquireRequest {
    AcquireRequest {
        key: LeaseKey::new(cluster, name),
        holder: holder.to_string(),
        ttl: TTL,
    }
}

/// Acquire and insist on a grant.
pub(super) async fn grant(authority: &dyn Authority, request: &AcquireRequest) -> Grant {
    match authority.acquire(request).await {
        Ok(Acquired::Granted(grant)) => {
            assert_eq!(grant.fence.key, request.key);
            assert_eq!(grant.fence.holder, request.holder);
            assert!(grant.acquired_at < grant.expires_at);
            grant
        }
        other => panic!(
            "{} expected a grant of {}, got {other:?}",
            request.holder, request.key
        ),
    }
}

/// Acquire and insist on being refused; returns who holds it, at which epoch.
pub(super) async fn refused(
    authority: &dyn Authority,
    request: &AcquireRequest,
) -> (String, Epoch) {
    match authority.acquire(request).await {
        Ok(Acquired::Held { holder, epoch, .. }) => (holder, epoch),
        other => panic!(
            "{} expected {} to be held, got {other:?}",
            request.holder, request.key
        ),
    }
}

async fn renew_one(authority: &dyn Authority, fence: &Fence) -> Renewed {
    let mut results = authority
        .renew(std::slice::from_ref(fence), TTL)
        .await
        .unwrap();
    assert_eq!(results.len(), 1);
    results.remove(0)
}

fn assert_fenced(result: Result<(), AuthorityError>, fence: &Fence, because: &str) {
    match result {
        Err(AuthorityError::Fenced {
            fence: refused,
            cause,
            reason,
        }) => {
            assert_eq!(&refused, fence);
            let expected = if because.contains("held by") {
                FenceCause::Superseded
            } else if because.contains("released") {
                FenceCause::Released
            } else if because.contains("never granted") {
                FenceCause::NeverGranted
            } else {
                FenceCause::Expired
            };
            assert_eq!(cause, expected, "the cause of {reason:?}");
            assert!(
                reason.contains(because),
                "reason {reason:?} lacks {because:?}"
            );
        }
        other => panic!("a write under {fence} must be fenced ({because}), got {other:?}"),
    }
}

pub(super) async fn epochs_strictly_increase_across_acquire_release_expiry_and_takeover(
    b: &dyn Backend,
) {
    let a = request("east", "scheduler", "host-a");
    let other = request("east", "scheduler", "host-b");

    let first = grant(b.first(), &a).await;
    assert_eq!(first.fence.epoch, Epoch(1));
    assert_eq!(
        refused(b.second(), &other).await,
        ("host-a".into(), Epoch(1))
    );

    b.first()
        .release(&first.fence, EndReason::Released)
        .await
        .unwrap();
    let second = grant(b.second(), &other).await;
    assert_eq!(second.fence.epoch, Epoch(2), "release then acquire");

    b.expire(&other.key).await;
    let third = grant(b.first(), &a).await;
    assert_eq!(third.fence.epoch, Epoch(3), "takeover after expiry");

    // The same holder coming back after its own release still gets a new
    // epoch: a fence is a tenure, not a holder.
    b.first()
        .release(&third.fence, EndReason::Released)
        .await
        .unwrap();
    let fourth = grant(b.first(), &a).await;
    assert_eq!(
        fourth.fence.epoch,
        Epoch(4),
        "re-acquire by the same holder"
    );

    let leases = b.second().observe("east").await.unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].epoch, Epoch(4));
    assert_eq!(leases[0].holder, "host-a");
    assert!(leases[0].active && !leases[0].released);
}

pub(super) async fn two_holders_never_hold_one_lease_at_once(b: &dyn Backend) {
    const CONTENDERS: usize = 8;
    let requests: Vec<AcquireRequest> = (0..CONTENDERS)
        .map(|i| request("east", "scheduler", &format!("host-{i}")))
        .collect();
    let answers = join_all(requests.iter().enumerate().map(|(i, r)| {
        let authority = if i % 2 == 0 { b.first() } else { b.second() };
        authority.acquire(r)
    }))
    .await;
    let grants: Vec<&Grant> = answers
        .iter()
        .filter_map(|a| match a.as_ref().unwrap() {
            Acquired::Granted(g) => Some(g),
            Acquired::Held { .. } => None,
        })
        .collect();
    assert_eq!(
        grants.len(),
        1,
        "exactly one of {CONTENDERS} contenders is granted"
    );
    let winner = grants[0].fence.clone();
    for answer in &answers {
        if let Ok(Acquired::Held { holder, epoch, .. }) = answer {
            assert_eq!((holder, *epoch), (&winner.holder, winner.epoch));
        }
    }

    // Renewing keeps it exclusive.
    assert!(matches!(
        renew_one(b.first(), &winner).await,
        Renewed::Extended { .. }
    ));
    let loser = requests.iter().find(|r| r.holder != winner.holder).unwrap();
    assert_eq!(
        refused(b.second(), loser).await,
        (winner.holder.clone(), winner.epoch)
    );

    // After expiry a successor is granted and the former holder can neither
    // renew nor write: at no point do both hold it.
    b.expire(&winner.key).await;
    let successor = grant(b.second(), loser).await;
    assert_eq!(successor.fence.epoch, Epoch(winner.epoch.0 + 1));
    assert_eq!(renew_one(b.first(), &winner).await, Renewed::Lost);
    assert_fenced(b.fenced_write(&winner).await, &winner, "held by");
    b.fenced_write(&successor.fence).await.unwrap();
    let leases = b.first().observe("east").await.unwrap();
    assert_eq!(leases.iter().filter(|l| l.active).count(), 1);
    assert_eq!(leases[0].holder, successor.fence.holder);
}

pub(super) async fn same_name_in_two_clusters_does_not_contend(b: &dyn Backend) {
    let in_east = request("east", "scheduler", "host-a");
    let in_west = request("west", "scheduler", "host-b");
    let east = grant(b.first(), &in_east).await;
    let west = grant(b.second(), &in_west).await;
    assert_eq!(east.fence.epoch, Epoch(1));
    assert_eq!(west.fence.epoch, Epoch(1));

    for (cluster, holder) in [("east", "host-a"), ("west", "host-b")] {
        let leases = b.first().observe(cluster).await.unwrap();
        assert_eq!(leases.len(), 1, "cluster {cluster} sees only its own lease");
        assert_eq!(leases[0].holder, holder);
    }

    // Releasing one cluster's lease leaves the other's tenure untouched.
    b.first()
        .release(&east.fence, EndReason::Released)
        .await
        .unwrap();
    assert!(matches!(
        renew_one(b.second(), &west.fence).await,
        Renewed::Extended { .. }
    ));
    b.fenced_write(&west.fence).await.unwrap();
    assert_fenced(b.fenced_write(&east.fence).await, &east.fence, "released");
    let east_again = grant(b.second(), &request("east", "scheduler", "host-b")).await;
    assert_eq!(east_again.fence.epoch, Epoch(2));
    assert_eq!(b.first().observe("west").await.unwrap()[0].epoch, Epoch(1));
}

pub(super) async fn renew_by_a_stale_epoch_fails(b: &dyn Backend) {
    let a = request("east", "scheduler", "host-a");
    let stale = grant(b.first(), &a).await;
    b.first()
        .release(&stale.fence, EndReason::Released)
        .await
        .unwrap();
    let current = grant(b.first(), &a).await;
    let impostor = Fence {
        holder: "host-z".into(),
        ..current.fence.clone()
    };

    // One call, several fences, answers in input order.
    let answers = b
        .first()
        .renew(&[stale.fence.clone(), current.fence.clone(), impostor], TTL)
        .await
        .unwrap();
    assert_eq!(answers.len(), 3);
    assert_eq!(answers[0], Renewed::Lost, "stale epoch");
    match &answers[1] {
        Renewed::Extended { expires_at } => assert!(*expires_at >= current.expires_at),
        other => panic!("the current fence must be extended, got {other:?}"),
    }
    assert_eq!(answers[2], Renewed::Lost, "right epoch, wrong holder");

    // An expired grant is not brought back by a late renewal.
    b.expire(&a.key).await;
    assert_eq!(renew_one(b.second(), &current.fence).await, Renewed::Lost);
    assert!(b.first().renew(&[], TTL).await.unwrap().is_empty());
}

pub(super) async fn released_leases_are_immediately_acquirable(b: &dyn Backend) {
    let mut wakes = b.listen("east").await;
    let a = request("east", "scheduler", "host-a");
    let held = grant(b.first(), &a).await;
    b.first()
        .release(&held.fence, EndReason::Released)
        .await
        .unwrap();

    // The standby is woken by the release (NOTIFY for PostgreSQL) and is
    // granted at once, long before the released grant's ttl.
    tokio::time::timeout(PROMPT, wakes.changed())
        .await
        .expect("the standby is woken by the release")
        .unwrap();
    let taken = grant(b.second(), &request("east", "scheduler", "host-b")).await;
    assert_eq!(taken.fence.epoch, Epoch(held.fence.epoch.0 + 1));
    assert!(
        taken.acquired_at < held.expires_at,
        "granted before the old ttl ran out"
    );

    // A second release by the former holder changes nothing.
    b.first()
        .release(&held.fence, EndReason::Released)
        .await
        .unwrap();
    assert!(matches!(
        renew_one(b.second(), &taken.fence).await,
        Renewed::Extended { .. }
    ));
}

pub(super) async fn release_wakes_only_its_own_cluster(b: &dyn Backend) {
    let mut east = b.listen("east").await;
    let mut west = b.listen("west").await;
    let east_grant = grant(b.first(), &request("east", "scheduler", "host-a")).await;
    let west_grant = grant(b.first(), &request("west", "scheduler", "host-a")).await;

    b.first()
        .release(&east_grant.fence, EndReason::Released)
        .await
        .unwrap();
    tokio::time::timeout(PROMPT, east.changed())
        .await
        .expect("east is woken")
        .unwrap();
    // East's wake has been delivered; had it been meant for west too, west
    // would have been woken by the same delivery.
    assert!(
        !west.has_changed().unwrap(),
        "west was woken by east's release"
    );

    b.first()
        .release(&west_grant.fence, EndReason::Released)
        .await
        .unwrap();
    tokio::time::timeout(PROMPT, west.changed())
        .await
        .expect("west is woken")
        .unwrap();
}

pub(super) async fn history_records_every_tenure_with_its_end_reason(b: &dyn Backend) {
    let a = request("east", "scheduler", "host-a");
    let other = request("east", "scheduler", "host-b");

    let first = grant(b.first(), &a).await;
    b.fenced_write(&first.fence).await.unwrap();
    b.fenced_write(&first.fence).await.unwrap();
    b.first()
        .release(&first.fence, EndReason::Released)
        .await
        .unwrap();

    let second = grant(b.second(), &other).await;
    b.expire(&other.key).await;
    let third = grant(b.first(), &a).await;
    b.first()
        .release(&third.fence, EndReason::Lost)
        .await
        .unwrap();
    let fourth = grant(b.second(), &other).await;

    let history = b.first().history(&a.key, 10).await.unwrap();
    let summary: Vec<(u64, &str, Option<EndReason>)> = history
        .iter()
        .map(|t| (t.epoch.0, t.holder.as_str(), t.end_reason))
        .collect();
    assert_eq!(
        summary,
        vec![
            (4, "host-b", None),
            (3, "host-a", Some(EndReason::Lost)),
            (2, "host-b", Some(EndReason::Expired)),
            (1, "host-a", Some(EndReason::Released)),
        ]
    );
    assert_eq!(history[0].acquired_at, fourth.acquired_at);
    assert!(
        history[0].ended_at.is_none(),
        "the running tenure has no end"
    );
    assert_eq!(history[3].writes, 2, "accepted writes are counted");
    assert!(history[3].last_write_at.is_some());
    assert_eq!(history[2].writes, 0);
    assert!(history[2].last_write_at.is_none());
    assert_eq!(history[2].acquired_at, second.acquired_at);
    for tenure in &history {
        assert!(
            !tenure.endpoint.is_empty(),
            "every tenure names its endpoint"
        );
    }
    // Tenures never overlap: each ended before the next began.
    for pair in history.windows(2) {
        let (newer, older) = (&pair[0], &pair[1]);
        let ended = older.ended_at.expect("an older tenure has ended");
        assert!(older.acquired_at <= ended);
        assert!(
            ended <= newer.acquired_at,
            "epoch {} overlaps {}",
            older.epoch,
            newer.epoch
        );
    }
    assert_eq!(third.fence.epoch, Epoch(3));

    let newest_two = b.second().history(&a.key, 2).await.unwrap();
    assert_eq!(
        newest_two.iter().map(|t| t.epoch.0).collect::<Vec<_>>(),
        vec![4, 3]
    );
    // Paging by epoch: the page after one that ended at epoch 3.
    let epochs = |page: Vec<TenureRecord>| page.iter().map(|t| t.epoch.0).collect::<Vec<_>>();
    let older = b
        .second()
        .history_before(&a.key, Some(Epoch(3)), 10)
        .await
        .unwrap();
    assert_eq!(epochs(older), vec![2, 1]);
    let one = b
        .first()
        .history_before(&a.key, Some(Epoch(4)), 1)
        .await
        .unwrap();
    assert_eq!(epochs(one), vec![3]);
    assert!(
        b.first()
            .history_before(&a.key, Some(Epoch(1)), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        b.first()
            .history(&LeaseKey::new("east", "never"), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub(super) async fn outbound_statistics_are_recorded_per_tenure_and_never_lowered(b: &dyn Backend) {
    let a = request("east", "scheduler", "host-a");
    let other = request("east", "scheduler", "host-b");
    let at = |secs: i64| chrono::DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap();

    let first = grant(b.first(), &a).await;
    let history = b.first().history(&a.key, 10).await.unwrap();
    assert_eq!(history[0].outbound_requests, 0, "nothing recorded yet");
    assert_eq!(history[0].last_outbound_at, None);

    // Recorded after the release, as the supervisor does: not fenced.
    b.first()
        .release(&first.fence, EndReason::Released)
        .await
        .unwrap();
    b.first()
        .record_outbound(&first.fence, 5, Some(at(10)))
        .await
        .unwrap();
    // A successor's tenure is another row.
    let second = grant(b.second(), &other).await;
    b.second()
        .record_outbound(&second.fence, 1, None)
        .await
        .unwrap();
    // A late or repeated write never lowers a value, nor clears a time.
    b.second()
        .record_outbound(&first.fence, 3, Some(at(5)))
        .await
        .unwrap();
    b.second()
        .record_outbound(&first.fence, 0, None)
        .await
        .unwrap();

    let history = b.first().history(&a.key, 10).await.unwrap();
    let summary: Vec<(u64, u64, Option<chrono::DateTime<chrono::Utc>>)> = history
        .iter()
        .map(|t| (t.epoch.0, t.outbound_requests, t.last_outbound_at))
        .collect();
    assert_eq!(summary, vec![(2, 1, None), (1, 5, Some(at(10)))]);

    // A higher value does replace a lower one.
    b.first()
        .record_outbound(&first.fence, 7, Some(at(20)))
        .await
        .unwrap();
    let history = b.second().history(&a.key, 10).await.unwrap();
    assert_eq!(history[1].outbound_requests, 7);
    assert_eq!(history[1].last_outbound_at, Some(at(20)));
    // Nothing else of the tenure changed.
    assert_eq!(history[1].end_reason, Some(EndReason::Released));
    assert_eq!(history[1].writes, 0);

    // A fence that names no tenure (another holder at that epoch, or an
    // epoch never granted) changes nothing and is no error.
    let stranger = Fence {
        holder: "host-c".into(),
        ..first.fence.clone()
    };
    b.first()
        .record_outbound(&stranger, 99, Some(at(30)))
        .await
        .unwrap();
    let never = Fence {
        epoch: Epoch(9),
        ..first.fence.clone()
    };
    b.first()
        .record_outbound(&never, 99, Some(at(30)))
        .await
        .unwrap();
    let history = b.first().history(&a.key, 10).await.unwrap();
    assert_eq!(
        history
            .iter()
            .map(|t| (t.outbound_requests, t.last_outbound_at))
            .collect::<Vec<_>>(),
        vec![(1, None), (7, Some(at(20)))]
    );
    // Names are checked like every other call's.
    let bad = Fence {
        holder: String::new(),
        ..first.fence.clone()
    };
    assert!(matches!(
        b.first().record_outbound(&bad, 1, None).await,
        Err(AuthorityError::InvalidName(_))
    ));
}

pub(super) async fn a_stale_release_never_releases_the_successor(b: &dyn Backend) {
    let a = request("east", "scheduler", "host-a");
    let old = grant(b.first(), &a).await;
    b.expire(&a.key).await;
    let successor = grant(b.second(), &request("east", "scheduler", "host-b")).await;

    b.first()
        .release(&old.fence, EndReason::Released)
        .await
        .unwrap();

    let leases = b.second().observe("east").await.unwrap();
    assert!(leases[0].active && !leases[0].released);
    assert_eq!(leases[0].holder, "host-b");
    assert!(matches!(
        renew_one(b.second(), &successor.fence).await,
        Renewed::Extended { .. }
    ));
    // The old tenure keeps the end the grant recorded.
    let history = b.first().history(&a.key, 10).await.unwrap();
    assert_eq!(history[1].end_reason, Some(EndReason::Expired));
}

/// The last placement move of lease `name` in cluster `east`, as
/// `observe` shows it.
async fn last_move(authority: &dyn Authority, name: &str) -> Option<PlacementMove> {
    authority
        .observe("east")
        .await
        .unwrap()
        .into_iter()
        .find(|lease| lease.name == name)
        .unwrap_or_else(|| panic!("lease {name} is listed"))
        .last_move
}

/// Acquire `request` for placement reason `moved` and insist on a grant.
async fn grant_placed(
    authority: &dyn Authority,
    request: &AcquireRequest,
    moved: Option<MoveReason>,
) -> Grant {
    match authority
        .acquire_placed(request, CrashDetection::Ttl, moved)
        .await
    {
        Ok(Acquired::Granted(grant)) => grant,
        other => panic!(
            "{} expected a grant of {}, got {other:?}",
            request.holder, request.key
        ),
    }
}

pub(super) async fn an_over_share_handover_records_its_reason_from_and_to(b: &dyn Backend) {
    let a = request("east", "scheduler", "host-a");
    let to_b = request("east", "scheduler", "host-b");
    let first = grant(b.first(), &a).await;
    assert_eq!(last_move(b.second(), "scheduler").await, None);
    assert_eq!(
        first.moved, None,
        "a first grant with no reason moves nothing"
    );

    // The handover's release leaves its reason; the move is the grant to
    // the next holder, which records it with its own time.
    b.first()
        .release_placed(
            &first.fence,
            EndReason::Released,
            Some(MoveReason::OverShare),
        )
        .await
        .unwrap();
    assert_eq!(
        last_move(b.second(), "scheduler").await,
        None,
        "released, not yet moved"
    );
    let second = grant(b.second(), &to_b).await;
    let moved = PlacementMove {
        reason: MoveReason::OverShare,
        at: second.acquired_at,
        from: Some("host-a".into()),
        to: "host-b".into(),
    };
    assert_eq!(last_move(b.first(), "scheduler").await, Some(moved.clone()));
    assert_eq!(
        second.moved,
        Some(MoveReason::OverShare),
        "the grant tells the taker the move it recorded"
    );

    // Ordinary releases and grants move nothing, whoever takes the lease.
    b.second()
        .release(&second.fence, EndReason::Released)
        .await
        .unwrap();
    let third = grant(b.first(), &a).await;
    assert_eq!(
        last_move(b.second(), "scheduler").await,
        Some(moved.clone())
    );
    assert_eq!(third.moved, None);

    // A handover taken back by its own holder is no move, and the grant
    // that undid it clears it: a later ordinary grant elsewhere moves
    // nothing either.
    b.first()
        .release_placed(
            &third.fence,
            EndReason::Released,
            Some(MoveReason::OverShare),
        )
        .await
        .unwrap();
    let fourth = grant(b.first(), &a).await;
    assert_eq!(
        last_move(b.second(), "scheduler").await,
        Some(moved.clone())
    );
    assert_eq!(fourth.moved, None, "a handover taken back is no move");
    b.first()
        .release(&fourth.fence, EndReason::Released)
        .await
        .unwrap();
    let fifth = grant(b.second(), &to_b).await;
    assert_eq!(
        last_move(b.second(), "scheduler").await,
        Some(moved.clone())
    );
    assert_eq!(fifth.moved, None);

    // A stale holder's handover changes nothing: its release finds the
    // row another's.
    b.first()
        .release_placed(
            &fourth.fence,
            EndReason::Released,
            Some(MoveReason::OverShare),
        )
        .await
        .unwrap();
    b.expire(&to_b.key).await;
    let sixth = grant(b.first(), &a).await;
    assert!(fifth.fence.epoch < sixth.fence.epoch);
    assert_eq!(sixth.moved, None, "a stale handover recorded a move");
    assert_eq!(
        last_move(b.second(), "scheduler").await,
        Some(moved),
        "a stale handover recorded a move"
    );

    // A handover's reason wins over the taker's own.
    b.first()
        .release_placed(
            &sixth.fence,
            EndReason::Released,
            Some(MoveReason::OverShare),
        )
        .await
        .unwrap();
    let seventh = grant_placed(b.second(), &to_b, Some(MoveReason::NoOtherHost)).await;
    assert_eq!(
        last_move(b.first(), "scheduler").await,
        Some(PlacementMove {
            reason: MoveReason::OverShare,
            at: seventh.acquired_at,
            from: Some("host-a".into()),
            to: "host-b".into(),
        })
    );
    assert_eq!(seventh.moved, Some(MoveReason::OverShare));
}

pub(super) async fn a_lapsed_takeover_records_its_reason_from_and_to(b: &dyn Backend) {
    let a = request("east", "scheduler", "host-a");
    let to_b = request("east", "scheduler", "host-b");
    grant(b.first(), &a).await;
    b.expire(&a.key).await;
    let taken = grant_placed(b.second(), &to_b, Some(MoveReason::Lapsed)).await;
    let lapsed = PlacementMove {
        reason: MoveReason::Lapsed,
        at: taken.acquired_at,
        from: Some("host-a".into()),
        to: "host-b".into(),
    };
    assert_eq!(
        last_move(b.first(), "scheduler").await,
        Some(lapsed.clone())
    );
    assert_eq!(taken.moved, Some(MoveReason::Lapsed));

    // Taken back by the same holder: no move.
    b.expire(&to_b.key).await;
    let again = grant_placed(b.second(), &to_b, Some(MoveReason::Lapsed)).await;
    assert_eq!(last_move(b.first(), "scheduler").await, Some(lapsed));
    assert_eq!(again.moved, None, "taken back by its holder: no move");

    // A lease's first grant beyond the share moves it from no holder.
    let rollout = request("east", "rollout", "host-c");
    let first = grant_placed(b.first(), &rollout, Some(MoveReason::NoOtherHost)).await;
    assert_eq!(
        last_move(b.second(), "rollout").await,
        Some(PlacementMove {
            reason: MoveReason::NoOtherHost,
            at: first.acquired_at,
            from: None,
            to: "host-c".into(),
        })
    );
    assert_eq!(first.moved, Some(MoveReason::NoOtherHost));
}

pub(super) async fn fenced_writes_are_refused_once_the_fence_is_stale(b: &dyn Backend) {
    let never = Fence {
        key: LeaseKey::new("east", "scheduler"),
        epoch: Epoch(1),
        holder: "host-a".into(),
    };
    assert_fenced(b.fenced_write(&never).await, &never, "never granted");

    let a = request("east", "scheduler", "host-a");
    let first = grant(b.first(), &a).await;
    b.fenced_write(&first.fence).await.unwrap();
    b.first()
        .release(&first.fence, EndReason::Released)
        .await
        .unwrap();
    assert_fenced(b.fenced_write(&first.fence).await, &first.fence, "released");

    let second = grant(b.second(), &a).await;
    assert_fenced(
        b.fenced_write(&first.fence).await,
        &first.fence,
        "epoch 2 held by host-a",
    );
    b.expire(&a.key).await;
    assert_fenced(
        b.fenced_write(&second.fence).await,
        &second.fence,
        "expired",
    );

    let history = b.first().history(&a.key, 10).await.unwrap();
    assert_eq!(
        history.iter().map(|t| t.writes).collect::<Vec<_>>(),
        vec![0, 1]
    );
}

pub(super) async fn bad_input_gets_a_clear_error(b: &dyn Backend) {
    let authority = b.first();
    let named = |result: Result<Acquired, AuthorityError>, what: &str| match result {
        Err(AuthorityError::InvalidName(e)) => assert_eq!(e.what, what, "{e}"),
        other => panic!("expected an invalid {what}, got {other:?}"),
    };
    named(
        authority.acquire(&request("", "scheduler", "host-a")).await,
        "cluster",
    );
    named(
        authority
            .acquire(&request("East", "scheduler", "host-a"))
            .await,
        "cluster",
    );
    named(
        authority
            .acquire(&request("east", &"x".repeat(64), "host-a"))
            .await,
        "lease",
    );
    named(
        authority.acquire(&request("east", "", "host-a")).await,
        "lease",
    );
    named(
        authority.acquire(&request("east", "scheduler", "")).await,
        "holder",
    );
    named(
        authority
            .acquire(&request("east", "scheduler", "host a"))
            .await,
        "holder",
    );

    let zero = AcquireRequest {
        ttl: Duration::ZERO,
        ..request("east", "scheduler", "host-a")
    };
    match authority.acquire(&zero).await {
        Err(e @ AuthorityError::Invalid { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("east/scheduler") && text.contains("ttl"),
                "{text}"
            );
        }
        other => panic!("a zero ttl must be refused, got {other:?}"),
    }

    let held = grant(authority, &request("east", "scheduler", "host-a")).await;
    assert!(matches!(
        authority
            .renew(std::slice::from_ref(&held.fence), Duration::ZERO)
            .await,
        Err(AuthorityError::Invalid { .. })
    ));
    let bad_fence = Fence {
        holder: String::new(),
        ..held.fence.clone()
    };
    assert!(matches!(
        authority.release(&bad_fence, EndReason::Released).await,
        Err(AuthorityError::InvalidName(_))
    ));
    assert!(matches!(
        authority.observe("").await,
        Err(AuthorityError::InvalidName(_))
    ));
    assert!(matches!(
        authority.history(&LeaseKey::new("east", "-x"), 1).await,
        Err(AuthorityError::InvalidName(_))
    ));
    // Nothing invalid left a trace; the valid grant is intact.
    let leases = authority.observe("east").await.unwrap();
    assert_eq!(leases.len(), 1);
    assert!(leases[0].active);
}

/// A lease's settled position is recorded by its current tenure's renewals
/// and release, never by a stale tenure's, kept when a renewal or release
/// brings none, and answered by every later grant (the successor's worker
/// starts reading the change stream there).
pub(super) async fn the_settled_position_is_recorded_by_the_current_tenure_only(b: &dyn Backend) {
    let a = request("east", "watcher", "host-a");
    let first = grant(b.first(), &a).await;
    assert_eq!(first.settled, None, "a lease's first grant knows none");
    let renewed = b
        .first()
        .renew_settled(std::slice::from_ref(&first.fence), &[Some(40)], TTL)
        .await
        .unwrap();
    assert!(matches!(renewed[..], [Renewed::Extended { .. }]));
    // A renewal without a position keeps the recorded one.
    b.first()
        .renew_settled(std::slice::from_ref(&first.fence), &[None], TTL)
        .await
        .unwrap();
    b.first()
        .release_settled(&first.fence, EndReason::Released, None, None)
        .await
        .unwrap();
    let second = grant(b.second(), &request("east", "watcher", "host-b")).await;
    assert_eq!(second.settled, Some(40));

    // The successor moves it on; the stale tenure's renewal and release
    // change nothing.
    b.second()
        .renew_settled(std::slice::from_ref(&second.fence), &[Some(55)], TTL)
        .await
        .unwrap();
    let stale = b
        .first()
        .renew_settled(std::slice::from_ref(&first.fence), &[Some(99)], TTL)
        .await
        .unwrap();
    assert_eq!(stale, [Renewed::Lost]);
    b.first()
        .release_settled(&first.fence, EndReason::Released, None, Some(98))
        .await
        .unwrap();
    // In a batch, each fence records its own position.
    let other = grant(b.second(), &request("east", "other", "host-b")).await;
    b.second()
        .renew_settled(
            &[second.fence.clone(), other.fence.clone()],
            &[Some(60), Some(7)],
            TTL,
        )
        .await
        .unwrap();
    b.expire(&a.key).await;
    let third = grant(b.first(), &a).await;
    assert_eq!(third.settled, Some(60), "the expired tenure's last renewal");
    // The release records the final position.
    b.first()
        .release_settled(&third.fence, EndReason::Released, None, Some(75))
        .await
        .unwrap();
    b.second()
        .release_settled(&other.fence, EndReason::Released, None, None)
        .await
        .unwrap();
    assert_eq!(grant(b.second(), &a).await.settled, Some(75));
    let other = grant(b.first(), &request("east", "other", "host-a")).await;
    assert_eq!(other.settled, Some(7));
}

/// Both backends run every case.
macro_rules! conformance_suite {
    ($($case:ident),* $(,)?) => {
        mod memory_backend {
            $(
                #[tokio::test(start_paused = true)]
                async fn $case() {
                    super::$case(&super::MemoryBackend::new()).await;
                }
            )*
        }
        mod postgres_backend {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(&super::PostgresBackend::create().await).await;
                }
            )*
        }
        mod sqlite_backend {
            $(
                #[tokio::test]
                async fn $case() {
                    let backend = crate::authority::sqlite::tests::SqliteBackend::create().await;
                    super::$case(&backend).await;
                }
            )*
        }
    };
}

conformance_suite!(
    epochs_strictly_increase_across_acquire_release_expiry_and_takeover,
    two_holders_never_hold_one_lease_at_once,
    same_name_in_two_clusters_does_not_contend,
    renew_by_a_stale_epoch_fails,
    released_leases_are_immediately_acquirable,
    release_wakes_only_its_own_cluster,
    history_records_every_tenure_with_its_end_reason,
    outbound_statistics_are_recorded_per_tenure_and_never_lowered,
    a_stale_release_never_releases_the_successor,
    an_over_share_handover_records_its_reason_from_and_to,
    a_lapsed_takeover_records_its_reason_from_and_to,
    fenced_writes_are_refused_once_the_fence_is_stale,
    bad_input_gets_a_clear_error,
    the_settled_position_is_recorded_by_the_current_tenure_only,
);

/// The memory backend: one authority seen twice; expiry by fault injection.
pub(super) struct MemoryBackend {
    authority: MemoryAuthority,
}

impl MemoryBackend {
    pub(super) fn new() -> Self {
        Self {
            authority: MemoryAuthority::new(),
        }
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn first(&self) -> &dyn Authority {
        &self.authority
    }

    fn second(&self) -> &dyn Authority {
        &self.authority
    }

    async fn expire(&self, key: &LeaseKey) {
        self.authority
            .faults()
            .expire(key)
            .expect("the lease exists");
    }

    async fn fenced_write(&self, fence: &Fence) -> Result<(), AuthorityError> {
        use super::fence_check::FenceLock;
        self.authority.while_fenced(fence, &mut || true)
    }

    async fn listen(&self, cluster: &str) -> watch::Receiver<u64> {
        self.authority.released(cluster)
    }
}

/// PostgreSQL: a fresh database, two authorities on two pools, and an
/// admin pool standing in for the passage of time.
pub(super) struct PostgresBackend {
    first: PostgresAuthority,
    second: PostgresAuthority,
    admin: Database,
    // Last: dropped after the pools, so the database drop finds no users.
    _database: TestDatabase,
}

impl PostgresBackend {
    pub(super) async fn create() -> Self {
        let database = TestDatabase::create().await;
        Self {
            first: PostgresAuthority::new(database.database(4), ExpectedIdentity::default()),
            second: PostgresAuthority::new(database.database(4), ExpectedIdentity::default()),
            admin: database.database(1),
            _database: database,
        }
    }
}

#[async_trait]
impl Backend for PostgresBackend {
    fn first(&self) -> &dyn Authority {
        &self.first
    }

    fn second(&self) -> &dyn Authority {
        &self.second
    }

    async fn expire(&self, key: &LeaseKey) {
        // Moves the expiry to the database's now instead of waiting for it:
        // the grant is then expired by `clock_timestamp()` exactly as if
        // its ttl had run out. (`expiry_is_judged_by_the_database_clock`
        // waits for a real ttl.)
        let client = self.admin.client().await.unwrap();
        let updated = client
            .execute(
                "UPDATE leasehold_leases SET expires_at = clock_timestamp()
                  WHERE cluster = $1 AND name = $2",
                &[&key.cluster, &key.name],
            )
            .await
            .unwrap();
        assert_eq!(updated, 1, "the lease {key} exists");
    }

    async fn fenced_write(&self, fence: &Fence) -> Result<(), AuthorityError> {
        let mut client = self.admin.client().await.unwrap();
        let statements = super::fence_check::FenceStatements::cached(&client)
            .await
            .unwrap();
        let tx = client.transaction().await.unwrap();
        super::fence_check::check_fence(&tx, &statements, fence).await?;
        super::fence_check::record_write(&tx, &statements, fence).await?;
        tx.commit().await.unwrap();
        Ok(())
    }

    async fn listen(&self, cluster: &str) -> watch::Receiver<u64> {
        let mut receiver = self.second.released(cluster);
        let mut sessions = self.second.listener_sessions();
        tokio::time::timeout(PROMPT, sessions.wait_for(|&n| n > 0))
            .await
            .expect("the release listener connects")
            .unwrap();
        receiver.borrow_and_update();
        receiver
    }
}
