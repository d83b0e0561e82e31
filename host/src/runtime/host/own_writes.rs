//! What this guest instance's own commits wrote, so that a `store.get` of
//! an object whose newest change the worker has read is one of those
//! commits is answered without a database read.
//!
//! # The rule
//!
//! After a commit of this instance lands, the store hands back every object
//! the commit wrote, as the commit left it (created, rewritten or marked
//! for deletion, or removed; what garbage collection deleted included:
//! [`crate::store::Committed::written`]), and each is kept here under the
//! commit's revision, *unconfirmed*. The worker tells this cache about
//! every change it reads from the change feed ([`OwnWrites::observe`]):
//! the change that very commit made confirms the key's entry; any other,
//! later change of the key (by anyone) drops it. A `get` is answered from
//! an entry only while it is confirmed ([`OwnWrites::answer`]): the newest
//! change of the key the worker has read is this instance's commit, so the
//! answer is exactly what a read of the store at the feed's position would
//! give. Everything else goes to the database as before: a key never
//! written here, an entry not yet confirmed (the worker has not read its
//! change) or dropped, every list.
//!
//! So a read answered here is as fresh as the change feed this reconcile
//! was woken by, not fresher: a change committed after the feed's position
//! is not in it, and it wakes the controller again once the worker reads
//! it. A read answered by the database is at least as fresh. Writes are
//! unaffected: a conditional write built on an answer that is no longer
//! current is refused (`conflict`) by the store as always, and the failed
//! commit drops the entries of the keys it named, so the re-read after it
//! goes to the database.
//!
//! What keeps an answer from going back in time: a database read (a `get`
//! or a list) that returns an object at another version than its entry
//! drops the entry ([`OwnWrites::read`]), so a `get` never answers an older
//! version of an object than a read of this instance already returned.
//!
//! What drops entries besides: a commit that fails with `unavailable`
//! (whether it landed is unknown, and what it would have written, owned
//! objects included, is not known here) empties the cache; a commit refused
//! otherwise (nothing written) drops the keys it named; a feed read that
//! found changes trimmed by retention empties it (the changes it missed may
//! have been newer); and the cache is bounded
//! ([`crate::limits::OWN_WRITES_CACHED`] objects, the oldest commit's
//! entries dropped first).
//!
//! It lives in the host state of one guest instance and is dropped with it:
//! nothing of it outlives the instance, let alone the tenure (G1).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use crate::limits::OWN_WRITES_CACHED;
use crate::store::{Object, ObjectKey};

/// The objects this instance's commits wrote (see the module
/// documentation). Shared by the instance's store host calls, which fill
/// and read it, and its worker, which confirms it from the change feed.
#[derive(Debug)]
pub struct OwnWrites {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    entries: HashMap<ObjectKey, Entry>,
    /// Keys in the order their entries were recorded, each with the
    /// revision it was recorded for: a slot whose key has since been
    /// recorded again (or dropped) is stale and skipped.
    order: VecDeque<(u64, ObjectKey)>,
    /// Keys written since the worker last took them
    /// ([`OwnWrites::take_written`]); at most `capacity`.
    recent: Vec<ObjectKey>,
    capacity: usize,
}

#[derive(Debug)]
struct Entry {
    /// The revision of the commit that wrote it.
    revision: u64,
    /// The object as that commit left it; `None`: removed.
    object: Option<Object>,
    /// Whether the newest change of the key the worker has read is this
    /// commit's.
    confirmed: bool,
}

impl Default for OwnWrites {
    fn default() -> Self {
        Self::with_capacity(OWN_WRITES_CACHED)
    }
}

impl OwnWrites {
    /// An empty cache keeping at most `capacity` objects.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                order: VecDeque::new(),
                recent: Vec::new(),
                capacity: capacity.max(1),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing here panics while the lock is held; a poisoned lock still
        // holds consistent entries.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A commit at `revision` landed and wrote `written` (each object as it
    /// left it; `None`: removed): keep each, unconfirmed.
    pub fn record(&self, revision: u64, written: Vec<(ObjectKey, Option<Object>)>) {
        let mut inner = self.lock();
        for (key, object) in written {
            if inner.recent.len() < inner.capacity {
                inner.recent.push(key.clone());
            }
            inner.order.push_back((revision, key.clone()));
            inner.entries.insert(
                key,
                Entry {
                    revision,
                    object,
                    confirmed: false,
                },
            );
        }
        inner.bound();
    }

    /// The keys this instance's commits wrote since the last call, in the
    /// order written (at most the cache's capacity of them; the rest are
    /// left out, which only costs the worker a reconcile run sooner than
    /// needed): the worker makes those it has queued wait as echoes, since
    /// their newest change is now this tenure's own.
    pub fn take_written(&self) -> Vec<ObjectKey> {
        std::mem::take(&mut self.lock().recent)
    }

    /// The worker read a change of `key` made by the commit at `revision`.
    pub fn observe(&self, key: &ObjectKey, revision: u64) {
        let mut inner = self.lock();
        let Some(entry) = inner.entries.get_mut(key) else {
            return;
        };
        if entry.revision == revision {
            entry.confirmed = true;
        } else if revision > entry.revision {
            // Someone wrote the key after this instance did.
            inner.entries.remove(key);
        } else {
            // An earlier change, read before this commit's own: the entry
            // waits for it. (Changes of one key are read in commit order,
            // so none comes after the commit's own.)
            entry.confirmed = false;
        }
    }

    /// The answer to a `get` of `key` without the database, if the newest
    /// change of it the worker has read is this instance's own commit:
    /// `Some(None)` if that commit removed it.
    pub fn answer(&self, key: &ObjectKey) -> Option<Option<Object>> {
        let inner = self.lock();
        let entry = inner.entries.get(key)?;
        entry.confirmed.then(|| entry.object.clone())
    }

    /// A database read found `key` at `version` (0: absent): an entry for
    /// another version is no longer the newest, and is dropped.
    pub fn read(&self, key: &ObjectKey, version: u64) {
        let mut inner = self.lock();
        let stale = inner.entries.get(key).is_some_and(|entry| {
            let cached = entry.object.as_ref().map_or(0, |o| o.version);
            cached != version
        });
        if stale {
            inner.entries.remove(key);
        }
    }

    /// [`read`](Self::read) for each object of a listed page (an object
    /// not on the page says nothing: it may be on another).
    pub fn read_page(&self, objects: &[Object]) {
        let mut inner = self.lock();
        if inner.entries.is_empty() {
            return;
        }
        for object in objects {
            let key = object.key();
            if inner
                .entries
                .get(&key)
                .is_some_and(|e| e.object.as_ref().map_or(0, |o| o.version) != object.version)
            {
                inner.entries.remove(&key);
            }
        }
    }

    /// A commit naming `keys` was refused, nothing written: their entries
    /// go, so the re-read that follows asks the database.
    pub fn forget<'a>(&self, keys: impl IntoIterator<Item = &'a ObjectKey>) {
        let mut inner = self.lock();
        for key in keys {
            inner.entries.remove(key);
        }
    }

    /// Drop every entry: a commit's outcome is unknown, or the worker
    /// missed changes.
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.order.clear();
    }

    /// Objects kept.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// Drop the oldest entries beyond the capacity, and the stale slots
    /// once they outnumber the entries.
    fn bound(&mut self) {
        while self.entries.len() > self.capacity {
            let Some((revision, key)) = self.order.pop_front() else {
                break;
            };
            if self
                .entries
                .get(&key)
                .is_some_and(|e| e.revision == revision)
            {
                self.entries.remove(&key);
            }
        }
        if self.order.len() > 2 * self.capacity {
            let entries = &self.entries;
            self.order.retain(|(revision, key)| {
                entries.get(key).is_some_and(|e| e.revision == *revision)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Metadata;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            kind: "tasks".into(),
            name: name.into(),
        }
    }

    fn object(name: &str, version: u64, value: &str) -> Object {
        Object {
            kind: "tasks".into(),
            name: name.into(),
            version,
            value: value.into(),
            meta: Metadata::default(),
            generation: 1,
            status: None,
            deleting_since: None,
        }
    }

    /// An entry answers only once the worker has read the change its own
    /// commit made, and only while no later change of the key was read.
    #[test]
    fn an_entry_answers_only_while_its_commit_is_the_newest_change_read() {
        let cache = OwnWrites::default();
        let a = key("a");
        let written = object("a", 7, "{\"status\":\"assigned\"}");
        cache.record(7, vec![(a.clone(), Some(written.clone()))]);
        assert_eq!(cache.answer(&a), None, "not confirmed by the feed yet");
        // An earlier change of the key (the create the commit answered)
        // is read first: still not this commit's.
        cache.observe(&a, 5);
        assert_eq!(cache.answer(&a), None);
        cache.observe(&a, 7);
        assert_eq!(cache.answer(&a), Some(Some(written)));
        // Someone else's change after it: the database answers again.
        cache.observe(&a, 9);
        assert_eq!(cache.answer(&a), None);
        assert!(cache.is_empty());
        // A key never written here is never answered.
        cache.observe(&key("b"), 9);
        assert_eq!(cache.answer(&key("b")), None);
    }

    /// A removal is an answer too: the object is gone.
    #[test]
    fn a_removal_answers_none() {
        let cache = OwnWrites::default();
        let a = key("a");
        cache.record(8, vec![(a.clone(), None)]);
        cache.observe(&a, 8);
        assert_eq!(cache.answer(&a), Some(None));
    }

    /// A refused commit drops the keys it named; one whose outcome is
    /// unknown drops everything; a database read of another version drops
    /// the entry.
    #[test]
    fn failures_and_newer_reads_drop_entries() {
        let cache = OwnWrites::default();
        let (a, b, c) = (key("a"), key("b"), key("c"));
        cache.record(
            3,
            vec![
                (a.clone(), Some(object("a", 3, "1"))),
                (b.clone(), Some(object("b", 3, "1"))),
                (c.clone(), Some(object("c", 3, "1"))),
            ],
        );
        for k in [&a, &b, &c] {
            cache.observe(k, 3);
        }
        cache.forget([&a]);
        assert_eq!(cache.answer(&a), None);
        assert!(cache.answer(&b).is_some());
        cache.read(&b, 3);
        assert!(cache.answer(&b).is_some(), "the same version keeps it");
        cache.read(&b, 4);
        assert_eq!(cache.answer(&b), None, "a newer version read drops it");
        cache.read_page(&[object("c", 3, "1"), object("x", 9, "1")]);
        assert!(cache.answer(&c).is_some(), "listed at the same version");
        cache.read_page(&[object("c", 5, "1")]);
        assert_eq!(cache.answer(&c), None, "listed at a newer version");
        cache.record(6, vec![(c.clone(), Some(object("c", 6, "1")))]);
        cache.observe(&c, 6);
        assert!(cache.answer(&c).is_some());
        cache.clear();
        assert_eq!(cache.answer(&c), None);
    }

    /// The keys written since the worker last asked, each commit's in
    /// order.
    #[test]
    fn the_worker_takes_the_keys_written() {
        let cache = OwnWrites::default();
        cache.record(1, vec![(key("a"), None), (key("b"), None)]);
        cache.record(2, vec![(key("c"), None)]);
        assert_eq!(cache.take_written(), [key("a"), key("b"), key("c")]);
        assert!(cache.take_written().is_empty());
    }

    /// At most `capacity` objects are kept, the oldest commit's first.
    #[test]
    fn the_oldest_entries_go_first() {
        let cache = OwnWrites::with_capacity(2);
        for (revision, name) in [(1, "a"), (2, "b"), (3, "a"), (4, "c")] {
            cache.record(
                revision,
                vec![(key(name), Some(object(name, revision, "1")))],
            );
            cache.observe(&key(name), revision);
        }
        // b (revision 2) is the oldest entry: a was written again at 3.
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.answer(&key("b")), None);
        assert!(cache.answer(&key("a")).is_some());
        assert!(cache.answer(&key("c")).is_some());
        // Rewriting one key many times leaves the bookkeeping bounded.
        for revision in 5..100 {
            cache.record(revision, vec![(key("a"), Some(object("a", revision, "1")))]);
        }
        assert!(cache.lock().order.len() <= 4);
    }
}
