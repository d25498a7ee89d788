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

/// Every virtual server, `kube-ipvs0` address and rejected service port
/// for `state`. Deterministic: the same state gives the same plan.
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
        let requested = config.scheduler_for(sp.scheduler);
        let Some(scheduler) = ipvs_scheduler(requested) else {
            out.rejected.push(Rejected {
                port: sp.name.clone(),
                family: sp.family,
                reason: format!("scheduler {requested} has no IPVS equivalent on the supported kernels"),
            });
            continue;
        };
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
    out.rejected.sort();
    out.rejected.dedup();
    out.owners = claims;
    out
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
    let mut destinations: Vec<RealServer> =
        endpoints.iter().map(|e| RealServer { addr: e.ip, port: e.port, weight: sp.weight_of(e.ip) }).collect();
    destinations.sort();
    destinations.dedup_by_key(|d| d.socket_addr());
    VirtualServer {
        protocol: sp.name.protocol,
        addr: frontend.ip,
        port: frontend.port,
        scheduler: scheduler.to_owned(),
        persistence: sp.session_affinity.map(|a| a.timeout_seconds),
        destinations,
    }
}

#[cfg(test)]
mod tests;
