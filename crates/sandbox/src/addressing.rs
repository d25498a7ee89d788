//! The fixed addressing plan of the standard [`Topology`](crate::Topology),
//! and the names of the links it creates. Nothing here touches the kernel.
//!
//! ```text
//!  pods 10.244.1.x ─ kpbr0 ─ node-a ─ eth0 192.168.77.1 ──┐
//!                                                          client (router, 203.0.113.9 on lo)
//!  pods 10.244.2.x ─ kpbr0 ─ node-b ─ eth0 192.168.78.1 ──┘
//! ```
//!
//! IPv6 addresses reuse the IPv4 digits as hex groups (10.244.1.10 is
//! fd00:10:244:1::10), so the two families read alike in test output.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

/// The pod bridge on each node.
pub const BRIDGE: &str = "kpbr0";
/// A node's uplink towards the client, and a pod's only interface.
pub const UPLINK: &str = "eth0";
/// Host part of a node's first pod address; later pods count up to 254.
pub const FIRST_POD_HOST: u8 = 10;

/// The IPv4 service CIDR; the client routes it to node-a, nodes cover it with their default route.
pub const SERVICE_CIDR_V4: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(10, 96, 0, 0), 16);
/// The IPv6 service CIDR, routed like [`SERVICE_CIDR_V4`].
pub const SERVICE_CIDR_V6: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0xfd00, 0x96, 0, 0, 0, 0, 0, 0), 112);
/// IPv4 load-balancer IPs for tests; the client routes them to node-a.
pub const LOAD_BALANCER_CIDR_V4: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(198, 51, 100, 0), 24);
/// IPv6 load-balancer IPs for tests; the client routes them to node-a.
pub const LOAD_BALANCER_CIDR_V6: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x2001, 0xdb8, 0x51, 0, 0, 0, 0, 0), 64);
/// Source range for "allowed source range" tests: the client owns one address
/// in it, the nodes route it back to the client, and the client routes the rest to node-a.
pub const SOURCE_RANGE_CIDR_V4: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(203, 0, 113, 0), 24);
/// The client's extra source address, a /32 on its `lo`.
pub const CLIENT_SOURCE_IPV4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);

/// Where one node sits in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAddressing {
    /// 1 or 2.
    pub index: u8,
    /// `node-a` or `node-b`.
    pub name: &'static str,
    /// The node's address on its uplink (/24).
    pub ipv4: Ipv4Addr,
    /// The node's address on its uplink (/64).
    pub ipv6: Ipv6Addr,
    /// The client's address on the same link: the node's default gateway.
    pub gateway_ipv4: Ipv4Addr,
    /// The client's IPv6 address on the same link: the node's default gateway.
    pub gateway_ipv6: Ipv6Addr,
    /// The client's end of the link.
    pub client_interface: &'static str,
    /// The bridge's address, the pods' gateway (/24).
    pub bridge_ipv4: Ipv4Addr,
    /// The bridge's IPv6 address, the pods' gateway (/64).
    pub bridge_ipv6: Ipv6Addr,
    /// The node's pod subnet.
    pub pod_cidr_v4: Ipv4Net,
    /// The node's IPv6 pod subnet.
    pub pod_cidr_v6: Ipv6Net,
}

/// Prefix length of the uplinks and of the IPv4 pod subnets.
pub const PREFIX_V4: u8 = 24;
/// Prefix length of the IPv6 uplinks and pod subnets.
pub const PREFIX_V6: u8 = 64;

/// node-a: uplink 192.168.77.0/24 and fd00:77::/64, pods 10.244.1.0/24 and fd00:10:244:1::/64.
pub const NODE_A: NodeAddressing = NodeAddressing {
    index: 1,
    name: "node-a",
    ipv4: Ipv4Addr::new(192, 168, 77, 1),
    ipv6: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1),
    gateway_ipv4: Ipv4Addr::new(192, 168, 77, 100),
    gateway_ipv6: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x100),
    client_interface: "eth-a",
    bridge_ipv4: Ipv4Addr::new(10, 244, 1, 1),
    bridge_ipv6: Ipv6Addr::new(0xfd00, 0x10, 0x244, 1, 0, 0, 0, 1),
    pod_cidr_v4: Ipv4Net::new_assert(Ipv4Addr::new(10, 244, 1, 0), 24),
    pod_cidr_v6: Ipv6Net::new_assert(Ipv6Addr::new(0xfd00, 0x10, 0x244, 1, 0, 0, 0, 0), 64),
};

/// node-b: uplink 192.168.78.0/24 and fd00:78::/64, pods 10.244.2.0/24 and fd00:10:244:2::/64.
pub const NODE_B: NodeAddressing = NodeAddressing {
    index: 2,
    name: "node-b",
    ipv4: Ipv4Addr::new(192, 168, 78, 1),
    ipv6: Ipv6Addr::new(0xfd00, 0x78, 0, 0, 0, 0, 0, 1),
    gateway_ipv4: Ipv4Addr::new(192, 168, 78, 100),
    gateway_ipv6: Ipv6Addr::new(0xfd00, 0x78, 0, 0, 0, 0, 0, 0x100),
    client_interface: "eth-b",
    bridge_ipv4: Ipv4Addr::new(10, 244, 2, 1),
    bridge_ipv6: Ipv6Addr::new(0xfd00, 0x10, 0x244, 2, 0, 0, 0, 1),
    pod_cidr_v4: Ipv4Net::new_assert(Ipv4Addr::new(10, 244, 2, 0), 24),
    pod_cidr_v6: Ipv6Net::new_assert(Ipv6Addr::new(0xfd00, 0x10, 0x244, 2, 0, 0, 0, 0), 64),
};

impl NodeAddressing {
    /// The plan of node 1 or 2.
    pub fn of(index: u8) -> Option<&'static NodeAddressing> {
        match index {
            1 => Some(&NODE_A),
            2 => Some(&NODE_B),
            _ => None,
        }
    }

    /// The IPv4 address of the pod with host part `host`: `10.244.<index>.<host>`.
    pub fn pod_ipv4(&self, host: u8) -> Ipv4Addr {
        let [a, b, c, _] = self.pod_cidr_v4.network().octets();
        Ipv4Addr::new(a, b, c, host)
    }

    /// The IPv6 address of the pod with host part `host`: `fd00:10:244:<index>::<host>`,
    /// the decimal digits of `host` read as a hex group.
    pub fn pod_ipv6(&self, host: u8) -> Ipv6Addr {
        let mut segments = self.pod_cidr_v6.network().segments();
        segments[7] = decimal_digits_as_hex(host);
        Ipv6Addr::from(segments)
    }
}

/// 10 -> 0x10, 254 -> 0x254.
fn decimal_digits_as_hex(value: u8) -> u16 {
    let value = u16::from(value);
    (value / 100) * 0x100 + (value / 10 % 10) * 0x10 + value % 10
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_addresses_read_alike_in_both_families() {
        assert_eq!(NODE_A.pod_ipv4(10), Ipv4Addr::new(10, 244, 1, 10));
        assert_eq!(NODE_A.pod_ipv6(10).to_string(), "fd00:10:244:1::10");
        assert_eq!(NODE_B.pod_ipv4(254), Ipv4Addr::new(10, 244, 2, 254));
        assert_eq!(NODE_B.pod_ipv6(254).to_string(), "fd00:10:244:2::254");
        assert_eq!(NODE_B.pod_ipv6(7).to_string(), "fd00:10:244:2::7");
    }

    #[test]
    fn nodes_are_found_by_index_only_for_one_and_two() {
        assert_eq!(NodeAddressing::of(1).map(|node| node.name), Some("node-a"));
        assert_eq!(NodeAddressing::of(2).map(|node| node.name), Some("node-b"));
        assert_eq!(NodeAddressing::of(0), None);
        assert_eq!(NodeAddressing::of(3), None);
    }
}
