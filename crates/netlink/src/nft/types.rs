//! How kproxy's fields and values look to nf_tables: data types, lengths,
//! registers, and the bytes of keys and data.

use std::net::IpAddr;

use kproxy_model::{IpFamily, IpNet, Protocol};
use kproxy_nftables::ast::{Atom, Field};

/// `NFPROTO_IPV4`, `NFPROTO_IPV6`.
pub fn nfproto(family: IpFamily) -> u8 {
    match family {
        IpFamily::V4 => 2,
        IpFamily::V6 => 10,
    }
}

pub fn protocol_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

/// nft's data type ids (`enum datatypes` in nftables' `datatype.h`); the
/// kernel stores them for `nft list` only.
pub mod datatype {
    pub const INTEGER: u32 = 4;
    pub const IPADDR: u32 = 7;
    pub const IP6ADDR: u32 = 8;
    pub const INET_PROTOCOL: u32 = 12;
    pub const INET_SERVICE: u32 = 13;
    /// `NFT_DATA_VERDICT`.
    pub const VERDICT: u32 = 0xffff_ff00;
    /// Bits per type in a concatenation's type id.
    pub const CONCAT_BITS: u32 = 6;
}

/// The value length of a field, in bytes.
pub fn field_len(family: IpFamily, field: Field) -> usize {
    match field {
        Field::Saddr | Field::Daddr => addr_len(family),
        Field::L4proto => 1,
        Field::Dport => 2,
        Field::Random(_) | Field::Inc(_) => 4,
    }
}

pub fn addr_len(family: IpFamily) -> usize {
    match family {
        IpFamily::V4 => 4,
        IpFamily::V6 => 16,
    }
}

pub fn field_type(family: IpFamily, field: Field) -> u32 {
    match field {
        Field::Saddr | Field::Daddr => match family {
            IpFamily::V4 => datatype::IPADDR,
            IpFamily::V6 => datatype::IP6ADDR,
        },
        Field::L4proto => datatype::INET_PROTOCOL,
        Field::Dport => datatype::INET_SERVICE,
        Field::Random(_) | Field::Inc(_) => datatype::INTEGER,
    }
}

/// A key's or data's type id: one type, or a concatenation's folded ids.
pub fn key_type(family: IpFamily, fields: &[Field]) -> u32 {
    fields.iter().fold(0, |id, f| (id << datatype::CONCAT_BITS) | field_type(family, *f))
}

/// A key's or data's length: one field's, or a concatenation's fields each
/// padded to 4 bytes.
pub fn key_len(family: IpFamily, fields: &[Field]) -> usize {
    match fields {
        [one] => field_len(family, *one),
        _ => fields.iter().map(|f| crate::nft::wire::align(field_len(family, *f))).sum(),
    }
}

/// 32-bit register slots a field takes in a concatenation.
pub fn slots(family: IpFamily, field: Field) -> u32 {
    u32::try_from(field_len(family, field).div_ceil(4)).expect("fields are at most 16 bytes")
}

/// The register name of a 32-bit slot: the 128-bit `NFT_REG_1..4` where a
/// slot starts one, otherwise `NFT_REG32_00 + slot` (as nft picks them).
pub fn register(slot: u32) -> u32 {
    if slot.is_multiple_of(4) { 1 + slot / 4 } else { 8 + slot }
}

/// `NFT_REG_VERDICT`.
pub const REG_VERDICT: u32 = 0;

/// The bytes of a value: addresses in network order, ports big-endian,
/// protocols one byte, numbers in host order. `Net` is its first address.
pub fn atom_bytes(out: &mut Vec<u8>, atom: &Atom) {
    match atom {
        Atom::Addr(ip) => ip_bytes(out, ip),
        Atom::Net(net) => ip_bytes(out, &net.network()),
        Atom::Proto(p) => out.push(protocol_number(*p)),
        Atom::Port(port) => out.extend_from_slice(&port.to_be_bytes()),
        Atom::Index(i) => out.extend_from_slice(&i.to_ne_bytes()),
    }
}

pub fn ip_bytes(out: &mut Vec<u8>, ip: &IpAddr) {
    match ip {
        IpAddr::V4(v4) => out.extend_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.extend_from_slice(&v6.octets()),
    }
}

/// Appends a key or data value: one atom as is, a concatenation with each atom
/// padded to 4 bytes. With `last`, a trailing `Net` is its last address
/// (the end of a range).
pub fn write_value(out: &mut Vec<u8>, atoms: &[Atom], last: bool) {
    let start = out.len();
    let concat = atoms.len() > 1;
    for atom in atoms {
        match atom {
            Atom::Net(net) if last => ip_bytes(out, &net.broadcast()),
            _ => atom_bytes(out, atom),
        }
        if concat {
            let padded = start + crate::nft::wire::align(out.len() - start);
            out.resize(padded, 0);
        }
    }
}

/// The first address after a network, or `None` when it ends the address
/// space (the end of an interval in an rbtree set).
pub fn after(net: &IpNet) -> Option<IpAddr> {
    match net.broadcast() {
        IpAddr::V4(a) => u32::from(a).checked_add(1).map(|n| IpAddr::V4(n.into())),
        IpAddr::V6(a) => u128::from(a).checked_add(1).map(|n| IpAddr::V6(n.into())),
    }
}

/// The unspecified address of a family.
pub fn zero(family: IpFamily) -> IpAddr {
    match family {
        IpFamily::V4 => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpFamily::V6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}
