//! `leasehold:controller@0.2.0`, generated from `wit/0.2.0/controller.wit`
//! (kept unchanged since it was the current world): 0.1.0's interfaces plus `settings` (and the wall
//! clock, which is WASI's and linked once for every version), and the
//! reason passed to `reconcile`, and object metadata, status, generation
//! and the deletion mark with the operations that write them (`create-with`,
//! `replace`, `status`) or only check an object (`check`). Converts between
//! its types and the host slices of `runtime/host/`: guests reach the
//! store only through `StoreHost`'s fenced calls, which apply the store's
//! own validation and limits to metadata and status as to values. All of
//! it but `describe` and `tenure` is the text 0.3.0 shares
//! ([`since_0_2`](super::since_0_2)).

use wasmtime::Store;
use wasmtime::component::Linker;

use super::{Answer, Described};
use crate::runtime::guest::{ReconcileReason, RelatedMap, RelatedWatch};
use crate::runtime::host::logging::{Level, LoggingHost};
use crate::runtime::host::settings::SettingsHost;
use crate::runtime::host::store::{CallError, StoreHost};
use crate::runtime::host::tenure::TenureHost;
use crate::runtime::state::{GuestState, LoggingView, SettingsView, StoreView, TenureView};
use crate::store::{Metadata, NewEvent, ObjectKey, Op, Selector};

wasmtime::component::bindgen!({
    // The current package (and the WASI packages under `wit/deps`) first:
    // the 0.2.0 text refers to those WASI packages by name.
    path: ["../wit", "../wit/0.2.0"],
    world: "leasehold:controller/controller@0.2.0",
    imports: {
        // Store calls reach the database: they must be async so a lost lease
        // can drop them mid-flight.
        "leasehold:controller/store": async,
        default: trappable,
    },
    exports: {
        default: async,
    },
    // Outbound HTTP is wasmtime-wasi-http's implementation of the standard
    // interface; only its hooks are ours (`host::http`).
    with: {
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
    },
});

use exports::leasehold::controller0_2_0::reconciler;
use leasehold::controller0_2_0::{logging, settings, store, tenure, types};

shared_conversions!();

since_0_2!(leasehold_controller0_2_0_reconciler);
fence_only_tenure!();

pub(crate) async fn describe(
    bindings: &Controller,
    store: &mut Store<GuestState>,
) -> wasmtime::Result<Described> {
    let description = bindings
        .leasehold_controller0_2_0_reconciler()
        .call_describe(store)
        .await?;
    Ok(Described {
        watches: description.watches,
        resync_period_ms: description.resync_period_ms,
        related: description.related.into_iter().map(related_watch).collect(),
        // Sharding is 0.3.0's: a 0.2.0 guest's shards go by kind/name.
        shard_label: None,
        every_shard: Vec::new(),
        settings_schema: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wit_meta(labels: &[(&str, &str)]) -> types::Metadata {
        types::Metadata {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            owner: Some(types::ObjectKey {
                kind: "projects".into(),
                name: "p".into(),
            }),
            finalizers: vec!["f".into()],
        }
    }

    #[test]
    fn metadata_converts_both_ways_and_refuses_a_label_given_twice() {
        let object = key("tasks".into(), "t".into());
        let meta = metadata(&object, wit_meta(&[("b", "2"), ("a", "1")])).unwrap();
        assert_eq!(
            meta.labels.iter().collect::<Vec<_>>(),
            [
                (&"a".to_string(), &"1".to_string()),
                (&"b".to_string(), &"2".to_string())
            ]
        );
        assert_eq!(meta.owner, Some(key("projects".into(), "p".into())));
        let back = wit_metadata(meta);
        assert_eq!(
            back.labels,
            [("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        match metadata(&object, wit_meta(&[("a", "1"), ("a", "2")])) {
            Err(store::StoreError::Invalid(why)) => {
                assert!(why.contains("label a of tasks/t"), "{why}")
            }
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_selector_converts_and_refuses_what_the_store_cannot_read() {
        let selected = selector(
            "tasks",
            store::Selector {
                labels: vec![("team".into(), "db".into())],
                contains: Some(r#"{"status": "pending"}"#.into()),
            },
        )
        .unwrap();
        assert_eq!(selected.labels["team"], "db");
        assert_eq!(
            selected.contains,
            Some(serde_json::json!({ "status": "pending" }))
        );
        let refused = [
            store::Selector {
                labels: vec![("a".into(), "1".into()), ("a".into(), "1".into())],
                contains: None,
            },
            store::Selector {
                labels: Vec::new(),
                contains: Some("{not json".into()),
            },
            store::Selector {
                labels: Vec::new(),
                contains: Some(" ".repeat(crate::limits::MAX_VALUE_BYTES + 1)),
            },
        ];
        for bad in refused {
            match selector("tasks", bad) {
                Err(store::StoreError::Invalid(why)) => {
                    assert!(why.contains("selector for kind tasks"), "{why}")
                }
                other => panic!("expected invalid, got {other:?}"),
            }
        }
    }

    #[test]
    fn every_new_op_reaches_the_store_as_its_own_op() {
        let status = op(store::Op::Status(store::StatusOp {
            kind: "tasks".into(),
            name: "t".into(),
            expected_generation: Some(3),
            status: None,
        }))
        .unwrap();
        assert_eq!(
            status,
            Op::Status {
                key: key("tasks".into(), "t".into()),
                expected_generation: Some(3),
                status: None,
            }
        );
        let check = op(store::Op::Check(store::CheckOp {
            kind: "gates".into(),
            name: "g".into(),
            expected_version: 0,
        }))
        .unwrap();
        assert_eq!(
            check,
            Op::Check {
                key: key("gates".into(), "g".into()),
                expected_version: 0,
            }
        );
        let replace = op(store::Op::Replace(store::ReplaceOp {
            kind: "tasks".into(),
            name: "t".into(),
            expected_version: 7,
            value: None,
            metadata: Some(wit_meta(&[])),
        }))
        .unwrap();
        assert!(matches!(
            replace,
            Op::Replace { expected_version: 7, value: None, meta: Some(ref m), .. }
                if m.finalizers == ["f"]
        ));
    }

    /// A guest whose tenure was revoked is told `fenced` by commit, and
    /// counted as such, even when its ops would be refused as malformed.
    #[tokio::test]
    async fn a_revoked_guest_is_told_fenced_whatever_its_commit_holds() {
        use std::sync::Arc;

        use crate::authority::memory::MemoryAuthority;
        use crate::fence::{Epoch, Fence, LeaseKey};
        use crate::quota::{QuotaLimits, WriteQuota};
        use crate::runtime::host::store::CommitCounters;
        use crate::store::memory::MemoryStore;

        let engine = wasmtime::Engine::default();
        let revocation = crate::runtime::Revocation::new(&engine);
        let backend = Arc::new(MemoryStore::new(Arc::new(MemoryAuthority::new())));
        let fence = Fence {
            key: LeaseKey::new("east", "ctl"),
            epoch: Epoch(1),
            holder: "host-a".into(),
        };
        let counters = Arc::new(CommitCounters::default());
        let mut host = StoreHost::new(
            backend,
            fence,
            revocation.clone(),
            1 << 20,
            counters.clone(),
            Arc::new(WriteQuota::new("ctl", QuotaLimits::default())),
        );
        revocation.revoke();
        let malformed = store::Op::CreateWith(store::CreateWithOp {
            kind: "tasks".into(),
            name: "t".into(),
            value: "{}".into(),
            metadata: wit_meta(&[("a", "1"), ("a", "2")]),
        });
        match store::Host::commit(&mut host, vec![malformed], vec![]).await {
            Err(store::StoreError::Fenced(why)) => assert!(why.contains("revoked"), "{why}"),
            other => panic!("a revoked guest's commit must be fenced, got {other:?}"),
        }
        assert_eq!(
            counters.fenced_by_cause().last(),
            Some(&("revoked", 1)),
            "counted as a revoked refusal"
        );
    }
}
