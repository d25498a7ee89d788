//! What the planner needs from configuration and the node, as values.

use kproxy_model::{IpFamily, IpNet, NodeState};

/// How traffic from this cluster's pods is recognised (`detectLocalMode`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum LocalDetector {
    /// Not configured: no source counts as a pod of the cluster.
    #[default]
    None,
    /// Sources in these networks (`clusterCIDR`).
    Cidrs(Vec<IpNet>),
    /// Sources in this node's pod CIDRs (`detectLocalMode: NodeCIDR`),
    /// read from the Node at each plan.
    NodePodCidrs,
    /// Traffic arriving on this interface (a pod bridge).
    Interface(String),
    /// Traffic arriving on interfaces named with this prefix.
    InterfacePrefix(String),
}

impl LocalDetector {
    /// The part that applies to `family` (CIDRs of the other family say
    /// nothing about this one).
    pub fn for_family(&self, family: IpFamily) -> LocalDetector {
        match self {
            LocalDetector::Cidrs(cidrs) => {
                let mine: Vec<IpNet> = cidrs.iter().copied().filter(|c| IpFamily::of(&c.addr()) == family).collect();
                if mine.is_empty() { LocalDetector::None } else { LocalDetector::Cidrs(mine) }
            }
            other => other.clone(),
        }
    }
}

/// The planner's settings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PlanConfig {
    /// Masquerade all service traffic (`masqueradeAll`).
    pub masquerade_all: bool,
    /// The packet-mark bit meaning "masquerade me" (`masqueradeBit`).
    pub masquerade_bit: u32,
    pub local_detector: LocalDetector,
    /// Drop forwarded packets conntrack considers INVALID (off when the
    /// node sets `nf_conntrack_tcp_be_liberal`).
    pub drop_invalid: bool,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self { masquerade_all: false, masquerade_bit: 14, local_detector: LocalDetector::None, drop_invalid: true }
    }
}

impl PlanConfig {
    pub fn mark(&self) -> u32 {
        1 << self.masquerade_bit
    }

    /// The configuration with everything taken from the node filled in.
    pub fn resolved(&self, node: &NodeState) -> PlanConfig {
        let local_detector = match &self.local_detector {
            LocalDetector::NodePodCidrs => LocalDetector::Cidrs(node.pod_cidrs.clone()),
            other => other.clone(),
        };
        PlanConfig { local_detector, ..self.clone() }
    }
}
