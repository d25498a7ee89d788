//! What IPVS holds, as plain values: virtual services, their
//! destinations, the global timeouts and version, and counters.
//!
//! These types know nothing of the wire; [`mod@super::encode`] and
//! [`super::decode`] translate. Values a request sends and values only a
//! reply carries (counters, statistics) are kept apart, so a planner can
//! compare what it wants with what the kernel has field for field.

use std::net::IpAddr;

/// An address family of a service or destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    Inet,
    Inet6,
}

impl Family {
    pub fn of(addr: &IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => Self::Inet,
            IpAddr::V6(_) => Self::Inet6,
        }
    }

    /// The longest netmask prefix: 32 or 128.
    pub fn max_prefix(self) -> u8 {
        match self {
            Self::Inet => 32,
            Self::Inet6 => 128,
        }
    }
}

/// A virtual service's transport protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
    /// Another IP protocol number (the kernel also knows AH and ESP);
    /// kept so a foreign service still decodes.
    Other(u16),
}

impl Protocol {
    pub fn number(self) -> u16 {
        match self {
            Self::Tcp => 6,
            Self::Udp => 17,
            Self::Sctp => 132,
            Self::Other(n) => n,
        }
    }

    pub fn from_number(n: u16) -> Self {
        match n {
            6 => Self::Tcp,
            17 => Self::Udp,
            132 => Self::Sctp,
            n => Self::Other(n),
        }
    }
}

/// What identifies a virtual service in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServiceKey {
    /// Protocol, virtual address and port.
    Addr { protocol: Protocol, addr: IpAddr, port: u16 },
    /// A firewall mark (set by nftables), per address family.
    Fwmark { family: Family, mark: u32 },
}

impl ServiceKey {
    pub fn family(&self) -> Family {
        match self {
            Self::Addr { addr, .. } => Family::of(addr),
            Self::Fwmark { family, .. } => *family,
        }
    }
}

/// `IP_VS_SVC_F_*` service flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceFlags(pub u32);

impl ServiceFlags {
    /// Persistence (session affinity): see [`Service::timeout`].
    pub const PERSISTENT: Self = Self(0x1);
    /// `IP_VS_SVC_F_HASHED`: kernel-internal, set on every service it
    /// reports. [`super::decode`] strips it.
    pub const HASHED: Self = Self(0x2);
    pub const ONE_PACKET: Self = Self(0x4);
    /// `sh` scheduler: fall back to another destination when the hashed one
    /// is unavailable (`IP_VS_SVC_F_SCHED1`).
    pub const SH_FALLBACK: Self = Self(0x8);
    /// `sh` scheduler: hash the source port too (`IP_VS_SVC_F_SCHED2`).
    pub const SH_PORT: Self = Self(0x10);

    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for ServiceFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A virtual service as created or edited.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Service {
    pub key: ServiceKey,
    /// Scheduler module name without `ip_vs_` (`rr`, `wrr`, `sh`, ...).
    pub scheduler: String,
    /// Without [`ServiceFlags::HASHED`].
    pub flags: ServiceFlags,
    /// Persistence timeout in seconds (0 when not persistent).
    pub timeout: u32,
    /// Persistence granularity as a prefix length (32 or 128 when unused).
    pub netmask: u8,
}

impl Service {
    /// A non-persistent service with no flags.
    pub fn new(key: ServiceKey, scheduler: &str) -> Self {
        Self {
            key,
            scheduler: scheduler.to_owned(),
            flags: ServiceFlags::default(),
            timeout: 0,
            netmask: key.family().max_prefix(),
        }
    }
}

/// A service as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEntry {
    pub service: Service,
    /// From `STATS64` when present, else from the legacy `STATS`.
    pub stats: Option<Stats>,
}

/// `IP_VS_CONN_F_TUNNEL_TYPE_*`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TunnelEncap {
    #[default]
    Ipip,
    Gue,
    Gre,
    Other(u8),
}

impl TunnelEncap {
    pub fn number(self) -> u8 {
        match self {
            Self::Ipip => 0,
            Self::Gue => 1,
            Self::Gre => 2,
            Self::Other(n) => n,
        }
    }

    pub fn from_number(n: u8) -> Self {
        match n {
            0 => Self::Ipip,
            1 => Self::Gue,
            2 => Self::Gre,
            n => Self::Other(n),
        }
    }
}

/// Tunnel parameters of [`Forward::Tunnel`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Tunnel {
    pub encap: TunnelEncap,
    /// GUE destination port.
    pub port: u16,
    /// `IP_VS_TUNNEL_ENCAP_FLAG_*` (checksum options).
    pub flags: u16,
}

/// How packets reach a destination (`IP_VS_CONN_F_FWD_MASK` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Forward {
    /// NAT: what kproxy uses.
    Masq,
    /// `IP_VS_CONN_F_LOCALNODE`.
    Local,
    Tunnel(Tunnel),
    /// Direct routing (`ipvsadm -g`, its default).
    Direct,
    /// A value this codec does not know; kept so the entry still decodes.
    Other(u32),
}

impl Forward {
    pub fn number(self) -> u32 {
        match self {
            Self::Masq => 0,
            Self::Local => 1,
            Self::Tunnel(_) => 2,
            Self::Direct => 3,
            Self::Other(n) => n,
        }
    }
}

/// A real server behind a virtual service, as added or edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Destination {
    pub addr: IpAddr,
    pub port: u16,
    pub forward: Forward,
    /// 0 quiesces: no new connections, existing ones continue.
    pub weight: u32,
    /// Connection thresholds (0 = none).
    pub upper_threshold: u32,
    pub lower_threshold: u32,
}

impl Destination {
    /// A masquerading destination without thresholds.
    pub fn masq(addr: IpAddr, port: u16, weight: u32) -> Self {
        Self { addr, port, forward: Forward::Masq, weight, upper_threshold: 0, lower_threshold: 0 }
    }
}

/// Connection counts of a destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Connections {
    pub active: u32,
    pub inactive: u32,
    /// Persistence templates pointing at it.
    pub persistent: u32,
}

/// A destination as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationEntry {
    pub destination: Destination,
    pub connections: Connections,
    /// From `STATS64` when present, else from the legacy `STATS`.
    pub stats: Option<Stats>,
}

/// Counters and rates of a service or destination. The legacy nest's u32
/// fields are widened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub conns: u64,
    pub in_packets: u64,
    pub out_packets: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    /// Rates from the kernel's estimator, per second.
    pub cps: u64,
    pub in_pps: u64,
    pub out_pps: u64,
    pub in_bps: u64,
    pub out_bps: u64,
}

/// Global connection timeouts in seconds. In a request 0 means "leave as
/// it is"; in a reply 0 means the kernel did not report it (its protocol
/// support is compiled out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeouts {
    pub tcp: u32,
    pub tcp_fin: u32,
    pub udp: u32,
}

/// `IPVS_CMD_GET_INFO`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// `major << 16 | minor << 8 | patch` (`0x010201` = 1.2.1).
    pub version: u32,
    /// Connection hash table size.
    pub conn_table_size: u32,
}

impl Info {
    /// The version as (major, minor, patch).
    pub fn version_triple(&self) -> (u8, u8, u8) {
        let [_, major, minor, patch] = self.version.to_be_bytes();
        (major, minor, patch)
    }
}

/// A generic-netlink family as the controller describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenlFamily {
    /// The `nlmsg_type` of the family's messages, assigned at registration.
    pub id: u16,
    pub version: u32,
    pub max_attr: u32,
}
