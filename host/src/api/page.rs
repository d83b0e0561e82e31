//! The one list envelope of the API and its paging parameters.
//!
//! Every list answers `{"items": [...], "next": <cursor> | null}`: `next`
//! is what to pass as `after` for the following page, and `null` when the
//! list held nothing more at the time of the answer. The cursor names the
//! last item of the page in the list's own order: an object or lease name,
//! an event's `seq`, a tenure's `epoch`. `limit` is 1 to
//! [`MAX_PAGE_SIZE`], [`DEFAULT_PAGE_SIZE`] when absent, for every list.

use serde::Serialize;

use super::error::ApiError;
use crate::limits::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};

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
