//! `kubeproxy_sync_proxy_rules_no_local_endpoints_total`, kept up to date
//! from the changed service ports only, so a sync never walks every service.

use std::collections::BTreeSet;

use kproxy_model::{Changes, IpFamily, ProxyState, ServicePortName, TrafficPolicy};

/// Service ports with a Local policy and no local endpoint, by policy.
#[derive(Debug, Default)]
pub struct NoLocalEndpoints {
    internal: BTreeSet<(IpFamily, ServicePortName)>,
    external: BTreeSet<(IpFamily, ServicePortName)>,
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
            set(&mut self.internal, key, lacks(|p| p.internal_traffic_policy));
            set(&mut self.external, key, lacks(external));
        }
    }

    /// (internal, external) counts for `family`.
    pub fn counts(&self, family: IpFamily) -> (usize, usize) {
        let count = |set: &BTreeSet<(IpFamily, ServicePortName)>| set.iter().filter(|(f, _)| *f == family).count();
        (count(&self.internal), count(&self.external))
    }
}

fn set(set: &mut BTreeSet<(IpFamily, ServicePortName)>, key: &(IpFamily, ServicePortName), member: bool) {
    if member {
        set.insert(key.clone());
    } else {
        set.remove(key);
    }
}
