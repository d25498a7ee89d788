//! What a running kproxy tells an operator about the rules it applied:
//! `/trace` (one connection through them) and `/render` (the rules as
//! text), and `/state/table` (the state as `kproxy state` prints it),
//! for `kproxy trace`, `render` and `state` run on the node without a
//! source of their own.
//!
//! The admin crate knows no proxy mode: the binary plans and explains
//! behind [`Inspect`], with the same code its commands use, and this
//! module only routes. The work runs on a blocking thread: planning a
//! large state takes a while and must not hold up `/healthz`.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

/// One connection to trace, as `/trace` takes it in its query string.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct TraceQuery {
    /// The client's address.
    pub from: IpAddr,
    /// `IP:PORT`, `[IPv6]:PORT`, with an optional `/tcp`, `/udp`, `/sctp`.
    pub to: String,
    /// The interface the packet arrives on; none for the node's own traffic.
    pub iif: Option<String>,
}

/// Why the running kproxy cannot answer.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The query names no valid connection (400).
    #[error("{0}")]
    BadQuery(String),
    /// The running mode has nothing to show, e.g. no kernel rules to trace
    /// (501).
    #[error("{0}")]
    Unsupported(String),
    /// Planning or walking the rules failed (500).
    #[error("{0}")]
    Failed(String),
}

/// The binary's view of what it applied.
pub trait Inspect: Send + Sync {
    /// `kproxy trace`'s explanation of one connection.
    fn trace(&self, query: &TraceQuery) -> Result<String, InspectError>;
    /// `kproxy render`'s text of the applied rules.
    fn render(&self) -> Result<String, InspectError>;
    /// `kproxy state`'s table of the applied state.
    fn state_table(&self) -> Result<String, InspectError>;
}

/// `/trace`, `/render` and `/state/table`; merged into the metrics router
/// by the binary.
pub fn inspect_router(inspect: Arc<dyn Inspect>) -> Router {
    Router::new()
        .route("/trace", get(trace))
        .route("/render", get(render))
        .route("/state/table", get(state_table))
        .with_state(inspect)
}

async fn trace(State(inspect): State<Arc<dyn Inspect>>, Query(query): Query<TraceQuery>) -> Response {
    answer(inspect, move |i| i.trace(&query)).await
}

async fn render(State(inspect): State<Arc<dyn Inspect>>) -> Response {
    answer(inspect, |i| i.render()).await
}

async fn state_table(State(inspect): State<Arc<dyn Inspect>>) -> Response {
    answer(inspect, |i| i.state_table()).await
}

async fn answer(
    inspect: Arc<dyn Inspect>,
    work: impl FnOnce(&dyn Inspect) -> Result<String, InspectError> + Send + 'static,
) -> Response {
    let result = tokio::task::spawn_blocking(move || work(inspect.as_ref())).await;
    let (code, text) = match result {
        Ok(Ok(text)) => (StatusCode::OK, text),
        Ok(Err(e @ InspectError::BadQuery(_))) => (StatusCode::BAD_REQUEST, e.to_string()),
        Ok(Err(e @ InspectError::Unsupported(_))) => (StatusCode::NOT_IMPLEMENTED, e.to_string()),
        Ok(Err(e @ InspectError::Failed(_))) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("inspecting the applied rules failed: {e}")),
    };
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}
