//! The embedded authority: its conformance backend (two authorities on
//! one data directory, as two processes would be) and what only it does:
//! epochs that survive reopening, takeover once a holder's liveness lock
//! is free, and one live claim per holder name.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::params;
use tokio::sync::watch;

use super::SqliteAuthority;
use crate::authority::claim::{ClaimState, HostInfo};
use crate::authority::conformance::{Backend, PROMPT, grant, refused, request};
use crate::authority::{Acquired, Authority, AuthorityError, CrashDetection, EndReason};
use crate::embedded::clock::Now;
use crate::embedded::{Access, EmbeddedDb};
use crate::fence::{Epoch, Fence, LeaseKey};

/// Two authorities on one data directory, each with its own connections
/// and poll, as two host processes have.
pub(crate) struct SqliteBackend {
    first: SqliteAuthority,
    second: SqliteAuthority,
    base: PathBuf,
}

impl SqliteBackend {
    pub(crate) async fn create() -> Self {
        let base = crate::embedded::scratch_dir("authority-conformance");
        let open = || async {
            SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap())
        };
        Self {
            first: open().await,
            second: open().await,
            base: base.clone(),
        }
    }
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// Make `key`'s grant expire by the shared clock, now.
pub(crate) async fn expire(db: &EmbeddedDb, key: &LeaseKey) {
    let key = key.clone();
    let updated = db
        .write(move |c| {
            let now = Now::read();
            c.execute(
                "UPDATE leasehold_leases SET expires_mono = ?3, expires_at = ?4
                  WHERE cluster = ?1 AND name = ?2",
                params![key.cluster, key.name, now.mono, now.utc],
            )
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(updated, 1, "the lease exists");
}

/// One fenced write, the way the store makes it.
pub(crate) async fn fenced_write(db: &EmbeddedDb, fence: &Fence) -> Result<(), AuthorityError> {
    let fence = fence.clone();
    db.write(move |c| {
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        super::check_fence_and_count(&tx, &fence, &Now::read())?;
        tx.commit().unwrap();
        Ok(())
    })
    .await
    .unwrap()
}

#[async_trait]
impl Backend for SqliteBackend {
    fn first(&self) -> &dyn Authority {
        &self.first
    }

    fn second(&self) -> &dyn Authority {
        &self.second
    }

    async fn expire(&self, key: &LeaseKey) {
        expire(self.first.db(), key).await;
    }

    async fn fenced_write(&self, fence: &Fence) -> Result<(), AuthorityError> {
        fenced_write(self.first.db(), fence).await
    }

    async fn listen(&self, cluster: &str) -> watch::Receiver<u64> {
        let mut receiver = self.second.released(cluster);
        let mut polls = self.second.db().polls();
        tokio::time::timeout(PROMPT, polls.wait_for(|&n| n > 0))
            .await
            .expect("the poll runs")
            .unwrap();
        receiver.borrow_and_update();
        receiver
    }
}

fn host() -> (HostInfo, watch::Sender<Vec<String>>) {
    let (tx, rx) = watch::channel(vec!["scheduler".to_string()]);
    (HostInfo::this_process(rx), tx)
}

async fn claimed(
    claim: &crate::authority::claim::HolderClaim,
) -> crate::authority::claim::ClaimView {
    let mut view = claim.view();
    tokio::time::timeout(PROMPT, view.wait_for(|v| v.state.claimed()))
        .await
        .expect("claimed")
        .unwrap()
        .clone()
}

#[tokio::test]
async fn epochs_survive_reopening_the_data_directory_and_keep_growing() {
    let base = crate::embedded::scratch_dir("authority-reopen");
    let a = request("east", "scheduler", "host-a");
    let first = {
        let authority =
            SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap());
        let first = grant(&authority, &a).await;
        super::super::conformance::grant(&authority, &request("east", "rollout", "host-a")).await;
        first
        // Dropped without a release: as a process killed outright.
    };
    let authority = SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap());
    // Still held: the ttl runs on the machine's clock, not the process's.
    assert_eq!(
        refused(&authority, &request("east", "scheduler", "host-b")).await,
        ("host-a".to_string(), first.fence.epoch)
    );
    expire(authority.db(), &a.key).await;
    let next = grant(&authority, &request("east", "scheduler", "host-b")).await;
    assert_eq!(next.fence.epoch, Epoch(first.fence.epoch.0 + 1));
    let history = authority.history(&a.key, 10).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].end_reason, Some(EndReason::Expired));
    drop(authority);
    std::fs::remove_dir_all(base).unwrap();
}

#[tokio::test]
async fn a_session_grant_is_taken_over_once_its_holders_lock_is_free() {
    let base = crate::embedded::scratch_dir("authority-session");
    let a = SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap());
    let b = SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap());
    let (info, _controllers) = host();
    let claim = a.claim_holder("east", "host-a", info).unwrap();
    let view = claimed(&claim).await;
    assert_eq!(view.session.as_ref().map(|s| s.generation), Some(1));
    let key = LeaseKey::new("east", "scheduler");
    let held = match a
        .acquire_detected(
            &request("east", "scheduler", "host-a"),
            CrashDetection::Session,
        )
        .await
        .unwrap()
    {
        Acquired::Granted(grant) => grant,
        other => panic!("{other:?}"),
    };
    let record = &a.observe("east").await.unwrap()[0];
    assert_eq!(record.crash_detection, CrashDetection::Session);
    assert_eq!(
        record.holder_session.as_ref().map(|s| s.pid),
        Some(std::process::id() as i32)
    );
    // While the claim lives, b waits, and its scan finds nothing.
    let mut dead = b.dead_holder(&key).unwrap();
    assert!(matches!(
        b.acquire_detected(
            &request("east", "scheduler", "host-b"),
            CrashDetection::Session
        )
        .await
        .unwrap(),
        Acquired::Held { .. }
    ));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), dead.changed())
            .await
            .is_err(),
        "no wake while the holder lives"
    );
    // The holder's process "dies": its claim (and lock) goes.
    drop(claim);
    tokio::time::timeout(PROMPT, dead.changed())
        .await
        .expect("the scan finds the lock free")
        .unwrap();
    let taken = grant(&b, &request("east", "scheduler", "host-b")).await;
    assert_eq!(taken.fence.epoch, Epoch(held.fence.epoch.0 + 1));
    let history = b.history(&key, 10).await.unwrap();
    assert_eq!(history[1].end_reason, Some(EndReason::Superseded));
    // Its writes are refused.
    assert!(matches!(
        fenced_write(a.db(), &held.fence).await,
        Err(AuthorityError::Fenced { .. })
    ));
    drop((a, b));
    std::fs::remove_dir_all(base).unwrap();
}

#[tokio::test]
async fn a_ttl_grant_outlives_its_holders_lock_until_it_expires() {
    let base = crate::embedded::scratch_dir("authority-ttl");
    let a = SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap());
    let b = SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap());
    let (info, _controllers) = host();
    let claim = a.claim_holder("east", "host-a", info).unwrap();
    claimed(&claim).await;
    let held = grant(&a, &request("east", "scheduler", "host-a")).await;
    drop(claim);
    assert_eq!(
        refused(&b, &request("east", "scheduler", "host-b")).await,
        ("host-a".to_string(), held.fence.epoch)
    );
    drop((a, b));
    std::fs::remove_dir_all(base).unwrap();
}

#[tokio::test]
async fn one_holder_name_has_one_live_claim() {
    let base = crate::embedded::scratch_dir("authority-claim");
    let a = SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap());
    let b = SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap());
    let (info, _keep_a) = host();
    let first = a.claim_holder("east", "host-a", info).unwrap();
    claimed(&first).await;
    let (info, _keep_b) = host();
    let second = b.claim_holder("east", "host-a", info).unwrap();
    let mut view = second.view();
    let taken = tokio::time::timeout(
        PROMPT,
        view.wait_for(|v| matches!(v.state, ClaimState::Taken { .. })),
    )
    .await
    .expect("refused")
    .unwrap()
    .clone();
    let ClaimState::Taken { reason } = taken.state else {
        unreachable!()
    };
    assert!(
        reason.contains("host-a") && reason.contains(&std::process::id().to_string()),
        "{reason}"
    );
    // The first lets go: the second claims it, as a new incarnation.
    drop(first);
    let view = claimed(&second).await;
    assert!(view.session.is_some());
    drop((second, a, b));
    std::fs::remove_dir_all(base).unwrap();
}

#[tokio::test]
async fn a_claim_whose_lock_file_is_removed_is_lost_and_claimed_again() {
    let base = crate::embedded::scratch_dir("authority-claim-removed");
    let a = SqliteAuthority::new(EmbeddedDb::open(&base, Access::Shared).await.unwrap());
    let (info, _keep) = host();
    let claim = a.claim_holder("east", "host-a", info).unwrap();
    claimed(&claim).await;
    std::fs::remove_file(base.join("hosts/host-a.lock")).unwrap();
    let mut view = claim.view();
    tokio::time::timeout(
        crate::timeouts::HOLDER_CLAIM_CHECK * 3,
        view.wait_for(|v| {
            v.state.claimed() && v.session.as_ref().is_some_and(|s| s.generation == 2)
        }),
    )
    .await
    .expect("lost, then claimed again in a second generation")
    .unwrap();
    drop((claim, a));
    std::fs::remove_dir_all(base).unwrap();
}
