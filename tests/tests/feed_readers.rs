//! The checker's feed rule against two readers of the same record, built
//! so that a commit is held open (its `COMMIT` held at a fault proxy) while
//! a later commit lands: the store's reader, bounded by the high-water
//! mark, is given both exactly once; a hand-written reader without the
//! mark goes past the held commit and never sees it, and the rule says so.

use std::time::Duration;

use leasehold_host::db::Database;
use leasehold_host::store::{ObjectKey, PostgresStore, Store};
use leasehold_host::testing::TestDatabase;
use leasehold_tests::faults::checker::{self, Rule};
use leasehold_tests::faults::reader::{FeedReader, NaiveReader};
use leasehold_tests::proxy::{AtCommit, FaultProxy};

const CLUSTER: &str = "feed";
const WAIT: Duration = Duration::from_secs(30);

fn key(name: &str) -> ObjectKey {
    ObjectKey {
        kind: "tasks".into(),
        name: name.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_rule_catches_a_reader_that_skips_a_held_commit() {
    let db = TestDatabase::create().await;
    let url = url::Url::parse(db.url()).expect("database url");
    let upstream = format!(
        "{}:{}",
        match url.host_str() {
            Some("localhost") | None => "127.0.0.1",
            Some(host) => host,
        },
        url.port().unwrap_or(5432)
    )
    .parse()
    .expect("database address");
    let proxy = FaultProxy::start(upstream).await;
    let held_store =
        PostgresStore::new(Database::new(&proxy.url_for(db.url()), 2).expect("proxied url"));
    let direct = PostgresStore::new(db.database(2));
    let reader = FeedReader::start(db.url(), CLUSTER, "the store's reader");
    let mut naive = NaiveReader::connect(db.url(), CLUSTER).await;

    // A put whose COMMIT the proxy holds: its positions are taken, its
    // transaction open.
    let struck = proxy.arm(AtCommit::Hold);
    let held = tokio::spawn(async move {
        let put = held_store.put(CLUSTER, &key("held"), "1", None).await;
        (put, held_store)
    });
    tokio::time::timeout(WAIT, struck)
        .await
        .expect("the proxy held the put's COMMIT")
        .expect("the proxy struck");
    // A later put lands, and both readers look while the first is held.
    let later = direct.put(CLUSTER, &key("later"), "1", None).await.unwrap();
    naive.read().await;
    assert_eq!(
        naive.record().delivered.len(),
        1,
        "the naive reader sees the later commit"
    );
    let (head, mark) = direct.high_water().await.unwrap();
    assert!(mark < later.version && later.version < head);
    proxy.release();
    let (held, _store) = tokio::time::timeout(WAIT, held)
        .await
        .expect("the held put ended")
        .unwrap();
    let held = held.expect("the held put committed");
    assert!(held.version < later.version);
    naive.read().await;

    let store_record = reader.finish(WAIT).await;
    let naive_record = naive.record();
    let store_found =
        checker::check_feed(db.url(), CLUSTER, std::slice::from_ref(&store_record)).await;
    assert!(store_found.is_empty(), "{store_found:#?}");
    assert_eq!(
        store_record.delivered.len(),
        4,
        "two changes and two events: {store_record:?}"
    );
    let naive_found = checker::check_feed(db.url(), CLUSTER, &[naive_record]).await;
    assert!(
        naive_found
            .iter()
            .any(|v| v.rule == Rule::Feed && v.detail.contains("skipped Changes")),
        "the naive reader's skip was not reported: {naive_found:#?}"
    );
}
