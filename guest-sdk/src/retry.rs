//! [`retry_on_conflict`]: the bounded re-read-and-retry loop every
//! controller that writes conditionally needs.
//!
//! Owns: which errors are worth re-reading for (a failed precondition:
//! [`StoreError::Conflict`], [`StoreError::NotFound`]), the bound on
//! attempts, and the log line of each retry. Must never: retry a fenced,
//! invalid or unavailable error (the first must stop the guest, the second
//! will fail again, the third has an unknown outcome and is the host's
//! backoff to retry), or loop without a bound.

use crate::error::{Error, StoreError};
use crate::log::{Level, log};

/// Attempts [`retry_on_conflict`] callers use unless they have a reason to
/// choose otherwise: enough to get past a few concurrent writers, few
/// enough that a reconcile stays short when someone keeps winning (the
/// error policy then requeues it).
pub const DEFAULT_CONFLICT_ATTEMPTS: u32 = 5;

/// Run `attempt` (read, decide, commit) until it does not fail on a
/// precondition, at most `attempts` times (at least once, whatever
/// `attempts` says).
///
/// A [`StoreError::Conflict`] or [`StoreError::NotFound`] means an object
/// changed or went away between this attempt's read and its commit, and
/// nothing was written: the next attempt reads again and decides again.
/// Each retry is logged at info with the object that changed. After the
/// last attempt its error is returned as it is, so
/// [`crate::Controller::error_policy`] sees the conflict. Any other
/// result, success or error (fenced, invalid, unavailable, a decode
/// error), is returned at once. There is no delay between attempts: each
/// one starts from a fresh read, and the host's requeue is the backoff.
///
/// # Example
///
/// ```
/// use leasehold_guest::{
///     Api, Error, FakeHost, StoreError, Transaction, retry_on_conflict, DEFAULT_CONFLICT_ATTEMPTS,
/// };
///
/// let host = FakeHost::new();
/// host.seed("counters", "hits", &1);
/// // Someone else bumps the counter between our first read and commit.
/// host.before_commit(1, |host| {
///     host.seed("counters", "hits", &10);
/// });
/// let counters = Api::<u32>::new("counters");
/// let bumped = retry_on_conflict(DEFAULT_CONFLICT_ATTEMPTS, || {
///     let hits = counters.get("hits")?.ok_or_else(|| Error::failed("gone"))?;
///     Transaction::new().update(&hits, &(hits.value + 1)).commit()?;
///     Ok(hits.value + 1)
/// })?;
/// assert_eq!(bumped, 11);
/// assert_eq!(host.object::<u32>("counters", "hits").unwrap().value, 11);
///
/// // A writer that always wins: the conflict comes back after 3 attempts.
/// let result: Result<(), Error> = retry_on_conflict(3, || {
///     Err(StoreError::Conflict(leasehold_guest::ObjectKey::new("counters", "hits")).into())
/// });
/// assert!(matches!(result.unwrap_err().store_error(), Some(StoreError::Conflict(_))));
/// # Ok::<(), Error>(())
/// ```
pub fn retry_on_conflict<T>(
    attempts: u32,
    mut attempt: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let attempts = attempts.max(1);
    let mut made = 1;
    loop {
        match attempt() {
            Err(error) if made < attempts => {
                let key = match error.store_error() {
                    Some(StoreError::Conflict(key) | StoreError::NotFound(key)) => key.clone(),
                    _ => return Err(error),
                };
                log(
                    Level::Info,
                    &format!(
                        "{key} changed since it was read; reading again (attempt {} of {attempts})",
                        made + 1
                    ),
                );
                made += 1;
            }
            result => return result,
        }
    }
}
