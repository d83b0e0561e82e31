//! `wasm32`: bindings generated from the WIT package (the only definition
//! of the contract) and the conversions between them and the SDK's types.
//!
//! The bindings are generated once, here. Their export macro is public so
//! that [`crate::export_controller!`], expanded in the controller's crate,
//! can emit the component exports there.

use crate::controller::{Controller, Reply, dispatch, millis};
use crate::error::StoreError;
use crate::fence::Fence;
use crate::log::Level;
use crate::object::ObjectKey;
use crate::transaction::{Committed, NewEvent, Op};

use super::{RawObject, RawPage};

/// Generated bindings for the `leasehold:controller/controller` world.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "leasehold:controller/controller",
        // The export macro is used from controller crates, through
        // `export_controller!`, so it must be exported from this one.
        pub_export_macro: true,
        export_macro_name: "__export",
        default_bindings_module: "leasehold_guest::__private::bindings",
    });
}

use bindings::exports::leasehold::controller::reconciler as wit_reconciler;
use bindings::leasehold::controller::{logging, store, tenure, types};

pub use wit_reconciler::{
    Description as WitDescription, Guest, Outcome as WitOutcome,
    ReconcileError as WitReconcileError,
};

fn key_from_wit(key: types::ObjectKey) -> ObjectKey {
    ObjectKey::new(key.kind, key.name)
}

fn error_from_wit(error: store::StoreError) -> StoreError {
    match error {
        store::StoreError::Fenced(why) => StoreError::Fenced(why),
        store::StoreError::Conflict(key) => StoreError::Conflict(key_from_wit(key)),
        store::StoreError::NotFound(key) => StoreError::NotFound(key_from_wit(key)),
        store::StoreError::Invalid(why) => StoreError::from_invalid(why),
        store::StoreError::Unavailable(why) => StoreError::Unavailable(why),
    }
}

fn object_from_wit(object: types::Object) -> RawObject {
    RawObject {
        kind: object.kind,
        name: object.name,
        version: object.version,
        value: object.value,
    }
}

fn op_to_wit(op: &Op) -> store::Op {
    match op {
        Op::Create { key, value } => store::Op::Create(store::CreateOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            value: value.clone(),
        }),
        Op::Update {
            key,
            expected_version,
            value,
        } => store::Op::Update(store::UpdateOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            expected_version: *expected_version,
            value: value.clone(),
        }),
        Op::Delete {
            key,
            expected_version,
        } => store::Op::Delete(store::DeleteOp {
            kind: key.kind.clone(),
            name: key.name.clone(),
            expected_version: *expected_version,
        }),
    }
}

fn event_to_wit(event: &NewEvent) -> store::NewEvent {
    store::NewEvent {
        kind: event.key.kind.clone(),
        name: event.key.name.clone(),
        reason: event.reason.clone(),
        message: event.message.clone(),
    }
}

pub(crate) fn get(kind: &str, name: &str) -> Result<Option<RawObject>, StoreError> {
    store::get(kind, name)
        .map(|object| object.map(object_from_wit))
        .map_err(error_from_wit)
}

pub(crate) fn list(kind: &str, after: Option<&str>, limit: u32) -> Result<RawPage, StoreError> {
    let page = store::list(kind, after, limit).map_err(error_from_wit)?;
    Ok(RawPage {
        objects: page.objects.into_iter().map(object_from_wit).collect(),
        next: page.next,
    })
}

pub(crate) fn commit(ops: &[Op], events: &[NewEvent]) -> Result<Committed, StoreError> {
    let ops: Vec<store::Op> = ops.iter().map(op_to_wit).collect();
    let events: Vec<store::NewEvent> = events.iter().map(event_to_wit).collect();
    let committed = store::commit(&ops, &events).map_err(error_from_wit)?;
    Ok(Committed {
        revision: committed.revision,
        event_seqs: committed.event_seqs,
    })
}

pub(crate) fn fence() -> Fence {
    let fence = tenure::current();
    Fence {
        cluster: fence.cluster,
        lease: fence.lease,
        epoch: fence.epoch,
        holder: fence.holder,
    }
}

pub(crate) fn log(level: Level, message: &str) {
    let level = match level {
        Level::Trace => logging::Level::Trace,
        Level::Debug => logging::Level::Debug,
        Level::Info => logging::Level::Info,
        Level::Warn => logging::Level::Warn,
        Level::Error => logging::Level::Error,
    };
    logging::log(level, message);
}

/// `describe`, for [`crate::export_controller!`].
pub fn describe<C: Controller>(controller: &C) -> WitDescription {
    let description = controller.describe();
    WitDescription {
        watches: description.watches,
        resync_period_ms: description.resync.map_or(0, millis),
    }
}

/// `reconcile`, for [`crate::export_controller!`].
pub fn reconcile<C: Controller>(
    controller: &C,
    kind: &str,
    name: &str,
) -> Result<WitOutcome, WitReconcileError> {
    match dispatch(controller, kind, name) {
        Reply::Done => Ok(WitOutcome::Done),
        Reply::RequeueAfter(delay) => Ok(WitOutcome::RequeueAfter(millis(delay))),
        Reply::Fenced => Err(WitReconcileError::Fenced),
        Reply::Failed {
            message,
            retry_after,
        } => Err(WitReconcileError::Failed(wit_reconciler::Failure {
            message,
            retry_after_ms: retry_after.map(millis),
        })),
    }
}
