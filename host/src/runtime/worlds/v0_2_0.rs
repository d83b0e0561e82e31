//! `leasehold:controller@0.2.0`, the current world, generated from
//! `wit/controller.wit`: 0.1.0's interfaces plus `settings` (and the wall
//! clock, which is WASI's and linked once for every version), and the
//! reason passed to `reconcile`, and object metadata, status, generation
//! and the deletion mark with the operations that write them (`create-with`,
//! `replace`, `status`) or only check an object (`check`). Converts between
//! its types and the host slices of `runtime/host/`: guests reach the
//! store only through `StoreHost`'s fenced calls, which apply the store's
//! own validation and limits to metadata and status as to values.

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
    path: "../wit",
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

use exports::leasehold::controller::reconciler;
use leasehold::controller::{logging, settings, store, tenure, types};

shared_conversions!();

/// Link this version's Leasehold interfaces (WASI is linked once, for
/// every version).
pub(crate) fn link(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    store::add_to_linker::<GuestState, StoreView>(linker, |s| &mut s.store)?;
    tenure::add_to_linker::<GuestState, TenureView>(linker, |s| &mut s.tenure)?;
    logging::add_to_linker::<GuestState, LoggingView>(linker, |s| &mut s.logging)?;
    settings::add_to_linker::<GuestState, SettingsView>(linker, |s| &mut s.settings)?;
    Ok(())
}

pub(crate) async fn describe(
    bindings: &Controller,
    store: &mut Store<GuestState>,
) -> wasmtime::Result<Described> {
    let description = bindings
        .leasehold_controller_reconciler()
        .call_describe(store)
        .await?;
    Ok(Described {
        watches: description.watches,
        resync_period_ms: description.resync_period_ms,
        related: description.related.into_iter().map(related_watch).collect(),
    })
}

/// A related watch as the host keeps it (checked by the worker and by
/// `leasehold check`, not here: a conversion refuses nothing).
fn related_watch(watch: reconciler::RelatedWatch) -> RelatedWatch {
    RelatedWatch {
        kind: watch.kind,
        map: match watch.mapping {
            reconciler::RelatedMap::Owner(kind) => RelatedMap::Owner { kind },
            reconciler::RelatedMap::Label(label) => RelatedMap::Label {
                key: label.key,
                target_kind: label.target_kind,
            },
        },
    }
}

pub(crate) async fn reconcile(
    bindings: &Controller,
    store: &mut Store<GuestState>,
    kind: &str,
    name: &str,
    reason: ReconcileReason,
) -> wasmtime::Result<Answer> {
    let reason = match reason {
        ReconcileReason::Change => reconciler::ReconcileReason::Change,
        ReconcileReason::Requeue => reconciler::ReconcileReason::Requeue,
        ReconcileReason::Resync => reconciler::ReconcileReason::Resync,
        ReconcileReason::Retry => reconciler::ReconcileReason::Retry,
        ReconcileReason::Related => reconciler::ReconcileReason::Related,
    };
    let result = bindings
        .leasehold_controller_reconciler()
        .call_reconcile(store, kind, name, reason)
        .await?;
    Ok(answer(result))
}

fn wit_object(object: crate::store::Object) -> types::Object {
    types::Object {
        kind: object.kind,
        name: object.name,
        version: object.version,
        value: object.value,
        metadata: wit_metadata(object.meta),
        status: object.status,
        generation: object.generation,
        // Milliseconds since the Unix epoch; a mark before 1970 cannot
        // happen (the store's clock set it), and would read as 0.
        deleting_since: object
            .deleting_since
            .map(|at| u64::try_from(at.timestamp_millis()).unwrap_or(0)),
    }
}

fn wit_metadata(meta: Metadata) -> types::Metadata {
    types::Metadata {
        labels: meta.labels.into_iter().collect(),
        owner: meta.owner.map(wit_key),
        finalizers: meta.finalizers,
    }
}

/// The guest's metadata as the store's. A label key given twice is
/// refused rather than silently keeping one of its values.
fn metadata(key: &ObjectKey, meta: types::Metadata) -> Result<Metadata, store::StoreError> {
    let mut labels = std::collections::BTreeMap::new();
    for (name, value) in meta.labels {
        if labels.contains_key(&name) {
            return Err(store::StoreError::Invalid(format!(
                "label {name} of {key} is given twice"
            )));
        }
        labels.insert(name, value);
    }
    Ok(Metadata {
        labels,
        owner: meta.owner.map(|o| ObjectKey {
            kind: o.kind,
            name: o.name,
        }),
        finalizers: meta.finalizers,
    })
}

/// The guest's selector as the store's: labels given twice and
/// `contains` that is not JSON are refused naming the kind (the store
/// checks the rest).
fn selector(kind: &str, selector: store::Selector) -> Result<Selector, store::StoreError> {
    let mut labels = std::collections::BTreeMap::new();
    for (name, value) in selector.labels {
        if labels.contains_key(&name) {
            return Err(store::StoreError::Invalid(format!(
                "selector for kind {kind}: label {name} is given twice"
            )));
        }
        labels.insert(name, value);
    }
    let contains = selector
        .contains
        .map(|text| {
            // Bounded before it is parsed, as a value is (the store bounds
            // its compact form far lower).
            if text.len() > crate::limits::MAX_VALUE_BYTES {
                return Err(store::StoreError::Invalid(format!(
                    "selector for kind {kind}: contains is {} bytes of JSON text; the limit is {}",
                    text.len(),
                    crate::limits::MAX_VALUE_BYTES
                )));
            }
            serde_json::from_str(&text).map_err(|e| {
                store::StoreError::Invalid(format!(
                    "selector for kind {kind}: contains is not JSON: {e}"
                ))
            })
        })
        .transpose()?;
    Ok(Selector { labels, contains })
}

fn op(op: store::Op) -> Result<Op, store::StoreError> {
    Ok(match op {
        store::Op::Create(c) => Op::Create {
            key: key(c.kind, c.name),
            value: c.value,
        },
        store::Op::Update(u) => Op::Update {
            key: key(u.kind, u.name),
            expected_version: u.expected_version,
            value: u.value,
        },
        store::Op::Delete(d) => Op::Delete {
            key: key(d.kind, d.name),
            expected_version: d.expected_version,
        },
        store::Op::CreateWith(c) => {
            let key = key(c.kind, c.name);
            let meta = metadata(&key, c.metadata)?;
            Op::CreateWith {
                key,
                value: c.value,
                meta,
            }
        }
        store::Op::Replace(r) => {
            let key = key(r.kind, r.name);
            let meta = r.metadata.map(|m| metadata(&key, m)).transpose()?;
            Op::Replace {
                key,
                expected_version: r.expected_version,
                value: r.value,
                meta,
            }
        }
        store::Op::Status(s) => Op::Status {
            key: key(s.kind, s.name),
            expected_generation: s.expected_generation,
            status: s.status,
        },
        store::Op::Check(c) => Op::Check {
            key: key(c.kind, c.name),
            expected_version: c.expected_version,
        },
    })
}

impl store::Host for StoreHost {
    async fn get(
        &mut self,
        kind: String,
        name: String,
    ) -> Result<Option<types::Object>, store::StoreError> {
        self.get_object(key(kind, name))
            .await
            .map(|object| object.map(wit_object))
            .map_err(wit_error)
    }

    async fn list(
        &mut self,
        kind: String,
        after: Option<String>,
        limit: u32,
    ) -> Result<store::ObjectPage, store::StoreError> {
        let page = self
            .list_objects(kind, after, limit)
            .await
            .map_err(wit_error)?;
        Ok(store::ObjectPage {
            objects: page.objects.into_iter().map(wit_object).collect(),
            next: page.next,
        })
    }

    async fn list_selected(
        &mut self,
        kind: String,
        selector: store::Selector,
        after: Option<String>,
        limit: u32,
    ) -> Result<store::ObjectPage, store::StoreError> {
        let selector = self::selector(&kind, selector)?;
        let page = self
            .list_selected_objects(kind, selector, after, limit)
            .await
            .map_err(wit_error)?;
        Ok(store::ObjectPage {
            objects: page.objects.into_iter().map(wit_object).collect(),
            next: page.next,
        })
    }

    async fn commit(
        &mut self,
        ops: Vec<store::Op>,
        events: Vec<store::NewEvent>,
    ) -> Result<store::Committed, store::StoreError> {
        // A revoked guest is told `fenced` before its ops are converted
        // (a malformed op would otherwise answer `invalid`).
        self.refuse_commit_if_revoked().map_err(wit_error)?;
        let ops = ops.into_iter().map(op).collect::<Result<_, _>>()?;
        let events = events.into_iter().map(event).collect();
        let committed = self.commit_ops(ops, events).await.map_err(wit_error)?;
        Ok(store::Committed {
            revision: committed.revision,
            event_seqs: committed.event_seqs,
        })
    }
}

impl settings::Host for SettingsHost {
    fn get(&mut self) -> wasmtime::Result<String> {
        Ok(self.json())
    }
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
