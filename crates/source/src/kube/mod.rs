//! The Kubernetes API server as a source: kube-rs watchers on Services,
//! EndpointSlices, this Node and ServiceCIDRs, with kube-proxy's label
//! selectors.
//!
//! Objects are converted as they arrive and only the converted values go
//! on (managed fields, status conditions and the rest are never stored).
//! `Synced` follows the first complete list of every resource, so the
//! first sync never sees a half-listed cluster. Watch errors, 410 Gone and
//! lost connections are retried with backoff forever; a relist deletes what
//! disappeared meanwhile, and until then the last objects stay in force.
//! An update that fails validation is reported and the object's last valid
//! version kept, as the manifest source does.

mod client;
mod metrics;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kproxy_state::{Object, SourceEvent, convert};
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::mpsc;

pub use client::{ConnectError, Connection, RateLimitLayer, check, client};
pub use metrics::{KubeMetrics, ResourceLabel};

use watch::{Follower, Gate};

/// kube-proxy's selector for Services: not owned by another proxy.
pub const SELECTOR_SERVICES: &str = "!service.kubernetes.io/service-proxy-name";
/// kube-proxy's selector for EndpointSlices: not headless, not owned by
/// another proxy.
pub const SELECTOR_SLICES: &str = "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name";

/// The resources kproxy reads from the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    Services,
    EndpointSlices,
    Nodes,
    ServiceCidrs,
}

impl Resource {
    /// The resource's name in API paths and RBAC rules.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Services => "services",
            Resource::EndpointSlices => "endpointslices",
            Resource::Nodes => "nodes",
            Resource::ServiceCidrs => "servicecidrs",
        }
    }
}

/// Told when a resource's watch breaks and when it works again; `/healthz`
/// uses it to report a source that has gone quiet.
pub trait HealthSink: Send + Sync {
    fn lost(&self, resource: Resource, error: String);
    fn recovered(&self, resource: Resource);
}

/// How the source watches.
#[derive(Clone, Debug)]
pub struct KubeOptions {
    /// This node's name: its Node is watched by name.
    pub node_name: String,
    /// Watch ServiceCIDRs (the server serves them and kproxy may read them;
    /// see [`check`]).
    pub service_cidrs: bool,
    /// Objects per list page.
    pub page_size: u32,
    /// Longest wait between retries of a failing watch (client-go's
    /// reflector uses 30 s).
    pub max_backoff: Duration,
    /// Server-side timeout of each watch request, in seconds (kube-rs
    /// renews the watch after it).
    pub watch_timeout: u32,
}

impl KubeOptions {
    pub fn new(node_name: impl Into<String>) -> Self {
        Self {
            node_name: node_name.into(),
            service_cidrs: true,
            page_size: 500,
            max_backoff: Duration::from_secs(30),
            watch_timeout: 290,
        }
    }
}

/// The API server, watched, feeding events to the state.
pub struct KubeSource {
    client: kube::Client,
    options: KubeOptions,
    metrics: KubeMetrics,
    health: Arc<dyn HealthSink>,
}

impl KubeSource {
    pub fn new(client: kube::Client, options: KubeOptions, metrics: KubeMetrics, health: Arc<dyn HealthSink>) -> Self {
        Self { client, options, metrics, health }
    }

    /// Lists and watches until the receiver goes away; never gives up on
    /// the server.
    pub async fn run(self, events: mpsc::Sender<SourceEvent>) {
        let o = &self.options;
        let base = watcher::Config::default().page_size(o.page_size).timeout(o.watch_timeout);
        let gate = Gate::new(if o.service_cidrs { 4 } else { 3 }, events.clone());
        let follower = |resource| Follower::new(resource, &events, &self.metrics, &self.health, &gate, o.max_backoff);

        let services = follower(Resource::Services).follow(
            Api::<Service>::all(self.client.clone()),
            base.clone().labels(SELECTOR_SERVICES),
            |s| convert::service_with_warnings(s).map(|c| c.map(Object::service)),
        );
        let slices = follower(Resource::EndpointSlices).follow(
            Api::<EndpointSlice>::all(self.client.clone()),
            base.clone().labels(SELECTOR_SLICES),
            convert::endpoint_slice_with_warnings,
        );
        let node = follower(Resource::Nodes).follow(
            Api::<Node>::all(self.client.clone()),
            base.clone().fields(&format!("metadata.name={}", o.node_name)),
            |n| convert::node_with_warnings(n).map(|c| c.map(Object::Node)),
        );
        let cidrs = async {
            if o.service_cidrs {
                follower(Resource::ServiceCidrs)
                    .follow(Api::<ServiceCIDR>::all(self.client.clone()), base.clone(), |c| {
                        convert::service_cidr_with_warnings(c).map(|c| c.map(Object::ServiceCidr))
                    })
                    .await;
            }
        };
        tokio::join!(services, slices, node, cidrs);
    }
}
