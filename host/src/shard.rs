//! Sharded controllers: `shards = N` on a `[[controllers]]` entry runs the
//! controller as N leases `NAME-0 … NAME-(N-1)`, each its own supervised
//! unit with its own epoch, tenure history, guest instance, work queue and
//! settled position.
//!
//! Owns: which shard an object belongs to ([`Shard::of`],
//! [`Shard::of_label`], [`Sharding::shard_of`]), the lease name of a shard
//! ([`Shard::lease_name`]), and the rule for a shard's writes to another
//! shard's objects ([`Sharding::check_write`]).
//!
//! The rule an object's shard follows is part of the contract (ARCHITECTURE
//! "Sharded controllers", and the WIT's `tenure.shard`): FNV-1a 64 of the
//! UTF-8 bytes of `kind/name`, modulo the shard count; or, when the guest
//! declared a shard label (`description.shard-label`, 0.3.0) and the object
//! carries it, FNV-1a 64 of the label's value. It must never change for a
//! given count: every host of a cluster must agree on it, and a change
//! would hand objects to another shard while the old one still runs.

use std::collections::BTreeMap;
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

    /// The index of the shard an object whose shard label has `value`
    /// belongs to among `count` shards: FNV-1a 64 of `value`, modulo
    /// `count`.
    pub fn of_label(value: &str, count: u32) -> u32 {
        (fnv1a64(value.as_bytes()) % u64::from(count.max(1))) as u32
    }

    /// Whether `key` belongs to this shard by its `kind/name` (no shard
    /// label).
    pub fn owns(&self, key: &ObjectKey) -> bool {
        Self::of(&key.kind, &key.name, self.count) == self.index
    }

    /// The shard an unsharded controller runs: shard 0 of 1, which owns
    /// every object.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// The lease (and controller unit) name of shard `index` of the
    /// controller `controller`: `controller-index`.
    pub fn lease_name(controller: &str, index: u32) -> String {
        format!("{controller}-{index}")
    }

    /// Every shard of a controller run as `count` shards, in index order.
    pub fn all(count: u32) -> impl Iterator<Item = Shard> {
        (0..count).map(move |index| Shard { index, count })
    }
}

/// How a shard of a controller decides what is its own: its [`Shard`],
/// and what the guest's `describe` said (0.3.0): the label whose value
/// decides an object's shard, and the kinds every shard watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharding {
    /// This unit's shard.
    pub shard: Shard,
    /// `description.shard-label`: an object carrying it belongs to the
    /// shard of the label's value.
    pub label: Option<String>,
    /// `description.every-shard`: kinds whose every object every shard
    /// watches.
    pub every_shard: Vec<String>,
}

impl Sharding {
    /// Shard `shard`, by `kind/name` only, no kind shared.
    pub fn by_name(shard: Shard) -> Self {
        Self {
            shard,
            label: None,
            every_shard: Vec::new(),
        }
    }

    /// The index of the shard the object `key` with `labels` belongs to.
    pub fn shard_of(&self, key: &ObjectKey, labels: &BTreeMap<String, String>) -> u32 {
        match self.label.as_ref().and_then(|label| labels.get(label)) {
            Some(value) => Shard::of_label(value, self.shard.count),
            None => Shard::of(&key.kind, &key.name, self.shard.count),
        }
    }

    /// Whether this shard watches the object `key` with `labels`: its own
    /// objects, and every object of an every-shard kind.
    pub fn watches(&self, key: &ObjectKey, labels: &BTreeMap<String, String>) -> bool {
        self.shard.count <= 1
            || self.every_shard.contains(&key.kind)
            || self.shard_of(key, labels) == self.shard.index
    }

    /// Whether a key whose labels only a read can tell needs that read:
    /// with a shard label on a sharded controller, an object's labels
    /// decide; else its `kind/name` does.
    pub fn needs_labels(&self, key: &ObjectKey) -> bool {
        self.shard.count > 1 && self.label.is_some() && !self.every_shard.contains(&key.kind)
    }

    /// The rule for a shard's writes: an operation on an object of another
    /// shard must be conditional, so that it can never overwrite what that
    /// shard's own tenure wrote unseen. Every operation is, but a status
    /// write without an expected generation: that one is refused for
    /// another shard's object. Under a shard label every such write is
    /// refused, since the object's labels (which the op does not carry)
    /// decide its shard. `Err` names the object and its shard.
    pub fn check_write(&self, op: &Op) -> Result<(), String> {
        let Op::Status {
            key,
            expected_generation: None,
            ..
        } = op
        else {
            return Ok(());
        };
        let count = self.shard.count;
        if count <= 1 {
            return Ok(());
        }
        if let Some(label) = &self.label {
            return Err(format!(
                "{}/{}: this controller's objects are sharded by the label {label}, which the \
                 op does not carry, so this {} cannot tell whose it is: a status write of a \
                 controller sharded by a label must be conditional (give it an expected \
                 generation)",
                key.kind, key.name, self.shard
            ));
        }
        if self.shard.owns(key) {
            return Ok(());
        }
        Err(format!(
            "{}/{} belongs to shard {} of {count}, not to this {}: a write to another shard's \
             object must be conditional (give the status write an expected generation)",
            key.kind,
            key.name,
            Shard::of(&key.kind, &key.name, count),
            self.shard
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
        let shard = Sharding::by_name(Shard { index: 0, count: 4 });
        let mine = key("tasks", "t-1");
        let theirs = key("tasks", "t-2");
        assert!(shard.shard.owns(&mine) && !shard.shard.owns(&theirs));
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

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Under a shard label, an object carrying the label goes by the
    /// label's value (so objects that share it share a shard), one without
    /// it by its kind/name; an every-shard kind is watched by every shard.
    #[test]
    fn a_shard_label_and_every_shard_kinds_decide_what_a_shard_watches() {
        // FNV-1a 64 of "foobar" is 0x85944171f73967e8: shard 0 of 4 (its
        // low bits are ...e8, and 0xe8 % 4 == 0); of 3, 0x85944171f73967e8 % 3.
        let expected = (0x8594_4171_f739_67e8u64 % 3) as u32;
        assert_eq!(Shard::of_label("foobar", 4), 0);
        assert_eq!(Shard::of_label("foobar", 3), expected);
        let tenant = labels(&[("example.com/tenant", "foobar")]);
        let sharding = |index| Sharding {
            shard: Shard { index, count: 4 },
            label: Some("example.com/tenant".into()),
            every_shard: vec!["nodes".into()],
        };
        for name in ["t-1", "t-2", "t-3", "t-4"] {
            let task = key("tasks", name);
            assert_eq!(sharding(0).shard_of(&task, &tenant), 0, "{name}");
            assert!(sharding(0).watches(&task, &tenant));
            assert!(!sharding(1).watches(&task, &tenant));
            // Without the label: by kind/name, as an unlabelled shard does.
            let by_name = Shard::of("tasks", name, 4);
            assert_eq!(sharding(0).shard_of(&task, &BTreeMap::new()), by_name);
            assert_eq!(
                Sharding::by_name(Shard { index: 0, count: 4 }).shard_of(&task, &tenant),
                by_name,
                "no shard label: the label is just a label"
            );
        }
        let node = key("nodes", "n-1");
        assert!((0..4).all(|i| sharding(i).watches(&node, &BTreeMap::new())));
        assert!(!sharding(0).needs_labels(&node));
        assert!(sharding(0).needs_labels(&key("tasks", "t-1")));
        let whole = Sharding::by_name(Shard::WHOLE);
        assert!(whole.watches(&key("tasks", "t-2"), &BTreeMap::new()));
        assert!(!whole.needs_labels(&key("tasks", "t-2")));
    }

    /// Under a shard label, a status write without an expected generation
    /// is refused whatever object it names (the label is the object's,
    /// not the op's); a conditional one passes; an unsharded controller
    /// may write blind.
    #[test]
    fn under_a_shard_label_every_blind_status_write_is_refused() {
        let sharding = Sharding {
            shard: Shard { index: 0, count: 2 },
            label: Some("example.com/tenant".into()),
            every_shard: Vec::new(),
        };
        let status = |generation| Op::Status {
            key: key("tasks", "t-1"),
            expected_generation: generation,
            status: None,
        };
        let refused = sharding.check_write(&status(None)).unwrap_err();
        assert!(
            refused.contains("tasks/t-1") && refused.contains("example.com/tenant"),
            "{refused}"
        );
        assert_eq!(sharding.check_write(&status(Some(1))), Ok(()));
        let single = Sharding {
            shard: Shard::WHOLE,
            ..sharding
        };
        assert_eq!(single.check_write(&status(None)), Ok(()));
    }
}
