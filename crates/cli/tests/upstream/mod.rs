//! Upstream kube-proxy's packet-flow tests (`pkg/proxy/nftables/proxier_test.go`
//! and `pkg/proxy/iptables/proxier_test.go` in kubernetes/kubernetes) on
//! real packets, one scenario per upstream test, run in every kernel mode.
//!
//! Upstream's fake proxiers trace rules for a source and a destination;
//! here the same Services and EndpointSlices are manifests in the lab
//! (`crates/cli/tests/lab`), with upstream's addresses mapped onto it:
//!
//! | upstream | lab |
//! | --- | --- |
//! | pod 10.0.0.2 / 10.180.0.2 | client-a1, a pod of node-a |
//! | node 192.168.0.2 (secondary 192.168.1.2) | node-a 192.168.77.1 (secondary 192.168.79.1 on its uplink) |
//! | 2001:db8::1 (secondary 2001:db8:1::2) | fd00:77::1 (secondary fd00:79::1) |
//! | external client 203.0.113.2 | the outside client 192.168.77.100, or 203.0.113.9 where source ranges matter |
//! | blocked client 203.0.113.130 | the outside client from 203.0.113.130 |
//! | cluster IPs 172.30.x.y | 10.96.x.y |
//! | load-balancer IPs 1.2.3.4, 5.6.7.8, 9.10.11.12 | 198.51.100.4, .8, .12 |
//! | external IPs 192.168.99.x | 198.51.100.x (routed to node-a) |
//! | node ports 3001-3003, health checks 30000 | 30001-30003, 32000 and up |
//! | endpoints 10.180.x.y, 10.0.1.x | pods of node-a (`*-a*`, "test-node") and node-b (`*-b*`) |
//!
//! Every flow states what each mode must do; where a kproxy mode departs
//! from upstream on purpose, the flow says so with `in_iptables` /
//! `in_nftables` and a comment naming the docs section. `docs/upstream-tests.md`
//! lists which scenario ports which upstream test.

pub mod check;
pub mod flow;
pub mod sctp;

pub mod cluster_ip;
pub mod load_balancer;
pub mod masquerade;
pub mod node_ports;
pub mod small;
pub mod terminating;
pub mod traffic_policy;

use std::fmt::Write as _;

use crate::lab::{Lab, service};

/// One endpoint of a hand-written EndpointSlice.
#[derive(Clone, Debug)]
pub struct Ep {
    pod: &'static str,
    /// The address as written, when not the pod's own (leading zeros).
    address: Option<String>,
    node: Option<&'static str>,
    /// (ready, serving, terminating); `None`: no conditions (ready).
    conditions: Option<(bool, bool, bool)>,
}

/// An endpoint at `pod`'s address, ready, on no particular node.
pub fn ep(pod: &'static str) -> Ep {
    Ep { pod, address: None, node: None, conditions: None }
}

impl Ep {
    /// Claims to run on `node` (upstream's `nodeName`; "node-a" is this node).
    pub fn on(self, node: &'static str) -> Ep {
        Ep { node: Some(node), ..self }
    }

    /// Upstream's `ready`, `serving` and `terminating` conditions.
    pub fn conditions(self, ready: bool, serving: bool, terminating: bool) -> Ep {
        Ep { conditions: Some((ready, serving, terminating)), ..self }
    }

    /// Written with this address text instead of the pod's.
    pub fn written(self, address: impl Into<String>) -> Ep {
        Ep { address: Some(address.into()), ..self }
    }
}

/// An IPv4 EndpointSlice of `service` named `name`, with `ports` as
/// (name, protocol, port).
pub fn slice(lab: &Lab, name: &str, service: &str, ports: &[(&str, &str, u16)], endpoints: &[Ep]) -> String {
    slice_of(false, lab, name, service, ports, endpoints)
}

/// [`slice`] for IPv6: the pods' IPv6 addresses.
pub fn slice_v6(lab: &Lab, name: &str, service: &str, ports: &[(&str, &str, u16)], endpoints: &[Ep]) -> String {
    slice_of(true, lab, name, service, ports, endpoints)
}

fn slice_of(v6: bool, lab: &Lab, name: &str, service: &str, ports: &[(&str, &str, u16)], endpoints: &[Ep]) -> String {
    let family = if v6 { "IPv6" } else { "IPv4" };
    let mut yaml = format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}, labels: {{kubernetes.io/service-name: {service}}}}}\naddressType: {family}\nports:\n"
    );
    for (port_name, protocol, port) in ports {
        let _ = writeln!(yaml, "- {{name: \"{port_name}\", protocol: {protocol}, port: {port}}}");
    }
    yaml.push_str("endpoints:\n");
    for e in endpoints {
        let pod = lab.pod(e.pod);
        let own = if v6 { pod.ipv6.to_string() } else { pod.ipv4.to_string() };
        let address = e.address.clone().unwrap_or(own);
        let _ = writeln!(yaml, "- addresses: [\"{address}\"]");
        if let Some(node) = e.node {
            let _ = writeln!(yaml, "  nodeName: {node}");
        }
        if let Some((ready, serving, terminating)) = e.conditions {
            let _ = writeln!(yaml, "  conditions: {{ready: {ready}, serving: {serving}, terminating: {terminating}}}");
        }
    }
    yaml
}

/// A LoadBalancer Service: `spec` plus `type: LoadBalancer`, and its
/// ingress IPs (each with an optional `ipMode`).
pub fn load_balancer(name: &str, spec: &str, ingress: &[(&str, Option<&str>)]) -> String {
    let mut yaml = service(name, &format!("  type: LoadBalancer\n{spec}"));
    yaml.push_str("status:\n  loadBalancer:\n    ingress:\n");
    for (ip, mode) in ingress {
        let _ = write!(yaml, "    - {{ip: \"{ip}\"");
        if let Some(mode) = mode {
            let _ = write!(yaml, ", ipMode: {mode}");
        }
        yaml.push_str("}\n");
    }
    yaml
}
