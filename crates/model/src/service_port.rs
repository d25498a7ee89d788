//! Everything a dataplane needs to program one service port of one family.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

use crate::{AnnotationWarning, Endpoint, Frontend, FrontendKind, HealthCheck, IpFamily, Scheduler, ServicePortName};

/// `internalTrafficPolicy` / `externalTrafficPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub enum TrafficPolicy {
    #[default]
    Cluster,
    Local,
}

/// `sessionAffinity: ClientIP`: pin a client to its first endpoint for
/// `timeout_seconds` of inactivity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionAffinity {
    pub timeout_seconds: u32,
}

/// One port of one Service in one IP family, with its frontends and the
/// endpoint sets computed for this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    pub name: ServicePortName,
    pub family: IpFamily,
    /// The Service's `port`, served on cluster, external and load-balancer IPs.
    pub port: u16,
    pub node_port: Option<u16>,
    /// Sorted; cluster IPs first, then external IPs, load-balancer IPs and
    /// node ports (the order of [`FrontendKind`]).
    pub frontends: Vec<Frontend>,
    /// `loadBalancerSourceRanges` of this family. `None` when the Service
    /// sets none: every source may reach its load-balancer IPs. `Some(empty)`
    /// when it sets ranges of the other family only: no source of this
    /// family may.
    pub load_balancer_source_ranges: Option<Vec<IpNet>>,
    pub internal_traffic_policy: TrafficPolicy,
    /// `Cluster` for services not reachable from outside the cluster.
    pub external_traffic_policy: TrafficPolicy,
    pub session_affinity: Option<SessionAffinity>,
    /// From the `kproxy.io/scheduler` annotation; `None` is the mode's
    /// default (also when the annotation is bad or names a scheduler the
    /// mode cannot do: see `warnings`).
    pub scheduler: Option<Scheduler>,
    /// From `kproxy.io/weights`: endpoint address -> weight; unlisted
    /// endpoints weigh 1, and weight 0 takes an endpoint out of new picks.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<IpAddr, u32>,
    /// From `kproxy.io/health-check*`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Only for LoadBalancer services with `externalTrafficPolicy: Local`.
    pub health_check_node_port: Option<u16>,
    /// The Service's `kproxy.io/*` annotations that are not honoured (bad,
    /// or not supported by the running mode), each replaced by its
    /// default: the fields above hold what is used.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<AnnotationWarning>,
    /// Endpoints usable from anywhere in the cluster (SEMANTICS.md,
    /// "Choosing endpoints", steps 1-2).
    pub cluster_endpoints: Vec<Endpoint>,
    /// Usable endpoints on this node.
    pub local_endpoints: Vec<Endpoint>,
}

impl ServicePort {
    /// A port with no frontends or endpoints, both traffic policies
    /// `Cluster` and nothing else set: a starting point for callers (and
    /// tests) that fill in the rest.
    pub fn new(name: ServicePortName, family: IpFamily, port: u16) -> Self {
        Self {
            name,
            family,
            port,
            node_port: None,
            frontends: Vec::new(),
            load_balancer_source_ranges: None,
            internal_traffic_policy: TrafficPolicy::Cluster,
            external_traffic_policy: TrafficPolicy::Cluster,
            session_affinity: None,
            scheduler: None,
            weights: BTreeMap::new(),
            health_check: None,
            health_check_node_port: None,
            warnings: Vec::new(),
            cluster_endpoints: Vec::new(),
            local_endpoints: Vec::new(),
        }
    }

    /// An endpoint's weight (`kproxy.io/weights`, default 1).
    pub fn weight_of(&self, ip: IpAddr) -> u32 {
        self.weights.get(&ip).copied().unwrap_or(1)
    }

    /// Endpoints for traffic to the cluster IP (and for in-cluster traffic to
    /// external frontends, SEMANTICS.md step 4).
    pub fn internal_endpoints(&self) -> &[Endpoint] {
        match self.internal_traffic_policy {
            TrafficPolicy::Cluster => &self.cluster_endpoints,
            TrafficPolicy::Local => &self.local_endpoints,
        }
    }

    /// Endpoints for traffic from outside the cluster to external frontends.
    pub fn external_endpoints(&self) -> &[Endpoint] {
        match self.external_traffic_policy {
            TrafficPolicy::Cluster => &self.cluster_endpoints,
            TrafficPolicy::Local => &self.local_endpoints,
        }
    }

    /// Endpoints for traffic arriving on a frontend of `kind`, from outside
    /// the cluster when `external_source` is set. In-cluster traffic to an
    /// external frontend uses the cluster set even under
    /// `externalTrafficPolicy: Local`, so pods and the node still reach it
    /// (SEMANTICS.md, "Choosing endpoints", step 4).
    pub fn endpoints_for(&self, kind: FrontendKind, external_source: bool) -> &[Endpoint] {
        match (kind.is_external(), external_source) {
            (false, _) => self.internal_endpoints(),
            (true, true) => self.external_endpoints(),
            (true, false) => &self.cluster_endpoints,
        }
    }

    /// Every endpoint that traffic to a frontend of `kind` may reach, from
    /// any source.
    pub fn reachable_via(&self, kind: FrontendKind) -> Vec<&Endpoint> {
        let mut reachable: Vec<&Endpoint> = self.endpoints_for(kind, false).iter().collect();
        if kind.is_external() {
            reachable.extend(self.external_endpoints());
        }
        reachable.sort();
        reachable.dedup();
        reachable
    }

    pub fn cluster_ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.frontends_of(FrontendKind::ClusterIp).map(|f| f.ip)
    }

    pub fn frontends_of(&self, kind: FrontendKind) -> impl Iterator<Item = &Frontend> + '_ {
        self.frontends.iter().filter(move |f| f.kind == kind)
    }
}
