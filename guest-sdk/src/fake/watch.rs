//! The fake's change stream and the host's mapping of it to the keys a
//! controller is woken for: every object write (a commit's, a seed's, a
//! removal's) is one [`Change`], recording the object's owner and labels
//! after it and, when an update changed them, before it, as the host's
//! change stream does; [`wakes`] maps changes through a [`Description`]
//! as the host's worker does (watched kinds as [`Reason::Change`], related
//! kinds through their [`Map`] as [`Reason::Related`], one entry per key
//! with the strongest reason, in first-woken order), and, for a shard of
//! a sharded controller, only the keys that shard watches
//! ([`ShardView`], as the host's `Sharding` decides).

use std::collections::BTreeMap;

use crate::controller::{Description, Map, Reason};
use crate::fence::Shard;
use crate::object::{Metadata, ObjectKey};

/// What a write did to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// The object was created.
    Created,
    /// It was rewritten: value, metadata, status, or a deletion mark.
    Updated,
    /// It was removed.
    Deleted,
}

/// An object's owner and labels, as a [`Change`] records them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Relations {
    /// The owning object, if any.
    pub owner: Option<ObjectKey>,
    /// The labels, by key.
    pub labels: BTreeMap<String, String>,
}

impl Relations {
    fn of(meta: &Metadata) -> Self {
        Self {
            owner: meta.owner.clone(),
            labels: meta.labels.clone(),
        }
    }
}

/// One write of one object, as the host's change stream records it.
///
/// # Example
///
/// ```
/// use leasehold_guest::{ChangeKind, FakeHost, Metadata, ObjectKey};
///
/// let host = FakeHost::new();
/// host.seed("tasks", "t1", &1);
/// host.seed_with("pods", "p", &1, &Metadata::new().owner(ObjectKey::new("tasks", "t1")));
/// let last = host.changes().pop().unwrap();
/// assert_eq!((last.key.to_string(), last.kind), ("pods/p".to_string(), ChangeKind::Created));
/// assert_eq!(last.relations.owner, Some(ObjectKey::new("tasks", "t1")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The change's position in the fake's one series of numbers, as the
    /// host's change stream gives it: after its commit's revision, unique
    /// and increasing, with gaps (the revision, the commit's other changes
    /// and its events take numbers of the same series).
    pub position: u64,
    /// The revision of the write (shared by every change of one commit).
    pub revision: u64,
    /// The object written.
    pub key: ObjectKey,
    /// What the write did to it.
    pub kind: ChangeKind,
    /// Its owner and labels after the write; for a delete, those it had.
    pub relations: Relations,
    /// Its owner and labels before the write, only when an update changed
    /// either.
    pub previous: Option<Relations>,
}

impl Change {
    /// The change a write of `key` from `before` (absent: a create) to
    /// `after` (absent: a removal) makes.
    pub(super) fn of(
        position: u64,
        revision: u64,
        key: &ObjectKey,
        before: Option<&Metadata>,
        after: Option<&Metadata>,
    ) -> Self {
        let (kind, relations, previous) = match (before, after) {
            (None, after) => (
                ChangeKind::Created,
                after.map(Relations::of).unwrap_or_default(),
                None,
            ),
            (Some(before), None) => (ChangeKind::Deleted, Relations::of(before), None),
            (Some(before), Some(after)) => {
                let (now, then) = (Relations::of(after), Relations::of(before));
                let previous = (now != then).then_some(then);
                (ChangeKind::Updated, now, previous)
            }
        };
        Self {
            position,
            revision,
            key: key.clone(),
            kind,
            relations,
            previous,
        }
    }
}

/// Whether `name` is an object name (a DNS label), as a label's value
/// must be to name an object.
fn is_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// The keys `map` sends `relations` to (after, then before), each once.
fn mapped(map: &Map, relations: &[&Relations]) -> Vec<ObjectKey> {
    let mut keys: Vec<ObjectKey> = Vec::new();
    for relations in relations {
        let key = match map {
            Map::Owner { kind } => relations
                .owner
                .clone()
                .filter(|owner| kind.as_ref().is_none_or(|kind| *kind == owner.kind)),
            Map::Label { key, target_kind } => relations
                .labels
                .get(key)
                .filter(|value| is_name(value))
                .map(|value| ObjectKey::new(target_kind.clone(), value.clone())),
        };
        if let Some(key) = key
            && !keys.contains(&key)
        {
            keys.push(key);
        }
    }
    keys
}

/// What a shard of a sharded controller watches, as the host decides it:
/// its own objects (by the shard label's value when the object carries it,
/// else by `kind/name`) and every object of the every-shard kinds.
pub(super) struct ShardView<'a> {
    pub shard: Shard,
    pub description: &'a Description,
}

impl ShardView<'_> {
    /// Whether this shard watches the object `key` with `labels`.
    pub fn watches(&self, key: &ObjectKey, labels: &BTreeMap<String, String>) -> bool {
        self.shard.count <= 1
            || self.description.every_shard.contains(&key.kind)
            || self.shard.owns(
                &key.kind,
                &key.name,
                labels,
                self.description.shard_label.as_deref(),
            )
    }
}

/// The keys the host queues for `changes` given `description`, one entry
/// per key with the strongest reason, in the order first queued, for the
/// shard `view` runs: a changed object by its labels after the change or
/// before it, a related key by its target's labels as stored now
/// (`labels_of`; none: by `kind/name`).
pub(super) fn wakes(
    view: &ShardView<'_>,
    changes: &[Change],
    labels_of: impl Fn(&ObjectKey) -> Option<BTreeMap<String, String>>,
) -> Vec<(ObjectKey, Reason)> {
    let description = view.description;
    let mut queued: Vec<(ObjectKey, Reason)> = Vec::new();
    let mut queue =
        |key: ObjectKey, reason: Reason| match queued.iter_mut().find(|(k, _)| *k == key) {
            Some((_, queued)) => *queued = queued.strongest(reason),
            None => queued.push((key, reason)),
        };
    for change in changes {
        let mut seen = vec![&change.relations];
        seen.extend(change.previous.as_ref());
        for related in description
            .related
            .iter()
            .filter(|r| r.kind == change.key.kind)
        {
            for key in mapped(&related.map, &seen) {
                if view.watches(&key, &labels_of(&key).unwrap_or_default()) {
                    queue(key, Reason::Related);
                }
            }
        }
        if description.watches.contains(&change.key.kind)
            && seen
                .iter()
                .any(|relations| view.watches(&change.key, &relations.labels))
        {
            queue(change.key.clone(), Reason::Change);
        }
    }
    queued
}

#[cfg(test)]
mod tests {
    use crate::controller::{Context, Controller, Description, Map, Outcome, Reason};
    use crate::error::{Error, StoreError};
    use crate::fake::FakeHost;
    use crate::fence::Shard;
    use crate::object::{Api, Metadata, ObjectKey};
    use crate::transaction::Transaction;

    /// Watches tasks, owns pods (owners of kind `tasks` only), and maps
    /// `leases` through the label `example.com/task`.
    struct Owner;

    impl Controller for Owner {
        fn describe(&self) -> Description {
            Description::new()
                .watch("tasks")
                .watch_related("pods", Map::owner_of_kind("tasks"))
                .watch_related("leases", Map::label("example.com/task", "tasks"))
        }

        fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
            Ok(Outcome::Done)
        }
    }

    fn woken(host: &FakeHost) -> Vec<(String, Reason)> {
        host.reconcile_changes(&Owner)
            .into_iter()
            .map(|(key, reason, _)| (key.to_string(), reason))
            .collect()
    }

    fn task(name: &str) -> ObjectKey {
        ObjectKey::new("tasks", name)
    }

    /// A guest's commits wake an owned object's owner on create, update
    /// and delete; a moved owner wakes both; an owner of another kind
    /// wakes nothing; garbage collection's deletes wake the owner too.
    #[test]
    fn owned_objects_wake_their_owner_through_every_write() {
        let host = FakeHost::new();
        host.seed("tasks", "a", &1);
        host.seed("tasks", "b", &1);
        host.seed("nodes", "n", &1);
        woken(&host);
        let related = Reason::Related;
        let pods = Api::<u32>::new("pods");

        Transaction::new()
            .create_with("pods", "p", &1, &Metadata::new().owner(task("a")))
            .commit()
            .unwrap();
        assert_eq!(woken(&host), [("tasks/a".into(), related)]);

        let p = pods.get("p").unwrap().unwrap();
        Transaction::new().update(&p, &2).commit().unwrap();
        assert_eq!(woken(&host), [("tasks/a".into(), related)]);

        let p = pods.get("p").unwrap().unwrap();
        Transaction::new()
            .set_metadata(&p, &Metadata::new().owner(task("b")))
            .commit()
            .unwrap();
        assert_eq!(
            woken(&host),
            [("tasks/b".into(), related), ("tasks/a".into(), related)]
        );

        let p = pods.get("p").unwrap().unwrap();
        Transaction::new().delete(&p).commit().unwrap();
        assert_eq!(woken(&host), [("tasks/b".into(), related)]);

        host.seed_with(
            "pods",
            "q",
            &1,
            &Metadata::new().owner(ObjectKey::new("nodes", "n")),
        );
        assert_eq!(woken(&host), []);

        // Deleting the task collects its pod: the task's own change wins.
        host.seed_with("pods", "r", &1, &Metadata::new().owner(task("a")));
        woken(&host);
        host.remove("tasks", "a");
        assert_eq!(woken(&host), [("tasks/a".into(), Reason::Change)]);
        assert!(host.object::<u32>("pods", "r").is_none());
    }

    /// A label moving from V1 to V2 wakes both; a delete wakes the one it
    /// named; a value that is no object name wakes nothing.
    #[test]
    fn a_label_wakes_the_object_it_names_before_and_after() {
        let host = FakeHost::new();
        let related = Reason::Related;
        let label = |v: &str| Metadata::new().label("example.com/task", v);
        host.seed_with("leases", "l", &1, &label("v1"));
        assert_eq!(woken(&host), [("tasks/v1".into(), related)]);
        host.seed_with("leases", "l", &1, &label("v2"));
        assert_eq!(
            woken(&host),
            [("tasks/v2".into(), related), ("tasks/v1".into(), related)]
        );
        host.seed_with("leases", "l", &1, &label("v2").label("team", "db"));
        assert_eq!(woken(&host), [("tasks/v2".into(), related)]);
        host.remove("leases", "l");
        assert_eq!(woken(&host), [("tasks/v2".into(), related)]);
        host.seed_with("leases", "m", &1, &label("Not_A.Name"));
        assert_eq!(woken(&host), []);
        assert!(host.wakes(&Owner).is_empty(), "every change was delivered");
    }

    /// Shards tasks by a tenant label, watches nodes on every shard, and
    /// owns pods.
    struct Tenants;

    impl Controller for Tenants {
        fn describe(&self) -> Description {
            Description::watching(["tasks"])
                .owns("pods")
                .watch_on_every_shard("nodes")
                .shard_by_label(TENANT)
        }

        fn reconcile(&self, _: &Context, _: &str, _: &str) -> Result<Outcome, Error> {
            Ok(Outcome::Done)
        }
    }

    const TENANT: &str = "example.com/tenant";

    /// A tenant value whose shard (of 2) is `index`.
    fn tenant_in(index: u32) -> String {
        (0..100)
            .map(|i| format!("tenant-{i}"))
            .find(|v| Shard::of_label(v, 2) == index)
            .expect("a value in each shard")
    }

    /// As shard 0 of 2, the fake wakes and resyncs only what the host's
    /// shard would: tasks by their tenant label (or by name without one),
    /// every node, and a pod's owner by the owner's label; and it refuses
    /// every blind status write under the shard label, as the host does.
    #[test]
    fn a_shard_is_woken_for_and_resyncs_what_the_host_gives_it() {
        let host = FakeHost::new();
        host.set_shard(Shard { index: 0, count: 2 });
        let (ours, theirs) = (tenant_in(0), tenant_in(1));
        host.seed_with("tasks", "a", &1, &Metadata::new().label(TENANT, &ours));
        host.seed_with("tasks", "b", &1, &Metadata::new().label(TENANT, &theirs));
        let plain = (0..100)
            .map(|i| format!("plain-{i}"))
            .find(|n| Shard::of_key("tasks", n, 2) == 0)
            .unwrap();
        host.seed("tasks", &plain, &1);
        host.seed("nodes", "n-1", &1);
        host.seed_with(
            "pods",
            "p",
            &1,
            &Metadata::new().owner(ObjectKey::new("tasks", "b")),
        );
        let woken: Vec<String> = host
            .wakes(&Tenants)
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(
            woken,
            ["tasks/a", format!("tasks/{plain}").as_str(), "nodes/n-1"]
        );
        host.reconcile_changes(&Tenants);
        let resynced: Vec<String> = host
            .resync(&Tenants)
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(
            resynced,
            [
                "tasks/a".to_string(),
                format!("tasks/{plain}"),
                "nodes/n-1".to_string()
            ]
        );
        let refused = Transaction::new()
            .write_status("tasks", "a", None, &"seen")
            .commit();
        assert!(
            matches!(&refused, Err(StoreError::Invalid(why)) if why.contains(TENANT)),
            "{refused:?}"
        );
        let task = Api::<u32>::new("tasks").get("a").unwrap().unwrap();
        Transaction::new()
            .update_status(&task, &"seen")
            .commit()
            .expect("a conditional status write passes");
    }
}
