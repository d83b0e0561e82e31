//! The fence check that every fenced write runs inside its own transaction
//! (L4), and the count of a tenure's writes (L6). The store calls these;
//! the authority owns what they mean.
//!
//! Must never: let a fenced write commit without [`check_fence`] having
//! seen its fence current inside the write's transaction (outside the
//! test-only feature `unsafe-disable-fence`).
//!
//! The test-only build (`unsafe-disable-fence`) must be *truly* unfenced:
//! nothing inside a write's transaction may touch a row that the next
//! grant locks or updates (the lease row, the tenure rows), or the grant
//! would wait for the write as if it were fenced and the fault suite could
//! not tell the builds apart. So there the check is skipped and the write
//! count runs after the commit, in its own statement
//! ([`COUNTS_WRITES_IN_TRANSACTION`]).
//!
//! Only one program enables that feature: the test fixture
//! `leasehold-unfenced` (tests/fixtures/unfenced-host), built on its own
//! for the fault suite. The `leasehold` binary has no such variant, and one
//! built with the feature anyway refuses to run
//! ([`crate::testing::refuse_undeclared_unfenced_build`]).

use std::sync::LazyLock;

use crate::fence::{Fence, FenceCause};
use crate::timeouts::DATABASE_STATEMENT;

use super::AuthorityError;

/// Sent first in every transaction that may lock the lease row (a fenced
/// write, whose check holds it `FOR KEY SHARE`; a grant, which holds it `FOR
/// UPDATE`): the server ends the transaction, freeing the row, once it has
/// waited this long for the host's next statement.
///
/// Without it, a host paused or partitioned mid-transaction (or one that
/// died behind a partition) keeps the row locked until the server notices
/// that the connection is gone — hours, with default TCP keepalives — and
/// no successor can be granted the lease meanwhile, even long after it
/// expired. The bound is the host's own bound on a whole transaction
/// ([`DATABASE_STATEMENT`]): past it the host has given up on the
/// transaction anyway. Below the default ttl, it delays no takeover there.
pub(crate) static BOUND_IDLE_TRANSACTION: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SET LOCAL idle_in_transaction_session_timeout = {}",
        DATABASE_STATEMENT.as_millis()
    )
});

/// Why a fence was refused, as seen inside the write's transaction.
fn fenced(fence: &Fence, cause: FenceCause, reason: impl Into<String>) -> AuthorityError {
    AuthorityError::Fenced {
        fence: fence.clone(),
        cause,
        reason: reason.into(),
    }
}

/// What a lease row shows at the moment a fence is judged.
pub(crate) struct RowView<'a> {
    pub(crate) holder: &'a str,
    pub(crate) epoch: u64,
    pub(crate) released: bool,
    /// Not expired by the backend's clock.
    pub(crate) live: bool,
}

/// The one judgement of a fence, shared by both backends so they refuse the
/// same writes with the same words.
pub(crate) fn judge(fence: &Fence, row: Option<RowView<'_>>) -> Result<(), AuthorityError> {
    let Some(row) = row else {
        return Err(fenced(
            fence,
            FenceCause::NeverGranted,
            "the lease was never granted",
        ));
    };
    if row.epoch != fence.epoch.0 || row.holder != fence.holder {
        return Err(fenced(
            fence,
            FenceCause::Superseded,
            format!("epoch {} held by {} is current", row.epoch, row.holder),
        ));
    }
    if row.released {
        return Err(fenced(
            fence,
            FenceCause::Released,
            "the lease was released",
        ));
    }
    if !row.live {
        return Err(fenced(fence, FenceCause::Expired, "the lease expired"));
    }
    Ok(())
}

/// The endpoint named in errors raised inside a caller's transaction: the
/// transaction does not know its URL, and the caller (the store) adds it.
const CALLER_TRANSACTION: &str = "the write's transaction";

/// Lock the lease row `FOR KEY SHARE` and fail with
/// [`AuthorityError::Fenced`] unless it still shows this holder and epoch, is
/// not released, and has not expired by the database clock.
///
/// Holding the lock until the transaction ends makes a concurrent grant
/// (which locks the row `FOR UPDATE` before it changes it) wait for this
/// write to commit or roll back: no write of epoch e can commit after epoch
/// e+1 was granted. `KEY SHARE`, the weakest row lock, because it does not
/// conflict with the holder's renewals (an `UPDATE` of non-key columns,
/// `FOR NO KEY UPDATE`): a write held open, by a slow guest or a stalled
/// network, never delays the renewal of this or any other lease.
pub async fn check_fence(
    tx: &tokio_postgres::Transaction<'_>,
    statements: &FenceStatements,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    if cfg!(feature = "unsafe-disable-fence") {
        // Test-only build: lets the fault suite prove its checker catches
        // stale-epoch writes. Never deployed.
        return Ok(());
    }
    let row = tx
        .query_opt(&statements.check, &[&fence.key.cluster, &fence.key.name])
        .await
        .map_err(|e| {
            super::postgres::classify(CALLER_TRANSACTION, &format!("fence check of {fence}"), &e)
        })?;
    let view = row.as_ref().map(|row| RowView {
        holder: row.get(0),
        // Epochs are written by the authority only, always > 0 (CHECK).
        epoch: row.get::<_, i64>(1) as u64,
        released: row.get(2),
        live: row.get(3),
    });
    judge(fence, view)
}

/// Whether [`record_write`] runs inside the write's transaction (the real
/// build: the count and the write commit together) or after its commit, in
/// its own statement (the unfenced test build: the count updates the tenure
/// row, which the next grant updates too, so counting inside the
/// transaction would make the grant wait for the write, a fence in all but
/// name). After the commit, a host that dies between the two leaves a
/// write uncounted: acceptable for a build that is never deployed.
pub const COUNTS_WRITES_IN_TRANSACTION: bool = !cfg!(feature = "unsafe-disable-fence");

/// Count one accepted write against the fence's tenure (L6), in the same
/// transaction as the write.
pub async fn record_write(
    tx: &tokio_postgres::Transaction<'_>,
    statements: &FenceStatements,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    count_write(tx, statements, fence).await
}

/// [`record_write`] on the session, after the write committed: only where
/// [`COUNTS_WRITES_IN_TRANSACTION`] is false (the unfenced test build).
pub async fn record_write_after_commit(
    client: &tokio_postgres::Client,
    statements: &FenceStatements,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    count_write(client, statements, fence).await
}

async fn count_write(
    client: &impl tokio_postgres::GenericClient,
    statements: &FenceStatements,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    client
        .execute(
            &statements.record,
            &[&fence.key.cluster, &fence.key.name, &(fence.epoch.0 as i64)],
        )
        .await
        .map_err(|e| {
            super::postgres::classify(
                CALLER_TRANSACTION,
                &format!("recording a write of {fence}"),
                &e,
            )
        })?;
    Ok(())
}

const CHECK_FENCE_SQL: &str = "
    SELECT holder, epoch, released, expires_at > clock_timestamp() AS live
      FROM leasehold_leases
     WHERE cluster = $1 AND name = $2
       FOR KEY SHARE";

const RECORD_WRITE_SQL: &str = "
    UPDATE leasehold_tenures
       SET writes = writes + 1, last_write_at = clock_timestamp()
     WHERE cluster = $1 AND lease = $2 AND epoch = $3";

/// The prepared statements of [`check_fence`] and [`record_write`].
///
/// Prepare them *before* the write's transaction begins. Inside it, the
/// store pipelines its statements in a fixed order (fence check before the
/// object writes); a statement prepared there would cost a round trip of
/// its own and reach the server after the statements queued behind it,
/// changing the order in which locks are taken. Prepared through the
/// connection's statement cache, they are parsed once per session rather
/// than on every commit.
pub struct FenceStatements {
    check: tokio_postgres::Statement,
    record: tokio_postgres::Statement,
}

impl FenceStatements {
    /// Both statements, from (or into) `client`'s statement cache.
    pub async fn cached(
        client: &deadpool_postgres::ClientWrapper,
    ) -> Result<Self, tokio_postgres::Error> {
        Ok(Self {
            check: client.prepare_cached(CHECK_FENCE_SQL).await?,
            record: client.prepare_cached(RECORD_WRITE_SQL).await?,
        })
    }
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
