//! Which service port each userspace frontend serves, and what the mode
//! leaves out: SCTP ports, and a frontend two service ports claim (an
//! external IP equal to another Service's cluster IP, say). As in the
//! kernel modes a cluster IP beats any other kind of claim (the API server
//! allocates cluster IPs, never twice, while anyone may write an external
//! IP, CVE-2020-8554), then the first in name order; the loser is reported.
//! Pure: `apply` and `kproxy state` ask the same function.

use std::collections::HashMap;
use std::net::SocketAddr;

use kproxy_model::{FrontendKind, Protocol, ProxyState, ServicePortName};

/// A frontend as the userspace mode listens on it.
pub(crate) type Key = (Protocol, SocketAddr);

/// The service port and frontend kind that own each frontend; `skips`
/// gets one reason per port or frontend not served.
pub(crate) fn owners(state: &ProxyState, skips: &mut Vec<String>) -> HashMap<Key, (ServicePortName, FrontendKind)> {
    let mut owners: HashMap<Key, (ServicePortName, FrontendKind)> = HashMap::new();
    let mut claims: Vec<(Key, &ServicePortName, FrontendKind)> = Vec::new();
    for port in state.service_ports() {
        if port.name.protocol == Protocol::Sctp {
            skips.push(format!("{}: SCTP is not served in userspace mode", port.name));
            continue;
        }
        for f in &port.frontends {
            claims.push(((port.name.protocol, f.addr()), &port.name, f.kind));
        }
    }
    let rank = |name: &ServicePortName, kind: FrontendKind| (kind != FrontendKind::ClusterIp, name.clone());
    for (key, name, kind) in &claims {
        let owner = owners.entry(*key).or_insert_with(|| ((*name).clone(), *kind));
        if rank(name, *kind) < rank(&owner.0, owner.1) {
            *owner = ((*name).clone(), *kind);
        }
    }
    for (key, name, _) in claims {
        let (owner, _) = &owners[&key];
        if owner != name {
            skips.push(format!("{name}: frontend {} is already served by {owner}; not served", key.1));
        }
    }
    owners
}

/// What the userspace mode does not serve of `state`, each with its
/// reason (frontends that cannot listen are found only when listening).
pub fn not_served(state: &ProxyState) -> Vec<String> {
    let mut skips = Vec::new();
    owners(state, &mut skips);
    skips
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kproxy_model::{Frontend, IpFamily, ServiceName, ServicePort};

    use super::*;

    fn port(name: &str, protocol: Protocol, frontends: &[(FrontendKind, &str)]) -> ServicePort {
        let name = ServicePortName::new(ServiceName::new("default", name), "p", protocol);
        ServicePort {
            frontends: frontends.iter().map(|(kind, ip)| Frontend::new(*kind, ip.parse().unwrap(), 80)).collect(),
            ..ServicePort::new(name, IpFamily::V4, 80)
        }
    }

    fn state(ports: Vec<ServicePort>) -> ProxyState {
        let mut state = ProxyState::default();
        for p in ports {
            state.ipv4.service_ports.insert(p.name.clone(), Arc::new(p));
        }
        state
    }

    #[test]
    fn a_cluster_ip_beats_an_external_ip_claim_whatever_the_names() {
        // "aaa" sorts first, but claims the address as an external IP.
        let thief = port(
            "aaa",
            Protocol::Tcp,
            &[(FrontendKind::ClusterIp, "10.96.0.9"), (FrontendKind::ExternalIp, "10.96.0.10")],
        );
        let owner = port("web", Protocol::Tcp, &[(FrontendKind::ClusterIp, "10.96.0.10")]);
        let state = state(vec![thief, owner]);
        let mut skips = Vec::new();
        let owners = owners(&state, &mut skips);
        let at = |ip: &str| owners[&(Protocol::Tcp, SocketAddr::new(ip.parse().unwrap(), 80))].0.service.name.clone();
        assert_eq!((&*at("10.96.0.10"), &*at("10.96.0.9")), ("web", "aaa"));
        assert_eq!(
            skips,
            ["default/aaa:p/TCP: frontend 10.96.0.10:80 is already served by default/web:p/TCP; not served"]
        );
    }

    #[test]
    fn sctp_ports_are_not_served_and_say_so() {
        let state = state(vec![port("sig", Protocol::Sctp, &[(FrontendKind::ClusterIp, "10.96.0.7")])]);
        assert_eq!(not_served(&state), ["default/sig:p/SCTP: SCTP is not served in userspace mode"]);
    }
}
