//! Connecting to the API server: configuration, client-side rate limiting,
//! and the startup check that turns an unreachable or unauthorised server
//! into one clear error.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::time::Instant;
use tower::{Layer, Service as TowerService};

use super::{HealthSink, Resource, SELECTOR_SERVICES, SELECTOR_SLICES};

/// Where the API server is and how hard kproxy may query it.
#[derive(Clone, Debug, Default)]
pub struct Connection {
    /// `--kubeconfig` / `clientConnection.kubeconfig`; `None` means
    /// in-cluster (service-account token and CA).
    pub kubeconfig: Option<PathBuf>,
    /// `--master`: overrides the server address of either.
    pub master: Option<String>,
    /// Client-side queries per second (`clientConnection.qps`); 0 or less
    /// means unlimited.
    pub qps: f32,
    /// Queries allowed at once above `qps` (`clientConnection.burst`).
    pub burst: u32,
}

/// Why kproxy cannot use the API server. Every variant names where it
/// looked and what came back.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("--kubeconfig {}: {reason}", path.display())]
    Kubeconfig { path: PathBuf, reason: String },
    #[error(
        "no --kubeconfig given and not running in a Kubernetes pod ({reason}); pass --kubeconfig FILE, \
         or --manifests DIR to run standalone"
    )]
    NotInCluster { reason: String },
    #[error("--master {url:?}: {reason}")]
    Master { url: String, reason: String },
    #[error("API server {url}: {what}: HTTP {code} {reason}: {message}")]
    Refused { url: String, what: String, code: u16, reason: String, message: String },
    #[error("API server {url}: {what}: unreachable: {reason}")]
    Unreachable { url: String, what: String, reason: String },
}

/// A client for the configured server, and its URL (for messages).
/// `health` hears of every successful response per resource: a watch that
/// resumes after an outage brings no event, only its response.
pub async fn client(
    connection: &Connection,
    health: Arc<dyn HealthSink>,
) -> Result<(kube::Client, String), ConnectError> {
    let mut config = match &connection.kubeconfig {
        Some(path) => {
            let invalid = |reason: String| ConnectError::Kubeconfig { path: path.clone(), reason };
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| invalid(chain(&e)))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| invalid(chain(&e)))?
        }
        None => match kube::Config::incluster() {
            Ok(config) => config,
            // `--master` alone: that server, without credentials (as upstream).
            Err(e) => match &connection.master {
                Some(url) => kube::Config::new(parse_url(url)?),
                None => return Err(ConnectError::NotInCluster { reason: chain(&e) }),
            },
        },
    };
    if let Some(url) = &connection.master {
        config.cluster_url = parse_url(url)?;
    }
    let url = config.cluster_url.to_string().trim_end_matches('/').to_owned();
    let unreachable = |e: &dyn std::error::Error| ConnectError::Unreachable {
        url: url.clone(),
        what: "client".into(),
        reason: chain(e),
    };
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| unreachable(&e))?;
    let client = builder
        .with_layer(&ObserveLayer { health })
        .with_layer(&RateLimitLayer::new(connection.qps, connection.burst))
        .build();
    Ok((client, url))
}

fn parse_url(url: &str) -> Result<http::Uri, ConnectError> {
    let invalid = |reason: &str| ConnectError::Master { url: url.to_owned(), reason: reason.to_owned() };
    let uri: http::Uri = url.parse().map_err(|_| invalid("not a URL"))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some() => Ok(uri),
        _ => Err(invalid("want http:// or https:// and a host")),
    }
}

/// Lists each resource once the way the watchers will (one object, with
/// their selectors), so a wrong address, a bad token or missing RBAC stops
/// kproxy at start with the server's answer instead of as retries in the
/// log. Returns whether ServiceCIDRs (Kubernetes 1.33+) can be watched:
/// `false` when the server does not serve them or kproxy may not read them.
pub async fn check(client: &kube::Client, url: &str, node: &str, timeout: Duration) -> Result<bool, ConnectError> {
    let one = ListParams::default().limit(1);
    let node_selector = format!("metadata.name={node}");
    let lists: [(Resource, ListParams); 3] = [
        (Resource::Services, one.clone().labels(SELECTOR_SERVICES)),
        (Resource::EndpointSlices, one.clone().labels(SELECTOR_SLICES)),
        (Resource::Nodes, one.clone().fields(&node_selector)),
    ];
    for (resource, params) in lists {
        list_one(client, resource, &params, timeout).await.map_err(|e| failure(url, resource, e))?;
    }
    match list_one(client, Resource::ServiceCidrs, &one, timeout).await {
        Ok(()) => Ok(true),
        Err(Some(kube::Error::Api(status))) if matches!(status.code, 403 | 404) => {
            tracing::info!(
                code = status.code,
                "the API server does not let kproxy list ServiceCIDRs; using the configured service CIDRs only"
            );
            Ok(false)
        }
        Err(e) => Err(failure(url, Resource::ServiceCidrs, e)),
    }
}

/// `Err(None)`: no answer in time.
async fn list_one(
    client: &kube::Client,
    resource: Resource,
    params: &ListParams,
    timeout: Duration,
) -> Result<(), Option<kube::Error>> {
    match resource {
        Resource::Services => list::<Service>(client, params, timeout).await,
        Resource::EndpointSlices => list::<EndpointSlice>(client, params, timeout).await,
        Resource::Nodes => list::<Node>(client, params, timeout).await,
        Resource::ServiceCidrs => list::<ServiceCIDR>(client, params, timeout).await,
    }
}

async fn list<K>(client: &kube::Client, params: &ListParams, timeout: Duration) -> Result<(), Option<kube::Error>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    match tokio::time::timeout(timeout, api.list(params)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Some(e)),
        Err(_) => Err(None),
    }
}

fn failure(url: &str, resource: Resource, e: Option<kube::Error>) -> ConnectError {
    let what = format!("list {}", resource.as_str());
    match e {
        None => ConnectError::Unreachable { url: url.to_owned(), what, reason: "no answer in time".into() },
        Some(e) => refusal(url, what, &e),
    }
}

fn refusal(url: &str, what: String, e: &kube::Error) -> ConnectError {
    match e {
        kube::Error::Api(status) => ConnectError::Refused {
            url: url.to_owned(),
            what,
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        },
        other => ConnectError::Unreachable { url: url.to_owned(), what, reason: chain(other) },
    }
}

/// An error and its causes on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// A token bucket, as client-go's: `qps` tokens a second, at most `burst`
/// saved up. Requests take their token when they go out and the next one
/// waits off any debt, so the limiter needs no look at a request before it
/// is sent.
#[derive(Debug)]
struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
    }

    /// How long until the bucket holds no debt.
    fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-self.tokens / self.qps) }
    }

    fn take(&mut self, now: Instant) {
        self.refill(now);
        self.tokens -= 1.0;
    }
}

/// Client-side rate limit of requests, `clientConnection.qps` and `burst`.
/// A watch counts once, when it starts, and a paginated list once: its
/// continuation pages are free, since upstream's informers list in one
/// request (from the watch cache) where kube-rs pages through 500 objects
/// at a time to bound memory.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Option<Arc<Mutex<Bucket>>>,
}

impl RateLimitLayer {
    pub fn new(qps: f32, burst: u32) -> Self {
        let bucket = (qps > 0.0).then(|| {
            let burst = f64::from(burst.max(1));
            Arc::new(Mutex::new(Bucket { qps: f64::from(qps), burst, tokens: burst, last: Instant::now() }))
        });
        Self { bucket }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited { inner, bucket: self.bucket.clone(), wait: None }
    }
}

pub struct RateLimited<S> {
    inner: S,
    bucket: Option<Arc<Mutex<Bucket>>>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

fn lock(bucket: &Mutex<Bucket>) -> std::sync::MutexGuard<'_, Bucket> {
    bucket.lock().unwrap_or_else(|p| p.into_inner())
}

impl<S: TowerService<http::Request<B>>, B> TowerService<http::Request<B>> for RateLimited<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        loop {
            if let Some(wait) = &mut self.wait {
                ready!(wait.as_mut().poll(cx));
                self.wait = None;
            }
            let Some(bucket) = &self.bucket else { break };
            let delay = lock(bucket).wait(Instant::now());
            if delay.is_zero() {
                break;
            }
            self.wait = Some(Box::pin(tokio::time::sleep(delay)));
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> S::Future {
        let continuation = request.uri().query().is_some_and(|q| q.split('&').any(|p| p.starts_with("continue=")));
        if let (Some(bucket), false) = (&self.bucket, continuation) {
            lock(bucket).take(Instant::now());
        }
        self.inner.call(request)
    }
}

/// Reports each successful response to the [`HealthSink`], by the
/// resource its path names.
#[derive(Clone)]
struct ObserveLayer {
    health: Arc<dyn HealthSink>,
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observed<S>;

    fn layer(&self, inner: S) -> Observed<S> {
        Observed { inner, health: self.health.clone() }
    }
}

struct Observed<S> {
    inner: S,
    health: Arc<dyn HealthSink>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> TowerService<http::Request<B>> for Observed<S>
where
    S: TowerService<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let resource = resource_of(request.uri().path());
        let health = self.health.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            if let (Ok(r), Some(resource)) = (&response, resource)
                && r.status().is_success()
            {
                health.recovered(resource);
            }
            response
        })
    }
}

/// The resource an API path is about: its last segment, or the one before
/// an object's name.
fn resource_of(path: &str) -> Option<Resource> {
    let segments: Vec<&str> = path.trim_end_matches('/').rsplit('/').take(2).collect();
    segments.into_iter().find_map(|s| match s {
        "services" => Some(Resource::Services),
        "endpointslices" => Some(Resource::EndpointSlices),
        "nodes" => Some(Resource::Nodes),
        "servicecidrs" => Some(Resource::ServiceCidrs),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_name_their_resource() {
        assert_eq!(resource_of("/api/v1/services"), Some(Resource::Services));
        assert_eq!(resource_of("/api/v1/namespaces/shop/services/web"), Some(Resource::Services));
        assert_eq!(resource_of("/apis/discovery.k8s.io/v1/endpointslices"), Some(Resource::EndpointSlices));
        assert_eq!(resource_of("/apis/networking.k8s.io/v1/servicecidrs"), Some(Resource::ServiceCidrs));
        assert_eq!(resource_of("/api/v1/nodes"), Some(Resource::Nodes));
        assert_eq!(resource_of("/version"), None);
    }

    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_paces_at_qps() {
        let t0 = Instant::now();
        let mut bucket = Bucket { qps: 5.0, burst: 10.0, tokens: 10.0, last: t0 };
        for _ in 0..10 {
            assert_eq!(bucket.wait(t0), Duration::ZERO);
            bucket.take(t0);
        }
        // The burst is spent: the next request goes out, the one after it
        // waits for that token to be earned back.
        assert_eq!(bucket.wait(t0), Duration::ZERO);
        bucket.take(t0);
        assert_eq!(bucket.wait(t0), Duration::from_millis(200));
        // A quiet second earns five tokens, one of them owed: four go out
        // at once, and a fifth on the last of them.
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..5 {
            assert_eq!(bucket.wait(t1), Duration::ZERO);
            bucket.take(t1);
        }
        assert!(bucket.wait(t1) > Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn continuation_pages_are_free_and_other_requests_wait_for_their_token() {
        use tower::ServiceExt as _;
        let service = tower::service_fn(|_: http::Request<()>| async { Ok::<_, std::convert::Infallible>(()) });
        let mut limited = RateLimitLayer::new(1.0, 1).layer(service);
        let request = |query: &str| http::Request::get(format!("/api/v1/services?{query}")).body(()).unwrap();
        let start = Instant::now();
        limited.ready().await.unwrap().call(request("limit=500")).await.unwrap();
        for _ in 0..5 {
            limited.ready().await.unwrap().call(request("limit=500&continue=abc")).await.unwrap();
        }
        // The burst of one went to the list; its pages were free, and the
        // next request goes out on credit.
        limited.ready().await.unwrap().call(request("watch=1")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
        limited.ready().await.unwrap().call(request("watch=1")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(1), "one token a second");
    }

    #[test]
    fn master_must_be_an_http_url() {
        assert!(parse_url("https://10.0.0.1:6443").is_ok());
        let e = parse_url("10.0.0.1:6443").unwrap_err().to_string();
        assert!(e.contains("--master \"10.0.0.1:6443\""), "{e}");
    }
}
