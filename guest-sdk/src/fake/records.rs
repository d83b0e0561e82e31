//! What the fake saw: every commit that landed, every event, every log
//! line, and how many store calls of each sort it served.
//!
//! Owns: the record types a test asserts on, appending to the records
//! (with the epoch of the fence at the time) and the accessors that read
//! them. Must never: record a commit that did not land (a refused commit
//! leaves no trace but its call count), or change a record once written.

use crate::log::Level;
use crate::object::ObjectKey;
use crate::transaction::{EventType, NewEvent, Op};

use super::{FakeHost, State};

/// How many store calls a [`FakeHost`] has served, by sort. Calls that
/// failed count too.
///
/// # Example
///
/// ```
/// use leasehold_guest::{Api, FakeHost};
///
/// let host = FakeHost::new();
/// Api::<serde_json::Value>::new("tasks").list(None, 10)?;
/// assert_eq!(host.calls().list, 1);
/// assert_eq!(host.calls().total(), 1);
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// `get` calls.
    pub get: u64,
    /// `list` calls.
    pub list: u64,
    /// `commit` calls.
    pub commit: u64,
}

impl CallCounts {
    /// All store calls.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::CallCounts;
    ///
    /// assert_eq!(CallCounts { get: 1, list: 2, commit: 3 }.total(), 6);
    /// ```
    pub fn total(&self) -> u64 {
        self.get + self.list + self.commit
    }
}

/// A commit that landed (including one whose reply was lost).
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Transaction};
///
/// let host = FakeHost::new();
/// Transaction::new().create("tasks", "a", &1).event("tasks", "a", "Made", "made").commit()?;
/// let commit = &host.commits()[0];
/// assert_eq!((commit.ops.len(), commit.events.len(), commit.epoch), (1, 1, 1));
/// # Ok::<(), leasehold_guest::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRecord {
    /// The commit's revision.
    pub revision: u64,
    /// The epoch of the fence it was made under.
    pub epoch: u64,
    /// Its operations, values normalized to compact JSON.
    pub ops: Vec<Op>,
    /// Its events.
    pub events: Vec<NewEvent>,
    /// The sequence numbers its events got.
    pub event_seqs: Vec<u64>,
}

/// An event in the fake's log.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Transaction};
///
/// let host = FakeHost::new();
/// Transaction::new().event("tasks", "a", "Seen", "seen it").commit()?;
/// let event = &host.events()[0];
/// // The commit took revision 1, its event the next number.
/// assert_eq!((event.seq, event.key.name.as_str(), event.reason.as_str()), (2, "a", "Seen"));
/// # Ok::<(), leasehold_guest::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// Position in commit order, as the host numbers it: from the store's
    /// one series of numbers (revisions, change positions and event
    /// sequence numbers), so unique and increasing, with gaps.
    pub seq: u64,
    /// The revision of the commit that appended it.
    pub revision: u64,
    /// The epoch of the fence it was appended under.
    pub epoch: u64,
    /// The object it is about.
    pub key: ObjectKey,
    /// Its reason.
    pub reason: String,
    /// Its message, as stored (a typed event's type included: see
    /// [`EventType`]).
    pub message: String,
}

impl EventRecord {
    /// The event's type, read from its message (see [`EventType`]).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{EventType, FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new()
    ///     .event("tasks", "a", "Seen", "seen it")
    ///     .warning("tasks", "a", "Stuck", "no node fits")
    ///     .commit()?;
    /// let types: Vec<EventType> = host.events().iter().map(|e| e.event_type()).collect();
    /// assert_eq!(types, [EventType::Normal, EventType::Warning]);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn event_type(&self) -> EventType {
        EventType::decode(&self.message).0
    }

    /// The event's message without its type (see [`EventType`]).
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().warning("tasks", "a", "Stuck", "no node fits").commit()?;
    /// assert_eq!(host.events()[0].text(), "no node fits");
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn text(&self) -> &str {
        EventType::decode(&self.message).1
    }
}

/// A log line a guest wrote.
///
/// # Example
///
/// ```
/// use leasehold_guest::{FakeHost, Level};
///
/// let host = FakeHost::new();
/// leasehold_guest::info!("hello");
/// assert_eq!(host.logs()[0].level, Level::Info);
/// assert_eq!(host.logs()[0].epoch, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Its level.
    pub level: Level,
    /// The line, truncated to the log line limit as the host does.
    pub message: String,
    /// The epoch of the fence at the time.
    pub epoch: u64,
}

impl State {
    /// Record a commit that landed at `revision`, its events numbered
    /// `event_seqs` (from the store's one series, so with gaps, as on the
    /// host); everything carries the current epoch.
    pub(super) fn record_commit(
        &mut self,
        revision: u64,
        ops: Vec<Op>,
        events: &[NewEvent],
        event_seqs: &[u64],
    ) {
        let epoch = self.fence.epoch;
        for (event, &seq) in events.iter().zip(event_seqs) {
            self.events.push(EventRecord {
                seq,
                revision,
                epoch,
                key: event.key.clone(),
                reason: event.reason.clone(),
                message: event.message.clone(),
            });
        }
        self.commits.push(CommitRecord {
            revision,
            epoch,
            ops,
            events: events.to_vec(),
            event_seqs: event_seqs.to_vec(),
        });
    }

    /// Record a log line, truncated as the host truncates it.
    pub(super) fn record_log(&mut self, level: Level, message: &str) {
        let message = truncate(message, self.limits.log_line_bytes);
        let epoch = self.fence.epoch;
        // Also to stderr: the test harness shows it when a test fails.
        eprintln!("[{level} epoch={epoch}] {message}");
        self.logs.push(LogLine {
            level,
            message: message.to_string(),
            epoch,
        });
    }
}

impl FakeHost {
    /// Every commit that landed, in order.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().create("tasks", "a", &1).commit()?;
    /// assert_eq!(host.commits()[0].ops[0].key().name, "a");
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn commits(&self) -> Vec<CommitRecord> {
        self.state.borrow().commits.clone()
    }

    /// Every event appended, in order.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().event("tasks", "a", "One", "1").event("tasks", "a", "Two", "2").commit()?;
    /// let reasons: Vec<_> = host.events().into_iter().map(|e| e.reason).collect();
    /// assert_eq!(reasons, ["One", "Two"]);
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn events(&self) -> Vec<EventRecord> {
        self.state.borrow().events.clone()
    }

    /// The events with `reason`, in order.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{FakeHost, Transaction};
    ///
    /// let host = FakeHost::new();
    /// Transaction::new().event("tasks", "a", "One", "1").event("tasks", "b", "Two", "2").commit()?;
    /// assert_eq!(host.events_with_reason("Two")[0].key.name, "b");
    /// # Ok::<(), leasehold_guest::StoreError>(())
    /// ```
    pub fn events_with_reason(&self, reason: &str) -> Vec<EventRecord> {
        let state = self.state.borrow();
        state
            .events
            .iter()
            .filter(|e| e.reason == reason)
            .cloned()
            .collect()
    }

    /// Every log line, in order.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::FakeHost;
    ///
    /// let host = FakeHost::new();
    /// leasehold_guest::warn!("careful");
    /// assert_eq!(host.logs()[0].message, "careful");
    /// ```
    pub fn logs(&self) -> Vec<LogLine> {
        self.state.borrow().logs.clone()
    }

    /// How many store calls were made, by sort.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold_guest::{Api, FakeHost};
    ///
    /// let host = FakeHost::new();
    /// let _ = Api::<u32>::new("tasks").get("a");
    /// assert_eq!(host.calls().get, 1);
    /// ```
    pub fn calls(&self) -> CallCounts {
        self.state.borrow().calls
    }
}

/// Cut `message` to at most `max` bytes on a character boundary, as the
/// host does.
fn truncate(message: &str, max: usize) -> &str {
    if message.len() <= max {
        return message;
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}
