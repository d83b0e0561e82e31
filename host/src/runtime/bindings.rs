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
});

pub use exports::leasehold::controller::reconciler;
pub use leasehold::controller::{logging, store, tenure, types};
