//! The change stream's newest tail, read once for every long-polled
//! `GET /v1/changes` reader waiting at it.
//!
//! Readers that follow the stream with `wait` sit at its head: each commit
//! wakes all of them, and each used to read the store again for what
//! followed its cursor, the same positions for every one of them. With
//! hundreds of readers that was hundreds of database reads per commit,
//! competing with the writes themselves. The tail cache makes it one: the
//! first reader woken by a new feed position reads the store (every kind,
//! one page of the store's largest size, after the cache's last position)
//! and every other reader woken by the same position is answered from that
//! read, filtered by its kinds.
//!
//! What the cache answers is exactly what a read of the store would:
//!
//! - It holds one read: the changes the store returned after a cursor
//!   `from`, through the page's `through`. It answers a reader only when
//!   the reader's cursor lies in `from..=through`: every change after the
//!   cursor up to `through` is then in the read, in order, and nothing
//!   beyond what the store served. A reader elsewhere (behind `from`, or
//!   beyond `through`) is not answered: it reads the store, and gets the
//!   store's own answer, a 410 `too_old` included.
//! - The store accepted `from` in the read, so a cursor at or after it was
//!   not behind the store's retention floor then, and one at or before
//!   `through` was issued by it. A read that fails (a 410, the store
//!   unreachable) empties the cache, and the reader reads the store itself:
//!   the cache never decides a 410, or anything else, on its own.
//! - It is fresh for a feed position: a reader that saw the feed publish a
//!   position later than the one the read was made for reads again (one
//!   reader, the others waiting for it and then answered from it). Readers
//!   that have not seen a newer position are answered from the read they
//!   share; a change committed since is theirs when the feed publishes it,
//!   which wakes them, as it would have without the cache. A reader so
//!   answered gets what a read of its own made at the moment of the shared
//!   one would have given it: every change after its cursor, none skipped
//!   (had retention trimmed them since, it has them all the same).
//! - It belongs to the history it was read in. The cache subscribes to the
//!   store's feed before each read; when that channel closes (the feed
//!   found its database in another history: a failover, an adopted copy,
//!   see [`Store::watch`]), the positions read may be gone and the new
//!   history's may be lower, so the read is dropped and the next reader
//!   reads the store, which answers a cursor it never issued with its own
//!   410.
//!
//! Nothing here assumes where positions start or how far apart they are:
//! they are whatever the store handed out.
//!
//! Requests without `wait` read the store as before.

use tokio::sync::{Mutex, watch};

use super::changes::{ChangeView, ChangesPage, assemble};
use crate::limits::MAX_PAGE_SIZE;
use crate::store::{Change, Store};

/// The shared read of the stream's tail.
#[derive(Debug, Default)]
pub(super) struct TailCache {
    tail: Mutex<Tail>,
}

/// One read of the store, and the feed position it was made for.
#[derive(Debug, Default)]
struct Tail {
    /// Whether a read is held (none yet, or the last one failed).
    held: bool,
    /// The cursor the read was made after.
    from: u64,
    /// The page's `through`: every change in `from + 1..=through` is in
    /// `changes`.
    through: u64,
    /// The changes of every kind after `from`, in position order.
    changes: Vec<Change>,
    /// The feed position the readers that asked for the read had seen: a
    /// reader that has seen a later one needs a new read.
    fed: u64,
    /// The read filled the store's largest page: more may follow
    /// `through` without the feed moving again.
    full: bool,
    /// The store's feed, subscribed to before the read: closed when the
    /// history the read was made in ended.
    feed: Option<watch::Receiver<u64>>,
}

impl Tail {
    /// Whether the held read still belongs to the store's history.
    fn current(&self) -> bool {
        self.held
            && self
                .feed
                .as_ref()
                .is_some_and(|feed| feed.has_changed().is_ok())
    }
}

/// What the cache answered a reader.
#[derive(Debug)]
pub(super) struct Served {
    /// The page, as [`super::changes`] builds it from a store read.
    pub page: ChangesPage,
    /// The position the reader has read through.
    pub read_through: u64,
    /// More changes may already be there beyond `read_through` (the read
    /// filled a page): read on without waiting for the feed.
    pub more: bool,
}

/// How the cache came to answer: counted by tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// From a read made for an earlier reader.
    Shared,
    /// From a read this reader made.
    Read,
}

impl TailCache {
    /// The page after `after` of `kinds` (all when empty), at most `limit`
    /// changes, for a long-polled reader that has seen the feed publish
    /// `seen`; `None` when the cache cannot answer it exactly (the reader
    /// reads the store itself).
    pub async fn page(
        &self,
        store: &dyn Store,
        cluster: &str,
        seen: u64,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Option<Served> {
        self.page_counted(store, cluster, seen, kinds, after, limit)
            .await
            .map(|(served, _)| served)
    }

    async fn page_counted(
        &self,
        store: &dyn Store,
        cluster: &str,
        seen: u64,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Option<(Served, Source)> {
        let mut tail = self.tail.lock().await;
        if tail.held && !tail.current() {
            // Read in a history that ended: none of it is to be served.
            *tail = Tail::default();
        }
        let covered = tail.held && (tail.from..=tail.through).contains(&after);
        let fresh = tail.fed >= seen && !(tail.full && after == tail.through);
        let source = if covered && fresh {
            Source::Shared
        } else {
            // Read on from the held read when it covers the reader, so the
            // readers at the head move on together; otherwise from the
            // reader's own cursor.
            let from = if covered { tail.through } else { after };
            // Subscribed before the read: a history that ends after it
            // closes this channel.
            let feed = store.watch(cluster);
            match store.changes(cluster, &[], from, MAX_PAGE_SIZE).await {
                Ok(read) => {
                    *tail = Tail {
                        held: true,
                        from,
                        through: read.through,
                        full: read.changes.len() >= MAX_PAGE_SIZE,
                        changes: read.changes,
                        fed: seen.max(if covered { tail.fed } else { 0 }),
                        feed: Some(feed),
                    };
                }
                Err(_) => {
                    // The reader's own read gives it the store's answer.
                    *tail = Tail::default();
                    return None;
                }
            }
            if !(tail.from..=tail.through).contains(&after) {
                return None;
            }
            Source::Read
        };
        let mut items: Vec<ChangeView> = tail
            .changes
            .iter()
            .filter(|c| c.position > after && (kinds.is_empty() || kinds.contains(&c.kind)))
            .take(limit + 1)
            .cloned()
            .map(ChangeView::from)
            .collect();
        let more = items.len() > limit;
        items.truncate(limit);
        let (page, read_through) = assemble(items, tail.through, more, after);
        let more = more || tail.full;
        Some((
            Served {
                page,
                read_through,
                more,
            },
            source,
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::authority::memory::MemoryAuthority;
    use crate::fence::Fence;
    use crate::store::memory::MemoryStore;
    use crate::store::retention::Policy;
    use crate::store::{
        ChangePage, Committed, Event, NewEvent, Object, ObjectKey, Op, Page, StoreError,
    };

    /// A memory store whose change reads are counted and can be made to
    /// fail once, and whose feed is the test's: published by hand, and
    /// restarted (its former receivers closed) as the PostgreSQL feed's is
    /// when it finds its database in another history.
    struct Scripted {
        inner: MemoryStore,
        reads: AtomicUsize,
        fail_next: AtomicBool,
        feed: std::sync::Mutex<watch::Sender<u64>>,
    }

    impl Scripted {
        fn new() -> Self {
            Self {
                inner: MemoryStore::new(Arc::new(MemoryAuthority::new())),
                reads: AtomicUsize::new(0),
                fail_next: AtomicBool::new(false),
                feed: std::sync::Mutex::new(watch::channel(0).0),
            }
        }

        fn reads(&self) -> usize {
            self.reads.load(Ordering::SeqCst)
        }

        /// Write an object of `kind`; publish the store's new head, which
        /// is what a reader woken by the commit has seen.
        async fn write(&self, kind: &str, name: &str) -> u64 {
            let key = ObjectKey {
                kind: kind.into(),
                name: name.into(),
            };
            self.inner.put("c", &key, "{}", None).await.unwrap();
            let head = *self.inner.watch("c").borrow();
            self.feed.lock().unwrap().send_replace(head);
            head
        }

        /// The feed's history ends: every receiver handed out is closed.
        fn restart_feed(&self) {
            let head = *self.inner.watch("c").borrow();
            *self.feed.lock().unwrap() = watch::channel(head).0;
        }

        /// The positions a read of the store's own after `after` returns.
        async fn positions_after(&self, after: u64) -> Vec<u64> {
            let page = self
                .inner
                .changes("c", &[], after, MAX_PAGE_SIZE)
                .await
                .unwrap();
            page.changes.iter().map(|c| c.position).collect()
        }
    }

    #[async_trait]
    impl Store for Scripted {
        async fn get(&self, c: &str, k: &ObjectKey) -> Result<Option<Object>, StoreError> {
            self.inner.get(c, k).await
        }
        async fn list(
            &self,
            c: &str,
            kind: &str,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Page, StoreError> {
            self.inner.list(c, kind, after, limit).await
        }
        async fn commit_fenced(
            &self,
            f: &Fence,
            ops: &[Op],
            events: &[NewEvent],
        ) -> Result<Committed, StoreError> {
            self.inner.commit_fenced(f, ops, events).await
        }
        async fn put(
            &self,
            c: &str,
            k: &ObjectKey,
            v: &str,
            expected: Option<u64>,
        ) -> Result<Object, StoreError> {
            self.inner.put(c, k, v, expected).await
        }
        async fn delete(
            &self,
            c: &str,
            k: &ObjectKey,
            expected: Option<u64>,
        ) -> Result<(), StoreError> {
            self.inner.delete(c, k, expected).await
        }
        async fn events(
            &self,
            c: &str,
            after: u64,
            limit: usize,
        ) -> Result<Vec<Event>, StoreError> {
            self.inner.events(c, after, limit).await
        }
        async fn changes(
            &self,
            c: &str,
            kinds: &[String],
            after: u64,
            limit: usize,
        ) -> Result<ChangePage, StoreError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            if self.fail_next.swap(false, Ordering::SeqCst) {
                return Err(StoreError::Unavailable("the test's store is down".into()));
            }
            self.inner.changes(c, kinds, after, limit).await
        }
        fn watch(&self, _: &str) -> watch::Receiver<u64> {
            self.feed.lock().unwrap().subscribe()
        }
    }

    fn positions(served: &Served) -> Vec<u64> {
        served.page.items.iter().map(|c| c.position).collect()
    }

    /// The cache's answer to a reader at `after` that has seen `seen`,
    /// and whether it was shared (no store read for it).
    async fn ask(
        cache: &TailCache,
        store: &Scripted,
        seen: u64,
        kinds: &[String],
        after: u64,
        limit: usize,
    ) -> Option<(Served, Source)> {
        let before = store.reads();
        let answer = cache
            .page_counted(store, "c", seen, kinds, after, limit)
            .await;
        if let Some((_, Source::Shared)) = &answer {
            assert_eq!(store.reads(), before, "a shared answer reads nothing");
        }
        answer
    }

    #[tokio::test]
    async fn readers_at_the_head_share_one_read_per_feed_position() {
        let store = Scripted::new();
        let cache = TailCache::default();
        let head = *store.inner.watch("c").borrow();
        let seen = store.write("a", "x").await;
        let expected = store.positions_after(head).await;
        assert_eq!(expected.len(), 1);
        // The first reader reads; the next three at the same cursor share
        // its read: one store read for four readers.
        let (served, source) = ask(&cache, &store, seen, &[], head, 10).await.unwrap();
        assert_eq!(source, Source::Read);
        assert_eq!(positions(&served), expected);
        for _ in 0..3 {
            let (again, source) = ask(&cache, &store, seen, &[], head, 10).await.unwrap();
            assert_eq!(source, Source::Shared);
            assert_eq!(positions(&again), expected);
            assert_eq!(again.read_through, served.read_through);
        }
        assert_eq!(store.reads(), 1);
        // Filtered by kind from the same read.
        let (none, source) = ask(&cache, &store, seen, &["b".into()], head, 10)
            .await
            .unwrap();
        assert_eq!(source, Source::Shared);
        assert!(none.page.items.is_empty());
        // A reader that saw a later position makes the next read, which
        // moves on from the held one (one read), and the others at the
        // head share it.
        let later = store.write("b", "y").await;
        let expected_next = store.positions_after(served.read_through).await;
        let (next, source) = ask(&cache, &store, later, &[], served.read_through, 10)
            .await
            .unwrap();
        assert_eq!(source, Source::Read);
        assert_eq!(positions(&next), expected_next);
        assert_eq!(store.reads(), 2);
        let (again, source) = ask(&cache, &store, later, &[], served.read_through, 10)
            .await
            .unwrap();
        assert_eq!(source, Source::Shared);
        assert_eq!(positions(&again), expected_next);
        // The read before it is no longer the cache's: a reader still at
        // `head` gets a read of its own, with everything after its cursor.
        let (behind, source) = ask(&cache, &store, later, &[], head, 10).await.unwrap();
        assert_eq!(source, Source::Read);
        assert_eq!(positions(&behind), store.positions_after(head).await);
        assert_eq!(positions(&behind).len(), 2);
    }

    #[tokio::test]
    async fn a_limit_splits_the_shared_read_without_skipping() {
        let store = Scripted::new();
        let cache = TailCache::default();
        let start = *store.inner.watch("c").borrow();
        let mut seen = start;
        for n in 0..5 {
            seen = store.write("a", &format!("o{n}")).await;
        }
        let written = store.positions_after(start).await;
        assert_eq!(written.len(), 5);
        let mut after = start;
        let mut got = Vec::new();
        loop {
            let served = cache
                .page(&store, "c", seen, &[], after, 2)
                .await
                .expect("covered by the held read");
            got.extend(positions(&served));
            match served.page.next {
                Some(next) if !served.page.items.is_empty() => after = next,
                _ => break,
            }
        }
        assert_eq!(got, written);
        assert_eq!(store.reads(), 1, "five changes in pages of two, one read");
    }

    #[tokio::test]
    async fn only_a_cursor_within_the_held_read_is_answered_from_it() {
        let store = Scripted::new();
        let cache = TailCache::default();
        let mut seen = 0;
        for n in 0..3 {
            seen = store.write("a", &format!("o{n}")).await;
        }
        let all = store.positions_after(0).await;
        let (first, last) = (all[0], all[2]);
        // Held: the read after the first position, through the head.
        let (held, source) = ask(&cache, &store, seen, &[], first, 10).await.unwrap();
        assert_eq!(source, Source::Read);
        assert_eq!(positions(&held), &all[1..]);
        let through = held.read_through;
        assert!(through >= last);
        // At `from` and at `through`, both ends: answered from it.
        let (at_from, source) = ask(&cache, &store, seen, &[], first, 10).await.unwrap();
        assert_eq!(source, Source::Shared);
        assert_eq!(positions(&at_from), &all[1..]);
        let (at_through, source) = ask(&cache, &store, seen, &[], through, 10).await.unwrap();
        assert_eq!(source, Source::Shared);
        assert!(at_through.page.items.is_empty());
        assert_eq!(at_through.read_through, through);
        // Beyond `through`: not answered from the held read. The reader
        // gets the store's own answer (a store that checks its cursors
        // refuses one it never issued with a 410: then the cache has no
        // answer either).
        let beyond = ask(&cache, &store, seen, &[], through + 1, 10).await;
        match (beyond, store.inner.changes("c", &[], through + 1, 10).await) {
            (None, Err(StoreError::TooOld { .. })) => {}
            (Some((served, Source::Read)), Ok(own)) => {
                assert!(served.page.items.is_empty() && own.changes.is_empty());
            }
            (beyond, own) => panic!("beyond the held read: {beyond:?}, the store's: {own:?}"),
        }
        // Behind `from` (held again first): the store's read, which has
        // the first position the held one lacks.
        ask(&cache, &store, seen, &[], first, 10).await.unwrap();
        let reads = store.reads();
        let (behind, source) = ask(&cache, &store, seen, &[], first - 1, 10).await.unwrap();
        assert_eq!(source, Source::Read);
        assert_eq!(store.reads(), reads + 1);
        assert_eq!(positions(&behind), all);
        assert_eq!(positions(&behind), store.positions_after(first - 1).await);
    }

    #[tokio::test]
    async fn a_failed_read_is_never_the_caches_answer() {
        let store = Scripted::new();
        let cache = TailCache::default();
        let seen = store.write("a", "x").await;
        let (held, _) = ask(&cache, &store, seen, &[], 0, 10).await.unwrap();
        // The feed moves on; the read for it fails: no answer, nothing
        // held, and the reader's own read is the store's answer.
        let later = store.write("a", "y").await;
        store.fail_next.store(true, Ordering::SeqCst);
        assert!(
            ask(&cache, &store, later, &[], held.read_through, 10)
                .await
                .is_none()
        );
        assert!(!cache.tail.lock().await.held);
        // Not even a reader still at the earlier position is answered from
        // what the cache held before the failure.
        let (again, source) = ask(&cache, &store, seen, &[], 0, 10).await.unwrap();
        assert_eq!(source, Source::Read);
        assert_eq!(positions(&again), store.positions_after(0).await);
    }

    #[tokio::test]
    async fn a_cursor_the_store_refuses_is_the_stores_to_answer() {
        let store = Scripted::new();
        let cache = TailCache::default();
        let mut seen = 0;
        for n in 0..3 {
            seen = store.write("a", &format!("o{n}")).await;
        }
        // Trim everything: the floor rises above cursor 0.
        store
            .inner
            .trim(
                "c",
                &Policy {
                    event_retention: std::time::Duration::ZERO,
                    tenure_retention: 1,
                    batch: 1000,
                },
            )
            .await
            .unwrap();
        assert!(matches!(
            store.inner.changes("c", &[], 0, 10).await,
            Err(StoreError::TooOld { .. })
        ));
        assert!(cache.page(&store, "c", seen, &[], 0, 10).await.is_none());
        // Nothing is held after the refused read.
        assert!(!cache.tail.lock().await.held);
    }

    #[tokio::test]
    async fn a_read_from_a_history_that_ended_is_not_served() {
        let store = Scripted::new();
        let cache = TailCache::default();
        let seen = store.write("a", "x").await;
        let (_, source) = ask(&cache, &store, seen, &[], 0, 10).await.unwrap();
        assert_eq!(source, Source::Read);
        let (_, source) = ask(&cache, &store, seen, &[], 0, 10).await.unwrap();
        assert_eq!(source, Source::Shared);
        // The feed's database is in another history: a reader that has
        // seen nothing newer (the new history's values may be lower) still
        // reads the store.
        store.restart_feed();
        let (after_restart, source) = ask(&cache, &store, seen, &[], 0, 10).await.unwrap();
        assert_eq!(source, Source::Read);
        assert_eq!(positions(&after_restart), store.positions_after(0).await);
        // The new read is of the new history and is shared again.
        let (_, source) = ask(&cache, &store, seen, &[], 0, 10).await.unwrap();
        assert_eq!(source, Source::Shared);
    }
}
