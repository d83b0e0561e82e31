//! `leasehold:controller/tenure`: the fence, read-only.

use crate::fence::Fence;
use crate::runtime::bindings::tenure;

/// The tenure slice of a guest's host state.
pub struct TenureHost {
    fence: Fence,
}

impl TenureHost {
    /// The tenure of `fence`.
    pub fn new(fence: Fence) -> Self {
        Self { fence }
    }
}

impl tenure::Host for TenureHost {
    fn current(&mut self) -> wasmtime::Result<tenure::Fence> {
        // A copy: the guest can read its fence but never change the host's.
        Ok(tenure::Fence {
            cluster: self.fence.key.cluster.clone(),
            lease: self.fence.key.name.clone(),
            epoch: self.fence.epoch.0,
            holder: self.fence.holder.clone(),
        })
    }
}
