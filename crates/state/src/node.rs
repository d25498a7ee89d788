//! This node's [`NodeState`]: name, zone, node-port addresses, eligibility.

use std::net::IpAddr;

use kproxy_model::{IpFamily, NodeState};

use crate::config::{NodePortAddresses, StateConfig};
use crate::info::NodeInfo;

/// The node as the proxy sees it, from the config and its Node object.
pub fn node_state(config: &StateConfig, node: Option<&NodeInfo>) -> NodeState {
    NodeState {
        name: config.node_name.clone(),
        zone: node.and_then(|n| n.zone.clone()),
        node_port_addresses: node_port_addresses(config, node),
        node_port_match_all: node_port_match_all(config),
        pod_cidrs: node.map(|n| n.pod_cidrs.clone()).unwrap_or_default(),
        eligible: match node {
            Some(n) => !n.deleting && !n.to_be_deleted,
            None => !config.node_required,
        },
    }
}

fn node_port_addresses(config: &StateConfig, node: Option<&NodeInfo>) -> Vec<IpAddr> {
    let node_addresses = node.map(|n| n.addresses.as_slice()).unwrap_or_default();
    let mut out: Vec<IpAddr> = match &config.node_port_addresses {
        NodePortAddresses::Primary => {
            // The Node's addresses when it has any (a family it lacks has no
            // primary address, as upstream); the host's otherwise.
            let known: Vec<IpAddr> = match node_addresses.is_empty() {
                false => node_addresses.to_vec(),
                true => config.host_addresses.iter().copied().filter(is_global).collect(),
            };
            IpFamily::ALL
                .into_iter()
                .filter_map(|family| {
                    let of = |ip: &IpAddr| IpFamily::of(ip) == family;
                    config.bind_address.filter(of).or_else(|| known.iter().copied().find(of))
                })
                .collect()
        }
        NodePortAddresses::Cidrs(cidrs) => {
            let all = node_addresses.iter().chain(&config.host_addresses);
            all.filter(|ip| {
                let family = IpFamily::of(ip);
                let mut of_family = cidrs.iter().filter(|c| IpFamily::of(&c.addr()) == family).peekable();
                of_family.peek().is_none() || of_family.any(|c| c.contains(*ip))
            })
            .copied()
            .collect()
        }
    };
    out.sort();
    out.dedup();
    out
}

/// The families [`NodePortAddresses::Cidrs`] matches every address of:
/// those without a CIDR, or with a /0 (upstream's `MatchAll`).
fn node_port_match_all(config: &StateConfig) -> Vec<IpFamily> {
    let NodePortAddresses::Cidrs(cidrs) = &config.node_port_addresses else { return Vec::new() };
    IpFamily::ALL
        .into_iter()
        .filter(|family| {
            let mut of_family = cidrs.iter().filter(|c| IpFamily::of(&c.addr()) == *family).peekable();
            of_family.peek().is_none() || of_family.any(|c| c.prefix_len() == 0)
        })
        .collect()
}

/// Neither loopback, link-local nor unspecified: an address other hosts can
/// reach this node on.
fn is_global(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()),
        IpAddr::V6(v6) => !(v6.is_loopback() || v6.is_unicast_link_local() || v6.is_unspecified()),
    }
}
