//! Syntax of the names users choose: clusters, leases (controllers),
//! holders, object kinds and object names.
//!
//! Kinds, object names, lease and cluster names are DNS labels: 1 to 63
//! characters of `a-z`, `0-9` and `-`, starting and ending with a letter or
//! a digit. Holders are freer (they often embed a host name and a process
//! id) but bounded. The rules are the model's
//! ([`leasehold_model::names`]), shared with the SDK's fake.

pub use leasehold_model::names::{
    MAX_HOLDER_LEN, MAX_LABEL_LEN, NameError, check_holder, check_label,
};
