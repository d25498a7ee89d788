//! What the admin endpoints say about kproxy itself: `/configz` in
//! upstream's shape, and the running mode on the health probes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use kproxy_admin::{AdminState, Health, Metrics, SystemClock, configz_router, health_router, metrics_router};
use kproxy_model::ProxyState;
use tokio::sync::watch;
use tower::ServiceExt;

fn admin(mode: &str) -> Arc<AdminState> {
    let (_, state) = watch::channel(Arc::new(ProxyState::default()));
    Arc::new(AdminState {
        health: Arc::new(Health::new(Duration::from_secs(60))),
        metrics: Arc::new(Metrics::new()),
        state,
        mode: mode.into(),
        clock: Arc::new(SystemClock),
        listing: None,
        not_programmed: None,
    })
}

/// (status, content type, nosniff header, body)
async fn get(router: axum::Router, path: &str) -> (StatusCode, String, Option<String>, String) {
    let response = router.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let header_value = |name| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let content_type = header_value(header::CONTENT_TYPE).unwrap_or_default();
    let nosniff = header_value(header::X_CONTENT_TYPE_OPTIONS);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, content_type, nosniff, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn both_probes_name_the_running_mode_after_upstreams_fields() {
    for mode in ["dry-run", "nftables"] {
        for path in ["/healthz", "/livez"] {
            let (status, _, _, body) = get(health_router(admin(mode)), path).await;
            assert_eq!(status, StatusCode::OK);
            let json: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(json["mode"], mode, "{path}: {body}");
            assert_eq!(json["healthy"], true, "{path}: {body}");
            assert!(json["lastUpdated"].is_string() && json["currentTime"].is_string(), "{path}: {body}");
        }
    }
}

#[tokio::test]
async fn configz_serves_its_body_as_upstreams_configz_does() {
    let body = r#"{"kubeproxy.config.k8s.io":{"mode":"ipvs"}}"#.to_owned();
    let router = metrics_router(admin("ipvs")).merge(configz_router(body.clone()));
    let (status, content_type, nosniff, served) = get(router.clone(), "/configz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "application/json");
    assert_eq!(nosniff.as_deref(), Some("nosniff"));
    assert_eq!(served, body);
    // The rest of the metrics router is still there.
    assert_eq!(get(router, "/proxyMode").await.3, "ipvs");
}
