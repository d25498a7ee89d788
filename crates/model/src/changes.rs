//! What changed since the last successful sync: the input of partial syncs.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::SystemTime;

use serde::Serialize;

use crate::{IpFamily, ServiceName, ServicePortName};

/// A UDP endpoint that a frontend no longer uses: conntrack entries whose
/// original destination is `frontend` and whose reply source is `endpoint`
/// must go, or clients stay stuck on a dead backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct StaleUdpEndpoint {
    pub frontend: SocketAddr,
    pub endpoint: SocketAddr,
}

/// The difference between two successive [`crate::ProxyState`]s, as far as
/// the dataplanes care.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Changes {
    /// Service ports added, removed or modified, per family.
    pub service_ports: BTreeSet<(IpFamily, ServicePortName)>,
    /// UDP endpoints that stopped being used by a frontend.
    pub stale_udp_endpoints: BTreeSet<StaleUdpEndpoint>,
    /// UDP frontends whose conntrack entries must all go: frontends that
    /// disappeared, and frontends that went from no endpoints to some (their
    /// entries cached the rejection).
    pub stale_udp_frontends: BTreeSet<SocketAddr>,
    /// The service CIDRs of some family changed.
    pub service_cidrs: bool,
    /// This node's name, zone, addresses or eligibility changed.
    pub node: bool,
    /// Objects whose net change was folded into this set: services and
    /// endpoint slices (after folding, before turning into service ports).
    pub service_changes: usize,
    pub endpoint_changes: usize,
    /// `endpoints.kubernetes.io/last-change-trigger-time` of the endpoint
    /// changes in this set, per service, for the network-programming metric.
    pub trigger_times: BTreeMap<ServiceName, Vec<SystemTime>>,
}

impl Changes {
    /// Nothing for a dataplane to do.
    pub fn is_empty(&self) -> bool {
        self.service_ports.is_empty()
            && self.stale_udp_endpoints.is_empty()
            && self.stale_udp_frontends.is_empty()
            && !self.service_cidrs
            && !self.node
    }

    /// Folds `later` into `self`, as when a failed sync's changes are
    /// carried into the next attempt.
    pub fn merge(&mut self, later: Changes) {
        self.service_ports.extend(later.service_ports);
        self.stale_udp_endpoints.extend(later.stale_udp_endpoints);
        self.stale_udp_frontends.extend(later.stale_udp_frontends);
        self.service_cidrs |= later.service_cidrs;
        self.node |= later.node;
        self.service_changes += later.service_changes;
        self.endpoint_changes += later.endpoint_changes;
        for (service, times) in later.trigger_times {
            self.trigger_times.entry(service).or_default().extend(times);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Protocol;

    #[test]
    fn merge_keeps_both_sides() {
        let name = |p: &str| ServicePortName::new(ServiceName::new("ns", "svc"), p, Protocol::Udp);
        let stale = StaleUdpEndpoint {
            frontend: "10.0.0.1:53".parse().expect("literal"),
            endpoint: "10.1.0.1:53".parse().expect("literal"),
        };
        let mut a = Changes { service_changes: 1, ..Changes::default() };
        a.service_ports.insert((IpFamily::V4, name("a")));
        let mut b = Changes { endpoint_changes: 2, node: true, ..Changes::default() };
        b.service_ports.insert((IpFamily::V4, name("b")));
        b.stale_udp_endpoints.insert(stale);
        a.merge(b);
        assert_eq!(a.service_ports.len(), 2);
        assert!(a.stale_udp_endpoints.contains(&stale));
        assert!(a.node);
        assert_eq!((a.service_changes, a.endpoint_changes), (1, 2));
        assert!(!a.is_empty());
        assert!(Changes::default().is_empty());
    }
}
