//! Native targets: every call goes to the [`crate::FakeHost`] installed on
//! the calling thread.

use crate::error::StoreError;
use crate::fake;
use crate::fence::Fence;
use crate::log::Level;
use crate::transaction::{Committed, NewEvent, Op};

use super::{RawObject, RawPage};

pub(crate) fn get(kind: &str, name: &str) -> Result<Option<RawObject>, StoreError> {
    fake::current().get(kind, name)
}

pub(crate) fn list(kind: &str, after: Option<&str>, limit: u32) -> Result<RawPage, StoreError> {
    fake::current().list(kind, after, limit)
}

pub(crate) fn commit(ops: &[Op], events: &[NewEvent]) -> Result<Committed, StoreError> {
    fake::current().commit(ops, events)
}

pub(crate) fn fence() -> Fence {
    fake::current().fence()
}

pub(crate) fn log(level: Level, message: &str) {
    match fake::try_current() {
        Some(host) => host.record_log(level, message),
        // Logging from code under test that runs without a fake host (a
        // pure helper, say) must not panic; the test harness shows stderr
        // of failing tests.
        None => eprintln!("[{level}] {message}"),
    }
}
