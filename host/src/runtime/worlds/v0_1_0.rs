//! `leasehold:controller@0.1.0`, generated from `wit/0.1.0/controller.wit`
//! (kept unchanged): components built against it run on this host as they
//! did on hosts that knew no other version. Converts between its types and
//! the host slices of `runtime/host/`.

use wasmtime::Store;
use wasmtime::component::Linker;

use super::{Answer, Described};
use crate::runtime::host::logging::{Level, LoggingHost};
use crate::runtime::host::store::{CallError, StoreHost};
use crate::runtime::host::tenure::TenureHost;
use crate::runtime::state::{GuestState, LoggingView, StoreView, TenureView};
use crate::store::{NewEvent, ObjectKey, Op};

wasmtime::component::bindgen!({
    // The current package (and the WASI packages under `wit/deps`) first:
    // the 0.1.0 text refers to those WASI packages by name.
    path: ["../wit", "../wit/0.1.0"],
    world: "leasehold:controller/controller@0.1.0",
    imports: {
        // Store calls reach the database: they must be async so a lost lease
        // can drop them mid-flight.
        "leasehold:controller/store": async,
        default: trappable,
    },
    exports: {
        default: async,
    },
    // Outbound HTTP is wasmtime-wasi-http's implementation of the standard
    // interface; only its hooks are ours (`host::http`).
    with: {
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
    },
});

use exports::leasehold::controller0_1_0::reconciler;
use leasehold::controller0_1_0::{logging, store, tenure, types};

shared_conversions!();
fence_only_tenure!();

/// Link this version's Leasehold interfaces (WASI is linked once, for
/// every version).
pub(crate) fn link(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    store::add_to_linker::<GuestState, StoreView>(linker, |s| &mut s.store)?;
    tenure::add_to_linker::<GuestState, TenureView>(linker, |s| &mut s.tenure)?;
    logging::add_to_linker::<GuestState, LoggingView>(linker, |s| &mut s.logging)?;
    Ok(())
}

pub(crate) async fn describe(
    bindings: &Controller,
    store: &mut Store<GuestState>,
) -> wasmtime::Result<Described> {
    let description = bindings
        .leasehold_controller0_1_0_reconciler()
        .call_describe(store)
        .await?;
    Ok(Described {
        watches: description.watches,
        resync_period_ms: description.resync_period_ms,
        // 0.1.0 has no related watches, and no sharding of its own.
        related: Vec::new(),
        shard_label: None,
        every_shard: Vec::new(),
        settings_schema: None,
    })
}

pub(crate) async fn reconcile(
    bindings: &Controller,
    store: &mut Store<GuestState>,
    kind: &str,
    name: &str,
) -> wasmtime::Result<Answer> {
    let result = bindings
        .leasehold_controller0_1_0_reconciler()
        .call_reconcile(store, kind, name)
        .await?;
    Ok(answer(result))
}

fn wit_object(object: crate::store::Object) -> types::Object {
    types::Object {
        kind: object.kind,
        name: object.name,
        version: object.version,
        value: object.value,
    }
}

fn op(op: store::Op) -> Op {
    match op {
        store::Op::Create(c) => Op::Create {
            key: key(c.kind, c.name),
            value: c.value,
        },
        store::Op::Update(u) => Op::Update {
            key: key(u.kind, u.name),
            expected_version: u.expected_version,
            value: u.value,
        },
        store::Op::Delete(d) => Op::Delete {
            key: key(d.kind, d.name),
            expected_version: d.expected_version,
        },
    }
}

impl store::Host for StoreHost {
    async fn get(
        &mut self,
        kind: String,
        name: String,
    ) -> Result<Option<types::Object>, store::StoreError> {
        self.get_object(key(kind, name))
            .await
            .map(|object| object.map(wit_object))
            .map_err(wit_error)
    }

    async fn list(
        &mut self,
        kind: String,
        after: Option<String>,
        limit: u32,
    ) -> Result<store::ObjectPage, store::StoreError> {
        let page = self
            .list_objects(kind, after, limit)
            .await
            .map_err(wit_error)?;
        Ok(store::ObjectPage {
            objects: page.objects.into_iter().map(wit_object).collect(),
            next: page.next,
        })
    }

    async fn commit(
        &mut self,
        ops: Vec<store::Op>,
        events: Vec<store::NewEvent>,
    ) -> Result<store::Committed, store::StoreError> {
        let ops = ops.into_iter().map(op).collect();
        let events = events.into_iter().map(event).collect();
        let committed = self.commit_ops(ops, events).await.map_err(wit_error)?;
        Ok(store::Committed {
            revision: committed.revision,
            event_seqs: committed.event_seqs,
        })
    }
}
