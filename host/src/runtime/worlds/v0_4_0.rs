//! `leasehold:controller@0.4.0`, the current world, generated from
//! `wit/controller.wit`: 0.3.0 plus the settings' schema `describe` may
//! give (`settings-schema`). Everything else is 0.3.0's text
//! ([`since_0_2`](super::since_0_2), `shard_tenure`).

use wasmtime::Store;
use wasmtime::component::Linker;

use super::{Answer, Described};
use crate::runtime::guest::{ReconcileReason, RelatedMap, RelatedWatch};
use crate::runtime::host::logging::{Level, LoggingHost};
use crate::runtime::host::settings::SettingsHost;
use crate::runtime::host::store::{CallError, StoreHost};
use crate::runtime::host::tenure::TenureHost;
use crate::runtime::state::{GuestState, LoggingView, SettingsView, StoreView, TenureView};
use crate::store::{Metadata, NewEvent, ObjectKey, Op, Selector};

wasmtime::component::bindgen!({
    path: "../wit",
    world: "leasehold:controller/controller@0.4.0",
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

use exports::leasehold::controller::reconciler;
use leasehold::controller::{logging, settings, store, tenure, types};

shared_conversions!();

since_0_2!(leasehold_controller_reconciler);

shard_tenure!();

pub(crate) async fn describe(
    bindings: &Controller,
    store: &mut Store<GuestState>,
) -> wasmtime::Result<Described> {
    let description = bindings
        .leasehold_controller_reconciler()
        .call_describe(store)
        .await?;
    Ok(Described {
        watches: description.watches,
        resync_period_ms: description.resync_period_ms,
        related: description.related.into_iter().map(related_watch).collect(),
        shard_label: description.shard_label,
        every_shard: description.every_shard,
        settings_schema: description.settings_schema,
    })
}
