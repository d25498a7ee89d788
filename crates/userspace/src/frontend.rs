//! One listening address: what it serves (swapped in place on syncs) and
//! the socket it listens on.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use kproxy_model::{FrontendKind, Protocol};
use socket2::{Domain, Socket, Type};

use crate::Settings;
use crate::service::{Picked, Service};

/// What a frontend serves: a service port, reached as `kind`.
#[derive(Debug)]
pub struct Target {
    current: RwLock<(Arc<Service>, FrontendKind)>,
}

impl Target {
    pub fn new(service: Arc<Service>, kind: FrontendKind) -> Self {
        Self { current: RwLock::new((service, kind)) }
    }

    pub fn set(&self, service: Arc<Service>, kind: FrontendKind) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = (service, kind);
    }

    pub fn get(&self) -> (Arc<Service>, FrontendKind) {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// An endpoint for a new connection (or flow) from `client`, or `None`
    /// when there is none or the client is not allowed: a load-balancer IP
    /// admits only `loadBalancerSourceRanges`.
    pub fn pick(
        &self,
        client: SocketAddr,
        frontend: SocketAddr,
        exclude: &[SocketAddr],
        settings: &Settings,
    ) -> Option<Picked> {
        let (service, kind) = self.get();
        let port = service.port();
        if kind == FrontendKind::LoadBalancerIp
            && let Some(ranges) = &port.load_balancer_source_ranges
            && !ranges.iter().any(|r| r.contains(&client.ip()))
        {
            return None;
        }
        let external = !settings.in_cluster(client.ip());
        let set = service.set_for(kind, external);
        let affinity = port.session_affinity.map(|a| Duration::from_secs(u64::from(a.timeout_seconds)));
        service.pick(set, client, frontend, exclude, affinity, Instant::now())
    }
}

/// A listening socket for `protocol` on `addr`. Non-local addresses (a
/// cluster IP routed to this node) bind with `IP_FREEBIND` when
/// `freebind` is set; `reuse_port` lets the relay threads each listen on
/// the same address (a socket that is not kproxy's still makes the bind
/// fail: it does not share).
pub fn bind(protocol: Protocol, addr: SocketAddr, freebind: bool, reuse_port: bool) -> std::io::Result<Socket> {
    let domain = Domain::for_address(addr);
    let socket = match protocol {
        Protocol::Tcp => Socket::new(domain, Type::STREAM, Some(socket2::Protocol::TCP))?,
        Protocol::Udp => Socket::new(domain, Type::DGRAM, Some(socket2::Protocol::UDP))?,
        Protocol::Sctp => return Err(std::io::Error::other("SCTP is not served in userspace mode")),
    };
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    if freebind {
        match addr.ip() {
            IpAddr::V4(_) => socket.set_freebind_v4(true)?,
            IpAddr::V6(_) => socket.set_freebind_v6(true)?,
        }
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    if protocol == Protocol::Tcp {
        socket.listen(1024)?;
    }
    Ok(socket)
}
