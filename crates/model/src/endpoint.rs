//! One backend of a service port.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use serde::Serialize;

/// An endpoint as the dataplanes see it: where to send traffic and in what
/// condition the backend is. Which endpoints a frontend may use is decided
/// once, in `kproxy-state`'s categorisation; dataplanes never re-filter.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    pub ip: IpAddr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// The endpoint runs on this node.
    pub local: bool,
}

impl Endpoint {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.addr().fmt(f)
    }
}
