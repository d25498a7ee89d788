//! The HTTP routers: one for health checks, one for operators.

use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kproxy_model::ProxyState;
use serde::Serialize;
use tokio::sync::watch;

use crate::health::{Clock, Health};
use crate::listing::Listing;
use crate::metrics::{CodeLabel, Metrics};
use crate::state_report::{NotProgrammed, StateReport};

/// What the handlers read.
pub struct AdminState {
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    /// The state as of the last fold of source events.
    pub state: watch::Receiver<Arc<ProxyState>>,
    /// The name of the running dataplane, for `/proxyMode`.
    pub mode: String,
    pub clock: Arc<dyn Clock>,
    /// The mode's own `/list` (with connection counts); `None` lists the
    /// state, with `random` for services that choose no scheduler.
    pub listing: Option<Arc<dyn Listing>>,
    /// What the mode's planner leaves out of the state, for `/state`
    /// (`kproxy run` always gives one; `None` reports nothing left out).
    pub not_programmed: Option<Arc<dyn NotProgrammed>>,
}

/// `/healthz` and `/livez`, for load balancers and the kubelet.
pub fn health_router(state: Arc<AdminState>) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/livez", get(livez)).with_state(state)
}

/// `/configz`: upstream's body, `{"kubeproxy.config.k8s.io": {..}}` (made
/// by `kproxy_config::configz`), served as upstream's configz serves it.
/// Merged into the metrics router by the binary.
pub fn configz_router(body: String) -> Router {
    let body: Arc<str> = body.into();
    let handler = move || {
        let body = body.clone();
        async move {
            let headers = [(header::CONTENT_TYPE, "application/json"), (header::X_CONTENT_TYPE_OPTIONS, "nosniff")];
            (headers, body.to_string()).into_response()
        }
    };
    Router::new().route("/configz", get(handler))
}

/// `/metrics`, `/state`, `/proxyMode` and the health endpoints again, for
/// operators (bound to loopback by default).
pub fn metrics_router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/state", get(proxy_state))
        .route("/list", get(list))
        .route("/proxyMode", get(proxy_mode))
        .route("/healthz", get(healthz))
        .route("/livez", get(livez))
        .with_state(state)
}

/// Upstream's body: `{"lastUpdated":..,"currentTime":..,"nodeEligible":..,
/// "healthy":..,"status":{..}}`; `nodeEligible` only on `/healthz`. kproxy
/// adds `mode`, the running dataplane (`dry-run` when nothing is
/// programmed), after upstream's fields.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HealthBody {
    last_updated: String,
    current_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_eligible: Option<bool>,
    healthy: bool,
    /// `/healthz` only, while the source has been lost longer than the
    /// timeout: the rules are kept but may be going stale.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    degraded: bool,
    /// What of the source is lost, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    source_error: Option<String>,
    /// kproxy: the running dataplane, as `/proxyMode` names it.
    mode: String,
    /// `/healthz` only: why the last sync failed, until one succeeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_sync_error: Option<String>,
}

async fn healthz(State(admin): State<Arc<AdminState>>) -> Response {
    health_response(&admin, true)
}

async fn livez(State(admin): State<Arc<AdminState>>) -> Response {
    health_response(&admin, false)
}

fn health_response(admin: &AdminState, with_node: bool) -> Response {
    let (now, wall) = admin.clock.now();
    let report = admin.health.report(now);
    let healthy = report.healthy && (!with_node || report.node_eligible);
    // Like upstream, a healthy /healthz reports the current time as its
    // last update: "nothing is waiting" is as good as "just updated".
    let last_updated = match (with_node && healthy, report.last_updated) {
        (true, _) => Some(wall),
        (false, last) => last,
    };
    let body = HealthBody {
        last_updated: last_updated.map(timestamp).unwrap_or_else(|| timestamp(SystemTime::UNIX_EPOCH)),
        current_time: timestamp(wall),
        node_eligible: with_node.then_some(report.node_eligible),
        healthy,
        degraded: with_node && !report.source_current,
        source_error: report.source_error.filter(|_| with_node),
        mode: admin.mode.clone(),
        last_sync_error: report.sync_error.filter(|_| with_node),
    };
    let code = if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let counter = if with_node { &admin.metrics.healthz_total } else { &admin.metrics.livez_total };
    counter.get_or_create(&CodeLabel { code: code.as_u16() }).inc();
    let json = serde_json::to_string(&body).expect("a plain struct serialises");
    let headers = [
        (header::CONTENT_TYPE, "application/json"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Tells a starting kproxy that this is kproxy, not kube-proxy.
        (header::SERVER, "kproxy"),
    ];
    (code, headers, json).into_response()
}

/// RFC 3339 with nanoseconds, like Go's `time.Time` in JSON.
fn timestamp(time: SystemTime) -> String {
    jiff::Timestamp::try_from(time).map(|t| t.to_string()).unwrap_or_default()
}

async fn metrics(State(admin): State<Arc<AdminState>>) -> Response {
    ([(header::CONTENT_TYPE, Metrics::CONTENT_TYPE)], admin.metrics.encode()).into_response()
}

async fn list(State(admin): State<Arc<AdminState>>) -> Response {
    let servers = match &admin.listing {
        Some(listing) => listing.list(),
        // Without the mode's words: the endpoint is reached by NAT.
        None => crate::listing::from_state(&admin.state.borrow(), kproxy_model::Scheduler::Random, &|_, _, _, _| {
            "Masq".into()
        }),
    };
    let json = serde_json::to_string(&servers).expect("plain structs serialise");
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

/// The state with what the mode leaves out of it ([`StateReport`]), the
/// document `kproxy state -o json` prints.
async fn proxy_state(State(admin): State<Arc<AdminState>>) -> Response {
    let state = admin.state.borrow().clone();
    let admin = admin.clone();
    let json = tokio::task::spawn_blocking(move || {
        let skips = admin.not_programmed.as_ref().map(|n| n.not_programmed(&state)).unwrap_or_default();
        serde_json::to_string(&StateReport::new(&admin.mode, &state, skips))
    })
    .await;
    match json {
        Ok(Ok(json)) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn proxy_mode(State(admin): State<Arc<AdminState>>) -> String {
    admin.mode.clone()
}
