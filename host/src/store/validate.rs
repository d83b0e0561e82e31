//! The input rules every backend applies before it touches state: names,
//! JSON values, sizes and counts.
//!
//! The rules themselves are the model's ([`leasehold_model::validate`],
//! shared with the SDK's fake); this module adds what only the host
//! knows of (clusters, fences) and reports refusals as [`StoreError`]s.
//! Must never: look at stored state (preconditions are [`super::plan`]'s
//! concern).

use leasehold_model::validate as model;

use crate::names::{NameError, check_holder, check_label};

use super::{Selector, StoreError};

pub(crate) use leasehold_model::validate::{check_label_key, page_limit};

impl From<NameError> for StoreError {
    fn from(error: NameError) -> Self {
        StoreError::Invalid(error.to_string())
    }
}

impl From<leasehold_model::Error> for StoreError {
    /// The model's refusal, as the store reports it: the same variants and
    /// texts. A plan that broke its own rule is the store failing, not the
    /// caller's input.
    fn from(error: leasehold_model::Error) -> Self {
        use leasehold_model::Error;
        match error {
            Error::Conflict { key, reason } => StoreError::Conflict { key, reason },
            Error::NotFound { key } => StoreError::NotFound { key },
            Error::Invalid(message) => StoreError::Invalid(message),
            Error::TooLarge(message) => StoreError::TooLarge(message),
            Error::Inconsistent(message) => StoreError::Unavailable(message),
        }
    }
}

/// A cluster name is a DNS label, like every name users choose.
pub(crate) fn check_cluster(cluster: &str) -> Result<(), StoreError> {
    Ok(check_label("cluster", cluster)?)
}

/// Kinds and object names are DNS labels (see [`crate::names`]): they are
/// also URL path segments and must sort the same way in every backend.
pub(crate) fn check_key(key: &super::ObjectKey) -> Result<(), StoreError> {
    Ok(model::check_key(key)?)
}

/// The lease, cluster and holder a fence names must be well-formed before
/// they are looked up.
pub(crate) fn check_fence_names(fence: &crate::fence::Fence) -> Result<(), StoreError> {
    check_cluster(&fence.key.cluster)?;
    check_label("lease", &fence.key.name)?;
    check_holder(&fence.holder)?;
    Ok(())
}

/// A change-stream read's cluster and watched kinds, checked alike by
/// every backend.
pub(crate) fn check_change_request(cluster: &str, kinds: &[String]) -> Result<(), StoreError> {
    check_cluster(cluster)?;
    for kind in kinds {
        check_label("watched kind", kind)?;
    }
    Ok(())
}

/// A list's cluster, kind, cursor and selector, checked alike by every
/// backend ([`model::check_list`]).
pub(crate) fn check_list_request(
    cluster: &str,
    kind: &str,
    after: Option<&str>,
    selector: &Selector,
) -> Result<(), StoreError> {
    check_cluster(cluster)?;
    Ok(model::check_list(kind, after, selector)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::{Epoch, Fence, LeaseKey};

    #[test]
    fn model_refusals_keep_their_kind_and_text() {
        let key = super::super::ObjectKey::new("tasks", "t1");
        let refused = model::normalize_value(&Default::default(), &key, "[1,").unwrap_err();
        let store = StoreError::from(refused.clone());
        assert!(matches!(&store, StoreError::Invalid(_)));
        assert_eq!(store.to_string(), refused.to_string());
    }

    #[test]
    fn fences_and_clusters_are_checked_by_name() {
        let fence = Fence {
            key: LeaseKey::new("Bad_Cluster", "ctl"),
            epoch: Epoch(1),
            holder: "h".into(),
        };
        assert!(matches!(
            check_fence_names(&fence),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            check_change_request("c1", &["Not-a-label".into()]),
            Err(StoreError::Invalid(_))
        ));
    }
}
