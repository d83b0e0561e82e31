//! The example scheduler's scenario through a guest component of any
//! language (the Python and JavaScript schedulers), on the component
//! harness: the helpers their tests share and the scenario they both
//! pass.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use leasehold_host::runtime::Reconciled;
use leasehold_host::store::{Event, Origin};
use serde_json::json;

use crate::harness::ComponentHarness;

const NODES: &str = "nodes";
const TASKS: &str = "tasks";
const ASSIGNED: &str = "Assigned";

/// Load `component`, saying how long it took (the first load in a process
/// compiles or reads the compilation cache; later ones only instantiate).
pub async fn load(component: &str) -> ComponentHarness {
    let started = Instant::now();
    let h = ComponentHarness::load(component).await;
    // Shown with --nocapture.
    eprintln!("{component}: loaded in {:?}", started.elapsed());
    h
}

/// The epoch each event was written at; panics on a user's event.
pub fn epochs(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .map(|e| match &e.origin {
            Origin::Guest { epoch, .. } => epoch.0,
            Origin::Api { .. } => panic!("written by a user, not a guest"),
        })
        .collect()
}

/// Tasks per node, counted from the tasks themselves.
pub async fn usage(h: &ComponentHarness) -> BTreeMap<String, u64> {
    let mut usage = BTreeMap::new();
    for (_, task) in h.values(TASKS).await {
        if task["status"] == "assigned" {
            let node = task["node"].as_str().expect("assigned tasks name a node");
            *usage.entry(node.to_string()).or_default() += 1;
        }
    }
    usage
}

/// The names of the pending tasks, in name order.
pub async fn pending_names(h: &ComponentHarness) -> Vec<String> {
    h.values(TASKS)
        .await
        .into_iter()
        .filter(|(_, t)| t["status"] == "pending")
        .map(|(name, _)| name)
        .collect()
}

/// The scheduler in `component` describes its watches and resync, places
/// four pending tasks on three slots (every slot used once, the task's
/// other fields kept, the node's count written) in fenced commits, each
/// assignment with its event stamped with this tenure.
pub async fn assigns_tasks_within_capacity_in_fenced_commits(component: &str) {
    let mut h = load(component).await;
    let description = h.describe().await;
    assert_eq!(description.watches, [NODES, TASKS]);
    assert_eq!(description.resync_period, Some(Duration::from_secs(60)));

    h.seed(NODES, "n1", &json!({ "capacity": 1, "zone": "a" }))
        .await;
    h.seed(NODES, "n2", &json!({ "capacity": 2 })).await;
    for name in ["t1", "t2", "t3", "t4"] {
        h.seed(TASKS, name, &json!({ "status": "pending", "image": name }))
            .await;
    }

    for (key, reply) in h.resync().await {
        assert_eq!(reply, Reconciled::Done, "{key:?}");
    }

    assert_eq!(
        usage(&h).await,
        BTreeMap::from([("n1".to_string(), 1), ("n2".to_string(), 2)]),
        "every slot used, none twice"
    );
    assert_eq!(pending_names(&h).await, ["t4"]);
    assert_eq!(
        h.value(TASKS, "t1").await,
        json!({ "status": "assigned", "node": "n2", "image": "t1" }),
        "the task's other fields are kept"
    );
    assert_eq!(
        h.value(NODES, "n1").await,
        json!({ "capacity": 1, "zone": "a", "assigned": 1 })
    );
    // One event per assignment, each in the commit that assigned it, all
    // stamped with this tenure.
    let events = h.events_with_reason(ASSIGNED).await;
    let mut assigned: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assigned.sort_unstable();
    assert_eq!(assigned, ["t1", "t2", "t3"]);
    for event in &events {
        let task = h.object(TASKS, &event.name).await.unwrap();
        assert_eq!(event.revision, task.version, "{}", event.name);
    }
    assert_eq!(epochs(&events), [1, 1, 1]);
    assert_eq!(h.counters().ok.load(Ordering::SeqCst), 3);
    assert_eq!(h.history().await[0].writes, 3);
}
