//! The ebpf mode's equivalent of deleting stale UDP conntrack entries
//! (SEMANTICS.md, "Conntrack"): the programs keep no conntrack NAT
//! entries, so what pins a client to an endpoint its frontend stopped
//! using (or to a frontend that went away) is the tc programs' flow
//! (`kp_flows`, forgotten with [`Datapath::forget_flows`]) or a socket
//! the connect hook translated (ended with
//! [`sockets::terminate_stale_udp`]). Both are counted as the
//! conntrack-based modes count deleted entries, one [`ConntrackCleanup`]
//! per family, so upstream's conntrack reconciler metrics mean the same
//! in every mode.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Instant;

use kproxy_bpf::Datapath;
use kproxy_ebpf::maps::{Backend, addr16, ip_of};
use kproxy_model::{Changes, IpFamily, Protocol, ProxyState, StaleUdpEndpoint};

use super::sockets::{self, PINNED_NETNS, SocketsError, Stale};
use crate::dataplane::ConntrackCleanup;
use crate::failure::chain;

/// What one cleanup did.
#[derive(Debug, Default)]
pub struct Flushed {
    /// One per family with stale endpoints or frontends: flows and
    /// sockets together.
    pub cleanups: Vec<ConntrackCleanup>,
    pub flows: usize,
    pub sockets: usize,
    /// What failed (a map read, a namespace); the rest was still done.
    pub errors: Vec<String>,
}

/// Forgets the tc flows and ends the translated sockets of every stale
/// endpoint and stale frontend; `cgroup` is where the socket programs
/// are attached. Blocks (netlink, `/proc`, threads entering namespaces):
/// run it off the async runtime, and only when something is stale.
pub fn flush_stale_udp(
    datapath: &mut Datapath,
    cgroup: &Path,
    endpoints: &[StaleUdpEndpoint],
    frontends: &[SocketAddr],
) -> Flushed {
    let mut flushed = Flushed::default();
    let mut errors: Vec<SocketsError> = Vec::new();
    let mut namespaces = None;
    for family in IpFamily::ALL {
        let is = |addr: &SocketAddr| addr.ip().to_canonical().is_ipv4() == (family == IpFamily::V4);
        let endpoints: Vec<&StaleUdpEndpoint> = endpoints.iter().filter(|s| is(&s.endpoint)).collect();
        let frontends: Vec<&SocketAddr> = frontends.iter().filter(|f| is(f)).collect();
        if endpoints.is_empty() && frontends.is_empty() {
            continue;
        }
        let start = Instant::now();
        let mut flows = 0;
        let key = |f: &SocketAddr| kproxy_ebpf::frontend_key(f.ip(), Protocol::Udp, f.port());
        for s in &endpoints {
            match datapath.forget_flows(&key(&s.frontend), &backend(s.endpoint)) {
                Ok(n) => flows += n,
                Err(e) => flushed.errors.push(chain(&e)),
            }
        }
        for f in &frontends {
            match datapath.forget_frontend_flows(&key(f)) {
                Ok(n) => flows += n,
                Err(e) => flushed.errors.push(chain(&e)),
            }
        }
        // Found once, for both families; counted in the first one's time.
        let namespaces =
            namespaces.get_or_insert_with(|| sockets::namespaces(cgroup, Path::new(PINNED_NETNS), &mut errors));
        let origin = |cookie: u64, endpoint: SocketAddr| {
            let rev = datapath.sock_origin(cookie, &backend(endpoint))?;
            Ok(rev.map(|rev| SocketAddr::new(ip_of(rev.addr), u16::from_be(rev.port))))
        };
        let stale = Stale::new(endpoints, frontends);
        let ended: usize = sockets::terminate_stale_udp(namespaces, &stale, origin, &mut errors).values().sum();
        flushed.flows += flows;
        flushed.sockets += ended;
        flushed.cleanups.push(ConntrackCleanup { family, took: start.elapsed(), deleted: flows + ended });
    }
    flushed.errors.extend(errors.iter().map(|e| chain(e)));
    flushed
}

/// The stale UDP frontends that are gone from `state`. The others (new,
/// or from no endpoints to some) have no translated socket to end: a
/// connect to a frontend without endpoints is refused. Leaving them out
/// keeps a restarted kproxy, whose first sync finds every frontend new,
/// from ending every translated socket on the node.
pub fn removed_frontends(state: &ProxyState, changes: &Changes) -> Vec<SocketAddr> {
    if changes.stale_udp_frontends.is_empty() {
        return Vec::new();
    }
    let current: BTreeSet<SocketAddr> = state
        .service_ports()
        .filter(|port| port.name.protocol == Protocol::Udp)
        .flat_map(|port| port.frontends.iter().map(|f| f.addr()))
        .collect();
    changes.stale_udp_frontends.iter().filter(|f| !current.contains(f)).copied().collect()
}

fn backend(endpoint: SocketAddr) -> Backend {
    Backend { addr: addr16(endpoint.ip()), port: endpoint.port().to_be(), pad: 0 }
}

#[cfg(test)]
mod tests {
    use kproxy_state::Kind;
    use kproxy_testkit::{EndpointBuilder as Ep, Scenario, service, slice};

    use super::*;

    #[test]
    fn only_stale_frontends_gone_from_the_state_are_removed_ones() {
        let mut s = Scenario::standalone();
        s.service(service("default", "dns").cluster_ip("10.96.0.53").port("dns", "UDP", 53).build());
        s.slice(slice("default", "dns-1", "dns").port("dns", "UDP", 8053).endpoint(Ep::new("10.244.1.5")).build());
        let changes = s.sync();
        let frontend: SocketAddr = "10.96.0.53:53".parse().expect("literal");
        assert!(changes.stale_udp_frontends.contains(&frontend), "a new frontend with endpoints is stale");
        assert_eq!(removed_frontends(s.state(), &changes), Vec::<SocketAddr>::new(), "but still served");
        s.delete(Kind::Service, "default", "dns");
        let changes = s.sync();
        assert_eq!(removed_frontends(s.state(), &changes), vec![frontend]);
    }
}
