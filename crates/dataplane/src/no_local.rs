//! `kubeproxy_sync_proxy_rules_no_local_endpoints_total`, kept up to date
//! from the changed service ports only, so a sync never walks every service.

use std::collections::BTreeSet;

use kproxy_model::{Changes, IpFamily, ProxyState, ServicePortName, TrafficPolicy};

/// Service ports with a Local policy and no local endpoint, by policy and
/// family (IPv4, IPv6).
#[derive(Debug, Default)]
pub struct NoLocalEndpoints {
    internal: [BTreeSet<ServicePortName>; 2],
    external: [BTreeSet<ServicePortName>; 2],
}

fn index(family: IpFamily) -> usize {
    usize::from(family == IpFamily::V6)
}

impl NoLocalEndpoints {
    pub fn update(&mut self, state: &ProxyState, changes: &Changes) {
        for key in &changes.service_ports {
            let port = state.service_port(key.0, &key.1);
            let lacks = |policy: fn(&kproxy_model::ServicePort) -> TrafficPolicy| {
                port.is_some_and(|p| policy(p) == TrafficPolicy::Local && p.local_endpoints.is_empty())
            };
            let external = |p: &kproxy_model::ServicePort| {
                if p.frontends.iter().any(|f| f.kind.is_external()) {
                    p.external_traffic_policy
                } else {
                    TrafficPolicy::Cluster
                }
            };
            let i = index(key.0);
            set(&mut self.internal[i], &key.1, lacks(|p| p.internal_traffic_policy));
            set(&mut self.external[i], &key.1, lacks(external));
        }
    }

    /// (internal, external) counts for `family`.
    pub fn counts(&self, family: IpFamily) -> (usize, usize) {
        (self.internal[index(family)].len(), self.external[index(family)].len())
    }
}

fn set(set: &mut BTreeSet<ServicePortName>, key: &ServicePortName, member: bool) {
    if member {
        set.insert(key.clone());
    } else {
        set.remove(key);
    }
}
