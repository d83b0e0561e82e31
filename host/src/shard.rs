//! Sharded controllers: `shards = N` on a `[[controllers]]` entry runs the
//! controller as N leases `NAME-0 … NAME-(N-1)`, each its own supervised
//! unit with its own epoch, tenure history, guest instance, work queue and
//! settled position.
//!
//! Owns: which shard an object belongs to ([`Shard::of`]), the lease name
//! of a shard ([`Shard::lease_name`]), and the rule for a shard's writes to
//! another shard's objects ([`Shard::check_write`]).
//!
//! The rule an object's shard follows is part of the contract (ARCHITECTURE
//! "Sharded controllers"): FNV-1a 64 of the UTF-8 bytes of `kind/name`,
//! modulo the shard count. It must never change for a given count: every
//! host of a cluster must agree on it, and a change would hand objects to
//! another shard while the old one still runs.

use std::fmt;

use crate::store::{ObjectKey, Op};

/// Most shards a controller may run as.
pub const MAX_SHARDS: u32 = 64;

/// FNV-1a, 64 bits, of `bytes` (the offset basis and prime of the FNV
/// specification).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_of(bytes.iter().copied())
}

fn fnv1a64_of(bytes: impl Iterator<Item = u8>) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// One shard of a sharded controller: shard `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// This shard's index, below `count`.
    pub index: u32,
    /// How many shards the controller runs as (1 to [`MAX_SHARDS`]).
    pub count: u32,
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard {} of {}", self.index, self.count)
    }
}

impl Shard {
    /// The index of the shard that `kind/name` belongs to among `count`
    /// shards: FNV-1a 64 of `kind/name`, modulo `count`.
    pub fn of(kind: &str, name: &str, count: u32) -> u32 {
        let key = kind.bytes().chain([b'/']).chain(name.bytes());
        (fnv1a64_of(key) % u64::from(count.max(1))) as u32
    }

    /// Whether `key` belongs to this shard.
    pub fn owns(&self, key: &ObjectKey) -> bool {
        Self::of(&key.kind, &key.name, self.count) == self.index
    }

    /// The lease (and controller unit) name of shard `index` of the
    /// controller `controller`: `controller-index`.
    pub fn lease_name(controller: &str, index: u32) -> String {
        format!("{controller}-{index}")
    }

    /// Every shard of a controller run as `count` shards, in index order.
    pub fn all(count: u32) -> impl Iterator<Item = Shard> {
        (0..count).map(move |index| Shard { index, count })
    }

    /// The rule for a shard's writes: an operation on an object of another
    /// shard must be conditional, so that it can never overwrite what that
    /// shard's own tenure wrote unseen. Every operation is, but a status
    /// write without an expected generation: that one is refused for
    /// another shard's object. `Err` names the object and its shard.
    pub fn check_write(&self, op: &Op) -> Result<(), String> {
        let Op::Status {
            key,
            expected_generation: None,
            ..
        } = op
        else {
            return Ok(());
        };
        if self.owns(key) {
            return Ok(());
        }
        Err(format!(
            "{}/{} belongs to shard {} of {}, not to this {self}: a write to another shard's \
             object must be conditional (give the status write an expected generation)",
            key.kind,
            key.name,
            Self::of(&key.kind, &key.name, self.count),
            self.count
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn fnv1a64_matches_the_specifications_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    /// The documented vectors (ARCHITECTURE "Sharded controllers"): other
    /// implementations (the SDKs, a user's tooling) check against these.
    #[test]
    fn objects_fall_into_their_documented_shards() {
        assert_eq!(fnv1a64(b"tasks/t-1"), 0xd107_3a09_e6f4_64b0);
        assert_eq!(Shard::of("tasks", "t-1", 4), 0);
        assert_eq!(Shard::of("tasks", "t-1", 1), 0);
        assert_eq!(Shard::of("nodes", "n-1", 4), 1);
        assert_eq!(Shard::of("tasks", "t-2", 4), 1);
    }

    #[test]
    fn every_object_belongs_to_exactly_one_shard() {
        for count in [1, 2, 3, 4, 9, MAX_SHARDS] {
            let mut per_shard = vec![0u32; count as usize];
            for i in 0..2_000 {
                let k = key("tasks", &format!("t-{i}"));
                let owners: Vec<Shard> = Shard::all(count).filter(|s| s.owns(&k)).collect();
                assert_eq!(owners.len(), 1, "{k:?} among {count}");
                per_shard[owners[0].index as usize] += 1;
            }
            // Spread: no shard is empty or holds more than twice its share.
            let share = 2_000 / count;
            assert!(
                per_shard.iter().all(|&n| n > 0 && n <= 2 * share + 10),
                "{count} shards: {per_shard:?}"
            );
        }
    }

    #[test]
    fn lease_names_are_the_controller_and_the_index() {
        assert_eq!(Shard::lease_name("scheduler", 0), "scheduler-0");
        assert_eq!(Shard::lease_name("scheduler", 11), "scheduler-11");
        let names: Vec<String> = Shard::all(3)
            .map(|s| Shard::lease_name("a", s.index))
            .collect();
        assert_eq!(names, ["a-0", "a-1", "a-2"]);
    }

    #[test]
    fn only_a_blind_status_write_to_another_shards_object_is_refused() {
        let shard = Shard { index: 0, count: 4 };
        let mine = key("tasks", "t-1");
        let theirs = key("tasks", "t-2");
        assert!(shard.owns(&mine) && !shard.owns(&theirs));
        let blind = |key: &ObjectKey| Op::Status {
            key: key.clone(),
            expected_generation: None,
            status: None,
        };
        assert_eq!(shard.check_write(&blind(&mine)), Ok(()));
        let refused = shard.check_write(&blind(&theirs)).unwrap_err();
        assert!(
            refused.contains("tasks/t-2 belongs to shard 1 of 4")
                && refused.contains("this shard 0 of 4")
                && refused.contains("conditional"),
            "{refused}"
        );
        let conditional = [
            Op::Status {
                key: theirs.clone(),
                expected_generation: Some(3),
                status: None,
            },
            Op::Update {
                key: theirs.clone(),
                expected_version: 5,
                value: "{}".into(),
            },
            Op::Delete {
                key: theirs.clone(),
                expected_version: 5,
            },
            Op::Create {
                key: theirs.clone(),
                value: "{}".into(),
            },
            Op::Check {
                key: theirs.clone(),
                expected_version: 0,
            },
        ];
        for op in conditional {
            assert_eq!(shard.check_write(&op), Ok(()), "{op:?}");
        }
    }
}
