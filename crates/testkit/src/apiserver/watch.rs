//! Watch responses: one JSON event per chunk, replay from a resourceVersion,
//! label-selector transitions, bookmarks, the timeout, and 410 when the
//! start is compacted away.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::{Instant, Interval, interval_at, sleep_until};

use super::resource::Resource;
use super::selector::Selector;
use super::store::{Change, Start};
use super::{Shared, lock, wire};

/// A parsed watch request.
pub(crate) struct WatchRequest {
    pub(crate) resource: Resource,
    pub(crate) namespace: Option<String>,
    pub(crate) selector: Selector,
    /// `None` for resourceVersion 0 or absent: synthetic ADDED events first.
    pub(crate) after: Option<u64>,
    pub(crate) bookmarks: bool,
    /// `sendInitialEvents=true`: end the synthetic events with a bookmark.
    pub(crate) initial_events: bool,
    pub(crate) timeout: Option<Duration>,
}

/// The real server's final bookmark comes 2 s before the deadline; shorter
/// timeouts get theirs half way.
const FINAL_BOOKMARK_LEAD: Duration = Duration::from_secs(2);

struct Filter {
    resource: Resource,
    namespace: Option<String>,
    selector: Selector,
}

impl Filter {
    fn admits(&self, object: &Value) -> bool {
        let namespace = object["metadata"]["namespace"].as_str();
        self.namespace.as_deref().is_none_or(|want| namespace == Some(want)) && self.selector.matches(object)
    }

    /// The event a write shows this watch: an object leaving the selection is
    /// DELETED with its previous content at the write's rv, one entering it is ADDED.
    fn event(&self, change: &Change) -> Option<Bytes> {
        let was = change.old.as_deref().filter(|old| self.admits(old));
        let is = change.new.as_deref().filter(|new| self.admits(new));
        match (was, is) {
            (Some(_), Some(new)) => Some(wire::event("MODIFIED", self.resource, new)),
            (None, Some(new)) => Some(wire::event("ADDED", self.resource, new)),
            (Some(old), None) => {
                let mut old = old.clone();
                old["metadata"]["resourceVersion"] = change.rv.to_string().into();
                Some(wire::event("DELETED", self.resource, &old))
            }
            (None, None) => None,
        }
    }
}

/// The body of a watch response.
pub(crate) fn body(shared: Arc<Shared>, request: WatchRequest) -> Body {
    let subscription = lock(&shared.store).subscribe(request.resource, request.after);
    let subscription = match subscription {
        Ok(subscription) => subscription,
        Err(compacted) => {
            let requested = request.after.unwrap_or_default();
            let line = wire::too_old_event(requested, compacted.oldest);
            return Body::from_stream(futures::stream::iter([Ok::<_, io::Error>(line)]));
        }
    };
    let filter = Filter { resource: request.resource, namespace: request.namespace, selector: request.selector };
    let mut pending = VecDeque::new();
    let progress = match subscription.start {
        Start::Current { objects, rv } => {
            pending
                .extend(objects.iter().filter(|o| filter.admits(o)).map(|o| wire::event("ADDED", filter.resource, o)));
            if request.initial_events && request.bookmarks {
                pending.push_back(wire::bookmark(filter.resource, rv, true));
            }
            rv
        }
        Start::After { changes, rv } => {
            pending.extend(changes.iter().filter_map(|change| filter.event(change)));
            changes.iter().map(|c| c.rv).fold(rv, u64::max)
        }
    };
    let now = Instant::now();
    let deadline = request.timeout.map(|timeout| now + timeout);
    let final_bookmark = request
        .timeout
        .filter(|_| request.bookmarks)
        .map(|timeout| now + timeout - FINAL_BOOKMARK_LEAD.min(timeout / 2));
    let interval = shared.options.bookmark_interval.filter(|_| request.bookmarks).map(|d| interval_at(now + d, d));
    let watch = Watch {
        filter,
        pending,
        changes: subscription.changes,
        progress,
        deadline,
        final_bookmark,
        interval,
        ended: false,
        _open: OpenWatch::new(shared),
    };
    Body::from_stream(futures::stream::unfold(watch, |mut watch| async move {
        watch.next().await.map(|item| (item, watch))
    }))
}

struct Watch {
    filter: Filter,
    pending: VecDeque<Bytes>,
    changes: UnboundedReceiver<Arc<Change>>,
    /// The rv of the last write to the resource this watch has been through,
    /// shown or not: what bookmarks report.
    progress: u64,
    deadline: Option<Instant>,
    final_bookmark: Option<Instant>,
    interval: Option<Interval>,
    ended: bool,
    _open: OpenWatch,
}

impl Watch {
    /// The next chunk; an error makes hyper drop the connection without the
    /// terminating chunk, as a dying server or a broken network would.
    async fn next(&mut self) -> Option<Result<Bytes, io::Error>> {
        loop {
            if self.ended {
                return None;
            }
            if self.changes.is_closed() {
                self.ended = true;
                return Some(Err(io::Error::new(io::ErrorKind::ConnectionAborted, "watches disconnected")));
            }
            if let Some(line) = self.pending.pop_front() {
                return Some(Ok(line));
            }
            tokio::select! {
                biased;
                change = self.changes.recv() => {
                    // `None` is the disconnect, reported at the top of the loop.
                    if let Some(change) = change {
                        self.progress = self.progress.max(change.rv);
                        self.pending.extend(self.filter.event(&change));
                    }
                }
                () = at(self.deadline) => self.ended = true,
                () = at(self.final_bookmark) => {
                    self.final_bookmark = None;
                    self.pending.push_back(wire::bookmark(self.filter.resource, self.progress, false));
                }
                () = tick(&mut self.interval) => {
                    self.pending.push_back(wire::bookmark(self.filter.resource, self.progress, false));
                }
            }
        }
    }
}

async fn at(instant: Option<Instant>) {
    match instant {
        Some(instant) => sleep_until(instant).await,
        None => std::future::pending().await,
    }
}

async fn tick(interval: &mut Option<Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Counts an open watch for `FakeApiServer::open_watches` while it lives.
struct OpenWatch(Arc<Shared>);

impl OpenWatch {
    fn new(shared: Arc<Shared>) -> OpenWatch {
        shared.open_watches.send_modify(|n| *n += 1);
        OpenWatch(shared)
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.send_modify(|n| *n -= 1);
    }
}
