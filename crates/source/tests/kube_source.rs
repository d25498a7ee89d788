//! The Kubernetes API source against the in-process fake API server (real
//! wire protocol, capture-shaped JSON), folded into the state the proxy
//! would program.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kproxy_model::{IpFamily, ProxyState};
use kproxy_source::kube::{
    Connection, HealthSink, KubeMetrics, KubeOptions, KubeSource, Resource, SELECTOR_SERVICES, check, client,
};
use kproxy_state::{Kind, Object, SourceEvent, StateBuilder, StateConfig};
use kproxy_testkit::apiserver::{FakeApiServer, Options};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

/// What the health sink was told, in order.
#[derive(Default)]
struct Recorder {
    log: Mutex<Vec<(Resource, bool)>>,
}

impl Recorder {
    fn lost_now(&self) -> bool {
        let log = self.log.lock().unwrap();
        let mut state: BTreeMap<&str, bool> = BTreeMap::new();
        for (resource, lost) in log.iter() {
            state.insert(resource.as_str(), *lost);
        }
        state.values().any(|lost| *lost)
    }

    fn ever_lost(&self) -> bool {
        self.log.lock().unwrap().iter().any(|(_, lost)| *lost)
    }
}

impl HealthSink for Recorder {
    fn lost(&self, resource: Resource, _error: String) {
        self.log.lock().unwrap().push((resource, true));
    }

    fn recovered(&self, resource: Resource) {
        let mut log = self.log.lock().unwrap();
        // Only transitions matter; every response reports recovery.
        if log.iter().rev().find(|(r, _)| *r == resource).is_some_and(|(_, lost)| *lost) {
            log.push((resource, false));
        }
    }
}

/// A running source and the state built from its events.
struct Running {
    events: mpsc::Receiver<SourceEvent>,
    builder: StateBuilder,
    health: Arc<Recorder>,
    metrics: KubeMetrics,
    /// Events in arrival order (kind, and whether `Synced` had come yet).
    seen: Vec<(String, bool)>,
    task: tokio::task::JoinHandle<()>,
    _kubeconfig: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn connection_to(server: &FakeApiServer) -> (Connection, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, server.kubeconfig()).unwrap();
    (Connection { kubeconfig: Some(path), master: None, qps: 50.0, burst: 100 }, dir)
}

fn options(service_cidrs: bool) -> KubeOptions {
    KubeOptions { service_cidrs, max_backoff: Duration::from_millis(300), ..KubeOptions::new("node-a") }
}

async fn start(server: &FakeApiServer) -> Running {
    start_with(server, options(true)).await
}

async fn start_with(server: &FakeApiServer, options: KubeOptions) -> Running {
    let (connection, dir) = connection_to(server);
    let health = Arc::new(Recorder::default());
    let sink: Arc<dyn HealthSink> = health.clone();
    let (client, _url) = client(&connection, sink.clone()).await.unwrap();
    let metrics = KubeMetrics::default();
    let (tx, events) = mpsc::channel(64);
    let source = KubeSource::new(client, options, metrics.clone(), sink);
    let task = tokio::spawn(source.run(tx));
    let config = StateConfig { node_name: "node-a".into(), node_required: true, ..StateConfig::default() };
    Running { events, builder: StateBuilder::new(config), health, metrics, seen: Vec::new(), task, _kubeconfig: dir }
}

impl Running {
    fn take(&mut self, event: SourceEvent) {
        let what = match &event {
            SourceEvent::Apply(object) => format!("apply {}", object.key()),
            SourceEvent::Delete(key) => format!("delete {key}"),
            SourceEvent::Synced => "synced".into(),
        };
        self.seen.push((what, self.builder.is_synced()));
        self.builder.apply(event);
    }

    /// Feeds events into the state until `done` holds of it (checked after
    /// every burst), or fails naming `what` after 10 s.
    async fn until(&mut self, what: &str, done: impl Fn(&ProxyState) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.builder.is_synced() {
                self.builder.take_changes();
                if done(self.builder.state()) {
                    return;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match timeout(left, self.events.recv()).await {
                Ok(Some(event)) => self.take(event),
                Ok(None) => panic!("the source stopped while waiting for {what}"),
                Err(_) => panic!("no {what} within 10 s; events so far: {:#?}", self.seen),
            }
            while let Ok(event) = self.events.try_recv() {
                self.take(event);
            }
        }
    }

    /// Waits a little and asserts that no event came.
    async fn quiet_for(&mut self, period: Duration) {
        if let Ok(Some(event)) = timeout(period, self.events.recv()).await {
            panic!("unexpected event {event:?}");
        }
    }
}

/// `namespace/name:port/PROTO` -> sorted `ip:port` of the IPv4 endpoints
/// kproxy would use.
fn endpoints(state: &ProxyState) -> BTreeMap<String, Vec<String>> {
    state
        .family(IpFamily::V4)
        .service_ports
        .values()
        .map(|p| {
            let mut eps: Vec<String> = p.cluster_endpoints.iter().map(|e| e.addr().to_string()).collect();
            eps.sort();
            (p.name.to_string(), eps)
        })
        .collect()
}

fn has_port(state: &ProxyState, name: &str) -> bool {
    endpoints(state).contains_key(name)
}

fn service(namespace: &str, name: &str, cluster_ip: &str, port: u16) -> Value {
    json!({
        "kind": "Service", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
            "ipFamilies": ["IPv4"], "ports": [{"name": "http", "protocol": "TCP", "port": port, "targetPort": 8080}]
        }
    })
}

fn slice(namespace: &str, name: &str, service: &str, ips: &[&str]) -> Value {
    let endpoints: Vec<Value> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true, "serving": true, "terminating": false}, "nodeName": "node-b"}))
        .collect();
    json!({
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
    })
}

fn node(name: &str, zone: &str, taints: Value) -> Value {
    json!({
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"], "taints": taints},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.21"}]}
    })
}

async fn captured_cluster() -> FakeApiServer {
    let server = FakeApiServer::start().await;
    for list in ["services-list.json", "endpointslices-list.json", "nodes-list.json"] {
        server.load_list_fixture(list);
    }
    server
}

#[tokio::test]
async fn the_initial_list_completes_before_synced_and_skips_what_kube_proxy_skips() {
    let server = captured_cluster().await;
    let mut source = start(&server).await;
    source.until("the first sync", |_| true).await;

    let before_synced =
        |prefix: &str| source.seen.iter().filter(|(what, synced)| !synced && what.starts_with(prefix)).count();
    // 12 services minus mesh-only (another proxy's, filtered by the selector);
    // 12 slices minus db's (headless) and mesh-only's; this node only.
    assert_eq!(before_synced("apply Service "), 11, "{:#?}", source.seen);
    assert_eq!(before_synced("apply EndpointSlice "), 10, "{:#?}", source.seen);
    assert_eq!(before_synced("apply Node "), 1, "{:#?}", source.seen);
    assert!(!source.seen.iter().any(|(what, _)| what.contains("mesh-only") || what.contains("node-b")));

    let state = source.builder.state();
    let eps = endpoints(state);
    // web's `http` port: the ready endpoints of both slices, narrowed by
    // topology hints to node-a's zone (zone-a): 10.244.2.14 is hinted for
    // zone-b; the not-ready and terminating ones are not used.
    assert_eq!(eps["shop/web:http/TCP"], ["10.244.1.10:8080", "10.244.1.13:8080"], "{eps:#?}");
    assert!(eps.contains_key("shop/dns:dns/UDP") && eps.contains_key("shop/dns:dns-tcp/TCP"), "{eps:#?}");
    assert!(!eps.keys().any(|k| k.starts_with("shop/db:") || k.starts_with("shop/legacy-crm")), "{eps:#?}");
    assert_eq!(state.node.zone.as_deref(), Some("zone-a"));
    assert!(state.node.eligible);

    let services = KubeMetrics::label_for(Resource::Services);
    assert_eq!(source.metrics.lists.get_or_create(&services).get(), 1);
    assert_eq!(source.metrics.objects.get_or_create(&services).get(), 11);
}

#[tokio::test]
async fn adds_updates_and_deletes_of_each_kind_reach_the_state() {
    let server = FakeApiServer::start().await;
    server.apply(node("node-a", "zone-a", json!([])));
    let mut source = start(&server).await;
    source.until("the first sync", |_| true).await;

    server.apply(service("shop", "promo", "10.96.0.50", 80));
    server.apply(slice("shop", "promo-1", "promo", &["10.244.2.1"]));
    source
        .until("promo with one endpoint", |s| {
            endpoints(s).get("shop/promo:http/TCP") == Some(&vec!["10.244.2.1:8080".into()])
        })
        .await;

    server.apply(slice("shop", "promo-1", "promo", &["10.244.2.1", "10.244.2.2"]));
    source.until("promo's second endpoint", |s| endpoints(s)["shop/promo:http/TCP"].len() == 2).await;

    server.apply(service("shop", "promo", "10.96.0.50", 81));
    source.until("the new port number", |s| s.family(IpFamily::V4).service_ports.values().any(|p| p.port == 81)).await;

    server.delete("EndpointSlice", "shop", "promo-1");
    source.until("promo without endpoints", |s| endpoints(s)["shop/promo:http/TCP"].is_empty()).await;

    server.delete("Service", "shop", "promo");
    source.until("promo gone", |s| !has_port(s, "shop/promo:http/TCP")).await;

    server.apply(node("node-a", "zone-c", json!([])));
    source.until("the new zone", |s| s.node.zone.as_deref() == Some("zone-c")).await;
    let mut deleting = node("node-a", "zone-c", json!([]));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-12-01T12:00:00Z");
    server.apply(deleting);
    source.until("the node being deleted", |s| !s.node.eligible).await;
    server.apply(node("node-a", "zone-c", json!([])));
    source.until("the node eligible again", |s| s.node.eligible).await;
    server.apply(node(
        "node-a",
        "zone-c",
        json!([{"key": "ToBeDeletedByClusterAutoscaler", "value": "1764453000", "effect": "NoSchedule"}]),
    ));
    source.until("the node no longer eligible", |s| !s.node.eligible).await;
    server.delete("Node", "", "node-a");
    source.until("the node gone (still not eligible)", |s| !s.node.eligible && s.node.zone.is_none()).await;

    server.apply(json!({
        "kind": "ServiceCIDR", "apiVersion": "networking.k8s.io/v1",
        "metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16"]}
    }));
    source
        .until("the service CIDR", |s| {
            s.family(IpFamily::V4).service_cidrs.iter().any(|c| c.to_string() == "10.96.0.0/16")
        })
        .await;
    server.delete("ServiceCIDR", "", "kubernetes");
    source.until("the service CIDR gone", |s| s.family(IpFamily::V4).service_cidrs.is_empty()).await;
}

#[tokio::test]
async fn a_slice_moving_to_another_service_moves_its_endpoints() {
    let server = FakeApiServer::start().await;
    server.apply(node("node-a", "zone-a", json!([])));
    server.apply(service("shop", "blue", "10.96.0.60", 80));
    server.apply(service("shop", "green", "10.96.0.61", 80));
    server.apply(slice("shop", "app-1", "blue", &["10.244.2.7"]));
    let mut source = start(&server).await;
    source.until("blue's endpoint", |s| endpoints(s)["shop/blue:http/TCP"].len() == 1).await;

    server.apply(slice("shop", "app-1", "green", &["10.244.2.7"]));
    source
        .until("the endpoint under green only", |s| {
            let eps = endpoints(s);
            eps["shop/blue:http/TCP"].is_empty() && eps["shop/green:http/TCP"] == ["10.244.2.7:8080"]
        })
        .await;
}

#[tokio::test]
async fn a_relist_after_410_drops_what_was_deleted_while_disconnected() {
    let server = captured_cluster().await;
    let mut source = start(&server).await;
    source.until("the first sync", |s| has_port(s, "shop/web:http/TCP")).await;

    server.stop().await;
    server.delete("Service", "shop", "web");
    server.delete("EndpointSlice", "shop", "web-7xk2p");
    server.delete("EndpointSlice", "shop", "web-m4q9z");
    server.apply(service("shop", "promo", "10.96.0.50", 80));
    // The history of those changes is gone: resuming the watches fails
    // with 410 and the source must relist.
    server.compact();
    server.restart().await;

    source
        .until("web gone and promo there", |s| !has_port(s, "shop/web:http/TCP") && has_port(s, "shop/promo:http/TCP"))
        .await;
    assert!(source.seen.iter().any(|(what, _)| what == "delete Service shop/web"), "{:#?}", source.seen);
    assert!(source.seen.iter().any(|(what, _)| what == "delete EndpointSlice shop/web-7xk2p"), "{:#?}", source.seen);
    let services = KubeMetrics::label_for(Resource::Services);
    assert_eq!(source.metrics.lists.get_or_create(&services).get(), 2, "one relist of services");
    // The rest was unchanged: no second Apply for it.
    let dns = source.seen.iter().filter(|(what, _)| what == "apply Service shop/dns").count();
    assert_eq!(dns, 1, "{:#?}", source.seen);
}

#[tokio::test]
async fn the_api_server_down_then_back_keeps_the_objects_and_reports_the_loss() {
    let server = captured_cluster().await;
    let mut source = start(&server).await;
    source.until("the first sync", |s| has_port(s, "shop/web:http/TCP")).await;
    let before = source.builder.state().clone();

    server.stop().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !source.health.lost_now() {
        assert!(Instant::now() < deadline, "the loss was never reported");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Nothing is deleted while the server is away.
    source.quiet_for(Duration::from_secs(1)).await;
    assert_eq!(source.builder.state(), &before);

    server.apply(slice("shop", "web-extra", "web", &["10.244.2.99"]));
    server.restart().await;
    source
        .until("the change made while away", |s| {
            endpoints(s)["shop/web:http/TCP"].iter().any(|e| e == "10.244.2.99:8080")
        })
        .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while source.health.lost_now() {
        assert!(Instant::now() < deadline, "recovery was never reported");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(source.health.ever_lost());
}

#[tokio::test]
async fn a_service_another_proxy_owns_is_ignored_until_released() {
    let server = FakeApiServer::start().await;
    server.apply(node("node-a", "zone-a", json!([])));
    server.apply(service("shop", "promo", "10.96.0.50", 80));
    let mut source = start(&server).await;
    source.until("promo", |s| has_port(s, "shop/promo:http/TCP")).await;

    let mut owned = service("shop", "promo", "10.96.0.50", 80);
    owned["metadata"]["labels"] = json!({"service.kubernetes.io/service-proxy-name": "other"});
    server.apply(owned);
    source.until("promo handed to the other proxy", |s| !has_port(s, "shop/promo:http/TCP")).await;

    server.apply(service("shop", "promo", "10.96.0.50", 80));
    source.until("promo back", |s| has_port(s, "shop/promo:http/TCP")).await;
    let selector = server.requests().iter().any(|r| r.path == "/api/v1/services" && r.query.contains("labelSelector"));
    assert!(selector, "services are listed with kube-proxy's selector {SELECTOR_SERVICES}");
}

#[tokio::test]
async fn an_invalid_update_keeps_the_last_valid_version() {
    let server = FakeApiServer::start().await;
    server.apply(node("node-a", "zone-a", json!([])));
    server.apply(service("shop", "promo", "10.96.0.50", 80));
    server.apply(service("shop", "other", "10.96.0.51", 80));
    let mut source = start(&server).await;
    source.until("both services", |s| has_port(s, "shop/promo:http/TCP") && has_port(s, "shop/other:http/TCP")).await;

    let mut broken = service("shop", "promo", "10.96.0.50", 80);
    broken["spec"]["ports"][0]["port"] = json!(70000);
    server.apply(broken);
    server.apply(service("shop", "other", "10.96.0.51", 81));
    source.until("other's change", |s| s.family(IpFamily::V4).service_ports.values().any(|p| p.port == 81)).await;
    assert!(has_port(source.builder.state(), "shop/promo:http/TCP"), "promo keeps its last valid version");
    assert_eq!(source.metrics.invalid.get_or_create(&KubeMetrics::label_for(Resource::Services)).get(), 1);
}

#[tokio::test]
async fn a_slow_server_and_one_without_service_cidrs_still_sync() {
    let server = FakeApiServer::start_with(Options { serve_service_cidrs: false, ..Options::default() }).await;
    server.load_list_fixture("services-list.json");
    server.load_list_fixture("nodes-list.json");
    server.set_delay(Duration::from_millis(200));
    let (connection, _dir) = connection_to(&server);
    let sink: Arc<dyn HealthSink> = Arc::new(Recorder::default());
    let (c, url) = client(&connection, sink).await.unwrap();
    let served = check(&c, &url, "node-a", Duration::from_secs(5)).await.unwrap();
    assert!(!served, "the server has no ServiceCIDRs");
    let mut source = start_with(&server, options(served)).await;
    source.until("the first sync", |s| has_port(s, "default/kubernetes:https/TCP")).await;
}

#[tokio::test]
async fn startup_errors_name_the_server_and_its_answer() {
    let server = FakeApiServer::start_with(Options { token: Some("right-token".into()), ..Options::default() }).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, server.kubeconfig().replace("right-token", "wrong-token")).unwrap();
    let connection = Connection { kubeconfig: Some(path), master: None, qps: 5.0, burst: 10 };
    let sink: Arc<dyn HealthSink> = Arc::new(Recorder::default());
    let (c, url) = client(&connection, sink.clone()).await.unwrap();
    let e = check(&c, &url, "node-a", Duration::from_secs(5)).await.unwrap_err().to_string();
    assert_eq!(e, format!("API server {}: list services: HTTP 401 Unauthorized: Unauthorized", server.url()));

    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let connection = Connection { master: Some(format!("http://{free}")), ..connection };
    let (c, url) = client(&connection, sink.clone()).await.unwrap();
    let e = check(&c, &url, "node-a", Duration::from_secs(5)).await.unwrap_err().to_string();
    assert!(e.starts_with(&format!("API server http://{free}: list services: unreachable: ")), "{e}");

    let forbidden =
        FakeApiServer::start_with(Options { forbidden: vec!["endpointslices"], ..Options::default() }).await;
    let (connection, _dir) = connection_to(&forbidden);
    let (c, url) = client(&connection, sink).await.unwrap();
    let e = check(&c, &url, "node-a", Duration::from_secs(5)).await.unwrap_err().to_string();
    assert!(e.contains("list endpointslices: HTTP 403 Forbidden: "), "{e}");
}

#[test]
fn events_carry_the_keys_the_state_uses() {
    // Deletes are keyed from object metadata; they must match the keys of
    // the converted objects.
    let svc: k8s_openapi::api::core::v1::Service =
        serde_json::from_value(service("shop", "promo", "10.96.0.50", 80)).unwrap();
    let object = Object::service(kproxy_state::convert::service(&svc).unwrap());
    assert_eq!(object.key(), kproxy_state::ObjectKey::new(Kind::Service, "shop", "promo"));
}
