//! The fence check that every fenced write runs inside its own transaction
//! (L4). The store calls these; the authority owns what they mean.

use crate::fence::Fence;

use super::AuthorityError;

/// Why a fence was refused, as seen inside the write's transaction.
fn fenced(fence: &Fence, reason: impl Into<String>) -> AuthorityError {
    AuthorityError::Fenced {
        fence: fence.clone(),
        reason: reason.into(),
    }
}

/// Lock the lease row `FOR SHARE` and fail with [`AuthorityError::Fenced`]
/// unless it still shows this holder and epoch, is not released, and has not
/// expired by the database clock.
///
/// Holding the share lock until the transaction ends makes a concurrent
/// grant (which updates the row) wait for this write to commit or roll back:
/// no write of epoch e can commit after epoch e+1 was granted.
pub async fn check_fence(
    tx: &tokio_postgres::Transaction<'_>,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    if cfg!(feature = "unsafe-disable-fence") {
        // Test-only build: lets the fault suite prove its checker catches
        // stale-epoch writes. Never deployed.
        return Ok(());
    }
    let row = tx
        .query_opt(
            "SELECT holder, epoch, released, expires_at > clock_timestamp() AS live
               FROM leasehold_leases
              WHERE cluster = $1 AND name = $2
                FOR SHARE",
            &[&fence.key.cluster, &fence.key.name],
        )
        .await
        .map_err(|e| AuthorityError::Unavailable {
            endpoint: String::new(),
            reason: e.to_string(),
        })?;
    let Some(row) = row else {
        return Err(fenced(fence, "the lease was never granted"));
    };
    let holder: String = row.get(0);
    let epoch: i64 = row.get(1);
    let released: bool = row.get(2);
    let live: bool = row.get(3);
    if epoch as u64 != fence.epoch.0 || holder != fence.holder {
        return Err(fenced(
            fence,
            format!("epoch {epoch} held by {holder} is current"),
        ));
    }
    if released {
        return Err(fenced(fence, "the lease was released"));
    }
    if !live {
        return Err(fenced(fence, "the lease expired"));
    }
    Ok(())
}

/// Count one accepted write against the fence's tenure (L6), in the same
/// transaction as the write.
pub async fn record_write(
    tx: &tokio_postgres::Transaction<'_>,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    tx.execute(
        "UPDATE leasehold_tenures
            SET writes = writes + 1, last_write_at = clock_timestamp()
          WHERE cluster = $1 AND lease = $2 AND epoch = $3",
        &[&fence.key.cluster, &fence.key.name, &(fence.epoch.0 as i64)],
    )
    .await
    .map_err(|e| AuthorityError::Unavailable {
        endpoint: String::new(),
        reason: e.to_string(),
    })?;
    Ok(())
}

/// The memory backend's equivalent of [`check_fence`] + [`record_write`]:
/// implemented by the memory authority and used by the memory store.
pub trait FenceLock: Send + Sync + 'static {
    /// Check that `fence` is current and, while holding the authority's
    /// lock (so no grant can interleave), run `write`. When `write` returns
    /// `true` (it applied its changes), count a write against the tenure.
    fn while_fenced(
        &self,
        fence: &Fence,
        write: &mut dyn FnMut() -> bool,
    ) -> Result<(), AuthorityError>;
}
