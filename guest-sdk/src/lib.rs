//! Leasehold guest SDK.
