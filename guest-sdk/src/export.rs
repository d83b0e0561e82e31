//! The component's exports on `wasm32`: the glue
//! [`crate::export_controller!`] expands to calls a [`crate::Controller`]
//! and turns its answers into the WIT `reconciler` interface's types.
//!
//! Owns: the mapping from the wire's reconcile reason to
//! [`crate::Reason`], from [`crate::Reply`] and [`crate::Description`] to
//! the wire, and the duration-to-milliseconds rule of the contract. Must
//! never: be imported by `sys` (the bindings live there; this layer sits
//! above the controller, which sits above `sys`).

use std::time::Duration;

#[cfg(target_arch = "wasm32")]
use crate::controller::{Controller, Map, Reason, Reply, dispatch};
#[cfg(target_arch = "wasm32")]
use crate::sys::wasm::{
    WitDescription, WitFailure, WitLabelMap, WitOutcome, WitReconcileError, WitReconcileReason,
    WitRelatedMap, WitRelatedWatch,
};

/// `describe`, for [`crate::export_controller!`].
#[cfg(target_arch = "wasm32")]
pub fn describe<C: Controller>(controller: &C) -> WitDescription {
    let description = controller.describe();
    WitDescription {
        watches: description.watches,
        resync_period_ms: description.resync.map_or(0, millis),
        related: description
            .related
            .into_iter()
            .map(|related| WitRelatedWatch {
                kind: related.kind,
                mapping: match related.map {
                    Map::Owner { kind } => WitRelatedMap::Owner(kind),
                    Map::Label { key, target_kind } => {
                        WitRelatedMap::Label(WitLabelMap { key, target_kind })
                    }
                },
            })
            .collect(),
        shard_label: description.shard_label,
        every_shard: description.every_shard,
        settings_schema: description.settings_schema,
    }
}

/// `reconcile`, for [`crate::export_controller!`].
#[cfg(target_arch = "wasm32")]
pub fn reconcile<C: Controller>(
    controller: &C,
    kind: &str,
    name: &str,
    reason: WitReconcileReason,
) -> Result<WitOutcome, WitReconcileError> {
    let reason = match reason {
        WitReconcileReason::Change => Reason::Change,
        WitReconcileReason::Requeue => Reason::Requeue,
        WitReconcileReason::Resync => Reason::Resync,
        WitReconcileReason::Retry => Reason::Retry,
        WitReconcileReason::Related => Reason::Related,
    };
    match dispatch(controller, kind, name, reason) {
        Reply::Done => Ok(WitOutcome::Done),
        Reply::RequeueAfter(delay) => Ok(WitOutcome::RequeueAfter(millis(delay))),
        Reply::Fenced => Err(WitReconcileError::Fenced),
        Reply::Failed {
            message,
            retry_after,
        } => Err(WitReconcileError::Failed(WitFailure {
            message,
            retry_after_ms: retry_after.map(millis),
        })),
    }
}

/// A duration as WIT milliseconds. A positive duration never rounds down
/// to zero (zero means "disabled" or "at once" on the wire), and absurd
/// durations saturate rather than wrap.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) fn millis(duration: Duration) -> u64 {
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 && !duration.is_zero() {
        1
    } else {
        ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_durations_never_round_to_zero_millis() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
