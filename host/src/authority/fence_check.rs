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
    let row = statements
        .check
        .query_opt(tx.client(), &[&fence.key.cluster, &fence.key.name])
        .await
        .map_err(|e| {
            super::postgres::classify(CALLER_TRANSACTION, &format!("fence check of {fence}"), &e)
        })?;
    judge(fence, row.as_ref().map(row_view))
}

/// [`check_fence`] and [`record_write`] in one statement: lock the lease
/// row `FOR KEY SHARE`, read it, and count the write against the tenure
/// only if the row shows this fence current. The store's commit sends this
/// instead of the two (one statement less on every fenced commit); the
/// lease row is locked before the tenure row, the order a grant takes them
/// in (see [`CHECK_AND_COUNT_SQL`]). Only where
/// [`COUNTS_WRITES_IN_TRANSACTION`]: the unfenced test build neither checks
/// nor counts inside the transaction.
pub async fn check_fence_and_count(
    client: &tokio_postgres::Client,
    statements: &FenceStatements,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    let row = statements
        .check_and_count
        .query_opt(
            client,
            &[
                &fence.key.cluster,
                &fence.key.name,
                &(fence.epoch.0 as i64),
                &fence.holder,
            ],
        )
        .await
        .map_err(|e| {
            super::postgres::classify(CALLER_TRANSACTION, &format!("fence check of {fence}"), &e)
        })?;
    let view = row.as_ref().map(row_view);
    let current = view.as_ref().is_some_and(|v| {
        v.epoch == fence.epoch.0 && v.holder == fence.holder && !v.released && v.live
    });
    let counted = row.as_ref().is_some_and(|r| r.get::<_, bool>(4));
    judge(fence, view)?;
    if current && !counted {
        // The lease row shows this tenure but its history row is missing:
        // the write would go uncounted (L6). The authority writes both in
        // one transaction, so this is a damaged database, not a race.
        return Err(AuthorityError::Unavailable {
            endpoint: CALLER_TRANSACTION.into(),
            reason: format!("the tenure record of {fence} is missing; refusing to write uncounted"),
        });
    }
    Ok(())
}

/// The lease row as [`CHECK_FENCE_SQL`] and [`CHECK_AND_COUNT_SQL`] read it.
fn row_view(row: &tokio_postgres::Row) -> RowView<'_> {
    RowView {
        holder: row.get(0),
        // Epochs are written by the authority only, always > 0 (CHECK).
        epoch: row.get::<_, i64>(1) as u64,
        released: row.get(2),
        live: row.get(3),
    }
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
    count_write(tx.client(), statements, fence).await
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
    client: &tokio_postgres::Client,
    statements: &FenceStatements,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    statements
        .record
        .execute(
            client,
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

/// [`CHECK_FENCE_SQL`] and [`RECORD_WRITE_SQL`] in one statement. The
/// main query reads the lease row (`FOR KEY SHARE`, materialized once);
/// the tenure's count is an `UPDATE` joined to that row, so it runs after
/// the lease row is locked and changes nothing unless the row shows this
/// holder and epoch, not released and not expired. `counted` tells the
/// caller whether the count happened.
const CHECK_AND_COUNT_SQL: &str = "
    WITH lease AS MATERIALIZED (
        SELECT holder, epoch, released, expires_at > clock_timestamp() AS live
          FROM leasehold_leases
         WHERE cluster = $1 AND name = $2
           FOR KEY SHARE
    ), counted AS (
        UPDATE leasehold_tenures t
           SET writes = t.writes + 1, last_write_at = clock_timestamp()
          FROM lease l
         WHERE t.cluster = $1 AND t.lease = $2 AND t.epoch = $3
           AND l.epoch = $3 AND l.holder = $4 AND NOT l.released AND l.live
        RETURNING 1
    )
    SELECT l.holder, l.epoch, l.released, l.live,
           EXISTS (SELECT 1 FROM counted) AS counted
      FROM lease l";

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
    check: crate::db::Prepared,
    record: crate::db::Prepared,
    check_and_count: crate::db::Prepared,
}

impl FenceStatements {
    /// The statements, from (or into) `client`'s statement cache (named
    /// statements: a pool without a transaction pooler in front).
    pub async fn cached(
        client: &deadpool_postgres::ClientWrapper,
    ) -> Result<Self, tokio_postgres::Error> {
        use crate::db::Prepared::Named;
        Ok(Self {
            check: Named(client.prepare_cached(CHECK_FENCE_SQL).await?),
            record: Named(client.prepare_cached(RECORD_WRITE_SQL).await?),
            check_and_count: Named(client.prepare_cached(CHECK_AND_COUNT_SQL).await?),
        })
    }

    /// The statements for `session` of `db`, in the pool's pooler mode
    /// ([`crate::db::Database::prepare`]).
    pub async fn prepare(
        db: &crate::db::Database,
        session: &impl crate::db::Session,
    ) -> Result<Self, tokio_postgres::Error> {
        Ok(Self {
            check: db.prepare(session, CHECK_FENCE_SQL).await?,
            record: db.prepare(session, RECORD_WRITE_SQL).await?,
            check_and_count: db.prepare(session, CHECK_AND_COUNT_SQL).await?,
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
