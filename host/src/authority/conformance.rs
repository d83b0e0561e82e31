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
    ExpectedIdentity, Grant, MoveReason, PlacementMove, RecordedSharding, Renewed,
    ShardingConflict, ShardingRefusal, ShardingRule, TenureRecord,
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

/// Acquire `request`'s lease under `rule`.
async fn acquire_as(
    authority: &dyn Authority,
    request: &AcquireRequest,
    rule: &ShardingRule,
) -> Result<Acquired, AuthorityError> {
    authority
        .acquire_sharded(request, CrashDetection::Ttl, None, Some(rule))
        .await
}

/// Insist on a grant of `request` under `rule`.
async fn grant_as(
    authority: &dyn Authority,
    request: &AcquireRequest,
    rule: &ShardingRule,
) -> Grant {
    match acquire_as(authority, request, rule).await {
        Ok(Acquired::Granted(grant)) => grant,
        other => panic!(
            "{} expected a grant of {} as {rule}, got {other:?}",
            request.holder, request.key
        ),
    }
}

/// Insist on a refusal of `request` under `rule`; returns it.
async fn refused_as(
    authority: &dyn Authority,
    request: &AcquireRequest,
    rule: &ShardingRule,
) -> ShardingRefusal {
    match acquire_as(authority, request, rule).await {
        Err(AuthorityError::Sharding(refusal)) => {
            assert_eq!(refusal.key, request.key, "{refusal}");
            assert_eq!(refusal.controller, rule.controller, "{refusal}");
            *refusal
        }
        other => panic!(
            "{} expected {} refused as {rule}, got {other:?}",
            request.holder, request.key
        ),
    }
}

fn shards(controller: &str, count: u32) -> ShardingRule {
    ShardingRule::new(controller, Some(count), None, Vec::new())
}

/// The first acquire of a controller's lease records its sharding (count,
/// shard label, every-shard kinds) with the leases; an acquire by a host
/// that runs it otherwise is refused, whether the lease is held, free or
/// never granted, naming the lease, its epoch, the record, who made it
/// and what that host has; one that runs it alike leads or stands by as
/// ever.
pub(super) async fn a_host_whose_sharding_differs_from_the_record_is_refused(b: &dyn Backend) {
    let four = shards("x", 4);
    let a0 = request("east", "x-0", "host-a");
    let first = grant_as(b.first(), &a0, &four).await;
    let records = b.second().shardings("east").await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].rule, four);
    assert_eq!(records[0].recorded_by, "holder host-a");

    // Another count: refused on the held lease (at its epoch), on one never
    // granted, and on a lease the recorded count does not even have.
    let two = shards("x", 2);
    let refusal = refused_as(b.second(), &request("east", "x-0", "host-b"), &two).await;
    assert_eq!(refusal.epoch, Some(first.fence.epoch));
    let text = refusal.to_string();
    for part in [
        "refusing to lead lease east/x-0 (epoch 1) of controller x",
        "records controller x as 4 shards (leases x-0 … x-3) by kind/name",
        "recorded by holder host-a",
        "this host runs it as 2 shards (leases x-0 … x-1) by kind/name",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
    let refusal = refused_as(b.second(), &request("east", "x-1", "host-b"), &two).await;
    assert_eq!(refusal.epoch, None, "x-1 was never granted: {refusal}");
    refused_as(
        b.second(),
        &request("east", "x-5", "host-b"),
        &shards("x", 8),
    )
    .await;
    // The guest's side of the rule: a shard label, every-shard kinds.
    let labelled = ShardingRule::new("x", Some(4), Some("example.com/tenant".into()), Vec::new());
    let text = refused_as(b.second(), &request("east", "x-1", "host-b"), &labelled)
        .await
        .to_string();
    assert!(
        text.contains("by the shard label example.com/tenant"),
        "{text}"
    );
    let watching = ShardingRule::new("x", Some(4), None, vec!["nodes".to_string()]);
    refused_as(b.second(), &request("east", "x-2", "host-b"), &watching).await;
    // Nothing was granted or recorded by the refusals.
    assert_eq!(b.second().shardings("east").await.unwrap()[0].rule, four);
    assert!(
        b.first()
            .observe("east")
            .await
            .unwrap()
            .iter()
            .all(|l| l.name == "x-0"),
        "a refused acquire granted nothing"
    );

    // Alike: leads a free shard, stands by on a held one.
    let b1 = grant_as(b.second(), &request("east", "x-1", "host-b"), &four).await;
    assert_eq!(b1.fence.epoch, Epoch(1));
    match acquire_as(b.second(), &request("east", "x-0", "host-b"), &four).await {
        Ok(Acquired::Held { holder, .. }) => assert_eq!(holder, "host-a"),
        other => panic!("x-0 is host-a's, got {other:?}"),
    }
    // The record is per cluster: another cluster records its own.
    grant_as(b.second(), &request("west", "x-0", "host-b"), &two).await;
    assert_eq!(b.first().shardings("west").await.unwrap()[0].rule, two);
}

/// A lease belongs to one controller: an unsharded controller `x-1` and
/// shard 1 of `x` never share the lease `x-1`, whichever host recorded
/// its controller first; nothing of the refused one is recorded.
pub(super) async fn a_lease_is_never_run_by_two_controllers(b: &dyn Backend) {
    // `x` first, then the unsharded `x-1`.
    grant_as(
        b.first(),
        &request("east", "x-0", "host-a"),
        &shards("x", 2),
    )
    .await;
    let unsharded = ShardingRule::unsharded("x-1");
    let text = refused_as(b.second(), &request("east", "x-1", "host-b"), &unsharded)
        .await
        .to_string();
    for part in [
        "refusing to lead lease east/x-1 (never granted) of controller x-1",
        "records lease x-1 as shard 1 of 2 of controller x",
        "recorded by holder host-a",
        "this host runs it as the lease of the unsharded controller x-1",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
    // The unsharded `x-1` first, then `x`: refused on every shard, even
    // the one whose name nobody else runs.
    grant_as(b.first(), &request("west", "x-1", "host-a"), &unsharded).await;
    for lease in ["x-0", "x-1"] {
        let refusal = refused_as(
            b.second(),
            &request("west", lease, "host-b"),
            &shards("x", 2),
        )
        .await;
        let text = refusal.to_string();
        assert!(
            text.contains("records lease x-1 as the lease of the unsharded controller x-1")
                && text.contains("this host runs it as shard 1 of 2 of controller x"),
            "{text}"
        );
    }
    let records = b.first().shardings("west").await.unwrap();
    assert_eq!(records.len(), 1, "nothing of x recorded: {records:?}");
    assert_eq!(records[0].rule, unsharded);
}

/// Two hosts recording two rules of one controller, or two controllers
/// sharing a lease name, at once: one records and the other is refused.
pub(super) async fn concurrent_first_records_leave_one_rule(b: &dyn Backend) {
    let (two, three) = (shards("x", 2), shards("x", 3));
    let (x0, x1) = (
        request("east", "x-0", "host-a"),
        request("east", "x-1", "host-b"),
    );
    let (a, c) = tokio::join!(
        acquire_as(b.first(), &x0, &two),
        acquire_as(b.second(), &x1, &three),
    );
    let outcomes = [a.is_ok(), c.is_ok()];
    assert_eq!(
        outcomes.iter().filter(|ok| **ok).count(),
        1,
        "{a:?} / {c:?}"
    );
    let winner = if outcomes[0] { &two } else { &three };
    assert_eq!(b.first().shardings("east").await.unwrap()[0].rule, *winner);
    for loser in [a, c].into_iter().filter(Result::is_err) {
        assert!(
            matches!(loser, Err(AuthorityError::Sharding(_))),
            "{loser:?}"
        );
    }

    let (y0, y1) = (
        request("west", "y-0", "host-a"),
        request("west", "y-1", "host-b"),
    );
    let (y, unsharded) = (shards("y", 2), ShardingRule::unsharded("y-1"));
    let (a, c) = tokio::join!(
        acquire_as(b.first(), &y0, &y),
        acquire_as(b.second(), &y1, &unsharded),
    );
    assert_eq!(
        [&a, &c].iter().filter(|r| r.is_ok()).count(),
        1,
        "{a:?} / {c:?}"
    );
    assert_eq!(b.first().shardings("west").await.unwrap().len(), 1);
}

/// The record changes only by `reshard`, and only while no lease of the
/// controller, under the recorded rule or the new one, is held (a
/// released or expired one is not); then the old rule is refused and the
/// new one leads. A new rule one of whose leases another controller runs
/// is refused; forgetting lets the next acquire record its own.
pub(super) async fn the_sharding_changes_only_while_none_of_its_leases_is_held(b: &dyn Backend) {
    let (two, three) = (shards("x", 2), shards("x", 3));
    let x0 = grant_as(b.first(), &request("east", "x-0", "host-a"), &two).await;
    let x1 = grant_as(b.first(), &request("east", "x-1", "host-a"), &two).await;
    let by = "leasehold reshard, config of holder ops";
    let held = |result: Result<Option<RecordedSharding>, AuthorityError>, lease: &str| match result
    {
        Err(AuthorityError::Sharding(refusal)) => {
            assert_eq!(refusal.key, LeaseKey::new("east", lease), "{refusal}");
            assert!(
                matches!(&refusal.conflict, ShardingConflict::Held { holder, .. } if holder == "host-a"),
                "{refusal}"
            );
            let text = refusal.to_string();
            assert!(
                text.contains("refusing to change the sharding of controller x")
                    && text.contains("held by host-a at epoch 1")
                    && text.contains("records it as 2 shards"),
                "{text}"
            );
        }
        other => panic!("{lease} is held: expected a refusal, got {other:?}"),
    };
    held(
        b.second().reshard("east", "x", Some(&three), by).await,
        "x-0",
    );
    b.first()
        .release(&x0.fence, EndReason::Released)
        .await
        .unwrap();
    held(
        b.second().reshard("east", "x", Some(&three), by).await,
        "x-1",
    );
    // Forgetting is refused alike while held.
    held(b.second().reshard("east", "x", None, by).await, "x-1");
    b.expire(&x1.fence.key).await;
    // A lease of the new count that is held counts too.
    let x2 = grant(b.first(), &request("east", "x-2", "host-a")).await;
    held(
        b.second().reshard("east", "x", Some(&three), by).await,
        "x-2",
    );
    b.first()
        .release(&x2.fence, EndReason::Released)
        .await
        .unwrap();

    let before = b
        .second()
        .reshard("east", "x", Some(&three), by)
        .await
        .unwrap();
    assert_eq!(before.map(|r| r.rule), Some(two.clone()));
    let records = b.first().shardings("east").await.unwrap();
    assert_eq!(
        (&records[0].rule, records[0].recorded_by.as_str()),
        (&three, by)
    );
    refused_as(b.first(), &request("east", "x-0", "host-a"), &two).await;
    let x2 = grant_as(b.first(), &request("east", "x-2", "host-a"), &three).await;
    assert_eq!(x2.fence.epoch, Epoch(2), "the lease's epochs go on");

    // A new rule whose lease another controller runs: refused, the record
    // unchanged.
    grant_as(
        b.second(),
        &request("east", "y-1", "host-b"),
        &ShardingRule::unsharded("y-1"),
    )
    .await;
    grant_as(
        b.second(),
        &request("east", "y-0", "host-b"),
        &shards("y", 1),
    )
    .await;
    match b
        .first()
        .reshard("east", "y", Some(&shards("y", 2)), by)
        .await
    {
        Err(AuthorityError::Sharding(refusal)) => {
            let text = refusal.to_string();
            assert!(
                matches!(&refusal.conflict, ShardingConflict::Collision { .. })
                    && text
                        .contains("records lease y-1 as the lease of the unsharded controller y-1"),
                "{text}"
            );
        }
        other => panic!("y-1 is the unsharded y-1's: expected a refusal, got {other:?}"),
    }
    let y = b.first().shardings("east").await.unwrap();
    assert_eq!(
        y.iter().find(|r| r.rule.controller == "y").map(|r| &r.rule),
        Some(&shards("y", 1))
    );

    // Forgotten (nothing held): the next acquire records its own rule.
    b.first()
        .release(&x2.fence, EndReason::Released)
        .await
        .unwrap();
    let before = b.second().reshard("east", "x", None, by).await.unwrap();
    assert_eq!(before.map(|r| r.rule), Some(three));
    assert_eq!(
        b.second().reshard("east", "x", None, by).await.unwrap(),
        None
    );
    grant_as(b.first(), &request("east", "x-0", "host-a"), &two).await;
    let records = b.first().shardings("east").await.unwrap();
    let x = records.iter().find(|r| r.rule.controller == "x").unwrap();
    assert_eq!((&x.rule, x.recorded_by.as_str()), (&two, "holder host-a"));
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
    a_host_whose_sharding_differs_from_the_record_is_refused,
    a_lease_is_never_run_by_two_controllers,
    concurrent_first_records_leave_one_rule,
    the_sharding_changes_only_while_none_of_its_leases_is_held,
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
