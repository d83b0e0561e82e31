//! `leasehold:controller/tenure`: the fence and the shard, read-only. Each
//! WIT version's bindings (`runtime/worlds/`) copy them into their own
//! records (the shard only from 0.3.0 on).

use crate::fence::Fence;
use crate::shard::Shard;

/// The tenure slice of a guest's host state.
pub struct TenureHost {
    fence: Fence,
    shard: Shard,
}

impl TenureHost {
    /// The tenure of `fence`, run as `shard` of its controller
    /// ([`Shard::WHOLE`] for an unsharded one).
    pub fn new(fence: Fence, shard: Shard) -> Self {
        Self { fence, shard }
    }

    /// The tenure's fence. The bindings hand the guest a copy: it can read
    /// its fence but never change the host's.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The shard this tenure runs.
    pub fn shard(&self) -> Shard {
        self.shard
    }
}
