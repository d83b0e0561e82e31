//! Native targets: every call goes to the [`Host`] installed on the calling
//! thread. The crate's `FakeHost` implements [`Host`] and installs itself
//! with [`install`]; this module knows nothing of it, so the fake depends
//! on `sys` and never the other way round.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::SystemTime;

use super::{
    Committed, Fence, Level, NewEvent, Op, RawObject, RawPage, Selector, Shard, WireError,
    WireHttpError, WireRequest, WireResponse,
};

/// What answers the SDK's calls on a native target: the host side of the
/// WIT imports, in the wire types.
pub(crate) trait Host {
    /// `store.get`.
    fn get(&self, kind: &str, name: &str) -> Result<Option<RawObject>, WireError>;
    /// `store.list`.
    fn list(&self, kind: &str, after: Option<&str>, limit: u32) -> Result<RawPage, WireError>;
    /// `store.list-selected`.
    fn list_selected(
        &self,
        kind: &str,
        selector: &Selector,
        after: Option<&str>,
        limit: u32,
    ) -> Result<RawPage, WireError>;
    /// `store.commit`.
    fn commit(&self, ops: &[Op], events: &[NewEvent]) -> Result<Committed, WireError>;
    /// `tenure.current`.
    fn fence(&self) -> Fence;
    /// `tenure.shard`.
    fn shard(&self) -> Shard;
    /// `logging.log`.
    fn log(&self, level: Level, message: &str);
    /// `settings.get`: the controller's settings as JSON text.
    fn settings(&self) -> String;
    /// `wasi:clocks/wall-clock.now`.
    fn now(&self) -> SystemTime;
    /// One request through `wasi:http/outgoing-handler.handle`, its
    /// response read to the end.
    fn http_send(&self, request: &WireRequest) -> Result<WireResponse, WireHttpError>;
}

thread_local! {
    // One host per thread: the test harness runs each test on its own
    // thread, so tests never share one.
    static CURRENT: RefCell<Option<Rc<dyn Host>>> = const { RefCell::new(None) };
}

/// Make `host` the one this thread's SDK calls go to, replacing any other.
pub(crate) fn install(host: Rc<dyn Host>) {
    CURRENT.with(|current| *current.borrow_mut() = Some(host));
}

/// The host installed on this thread, if any. A clone of the handle, so no
/// borrow is held while the host runs: it may call back into the SDK (a
/// scheduled write that seeds objects, or runs a controller) or install
/// another host.
fn try_current() -> Option<Rc<dyn Host>> {
    CURRENT.with(|current| current.borrow().clone())
}

/// The host installed on this thread.
///
/// # Panics
///
/// If there is none: on native targets the store has no other backend.
fn current() -> Rc<dyn Host> {
    try_current().expect(
        "no FakeHost on this thread: native builds of a controller talk to a fake host; \
         create one with `leasehold_guest::FakeHost::new()` before calling the store",
    )
}

pub(crate) fn get(kind: &str, name: &str) -> Result<Option<RawObject>, WireError> {
    current().get(kind, name)
}

pub(crate) fn list(kind: &str, after: Option<&str>, limit: u32) -> Result<RawPage, WireError> {
    current().list(kind, after, limit)
}

pub(crate) fn list_selected(
    kind: &str,
    selector: &Selector,
    after: Option<&str>,
    limit: u32,
) -> Result<RawPage, WireError> {
    current().list_selected(kind, selector, after, limit)
}

pub(crate) fn commit(ops: &[Op], events: &[NewEvent]) -> Result<Committed, WireError> {
    current().commit(ops, events)
}

pub(crate) fn fence() -> Fence {
    current().fence()
}

pub(crate) fn shard() -> Shard {
    current().shard()
}

pub(crate) fn settings() -> String {
    current().settings()
}

pub(crate) fn now() -> SystemTime {
    current().now()
}

pub(crate) fn http_send(request: &WireRequest) -> Result<WireResponse, WireHttpError> {
    current().http_send(request)
}

pub(crate) fn log(level: Level, message: &str) {
    match try_current() {
        Some(host) => host.log(level, message),
        // Logging from code under test that runs without a fake host (a
        // pure helper, say) must not panic; the test harness shows stderr
        // of failing tests.
        None => eprintln!("[{level}] {message}"),
    }
}
