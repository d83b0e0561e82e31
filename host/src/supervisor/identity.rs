//! The gate every acquisition passes (point 4 of `docs/design.md`): the
//! database identity — the schema's database uuid, the server's system
//! identifier and `pg_is_in_recovery()`, compared with what the operator
//! pinned and with what this host saw first — whether the database accepts
//! writes, and this host's claim on its holder name. Re-checked
//! periodically (and sooner while failing), so a host whose connection
//! string now reaches a different server stops leading, and a host leads
//! again soon after the database accepts writes again.
//!
//! The claim's session is the host's liveness session: when it ends, every
//! tenure ends at once ([`IdentityCheck::Unclaimed`]), because a standby
//! may now take the leases over without waiting for their expiry. Claim
//! changes are followed the moment they happen, even while an identity
//! check is waiting for the database; each claimed session has its own
//! number ([`IdentityCheck::Claimed`]), so a tenure never continues into a
//! later session even if it missed the loss in between.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::authority::claim::{ClaimState, ClaimView, HolderClaim, HostInfo, Liveness};
use crate::authority::{Authority, DatabaseIdentity, ExpectedIdentity};
use crate::status::{DatabaseState, Status};

/// The latest verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityCheck {
    /// Not checked yet.
    Pending,
    /// The database is the right one and it accepts writes; the backend
    /// needs no holder claim (one process).
    Verified(DatabaseIdentity),
    /// The database is the right one, it accepts writes, and this host
    /// holds its holder name on its liveness session number `session`
    /// ([`crate::authority::claim::ClaimSession::generation`]).
    Claimed {
        /// The verified identity.
        identity: DatabaseIdentity,
        /// The claim session's number: a tenure granted under one session
        /// ends once another one holds the name.
        session: u64,
    },
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
    /// This host does not hold its holder name now: its claim session is
    /// connecting, or it ended (terminated, server restarted, connection
    /// lost). Blocks acquiring, and ends every tenure at once, as at the
    /// renew deadline: the claim session is the host's liveness session,
    /// and with it gone a standby may take the leases over.
    Unclaimed(String),
}

impl IdentityCheck {
    /// Whether acquiring is allowed.
    pub fn verified(&self) -> bool {
        matches!(
            self,
            IdentityCheck::Verified(_) | IdentityCheck::Claimed { .. }
        )
    }

    /// Why acquiring is not allowed, if it is not.
    pub fn refusal(&self) -> Option<String> {
        match self {
            IdentityCheck::Verified(_) | IdentityCheck::Claimed { .. } => None,
            IdentityCheck::Pending => Some("waiting for the database identity check".to_string()),
            IdentityCheck::Unreachable(reason)
            | IdentityCheck::ReadOnly { reason, .. }
            | IdentityCheck::Mismatch(reason)
            | IdentityCheck::HolderTaken(reason)
            | IdentityCheck::Unclaimed(reason) => Some(reason.clone()),
        }
    }

    /// Why a running tenure must end now, if it must: the database is not
    /// the right one, another host runs as this holder, or this host's
    /// liveness (claim) session ended.
    pub fn ends_tenure(&self) -> Option<(&'static str, &str)> {
        match self {
            IdentityCheck::Mismatch(reason) => Some(("identity_changed", reason)),
            IdentityCheck::HolderTaken(reason) => Some(("holder_taken", reason)),
            IdentityCheck::Unclaimed(reason) => Some(("claim_lost", reason)),
            _ => None,
        }
    }

    /// The number of the claim session this verdict was reached under, if
    /// it says (only [`IdentityCheck::Claimed`] does).
    pub fn claim_session(&self) -> Option<u64> {
        match self {
            IdentityCheck::Claimed { session, .. } => Some(*session),
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
/// (`None`: the backend needs no claim). A wrong database outranks
/// everything; then a name that is not (or no longer) held here, because
/// that ends tenures whatever the identity check says; then the identity
/// check's own verdict.
fn combine(identity: &IdentityCheck, claim: Option<&ClaimView>) -> IdentityCheck {
    let Some(claim) = claim else {
        return identity.clone();
    };
    match (identity, &claim.state, &claim.session) {
        (IdentityCheck::Mismatch(_), _, _) => identity.clone(),
        (_, ClaimState::WrongDatabase { reason }, _) => IdentityCheck::Mismatch(reason.clone()),
        (_, ClaimState::Taken { reason }, _) => IdentityCheck::HolderTaken(reason.clone()),
        (_, ClaimState::Unreachable { reason }, _) => IdentityCheck::Unclaimed(reason.clone()),
        (_, ClaimState::Pending, _) | (_, ClaimState::Claimed, None) => IdentityCheck::Unclaimed(
            "claiming this host's holder name (its claim session is connecting)".to_string(),
        ),
        (IdentityCheck::Verified(identity), ClaimState::Claimed, Some(session)) => {
            IdentityCheck::Claimed {
                identity: identity.clone(),
                session: session.generation,
            }
        }
        (verdict, ClaimState::Claimed, Some(_)) => verdict.clone(),
    }
}

/// A `session` tenure's view of the host's [`Liveness`]: lapsed once claim
/// session `generation` (the one it was granted under) stops keeping the
/// host alive to the server (L8). Given to the guest's revocation, so its
/// outbound requests refuse on the instant itself, before the claim's
/// report of the loss has ended the tenure.
pub struct SessionLapse {
    /// The host's liveness.
    pub liveness: Liveness,
    /// The claim session the tenure was granted under.
    pub generation: u64,
}

impl crate::runtime::Lapse for SessionLapse {
    fn lapsed_at(&self, now: std::time::Instant) -> bool {
        self.liveness.lapsed_at(self.generation, now)
    }
}

/// One identity check in flight.
type Checking = Pin<Box<dyn Future<Output = IdentityCheck> + Send>>;

/// Re-check every `interval` (every [`IDENTITY_RECHECK_FAILING`] while the
/// check fails) and follow this host's claim on its holder name, publishing
/// each verdict to `tx` and to the status. A claim change is published the
/// moment it happens, even while a check waits for the database. The
/// holder name is claimed here (see [`Authority::claim_holder`]), with the
/// host's controllers as `status` reports them, and kept until this future
/// is dropped: after `shutdown` it stops checking but keeps the claim, so
/// the name is not free for another host while this one still releases its
/// leases (the service aborts it once every supervisor stopped).
///
/// [`IDENTITY_RECHECK_FAILING`]: crate::timeouts::IDENTITY_RECHECK_FAILING
pub async fn watch_identity(
    authority: Arc<dyn Authority>,
    expected: ExpectedIdentity,
    backend: crate::status::BackendKind,
    status: Arc<Status>,
    tx: watch::Sender<IdentityCheck>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let host = HostInfo::this_process(status.controller_names());
    let claim: Option<HolderClaim> = authority.claim_holder(&status.cluster, &status.holder, host);
    let mut claim_view = claim.as_ref().map(HolderClaim::view);
    let mut first_seen: Option<DatabaseIdentity> = None;
    let mut identity = IdentityCheck::Pending;
    let mut checking: Option<Checking> = None;
    let mut next_check = tokio::time::Instant::now();
    loop {
        if checking.is_none() && tokio::time::Instant::now() >= next_check {
            let (authority, expected, first_seen) =
                (authority.clone(), expected.clone(), first_seen.clone());
            checking = Some(Box::pin(async move {
                check(authority.as_ref(), &expected, first_seen.as_ref()).await
            }));
        }
        let claimed = claim_view.as_mut().map(|rx| rx.borrow_and_update().clone());
        status.set_holder_claim(claimed.as_ref().map(|view| view.state.clone()));
        let verdict = combine(&identity, claimed.as_ref());
        tx.send_if_modified(|current| {
            if *current != verdict {
                *current = verdict;
                true
            } else {
                false
            }
        });
        tokio::select! {
            checked = async { checking.as_mut()?.await.into() }, if checking.is_some() => {
                checking = None;
                if let Some(checked) = checked {
                    identity = checked;
                    first_seen = report(&identity, backend, &status, first_seen);
                }
                let wait = if identity.verified() {
                    interval
                } else {
                    interval.min(crate::timeouts::IDENTITY_RECHECK_FAILING)
                };
                next_check = tokio::time::Instant::now() + wait;
            }
            _ = tokio::time::sleep_until(next_check), if checking.is_none() => {}
            changed = async { claim_view.as_mut()?.changed().await.ok() }, if claim_view.is_some() => {
                // A claim that stopped publishing cannot be relied on.
                if changed.is_none() {
                    claim_view = None;
                    status.set_holder_claim(Some(ClaimState::Unreachable {
                        reason: "the holder claim stopped".to_string(),
                    }));
                }
            }
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    // Keep the claim until this future is dropped.
    let _claim = claim;
    std::future::pending::<()>().await;
}

/// Show a finished identity check in the status (and the log); returns
/// the identity first seen by this process.
fn report(
    identity: &IdentityCheck,
    backend: crate::status::BackendKind,
    status: &Status,
    mut first_seen: Option<DatabaseIdentity>,
) -> Option<DatabaseIdentity> {
    let state = match identity {
        IdentityCheck::Verified(_) | IdentityCheck::Claimed { .. }
            if backend == crate::status::BackendKind::Memory =>
        {
            DatabaseState::Memory
        }
        IdentityCheck::Verified(id) | IdentityCheck::Claimed { identity: id, .. }
            if backend == crate::status::BackendKind::Embedded =>
        {
            if first_seen.is_none() {
                tracing::info!(
                    database_id = %id.database_id,
                    endpoint = id.endpoint,
                    "embedded database opened"
                );
                first_seen = Some(id.clone());
            }
            DatabaseState::Embedded {
                database_id: id.database_id.to_string(),
                endpoint: id.endpoint.clone(),
            }
        }
        // A read-only database is still the verified one; readiness
        // reports the refused writes as a check of their own.
        IdentityCheck::Verified(id)
        | IdentityCheck::Claimed { identity: id, .. }
        | IdentityCheck::ReadOnly { identity: id, .. } => {
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
    match identity {
        IdentityCheck::Mismatch(reason) => tracing::error!("refusing to lead: {reason}"),
        IdentityCheck::ReadOnly { reason, .. } => tracing::error!("not leading: {reason}"),
        _ => {}
    }
    status.set_database(state);
    first_seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::claim::ClaimSession;

    fn identity() -> DatabaseIdentity {
        DatabaseIdentity {
            database_id: uuid::Uuid::nil(),
            system_identifier: 7,
            database_oid: 0,
            database_name: String::new(),
            timeline: None,
            in_recovery: false,
            read_only: false,
            endpoint: "db".into(),
        }
    }

    fn claimed(generation: u64) -> ClaimView {
        ClaimView {
            state: ClaimState::Claimed,
            session: Some(ClaimSession {
                generation,
                pid: 100 + generation as i32,
                backend_start: None,
                key: 1,
            }),
        }
    }

    fn unreachable() -> ClaimView {
        ClaimView {
            state: ClaimState::Unreachable {
                reason: "the claim session closed".into(),
            },
            session: None,
        }
    }

    #[test]
    fn a_claimed_name_names_its_session_and_allows_acquiring() {
        let verdict = combine(&IdentityCheck::Verified(identity()), Some(&claimed(3)));
        assert_eq!(
            verdict,
            IdentityCheck::Claimed {
                identity: identity(),
                session: 3
            }
        );
        assert!(verdict.verified());
        assert_eq!(verdict.claim_session(), Some(3));
        assert_eq!(verdict.ends_tenure(), None);
        // Without a claim (one process) the identity check decides alone.
        assert_eq!(
            combine(&IdentityCheck::Verified(identity()), None),
            IdentityCheck::Verified(identity())
        );
    }

    #[test]
    fn a_lost_liveness_session_ends_tenures_whatever_the_identity_check_says() {
        for checked in [
            IdentityCheck::Pending,
            IdentityCheck::Verified(identity()),
            IdentityCheck::Unreachable("the database did not answer".into()),
            IdentityCheck::ReadOnly {
                identity: identity(),
                reason: "read-only".into(),
            },
        ] {
            let verdict = combine(&checked, Some(&unreachable()));
            assert!(!verdict.verified(), "{checked:?}");
            let (why, reason) = verdict.ends_tenure().expect("the tenure ends");
            assert_eq!(why, "claim_lost", "{checked:?}");
            assert!(reason.contains("the claim session closed"), "{reason}");
        }
        // Still connecting: nothing is acquired, and nothing could run.
        let pending = combine(
            &IdentityCheck::Verified(identity()),
            Some(&ClaimView::pending()),
        );
        assert_eq!(
            pending.ends_tenure().map(|(why, _)| why),
            Some("claim_lost")
        );
        // A wrong database outranks the claim, and a taken name ends tenures.
        let mismatch = IdentityCheck::Mismatch("another database".into());
        assert_eq!(combine(&mismatch, Some(&unreachable())), mismatch);
        let taken = ClaimView {
            state: ClaimState::Taken {
                reason: "host-b runs as this holder".into(),
            },
            session: None,
        };
        assert_eq!(
            combine(&IdentityCheck::Unreachable("x".into()), Some(&taken))
                .ends_tenure()
                .map(|(why, _)| why),
            Some("holder_taken")
        );
    }

    #[test]
    fn a_held_name_leaves_the_identity_checks_own_refusals_alone() {
        let unreachable = IdentityCheck::Unreachable("the database did not answer".into());
        let verdict = combine(&unreachable, Some(&claimed(1)));
        assert_eq!(verdict, unreachable);
        // A running tenure goes on while its renewals succeed.
        assert_eq!(verdict.ends_tenure(), None);
    }
}
