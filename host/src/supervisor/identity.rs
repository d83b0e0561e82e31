//! The database identity check that gates every acquisition (point 4 of
//! DESIGN.md): the schema's database uuid, the server's system identifier
//! and `pg_is_in_recovery()`, compared with what the operator pinned and
//! with what this host saw first. Re-checked periodically, so a host whose
//! connection string now reaches a different server stops leading.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::authority::{Authority, DatabaseIdentity, ExpectedIdentity};
use crate::status::{DatabaseState, Status};

/// The latest verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityCheck {
    /// Not checked yet.
    Pending,
    /// The database is the right one.
    Verified(DatabaseIdentity),
    /// The database could not be reached; the last verdict is unknown.
    Unreachable(String),
    /// The database is not the one this host must lead against.
    Mismatch(String),
}

impl IdentityCheck {
    /// Whether acquiring is allowed.
    pub fn verified(&self) -> bool {
        matches!(self, IdentityCheck::Verified(_))
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
            IdentityCheck::Verified(identity)
        }
    }
}

/// Re-check every `interval` until `shutdown`, publishing each verdict to
/// `tx` and to the status.
pub async fn watch_identity(
    authority: Arc<dyn Authority>,
    expected: ExpectedIdentity,
    embedded: bool,
    status: Arc<Status>,
    tx: watch::Sender<IdentityCheck>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut first_seen: Option<DatabaseIdentity> = None;
    loop {
        let verdict = check(authority.as_ref(), &expected, first_seen.as_ref()).await;
        let state = match &verdict {
            IdentityCheck::Verified(_) if embedded => DatabaseState::Embedded,
            IdentityCheck::Verified(id) => DatabaseState::Verified {
                database_id: id.database_id.to_string(),
                system_identifier: id.system_identifier.to_string(),
                endpoint: id.endpoint.clone(),
            },
            IdentityCheck::Unreachable(reason) | IdentityCheck::Mismatch(reason) => {
                DatabaseState::Failing {
                    reason: reason.clone(),
                }
            }
            IdentityCheck::Pending => DatabaseState::Unknown,
        };
        if let IdentityCheck::Verified(id) = &verdict
            && first_seen.is_none()
        {
            tracing::info!(
                database_id = %id.database_id,
                system_identifier = id.system_identifier,
                endpoint = id.endpoint,
                "database identity verified"
            );
            first_seen = Some(id.clone());
        }
        if let IdentityCheck::Mismatch(reason) = &verdict {
            tracing::error!("refusing to lead: {reason}");
        }
        status.set_database(state);
        tx.send_if_modified(|current| {
            if *current != verdict {
                *current = verdict;
                true
            } else {
                false
            }
        });
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
