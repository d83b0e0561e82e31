//! Backends for the conformance suite ([`super::conformance`]) and the
//! lease fixtures they need: the memory store over a minimal test fence
//! lock and over the real memory authority, and the PostgreSQL store over
//! lease rows written the way the PostgreSQL authority's grant writes them.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::authority::fence_check::FenceLock;
use crate::authority::memory::MemoryAuthority;
use crate::authority::{AcquireRequest, Acquired, Authority, AuthorityError, EndReason};
use crate::fence::{Epoch, Fence, FenceCause, LeaseKey};

use super::conformance::{Backend, Leases, conformance_suite};

/// A minimal memory lease table standing in for the memory authority: the
/// judgement of a fence (holder, epoch, released, expired) under one lock
/// held across the write, as [`FenceLock`] requires.
#[derive(Default)]
pub(super) struct TestLeases {
    leases: std::sync::Mutex<HashMap<LeaseKey, TestLease>>,
}

struct TestLease {
    holder: String,
    epoch: u64,
    expired: bool,
    released: bool,
    /// Writes per epoch.
    writes: HashMap<u64, u64>,
}

impl TestLeases {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, TestLease>> {
        self.leases.lock().unwrap()
    }
}

impl FenceLock for TestLeases {
    fn while_fenced(
        &self,
        fence: &Fence,
        write: &mut dyn FnMut() -> bool,
    ) -> Result<(), AuthorityError> {
        let mut leases = self.lock();
        let fenced = |cause: FenceCause, reason: &str| AuthorityError::Fenced {
            fence: fence.clone(),
            cause,
            reason: reason.into(),
        };
        let Some(lease) = leases.get_mut(&fence.key) else {
            return Err(fenced(
                FenceCause::NeverGranted,
                "the lease was never granted",
            ));
        };
        if lease.epoch != fence.epoch.0 || lease.holder != fence.holder {
            return Err(fenced(FenceCause::Superseded, "another epoch is current"));
        }
        if lease.released {
            return Err(fenced(FenceCause::Released, "the lease was released"));
        }
        if lease.expired {
            return Err(fenced(FenceCause::Expired, "the lease expired"));
        }
        if write() {
            *lease.writes.entry(fence.epoch.0).or_default() += 1;
        }
        Ok(())
    }
}

#[async_trait]
impl Leases for TestLeases {
    async fn grant(&self, cluster: &str, lease: &str, holder: &str) -> Fence {
        let key = LeaseKey::new(cluster, lease);
        let previous = self.lock().insert(
            key.clone(),
            TestLease {
                holder: holder.into(),
                epoch: 1,
                expired: false,
                released: false,
                writes: HashMap::new(),
            },
        );
        assert!(previous.is_none(), "{key} was already granted");
        Fence {
            key,
            epoch: Epoch(1),
            holder: holder.into(),
        }
    }

    async fn take_over(&self, fence: &Fence, holder: &str) -> Fence {
        let mut leases = self.lock();
        let lease = leases.get_mut(&fence.key).expect("granted");
        lease.epoch += 1;
        lease.holder = holder.into();
        lease.expired = false;
        lease.released = false;
        Fence {
            key: fence.key.clone(),
            epoch: Epoch(lease.epoch),
            holder: holder.into(),
        }
    }

    async fn expire(&self, fence: &Fence) {
        self.lock().get_mut(&fence.key).expect("granted").expired = true;
    }

    async fn release(&self, fence: &Fence) {
        self.lock().get_mut(&fence.key).expect("granted").released = true;
    }

    async fn writes(&self, fence: &Fence) -> u64 {
        self.lock()
            .get(&fence.key)
            .and_then(|l| l.writes.get(&fence.epoch.0).copied())
            .unwrap_or(0)
    }
}

/// Lease rows written with the SQL the PostgreSQL authority's grant uses:
/// the lease row first, then the tenure records (ending the old tenure waits
/// for a fenced commit in flight, which holds that tenure's row).
pub(super) struct PgLeases {
    pub db: crate::db::Database,
}

impl PgLeases {
    async fn client(&self) -> deadpool_postgres::Object {
        self.db.client().await.unwrap()
    }

    /// The grant of `holder` at `epoch`, in one transaction on `client`.
    pub async fn grant_on(
        client: &mut tokio_postgres::Client,
        key: &LeaseKey,
        holder: &str,
    ) -> Fence {
        let tx = client.transaction().await.unwrap();
        let row = tx
            .query_one(
                "INSERT INTO leasehold_leases AS l
                        (cluster, name, holder, epoch, acquired_at, renewed_at, expires_at)
                 VALUES ($1, $2, $3, 1, clock_timestamp(), clock_timestamp(),
                         clock_timestamp() + interval '1 hour')
                 ON CONFLICT (cluster, name) DO UPDATE
                    SET holder = EXCLUDED.holder, epoch = l.epoch + 1,
                        acquired_at = EXCLUDED.acquired_at, renewed_at = EXCLUDED.renewed_at,
                        expires_at = EXCLUDED.expires_at, released = false
                 RETURNING epoch, acquired_at",
                &[&key.cluster, &key.name, &holder],
            )
            .await
            .unwrap();
        let epoch: i64 = row.get(0);
        let acquired_at: chrono::DateTime<chrono::Utc> = row.get(1);
        tx.execute(
            "UPDATE leasehold_tenures SET ended_at = $4, end_reason = 'superseded'
              WHERE cluster = $1 AND lease = $2 AND epoch = $3 AND ended_at IS NULL",
            &[&key.cluster, &key.name, &(epoch - 1), &acquired_at],
        )
        .await
        .unwrap();
        tx.execute(
            "INSERT INTO leasehold_tenures (cluster, lease, epoch, holder, endpoint, acquired_at)
             VALUES ($1, $2, $3, $4, 'test', $5)",
            &[&key.cluster, &key.name, &epoch, &holder, &acquired_at],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        Fence {
            key: key.clone(),
            epoch: Epoch(epoch as u64),
            holder: holder.into(),
        }
    }
}

#[async_trait]
impl Leases for PgLeases {
    async fn grant(&self, cluster: &str, lease: &str, holder: &str) -> Fence {
        let key = LeaseKey::new(cluster, lease);
        let fence = Self::grant_on(&mut **self.client().await, &key, holder).await;
        assert_eq!(fence.epoch.0, 1, "{key} was already granted");
        fence
    }

    async fn take_over(&self, fence: &Fence, holder: &str) -> Fence {
        Self::grant_on(&mut **self.client().await, &fence.key, holder).await
    }

    async fn expire(&self, fence: &Fence) {
        let n = self
            .client()
            .await
            .execute(
                "UPDATE leasehold_leases SET expires_at = clock_timestamp() - interval '1 second'
                  WHERE cluster = $1 AND name = $2",
                &[&fence.key.cluster, &fence.key.name],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
    }

    async fn release(&self, fence: &Fence) {
        let n = self
            .client()
            .await
            .execute(
                "UPDATE leasehold_leases SET released = true WHERE cluster = $1 AND name = $2",
                &[&fence.key.cluster, &fence.key.name],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
    }

    async fn writes(&self, fence: &Fence) -> u64 {
        let row = self
            .client()
            .await
            .query_one(
                "SELECT writes FROM leasehold_tenures WHERE cluster = $1 AND lease = $2 AND epoch = $3",
                &[&fence.key.cluster, &fence.key.name, &(fence.epoch.0 as i64)],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0) as u64
    }
}

/// A memory store over [`TestLeases`].
pub(super) async fn memory_backend() -> Backend {
    let leases = Arc::new(TestLeases::default());
    Backend {
        store: Arc::new(super::MemoryStore::new(leases.clone())),
        leases,
        _keep: Box::new(()),
    }
}

/// A PostgreSQL store on a fresh database.
pub(super) async fn postgres_backend() -> Backend {
    let database = crate::testing::TestDatabase::create().await;
    let db = database.database(8);
    Backend {
        store: Arc::new(super::PostgresStore::new(db.clone())),
        leases: Arc::new(PgLeases { db }),
        _keep: Box::new(database),
    }
}

/// The real memory authority, driven through its trait and fault injector.
struct AuthorityLeases {
    authority: MemoryAuthority,
}

#[async_trait]
impl Leases for AuthorityLeases {
    async fn grant(&self, cluster: &str, lease: &str, holder: &str) -> Fence {
        let request = AcquireRequest {
            key: LeaseKey::new(cluster, lease),
            holder: holder.into(),
            ttl: crate::timeouts::LEASE_TTL,
        };
        match self.authority.acquire(&request).await.unwrap() {
            Acquired::Granted(grant) => {
                assert_eq!(
                    grant.fence.epoch,
                    Epoch(1),
                    "{} was already granted",
                    request.key
                );
                grant.fence
            }
            held => panic!("{} not granted: {held:?}", request.key),
        }
    }

    async fn take_over(&self, fence: &Fence, holder: &str) -> Fence {
        self.authority.faults().steal(&fence.key, holder)
    }

    async fn expire(&self, fence: &Fence) {
        assert_eq!(
            self.authority.faults().expire(&fence.key),
            Some(fence.epoch)
        );
    }

    async fn release(&self, fence: &Fence) {
        self.authority
            .release(fence, EndReason::Released)
            .await
            .unwrap();
    }

    async fn writes(&self, fence: &Fence) -> u64 {
        self.authority
            .history(&fence.key, crate::limits::MAX_HISTORY)
            .await
            .unwrap()
            .into_iter()
            .find(|t| t.epoch == fence.epoch)
            .map_or(0, |t| t.writes)
    }
}

/// A memory store over the memory authority.
pub(super) async fn memory_authority_backend() -> Backend {
    let authority = MemoryAuthority::new();
    Backend {
        store: Arc::new(super::MemoryStore::new(Arc::new(authority.clone()))),
        leases: Arc::new(AuthorityLeases { authority }),
        _keep: Box::new(()),
    }
}

mod memory_with_test_leases {
    super::conformance_suite!(super::memory_backend);
}

mod memory_with_memory_authority {
    super::conformance_suite!(super::memory_authority_backend);
}

mod postgres {
    super::conformance_suite!(super::postgres_backend);
}
