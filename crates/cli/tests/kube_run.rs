//! `kproxy run` against the fake API server, end to end through the real
//! binary: startup errors, the state it serves, network-programming
//! latency, and an API outage of a minute.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use kproxy_testkit::apiserver::{FakeApiServer, Options};
use serde_json::json;

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// `GET path` of an admin server: status and body; `None` while it does
/// not answer.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// A `kproxy run --dry-run` reading the fake server; killed on drop.
struct Kproxy {
    child: Child,
    health: SocketAddr,
    metrics: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Kproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kubeconfig(server: &FakeApiServer) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, server.kubeconfig()).unwrap();
    (dir, path)
}

/// `sync` is the sync period: `/healthz` fails after twice that.
fn start(server: &FakeApiServer, sync: &str) -> Kproxy {
    start_logging(server, sync, Stdio::inherit())
}

/// [`start`], its log going to `stderr`.
fn start_logging(server: &FakeApiServer, sync: &str, stderr: Stdio) -> Kproxy {
    let (dir, path) = kubeconfig(server);
    let (health, metrics) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_kproxy"))
        .args(["run", "--dry-run", "--hostname-override", "node-a", "--kubeconfig"])
        .arg(&path)
        .args(["--healthz-bind-address", &health.to_string(), "--metrics-bind-address", &metrics.to_string()])
        .args(["--iptables-sync-period", sync, "--iptables-min-sync-period", "100ms"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    Kproxy { child, health, metrics, _dir: dir }
}

/// Polls until `check` holds, or fails with `what` and the last answer.
fn wait_for(what: &str, within: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(()) => return,
            Err(last) if Instant::now() >= deadline => panic!("no {what} within {within:?}; last: {last}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn state(k: &Kproxy) -> String {
    get(k.metrics, "/state").map(|(_, body)| body).unwrap_or_default()
}

/// The fake server, with the captured cluster, on its own runtime (the
/// test's threads block on the child process).
fn captured_cluster(runtime: &tokio::runtime::Runtime) -> FakeApiServer {
    let server = runtime.block_on(FakeApiServer::start());
    for list in ["services-list.json", "endpointslices-list.json", "nodes-list.json"] {
        server.load_list_fixture(list);
    }
    server
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn an_unauthorised_or_unreachable_api_server_stops_kproxy_at_start_with_its_answer() {
    let runtime = runtime();
    let server =
        runtime.block_on(FakeApiServer::start_with(Options { token: Some("good".into()), ..Options::default() }));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, server.kubeconfig().replace("good", "bad")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kproxy"))
        .args(["run", "--dry-run", "--kubeconfig"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let expected = format!("API server {}: list services: HTTP 401 Unauthorized: Unauthorized", server.url());
    assert!(stderr.contains(&expected), "{stderr}");

    let nothing = free_port();
    let out = Command::new(env!("CARGO_BIN_EXE_kproxy"))
        .args(["run", "--dry-run", "--kubeconfig"])
        .arg(&path)
        .args(["--master", &format!("http://{nothing}")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("API server http://{nothing}: list services: unreachable")), "{stderr}");
}

#[test]
fn the_cluster_is_served_and_programming_latency_counts_only_changes_after_start() {
    let runtime = runtime();
    let server = captured_cluster(&runtime);
    let k = start(&server, "30s");
    wait_for("the captured cluster in /state", Duration::from_secs(20), || {
        let state = state(&k);
        if state.contains("10.96.23.141") && state.contains("\"zone\":\"zone-a\"") { Ok(()) } else { Err(state) }
    });
    let metric = "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"}";
    let count = || {
        let body = get(k.metrics, "/metrics").map(|(_, b)| b).unwrap_or_default();
        body.lines().find(|l| l.starts_with(metric)).and_then(|l| l.split_whitespace().last()?.parse::<u64>().ok())
    };
    assert_eq!(count().unwrap_or(0), 0, "the captured slices' trigger times are from before kproxy started");

    // The annotation has one-second resolution: a change made a second
    // after kproxy started carries a time after its start.
    std::thread::sleep(Duration::from_millis(1500));
    let now = jiff::Timestamp::try_from(SystemTime::now()).unwrap();
    let trigger = jiff::Timestamp::from_second(now.as_second()).unwrap().to_string();
    server.apply(json!({
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {
            "name": "web-new", "namespace": "shop",
            "labels": {"kubernetes.io/service-name": "web"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": trigger}
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.1.77"], "conditions": {"ready": true}, "nodeName": "node-a"}],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
    }));
    wait_for("the new endpoint", Duration::from_secs(10), || {
        let state = state(&k);
        if state.contains("10.244.1.77") { Ok(()) } else { Err(state) }
    });
    wait_for("one programming-latency observation", Duration::from_secs(5), || match count() {
        Some(n) if n >= 1 => Ok(()),
        other => Err(format!("{other:?}")),
    });

    // Node ports are served on the Node's primary address (upstream's
    // nftables default, `nodePortAddresses: primary`).
    let state = state(&k);
    assert!(state.contains("\"nodePortAddresses\":[\"192.0.2.21\"]"), "{state}");

    // The cluster autoscaler marks the node for deletion: /healthz fails so
    // load balancers drain it, /livez does not (no restart).
    assert_eq!(get(k.health, "/healthz").map(|(code, _)| code), Some(200));
    server.apply(json!({
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "zone-a"}},
        "spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1764453000", "effect": "NoSchedule"}]},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.21"}]}
    }));
    wait_for("/healthz failing for the tainted node", Duration::from_secs(10), || match get(k.health, "/healthz") {
        Some((503, body)) if body.contains("\"nodeEligible\":false") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert_eq!(get(k.health, "/livez").map(|(code, _)| code), Some(200));
}

/// The acceptance scenario: the API server away for a minute. The rules
/// (here the served state) stay, `/healthz` reports itself degraded after
/// 2 x syncPeriod (still 200: nothing is queued, and a 503 on every node
/// would drain every cloud load balancer) and recovers once the server is
/// back.
#[test]
fn an_api_server_down_for_a_minute_keeps_the_rules_and_healthz_degrades_then_recovers() {
    let runtime = runtime();
    let server = captured_cluster(&runtime);
    let k = start(&server, "5s");
    wait_for("the captured cluster in /state", Duration::from_secs(20), || {
        let state = state(&k);
        if state.contains("10.96.23.141") { Ok(()) } else { Err(state) }
    });
    wait_for("a healthy /healthz", Duration::from_secs(10), || match get(k.health, "/healthz") {
        Some((200, _)) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    let before = state(&k);

    runtime.block_on(server.stop());
    let down = Instant::now();
    wait_for("/healthz degraded", Duration::from_secs(30), || match get(k.health, "/healthz") {
        Some((200, body)) if body.contains("\"degraded\":true") && body.contains("sourceError") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert!(down.elapsed() >= Duration::from_secs(9), "not before 2 x syncPeriod ({:?})", down.elapsed());
    assert!(get(k.health, "/livez").is_some_and(|(code, body)| code == 200 && !body.contains("degraded")));
    while down.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_secs(5));
        assert_eq!(state(&k), before, "nothing is dropped while the API server is away");
    }

    server.apply(json!({
        "kind": "Service", "apiVersion": "v1",
        "metadata": {"name": "promo", "namespace": "shop"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"],
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]}
    }));
    runtime.block_on(server.restart());
    // The watch backoff is at most 30 s.
    wait_for("the change made while away", Duration::from_secs(45), || {
        let state = state(&k);
        if state.contains("10.96.0.50") { Ok(()) } else { Err(state) }
    });
    wait_for("/healthz recovered", Duration::from_secs(15), || match get(k.health, "/healthz") {
        Some((200, body)) if !body.contains("degraded") => Ok(()),
        other => Err(format!("{other:?}")),
    });
}

/// With `--kubeconfig`, `state`, `trace` and `list` plan from one list of
/// the cluster's objects (no kproxy needs to run).
#[test]
fn state_trace_and_list_with_a_kubeconfig_compute_from_the_clusters_objects() {
    let runtime = runtime();
    let server = captured_cluster(&runtime);
    let (_dir, path) = kubeconfig(&server);
    let path = path.display().to_string();
    let kproxy = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kproxy"))
            .args(args)
            .args(["--kubeconfig", &path, "--hostname-override", "node-a"])
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{args:?}: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
        stdout
    };
    let state: serde_json::Value = serde_json::from_str(&kproxy(&["state", "-o", "json"])).unwrap();
    assert_eq!(state["node"]["zone"], "zone-a", "{state}");
    assert!(state.to_string().contains("10.96.23.141"), "{state}");

    let trace = kproxy(&["trace", "--from", "10.244.1.5", "--iif", "cni0", "--to", "10.96.23.141:80"]);
    assert!(trace.contains("service   shop/web:"), "{trace}");
    assert!(trace.contains("verdict   DNAT to "), "{trace}");

    let list = kproxy(&["list"]);
    assert!(list.lines().any(|l| l.starts_with("TCP  10.96.23.141:80 ")), "{list}");
}

/// While the API server is down, kproxy says so once per attempt and
/// resource, with the cause; kube-client and kube-runtime do not repeat it.
#[test]
fn an_unreachable_api_server_is_logged_by_kproxy_alone() {
    let runtime = runtime();
    let server = captured_cluster(&runtime);
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("kproxy.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let k = start_logging(&server, "30s", Stdio::from(log));
    wait_for("the captured cluster in /state", Duration::from_secs(20), || {
        let state = state(&k);
        if state.contains("10.96.23.141") { Ok(()) } else { Err(state) }
    });
    runtime.block_on(server.stop());
    let failed = |log: &str| log.lines().filter(|l| l.contains("list or watch failed")).count();
    wait_for("kproxy's own outage messages", Duration::from_secs(30), || {
        let log = std::fs::read_to_string(&log_path).unwrap();
        if failed(&log) >= 4 { Ok(()) } else { Err(log) }
    });
    let log = std::fs::read_to_string(&log_path).unwrap();
    let foreign: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" kube_client") || l.contains(" kube_runtime") || l.contains(" hyper"))
        .collect();
    assert!(foreign.is_empty(), "libraries repeat the outage:\n{}", foreign.join("\n"));
    assert!(log.lines().any(|l| l.contains("list or watch failed") && l.contains("reason=")), "{log}");
}
