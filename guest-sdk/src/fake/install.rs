//! Installing a fake as this thread's native `sys` host, and serving the
//! calls the SDK makes through it.
//!
//! Owns: [`FakeHost::install`] and the fake's side of the seam
//! ([`Host`]): counting each call, running the writes scheduled before it,
//! admitting it (faults, fence, reachability), then answering from the
//! store and recording what landed. Must never: answer a call without
//! counting and admitting it first, or hold the fake's state borrowed
//! while a scheduled write runs (it writes through this same fake).

use std::rc::Rc;

use crate::sys::native::{self, Host};
use crate::sys::{
    Committed, Fence, Level, NewEvent, Op, RawObject, RawPage, Selector, Shard, WireError,
    WireHttpError, WireRequest, WireResponse,
};

use super::FakeHost;
use super::faults::{Call, Fault, Hook, quota_message};
use super::store;

impl FakeHost {
    /// Make this fake the one the SDK talks to on the current thread.
    /// [`FakeHost::new`] and [`FakeHost::reconcile`] do it for you.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let first = FakeHost::new();
    /// let _second = FakeHost::new();
    /// first.install();
    /// leasehold_guest::info!("to the first");
    /// assert_eq!(first.logs().len(), 1);
    /// ```
    pub fn install(&self) {
        native::install(Rc::new(self.clone()));
    }

    /// Count a call, then run the writes scheduled just before it, with
    /// the state released: they write through this same fake.
    fn enter(&self, call: Call) {
        let due: Vec<Hook> = {
            let mut state = self.state.borrow_mut();
            let counter = match call {
                Call::Get => &mut state.calls.get,
                Call::List => &mut state.calls.list,
                Call::Commit => &mut state.calls.commit,
            };
            *counter += 1;
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut state.hooks)
                .into_iter()
                .partition(|(target, _)| target.is_now(&state.calls, call));
            state.hooks = later;
            due.into_iter().map(|(_, hook)| hook).collect()
        };
        for hook in due {
            hook(self);
        }
    }
}

impl Host for FakeHost {
    fn get(&self, kind: &str, name: &str) -> Result<Option<RawObject>, WireError> {
        self.enter(Call::Get);
        let mut state = self.state.borrow_mut();
        state.admit(Call::Get)?;
        state.objects.get(kind, name)
    }

    fn list(&self, kind: &str, after: Option<&str>, limit: u32) -> Result<RawPage, WireError> {
        self.enter(Call::List);
        let mut state = self.state.borrow_mut();
        state.admit(Call::List)?;
        let limits = state.limits;
        state.objects.list(&limits, kind, after, limit)
    }

    fn list_selected(
        &self,
        kind: &str,
        selector: &Selector,
        after: Option<&str>,
        limit: u32,
    ) -> Result<RawPage, WireError> {
        // A selective list is a list: counted, and struck by faults, as one.
        self.enter(Call::List);
        let mut state = self.state.borrow_mut();
        state.admit(Call::List)?;
        let limits = state.limits;
        state
            .objects
            .list_selected(&limits, kind, selector, after, limit)
    }

    fn commit(&self, ops: &[Op], events: &[NewEvent]) -> Result<Committed, WireError> {
        self.enter(Call::Commit);
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        let fault = state.admit(Call::Commit)?;
        let store::Validated { batch, ops } = store::validate_commit(&state.limits, ops, events)?;
        let shard = state.shard;
        let labelled = state.shard_label.clone();
        if shard.count > 1
            && let Some(theirs) = ops.iter().find_map(|op| match op {
                Op::Status {
                    key,
                    expected_generation: None,
                    ..
                } if labelled.is_some() || !shard.owns_key(&key.kind, &key.name) => Some(key),
                _ => None,
            })
        {
            if let Some(label) = &labelled {
                return Err(WireError::Invalid(format!(
                    "{theirs}: this controller's objects are sharded by the label {label}, \
                     which the op does not carry, so this {shard} cannot tell whose it is: a \
                     status write of a controller sharded by a label must be conditional (give \
                     it an expected generation) (lease {}, epoch {})",
                    state.fence.lease, state.fence.epoch
                )));
            }
            return Err(WireError::Invalid(format!(
                "{theirs} belongs to shard {} of {}, not to this {shard}: a write to another \
                 shard's object must be conditional (give the status write an expected \
                 generation) (lease {}, epoch {})",
                Shard::of_key(&theirs.kind, &theirs.name, shard.count),
                shard.count,
                state.fence.lease,
                state.fence.epoch
            )));
        }
        if fault == Some(Fault::Conflict) {
            let key = ops
                .first()
                .map(|op| op.key().clone())
                .or_else(|| events.first().map(|e| e.key.clone()))
                .expect("a validated commit has an operation or an event");
            return Err(WireError::Conflict(key));
        }
        if let Some(Fault::QuotaExceeded(quota)) = fault {
            let kind = ops
                .first()
                .map(|op| op.key().kind.clone())
                .or_else(|| events.first().map(|e| e.key.kind.clone()))
                .expect("a validated commit has an operation or an event");
            // The host sends a quota refusal as `invalid` text; the SDK's
            // error layer types it, on this side of the seam as on wasm32.
            return Err(WireError::Invalid(quota_message(
                &state.fence.lease,
                quota,
                &kind,
            )));
        }
        let now = state.now;
        let creates = match state.quota.as_mut() {
            Some(quota) => {
                let objects = &state.objects;
                quota
                    .admit(&state.fence.lease, &ops, |kind| objects.count(kind), now)
                    .map_err(WireError::Invalid)?
            }
            None => 0,
        };
        let store::Applied {
            revision,
            event_seqs,
        } = state.objects.apply(&batch, events.len(), now)?;
        if let Some(quota) = state.quota.as_mut() {
            quota.spend(creates);
        }
        state.record_commit(revision, ops, events, &event_seqs);
        if fault == Some(Fault::LostReply) {
            return Err(WireError::Unavailable(
                "the connection dropped before the reply arrived (injected by FakeHost)".into(),
            ));
        }
        Ok(Committed {
            revision,
            event_seqs,
        })
    }

    fn fence(&self) -> Fence {
        self.state.borrow().fence.clone()
    }

    fn shard(&self) -> Shard {
        self.state.borrow().shard
    }

    fn log(&self, level: Level, message: &str) {
        self.state.borrow_mut().record_log(level, message);
    }

    fn settings(&self) -> String {
        self.settings_text()
    }

    fn now(&self) -> std::time::SystemTime {
        self.now()
    }

    fn http_send(&self, request: &WireRequest) -> Result<WireResponse, WireHttpError> {
        self.serve_http(request)
    }
}
