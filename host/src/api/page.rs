//! The one list envelope of the API and its paging parameters.
//!
//! Every list answers `{"items": [...], "next": <cursor> | null}`: `next`
//! is what to pass as `after` for the following page, and `null` when the
//! list held nothing more at the time of the answer. The cursor names the
//! last item of the page in the list's own order: an object or lease name,
//! an event's `seq`, a tenure's `epoch`. `limit` is 1 to
//! [`MAX_PAGE_SIZE`], [`DEFAULT_PAGE_SIZE`] when absent, for every list.

use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::AppState;
use super::error::ApiError;
use crate::limits::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use crate::timeouts::EVENTS_LONG_POLL_MAX;

/// One page of a list: the items and the cursor of the next page.
#[derive(Debug, Serialize)]
pub(super) struct ListPage<T, C> {
    /// The items of this page, in the list's order.
    pub items: Vec<T>,
    /// The `after` of the following page; `None` (JSON `null`) when there
    /// was nothing more.
    pub next: Option<C>,
}

impl<T, C> ListPage<T, C> {
    /// The page of `rows`, read with one more than `limit` asked for: a
    /// row beyond `limit` proves another page exists, and the cursor is
    /// the last row kept.
    pub fn from_one_more(mut rows: Vec<T>, limit: usize, cursor: impl Fn(&T) -> C) -> Self {
        let next = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(cursor)
        } else {
            None
        };
        Self { items: rows, next }
    }

    /// An empty page with nothing after it.
    pub fn empty() -> Self {
        Self {
            items: Vec::new(),
            next: None,
        }
    }
}

/// The `limit` query parameter: 1 to [`MAX_PAGE_SIZE`], default
/// [`DEFAULT_PAGE_SIZE`]; anything else is a 400 that says the range.
pub(super) fn limit(text: Option<&str>) -> Result<usize, ApiError> {
    match text {
        None => Ok(DEFAULT_PAGE_SIZE),
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE_SIZE).contains(&n) => Ok(n),
            _ => Err(ApiError::invalid(format!(
                "limit {text:?} must be a number from 1 to {MAX_PAGE_SIZE}"
            ))),
        },
    }
}

/// A numeric `after` cursor (an event `seq` or a tenure `epoch`); `what`
/// names it in the 400.
pub(super) fn number_after(text: Option<&str>, what: &str) -> Result<Option<u64>, ApiError> {
    text.map(|text| {
        text.parse::<u64>().map_err(|_| {
            ApiError::invalid(format!(
                "after {text:?} must be {what}, a whole number from 0; pass the `next` of the \
                 previous page"
            ))
        })
    })
    .transpose()
}

/// Keep `text` as the value of query parameter `name`, which may be given
/// once: a second one is a 400 that names it.
pub(super) fn set_once(
    slot: &mut Option<String>,
    name: &str,
    text: String,
) -> Result<(), ApiError> {
    if slot.is_some() {
        return Err(ApiError::invalid(format!(
            "the query parameter {name} is given more than once"
        )));
    }
    *slot = Some(text);
    Ok(())
}

/// The `wait` query parameter of a long-polled list (`/v1/events`,
/// `/v1/changes`): a duration such as `10s`; none, zero. A long poll may
/// always end early (the client asks again), so a wait above
/// [`EVENTS_LONG_POLL_MAX`] is shortened rather than refused.
pub(super) fn wait(text: Option<&str>) -> Result<Duration, ApiError> {
    match text {
        None => Ok(Duration::ZERO),
        Some(text) => Ok(humantime::parse_duration(text)
            .map_err(|e| {
                ApiError::invalid(format!(
                    "wait {text:?} is not a duration ({e}); write it like 10s or 500ms"
                ))
            })?
            .min(EVENTS_LONG_POLL_MAX)),
    }
}

/// A request held until the cluster's change feed passes a position, its
/// wait ends, or the server stops.
pub(super) struct LongPoll {
    feed: watch::Receiver<u64>,
    deadline: Instant,
    stopping: watch::Receiver<bool>,
}

impl LongPoll {
    /// Subscribe to the feed and mark its current value seen. Call before
    /// the first read: a commit landing after that read then always shows
    /// up as a change of the feed, so nothing slips between the read and
    /// the wait.
    pub fn start(shared: &AppState, wait: Duration) -> Self {
        let mut feed = shared.api.store.watch(&shared.api.cluster);
        feed.borrow_and_update();
        Self {
            feed,
            deadline: Instant::now() + wait,
            stopping: shared.api.stopping.clone(),
        }
    }

    /// The latest feed position this poll has seen.
    pub fn seen(&self) -> u64 {
        *self.feed.borrow()
    }

    /// Wait until the feed publishes a position above `read_through`
    /// (true: read again), or until the wait ends, the server begins to
    /// stop or the store stops publishing (false: answer what there is).
    /// Wakes for commits at or below `read_through` cost no read.
    pub async fn until_beyond(&mut self, read_through: u64) -> bool {
        loop {
            tokio::select! {
                changed = self.feed.changed() => {
                    if changed.is_err() {
                        return false;
                    }
                    if *self.feed.borrow_and_update() > read_through {
                        return true;
                    }
                }
                () = tokio::time::sleep_until(self.deadline) => return false,
                // The client asks again, of another replica if need be.
                _ = self.stopping.wait_for(|stop| *stop) => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_more_row_than_the_limit_means_another_page() {
        let page = ListPage::from_one_more(vec![1, 2, 3], 2, |n| *n);
        assert_eq!(page.items, [1, 2]);
        assert_eq!(page.next, Some(2));
        let page = ListPage::from_one_more(vec![1, 2], 2, |n| *n);
        assert_eq!(page.items, [1, 2]);
        assert_eq!(page.next, None);
        let page = ListPage::from_one_more(Vec::<u64>::new(), 2, |n| *n);
        assert_eq!(page.next, None);
    }

    #[test]
    fn limits_and_numeric_cursors_parse_or_say_why_not() {
        assert_eq!(limit(None), Ok(DEFAULT_PAGE_SIZE));
        assert_eq!(limit(Some("1")), Ok(1));
        assert_eq!(limit(Some(&MAX_PAGE_SIZE.to_string())), Ok(MAX_PAGE_SIZE));
        for bad in ["0", "-1", "x", "", &(MAX_PAGE_SIZE + 1).to_string()] {
            let error = limit(Some(bad)).unwrap_err();
            assert_eq!(error.code, "invalid_request", "{bad:?}");
            assert!(error.message.contains("1 to"), "{}", error.message);
        }
        assert_eq!(number_after(None, "a seq"), Ok(None));
        assert_eq!(number_after(Some("7"), "a seq"), Ok(Some(7)));
        for bad in ["-1", "x", "1.5"] {
            let error = number_after(Some(bad), "an event seq").unwrap_err();
            assert!(error.message.contains("an event seq"), "{}", error.message);
        }
    }
}
