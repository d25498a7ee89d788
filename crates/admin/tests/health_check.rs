//! Health-check node ports, answered through the router.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use kproxy_admin::health_check::{HealthCheckState, health_check_router};
use kproxy_admin::{Clock, Health, HealthCheck, HealthChecks};
use kproxy_model::ServiceName;
use tower::ServiceExt;

struct Fixed(Instant);

impl Clock for Fixed {
    fn now(&self) -> (Instant, SystemTime) {
        (self.0, SystemTime::UNIX_EPOCH)
    }
}

async fn ask(state: HealthCheckState) -> (StatusCode, Option<String>, String) {
    let response =
        health_check_router(state).oneshot(Request::get("/anything").body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let weight = response.headers().get("x-load-balancing-endpoint-weight").map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, weight, String::from_utf8(body.to_vec()).unwrap())
}

fn state(local_endpoints: usize, health: Arc<Health>, now: Instant) -> HealthCheckState {
    let checks = Arc::new(HealthChecks::default());
    checks.set(ServiceName::new("default", "shop"), Some(HealthCheck { port: 32000, local_endpoints }));
    HealthCheckState { checks, health, clock: Arc::new(Fixed(now)), port: 32000 }
}

#[tokio::test]
async fn a_node_with_local_endpoints_answers_200_with_their_count() {
    let now = Instant::now();
    let (status, weight, body) = ask(state(2, Arc::new(Health::new(Duration::from_secs(60))), now)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(weight.as_deref(), Some("2"));
    assert_eq!(
        body,
        r#"{"service":{"namespace":"default","name":"shop"},"localEndpoints":2,"serviceProxyHealthy":true}"#
    );
}

#[tokio::test]
async fn no_local_endpoints_or_a_stale_proxy_answers_503() {
    let now = Instant::now();
    let (status, weight, _) = ask(state(0, Arc::new(Health::new(Duration::from_secs(60))), now)).await;
    assert_eq!((status, weight.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("0")));

    let health = Arc::new(Health::new(Duration::from_secs(60)));
    health.queued_update(now);
    let (status, _, body) = ask(state(1, health, now + Duration::from_secs(61))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.ends_with(r#""serviceProxyHealthy":false}"#), "{body}");
}

#[tokio::test]
async fn an_unregistered_port_answers_an_empty_200() {
    let now = Instant::now();
    let s = state(1, Arc::new(Health::new(Duration::from_secs(60))), now);
    s.checks.set(ServiceName::new("default", "shop"), None);
    assert_eq!(ask(s).await, (StatusCode::OK, None, String::new()));
}
