//! Desired state: [`ProxyState`] to one virtual server per frontend.

use std::collections::BTreeMap;

use kproxy_model::{Endpoint, Frontend, FrontendKind, IpFamily, ProxyState, Scheduler, ServicePort};

use crate::config::PlanConfig;
use crate::types::{Owner as Claim, Plan, RealServer, Rejected, ServerKey, VirtualServer};

/// The IPVS name of `scheduler`, or `None` when the kernels kproxy targets
/// (6.1) have no such IPVS scheduler. `random` is not an IPVS scheduler at
/// all, and `twos` (`ip_vs_twos`) first shipped in Linux 6.2, so it is not
/// offered even though newer kernels have it.
pub fn ipvs_scheduler(scheduler: Scheduler) -> Option<&'static str> {
    match scheduler {
        Scheduler::Random | Scheduler::Twos => None,
        Scheduler::Rr
        | Scheduler::Wrr
        | Scheduler::Lc
        | Scheduler::Wlc
        | Scheduler::Sed
        | Scheduler::Nq
        | Scheduler::Sh
        | Scheduler::Dh
        | Scheduler::Mh
        | Scheduler::Fo
        | Scheduler::Ovf
        | Scheduler::Lblc
        | Scheduler::Lblcr => Some(scheduler.as_str()),
    }
}

/// Every virtual server, `kube-ipvs0` address and rejected frontend for
/// `state`. Deterministic: the same state gives the same plan.
///
/// Destinations are the endpoint set SEMANTICS.md ("Choosing endpoints")
/// gives the frontend's kind for traffic IPVS sees: the cluster IP uses
/// `internalTrafficPolicy`'s set; node ports, external and load-balancer IPs
/// use `externalTrafficPolicy`'s set. IPVS cannot tell an in-cluster source
/// from an external one, so step 4 (in-cluster clients of an
/// `externalTrafficPolicy: Local` frontend use the cluster set) is the
/// companion nftables table's job, not this plan's.
///
/// When two service ports claim the same virtual server (an external IP
/// equal to another service's cluster IP, say), the lower frontend kind
/// wins (cluster IP first), then the lower service port name; the other
/// is rejected for that frontend only.
pub fn plan(state: &ProxyState, config: &PlanConfig) -> Plan {
    let mut out = Plan::default();
    let mut claims: BTreeMap<ServerKey, Claim> = BTreeMap::new();
    for sp in state.service_ports() {
        let scheduler = config.scheduler_for(sp.scheduler);
        for frontend in frontends(sp, config) {
            let server = virtual_server(sp, &frontend, scheduler);
            let key = server.key();
            let claim = Claim { kind: frontend.kind, port: sp.name.clone() };
            if let Some(held) = claims.get(&key) {
                if *held == claim {
                    continue;
                }
                let keep_held = *held < claim;
                let (winner, loser) = if keep_held { (held, &claim) } else { (&claim, held) };
                out.rejected.push(Rejected {
                    port: loser.port.clone(),
                    family: IpFamily::of(&key.addr),
                    reason: format!(
                        "{} frontend {key} is already served by {} ({})",
                        loser.kind, winner.port, winner.kind
                    ),
                });
                if keep_held {
                    continue;
                }
            }
            claims.insert(key, claim);
            out.servers.insert(key, server);
        }
    }
    out.addresses = out
        .servers
        .keys()
        .filter(|key| claims.get(key).is_some_and(|c| c.kind != FrontendKind::NodePort))
        .map(|key| key.addr)
        .collect();
    out.owners = claims;
    short_circuits(state, config, &mut out);
    out.rejected.sort();
    out.rejected.dedup();
    out
}

/// Short-circuit marks are `MARK_BASE` with a 14-bit index ("KP" in the
/// high bits keeps them apart from other software's marks).
const MARK_BASE: u32 = 0x4b50_0000;
const MARK_INDEXES: u32 = 0x3fff;

/// Whether `mark` is one [`plan`] gives short-circuit servers (with this
/// masquerade bit), so a mark server carrying it is kproxy's.
pub fn is_short_circuit_mark(mark: u32, masquerade_bit: u32) -> bool {
    let masquerade = 1u32 << masquerade_bit.min(31);
    let base = MARK_BASE & !masquerade;
    let index = mark & !masquerade & !base;
    mark & !masquerade & !MARK_INDEXES == base && (1..=MARK_INDEXES).contains(&index)
}

/// A pair of firewall-mark servers for each external frontend of an
/// `externalTrafficPolicy: Local` service with endpoints: in-cluster
/// clients use every endpoint (step 4 of "Choosing endpoints"). A
/// frontend's mark is derived from its address, protocol and port, so it
/// stays the same across syncs and restarts while nothing collides
/// (a collision takes the next free index, in frontend order).
fn short_circuits(state: &ProxyState, config: &PlanConfig, out: &mut Plan) {
    let masquerade = 1u32 << config.masquerade_bit.min(31);
    let base = MARK_BASE & !masquerade;
    let mut used = std::collections::BTreeSet::new();
    let ports: BTreeMap<(IpFamily, &kproxy_model::ServicePortName), &ServicePort> =
        state.service_ports().map(|sp| ((sp.family, &sp.name), sp)).collect();
    let mut added = Vec::new();
    for (key, owner) in &out.owners {
        let Some(sp) = ports.get(&(IpFamily::of(&key.addr), &owner.port)) else { continue };
        if !owner.kind.is_external()
            || sp.external_traffic_policy != kproxy_model::TrafficPolicy::Local
            || sp.cluster_endpoints.is_empty()
        {
            continue;
        }
        let start = fnv1a(key) % MARK_INDEXES;
        let free = (0..MARK_INDEXES)
            .map(|i| base | ((start + i) % MARK_INDEXES + 1))
            .find(|mark| mark & masquerade == 0 && !used.contains(mark));
        let Some(pods) = free else {
            out.rejected.push(Rejected {
                port: owner.port.clone(),
                family: sp.family,
                reason: format!("{key}: no short-circuit mark left; in-cluster clients get its local endpoints"),
            });
            continue;
        };
        used.insert(pods);
        let marks = crate::ShortCircuit { pods, node: pods | masquerade };
        let Some(server) = out.servers.get(key) else { continue };
        for mark in [marks.pods, marks.node] {
            added.push(VirtualServer {
                destinations: real_servers(sp, &sp.cluster_endpoints),
                mark: Some(mark),
                ..server.clone()
            });
        }
        out.short_circuits.insert(*key, marks);
    }
    for server in added {
        out.servers.insert(server.key(), server);
    }
}

/// FNV-1a over a frontend's protocol, address and port.
fn fnv1a(key: &ServerKey) -> u32 {
    let mut bytes = vec![key.protocol as u8];
    match key.addr {
        std::net::IpAddr::V4(a) => bytes.extend(a.octets()),
        std::net::IpAddr::V6(a) => bytes.extend(a.octets()),
    }
    bytes.extend(key.port.to_be_bytes());
    bytes.iter().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

/// `sp`'s frontends, with node ports moved to the configured addresses.
fn frontends(sp: &ServicePort, config: &PlanConfig) -> Vec<Frontend> {
    let Some(addresses) = &config.node_port_addresses else {
        return sp.frontends.clone();
    };
    let mut out: Vec<Frontend> = sp.frontends.iter().filter(|f| f.kind != FrontendKind::NodePort).copied().collect();
    if let Some(node_port) = sp.node_port {
        let mine = addresses.iter().filter(|ip| IpFamily::of(ip) == sp.family);
        out.extend(mine.map(|ip| Frontend::new(FrontendKind::NodePort, *ip, node_port)));
    }
    out.sort();
    out.dedup();
    out
}

fn virtual_server(sp: &ServicePort, frontend: &Frontend, scheduler: &str) -> VirtualServer {
    let endpoints: &[Endpoint] =
        if frontend.kind.is_external() { sp.external_endpoints() } else { sp.internal_endpoints() };
    VirtualServer {
        protocol: sp.name.protocol,
        addr: frontend.ip,
        port: frontend.port,
        scheduler: scheduler.to_owned(),
        persistence: sp.session_affinity.map(|a| a.timeout_seconds),
        destinations: real_servers(sp, endpoints),
        mark: None,
    }
}

fn real_servers(sp: &ServicePort, endpoints: &[Endpoint]) -> Vec<RealServer> {
    let mut destinations: Vec<RealServer> =
        endpoints.iter().map(|e| RealServer { addr: e.ip, port: e.port, weight: sp.weight_of(e.ip) }).collect();
    destinations.sort();
    destinations.dedup_by_key(|d| d.socket_addr());
    destinations
}

#[cfg(test)]
mod tests;
