//! Health-check node ports: for each LoadBalancer Service with
//! `externalTrafficPolicy: Local`, an HTTP server on its
//! `healthCheckNodePort` telling the load balancer whether this node has
//! endpoints for it (SEMANTICS.md, "Health and metrics").
//!
//! The runner records each service's port and local endpoint count in a
//! [`HealthChecks`] registry after every sync; [`serve_health_checks`] keeps
//! one listener per port and node address in step with it.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kproxy_model::{ProxyState, ServiceName};
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::health::{Clock, Health};

/// One service's health check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    pub port: u16,
    /// Distinct addresses of this node's ready endpoints of the service.
    pub local_endpoints: usize,
}

/// The services that have a health-check node port.
#[derive(Debug, Default)]
pub struct HealthChecks {
    checks: Mutex<BTreeMap<ServiceName, HealthCheck>>,
    ports_changed: Notify,
}

impl HealthChecks {
    fn checks(&self) -> std::sync::MutexGuard<'_, BTreeMap<ServiceName, HealthCheck>> {
        self.checks.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records `service`'s check (`None`: it has none any more).
    pub fn set(&self, service: ServiceName, check: Option<HealthCheck>) {
        let mut checks = self.checks();
        let old_port = checks.get(&service).map(|c| c.port);
        match check {
            Some(check) => checks.insert(service, check),
            None => checks.remove(&service),
        };
        if old_port != check.map(|c| c.port) {
            self.ports_changed.notify_one();
        }
    }

    /// The service checked on `port`, with its check.
    pub fn by_port(&self, port: u16) -> Option<(ServiceName, HealthCheck)> {
        self.checks().iter().find(|(_, c)| c.port == port).map(|(s, c)| (s.clone(), *c))
    }

    fn ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self.checks().values().map(|c| c.port).collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }
}

/// What one health-check server answers from.
#[derive(Clone)]
pub struct HealthCheckState {
    pub checks: Arc<HealthChecks>,
    pub health: Arc<Health>,
    pub clock: Arc<dyn Clock>,
    pub port: u16,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    service: ServiceRef,
    local_endpoints: usize,
    service_proxy_healthy: bool,
}

#[derive(Serialize)]
struct ServiceRef {
    namespace: String,
    name: String,
}

/// The router of one health-check port: every path answers.
pub fn health_check_router(state: HealthCheckState) -> Router {
    Router::new().fallback(answer).with_state(state)
}

async fn answer(State(state): State<HealthCheckState>) -> Response {
    let Some((service, check)) = state.checks.by_port(state.port) else {
        // Unregistered a moment ago: like upstream, an empty 200.
        return StatusCode::OK.into_response();
    };
    // The node's eligibility is /healthz's business, not the service's.
    let healthy = state.health.report(state.clock.now().0).healthy;
    let body = Body {
        service: ServiceRef { namespace: service.namespace.to_string(), name: service.name.to_string() },
        local_endpoints: check.local_endpoints,
        service_proxy_healthy: healthy,
    };
    let code = if check.local_endpoints > 0 && healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let weight = HeaderValue::from(check.local_endpoints);
    let json = serde_json::to_string(&body).expect("a plain struct serialises");
    (
        code,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (HeaderName::from_static("x-load-balancing-endpoint-weight"), weight),
        ],
        json,
    )
        .into_response()
}

/// Keeps one listener per health-check port on each node-port address (or
/// on every address when there are none) until the process ends. A port
/// that cannot be bound is logged and retried when the ports change.
pub async fn serve_health_checks(
    checks: Arc<HealthChecks>,
    health: Arc<Health>,
    clock: Arc<dyn Clock>,
    mut state: watch::Receiver<Arc<ProxyState>>,
) {
    let mut listeners: HashMap<SocketAddr, JoinHandle<()>> = HashMap::new();
    let mut last: Option<Vec<SocketAddr>> = None;
    loop {
        let addresses = {
            let state = state.borrow();
            match state.node.node_port_addresses.as_slice() {
                [] => vec![IpAddr::V6(Ipv6Addr::UNSPECIFIED)],
                some => some.to_vec(),
            }
        };
        let wanted: Vec<SocketAddr> =
            checks.ports().into_iter().flat_map(|p| addresses.iter().map(move |a| SocketAddr::new(*a, p))).collect();
        // Most wake-ups are syncs that changed nothing here.
        if last.as_ref() == Some(&wanted) {
            tokio::select! {
                () = checks.ports_changed.notified() => {}
                changed = state.changed() => if changed.is_err() { return },
            }
            continue;
        }
        last = Some(wanted.clone());
        listeners.retain(|addr, task| {
            let keep = wanted.contains(addr) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for addr in wanted {
            if listeners.contains_key(&addr) {
                continue;
            }
            match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => {
                    info!(%addr, "serving a health-check node port");
                    let router = health_check_router(HealthCheckState {
                        checks: checks.clone(),
                        health: health.clone(),
                        clock: clock.clone(),
                        port: addr.port(),
                    });
                    listeners.insert(
                        addr,
                        tokio::spawn(async move {
                            let _ = axum::serve(listener, router).await;
                        }),
                    );
                }
                Err(e) => warn!(%addr, error = %e, "cannot listen on a health-check node port"),
            }
        }
        tokio::select! {
            () = checks.ports_changed.notified() => {}
            changed = state.changed() => if changed.is_err() { return },
        }
    }
}
