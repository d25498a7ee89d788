//! The ebpf mode's equivalent of deleting the conntrack entries of a UDP
//! endpoint that a frontend stopped using: the programs keep no conntrack
//! NAT entries, so what pins a client to that endpoint is the tc
//! programs' flow (`kp_flows`, forgotten with
//! [`Datapath::forget_flows`]) or a socket the connect hook translated
//! (ended with [`sockets::terminate_stale_udp`]). Both are counted as
//! the conntrack-based modes count deleted entries, one
//! [`ConntrackCleanup`] per family, so upstream's conntrack reconciler
//! metrics mean the same in every mode.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Instant;

use kproxy_bpf::Datapath;
use kproxy_ebpf::maps::{Backend, addr16, ip_of};
use kproxy_model::{IpFamily, Protocol, StaleUdpEndpoint};

use super::sockets::{self, PINNED_NETNS, SocketsError};
use crate::dataplane::ConntrackCleanup;
use crate::failure::chain;

/// What one cleanup did.
#[derive(Debug, Default)]
pub struct Flushed {
    /// One per family with stale endpoints: flows and sockets together.
    pub cleanups: Vec<ConntrackCleanup>,
    pub flows: usize,
    pub sockets: usize,
    /// What failed (a map read, a namespace); the rest was still done.
    pub errors: Vec<String>,
}

/// Forgets the tc flows and ends the translated sockets of every stale
/// endpoint; `cgroup` is where the socket programs are attached. Blocks
/// (netlink, `/proc`, threads entering namespaces): run it off the async
/// runtime, and only when `stale` is not empty.
pub fn flush_stale_udp(datapath: &mut Datapath, cgroup: &Path, stale: &[StaleUdpEndpoint]) -> Flushed {
    let mut flushed = Flushed::default();
    let mut errors: Vec<SocketsError> = Vec::new();
    let mut namespaces = None;
    for family in IpFamily::ALL {
        let of_family: Vec<StaleUdpEndpoint> =
            stale.iter().filter(|s| s.endpoint.is_ipv4() == (family == IpFamily::V4)).copied().collect();
        if of_family.is_empty() {
            continue;
        }
        let start = Instant::now();
        let mut flows = 0;
        for s in &of_family {
            let frontend = kproxy_ebpf::frontend_key(s.frontend.ip(), Protocol::Udp, s.frontend.port());
            match datapath.forget_flows(&frontend, &backend(s.endpoint)) {
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
        let ended: usize = sockets::terminate_stale_udp(namespaces, &of_family, origin, &mut errors).values().sum();
        flushed.flows += flows;
        flushed.sockets += ended;
        flushed.cleanups.push(ConntrackCleanup { family, took: start.elapsed(), deleted: flows + ended });
    }
    flushed.errors.extend(errors.iter().map(|e| chain(e)));
    flushed
}

fn backend(endpoint: SocketAddr) -> Backend {
    Backend { addr: addr16(endpoint.ip()), port: endpoint.port().to_be(), pad: 0 }
}
