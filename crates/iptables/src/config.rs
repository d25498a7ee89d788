//! What the planner needs from configuration and the node, as values.

use kproxy_model::{IpFamily, NodeState};
pub use kproxy_nftables::LocalDetector;

/// The planner's settings (`KubeProxyConfiguration.iptables.*` and friends).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PlanConfig {
    /// Masquerade all service traffic (`masqueradeAll`).
    pub masquerade_all: bool,
    /// The packet-mark bit meaning "masquerade me" (`masqueradeBit`).
    pub masquerade_bit: u32,
    pub local_detector: LocalDetector,
    /// Drop forwarded packets conntrack considers INVALID; off when the node
    /// sets `nf_conntrack_tcp_be_liberal` (upstream #74839, #117924).
    pub drop_invalid: bool,
    /// Serve node ports on 127.0.0.0/8 (`iptables.localhostNodePorts`,
    /// IPv4 only; the applier then sets `route_localnet=1`). Takes effect
    /// only when the node's node-port addresses include an IPv4 loopback
    /// address, as upstream (`ContainsIPv4Loopback`).
    pub localhost_node_ports: bool,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            masquerade_all: false,
            masquerade_bit: 14,
            local_detector: LocalDetector::None,
            drop_invalid: true,
            localhost_node_ports: true,
        }
    }
}

impl PlanConfig {
    /// The mark as upstream's rules spell it (`0x4000`).
    pub fn mark(&self) -> String {
        format!("{:#x}", 1u64 << self.masquerade_bit)
    }
}

/// The local-traffic detector as rule arguments (upstream's
/// `LocalTrafficDetector.IfLocal` / `IfNotLocal`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LocalMatch {
    pub if_local: Option<Vec<String>>,
    pub if_not_local: Option<Vec<String>>,
}

impl LocalMatch {
    /// For `family`; a second CIDR of one family cannot be negated in one
    /// rule, so only the first is used and the rest are reported.
    pub fn new(detector: &LocalDetector, node: &NodeState, family: IpFamily, skips: &mut Vec<String>) -> Self {
        let resolved = match detector {
            LocalDetector::NodePodCidrs => LocalDetector::Cidrs(node.pod_cidrs.clone()),
            other => other.clone(),
        };
        let pair = |flag: &str, value: String| -> Self {
            Self {
                if_local: Some(vec![flag.to_owned(), value.clone()]),
                if_not_local: Some(vec!["!".to_owned(), flag.to_owned(), value]),
            }
        };
        match resolved.for_family(family) {
            LocalDetector::None | LocalDetector::NodePodCidrs => Self::default(),
            LocalDetector::Cidrs(cidrs) => {
                if cidrs.len() > 1 {
                    skips.push(format!(
                        "local detector: {family} has {} CIDRs; iptables mode uses only the first, {}",
                        cidrs.len(),
                        cidrs[0]
                    ));
                }
                pair("-s", cidrs[0].to_string())
            }
            LocalDetector::Interface(name) => pair("-i", name),
            LocalDetector::InterfacePrefix(prefix) => pair("-i", format!("{prefix}+")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(detector: LocalDetector, family: IpFamily) -> (LocalMatch, Vec<String>) {
        let mut skips = Vec::new();
        let m = LocalMatch::new(&detector, &NodeState::default(), family, &mut skips);
        (m, skips)
    }

    #[test]
    fn detectors_render_as_upstreams_if_local_and_if_not_local() {
        let (m, _) = matches(LocalDetector::InterfacePrefix("veth".into()), IpFamily::V4);
        assert_eq!(m.if_local, Some(vec!["-i".to_owned(), "veth+".to_owned()]));
        assert_eq!(m.if_not_local, Some(vec!["!".to_owned(), "-i".to_owned(), "veth+".to_owned()]));
        let (m, _) = matches(LocalDetector::Interface("cbr0".into()), IpFamily::V6);
        assert_eq!(m.if_local, Some(vec!["-i".to_owned(), "cbr0".to_owned()]));
    }

    #[test]
    fn cidrs_of_the_other_family_detect_nothing_and_extra_cidrs_are_reported() {
        let v4: kproxy_model::IpNet = "10.244.0.0/16".parse().expect("literal");
        let (m, skips) = matches(LocalDetector::Cidrs(vec![v4]), IpFamily::V6);
        assert_eq!(m, LocalMatch::default());
        assert!(skips.is_empty());
        let other: kproxy_model::IpNet = "10.245.0.0/16".parse().expect("literal");
        let (m, skips) = matches(LocalDetector::Cidrs(vec![v4, other]), IpFamily::V4);
        assert_eq!(m.if_not_local, Some(vec!["!".to_owned(), "-s".to_owned(), "10.244.0.0/16".to_owned()]));
        assert_eq!(skips.len(), 1);
    }
}
