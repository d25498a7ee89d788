//! The planner's values: virtual servers, real servers, the plan, and what
//! the kernel reports. Plain data; ordering is total so output is sorted.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use kproxy_model::{FrontendKind, IpFamily, Protocol, ServicePortName};

/// What identifies a virtual server: protocol, virtual address and port,
/// or, for a firewall-mark server, its mark (the kernel's key) with the
/// frontend whose in-cluster traffic it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerKey {
    pub protocol: Protocol,
    pub addr: IpAddr,
    pub port: u16,
    /// `Some`: a firewall-mark server (`ipvsadm -f`), serving packets that
    /// carry exactly this mark.
    pub mark: Option<u32>,
}

impl ServerKey {
    /// The key of an address server.
    pub fn new(protocol: Protocol, addr: IpAddr, port: u16) -> Self {
        Self { protocol, addr, port, mark: None }
    }

    /// The address server this key is or belongs to.
    pub fn frontend(&self) -> ServerKey {
        ServerKey { mark: None, ..*self }
    }
}

/// `ipvsadm -Ln` spelling: `TCP  10.96.0.10:80`, IPv6 in brackets; a mark
/// server as `FWM 0x...` with its frontend.
impl fmt::Display for ServerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let frontend = SocketAddr::new(self.addr, self.port);
        match self.mark {
            None => write!(f, "{} {frontend}", self.protocol),
            Some(mark) => write!(f, "FWM {mark:#x} (in-cluster {} {frontend})", self.protocol),
        }
    }
}

/// A real server (IPVS destination) behind a virtual server. Always
/// masquerading; thresholds are not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RealServer {
    pub addr: IpAddr,
    pub port: u16,
    /// 0 quiesces: no new connections, existing ones continue.
    pub weight: u32,
}

impl RealServer {
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, self.port)
    }
}

/// One IPVS virtual server (service).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VirtualServer {
    pub protocol: Protocol,
    pub addr: IpAddr,
    pub port: u16,
    /// The kernel scheduler's name without `ip_vs_` (`rr`, `wrr`, `sh`, ...).
    pub scheduler: String,
    /// Persistence timeout in seconds, from `sessionAffinity: ClientIP`.
    /// The netmask is always the whole address ([`Self::netmask`]).
    pub persistence: Option<u32>,
    /// Sorted by address and port, no duplicates.
    pub destinations: Vec<RealServer>,
    /// A firewall-mark server (see [`ServerKey::mark`]).
    pub mark: Option<u32>,
}

impl VirtualServer {
    pub fn key(&self) -> ServerKey {
        ServerKey { protocol: self.protocol, addr: self.addr, port: self.port, mark: self.mark }
    }

    /// Persistence granularity: one client address (/32 or /128), as
    /// `sessionAffinity: ClientIP` means.
    pub fn netmask(&self) -> u8 {
        match IpFamily::of(&self.addr) {
            IpFamily::V4 => 32,
            IpFamily::V6 => 128,
        }
    }

    /// The settings [`crate::Op::EditServer`] changes, without destinations.
    pub(crate) fn same_settings(&self, other: &VirtualServer) -> bool {
        self.scheduler == other.scheduler && self.persistence == other.persistence
    }
}

/// A service port the planner could not program, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rejected {
    pub port: ServicePortName,
    pub family: IpFamily,
    pub reason: String,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.port, self.family, self.reason)
    }
}

/// Everything the IPVS mode wants in the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub servers: BTreeMap<ServerKey, VirtualServer>,
    /// Addresses to bind on `kube-ipvs0` so the node accepts traffic to
    /// them: cluster, external and load-balancer IPs. Node-port addresses
    /// are the node's own and are not bound.
    pub addresses: BTreeSet<IpAddr>,
    /// Sorted by service port, then family.
    pub rejected: Vec<Rejected>,
    /// Which service port and frontend kind each address server serves.
    pub owners: BTreeMap<ServerKey, Owner>,
    /// The marks of the firewall-mark servers of each external frontend of
    /// an `externalTrafficPolicy: Local` service: in-cluster clients of
    /// that frontend use every endpoint (SEMANTICS.md, "Choosing
    /// endpoints", step 4), so the companion table marks their packets and
    /// IPVS serves them from these servers instead.
    pub short_circuits: BTreeMap<ServerKey, ShortCircuit>,
}

/// The two marks of one frontend's short-circuit: pods' packets get `pods`,
/// the node's own get `node` (`pods` plus the masquerade bit, so they are
/// also masqueraded). Each has its own firewall-mark server with the same
/// endpoints: IPVS matches the whole mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShortCircuit {
    pub pods: u32,
    pub node: u32,
}

/// The service port a virtual server belongs to, and as which frontend.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    pub kind: FrontendKind,
    pub port: ServicePortName,
}

/// Connection counts of a destination, as the kernel reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Connections {
    pub active: u32,
    pub inactive: u32,
}

impl Connections {
    pub fn drained(&self) -> bool {
        self.active == 0 && self.inactive == 0
    }
}

/// A virtual server as the kernel holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedServer {
    pub server: VirtualServer,
    /// Per destination address; a destination missing here has none.
    pub connections: BTreeMap<SocketAddr, Connections>,
}

impl ObservedServer {
    /// A server with no connections on any destination.
    pub fn idle(server: VirtualServer) -> Self {
        Self { server, connections: BTreeMap::new() }
    }

    pub fn connections_of(&self, dest: SocketAddr) -> Connections {
        self.connections.get(&dest).copied().unwrap_or_default()
    }
}
