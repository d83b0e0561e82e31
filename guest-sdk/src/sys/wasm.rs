//! `wasm32`: bindings generated from the WIT package (the only definition
//! of the contract) and the conversions between the imports and the wire
//! types.
//!
//! The bindings are generated once, here. Their export macro is public so
//! that [`crate::export_controller!`], expanded in the controller's crate,
//! can emit the component exports there; the export glue that calls a
//! `Controller` lives above this layer, in `export.rs`.

use super::{Committed, Fence, Level, NewEvent, ObjectKey, Op, RawObject, RawPage, WireError};

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

// The export side's types, for the glue in `export.rs`.
pub use wit_reconciler::{
    Description as WitDescription, Failure as WitFailure, Guest, Outcome as WitOutcome,
    ReconcileError as WitReconcileError,
};

fn key_from_wit(key: types::ObjectKey) -> ObjectKey {
    ObjectKey::new(key.kind, key.name)
}

fn error_from_wit(error: store::StoreError) -> WireError {
    match error {
        store::StoreError::Fenced(why) => WireError::Fenced(why),
        store::StoreError::Conflict(key) => WireError::Conflict(key_from_wit(key)),
        store::StoreError::NotFound(key) => WireError::NotFound(key_from_wit(key)),
        store::StoreError::Invalid(why) => WireError::Invalid(why),
        store::StoreError::Unavailable(why) => WireError::Unavailable(why),
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

pub(crate) fn get(kind: &str, name: &str) -> Result<Option<RawObject>, WireError> {
    store::get(kind, name)
        .map(|object| object.map(object_from_wit))
        .map_err(error_from_wit)
}

pub(crate) fn list(kind: &str, after: Option<&str>, limit: u32) -> Result<RawPage, WireError> {
    let page = store::list(kind, after, limit).map_err(error_from_wit)?;
    Ok(RawPage {
        objects: page.objects.into_iter().map(object_from_wit).collect(),
        next: page.next,
    })
}

pub(crate) fn commit(ops: &[Op], events: &[NewEvent]) -> Result<Committed, WireError> {
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
