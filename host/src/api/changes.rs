//! `GET /v1/changes`: the cluster's object changes, the stream that wakes
//! the controllers watching a kind (`Store::changes`), in the list envelope
//! of [`super::page`] with a change's `position` as cursor; optionally
//! only some kinds, optionally long-polled.
//!
//! Every committed create, update and delete is one change, whoever wrote
//! it (the API or a controller's commit) and whether or not an event was
//! appended with it; in commit order per object, and a page never skips a
//! change that commits later at a lower position (the store reads only
//! below its high-water mark). Positions are shared with events and
//! revisions, so they have gaps.
//!
//! `next`: as on every list, the `after` of the following page, `null`
//! when nothing more was there. Here it is also given when the read went
//! past positions that are no change of the asked kinds (an event, a
//! revision, a change of another kind, a commit that rolled back): the
//! following page may then be empty, and a reader that follows `next`
//! does not read those positions again.

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use serde::Serialize;

use super::auth::Grant;
use super::error::ApiError;
use super::page::{self, ListPage};
use super::{AppState, rfc3339};
use crate::limits::{MAX_CHANGE_KINDS, MAX_PAGE_SIZE};
use crate::names::check_label;
use crate::store::{Change, ObjectKey, Origin, Store};

/// One change as the API shows it.
#[derive(Debug, Serialize)]
pub(super) struct ChangeView {
    pub(super) position: u64,
    revision: u64,
    at: String,
    kind: String,
    name: String,
    /// `created`, `updated` or `deleted`.
    change: &'static str,
    /// The object's version after the change; for a delete, the version
    /// it had.
    version: u64,
    origin: Origin,
    /// The owner after the change (for a delete, the one it had).
    owner: Option<ObjectKey>,
    /// The labels after the change (for a delete, those it had).
    labels: BTreeMap<String, String>,
}

impl From<Change> for ChangeView {
    fn from(c: Change) -> Self {
        Self {
            position: c.position,
            revision: c.revision,
            at: rfc3339(c.at),
            kind: c.kind,
            name: c.name,
            change: c.change.as_str(),
            version: c.version,
            origin: c.origin,
            owner: c.relations.owner,
            labels: c.relations.labels,
        }
    }
}

/// `GET /v1/changes`: one page of changes.
pub(super) type ChangesPage = ListPage<ChangeView, u64>;

struct Request {
    after: u64,
    limit: usize,
    kinds: Vec<String>,
    wait: std::time::Duration,
}

/// `after`, `limit` and `wait` at most once each, `kind` any number of
/// times up to [`MAX_CHANGE_KINDS`] (each a DNS label, repeats ignored).
/// Other parameters are ignored, as by every list of the API.
fn parse(pairs: Vec<(String, String)>) -> Result<Request, ApiError> {
    let (mut after, mut limit, mut wait) = (None, None, None);
    let mut kinds: Vec<String> = Vec::new();
    for (name, text) in pairs {
        match name.as_str() {
            "after" => page::set_once(&mut after, &name, text)?,
            "limit" => page::set_once(&mut limit, &name, text)?,
            "wait" => page::set_once(&mut wait, &name, text)?,
            "kind" => {
                check_label("kind", &text)?;
                if !kinds.contains(&text) {
                    if kinds.len() == MAX_CHANGE_KINDS {
                        return Err(ApiError::invalid(format!(
                            "at most {MAX_CHANGE_KINDS} kinds can be asked for at once"
                        )));
                    }
                    kinds.push(text);
                }
            }
            _ => {}
        }
    }
    Ok(Request {
        after: page::number_after(after.as_deref(), "a change position (0 for the beginning)")?
            .unwrap_or(0),
        limit: page::limit(limit.as_deref())?,
        kinds,
        wait: page::wait(wait.as_deref())?,
    })
}

/// The changes of `kinds` (all when empty) after `after`, at most `limit`,
/// and the position the page was read through. One more than `limit` is
/// read where the store's page allows it; a page of the store's largest
/// size is followed by a probe of one change.
async fn page_of(
    store: &dyn Store,
    cluster: &str,
    kinds: &[String],
    after: u64,
    limit: usize,
) -> Result<(ChangesPage, u64), ApiError> {
    let ask = (limit + 1).min(MAX_PAGE_SIZE);
    let read = store.changes(cluster, kinds, after, ask).await?;
    let mut through = read.through;
    let mut items: Vec<ChangeView> = read.changes.into_iter().map(ChangeView::from).collect();
    let more = if items.len() > limit {
        items.truncate(limit);
        true
    } else if ask == limit && items.len() == limit {
        // The store's largest page, full: is anything after it?
        let last = items.last().map_or(after, |c| c.position);
        let probe = store.changes(cluster, kinds, last, 1).await?;
        if probe.changes.is_empty() {
            through = probe.through;
            false
        } else {
            true
        }
    } else {
        false
    };
    Ok(assemble(items, through, more, after))
}

/// The page of `items` (at most the limit, in position order) read after
/// `after` through `through`, `more` when changes beyond the last item
/// were seen; and the position the reader has read through.
pub(super) fn assemble(
    items: Vec<ChangeView>,
    through: u64,
    more: bool,
    after: u64,
) -> (ChangesPage, u64) {
    let last = items.last().map_or(after, |c| c.position);
    let next = if more {
        Some(last)
    } else {
        // Positions read past that hold nothing for this reader.
        (through > last).then_some(through)
    };
    let read_through = if more { last } else { through.max(last) };
    (ListPage { items, next }, read_through)
}

/// `GET /v1/changes[?after=POSITION][&limit=N][&kind=K...][&wait=DURATION]`.
pub(super) async fn list(
    State(shared): State<AppState>,
    grant: Option<Extension<Grant>>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<ChangesPage>, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let mut request = parse(pairs)?;
    // A token limited to kinds reads only those: the kinds asked for must
    // be among them (403 otherwise), and asking for none means its own.
    if let Some(Extension(grant)) = &grant
        && let Some(kinds) = grant.stream_kinds(&request.kinds)?
    {
        request.kinds = kinds;
    }
    let store = &shared.api.store;
    let cluster = &shared.api.cluster;
    let mut poll = page::LongPoll::start(&shared, request.wait);
    let mut after = request.after;
    loop {
        // A long poll is answered from the read its fellow readers share
        // when that read covers it exactly (see `tail`); otherwise, and
        // without `wait`, from a read of its own.
        let shared_read = if request.wait.is_zero() {
            None
        } else {
            shared
                .tail
                .page(
                    store.as_ref(),
                    cluster,
                    poll.seen(),
                    &request.kinds,
                    after,
                    request.limit,
                )
                .await
        };
        let (page, read_through, more) = match shared_read {
            Some(served) => (served.page, served.read_through, served.more),
            None => {
                let (page, read_through) = page_of(
                    store.as_ref(),
                    cluster,
                    &request.kinds,
                    after,
                    request.limit,
                )
                .await?;
                (page, read_through, false)
            }
        };
        if !page.items.is_empty() || request.wait.is_zero() {
            return Ok(Json(page));
        }
        if more {
            // The shared read filled a page without a change for this
            // reader: read on at once, the feed will not move for it.
            after = read_through;
            continue;
        }
        // Nothing for this reader yet: wait for positions beyond what was
        // read, and read on from there (what was passed is not read again).
        if !poll.until_beyond(read_through).await {
            return Ok(Json(ListPage {
                items: page.items,
                // Never behind what this request already read past.
                next: page.next.or((after > request.after).then_some(after)),
            }));
        }
        after = read_through;
    }
}
