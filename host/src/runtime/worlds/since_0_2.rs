//! The host side that versions 0.2.0 and 0.3.0 of the controller world
//! share word for word: the store and settings hosts, linking, the related
//! watches `describe` gives and the call of `reconcile`. Expanded inside
//! each version's module by [`since_0_2`], where `store`, `types`,
//! `tenure`, `logging`, `settings` and `reconciler` name that version's
//! generated modules and `$reconciler` the bindings' accessor of the
//! reconciler export; what differs (`describe`'s record, the `tenure`
//! host) each module writes itself.

/// See the module doc.
macro_rules! since_0_2 {
    ($reconciler:ident) => {
        /// Link this version's Leasehold interfaces (WASI is linked once, for
        /// every version).
        pub(crate) fn link(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
            store::add_to_linker::<GuestState, StoreView>(linker, |s| &mut s.store)?;
            tenure::add_to_linker::<GuestState, TenureView>(linker, |s| &mut s.tenure)?;
            logging::add_to_linker::<GuestState, LoggingView>(linker, |s| &mut s.logging)?;
            settings::add_to_linker::<GuestState, SettingsView>(linker, |s| &mut s.settings)?;
            Ok(())
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
                .$reconciler()
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
            // Bounded before it is parsed, as a value is (the store bounds
            // its compact form far lower), and parsed under the store's JSON
            // rules: a wide integer is refused, never rounded.
            let contains = selector
                .contains
                .map(|text| {
                    leasehold_model::validate::parse_contains(
                        kind,
                        &text,
                        crate::limits::MAX_VALUE_BYTES,
                    )
                    .map_err(|refused| match refused {
                        leasehold_model::Error::Invalid(why) => store::StoreError::Invalid(why),
                        other => store::StoreError::Invalid(other.to_string()),
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
    };
}
