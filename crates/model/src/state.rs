//! The node's whole desired state: what every dataplane programs.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use imbl::OrdMap;
use ipnet::IpNet;
use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};

use crate::{AnnotationWarning, IgnoreReason, IpFamily, ServiceName, ServicePort, ServicePortName};

/// This node as the proxy sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeState {
    pub name: String,
    /// `topology.kubernetes.io/zone`, used for topology hints.
    pub zone: Option<String>,
    /// The addresses node ports are served on, after `nodePortAddresses`.
    pub node_port_addresses: Vec<IpAddr>,
    /// The families whose node ports are served on every local address
    /// (upstream's `MatchAll`: `nodePortAddresses` names no CIDR of the
    /// family, or a /0). [`NodeState::node_port_addresses`] still lists
    /// the addresses known when the state was built; the iptables mode
    /// matches `addrtype LOCAL` instead, as upstream, so an address added
    /// later serves too.
    pub node_port_match_all: Vec<IpFamily>,
    /// The Node's `spec.podCIDRs`, for `detectLocalMode: NodeCIDR`.
    #[serde(rename = "podCIDRs")]
    pub pod_cidrs: Vec<IpNet>,
    /// False while the Node is being deleted or carries the
    /// `ToBeDeletedByClusterAutoscaler` taint: `/healthz` then fails so
    /// load balancers drain this node.
    pub eligible: bool,
}

/// The state of one IP family.
///
/// Service ports live in a persistent map: cloning a `FamilyState` is O(1)
/// and shares structure, so a dataplane can keep the state it last applied
/// next to the new one without copying 100k services per sync.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FamilyState {
    /// Addresses the cluster allocates service IPs from; an address in here
    /// that no service owns is dropped.
    #[serde(rename = "serviceCIDRs")]
    pub service_cidrs: Vec<IpNet>,
    #[serde(serialize_with = "values_in_order")]
    pub service_ports: OrdMap<ServicePortName, Arc<ServicePort>>,
}

impl FamilyState {
    /// Some port of `service` is served in this family.
    pub fn has_service(&self, service: &ServiceName) -> bool {
        self.ports_of(service).next().is_some()
    }

    /// The ports of `service` in this family, in name order.
    pub fn ports_of<'a>(&'a self, service: &'a ServiceName) -> impl Iterator<Item = &'a ServicePort> + 'a {
        let first = ServicePortName::first_of(service.clone());
        self.service_ports.range(first..).take_while(move |(name, _)| name.service == *service).map(|(_, p)| p.as_ref())
    }
}

/// What one node should program.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyState {
    pub node: NodeState,
    pub ipv4: FamilyState,
    pub ipv6: FamilyState,
    /// Valid Services kproxy programs nothing for, with the reason (a
    /// persistent map, like the service ports: a headless Service per
    /// StatefulSet adds up, and the state is cloned per sync).
    #[serde(serialize_with = "ignored_in_order")]
    pub ignored: OrdMap<ServiceName, IgnoreReason>,
}

impl ProxyState {
    pub fn family(&self, family: IpFamily) -> &FamilyState {
        match family {
            IpFamily::V4 => &self.ipv4,
            IpFamily::V6 => &self.ipv6,
        }
    }

    pub fn family_mut(&mut self, family: IpFamily) -> &mut FamilyState {
        match family {
            IpFamily::V4 => &mut self.ipv4,
            IpFamily::V6 => &mut self.ipv6,
        }
    }

    pub fn service_port(&self, family: IpFamily, name: &ServicePortName) -> Option<&ServicePort> {
        self.family(family).service_ports.get(name).map(Arc::as_ref)
    }

    /// The ports of `service` in both families, IPv4 first.
    pub fn ports_of<'a>(&'a self, service: &'a ServiceName) -> impl Iterator<Item = &'a ServicePort> + 'a {
        IpFamily::ALL.into_iter().flat_map(move |f| self.family(f).ports_of(service))
    }

    /// The annotation warnings of every Service (from all its ports, both
    /// families), each once.
    pub fn warnings(&self) -> BTreeMap<ServiceName, BTreeSet<AnnotationWarning>> {
        let mut out: BTreeMap<ServiceName, BTreeSet<AnnotationWarning>> = BTreeMap::new();
        for port in self.service_ports().filter(|p| !p.warnings.is_empty()) {
            out.entry(port.name.service.clone()).or_default().extend(port.warnings.iter().cloned());
        }
        out
    }

    /// Every service port of both families, IPv4 first, each in name order.
    pub fn service_ports(&self) -> impl Iterator<Item = &ServicePort> + '_ {
        IpFamily::ALL.into_iter().flat_map(|f| self.family(f).service_ports.values().map(Arc::as_ref))
    }
}

/// Service ports serialise as a list (the name is inside each entry): JSON
/// object keys must be strings and the list reads better anyway.
fn values_in_order<S: Serializer>(
    map: &OrdMap<ServicePortName, Arc<ServicePort>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut seq = serializer.serialize_seq(Some(map.len()))?;
    for port in map.values() {
        seq.serialize_element(port.as_ref())?;
    }
    seq.end()
}

/// Ignored services serialise as a list of `{service, reason}`, the reason
/// in the words of the `kproxy state` table.
fn ignored_in_order<S: Serializer>(map: &OrdMap<ServiceName, IgnoreReason>, serializer: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Ignored<'a> {
        service: &'a ServiceName,
        reason: String,
    }
    let mut seq = serializer.serialize_seq(Some(map.len()))?;
    for (service, reason) in map {
        seq.serialize_element(&Ignored { service, reason: reason.to_string() })?;
    }
    seq.end()
}
