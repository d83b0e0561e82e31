//! `leasehold:controller/tenure`: the fence, read-only. Each WIT version's
//! bindings (`runtime/worlds/`) copy it into their own record.

use crate::fence::Fence;

/// The tenure slice of a guest's host state.
pub struct TenureHost {
    fence: Fence,
}

impl TenureHost {
    /// The tenure of `fence`.
    pub fn new(fence: Fence) -> Self {
        Self { fence }
    }

    /// The tenure's fence. The bindings hand the guest a copy: it can read
    /// its fence but never change the host's.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }
}
