//! The BPF maps' keys and values, byte for byte as the programs read them
//! (`crates/bpf/programs/kproxy_maps.h` is the other half of this
//! contract; the loader's tests check both agree with the compiled
//! object).
//!
//! Addresses are 16 bytes (IPv4 as `::ffff:a.b.c.d`), addresses and ports
//! in network byte order, padding explicit and zero. Every type here is
//! `#[repr(C)]` with only integer and byte-array fields, so
//! [`MapBytes::bytes`] is its memory.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `KP_VERDICT_*`.
pub mod verdict {
    pub const FORWARD: u8 = 0;
    pub const REJECT: u8 = 1;
    pub const DROP: u8 = 2;
}

/// `KP_SCHED_*`.
pub mod sched {
    pub const RANDOM: u8 = 0;
    pub const RR: u8 = 1;
    pub const HASH_SRC: u8 = 2;
    pub const HASH_DST: u8 = 3;
}

/// `KP_F_*` (`Frontend::flags`).
pub mod flags {
    pub const EXTERNAL: u32 = 1 << 0;
    pub const SOURCE_RANGES: u32 = 1 << 1;
    pub const MASQ_INTERNAL: u32 = 1 << 2;
    pub const MASQ_EXTERNAL: u32 = 1 << 3;
    pub const OWNED_ADDRESS: u32 = 1 << 4;
}

/// `KP_C_*` (`Config::flags`).
pub mod config_flags {
    pub const LOCAL_DETECTOR: u32 = 1 << 0;
}

/// The maps' names, as the object file declares them.
pub mod names {
    pub const FRONTENDS: &str = "kp_frontends";
    pub const BACKENDS: &str = "kp_backends";
    pub const RR: &str = "kp_rr";
    pub const SOURCE_RANGES: &str = "kp_source_ranges";
    pub const LOCAL_CIDRS: &str = "kp_local_cidrs";
    pub const AFFINITY: &str = "kp_affinity";
    pub const FLOWS: &str = "kp_flows";
    pub const SOCK_REV: &str = "kp_sock_rev";
    pub const CONFIG: &str = "kp_config";
}

/// An address as the maps hold it.
pub fn addr16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address [`addr16`] made (a mapped address reads back as IPv4).
pub fn ip_of(addr: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(addr);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The IPv4 unspecified address as the maps hold it (for tests).
pub const V4_ANY: [u8; 16] = Ipv4Addr::UNSPECIFIED.to_ipv6_mapped().octets();

/// `struct kp_frontend_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrontendKey {
    pub addr: [u8; 16],
    /// Network byte order.
    pub port: u16,
    pub proto: u8,
    pub pad: u8,
}

/// `struct kp_selection`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selection {
    pub group: u32,
    pub count: u16,
    pub verdict: u8,
    pub sched: u8,
}

/// `struct kp_frontend`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frontend {
    pub internal: Selection,
    pub external: Selection,
    pub id: u32,
    pub affinity_timeout: u32,
    pub flags: u32,
    pub pad: u32,
}

/// `struct kp_backend_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendKey {
    pub group: u32,
    pub slot: u32,
}

/// `struct kp_backend`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Backend {
    pub addr: [u8; 16],
    /// Network byte order.
    pub port: u16,
    pub pad: u16,
}

/// `struct kp_range_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RangeKey {
    pub prefixlen: u32,
    /// Big-endian.
    pub id: u32,
    pub addr: [u8; 16],
}

/// `struct kp_cidr_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CidrKey {
    pub prefixlen: u32,
    pub addr: [u8; 16],
}

/// `struct kp_affinity_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AffinityKey {
    pub client: [u8; 16],
    pub id: u32,
    pub scope: u32,
}

/// `struct kp_affinity`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Affinity {
    pub last_seen_ns: u64,
    pub backend: Backend,
    pub pad: u32,
}

/// `struct kp_flow_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub direction: u8,
    pub pad: u16,
}

/// `struct kp_flow`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flow {
    pub addr: [u8; 16],
    pub port: u16,
    pub pad: u16,
    pub mark: u32,
    pub last_seen_ns: u64,
}

/// `struct kp_sock_rev_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SockRevKey {
    pub cookie: u64,
    pub addr: [u8; 16],
    pub port: u16,
    pub pad: u16,
    pub pad2: u32,
}

/// `struct kp_sock_rev`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SockRev {
    pub addr: [u8; 16],
    pub port: u16,
    pub pad: u16,
}

/// `struct kp_config`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Config {
    pub node_netns_cookie: u64,
    pub masquerade_mark: u32,
    pub reject_mark: u32,
    pub flags: u32,
    pub pad: u32,
}

/// The contents of the maps the planner owns (the LRU maps and `kp_rr`
/// belong to the programs): what a plan wants, or what a dump read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    pub frontends: std::collections::BTreeMap<FrontendKey, Frontend>,
    pub backends: std::collections::BTreeMap<BackendKey, Backend>,
    /// `kp_source_ranges` (the value is always 1).
    pub source_ranges: std::collections::BTreeSet<RangeKey>,
    /// `kp_local_cidrs` (the value is always 1).
    pub local_cidrs: std::collections::BTreeSet<CidrKey>,
}

/// One map write. A sync is a sequence of these, in an order that keeps
/// every frontend whole (docs/ebpf.md, "Consistency").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    PutBackend(BackendKey, Backend),
    DeleteBackend(BackendKey),
    PutFrontend(FrontendKey, Frontend),
    DeleteFrontend(FrontendKey),
    PutSourceRange(RangeKey),
    DeleteSourceRange(RangeKey),
    PutLocalCidr(CidrKey),
    DeleteLocalCidr(CidrKey),
    /// Forget a round-robin group's counter (`kp_rr`), when the group goes.
    DeleteRr(u32),
    PutConfig(Config),
}

/// A map key or value: plain old data whose bytes are what the map holds.
///
/// # Safety
/// Implemented only for the `#[repr(C)]` types above, whose fields are
/// integers and byte arrays with the padding spelled out as fields, so
/// every byte is initialised.
pub unsafe trait MapBytes: Copy + 'static {
    /// The value's memory, as the kernel stores it.
    fn bytes(&self) -> &[u8] {
        // SAFETY: the trait's contract: repr(C), no implicit padding.
        unsafe { std::slice::from_raw_parts((self as *const Self).cast::<u8>(), std::mem::size_of::<Self>()) }
    }
}

macro_rules! map_bytes {
    ($($ty:ty = $size:expr),* $(,)?) => {
        $(
            // SAFETY: see the trait; the size check below catches a field
            // that would introduce implicit padding.
            unsafe impl MapBytes for $ty {}
            const _: () = assert!(std::mem::size_of::<$ty>() == $size);
        )*
    };
}

map_bytes! {
    FrontendKey = 20,
    Selection = 8,
    Frontend = 32,
    BackendKey = 8,
    Backend = 20,
    RangeKey = 24,
    CidrKey = 20,
    AffinityKey = 24,
    Affinity = 32,
    FlowKey = 40,
    Flow = 32,
    SockRevKey = 32,
    SockRev = 20,
    Config = 24,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_addresses_are_mapped_and_read_back_as_ipv4() {
        let ip: IpAddr = "10.96.0.10".parse().expect("an address");
        let bytes = addr16(ip);
        assert_eq!(&bytes[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&bytes[12..], &[10, 96, 0, 10]);
        assert_eq!(ip_of(bytes), ip);
        let v6: IpAddr = "fd00:96::10".parse().expect("an address");
        assert_eq!(ip_of(addr16(v6)), v6);
    }

    #[test]
    fn a_frontend_key_is_its_fields_in_order() {
        let key =
            FrontendKey { addr: addr16("10.96.0.10".parse().expect("ip")), port: 80u16.to_be(), proto: 6, pad: 0 };
        let bytes = key.bytes();
        assert_eq!(bytes.len(), 20);
        assert_eq!(&bytes[16..], &[0, 80, 6, 0]);
    }
}
