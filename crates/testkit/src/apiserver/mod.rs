//! An in-process fake kube-apiserver for tests: plain HTTP/1.1 on 127.0.0.1,
//! speaking the wire protocol of the captures in `testdata/apiserver` closely
//! enough that kube-rs's `watcher` runs against it unmodified.
//!
//! It serves services, endpointslices, nodes and servicecidrs (GET, LIST,
//! WATCH) and discovery; writes come only from the test, through
//! [`FakeApiServer::apply`] and [`FakeApiServer::delete`]. It does no
//! validation, defaulting, admission or IP allocation, and must never listen
//! beyond loopback.

mod discovery;
mod handler;
mod resource;
mod response;
mod selector;
mod store;
mod uuid;
mod watch;
mod wire;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::Query;
use axum::http::Uri;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch as signal};
use tokio::task::{JoinHandle, JoinSet};

use resource::Resource;
use store::Store;

/// How the fake behaves.
#[derive(Clone, Debug)]
pub struct Options {
    /// When set, requests without `Authorization: Bearer <token>` get 401.
    pub token: Option<String>,
    /// Bookmarks this often on watches that allow them (besides the one
    /// before the timeout).
    pub bookmark_interval: Option<Duration>,
    /// Serve `networking.k8s.io/v1` servicecidrs; without, 404 as an old server.
    pub serve_service_cidrs: bool,
    /// Resources (plural names, e.g. `"nodes"`) whose every request gets 403.
    pub forbidden: Vec<&'static str>,
}

impl Default for Options {
    fn default() -> Options {
        Options { token: None, bookmark_interval: None, serve_service_cidrs: true, forbidden: Vec::new() }
    }
}

/// One request the server received, for assertions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The raw query string, still percent-encoded.
    pub query: String,
}

impl Request {
    /// A decoded query parameter.
    pub fn param(&self, name: &str) -> Option<String> {
        let uri: Uri = format!("/?{}", self.query).parse().ok()?;
        let Query(mut params) = Query::<HashMap<String, String>>::try_from_uri(&uri).ok()?;
        params.remove(name)
    }

    pub fn is_watch(&self) -> bool {
        self.param("watch").is_some_and(|w| w == "1" || w == "true")
    }
}

/// State that outlives restarts.
pub(crate) struct Shared {
    options: Options,
    store: Mutex<Store>,
    requests: Mutex<Vec<Request>>,
    delay: Mutex<Duration>,
    open_watches: signal::Sender<usize>,
}

/// A lock that survives a test thread panicking while holding it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The fake server. Clones share it; the last one dropped stops it.
#[derive(Clone)]
pub struct FakeApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    listener: Arc<Listener>,
}

/// The accept loop while the server is up.
struct Listener(Mutex<Option<Running>>);

struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(running) = lock(&self.0).take() {
            running.task.abort();
        }
    }
}

const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/apiserver");

impl FakeApiServer {
    /// With [`Options::default`], on 127.0.0.1 and a free port, served by a
    /// task on the current tokio runtime.
    pub async fn start() -> FakeApiServer {
        FakeApiServer::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> FakeApiServer {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.expect("binding a free loopback port always works");
        let addr = listener.local_addr().expect("a bound listener has an address");
        let shared = Arc::new(Shared {
            options,
            store: Mutex::default(),
            requests: Mutex::default(),
            delay: Mutex::default(),
            open_watches: signal::Sender::new(0),
        });
        let running = spawn(listener, shared.clone());
        FakeApiServer { shared, addr, listener: Arc::new(Listener(Mutex::new(Some(running)))) }
    }

    /// `http://127.0.0.1:PORT`; it stays the same across restarts.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig pointing at [`url`](Self::url), with the token if any.
    pub fn kubeconfig(&self) -> String {
        let user = match &self.shared.options.token {
            Some(token) => format!("\n    token: {}", Value::from(token.as_str())),
            None => " {}".to_owned(),
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
             current-context: fake\nusers:\n- name: fake\n  user:{user}\n",
            self.url()
        )
    }

    /// Creates or updates the object that `kind`, `apiVersion`, namespace and
    /// name pick; assigns the next resourceVersion (and uid and
    /// creationTimestamp when missing) and returns that rv. Watches see ADDED
    /// or MODIFIED. Panics on a kind the fake does not serve.
    pub fn apply(&self, object: Value) -> u64 {
        let resource = resource_of(&object);
        lock(&self.shared.store).apply(resource, object, false)
    }

    /// Deletes an object (`kind` as `Service` or `services`); watches get
    /// DELETED with its last state at the deletion's rv. `None` when absent.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) -> Option<u64> {
        let resource = Resource::from_name(kind).unwrap_or_else(|| panic!("the fake serves no kind {kind:?}"));
        lock(&self.shared.store).delete(resource, &resource.key(namespace, name))
    }

    /// Applies every item of a captured list file in `testdata/apiserver`
    /// (`services-list.json`), keeping each item's metadata as captured, and
    /// moves the rv to at least the list's.
    pub fn load_list_fixture(&self, file_name: &str) {
        let path = Path::new(TESTDATA).join(file_name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let list: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
        let kind = list["kind"].as_str().and_then(|k| k.strip_suffix("List")).expect("a captured list has a kind");
        let api_version = list["apiVersion"].as_str().expect("a captured list has an apiVersion");
        let resource = Resource::from_kind(kind, api_version).unwrap_or_else(|| panic!("the fake serves no {kind}"));
        let mut store = lock(&self.shared.store);
        for item in list["items"].as_array().into_iter().flatten() {
            store.apply(resource, item.clone(), true);
        }
        store.advance_to(list["metadata"]["resourceVersion"].as_str().and_then(|rv| rv.parse().ok()).unwrap_or(0));
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).rv()
    }

    /// Forgets the history up to now: a watch from an older rv gets the watch
    /// cache's 410 ERROR event, an Exact LIST or a continue token from before
    /// gets 410.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// Drops the connection of every open watch mid-stream, without the
    /// terminating chunk.
    pub fn disconnect_watches(&self) {
        lock(&self.shared.store).disconnect();
    }

    /// Closes the listener (connection refused) and drops every open connection.
    pub async fn stop(&self) {
        let running = lock(&self.listener.0).take();
        if let Some(Running { stop, task }) = running {
            let _ = stop.send(());
            let _ = task.await;
        }
    }

    /// Listens again on the same port with the same objects, rv and history,
    /// like an apiserver restarting on the same etcd. Does nothing when up.
    pub async fn restart(&self) {
        if lock(&self.listener.0).is_some() {
            return;
        }
        let listener = TcpListener::bind(self.addr).await.expect("the fake's port is free again after stop");
        let running = spawn(listener, self.shared.clone());
        let mut slot = lock(&self.listener.0);
        match slot.as_ref() {
            // A concurrent restart won: keep that one.
            Some(_) => running.task.abort(),
            None => *slot = Some(running),
        }
    }

    /// Every response first waits this long.
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.shared.delay) = delay;
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.shared.requests).clone()
    }

    pub fn open_watches(&self) -> usize {
        *self.shared.open_watches.borrow()
    }

    /// Waits until exactly `n` watches are open.
    pub async fn wait_for_open_watches(&self, n: usize) {
        let mut open = self.shared.open_watches.subscribe();
        let _ = open.wait_for(|open| *open == n).await;
    }
}

fn resource_of(object: &Value) -> Resource {
    let field = |name: &str| object[name].as_str().unwrap_or_default();
    let (kind, api_version) = (field("kind"), field("apiVersion"));
    Resource::from_kind(kind, api_version).unwrap_or_else(|| panic!("the fake serves no {api_version} {kind}"))
}

fn spawn(listener: TcpListener, shared: Arc<Shared>) -> Running {
    let (stop, stopped) = oneshot::channel();
    let router = Router::new().fallback(handler::handle).with_state(shared);
    let task = tokio::spawn(serve(listener, router, stopped));
    Running { stop, task }
}

/// Accepts until stopped; connections live in a `JoinSet` so that stopping
/// drops them all, as a dying server would.
async fn serve(listener: TcpListener, router: Router, mut stopped: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let service = TowerToHyperService::new(router.clone());
                connections.spawn(async move {
                    // Go writes canonical header names: `Audit-Id`, `Content-Type`.
                    let connection = hyper::server::conn::http1::Builder::new()
                        .title_case_headers(true)
                        .serve_connection(TokioIo::new(stream), service);
                    let _ = connection.await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}
