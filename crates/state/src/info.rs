//! Validated, trimmed copies of the Kubernetes objects kproxy reads.
//!
//! Conversion (`crate::convert`) keeps only what the proxy uses, so the
//! trackers hold small values and compare them cheaply.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{
    Annotation, HealthCheck, IpFamily, IpNet, Protocol, Scheduler, ServiceName, SessionAffinity, TrafficPolicy,
};

pub use kproxy_model::IgnoreReason;

/// A Service's `targetPort`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TargetPort {
    Number(u16),
    /// A container port name, resolved per Pod by the endpoint controller.
    Name(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Interned (`crate::intern`): the same few names (`http`, `dns`)
    /// recur across services, slices and the state's port names.
    pub name: Arc<str>,
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: Option<u16>,
    pub target_port: TargetPort,
}

/// What kproxy keeps of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    pub name: ServiceName,
    /// Set for services kproxy must not program; the other fields are then
    /// left empty.
    pub ignored: Option<IgnoreReason>,
    /// `None` for a Service without a selector (its endpoints come from
    /// EndpointSlices or Endpoints written by someone else).
    pub selector: Option<BTreeMap<String, String>>,
    pub cluster_ips: Vec<IpAddr>,
    pub ports: Vec<PortInfo>,
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip` of a LoadBalancer Service, without
    /// `ipMode: Proxy` entries (the load balancer, not the node, handles those).
    pub load_balancer_ips: Vec<IpAddr>,
    pub load_balancer_source_ranges: Vec<IpNet>,
    pub session_affinity: Option<SessionAffinity>,
    pub internal_traffic_policy: TrafficPolicy,
    /// Already `Cluster` for services not reachable from outside (neither
    /// NodePort, LoadBalancer, nor with external IPs).
    pub external_traffic_policy: TrafficPolicy,
    pub health_check_node_port: Option<u16>,
    pub publish_not_ready_addresses: bool,
    /// kproxy's own annotations; `None` when the Service has none (most
    /// do not: boxed, to keep every other Service small).
    pub annotations: Option<Box<Annotations>>,
}

/// A Service's `kproxy.io/*` annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    /// `kproxy.io/scheduler`.
    pub scheduler: Option<Scheduler>,
    /// `kproxy.io/weights`.
    pub weights: BTreeMap<IpAddr, u32>,
    /// `kproxy.io/health-check*`.
    pub health_check: Option<HealthCheck>,
    /// Annotations whose value is bad; the fields above hold their
    /// defaults instead.
    pub invalid: Vec<InvalidAnnotation>,
}

/// A `kproxy.io/*` annotation whose value kproxy cannot use. The Service is
/// still served, with that annotation's default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidAnnotation {
    pub kind: Annotation,
    /// The annotation as written (`kproxy.io/health-check-interval`).
    pub key: String,
    pub reason: String,
}

impl ServiceInfo {
    /// An ignored service: only the name and the reason are kept.
    pub fn ignored(name: ServiceName, reason: IgnoreReason) -> Self {
        Self {
            name,
            ignored: Some(reason),
            selector: None,
            cluster_ips: Vec::new(),
            ports: Vec::new(),
            external_ips: Vec::new(),
            load_balancer_ips: Vec::new(),
            load_balancer_source_ranges: Vec::new(),
            session_affinity: None,
            internal_traffic_policy: TrafficPolicy::Cluster,
            external_traffic_policy: TrafficPolicy::Cluster,
            health_check_node_port: None,
            publish_not_ready_addresses: false,
            annotations: None,
        }
    }

    /// The families this service is served in: those of its cluster IPs.
    pub fn families(&self) -> impl Iterator<Item = IpFamily> + '_ {
        IpFamily::ALL.into_iter().filter(|f| self.cluster_ips.iter().any(|ip| IpFamily::of(ip) == *f))
    }
}

/// Topology hints of an endpoint (zone and node names interned).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hints {
    pub for_zones: Vec<Arc<str>>,
    pub for_nodes: Vec<Arc<str>>,
}

/// One endpoint of a slice, before categorisation.
///
/// The most numerous record kproxy keeps (one per endpoint per slice), so
/// kept small: 48 bytes, the node name interned, the rare hints boxed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SliceEndpoint {
    pub ip: IpAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// Interned (`crate::intern`).
    pub node_name: Option<Arc<str>>,
    pub hints: Option<Box<Hints>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlicePort {
    /// Matches the Service port's name; empty for an unnamed port.
    /// Interned (`crate::intern`).
    pub name: Arc<str>,
    pub protocol: Protocol,
    pub port: u16,
}

/// Endpoints that all serve the same ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointGroup {
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<SliceEndpoint>,
}

/// The endpoints one EndpointSlice (or legacy Endpoints object, or the
/// endpoint controller) contributes to one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceInfo {
    pub service: ServiceName,
    /// One group for an EndpointSlice; one per subset for Endpoints.
    /// Shared: the source, its change tracking and the state builder each
    /// hold the slice, and its endpoints are most of its size.
    pub groups: Arc<Vec<EndpointGroup>>,
}

/// A container port of a Pod, for resolving named target ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// What the endpoint controller needs of a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    /// Interned (`crate::intern`).
    pub namespace: Arc<str>,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub ips: Vec<IpAddr>,
    /// Interned (`crate::intern`).
    pub node_name: Option<Arc<str>>,
    /// Phase Succeeded or Failed: never an endpoint again.
    pub finished: bool,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// The Pod has a deletion timestamp.
    pub terminating: bool,
    pub container_ports: Vec<ContainerPort>,
}

/// What kproxy keeps of a Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub zone: Option<String>,
    /// InternalIP addresses first, then ExternalIP, each in the Node's order.
    pub addresses: Vec<IpAddr>,
    /// `spec.podCIDRs` (or the older `spec.podCIDR`).
    pub pod_cidrs: Vec<IpNet>,
    /// Has a deletion timestamp.
    pub deleting: bool,
    /// Carries the cluster autoscaler's `ToBeDeletedByClusterAutoscaler` taint.
    pub to_be_deleted: bool,
}

/// A ServiceCIDR (`networking.k8s.io/v1`): ranges service IPs come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceCidrInfo {
    pub name: String,
    pub cidrs: Vec<IpNet>,
}
