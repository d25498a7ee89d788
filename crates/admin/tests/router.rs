//! The admin routers, driven without sockets, plus one real socket.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use kproxy_admin::{AdminState, Clock, Health, Metrics, health_router, metrics_router};
use kproxy_model::{IgnoreReason, NodeState, ProxyState, ServiceName};
use tokio::sync::watch;
use tower::ServiceExt;

/// A clock the test moves by hand.
struct FakeClock {
    start: Instant,
    offset: Mutex<Duration>,
}

impl FakeClock {
    fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> (Instant, SystemTime) {
        let offset = *self.offset.lock().unwrap();
        (self.start + offset, SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + offset)
    }
}

struct Fixture {
    admin: Arc<AdminState>,
    clock: Arc<FakeClock>,
    state_tx: watch::Sender<Arc<ProxyState>>,
}

fn fixture() -> Fixture {
    let clock = Arc::new(FakeClock { start: Instant::now(), offset: Mutex::new(Duration::ZERO) });
    let (state_tx, state) = watch::channel(Arc::new(ProxyState::default()));
    let admin = Arc::new(AdminState {
        health: Arc::new(Health::new(Duration::from_secs(60))),
        metrics: Arc::new(Metrics::for_mode(Some(kproxy_config::ProxyMode::Nftables), &Default::default())),
        state,
        mode: "dry-run".into(),
        clock: clock.clone(),
        listing: None,
        not_programmed: None,
    });
    Fixture { admin, clock, state_tx }
}

async fn get(router: axum::Router, path: &str) -> (StatusCode, String) {
    let response = router.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn healthz_is_ok_with_the_upstream_body() {
    let f = fixture();
    let (status, body) = get(health_router(f.admin.clone()), "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        r#"{"lastUpdated":"2027-01-15T08:00:00Z","currentTime":"2027-01-15T08:00:00Z","nodeEligible":true,"healthy":true,"mode":"dry-run"}"#
    );
}

#[tokio::test]
async fn an_update_not_applied_within_the_timeout_fails_both_probes() {
    let f = fixture();
    let (now, wall) = f.clock.now();
    f.admin.health.updated((now, wall));
    f.admin.health.queued_update(now);
    f.clock.advance(Duration::from_secs(59));
    assert_eq!(get(health_router(f.admin.clone()), "/healthz").await.0, StatusCode::OK);
    f.clock.advance(Duration::from_secs(1));
    let (status, body) = get(health_router(f.admin.clone()), "/healthz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains(r#""lastUpdated":"2027-01-15T08:00:00Z""#), "{body}");
    assert!(body.contains(r#""healthy":false"#), "{body}");
    assert_eq!(get(health_router(f.admin.clone()), "/livez").await.0, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn an_ineligible_node_fails_healthz_but_not_livez() {
    let f = fixture();
    f.admin.health.set_node_eligible(false);
    let (status, body) = get(health_router(f.admin.clone()), "/healthz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains(r#""nodeEligible":false"#), "{body}");
    let (status, body) = get(health_router(f.admin.clone()), "/livez").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("nodeEligible"), "{body}");
}

#[tokio::test]
async fn a_source_lost_too_long_degrades_healthz_without_failing_it() {
    let f = fixture();
    f.admin.health.source_lost("services", f.clock.now().0, "connection refused".into());
    f.clock.advance(Duration::from_secs(59));
    let (status, body) = get(health_router(f.admin.clone()), "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("degraded"), "within the timeout: {body}");
    f.clock.advance(Duration::from_secs(2));
    let (status, body) = get(health_router(f.admin.clone()), "/healthz").await;
    assert_eq!(status, StatusCode::OK, "nothing is queued: the rules are as fresh as they can be");
    assert!(body.contains(r#""degraded":true"#), "{body}");
    assert!(body.contains(r#""sourceError":"services: failing for 61s: connection refused""#), "{body}");
    let (_, body) = get(health_router(f.admin.clone()), "/livez").await;
    assert!(!body.contains("degraded"), "{body}");
    f.admin.health.source_recovered("services");
    let (status, body) = get(health_router(f.admin.clone()), "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("degraded") && !body.contains("sourceError"), "{body}");
}

#[tokio::test]
async fn metrics_use_upstream_names_and_count_probes() {
    let f = fixture();
    get(health_router(f.admin.clone()), "/healthz").await;
    f.admin.metrics.observe_sync(Duration::from_millis(3), true);
    let (status, body) = get(metrics_router(f.admin.clone()), "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        r#"kubeproxy_proxy_healthz_total{code="200"} 1"#,
        r#"kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1"#,
        r#"kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="0.004"} 1"#,
        "# TYPE kubeproxy_sync_proxy_rules_service_changes_total counter",
        "# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_pending gauge",
        "kproxy_manifest_invalid_documents_total 0",
    ] {
        assert!(body.contains(line), "missing {line:?} in\n{body}");
    }
}

#[tokio::test]
async fn state_serves_the_latest_proxy_state_as_json() {
    let f = fixture();
    let state = ProxyState {
        node: NodeState { name: "node-a".into(), eligible: true, ..NodeState::default() },
        ..ProxyState::default()
    };
    f.state_tx.send(Arc::new(state)).unwrap();
    let (status, body) = get(metrics_router(f.admin.clone()), "/state").await;
    assert_eq!(status, StatusCode::OK);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["node"]["name"], "node-a");
    assert_eq!(json["ipv4"]["servicePorts"], serde_json::json!([]));
    assert_eq!(get(metrics_router(f.admin.clone()), "/proxyMode").await.1, "dry-run");
}

#[tokio::test]
async fn state_carries_the_mode_ignored_services_and_what_the_mode_does_not_program() {
    let f = fixture();
    let mut state = ProxyState::default();
    state.ignored.insert(ServiceName::new("default", "db"), IgnoreReason::Headless);
    f.state_tx.send(Arc::new(state)).unwrap();
    let skips = |state: &ProxyState| vec![format!("{} ignored, one skipped", state.ignored.len())];
    let admin = AdminState {
        health: f.admin.health.clone(),
        metrics: f.admin.metrics.clone(),
        state: f.admin.state.clone(),
        mode: "nftables".into(),
        clock: f.clock.clone(),
        listing: None,
        not_programmed: Some(Arc::new(skips)),
    };
    let (status, body) = get(metrics_router(Arc::new(admin)), "/state").await;
    assert_eq!(status, StatusCode::OK);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["mode"], "nftables");
    assert_eq!(json["ignored"][0]["reason"], "headless (clusterIP: None)");
    assert_eq!(json["notProgrammed"], serde_json::json!(["1 ignored, one skipped"]));
    assert_eq!(json["warnings"], serde_json::json!([]));
}

#[tokio::test]
async fn healthz_answers_over_a_real_socket() {
    let f = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, health_router(f.admin)).await });
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.to_ascii_lowercase().contains("content-type: application/json"), "{response}");
    assert!(response.ends_with(r#""healthy":true,"mode":"dry-run"}"#), "{response}");
    server.abort();
}

#[tokio::test]
async fn healthz_says_why_the_last_sync_failed_until_one_succeeds() {
    let f = fixture();
    f.admin.health.sync_failed("the kernel refused the transaction at `add table ip kproxy`: EPERM");
    let (status, body) = get(health_router(f.admin.clone()), "/healthz").await;
    assert_eq!(status, StatusCode::OK, "a failure alone is not staleness: {body}");
    assert!(
        body.contains(r#""lastSyncError":"the kernel refused the transaction at `add table ip kproxy`: EPERM""#),
        "{body}"
    );
    let (_, body) = get(health_router(f.admin.clone()), "/livez").await;
    assert!(!body.contains("lastSyncError"), "{body}");
    f.admin.health.updated(f.clock.now());
    let (_, body) = get(health_router(f.admin.clone()), "/healthz").await;
    assert!(!body.contains("lastSyncError"), "{body}");
}
