//! What one service port wants in the maps: its frontends' selections and
//! flags, the backend groups they pick from, its source ranges and the
//! cluster IPs it owns. Ids are not known here (`sync` allocates them).
//!
//! The choices follow the nftables planner (`kproxy_nftables`'s `port.rs`
//! and `base.rs`), the reference for every mode: same endpoint lists, same
//! verdicts, same masquerading.

use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{Endpoint, Frontend, FrontendKind, IpNet, Protocol, Scheduler, ServicePort, TrafficPolicy};

use crate::config::{MAX_WEIGHTED_SLOTS, PlanConfig, SCHEDULERS, net_bits};
use crate::maps::{Backend, FrontendKey, addr16, flags, sched, verdict};

/// A backend group's content: immutable once written, so two groups are
/// the same group when their content is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GroupSpec {
    pub sched: u8,
    pub slots: Arc<[Backend]>,
}

/// What a selection does: a verdict, or pick in the port's group number i.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    Verdict(u8),
    Group(usize),
}

/// One frontend as the port wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FrontendDesire {
    pub key: FrontendKey,
    pub internal: Pick,
    pub external: Pick,
    pub flags: u32,
    pub affinity_timeout: u32,
    /// Allowed sources (network address, prefix over 128 bits), when
    /// `KP_F_SOURCE_RANGES` is set.
    pub ranges: Vec<([u8; 16], u32)>,
}

/// Everything one port wants.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PortDesire {
    pub frontends: Vec<FrontendDesire>,
    pub groups: Vec<GroupSpec>,
    /// The cluster IPs among its frontends (each gets a port-0 entry).
    pub owned_addresses: Vec<[u8; 16]>,
    pub skips: Vec<String>,
}

/// The IP protocol number of a Service protocol.
pub fn proto_number(protocol: Protocol) -> u8 {
    match protocol {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

/// The map key of a frontend of `protocol`.
pub fn frontend_key(ip: IpAddr, protocol: Protocol, port: u16) -> FrontendKey {
    FrontendKey { addr: addr16(ip), port: port.to_be(), proto: proto_number(protocol), pad: 0 }
}

/// The port-0 key of an owned address (a cluster IP).
pub fn owned_key(addr: [u8; 16]) -> FrontendKey {
    FrontendKey { addr, port: 0, proto: 0, pad: 0 }
}

/// The desire of `port` for the frontends it owns (`owned`, a subset of
/// its frontends: another port may serve the rest). `config` is resolved.
pub(crate) fn desire(port: &ServicePort, owned: &[Frontend], config: &PlanConfig, node_ips: &[IpAddr]) -> PortDesire {
    let mut out = PortDesire::default();
    let scheduler = match port.scheduler {
        Some(s) if SCHEDULERS.contains(&s) => s,
        Some(s) => {
            out.skips.push(format!("{}: scheduler {s} is not supported in ebpf mode; using random", port.name));
            Scheduler::Random
        }
        None => Scheduler::Random,
    };
    let mut lists =
        Lists { port, scheduler, groups: &mut out.groups, skips: &mut out.skips, cluster: None, local: None };
    let mut frontends = Vec::new();
    for f in owned {
        if f.kind == FrontendKind::NodePort && f.ip.is_loopback() {
            // Every pod has its own loopback: a socket hook cannot tell a
            // node port on 127.0.0.1 from a pod's own listener.
            lists.skips.push(format!("{}: node port on {}: loopback node ports are not supported", port.name, f.ip));
            continue;
        }
        frontends.push(frontend(f, config, node_ips, &mut lists));
    }
    out.frontends = frontends;
    let mut owned_addresses: Vec<[u8; 16]> =
        owned.iter().filter(|f| f.kind == FrontendKind::ClusterIp).map(|f| addr16(f.ip)).collect();
    owned_addresses.sort_unstable();
    owned_addresses.dedup();
    out.owned_addresses = owned_addresses;
    out
}

/// The port's two endpoint lists as groups, made once each.
struct Lists<'a> {
    port: &'a ServicePort,
    scheduler: Scheduler,
    groups: &'a mut Vec<GroupSpec>,
    skips: &'a mut Vec<String>,
    cluster: Option<Pick>,
    local: Option<Pick>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum List {
    Cluster,
    Local,
}

impl Lists<'_> {
    fn endpoints(&self, list: List) -> &[Endpoint] {
        match list {
            List::Cluster => &self.port.cluster_endpoints,
            List::Local => &self.port.local_endpoints,
        }
    }

    /// The pick over a non-empty list: its group, or REJECT when no
    /// endpoint may be picked (every weight 0), as the nftables mode.
    fn pick(&mut self, list: List) -> Pick {
        let cached = match list {
            List::Cluster => self.cluster,
            List::Local => self.local,
        };
        if let Some(pick) = cached {
            return pick;
        }
        let pick = match slots(self.port, self.scheduler, self.endpoints(list)) {
            Ok(slots) => {
                let spec = GroupSpec { sched: sched_code(self.scheduler), slots: slots.into() };
                // The two lists may be equal (every endpoint local): one group.
                let i = match self.groups.iter().position(|g| *g == spec) {
                    Some(i) => i,
                    None => {
                        self.groups.push(spec);
                        self.groups.len() - 1
                    }
                };
                Pick::Group(i)
            }
            Err(reason) => {
                self.skips.push(format!("{}: {reason}; rejected", self.port.name));
                Pick::Verdict(verdict::REJECT)
            }
        };
        match list {
            List::Cluster => self.cluster = Some(pick),
            List::Local => self.local = Some(pick),
        }
        pick
    }
}

/// One frontend's selections and flags.
fn frontend(f: &Frontend, config: &PlanConfig, node_ips: &[IpAddr], lists: &mut Lists<'_>) -> FrontendDesire {
    let port = lists.port;
    let external = f.kind.is_external();
    let internal_list = match port.internal_traffic_policy {
        TrafficPolicy::Cluster => List::Cluster,
        TrafficPolicy::Local => List::Local,
    };
    let (primary, short) = match (external, port.external_traffic_policy) {
        (false, _) => (internal_list, None),
        (true, TrafficPolicy::Cluster) => (List::Cluster, None),
        (true, TrafficPolicy::Local) => (List::Local, Some(List::Cluster)),
    };
    let mut flag_bits = if external { flags::EXTERNAL } else { 0 };
    flag_bits |= match (external, port.external_traffic_policy) {
        // masqueradeAll covers cluster IPs only; without it, sources the
        // detector does not know as pods are masqueraded.
        (false, _) if config.masquerade_all => flags::MASQ_INTERNAL | flags::MASQ_EXTERNAL,
        (false, _) if config.detects_local(port.family) => flags::MASQ_EXTERNAL,
        (false, _) => 0,
        (true, TrafficPolicy::Cluster) => flags::MASQ_INTERNAL | flags::MASQ_EXTERNAL,
        // Local keeps the client's address, whoever it is.
        (true, TrafficPolicy::Local) => 0,
    };
    let (internal, external_pick) = if port.cluster_endpoints.is_empty() && port.local_endpoints.is_empty() {
        (Pick::Verdict(verdict::REJECT), Pick::Verdict(verdict::REJECT))
    } else {
        let primary_pick = match lists.endpoints(primary).is_empty() {
            // Endpoints exist, but not for this policy: drop.
            true => Pick::Verdict(verdict::DROP),
            false => lists.pick(primary),
        };
        let short = short.filter(|l| !lists.endpoints(*l).is_empty());
        let internal = match (primary_pick, short) {
            // An unpickable primary list rejects the frontend for everyone.
            (Pick::Verdict(verdict::REJECT), _) => primary_pick,
            // In-cluster clients of a Local frontend use every endpoint
            // (SEMANTICS.md, "Choosing endpoints", step 4).
            (_, Some(list)) => lists.pick(list),
            (_, None) => primary_pick,
        };
        (internal, primary_pick)
    };
    let mut ranges = Vec::new();
    if f.kind == FrontendKind::LoadBalancerIp
        && let Some(allowed) = &port.load_balancer_source_ranges
    {
        flag_bits |= flags::SOURCE_RANGES;
        let mut nets: Vec<IpNet> = allowed.clone();
        // The node reaching its own LB IP sends from that IP: allow it when
        // the ranges allow the node (as upstream and the nftables mode do).
        if allowed.iter().any(|r| node_ips.iter().any(|ip| r.contains(ip))) {
            nets.push(IpNet::from(f.ip));
        }
        ranges = nets.iter().map(net_bits).collect();
        ranges.sort_unstable();
        ranges.dedup();
    }
    FrontendDesire {
        key: frontend_key(f.ip, port.name.protocol, f.port),
        internal,
        external: external_pick,
        flags: flag_bits,
        affinity_timeout: port.session_affinity.map_or(0, |a| a.timeout_seconds.max(1)),
        ranges,
    }
}

/// `KP_SCHED_*` of a scheduler the mode does.
fn sched_code(scheduler: Scheduler) -> u8 {
    match scheduler {
        // Round robin over the weighted slots is IPVS's wrr.
        Scheduler::Rr | Scheduler::Wrr => sched::RR,
        // Maglev: the client hashed into the lookup table.
        Scheduler::Sh | Scheduler::Mh => sched::HASH_SRC,
        Scheduler::Dh => sched::HASH_DST,
        _ => sched::RANDOM,
    }
}

fn backend(e: &Endpoint) -> Backend {
    Backend { addr: addr16(e.ip), port: e.port.to_be(), pad: 0 }
}

/// The pick slots of a non-empty endpoint list: Maglev's lookup table for
/// `mh`, else the endpoints weighted in IPVS wrr order
/// (`kproxy_sched::wrr_table`; one slot each without weights or when the
/// weights need more than [`MAX_WEIGHTED_SLOTS`]).
fn slots(port: &ServicePort, scheduler: Scheduler, endpoints: &[Endpoint]) -> Result<Vec<Backend>, String> {
    const ALL_ZERO: &str = "every endpoint has weight 0 (kproxy.io/weights)";
    if scheduler == Scheduler::Mh {
        let members: Vec<kproxy_sched::Member> = endpoints
            .iter()
            .map(|e| kproxy_sched::Member { id: kproxy_sched::member_id(e.addr()), weight: port.weight_of(e.ip) })
            .collect();
        let table = kproxy_sched::maglev_table(&members);
        if table.is_empty() {
            return Err(ALL_ZERO.into());
        }
        return Ok(table.into_iter().map(|i| backend(&endpoints[i])).collect());
    }
    let weights: Vec<u32> = endpoints.iter().map(|e| port.weight_of(e.ip)).collect();
    if weights.iter().all(|w| *w == 1) {
        return Ok(endpoints.iter().map(backend).collect());
    }
    let len = kproxy_sched::wrr_table_len(&weights);
    if len == 0 {
        return Err(ALL_ZERO.into());
    }
    if len > MAX_WEIGHTED_SLOTS as u64 {
        return Ok(endpoints.iter().map(backend).collect());
    }
    Ok(kproxy_sched::wrr_table(&weights).into_iter().map(|i| backend(&endpoints[i])).collect())
}

#[cfg(test)]
mod tests {
    use kproxy_model::{IpFamily, ServiceName, ServicePortName, TrafficPolicy};

    use super::*;

    fn ep(ip: &str, local: bool) -> Endpoint {
        Endpoint { ip: ip.parse().expect("ip"), port: 8080, ready: true, serving: true, terminating: false, local }
    }

    fn lb_local(endpoints: Vec<Endpoint>) -> ServicePort {
        let name = ServicePortName::new(ServiceName::new("default", "lb"), "http", Protocol::Tcp);
        let mut port = ServicePort::new(name, IpFamily::V4, 80);
        port.frontends = vec![
            Frontend::new(FrontendKind::ClusterIp, "10.96.0.1".parse().expect("ip"), 80),
            Frontend::new(FrontendKind::LoadBalancerIp, "192.0.2.1".parse().expect("ip"), 80),
        ];
        port.external_traffic_policy = TrafficPolicy::Local;
        port.local_endpoints = endpoints.iter().filter(|e| e.local).cloned().collect();
        port.cluster_endpoints = endpoints;
        port
    }

    #[test]
    fn a_frontend_key_is_network_order_with_the_protocol_number() {
        let key = frontend_key("10.96.0.1".parse().expect("ip"), Protocol::Sctp, 0x1234);
        assert_eq!(key.port.to_ne_bytes(), [0x12, 0x34]);
        assert_eq!((key.proto, key.pad), (132, 0));
        assert_eq!(owned_key(key.addr).port, 0);
    }

    #[test]
    fn local_policy_uses_local_endpoints_outside_and_every_endpoint_inside() {
        let port = lb_local(vec![ep("10.244.1.1", true), ep("10.244.2.1", false)]);
        let d = desire(&port, &port.frontends, &PlanConfig::default(), &[]);
        let lb = &d.frontends[1];
        let (Pick::Group(inside), Pick::Group(outside)) = (lb.internal, lb.external) else { panic!("{lb:?}") };
        assert_eq!((d.groups[inside].slots.len(), d.groups[outside].slots.len()), (2, 1));
        assert_eq!(lb.flags, flags::EXTERNAL);
        assert_eq!(d.owned_addresses, vec![addr16("10.96.0.1".parse().expect("ip"))]);
    }

    #[test]
    fn local_policy_without_local_endpoints_drops_external_and_without_any_rejects() {
        let port = lb_local(vec![ep("10.244.2.1", false)]);
        let d = desire(&port, &port.frontends, &PlanConfig::default(), &[]);
        assert_eq!(d.frontends[1].external, Pick::Verdict(verdict::DROP));
        assert!(matches!(d.frontends[1].internal, Pick::Group(_)));
        let empty = lb_local(Vec::new());
        let d = desire(&empty, &empty.frontends, &PlanConfig::default(), &[]);
        for f in &d.frontends {
            assert_eq!((f.internal, f.external), (Pick::Verdict(verdict::REJECT), Pick::Verdict(verdict::REJECT)));
        }
        assert!(d.groups.is_empty());
    }

    #[test]
    fn every_weight_zero_rejects_and_says_why() {
        let mut port = lb_local(vec![ep("10.244.1.1", true)]);
        port.weights.insert("10.244.1.1".parse().expect("ip"), 0);
        let d = desire(&port, &port.frontends, &PlanConfig::default(), &[]);
        assert_eq!(d.frontends[0].internal, Pick::Verdict(verdict::REJECT));
        assert!(d.skips[0].contains("weight 0"), "{:?}", d.skips);
    }
}
