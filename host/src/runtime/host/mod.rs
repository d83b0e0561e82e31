//! Implementations of the WIT imports, one file per interface. Each owns
//! its slice of the guest's host state and sees nothing else of it.

pub mod http;
pub mod logging;
pub mod store;
pub mod tenure;
