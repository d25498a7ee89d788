//! The virtual addresses a service port is reached on.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use serde::Serialize;

/// What kind of address a frontend is; decides which traffic policy and
/// which filters apply to it (SEMANTICS.md, "Frontends"). Spelt as the
/// Service fields it comes from (`clusterIP`, `externalIPs`,
/// `loadBalancerIP` / `status.loadBalancer.ingress[].ip`, `nodePort`), the
/// same in JSON as in every table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum FrontendKind {
    #[serde(rename = "ClusterIP")]
    ClusterIp,
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    #[serde(rename = "LoadBalancerIP")]
    LoadBalancerIp,
    NodePort,
}

impl FrontendKind {
    /// External frontends follow `externalTrafficPolicy`; the cluster IP
    /// follows `internalTrafficPolicy`.
    pub fn is_external(self) -> bool {
        !matches!(self, FrontendKind::ClusterIp)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FrontendKind::ClusterIp => "ClusterIP",
            FrontendKind::ExternalIp => "ExternalIP",
            FrontendKind::LoadBalancerIp => "LoadBalancerIP",
            FrontendKind::NodePort => "NodePort",
        }
    }
}

impl fmt::Display for FrontendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One address and port a service port answers on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Frontend {
    pub kind: FrontendKind,
    pub ip: IpAddr,
    pub port: u16,
}

impl Frontend {
    pub fn new(kind: FrontendKind, ip: IpAddr, port: u16) -> Self {
        Self { kind, ip, port }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}

impl fmt::Display for Frontend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.addr().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialise_as_they_display() {
        for kind in
            [FrontendKind::ClusterIp, FrontendKind::ExternalIp, FrontendKind::LoadBalancerIp, FrontendKind::NodePort]
        {
            let json = serde_json::to_string(&kind).expect("serialises");
            assert_eq!(json, format!("\"{kind}\""));
        }
    }
}
