//! The fake API server against the real apiserver's captures (bodies,
//! headers, pagination, errors and watch framing, read off the wire), and
//! kube-rs's watcher against the fake.

mod raw_http;

use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kproxy_testkit::apiserver::{FakeApiServer, Options};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, Config};
use raw_http::Chunk;
use serde_json::{Value, json};

const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/apiserver");
const PROXY_SERVICES: &str = "labelSelector=%21service.kubernetes.io%2Fservice-proxy-name";
const PROXY_SLICES: &str =
    "labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name";
const SECOND: Duration = Duration::from_secs(1);

fn capture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{TESTDATA}/{name}")).expect("a capture file")
}

fn capture_json(name: &str) -> Value {
    serde_json::from_slice(&capture(name)).expect("a JSON capture")
}

fn capture_lines(name: &str) -> Vec<Value> {
    let text = String::from_utf8(capture(name)).expect("UTF-8");
    text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

async fn get(server: &FakeApiServer, target: &str) -> (u16, Value) {
    let response = raw_http::get(&server.url(), target, None).await;
    let status = response.status;
    (status, serde_json::from_slice(&response.body().await).expect("a JSON body"))
}

async fn with_fixtures() -> FakeApiServer {
    let server = FakeApiServer::start().await;
    for file in ["services-list.json", "endpointslices-list.json", "nodes-list.json"] {
        server.load_list_fixture(file);
    }
    server
}

fn names(list: &Value) -> Vec<&str> {
    list["items"].as_array().expect("items").iter().map(|i| i["metadata"]["name"].as_str().expect("a name")).collect()
}

fn without_rv(mut object: Value) -> Value {
    object["metadata"].as_object_mut().expect("metadata").remove("resourceVersion");
    object
}

#[tokio::test]
async fn lists_with_kube_proxy_selectors_equal_the_captured_lists() {
    let server = with_fixtures().await;
    assert_eq!(server.resource_version(), 259);
    let cases = [
        ("/api/v1/services", "services-list.json"),
        (&format!("/api/v1/services?{PROXY_SERVICES}"), "services-list-proxy.json"),
        (&format!("/apis/discovery.k8s.io/v1/endpointslices?{PROXY_SLICES}"), "endpointslices-list-proxy.json"),
        ("/api/v1/nodes?fieldSelector=metadata.name%3Dnode-b", "nodes-list-node-b.json"),
    ];
    for (target, file) in cases {
        assert_eq!(get(&server, target).await, (200, capture_json(file)), "{target}");
    }
    let (_, slices) = get(&server, &format!("/apis/discovery.k8s.io/v1/endpointslices?{PROXY_SLICES}")).await;
    assert!(!names(&slices).contains(&"db-r8vbn") && !names(&slices).contains(&"mesh-only-n7g4t"));
}

#[tokio::test]
async fn responses_carry_the_captured_headers_and_framing() {
    let server = with_fixtures().await;
    let list = raw_http::get(&server.url(), "/api/v1/services", None).await;
    assert!(list.head.starts_with("HTTP/1.1 200 OK\r\n"), "{}", list.head);
    for name in ["Audit-Id", "Cache-Control", "Content-Type", "X-Kubernetes-Pf-Flowschema-Uid", "Date"] {
        assert!(list.head.contains(&format!("\r\n{name}: ")), "{name} in {}", list.head);
    }
    assert_eq!(list.header("Cache-Control"), Some("no-cache, private"));
    assert_eq!(list.header("Content-Type"), Some("application/json"));
    assert_eq!(list.header("Audit-Id").map(str::len), Some(36));
    assert!(list.is_chunked(), "large bodies are chunked like the capture");
    let names: Vec<&str> = list.head.lines().skip(1).filter_map(|line| Some(line.split_once(':')?.0)).collect();
    let captured = String::from_utf8(capture("services-list.headers")).unwrap();
    let captured: Vec<&str> = captured.lines().skip(1).filter_map(|line| Some(line.split_once(':')?.0)).collect();
    assert_eq!(names, captured, "the same headers in the same order");

    let web = raw_http::get(&server.url(), "/api/v1/namespaces/shop/services/web", None).await;
    // Same JSON, so the same length as captured, sent as Content-Length.
    assert_eq!(web.header("Content-Length"), Some("1270"));
    assert_eq!(serde_json::from_slice::<Value>(&web.body().await).unwrap(), capture_json("service-web-get.json"));
    assert_eq!(get(&server, "/api/v1/nodes/node-b").await, (200, capture_json("node-b-get.json")));
}

#[tokio::test]
async fn limit_pages_match_the_captured_chain() {
    let server = FakeApiServer::start().await;
    server.load_list_fixture("services-list.json");
    // The chain was captured one unrelated write later, at rv 260.
    server.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-c"}}));
    let mut target = "/api/v1/services?limit=2".to_owned();
    for page in 1..=6 {
        let (status, body) = get(&server, &target).await;
        assert_eq!((status, &body), (200, &capture_json(&format!("services-list-limit2-page{page}.json"))));
        if let Some(token) = body["metadata"]["continue"].as_str() {
            target = format!("/api/v1/services?limit=2&continue={token}");
        }
    }
}

#[tokio::test]
async fn limit_pages_with_a_selector_return_every_item_once_without_a_count() {
    let server = FakeApiServer::start().await;
    server.load_list_fixture("endpointslices-list.json");
    for name in ["node-c", "node-d", "node-e"] {
        server.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}));
    }
    let base = format!("/apis/discovery.k8s.io/v1/endpointslices?{PROXY_SLICES}&limit=2");
    let (_, first) = get(&server, &base).await;
    assert_eq!(first, capture_json("endpointslices-list-proxy-limit2-page1.json"));
    let mut seen = names(&first).into_iter().map(str::to_owned).collect::<Vec<_>>();
    let mut token = first["metadata"]["continue"].as_str().map(str::to_owned);
    while let Some(t) = token {
        let (_, page) = get(&server, &format!("{base}&continue={t}")).await;
        assert!(page["metadata"].get("remainingItemCount").is_none());
        seen.extend(names(&page).into_iter().map(str::to_owned));
        token = page["metadata"]["continue"].as_str().map(str::to_owned);
    }
    assert_eq!(seen, names(&capture_json("endpointslices-list-proxy.json")));
}

#[tokio::test]
async fn namespaced_pages_stay_in_their_namespace() {
    let server = with_fixtures().await;
    let (_, first) = get(&server, "/api/v1/namespaces/shop/services?limit=10").await;
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    let token = first["metadata"]["continue"].as_str().expect("a continue token");
    let (_, rest) = get(&server, &format!("/api/v1/namespaces/shop/services?limit=10&continue={token}")).await;
    assert_eq!(names(&rest), ["web"]);
    assert!(!names(&first).contains(&"kubernetes"));
}

#[tokio::test]
async fn compaction_expires_old_continue_tokens_and_exact_reads() {
    let server = FakeApiServer::start().await;
    server.load_list_fixture("services-list.json");
    server.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-c"}}));
    let (_, page1) = get(&server, "/api/v1/services?limit=2").await;
    let token = page1["metadata"]["continue"].as_str().expect("a continue token").to_owned();
    server.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-d"}}));
    server.compact();

    let expired = raw_http::get(&server.url(), &format!("/api/v1/services?limit=2&continue={token}"), None).await;
    assert_eq!(expired.status, 410);
    assert_eq!(expired.body().await, capture("error-410-list-continue-expired.json"));
    let exact_read = "/api/v1/services?resourceVersion=259&resourceVersionMatch=Exact";
    let exact = raw_http::get(&server.url(), exact_read, None).await;
    assert_eq!(exact.status, 410);
    assert_eq!(exact.body().await, capture("error-410-list-rv-exact.json"));

    // The expired response's token resumes the list at the latest state.
    let resume = capture_json("error-410-list-continue-expired.json")["metadata"]["continue"].clone();
    let (_, page2) = get(&server, &format!("/api/v1/services?limit=2&continue={}", resume.as_str().unwrap())).await;
    assert_eq!(names(&page2), ["cart", "checkout"]);
    assert_eq!(page2["metadata"]["resourceVersion"], "261");
}

#[tokio::test]
async fn errors_have_the_captured_bodies() {
    let server = FakeApiServer::start_with(Options { forbidden: vec!["secrets"], ..Options::default() }).await;
    for (target, status, file) in [
        ("/api/v1/namespaces/shop/services/does-not-exist", 404, "error-404-service.json"),
        ("/api/v1/nodes/node-z", 404, "error-404-node.json"),
    ] {
        let response = raw_http::get(&server.url(), target, None).await;
        assert_eq!(response.status, status);
        assert_eq!(response.body().await, capture(file), "{target}");
    }
    let denied = raw_http::get(&server.url(), "/api/v1/namespaces/shop/secrets", None).await;
    assert_eq!(denied.header("X-Content-Type-Options"), Some("nosniff"));
    let body = String::from_utf8(denied.body().await).unwrap();
    let captured = String::from_utf8(capture("error-403-kube-proxy-secrets.json")).unwrap();
    assert_eq!(body, captured.replace("system:kube-proxy", "system:serviceaccount:kube-system:kproxy"));

    let (status, unknown) = get(&server, "/api/v1/namespaces/shop/pods").await;
    assert_eq!((status, unknown["reason"].as_str()), (404, Some("NotFound")));
}

#[tokio::test]
async fn a_bad_token_gets_the_captured_401() {
    let options = Options { token: Some("lab-admin-token".into()), ..Options::default() };
    let server = FakeApiServer::start_with(options).await;
    let rejected = raw_http::get(&server.url(), "/api/v1/services", Some("bad-token-0123456789abcdef")).await;
    assert_eq!(rejected.status, 401);
    assert_eq!(rejected.header("X-Kubernetes-Pf-Flowschema-Uid"), None);
    assert_eq!(rejected.header("WWW-Authenticate"), None);
    assert_eq!(rejected.body().await, capture("error-401-bad-token.json"));
    let accepted = raw_http::get(&server.url(), "/api/v1/services", Some("lab-admin-token")).await;
    assert_eq!(accepted.status, 200);
    assert!(server.kubeconfig().contains("token: \"lab-admin-token\""));
}

#[tokio::test]
async fn discovery_is_served_from_the_captures() {
    let server = FakeApiServer::start().await;
    for (path, file) in [("/version", "version.json"), ("/api", "api.json"), ("/api/v1", "api-v1.json")] {
        assert_eq!(raw_http::get(&server.url(), path, None).await.body().await, capture(file), "{path}");
    }
    let (_, networking) = get(&server, "/apis/networking.k8s.io/v1").await;
    assert_eq!(networking["resources"][0]["name"], "servicecidrs");

    let old = FakeApiServer::start_with(Options { serve_service_cidrs: false, ..Options::default() }).await;
    let (status, body) = get(&old, "/apis/networking.k8s.io/v1/servicecidrs").await;
    assert_eq!((status, body["reason"].as_str()), (404, Some("NotFound")));
}

/// The chunks of a watch read to its end, which must be the clean one.
async fn watch_chunks(server: &FakeApiServer, target: &str) -> Vec<String> {
    let mut response = raw_http::get(&server.url(), target, None).await;
    assert_eq!(response.status, 200);
    assert!(response.is_chunked());
    let (chunks, end) = response.chunks(3 * SECOND).await;
    assert_eq!(end, Chunk::End, "{target} ends cleanly");
    let chunks: Vec<String> = chunks.into_iter().map(|c| String::from_utf8(c).expect("UTF-8")).collect();
    for chunk in &chunks {
        // One event per chunk, newline-terminated.
        assert_eq!(chunk.find('\n'), Some(chunk.len() - 1), "{chunk}");
    }
    chunks
}

async fn watch_events(server: &FakeApiServer, target: &str) -> Vec<Value> {
    let chunks = watch_chunks(server, target).await;
    chunks.iter().map(|chunk| serde_json::from_str(chunk).expect("a JSON event")).collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().expect("a type")).collect()
}

#[tokio::test]
async fn watch_replays_history_with_the_captured_selector_transitions() {
    let server = FakeApiServer::start().await;
    server.load_list_fixture("services-list.json");
    // Replay the capture's writes to promo: create, add a port, label, unlabel, delete.
    let captured = capture_lines("watch-services.json");
    let rvs: Vec<u64> = captured[..4].iter().map(|event| server.apply(event["object"].clone())).collect();
    let deleted = server.delete("Service", "shop", "promo").expect("promo exists");

    let query = "watch=1&resourceVersion=259&allowWatchBookmarks=true&timeoutSeconds=1";
    let (all, proxy) = (format!("/api/v1/services?{query}"), format!("/api/v1/services?{query}&{PROXY_SERVICES}"));
    let (all, proxy) = futures::join!(watch_events(&server, &all), watch_events(&server, &proxy));
    assert_eq!(types(&all), types(&captured));
    assert_eq!(types(&proxy), types(&capture_lines("watch-services-proxy.json")));
    for (ours, theirs) in proxy.iter().zip(capture_lines("watch-services-proxy.json")).take(5) {
        assert_eq!(without_rv(ours["object"].clone()), without_rv(theirs["object"].clone()));
    }
    let rv = |event: &Value| event["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
    // Leaving the selection: the previous content, at the label write's rv.
    assert_eq!(rv(&proxy[2]), rvs[2]);
    assert_eq!(rv(&proxy[4]), deleted);
    assert_eq!(rv(&proxy[5]), deleted, "the bookmark reports the last write");
}

#[tokio::test]
async fn watch_from_rv_0_starts_with_an_added_event_per_object() {
    let server = with_fixtures().await;
    let target = format!("/api/v1/services?watch=1&resourceVersion=0&timeoutSeconds=1&{PROXY_SERVICES}");
    let events = watch_events(&server, &target).await;
    let mut captured = capture_lines("watch-services-proxy-rv0.json");
    let key = |e: &Value| {
        let metadata = &e["object"]["metadata"];
        format!("{}/{}", metadata["namespace"].as_str().unwrap(), metadata["name"].as_str().unwrap())
    };
    captured.sort_by_key(key);
    assert_eq!(events.iter().map(key).collect::<Vec<_>>(), captured.iter().map(key).collect::<Vec<_>>());
    // The same events, in key order rather than the capture's arbitrary one.
    assert!(events == captured);
}

#[tokio::test]
async fn bookmarks_are_empty_objects_like_the_captured_ones() {
    let options = Options { bookmark_interval: Some(Duration::from_millis(300)), ..Options::default() };
    let server = FakeApiServer::start_with(options).await;
    for file in ["services-list.json", "endpointslices-list.json", "nodes-list.json"] {
        server.load_list_fixture(file);
    }
    let query = "watch=1&resourceVersion=259&allowWatchBookmarks=true&timeoutSeconds=1";
    let started = Instant::now();
    let watches = [
        ("/api/v1/services", "watch-services.json", "274"),
        ("/apis/discovery.k8s.io/v1/endpointslices", "watch-endpointslices-proxy.json", "273"),
        ("/api/v1/nodes", "watch-nodes-node-b.json", "271"),
    ]
    .map(|(path, file, rv)| {
        let server = server.clone();
        async move { (watch_chunks(&server, &format!("{path}?{query}")).await, file, rv) }
    });
    for (chunks, file, captured_rv) in futures::future::join_all(watches).await {
        let captured = String::from_utf8(capture(file)).unwrap();
        let last_line = captured.lines().last().expect("a bookmark line");
        let expected = format!("{}\n", last_line.replace(captured_rv, "259"));
        // Every 300 ms, and half a second before the one-second timeout.
        assert!(chunks.len() >= 3, "{file}: {chunks:?}");
        assert!(chunks.iter().all(|chunk| *chunk == expected), "{file}: {chunks:?}");
    }
    let elapsed = started.elapsed();
    assert!(elapsed >= SECOND && elapsed < 3 * SECOND, "ended at the timeout: {elapsed:?}");
}

#[tokio::test]
async fn watch_from_a_compacted_rv_gets_the_watch_cache_410() {
    let server = FakeApiServer::start().await;
    server.load_list_fixture("services-list.json");
    server.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-c"}}));
    server.compact();
    let mut response = raw_http::get(&server.url(), "/api/v1/services?watch=1&resourceVersion=259", None).await;
    assert_eq!(response.status, 200);
    let (chunks, end) = response.chunks(SECOND).await;
    let captured = String::from_utf8(capture("watch-services-410-too-old.json")).unwrap();
    assert_eq!(String::from_utf8(chunks.concat()).unwrap(), captured.replace("(279)", "(260)"));
    assert_eq!(end, Chunk::End);
    // From the compaction point on, the watch works.
    let mut live = raw_http::get(&server.url(), "/api/v1/services?watch=1&resourceVersion=260", None).await;
    server.wait_for_open_watches(1).await;
    server.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "promo", "namespace": "shop"}}));
    let Chunk::Data(added) = live.next_chunk(SECOND).await else { panic!("an event") };
    assert!(String::from_utf8(added).unwrap().starts_with(r#"{"type":"ADDED","object":{"kind":"Service""#));
}

#[tokio::test]
async fn disconnect_drops_watch_connections_mid_stream() {
    let server = with_fixtures().await;
    let mut response = raw_http::get(&server.url(), "/api/v1/nodes?watch=1", None).await;
    assert!(matches!(response.next_chunk(SECOND).await, Chunk::Data(_)));
    assert!(matches!(response.next_chunk(SECOND).await, Chunk::Data(_)));
    assert_eq!(server.open_watches(), 1);
    server.disconnect_watches();
    assert_eq!(response.next_chunk(SECOND).await, Chunk::Dropped);
    server.wait_for_open_watches(0).await;
}

#[tokio::test]
async fn stop_refuses_connections_until_restart() {
    let server = with_fixtures().await;
    let mut watch = raw_http::get(&server.url(), "/api/v1/nodes?watch=1&resourceVersion=259", None).await;
    server.wait_for_open_watches(1).await;
    server.stop().await;
    assert_eq!(watch.next_chunk(SECOND).await, Chunk::Dropped);
    let addr = server.url().replace("http://", "");
    assert!(tokio::net::TcpStream::connect(&addr).await.is_err(), "connection refused while down");
    server.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-c"}}));
    server.restart().await;
    let events = watch_events(&server, "/api/v1/nodes?watch=1&resourceVersion=259&timeoutSeconds=1").await;
    assert_eq!(types(&events), ["ADDED"], "history survives the restart");
}

#[tokio::test]
async fn requests_are_recorded_and_delayed() {
    let server = FakeApiServer::start().await;
    server.set_delay(Duration::from_millis(200));
    let started = Instant::now();
    let (status, _) = get(&server, &format!("/api/v1/services?{PROXY_SERVICES}")).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(200));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!((requests[0].method.as_str(), requests[0].path.as_str()), ("GET", "/api/v1/services"));
    assert_eq!(requests[0].query, PROXY_SERVICES);
    assert_eq!(requests[0].param("labelSelector").as_deref(), Some("!service.kubernetes.io/service-proxy-name"));
    assert!(!requests[0].is_watch());
}

// kube-rs against the fake.

type Events = Pin<Box<dyn Stream<Item = Result<Event<Service>, watcher::Error>> + Send>>;

const PROXY_LABELS: &str = "!service.kubernetes.io/service-proxy-name";

fn client(server: &FakeApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().expect("a URL"))).expect("a client")
}

fn services(server: &FakeApiServer, labels: Option<&str>) -> Events {
    let config = labels.map_or_else(watcher::Config::default, |l| watcher::Config::default().labels(l));
    watcher(Api::<Service>::all(client(server)), config).boxed()
}

async fn next(events: &mut Events) -> Result<Event<Service>, watcher::Error> {
    tokio::time::timeout(2 * SECOND, events.next()).await.expect("a watcher event in time").expect("watchers go on")
}

fn name(service: &Service) -> &str {
    service.metadata.name.as_deref().expect("a name")
}

/// The names of a relist, from after `Init` through `InitDone`.
async fn relisted(events: &mut Events) -> Vec<String> {
    let mut names = Vec::new();
    loop {
        match next(events).await.expect("no error while listing") {
            Event::InitApply(service) => names.push(name(&service).to_owned()),
            Event::InitDone => return names,
            other => panic!("unexpected {other:?} while listing"),
        }
    }
}

async fn initial_list(events: &mut Events) -> Vec<String> {
    assert!(matches!(next(events).await, Ok(Event::Init)));
    relisted(events).await
}

/// Polls the watcher until its watch request is open on the server.
async fn until_watching(server: &FakeApiServer, events: &mut Events) {
    tokio::select! {
        event = events.next() => panic!("unexpected {event:?}"),
        () = server.wait_for_open_watches(1) => {}
    }
}

fn promo(labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "promo", "namespace": "shop", "labels": labels},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    })
}

fn rv(service: &Service) -> u64 {
    service.metadata.resource_version.as_deref().and_then(|rv| rv.parse().ok()).expect("an rv")
}

#[tokio::test]
async fn kube_watcher_sees_applies_deletes_and_selector_transitions() {
    let server = FakeApiServer::start().await;
    server.load_list_fixture("services-list.json");
    let mut events = services(&server, Some(PROXY_LABELS));
    let names = initial_list(&mut events).await;
    assert_eq!(names.len(), 11);
    assert!(!names.iter().any(|n| n == "mesh-only"));
    let created = server.apply(promo(json!({"app": "promo"})));
    let Ok(Event::Apply(service)) = next(&mut events).await else { panic!("promo applied") };
    assert_eq!((name(&service), rv(&service)), ("promo", created));
    let requests = server.requests();
    assert_eq!(requests[0].param("labelSelector").as_deref(), Some(PROXY_LABELS));
    assert!(!requests[0].is_watch());
    assert!(requests[1].is_watch());
    assert_eq!(requests[1].param("resourceVersion").as_deref(), Some("259"), "the watch resumes from the list");
    // A write the selector excludes never shows.
    server.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "mesh-only", "namespace": "shop", "labels": {"service.kubernetes.io/service-proxy-name": "other"}}}));
    let labelled = server.apply(promo(json!({"app": "promo", "service.kubernetes.io/service-proxy-name": "other"})));
    let Ok(Event::Delete(service)) = next(&mut events).await else { panic!("promo leaves the selection") };
    assert_eq!((name(&service), rv(&service)), ("promo", labelled));
    assert!(!service.metadata.labels.unwrap_or_default().contains_key("service.kubernetes.io/service-proxy-name"));
    let unlabelled = server.apply(promo(json!({"app": "promo"})));
    let Ok(Event::Apply(service)) = next(&mut events).await else { panic!("promo is back") };
    assert_eq!(rv(&service), unlabelled);
    let deleted = server.delete("Service", "shop", "promo").expect("promo exists");
    let Ok(Event::Delete(service)) = next(&mut events).await else { panic!("promo deleted") };
    assert_eq!((name(&service), rv(&service)), ("promo", deleted));
}

#[tokio::test]
async fn kube_watcher_streaming_list_ends_its_initial_events_with_a_marked_bookmark() {
    let server = FakeApiServer::start().await;
    server.load_list_fixture("services-list.json");
    let api = Api::<Service>::all(client(&server));
    let mut events: Events = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    assert_eq!(initial_list(&mut events).await.len(), 12);
    let created = server.apply(promo(json!({})));
    let Ok(Event::Apply(service)) = next(&mut events).await else { panic!("promo applied") };
    assert_eq!(rv(&service), created);
    assert_eq!(server.requests().len(), 1, "one watch, no list");
}

#[tokio::test]
async fn kube_watcher_relists_after_410_without_objects_deleted_meanwhile() {
    let server = FakeApiServer::start().await;
    server.load_list_fixture("services-list.json");
    let mut events = services(&server, None);
    assert_eq!(initial_list(&mut events).await.len(), 12);
    until_watching(&server, &mut events).await;
    server.disconnect_watches();
    server.delete("Service", "shop", "web");
    server.compact();

    let mut gone = false;
    loop {
        match next(&mut events).await {
            Err(watcher::Error::WatchError(status)) if status.code == 410 => gone = true,
            Err(_) => {}
            Ok(Event::Init) => break,
            Ok(other) => panic!("unexpected {other:?} before the relist"),
        }
    }
    assert!(gone, "the resumed watch got the 410 ERROR event");
    let names = relisted(&mut events).await;
    assert_eq!(names.len(), 11);
    assert!(!names.iter().any(|n| n == "web"));
}

#[tokio::test]
async fn kube_watcher_recovers_after_restart_without_losing_events() {
    let server = FakeApiServer::start().await;
    server.load_list_fixture("services-list.json");
    let mut events = services(&server, Some(PROXY_LABELS));
    initial_list(&mut events).await;
    until_watching(&server, &mut events).await;
    server.stop().await;
    loop {
        match next(&mut events).await {
            Err(watcher::Error::WatchStartFailed(_)) => break,
            Err(_) => {}
            Ok(other) => panic!("unexpected {other:?} while down"),
        }
    }
    let created = server.apply(promo(json!({"app": "promo"})));
    server.restart().await;
    loop {
        match next(&mut events).await {
            Err(_) => {}
            Ok(Event::Apply(service)) => break assert_eq!((name(&service), rv(&service)), ("promo", created)),
            Ok(other) => panic!("unexpected {other:?} after the restart"),
        }
    }
}

async fn kubeconfig_client(kubeconfig: &str) -> Client {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).expect("a valid kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await;
    Client::try_from(config.expect("a usable kubeconfig")).expect("a client")
}

/// An `Error::Api`'s code, reason and message.
fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("an API error, not {other:?}"),
    }
}

#[tokio::test]
async fn kube_client_gets_401_403_and_404_as_api_errors() {
    let options = Options {
        token: Some("lab-admin-token".into()),
        serve_service_cidrs: false,
        forbidden: vec!["nodes"],
        ..Options::default()
    };
    let server = FakeApiServer::start_with(options).await;
    let good = kubeconfig_client(&server.kubeconfig()).await;
    assert!(Api::<Service>::all(good.clone()).list(&ListParams::default()).await.is_ok());
    let (status, reason, _) = api_error(Api::<ServiceCIDR>::all(good.clone()).list(&ListParams::default()).await);
    assert_eq!((status, reason.as_str()), (404, "NotFound"));
    let (status, _, message) = api_error(Api::<Node>::all(good).list(&ListParams::default()).await);
    assert_eq!(status, 403);
    assert_eq!(
        message,
        r#"nodes is forbidden: User "system:serviceaccount:kube-system:kproxy" cannot list resource "nodes" in API group "" at the cluster scope"#
    );
    let bad = kubeconfig_client(&server.kubeconfig().replace("lab-admin-token", "bad-token")).await;
    let (status, reason, _) = api_error(Api::<Service>::all(bad).list(&ListParams::default()).await);
    assert_eq!((status, reason.as_str()), (401, "Unauthorized"));
}

#[tokio::test]
async fn kube_client_lists_servicecidrs_when_served() {
    let server = FakeApiServer::start().await;
    server.apply(json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16"]}}));
    let list = Api::<ServiceCIDR>::all(client(&server)).list(&ListParams::default()).await.expect("a list");
    assert_eq!(list.items.len(), 1);
    let cidrs = list.items[0].spec.as_ref().and_then(|spec| spec.cidrs.clone());
    assert_eq!(cidrs, Some(vec!["10.96.0.0/16".to_owned()]));
}
