//! `/list`: what a running kproxy serves, one virtual server per frontend
//! with its endpoints, in the shape of `ipvsadm -Ln` (`kproxy list` prints
//! it). A mode that knows connection counts (userspace) provides its own
//! [`Listing`]; for the others the list comes from the state, without
//! counts.

use kproxy_model::{FrontendKind, ProxyState, Scheduler};
use serde::{Deserialize, Serialize};

/// One frontend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtualServer {
    /// `TCP`, `UDP`, `SCTP`.
    pub protocol: String,
    /// `ip:port` (`[ip]:port` for IPv6).
    pub frontend: String,
    /// `ClusterIP`, `NodePort`, ...
    pub kind: String,
    /// `namespace/name:port`.
    pub service: String,
    pub scheduler: String,
    /// Session affinity timeout in seconds (`persistent N`).
    pub persistent: Option<u32>,
    pub endpoints: Vec<RealServer>,
}

/// One endpoint of a frontend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealServer {
    pub address: String,
    /// How traffic reaches it: `Masq` (NAT) in every kproxy mode.
    pub forward: String,
    pub weight: u32,
    /// `None` where the mode cannot tell.
    pub active: Option<u32>,
    pub inactive: Option<u32>,
}

/// A mode's own view, with live counts.
pub trait Listing: Send + Sync {
    fn list(&self) -> Vec<VirtualServer>;
}

/// The list a state implies, for modes without counts. `default` is the
/// scheduler of services that do not choose one.
pub fn from_state(state: &ProxyState, default: Scheduler) -> Vec<VirtualServer> {
    let mut out = Vec::new();
    for port in state.service_ports() {
        for frontend in &port.frontends {
            let endpoints = port
                .endpoints_for(frontend.kind, frontend.kind != FrontendKind::ClusterIp)
                .iter()
                .map(|e| RealServer {
                    address: e.addr().to_string(),
                    forward: "Masq".into(),
                    weight: port.weight_of(e.ip),
                    active: None,
                    inactive: None,
                })
                .collect();
            out.push(VirtualServer {
                protocol: port.name.protocol.to_string(),
                frontend: frontend.addr().to_string(),
                kind: frontend.kind.as_str().into(),
                service: format!("{}:{}", port.name.service, port.name.port),
                scheduler: port.scheduler.unwrap_or(default).to_string(),
                persistent: port.session_affinity.map(|a| a.timeout_seconds),
                endpoints,
            });
        }
    }
    out
}

/// `ipvsadm -Ln`'s layout: a header, then per virtual server a line and
/// its real servers indented.
pub fn render(servers: &[VirtualServer]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "Prot LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n",
    );
    for vs in servers {
        let flags = vs.persistent.map(|p| format!(" persistent {p}")).unwrap_or_default();
        let _ =
            writeln!(out, "{}  {} {}{flags}    # {} {}", vs.protocol, vs.frontend, vs.scheduler, vs.kind, vs.service);
        for rs in &vs.endpoints {
            let count = |c: Option<u32>| c.map_or("-".to_string(), |c| c.to_string());
            let _ = writeln!(
                out,
                "  -> {:<28} {:<7} {:<6} {:<10} {}",
                rs.address,
                rs.forward,
                rs.weight,
                count(rs.active),
                count(rs.inactive)
            );
        }
    }
    out
}
