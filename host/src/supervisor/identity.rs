//! The gate every acquisition passes (point 4 of `docs/design.md`): the
//! database identity — the schema's database uuid, the server's system
//! identifier and `pg_is_in_recovery()`, compared with what the operator
//! pinned and with what this host saw first — whether the database accepts
//! writes, and this host's claim on its holder name. Re-checked
//! periodically (and sooner while failing), so a host whose connection
//! string now reaches a different server stops leading, and a host leads
//! again soon after the database accepts writes again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::authority::claim::{ClaimState, HolderClaim};
use crate::authority::{Authority, DatabaseIdentity, ExpectedIdentity};
use crate::status::{DatabaseState, Status};

/// The latest verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityCheck {
    /// Not checked yet.
    Pending,
    /// The database is the right one, it accepts writes, and this host
    /// holds its holder name.
    Verified(DatabaseIdentity),
    /// The database could not be reached (or the holder name could not be
    /// claimed for want of it); the last verdict is unknown. Blocks
    /// acquiring; a running tenure goes on while its renewals succeed.
    Unreachable(String),
    /// The database is the right one (`identity`) but refuses writes
    /// (sessions opened now are read-only). Blocks acquiring; a running
    /// tenure goes on while its renewals succeed.
    ReadOnly {
        /// The verified identity.
        identity: DatabaseIdentity,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The database is not the one this host must lead against. Ends every
    /// tenure.
    Mismatch(String),
    /// Another live host runs as this host's holder. Ends every tenure: two
    /// hosts must never act as one holder.
    HolderTaken(String),
}

impl IdentityCheck {
    /// Whether acquiring is allowed.
    pub fn verified(&self) -> bool {
        matches!(self, IdentityCheck::Verified(_))
    }

    /// Why acquiring is not allowed, if it is not.
    pub fn refusal(&self) -> Option<String> {
        match self {
            IdentityCheck::Verified(_) => None,
            IdentityCheck::Pending => Some("waiting for the database identity check".to_string()),
            IdentityCheck::Unreachable(reason)
            | IdentityCheck::ReadOnly { reason, .. }
            | IdentityCheck::Mismatch(reason)
            | IdentityCheck::HolderTaken(reason) => Some(reason.clone()),
        }
    }

    /// Why a running tenure must end now, if it must: the database is not
    /// the right one, or another host runs as this holder.
    pub fn ends_tenure(&self) -> Option<(&'static str, &str)> {
        match self {
            IdentityCheck::Mismatch(reason) => Some(("identity_changed", reason)),
            IdentityCheck::HolderTaken(reason) => Some(("holder_taken", reason)),
            _ => None,
        }
    }
}

/// Check once: compare with the pinned expectation and with the identity
/// first seen by this process.
pub async fn check(
    authority: &dyn Authority,
    expected: &ExpectedIdentity,
    first_seen: Option<&DatabaseIdentity>,
) -> IdentityCheck {
    match authority.identity().await {
        Err(e @ crate::authority::AuthorityError::Unavailable { .. }) => {
            IdentityCheck::Unreachable(e.to_string())
        }
        Err(e) => IdentityCheck::Mismatch(e.to_string()),
        Ok(identity) => {
            if let Err(e) = expected.verify(&identity) {
                return IdentityCheck::Mismatch(e.to_string());
            }
            if let Some(first) = first_seen
                && (first.database_id != identity.database_id
                    || first.system_identifier != identity.system_identifier)
            {
                return IdentityCheck::Mismatch(format!(
                    "database identity changed since start-up: was {} / {}, now {} / {}",
                    first.database_id,
                    first.system_identifier,
                    identity.database_id,
                    identity.system_identifier
                ));
            }
            if identity.read_only {
                return IdentityCheck::ReadOnly {
                    reason: read_only_reason(&identity.endpoint),
                    identity,
                };
            }
            IdentityCheck::Verified(identity)
        }
    }
}

/// Why a read-only database blocks leading.
pub fn read_only_reason(endpoint: &str) -> String {
    format!(
        "the database at {endpoint} refuses writes: sessions opened now are read-only \
         (transaction_read_only = on, SQLSTATE 25006 on every write; \
         default_transaction_read_only is set, or the server is a standby). No lease is \
         acquired or kept until it accepts writes again; check `ALTER DATABASE ... SET \
         default_transaction_read_only` and `ALTER ROLE ... SET` on the server"
    )
}

/// The gate's verdict from the identity check and the holder claim
/// (`None`: the backend needs no claim).
fn combine(identity: &IdentityCheck, claim: Option<&ClaimState>) -> IdentityCheck {
    match (identity, claim) {
        (IdentityCheck::Verified(_), Some(ClaimState::Taken { reason })) => {
            IdentityCheck::HolderTaken(reason.clone())
        }
        (IdentityCheck::Verified(_), Some(ClaimState::Unreachable { reason })) => {
            IdentityCheck::Unreachable(reason.clone())
        }
        (IdentityCheck::Verified(_), Some(ClaimState::Pending)) => IdentityCheck::Unreachable(
            "claiming this host's holder name (its claim session is connecting)".to_string(),
        ),
        (verdict, _) => verdict.clone(),
    }
}

/// Re-check every `interval` (every [`IDENTITY_RECHECK_FAILING`] while the
/// check fails) and follow this host's claim on its holder name, publishing
/// each verdict to `tx` and to the status. The holder name is claimed here
/// (see [`Authority::claim_holder`]) and kept until this future is dropped:
/// after `shutdown` it stops checking but keeps the claim, so the name is
/// not free for another host while this one still releases its leases (the
/// service aborts it once every supervisor stopped).
///
/// [`IDENTITY_RECHECK_FAILING`]: crate::timeouts::IDENTITY_RECHECK_FAILING
pub async fn watch_identity(
    authority: Arc<dyn Authority>,
    expected: ExpectedIdentity,
    embedded: bool,
    status: Arc<Status>,
    tx: watch::Sender<IdentityCheck>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let claim: Option<HolderClaim> = authority.claim_holder(&status.cluster, &status.holder);
    let mut claim_state = claim.as_ref().map(HolderClaim::state);
    let mut first_seen: Option<DatabaseIdentity> = None;
    let mut identity = IdentityCheck::Pending;
    let mut recheck = true;
    loop {
        if recheck {
            identity = check(authority.as_ref(), &expected, first_seen.as_ref()).await;
            let state = match &identity {
                IdentityCheck::Verified(_) if embedded => DatabaseState::Embedded,
                // A read-only database is still the verified one; readiness
                // reports the refused writes as a check of their own.
                IdentityCheck::Verified(id) | IdentityCheck::ReadOnly { identity: id, .. } => {
                    if first_seen.is_none() {
                        tracing::info!(
                            database_id = %id.database_id,
                            system_identifier = id.system_identifier,
                            endpoint = id.endpoint,
                            "database identity verified"
                        );
                        first_seen = Some(id.clone());
                    }
                    DatabaseState::Verified {
                        database_id: id.database_id.to_string(),
                        system_identifier: id.system_identifier.to_string(),
                        endpoint: id.endpoint.clone(),
                    }
                }
                IdentityCheck::Pending => DatabaseState::Unknown,
                other => DatabaseState::Failing {
                    reason: other.refusal().unwrap_or_default(),
                },
            };
            match &identity {
                IdentityCheck::Mismatch(reason) => tracing::error!("refusing to lead: {reason}"),
                IdentityCheck::ReadOnly { reason, .. } => tracing::error!("not leading: {reason}"),
                _ => {}
            }
            status.set_database(state);
        }
        let claimed = claim_state
            .as_mut()
            .map(|rx| rx.borrow_and_update().clone());
        status.set_holder_claim(claimed.clone());
        let verdict = combine(&identity, claimed.as_ref());
        tx.send_if_modified(|current| {
            if *current != verdict {
                *current = verdict;
                true
            } else {
                false
            }
        });
        let wait = if identity.verified() {
            interval
        } else {
            interval.min(crate::timeouts::IDENTITY_RECHECK_FAILING)
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => recheck = true,
            changed = async { claim_state.as_mut()?.changed().await.ok() }, if claim_state.is_some() => {
                // A claim that stopped publishing cannot be relied on.
                if changed.is_none() {
                    claim_state = None;
                    status.set_holder_claim(Some(ClaimState::Unreachable {
                        reason: "the holder claim stopped".to_string(),
                    }));
                }
                recheck = false;
            }
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    // Keep the claim until this future is dropped.
    let _claim = claim;
    std::future::pending::<()>().await;
}
