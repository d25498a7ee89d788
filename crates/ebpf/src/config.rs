//! What the planner takes from configuration, as values, and what the mode
//! can do of kproxy's annotations ([`support`]).

use kproxy_model::{IpFamily, IpNet, ModeSupport, NodeState, Scheduler, WeightSupport};
use kproxy_nftables::LocalDetector;

use crate::maps::{self, CidrKey};

/// The default reject mark: bit 13. The masquerade bit defaults to 14
/// (0x4000) and upstream's iptables mode uses bit 15 (0x8000) for its drop
/// mark; bit 13 collides with neither.
pub const DEFAULT_REJECT_MARK: u32 = 1 << 13;

/// Most pick slots a weighted endpoint list may take (`kp_backends`
/// entries per group); a longer one is not weighted, as in the nftables
/// mode. Maglev's table has [`kproxy_sched::MAGLEV_SIZE`] slots.
pub const MAX_WEIGHTED_SLOTS: usize = 4096;

/// The schedulers the programs can do: each is a slot layout plus one of
/// the `KP_SCHED_*` picks. `random` is the default.
pub const SCHEDULERS: [Scheduler; 6] =
    [Scheduler::Random, Scheduler::Rr, Scheduler::Wrr, Scheduler::Sh, Scheduler::Dh, Scheduler::Mh];

/// Why a configuration cannot be planned.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The reject mark shares a bit with the masquerade mark (or is 0):
    /// the companion table could not tell the two apart.
    #[error(
        "reject mark {reject:#x} must be non-zero and must not share a bit with the masquerade mark {masquerade:#x}"
    )]
    MarkCollision { reject: u32, masquerade: u32 },
    /// `masqueradeBit` is out of the mark's 32 bits.
    #[error("masquerade bit {0} is not in 0..=31")]
    MasqueradeBit(u32),
}

/// The planner's settings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PlanConfig {
    /// Masquerade all traffic to cluster IPs (`masqueradeAll`).
    pub masquerade_all: bool,
    /// The packet-mark bit meaning "masquerade me" (`masqueradeBit`).
    pub masquerade_bit: u32,
    /// The mark the tc programs set on a connection the companion table
    /// must reject (`KP_VERDICT_REJECT` on tc, unserved cluster-IP ports).
    pub reject_mark: u32,
    /// How traffic from this cluster's pods is recognised. Only CIDRs
    /// (`ClusterCIDR`, and `NodeCIDR` resolved from the Node) go into
    /// `kp_local_cidrs`; interface detectors are not supported and leave
    /// every tc source external ([`PlanConfig::warnings`] says so).
    pub local_detector: LocalDetector,
    /// Drop forwarded packets conntrack considers INVALID (off when the
    /// node sets `nf_conntrack_tcp_be_liberal`), in the companion table.
    pub drop_invalid: bool,
    /// The network namespace cookie of the node (kproxy's own), which the
    /// loader reads; it goes into `kp_config`.
    pub node_netns_cookie: u64,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            masquerade_all: false,
            masquerade_bit: 14,
            reject_mark: DEFAULT_REJECT_MARK,
            local_detector: LocalDetector::None,
            drop_invalid: true,
            node_netns_cookie: 0,
        }
    }
}

impl PlanConfig {
    /// `1 << masquerade_bit`.
    pub fn masquerade_mark(&self) -> u32 {
        1u32.checked_shl(self.masquerade_bit).unwrap_or(0)
    }

    /// Checks the marks: the reject mark must be set and apart from the
    /// masquerade bit.
    pub fn validate(&self) -> Result<(), Error> {
        if self.masquerade_bit > 31 {
            return Err(Error::MasqueradeBit(self.masquerade_bit));
        }
        let masquerade = self.masquerade_mark();
        if self.reject_mark == 0 || self.reject_mark & masquerade != 0 {
            return Err(Error::MarkCollision { reject: self.reject_mark, masquerade });
        }
        Ok(())
    }

    /// The configuration with the node's pod CIDRs filled in
    /// (`detectLocalMode: NodeCIDR`).
    pub fn resolved(&self, node: &NodeState) -> PlanConfig {
        let local_detector = match &self.local_detector {
            LocalDetector::NodePodCidrs => LocalDetector::Cidrs(node.pod_cidrs.clone()),
            other => other.clone(),
        };
        PlanConfig { local_detector, ..self.clone() }
    }

    /// The detector's networks (both families), once resolved; empty when
    /// there is no detector or it is not CIDR-based.
    pub fn local_cidrs(&self) -> Vec<IpNet> {
        match &self.local_detector {
            LocalDetector::Cidrs(nets) => nets.clone(),
            _ => Vec::new(),
        }
    }

    /// Whether tc tells local sources of `family` apart: the detector has
    /// networks of that family.
    pub fn detects_local(&self, family: IpFamily) -> bool {
        self.local_cidrs().iter().any(|n| IpFamily::of(&n.addr()) == family)
    }

    /// `kp_local_cidrs`'s keys.
    pub fn local_cidr_keys(&self) -> Vec<CidrKey> {
        self.local_cidrs().iter().map(cidr_key).collect()
    }

    /// `kp_config`'s value. `KP_C_LOCAL_DETECTOR` is set when the detector
    /// has networks (of either family: a family without any then counts
    /// every source as external, which is what its empty trie says).
    pub fn kp_config(&self) -> maps::Config {
        let flags = if self.local_cidrs().is_empty() { 0 } else { maps::config_flags::LOCAL_DETECTOR };
        maps::Config {
            node_netns_cookie: self.node_netns_cookie,
            masquerade_mark: self.masquerade_mark(),
            reject_mark: self.reject_mark,
            flags,
            pad: 0,
        }
    }

    /// What of this configuration the mode does not do, for the log.
    pub fn warnings(&self) -> Vec<String> {
        match &self.local_detector {
            LocalDetector::Interface(name) => vec![format!(
                "detectLocalMode BridgeInterface ({name}) is not supported in ebpf mode: \
                 every source reaching the tc programs counts as external (use ClusterCIDR or NodeCIDR)"
            )],
            LocalDetector::InterfacePrefix(prefix) => vec![format!(
                "detectLocalMode InterfaceNamePrefix ({prefix}) is not supported in ebpf mode: \
                 every source reaching the tc programs counts as external (use ClusterCIDR or NodeCIDR)"
            )],
            _ => Vec::new(),
        }
    }
}

/// A network as a `kp_local_cidrs` key (IPv4 networks as mapped
/// addresses: 96 more bits of prefix).
pub fn cidr_key(net: &IpNet) -> CidrKey {
    let (addr, prefixlen) = net_bits(net);
    CidrKey { prefixlen, addr }
}

/// The 16-byte network address and its prefix length over 128 bits.
pub(crate) fn net_bits(net: &IpNet) -> ([u8; 16], u32) {
    let extra = if matches!(net, IpNet::V4(_)) { 96 } else { 0 };
    (maps::addr16(net.network()), u32::from(net.prefix_len()) + extra)
}

/// What this mode does of kproxy's annotations, for the state: the
/// [`SCHEDULERS`], weights as at most [`MAX_WEIGHTED_SLOTS`] slots (Maglev
/// unlimited), no health checks. `lc`, `wlc`, `sed`, `nq`, `fo`, `ovf`,
/// `lblc`, `lblcr` and `twos` need connection counts the programs do not
/// keep; the state serves such a Service with `random` and a warning.
pub fn support() -> ModeSupport {
    ModeSupport {
        mode: "ebpf",
        default_scheduler: Scheduler::Random,
        schedulers: SCHEDULERS.to_vec(),
        weights: WeightSupport::Slots { max: MAX_WEIGHTED_SLOTS },
        health_checks: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_marks_do_not_collide_and_a_shared_bit_is_refused() {
        assert_eq!(PlanConfig::default().validate(), Ok(()));
        let bad = PlanConfig { masquerade_bit: 13, ..PlanConfig::default() };
        assert_eq!(bad.validate(), Err(Error::MarkCollision { reject: 0x2000, masquerade: 0x2000 }));
        let zero = PlanConfig { reject_mark: 0, ..PlanConfig::default() };
        assert!(zero.validate().is_err());
    }

    #[test]
    fn ipv4_cidrs_count_the_mapped_prefix() {
        let key = cidr_key(&"10.244.0.0/16".parse().expect("net"));
        assert_eq!(key.prefixlen, 112);
        assert_eq!(maps::ip_of(key.addr).to_string(), "10.244.0.0");
        assert_eq!(cidr_key(&"fd00::/48".parse().expect("net")).prefixlen, 48);
    }

    #[test]
    fn interface_detectors_are_reported_and_leave_no_local_cidrs() {
        let config = PlanConfig { local_detector: LocalDetector::Interface("cni0".into()), ..PlanConfig::default() };
        assert!(config.local_cidrs().is_empty());
        assert_eq!(config.kp_config().flags, 0);
        assert!(config.warnings()[0].contains("not supported in ebpf mode"));
    }

    #[test]
    fn the_mode_refuses_schedulers_needing_connection_counts() {
        let support = support();
        assert!(support.supports(Scheduler::Mh) && support.supports(Scheduler::Wrr));
        for s in [Scheduler::Lc, Scheduler::Wlc, Scheduler::Sed, Scheduler::Nq, Scheduler::Twos] {
            assert!(!support.supports(s), "{s}");
        }
    }
}
