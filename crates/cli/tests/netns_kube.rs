//! The Kubernetes API source to the kernel: kproxy in node-a reads the fake
//! API server (listening inside node-a) and programs nftables; real
//! connections follow the Services and EndpointSlices the server holds.

mod lab;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use kproxy_model::Protocol;
use kproxy_testkit::apiserver::FakeApiServer;
use lab::*;
use serde_json::{Value, json};

fn endpoint(ip: Ipv4Addr, node: &str) -> Value {
    json!({"addresses": [ip.to_string()], "conditions": {"ready": true, "serving": true, "terminating": false}, "nodeName": node})
}

fn slice(endpoints: Vec<Value>) -> Value {
    json!({
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": PORT}]
    })
}

#[test]
fn services_and_slices_from_the_api_server_reach_the_kernel_and_follow_its_changes() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    // Bound inside node-a, where kproxy runs: the socket keeps that namespace.
    let server = lab.node().enter(|| runtime.block_on(FakeApiServer::start()));
    server.apply(json!({
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "zone-a"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.77.1"}]}
    }));
    server.apply(json!({
        "kind": "Service", "apiVersion": "v1",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": PORT}]}
    }));
    let (a1, b1) = (lab.pod("web-a1").ipv4, lab.pod("web-b1").ipv4);
    server.apply(slice(vec![endpoint(a1, "node-a"), endpoint(b1, "node-b")]));
    lab.start_kube(&server.kubeconfig(), &[]);

    let client = &lab.pod("client-a1").ns;
    lab.eventually("web to answer", || {
        matches!(lab.request(client, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    let spread = lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{spread:?}");

    // The slice loses web-a1: new connections go to web-b1 only.
    server.apply(slice(vec![endpoint(b1, "node-b")]));
    lab.eventually("web-a1 to leave the map", || !lab.ruleset().contains(&a1.to_string()));
    let spread = lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 20);
    assert_eq!(backends(&spread), ["web-b1"], "{spread:?}");

    // The API server goes away: the kernel keeps serving what was
    // programmed. A change made meanwhile arrives once it is back.
    runtime.block_on(server.stop());
    std::thread::sleep(Duration::from_secs(2));
    let spread = lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 10);
    assert_eq!(backends(&spread), ["web-b1"], "rules kept while the API server is away: {spread:?}");
    server.apply(slice(vec![endpoint(a1, "node-a"), endpoint(b1, "node-b")]));
    // Listening again inside node-a, on the same port.
    lab.node().enter(|| runtime.block_on(server.restart()));
    lab.eventually("web-a1 back in the map", || lab.ruleset().contains(&a1.to_string()));
    let spread = lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{spread:?}");

    // The Service goes: its address leaves the kernel.
    server.delete("Service", "default", "web");
    lab.eventually("the cluster IP to leave the kernel", || !lab.ruleset().contains("10.96.0.10"));
}

/// When `ip` shows up in the ruleset, polling every 20 ms for up to
/// `within` from now.
fn seen_in_kernel(lab: &Lab, ip: Ipv4Addr, within: Duration) -> Option<Instant> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if lab.ruleset().contains(&ip.to_string()) {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn a_second_endpoint_change_soon_after_the_first_reaches_the_kernel_at_once() {
    const MIN_SYNC: Duration = Duration::from_secs(4);
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (2, "web-c1"), (2, "web-d1"), (1, "client-a1")]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let server = lab.node().enter(|| runtime.block_on(FakeApiServer::start()));
    server.apply(json!({
        "kind": "Service", "apiVersion": "v1",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": PORT}]}
    }));
    let [a1, b1, c1, d1] = ["web-a1", "web-b1", "web-c1", "web-d1"].map(|p| lab.pod(p).ipv4);
    server.apply(slice(vec![endpoint(a1, "node-a")]));
    lab.start_kube(&server.kubeconfig(), &["--iptables-min-sync-period", "4s"]);
    lab.eventually("web-a1 in the kernel", || lab.ruleset().contains(&a1.to_string()));
    // A quiet minSyncPeriod: whatever the pacing, the next change may go at once.
    std::thread::sleep(MIN_SYNC + Duration::from_millis(500));

    let applied = Instant::now();
    server.apply(slice(vec![endpoint(a1, "node-a"), endpoint(b1, "node-b")]));
    let first = seen_in_kernel(&lab, b1, Duration::from_secs(2));
    assert!(first.is_some(), "the first change took over 2 s\n{}", lab.log_tail());
    std::thread::sleep((applied + Duration::from_millis(300)).saturating_duration_since(Instant::now()));
    // The second change, 0.3 s after the first, takes the burst's second
    // sync; before, it waited for the first one's sync + 4 s.
    server.apply(slice(vec![endpoint(a1, "node-a"), endpoint(b1, "node-b"), endpoint(c1, "node-b")]));
    let second = seen_in_kernel(&lab, c1, Duration::from_secs(2));
    let second =
        second.unwrap_or_else(|| panic!("the second change took over 2 s of the 4 s period\n{}", lab.log_tail()));

    // A third change right after finds no token: it waits until 4 s after
    // the second sync, then goes out.
    server.apply(slice(vec![endpoint(d1, "node-b")]));
    let third = seen_in_kernel(&lab, d1, Duration::from_secs(10));
    let third = third.unwrap_or_else(|| panic!("the third change never reached the kernel\n{}", lab.log_tail()));
    let gap = third - second;
    assert!(gap >= MIN_SYNC - Duration::from_millis(500), "the third sync came {gap:?} after the second");
    let client = &lab.pod("client-a1").ns;
    let spread = lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 10);
    assert_eq!(backends(&spread), ["web-d1"], "{spread:?}");
}
