//! Implementations of the WIT imports, one file per interface. Each owns
//! its slice of the guest's host state and sees nothing else of it, and
//! holds the behaviour in the host's own types: each WIT version's bindings
//! (`runtime/worlds/`) only convert their types to and from these calls.

pub mod http;
pub mod logging;
pub mod own_writes;
mod send;
pub mod settings;
pub mod store;
pub mod tenure;
