//! The fence of the tenure this guest runs in.

use std::fmt;

use crate::sys;

/// The fence every write of this guest is stamped with: the lease, its
/// epoch and the replica holding it. Read-only: the host owns it.
///
/// `epoch` strictly increases with each new tenure of the lease, which
/// makes it the natural ingredient of idempotency keys for anything a
/// controller does outside the store (see [`Fence::idempotency_key`]).
///
/// # Example
///
/// ```
/// use leasehold_guest::FakeHost;
///
/// let host = FakeHost::new();
/// let fence = leasehold_guest::fence();
/// assert_eq!(fence, host.fence());
/// assert_eq!(fence.epoch, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The cluster the lease belongs to.
    pub cluster: String,
    /// The lease name (the controller's name).
    pub lease: String,
    /// The fencing epoch of this tenure.
    pub epoch: u64,
    /// The replica holding the lease.
    pub holder: String,
}

impl Fence {
    /// A key naming one action of this tenure, `cluster/lease/epoch/action`,
    /// for external systems that deduplicate requests. Two tenures never
    /// produce the same key, and a retry inside one tenure produces the same
    /// key again.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::Fence;
    ///
    /// let fence = Fence {
    ///     cluster: "prod".into(),
    ///     lease: "scheduler".into(),
    ///     epoch: 7,
    ///     holder: "replica-a".into(),
    /// };
    /// assert_eq!(fence.idempotency_key("notify-t1"), "prod/scheduler/7/notify-t1");
    /// ```
    pub fn idempotency_key(&self, action: &str) -> String {
        format!("{}/{}/{}/{action}", self.cluster, self.lease, self.epoch)
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease {}/{} epoch {} holder {}",
            self.cluster, self.lease, self.epoch, self.holder
        )
    }
}

/// The current fence, read from the host.
///
/// # Example
///
/// ```
/// use leasehold_guest::FakeHost;
///
/// let host = FakeHost::new();
/// host.new_tenure();
/// assert_eq!(leasehold_guest::fence().epoch, 2);
/// ```
pub fn fence() -> Fence {
    sys::fence()
}
