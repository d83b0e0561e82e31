//! Host-side bindings generated from `wit/controller.wit`, the single
//! definition of the host/guest contract.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "controller",
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

pub use exports::leasehold::controller::reconciler;
pub use leasehold::controller::{logging, store, tenure, types};
