//! `GET /v1/events`: the event log in commit order, optionally long-polled,
//! in the list envelope of [`super::page`] with an event's `seq` as cursor.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::auth::Grant;
use super::error::ApiError;
use super::page::{self, ListPage};
use super::{AppState, rfc3339};
use crate::limits::MAX_PAGE_SIZE;
use crate::store::{Event, Origin, Store};

#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    after: Option<String>,
    limit: Option<String>,
    wait: Option<String>,
}

/// One event as the API shows it.
#[derive(Debug, Serialize)]
pub(super) struct EventView {
    seq: u64,
    revision: u64,
    at: String,
    kind: String,
    name: String,
    reason: String,
    message: String,
    origin: Origin,
}

impl From<Event> for EventView {
    fn from(e: Event) -> Self {
        Self {
            seq: e.seq,
            revision: e.revision,
            at: rfc3339(e.at),
            kind: e.kind,
            name: e.name,
            reason: e.reason,
            message: e.message,
            origin: e.origin,
        }
    }
}

struct Request {
    after: u64,
    limit: usize,
    wait: Duration,
}

fn parse(query: EventsQuery) -> Result<Request, ApiError> {
    let after = page::number_after(
        query.after.as_deref(),
        "an event sequence number (0 for the beginning)",
    )?
    .unwrap_or(0);
    let limit = page::limit(query.limit.as_deref())?;
    let wait = page::wait(query.wait.as_deref())?;
    Ok(Request { after, limit, wait })
}

/// `GET /v1/events`: one page of events.
pub(super) type EventsPage = ListPage<EventView, u64>;

/// The events after `after`, at most `limit`, with the cursor of the next
/// page when more exist now. One more than `limit` is read where the
/// store's page allows it; a page of the store's largest size is followed
/// by a probe of one event, so `next` is never given for an empty page.
async fn page_of(
    store: &dyn Store,
    cluster: &str,
    after: u64,
    limit: usize,
) -> Result<EventsPage, ApiError> {
    let ask = (limit + 1).min(MAX_PAGE_SIZE);
    let events = store.events(cluster, after, ask).await?;
    let mut page = ListPage::from_one_more(
        events.into_iter().map(EventView::from).collect(),
        limit,
        |e| e.seq,
    );
    if ask == limit
        && page.items.len() == limit
        && let Some(last) = page.items.last().map(|e| e.seq)
        && !store.events(cluster, last, 1).await?.is_empty()
    {
        page.next = Some(last);
    }
    Ok(page)
}

/// The events after `after` of the kinds `grant` reaches, at most
/// `limit`, and the seq the page was read through. Events of other kinds
/// are passed over: `next` is then given even for a page with fewer items
/// (or none), so the reader resumes beyond what it may not see.
async fn reachable_page(
    store: &dyn Store,
    cluster: &str,
    grant: &Grant,
    after: u64,
    limit: usize,
) -> Result<(EventsPage, u64), ApiError> {
    let read = store.events(cluster, after, MAX_PAGE_SIZE).await?;
    let full = read.len() == MAX_PAGE_SIZE;
    let mut through = after;
    let mut items = Vec::new();
    let mut more = false;
    for event in read {
        if items.len() == limit {
            more = true;
            break;
        }
        through = event.seq;
        if grant.may_reach(&event.kind) {
            items.push(EventView::from(event));
        }
    }
    let next = if more || full {
        Some(through)
    } else {
        let last = items.last().map_or(after, |e: &EventView| e.seq);
        (through > last).then_some(through)
    };
    Ok((ListPage { items, next }, through))
}

pub(super) async fn list(
    State(shared): State<AppState>,
    grant: Option<Extension<Grant>>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Json<EventsPage>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let request = parse(query)?;
    let store = &shared.api.store;
    let cluster = &shared.api.cluster;

    let mut poll = page::LongPoll::start(&shared, request.wait);
    if let Some(Extension(grant)) = grant.filter(|Extension(g)| g.kinds.is_some()) {
        let mut after = request.after;
        loop {
            let (page, read_through) =
                reachable_page(store.as_ref(), cluster, &grant, after, request.limit).await?;
            if !page.items.is_empty() || request.wait.is_zero() {
                return Ok(Json(page));
            }
            if !poll.until_beyond(read_through).await {
                return Ok(Json(ListPage {
                    items: Vec::new(),
                    next: (read_through > request.after).then_some(read_through),
                }));
            }
            after = read_through;
        }
    }
    loop {
        let page = page_of(store.as_ref(), cluster, request.after, request.limit).await?;
        if !page.items.is_empty() || request.wait.is_zero() {
            return Ok(Json(page));
        }
        if !poll.until_beyond(request.after).await {
            return Ok(Json(ListPage::empty()));
        }
    }
}
