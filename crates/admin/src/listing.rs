//! `/list`: what a running kproxy serves, one virtual server per frontend
//! with its endpoints, in the shape of `ipvsadm -Ln` (`kproxy list` prints
//! it). A mode that knows connection counts (userspace, IPVS from the
//! kernel) provides its own [`Listing`]; for the others the list comes
//! from the state, without counts.
//!
//! The rows are display values: each field holds the text ipvsadm prints
//! for it, so a row filled from the kernel renders to ipvsadm's fields.
//! Modes without IPVS say in the forwarding column what their rules do
//! ([`StateListing`]): `Masq` (every client masqueraded), `MasqOut` (clients
//! outside the cluster), `NoMasq`, `*` for an endpoint on this node that is
//! masqueraded when it connects to itself.
//! [`render`] prints no `IP Virtual Server version` line: `/list` carries
//! rows only, and the kernel's version is not kproxy's to report in the
//! other modes.
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use kproxy_model::{Endpoint, Frontend, FrontendKind, Protocol, ProxyState, Scheduler, ServicePort, ServicePortName};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// One frontend. Keys are camelCase, as `/state`'s; the snake_case keys an
/// earlier kproxy's `/list` had are still read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualServer {
    /// `TCP`, `UDP`, `SCTP`; `FWM` for a firewall-mark virtual server.
    pub protocol: String,
    /// `ip:port` (`[ip]:port` for IPv6); for `FWM` the mark (`42`, or
    /// `42 IPv6` for an IPv6 one, as ipvsadm prints it).
    pub frontend: String,
    /// `ClusterIP`, `NodePort`, ...; empty for a virtual server in the
    /// kernel that kproxy did not create.
    pub kind: String,
    /// `namespace/name:port`, or empty (see `kind`).
    pub service: String,
    pub scheduler: String,
    /// Scheduler flags as ipvsadm prints them between parentheses
    /// (`sh-fallback,sh-port`).
    #[serde(default, alias = "scheduler_flags")]
    pub scheduler_flags: Option<String>,
    /// Session affinity timeout in seconds (`persistent N`).
    pub persistent: Option<u32>,
    /// Persistence granularity as ipvsadm prints it after `mask`
    /// (`255.255.255.0`; an IPv6 prefix length such as `64`). `None`: the
    /// whole client address, for which ipvsadm prints no mask.
    #[serde(default)]
    pub netmask: Option<String>,
    /// One-packet scheduling (`ops`).
    #[serde(default, alias = "one_packet")]
    pub one_packet: bool,
    pub endpoints: Vec<RealServer>,
}

/// One endpoint of a frontend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RealServer {
    pub address: String,
    /// How traffic reaches it. In IPVS mode the kernel's forwarding
    /// method as ipvsadm names it (`Masq`, NAT, for kproxy's; `Local`,
    /// `Tunnel`, `Route` for others'); elsewhere whether the rules
    /// masquerade it (see the module's documentation).
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

/// What a mode's rules do with new connections to one endpoint of one
/// frontend, in the forwarding column's words.
pub type Forward = dyn Fn(&ProxyState, &ServicePort, &Frontend, &Endpoint) -> String + Send + Sync;

/// The service port each frontend (protocol, address) goes to when
/// several claim it, as the planners decide: a cluster IP before any other
/// kind of claim, then the first in name order (the nftables mode also
/// keeps a frontend with its earlier owner among equals; from the state
/// alone that cannot be told).
pub fn owners(state: &ProxyState) -> HashMap<(Protocol, SocketAddr), &ServicePortName> {
    let mut owners: HashMap<(Protocol, SocketAddr), (bool, &ServicePortName)> = HashMap::new();
    for port in state.service_ports() {
        for frontend in &port.frontends {
            let rank = (frontend.kind != FrontendKind::ClusterIp, &port.name);
            let owner = owners.entry((port.name.protocol, frontend.addr())).or_insert(rank);
            *owner = rank.min(*owner);
        }
    }
    owners.into_iter().map(|(key, (_, name))| (key, name)).collect()
}

/// The list a state implies, for modes without counts. `default` is the
/// scheduler of services that do not choose one. A frontend two service
/// ports claim is listed once, for its [`owners`] entry.
pub fn from_state(state: &ProxyState, default: Scheduler, forward: &Forward) -> Vec<VirtualServer> {
    let owners = owners(state);
    let mut out = Vec::new();
    for port in state.service_ports() {
        for frontend in &port.frontends {
            if owners.get(&(port.name.protocol, frontend.addr())).is_some_and(|owner| **owner != port.name) {
                continue;
            }
            let endpoints = port
                .endpoints_for(frontend.kind, frontend.kind != FrontendKind::ClusterIp)
                .iter()
                .map(|e| RealServer {
                    address: e.addr().to_string(),
                    forward: forward(state, port, frontend, e),
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
                scheduler_flags: None,
                persistent: port.session_affinity.map(|a| a.timeout_seconds),
                // ClientIP affinity is per client address: no mask.
                netmask: None,
                one_packet: false,
                endpoints,
            });
        }
    }
    out
}

/// `/list` of a mode without counts: the latest state, with the mode's
/// own forwarding words.
pub struct StateListing {
    pub state: watch::Receiver<Arc<ProxyState>>,
    pub default: Scheduler,
    pub forward: Arc<Forward>,
}

impl Listing for StateListing {
    fn list(&self) -> Vec<VirtualServer> {
        let state = self.state.borrow().clone();
        from_state(&state, self.default, &*self.forward)
    }
}

/// `ipvsadm -Ln`'s two column header lines.
pub const COLUMNS: &str =
    "Prot LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n";

/// `ipvsadm -Ln`'s layout without its version line: the column headers,
/// then per virtual server a line and its real servers indented. Every
/// field is printed as ipvsadm prints it (widths and trailing blanks
/// included); a virtual server kproxy created ends in `    # kind
/// service`, and counts a mode cannot tell are `-`.
pub fn render(servers: &[VirtualServer]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(COLUMNS);
    for vs in servers {
        let _ = write!(out, "{:<4} {} {}", vs.protocol, vs.frontend, vs.scheduler);
        if let Some(flags) = &vs.scheduler_flags {
            let _ = write!(out, " ({flags})");
        }
        if let Some(timeout) = vs.persistent {
            let _ = write!(out, " persistent {timeout}");
            if let Some(mask) = &vs.netmask {
                let _ = write!(out, " mask {mask}");
            }
        }
        if vs.one_packet {
            out.push_str(" ops");
        }
        if !vs.kind.is_empty() || !vs.service.is_empty() {
            let _ = write!(out, "    # {} {}", vs.kind, vs.service);
        }
        out.push('\n');
        for rs in &vs.endpoints {
            let count = |c: Option<u32>| c.map_or("-".to_string(), |c| c.to_string());
            let _ = writeln!(
                out,
                "  -> {:<28} {:<7} {:<6} {:<10} {:<10}",
                rs.address,
                rs.forward,
                rs.weight,
                count(rs.active),
                count(rs.inactive)
            );
        }
    }
    let own_words = servers.iter().flat_map(|vs| &vs.endpoints).any(|rs| OWN_WORDS.contains(&rs.forward.as_str()));
    if own_words {
        out.push_str(LEGEND);
    }
    out
}

/// The forwarding words of modes without IPVS (ipvsadm has none of them).
const OWN_WORDS: [&str; 4] = ["MasqOut", "MasqOut*", "NoMasq", "NoMasq*"];

/// What those words mean, under the rows that use them.
const LEGEND: &str = "\nForward: Masq every client masqueraded; MasqOut clients outside the cluster (and the node) \
                      masqueraded, pods not; NoMasq none; * on this node: masqueraded when it connects to itself\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn server(protocol: &str, frontend: &str) -> VirtualServer {
        VirtualServer {
            protocol: protocol.into(),
            frontend: frontend.into(),
            kind: "ClusterIP".into(),
            service: "default/web:http".into(),
            scheduler: "rr".into(),
            scheduler_flags: None,
            persistent: None,
            netmask: None,
            one_packet: false,
            endpoints: Vec::new(),
        }
    }

    /// The lines of `testdata/ipvs/list.hex` (ipvsadm 1.31), with the
    /// comment kproxy adds.
    #[test]
    fn kernel_rows_render_as_ipvsadm_prints_them() {
        let mut wrr = server("TCP", "10.96.0.11:80");
        wrr.scheduler = "wrr".into();
        wrr.persistent = Some(10800);
        wrr.netmask = Some("255.255.255.0".into());
        wrr.endpoints = vec![RealServer {
            address: "10.244.1.2:80".into(),
            forward: "Masq".into(),
            weight: 2,
            active: Some(0),
            inactive: Some(8),
        }];
        let mut foreign = server("FWM", "42 IPv6");
        (foreign.kind, foreign.service) = (String::new(), String::new());
        foreign.scheduler = "sh".into();
        foreign.scheduler_flags = Some("sh-fallback,sh-port".into());
        foreign.one_packet = true;
        assert_eq!(
            render(&[wrr, foreign]),
            "\
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.11:80 wrr persistent 10800 mask 255.255.255.0    # ClusterIP default/web:http
  -> 10.244.1.2:80                Masq    2      0          8         
FWM  42 IPv6 sh (sh-fallback,sh-port) ops
"
        );
    }

    /// ipvsadm prints a mask only with persistence; modes without counts
    /// print `-`.
    #[test]
    fn mask_needs_persistence_and_unknown_counts_are_dashes() {
        let mut sctp = server("SCTP", "[fd00::10]:80");
        sctp.netmask = Some("64".into());
        sctp.endpoints = vec![RealServer {
            address: "[fd00::2]:80".into(),
            forward: "Masq".into(),
            weight: 0,
            active: None,
            inactive: None,
        }];
        let text = render(&[sctp]);
        let lines: Vec<_> = text.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "SCTP [fd00::10]:80 rr    # ClusterIP default/web:http",
                "  -> [fd00::2]:80                 Masq    0      -          -         "
            ]
        );
    }

    /// A frontend two ports claim is listed once, for its cluster IP
    /// owner, with the mode's forwarding words and their legend.
    #[test]
    fn a_claimed_frontend_is_listed_for_its_owner_with_the_modes_words() {
        use kproxy_model::{Frontend, IpFamily, ServiceName, ServicePortName};
        let port = |name: &str, frontends: Vec<Frontend>| ServicePort {
            frontends,
            cluster_endpoints: vec![Endpoint {
                ip: "10.244.1.5".parse().unwrap(),
                port: 8080,
                ready: true,
                serving: true,
                terminating: false,
                local: true,
            }],
            ..ServicePort::new(
                ServicePortName::new(ServiceName::new("default", name), "http", Protocol::Tcp),
                IpFamily::V4,
                80,
            )
        };
        let shared = "10.96.0.10".parse().unwrap();
        let mut state = ProxyState::default();
        for p in [
            port("aaa", vec![Frontend::new(FrontendKind::ExternalIp, shared, 80)]),
            port("web", vec![Frontend::new(FrontendKind::ClusterIp, shared, 80)]),
        ] {
            state.ipv4.service_ports.insert(p.name.clone(), Arc::new(p));
        }
        let rows = from_state(&state, Scheduler::Random, &|_, port, _, _| format!("NoMasq {}", port.name.service.name));
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].service.as_str(), rows[0].endpoints[0].forward.as_str()),
            ("default/web:http", "NoMasq web")
        );
        let words = from_state(&state, Scheduler::Random, &|_, _, _, _| "NoMasq*".into());
        assert!(render(&words).ends_with(LEGEND));
        let ipvs = from_state(&state, Scheduler::Random, &|_, _, _, _| "Masq".into());
        assert!(!render(&ipvs).contains("Forward:"));
    }

    /// `/list` spells its keys as `/state` does (camelCase), and reads
    /// an earlier kproxy's snake_case ones.
    #[test]
    fn keys_are_camel_case_and_old_snake_case_keys_still_parse() {
        let mut vs = server("TCP", "10.96.0.10:80");
        vs.scheduler_flags = Some("sh-port".into());
        vs.one_packet = true;
        let json = serde_json::to_value(&vs).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert!(keys.contains(&"schedulerFlags") && keys.contains(&"onePacket"), "{keys:?}");
        assert!(keys.iter().all(|k| !k.contains('_')), "{keys:?}");
        let old = r#"[{"protocol":"TCP","frontend":"10.96.0.10:80","kind":"ClusterIP","service":"default/web:http",
            "scheduler":"rr","scheduler_flags":"sh-port","persistent":null,"one_packet":true,"endpoints":[]}]"#;
        let rows: Vec<VirtualServer> = serde_json::from_str(old).unwrap();
        assert_eq!(rows, [vs]);
    }

    /// `kproxy list` reads the `/list` of a kproxy older than the
    /// kernel-backed fields.
    #[test]
    fn rows_without_the_newer_fields_still_parse() {
        let old = r#"[{"protocol":"TCP","frontend":"10.96.0.10:80","kind":"ClusterIP","service":"default/web:http",
            "scheduler":"rr","persistent":null,"endpoints":[]}]"#;
        let rows: Vec<VirtualServer> = serde_json::from_str(old).unwrap();
        assert_eq!(rows, [server("TCP", "10.96.0.10:80")]);
    }
}
