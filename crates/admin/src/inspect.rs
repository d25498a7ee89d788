//! What a running kproxy tells an operator about what it applied: `/trace`
//! (one connection through its rules), `/render` (the rules as text) and
//! `/applied` (the state of its last sync that applied, as JSON or as the
//! `kproxy state` table), for `kproxy trace`, `render` and `state` run on
//! the node without a source of their own. (`/state` is the state of the
//! last sync attempt.)
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

/// How `/applied` prints the state (`?output=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StateOutput {
    /// The `ProxyState` as JSON, as `/state` serves it.
    #[default]
    Json,
    /// The table `kproxy state` prints.
    Table,
}

/// `/applied`'s query.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
struct AppliedQuery {
    #[serde(default)]
    output: StateOutput,
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
    /// The applied state, as `kproxy state -o json` or its table prints it.
    fn state(&self, output: StateOutput) -> Result<String, InspectError>;
}

/// `/trace`, `/render` and `/applied`; merged into the metrics router by
/// the binary.
pub fn inspect_router(inspect: Arc<dyn Inspect>) -> Router {
    Router::new()
        .route("/trace", get(trace))
        .route("/render", get(render))
        .route("/applied", get(applied))
        .with_state(inspect)
}

async fn trace(State(inspect): State<Arc<dyn Inspect>>, Query(query): Query<TraceQuery>) -> Response {
    answer(inspect, move |i| i.trace(&query)).await
}

async fn render(State(inspect): State<Arc<dyn Inspect>>) -> Response {
    answer(inspect, |i| i.render()).await
}

async fn applied(State(inspect): State<Arc<dyn Inspect>>, Query(query): Query<AppliedQuery>) -> Response {
    answer(inspect, move |i| i.state(query.output)).await
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

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    /// Answers a trace with the query it got; refuses to render.
    struct Echo;

    impl Inspect for Echo {
        fn trace(&self, query: &TraceQuery) -> Result<String, InspectError> {
            if query.to.is_empty() {
                return Err(InspectError::BadQuery("--to: empty".into()));
            }
            Ok(format!("{query:?}"))
        }

        fn render(&self) -> Result<String, InspectError> {
            Err(InspectError::Unsupported("no kernel rules".into()))
        }

        fn state(&self, output: StateOutput) -> Result<String, InspectError> {
            Ok(format!("{output:?}\n"))
        }
    }

    async fn get(path: &str) -> (StatusCode, String) {
        let router = inspect_router(Arc::new(Echo));
        let response = router.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn trace_takes_its_connection_from_the_percent_encoded_query() {
        let (status, body) = get("/trace?from=fd00%3A%3A1&to=%5Bfd00%3A%3A2%5D%3A80%2Fudp&iif=eth0").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let expected =
            TraceQuery { from: "fd00::1".parse().unwrap(), to: "[fd00::2]:80/udp".into(), iif: Some("eth0".into()) };
        assert_eq!(body, format!("{expected:?}"));
    }

    #[tokio::test]
    async fn a_bad_query_is_400_and_what_the_mode_cannot_show_is_501_with_the_reason() {
        assert_eq!(get("/trace?from=10.0.0.1&to=").await, (StatusCode::BAD_REQUEST, "--to: empty".into()));
        assert_eq!(get("/trace?to=10.0.0.1:80").await.0, StatusCode::BAD_REQUEST, "from is required");
        assert_eq!(get("/render").await, (StatusCode::NOT_IMPLEMENTED, "no kernel rules".into()));
        assert_eq!(get("/applied").await, (StatusCode::OK, "Json\n".into()));
        assert_eq!(get("/applied?output=table").await, (StatusCode::OK, "Table\n".into()));
        assert_eq!(get("/applied?output=yaml").await.0, StatusCode::BAD_REQUEST);
    }
}
