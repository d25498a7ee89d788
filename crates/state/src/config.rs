//! The values the state needs from configuration and from the host.

use std::net::IpAddr;

use kproxy_model::{IpNet, ModeSupport};

/// Which node addresses serve node ports (`nodePortAddresses`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NodePortAddresses {
    /// The node's primary address of each family: `bindAddress` when set,
    /// else the Node's first InternalIP (or ExternalIP) of that family;
    /// without a Node object (or one without addresses), the host's first
    /// global address of each family. Upstream's nftables default.
    #[default]
    Primary,
    /// Every address of the node or the host inside one of these CIDRs; a
    /// family without any CIDR matches all of its addresses (upstream's
    /// rule), so an empty list means every address.
    Cidrs(Vec<IpNet>),
}

/// Everything the state pipeline takes from outside, as plain values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateConfig {
    /// This node's name (`hostnameOverride`, else the host name): decides
    /// which endpoints are local.
    pub node_name: String,
    pub node_port_addresses: NodePortAddresses,
    /// The host's interface addresses, read once by the caller.
    pub host_addresses: Vec<IpAddr>,
    /// `bindAddress` when it is not the unspecified address: overrides the
    /// primary address of its family.
    pub bind_address: Option<IpAddr>,
    /// Service CIDRs given on the command line, added to ServiceCIDR objects.
    pub service_cidrs: Vec<IpNet>,
    /// Derive endpoints from Pods and selectors (standalone mode).
    pub endpoint_controller: bool,
    /// Without a Node object this node is not eligible for traffic (in a
    /// cluster the Node always exists; in standalone mode it may not).
    pub node_required: bool,
    /// What the running mode does of kproxy's `kproxy.io/*` annotations:
    /// what it cannot do falls back to the default, with a warning.
    pub mode: ModeSupport,
}
