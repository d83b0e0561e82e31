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

/// Sent first in every transaction that may lock a row a grant needs (a
/// fenced write, which holds its tenure row from the fence check to its
/// end; a grant, which holds the lease row `FOR UPDATE` and the live
/// tenure row): the server ends the transaction, freeing the row, once it
/// has waited this long for the host's next statement.
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

/// Lock the fence's tenure row `FOR SHARE` and fail with
/// [`AuthorityError::Fenced`] unless the tenure is still open and the
/// lease row still shows this holder and epoch, not released and not
/// expired by the database clock.
///
/// Holding the tenure row until the transaction ends makes a concurrent
/// grant or release wait for this write to commit or roll back: both lock
/// the live tenure row before they end it (after the lease row `FOR
/// UPDATE`, in the statement before the one that takes their snapshot),
/// and a tenure, once ended, never reopens. So no write of epoch e can
/// commit after epoch e+1 was granted (L4; see [`CHECK_AND_COUNT_SQL`] for
/// why the lease row is read, not locked). The lease row is not locked at
/// all: a write held open, by a slow guest or a stalled network, never
/// delays the renewal of this or any other lease.
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
    fence_in_transaction(tx.client(), statements, &statements.check, fence).await
}

/// [`check_fence`] and [`record_write`] in one statement: count the write
/// against the tenure (an `UPDATE` of its row, which holds the row until
/// the transaction ends) only while the tenure is open, and read the
/// lease row to judge the fence. The store's commit sends this instead of
/// the two (one statement and one row lock less on every fenced commit;
/// see [`CHECK_AND_COUNT_SQL`]). Only where
/// [`COUNTS_WRITES_IN_TRANSACTION`]: the unfenced test build neither checks
/// nor counts inside the transaction.
pub async fn check_fence_and_count(
    client: &tokio_postgres::Client,
    statements: &FenceStatements,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    fence_in_transaction(client, statements, &statements.check_and_count, fence).await
}

/// Run `statement` ([`CHECK_FENCE_SQL`] or [`CHECK_AND_COUNT_SQL`]) for
/// `fence` and judge its answer. The write may go on only if the lease row
/// shows the fence current *and* the statement holds the open tenure's
/// row (its last column).
async fn fence_in_transaction(
    client: &tokio_postgres::Client,
    statements: &FenceStatements,
    statement: &crate::db::Prepared,
    fence: &Fence,
) -> Result<(), AuthorityError> {
    let failed = |e: tokio_postgres::Error| {
        super::postgres::classify(CALLER_TRANSACTION, &format!("fence check of {fence}"), &e)
    };
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [
        &fence.key.cluster,
        &fence.key.name,
        &(fence.epoch.0 as i64),
        &fence.holder,
    ];
    let row = statement.query_opt(client, &params).await.map_err(failed)?;
    judge(fence, row.as_ref().map(row_view))?;
    if row.as_ref().is_some_and(|r| r.get::<_, bool>(4)) {
        return Ok(());
    }
    // The lease row, as of the statement's snapshot, shows this fence
    // current, yet the tenure row was not held: either it ended after that
    // snapshot was taken (a grant or a release committed while this
    // statement waited for the row), or it is missing. A fresh read tells
    // which, and why. Rare, so a statement of its own is fine; it fails
    // only if a later statement of the transaction already failed, and the
    // write is refused either way.
    let Ok(again) = statements.recheck.query_opt(client, &params).await else {
        return Err(fenced(
            fence,
            FenceCause::Superseded,
            "the tenure ended while this write waited for its record",
        ));
    };
    judge(fence, again.as_ref().map(row_view))?;
    match again.and_then(|r| r.get::<_, Option<bool>>(4)) {
        // Ended while the lease row still shows it: only its own holder
        // ends a tenure without moving the lease row to a new epoch, and
        // that holder released it.
        Some(false) => Err(fenced(fence, FenceCause::Released, "the tenure has ended")),
        // The lease row shows this tenure but its history row is missing
        // (or reappeared, which nothing does): the write would go
        // uncounted (L6). The authority writes both in one transaction, so
        // this is a damaged database, not a race.
        Some(true) | None => Err(AuthorityError::Unavailable {
            endpoint: CALLER_TRANSACTION.into(),
            reason: format!("the tenure record of {fence} is missing; refusing to write uncounted"),
        }),
    }
}

/// The lease row as [`CHECK_FENCE_SQL`], [`CHECK_AND_COUNT_SQL`] and
/// [`RECHECK_SQL`] read it.
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
/// row, which the next grant locks and updates too, so counting inside the
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

/// [`check_fence`]'s statement: the open tenure's row locked `FOR SHARE`
/// (which conflicts with the grant's and the release's `FOR NO KEY
/// UPDATE` of it) and the lease row as the statement's snapshot shows it.
/// `held`: whether the tenure row was locked (it exists, is this holder's
/// and is still open in its newest version).
const CHECK_FENCE_SQL: &str = "
    WITH tenure AS MATERIALIZED (
        SELECT 1
          FROM leasehold_tenures
         WHERE cluster = $1 AND lease = $2 AND epoch = $3 AND holder = $4 AND ended_at IS NULL
           FOR SHARE
    )
    SELECT holder, epoch, released, expires_at > clock_timestamp() AS live,
           EXISTS (SELECT 1 FROM tenure) AS held
      FROM leasehold_leases
     WHERE cluster = $1 AND name = $2";

/// The fence check and the tenure's write count in one statement.
///
/// The count is an `UPDATE` of the tenure row, conditioned on the tenure
/// being open. It is the fence's lock: an `UPDATE` holds the row (`FOR NO
/// KEY UPDATE`) until the transaction ends, and if another transaction
/// changed the row since this statement's snapshot, the server waits for
/// it and judges the condition again on the newest version. Every grant
/// and every release locks the live tenure row (`FOR NO KEY UPDATE`, in
/// the authority's lease lock, before the statement that takes its
/// snapshot) and ends the tenure in the same transaction; an ended tenure
/// never reopens. So either this write holds the row first, and the grant
/// waits until it committed (and sees it in its snapshot), or the grant
/// held it first, and this `UPDATE` waits, finds the tenure ended and
/// counts nothing.
///
/// The lease row is read, not locked: as of this statement's snapshot,
/// which can only be older than the tenure row's newest version. It names
/// the cause of a refusal (a newer epoch, a release, expiry) and judges
/// expiry by the database clock; a renewal it does not see yet makes it
/// judge an older expiry, so it errs towards refusing. A lock on the lease
/// row (`FOR KEY SHARE`, as before) cost every commit a second row lock, a
/// WAL record and a dirtied page of the lease table, on top of the count.
///
/// A count made for a write that is then refused (the lease row shows the
/// lease expired, say) is undone by the write's `ROLLBACK`. `counted`:
/// whether the tenure row was updated.
const CHECK_AND_COUNT_SQL: &str = "
    WITH counted AS (
        UPDATE leasehold_tenures
           SET writes = writes + 1, last_write_at = clock_timestamp()
         WHERE cluster = $1 AND lease = $2 AND epoch = $3 AND holder = $4 AND ended_at IS NULL
        RETURNING 1
    )
    SELECT holder, epoch, released, expires_at > clock_timestamp() AS live,
           EXISTS (SELECT 1 FROM counted) AS counted
      FROM leasehold_leases
     WHERE cluster = $1 AND name = $2";

/// Why a fence check found the lease row current but could not hold the
/// tenure row: the lease row and whether the tenure is open (NULL: no
/// such tenure), read afresh, locking nothing.
const RECHECK_SQL: &str = "
    SELECT l.holder, l.epoch, l.released, l.expires_at > clock_timestamp() AS live,
           (SELECT t.ended_at IS NULL
              FROM leasehold_tenures t
             WHERE t.cluster = $1 AND t.lease = $2 AND t.epoch = $3 AND t.holder = $4) AS open
      FROM leasehold_leases l
     WHERE l.cluster = $1 AND l.name = $2";

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
    recheck: crate::db::Prepared,
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
            recheck: Named(client.prepare_cached(RECHECK_SQL).await?),
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
            recheck: db.prepare(session, RECHECK_SQL).await?,
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
