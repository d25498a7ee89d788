//! One Service's ports for one node: frontends, merged endpoints, and the
//! categorised endpoint sets.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kproxy_model::{Frontend, FrontendKind, IpFamily, IpNet, ModeSupport, NodeState, ServicePort, ServicePortName};

use crate::annotation::{check_weight_slots, honoured};
use crate::categorize::{Candidate, Locality, categorize};
use crate::info::{ServiceInfo, SliceInfo};

/// Builds every service port of `service` in every family it is served in,
/// with what the mode of `support` honours of its annotations.
pub fn service_ports<'a>(
    service: &ServiceInfo,
    slices: impl IntoIterator<Item = &'a SliceInfo> + Clone,
    node: &NodeState,
    support: &ModeSupport,
) -> Vec<ServicePort> {
    if service.ignored.is_some() {
        return Vec::new();
    }
    let honoured = honoured(service, support);
    let here = Locality { node_name: &node.name, zone: node.zone.as_deref() };
    let mut out = Vec::new();
    for family in service.families() {
        fn of_family(ips: &[IpAddr], family: IpFamily) -> impl Iterator<Item = IpAddr> + '_ {
            ips.iter().copied().filter(move |ip| IpFamily::of(ip) == family)
        }
        for port in &service.ports {
            let name = ServicePortName::new(service.name.clone(), port.name.clone(), port.protocol);
            let mut frontends: Vec<Frontend> = Vec::new();
            for (kind, ips) in [
                (FrontendKind::ClusterIp, &service.cluster_ips),
                (FrontendKind::ExternalIp, &service.external_ips),
                (FrontendKind::LoadBalancerIp, &service.load_balancer_ips),
            ] {
                frontends.extend(of_family(ips, family).map(|ip| Frontend::new(kind, ip, port.port)));
            }
            if let Some(node_port) = port.node_port {
                let addresses = of_family(&node.node_port_addresses, family);
                frontends.extend(addresses.map(|ip| Frontend::new(FrontendKind::NodePort, ip, node_port)));
            }
            frontends.sort();
            frontends.dedup();

            let candidates = candidates(slices.clone(), &name, family);
            let sets = categorize(&candidates, here);
            let mut service_port = ServicePort {
                family,
                port: port.port,
                node_port: port.node_port,
                frontends,
                load_balancer_source_ranges: source_ranges(&service.load_balancer_source_ranges, family),
                internal_traffic_policy: service.internal_traffic_policy,
                external_traffic_policy: service.external_traffic_policy,
                session_affinity: service.session_affinity,
                scheduler: honoured.scheduler,
                weights: honoured.weights.clone(),
                health_check: honoured.health_check.clone(),
                health_check_node_port: service.health_check_node_port,
                warnings: honoured.warnings.clone(),
                cluster_endpoints: sets.cluster,
                local_endpoints: sets.local,
                name,
            };
            check_weight_slots(&mut service_port, support);
            out.push(service_port);
        }
    }
    out
}

/// `None`: no filter. A `/0` range allows everyone, so it is no filter
/// either. Ranges of the other family only: `Some(empty)`, nobody of this
/// family may connect. Upstream leaves that family unfiltered instead; a
/// user who lists allowed sources means "only these".
fn source_ranges(ranges: &[IpNet], family: IpFamily) -> Option<Vec<IpNet>> {
    if ranges.is_empty() {
        return None;
    }
    let mine: Vec<IpNet> = ranges.iter().copied().filter(|r| IpFamily::of(&r.addr()) == family).collect();
    if mine.iter().any(|r| r.prefix_len() == 0) {
        return None;
    }
    Some(mine)
}

/// The endpoints of one service port in one family, merged over all slices
/// and deduplicated by address: a ready copy beats a non-ready one, then a
/// non-terminating copy beats a terminating one. Sorted by address.
fn candidates<'a>(
    slices: impl IntoIterator<Item = &'a SliceInfo>,
    name: &ServicePortName,
    family: IpFamily,
) -> Vec<Candidate> {
    let mut merged: BTreeMap<(IpAddr, u16), Candidate> = BTreeMap::new();
    for group in slices.into_iter().flat_map(|s| s.groups.iter()) {
        let ports = group.ports.iter().filter(|p| *p.name == *name.port && p.protocol == name.protocol);
        for port in ports {
            for ep in group.endpoints.iter().filter(|ep| IpFamily::of(&ep.ip) == family) {
                let candidate = Candidate {
                    ip: ep.ip,
                    port: port.port,
                    ready: ep.ready,
                    serving: ep.serving,
                    terminating: ep.terminating,
                    node_name: ep.node_name.clone(),
                    hints: ep.hints.clone(),
                };
                let better =
                    |old: &Candidate| (candidate.ready, !candidate.terminating) > (old.ready, !old.terminating);
                match merged.get(&(ep.ip, port.port)) {
                    Some(old) if !better(old) => {}
                    _ => {
                        merged.insert((ep.ip, port.port), candidate);
                    }
                }
            }
        }
    }
    merged.into_values().collect()
}
