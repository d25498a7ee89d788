//! The nests inside IPVS replies (and requests): a service, a
//! destination, statistics, and the scalar values in them, each length
//! checked. Unknown attributes are skipped.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::decode::DecodeError;
use super::types::{
    Connections, Destination, DestinationEntry, Family, Forward, Protocol, Service, ServiceEntry, ServiceFlags,
    ServiceKey, Stats, Tunnel, TunnelEncap,
};
use super::wire::{self, attrs, dest, svc};

pub(super) fn service(nest: &[u8]) -> Result<ServiceEntry, DecodeError> {
    let (mut af, mut protocol, mut addr, mut port, mut fwmark) = (None, None, None, None, None);
    let (mut scheduler, mut flags, mut timeout, mut netmask) = (String::new(), 0, 0, None);
    let (mut legacy, mut stats64) = (None, None);
    for a in attrs(nest) {
        let (kind, v) = a?;
        match kind {
            svc::AF => af = Some(family_of(u16v("SVC_ATTR_AF", v)?)?),
            svc::PROTOCOL => protocol = Some(Protocol::from_number(u16v("SVC_ATTR_PROTOCOL", v)?)),
            svc::ADDR => addr = Some(v),
            svc::PORT => port = Some(u16_be("SVC_ATTR_PORT", v)?),
            svc::FWMARK => fwmark = Some(u32v("SVC_ATTR_FWMARK", v)?),
            svc::SCHED_NAME => scheduler = c_string(v)?,
            svc::FLAGS => {
                let raw = v.get(..4).ok_or(DecodeError::AttrSize { what: "SVC_ATTR_FLAGS", len: v.len() })?;
                flags = u32v("SVC_ATTR_FLAGS", raw)?;
            }
            svc::TIMEOUT => timeout = u32v("SVC_ATTR_TIMEOUT", v)?,
            svc::NETMASK => netmask = Some(u32v("SVC_ATTR_NETMASK", v)?),
            svc::STATS => legacy = Some(stats(v)?),
            svc::STATS64 => stats64 = Some(stats(v)?),
            _ => {}
        }
    }
    let family = af.ok_or(DecodeError::Missing { what: "SVC_ATTR_AF" })?;
    // The kernel sends FWMARK instead of the address triple for fwmark services.
    let key = match fwmark {
        Some(mark) => ServiceKey::Fwmark { family, mark },
        None => ServiceKey::Addr {
            protocol: protocol.ok_or(DecodeError::Missing { what: "SVC_ATTR_PROTOCOL" })?,
            addr: inet_addr(family, addr.ok_or(DecodeError::Missing { what: "SVC_ATTR_ADDR" })?)?,
            port: port.ok_or(DecodeError::Missing { what: "SVC_ATTR_PORT" })?,
        },
    };
    let netmask = match netmask {
        Some(raw) => prefix(family, raw)?,
        None => family.max_prefix(),
    };
    let service = Service { key, scheduler, flags: ServiceFlags(flags & !ServiceFlags::HASHED.0), timeout, netmask };
    Ok(ServiceEntry { service, stats: stats64.or(legacy) })
}

pub(super) fn destination(nest: &[u8], service_family: Family) -> Result<DestinationEntry, DecodeError> {
    let (mut af, mut addr, mut port, mut fwd) = (None, None, None, None);
    let (mut weight, mut upper, mut lower) = (0, 0, 0);
    let mut tunnel = Tunnel::default();
    let mut connections = Connections::default();
    let (mut legacy, mut stats64) = (None, None);
    for a in attrs(nest) {
        let (kind, v) = a?;
        match kind {
            dest::ADDR_FAMILY => af = Some(family_of(u16v("DEST_ATTR_ADDR_FAMILY", v)?)?),
            dest::ADDR => addr = Some(v),
            dest::PORT => port = Some(u16_be("DEST_ATTR_PORT", v)?),
            dest::FWD_METHOD => fwd = Some(u32v("DEST_ATTR_FWD_METHOD", v)?),
            dest::WEIGHT => weight = u32v("DEST_ATTR_WEIGHT", v)?,
            dest::U_THRESH => upper = u32v("DEST_ATTR_U_THRESH", v)?,
            dest::L_THRESH => lower = u32v("DEST_ATTR_L_THRESH", v)?,
            dest::ACTIVE_CONNS => connections.active = u32v("DEST_ATTR_ACTIVE_CONNS", v)?,
            dest::INACT_CONNS => connections.inactive = u32v("DEST_ATTR_INACT_CONNS", v)?,
            dest::PERSIST_CONNS => connections.persistent = u32v("DEST_ATTR_PERSIST_CONNS", v)?,
            dest::TUN_TYPE => {
                let n = *v.first().ok_or(DecodeError::AttrSize { what: "DEST_ATTR_TUN_TYPE", len: 0 })?;
                tunnel.encap = TunnelEncap::from_number(n);
            }
            dest::TUN_PORT => tunnel.port = u16_be("DEST_ATTR_TUN_PORT", v)?,
            dest::TUN_FLAGS => tunnel.flags = u16v("DEST_ATTR_TUN_FLAGS", v)?,
            dest::STATS => legacy = Some(stats(v)?),
            dest::STATS64 => stats64 = Some(stats(v)?),
            _ => {}
        }
    }
    let family = af.unwrap_or(service_family);
    let forward = match fwd.ok_or(DecodeError::Missing { what: "DEST_ATTR_FWD_METHOD" })? {
        0 => Forward::Masq,
        1 => Forward::Local,
        2 => Forward::Tunnel(tunnel),
        3 => Forward::Direct,
        n => Forward::Other(n),
    };
    let destination = Destination {
        addr: inet_addr(family, addr.ok_or(DecodeError::Missing { what: "DEST_ATTR_ADDR" })?)?,
        port: port.ok_or(DecodeError::Missing { what: "DEST_ATTR_PORT" })?,
        forward,
        weight,
        upper_threshold: upper,
        lower_threshold: lower,
    };
    Ok(DestinationEntry { destination, connections, stats: stats64.or(legacy) })
}

/// Both stats nests: each value is read by its length (the legacy nest
/// mixes u32 and u64, the 64-bit one is all u64; no alignment assumed).
pub(super) fn stats(nest: &[u8]) -> Result<Stats, DecodeError> {
    use wire::stats as s;
    let mut out = Stats::default();
    for a in attrs(nest) {
        let (kind, v) = a?;
        let field = match kind {
            s::CONNS => &mut out.conns,
            s::INPKTS => &mut out.in_packets,
            s::OUTPKTS => &mut out.out_packets,
            s::INBYTES => &mut out.in_bytes,
            s::OUTBYTES => &mut out.out_bytes,
            s::CPS => &mut out.cps,
            s::INPPS => &mut out.in_pps,
            s::OUTPPS => &mut out.out_pps,
            s::INBPS => &mut out.in_bps,
            s::OUTBPS => &mut out.out_bps,
            _ => continue,
        };
        *field = match <[u8; 8]>::try_from(v) {
            Ok(b) => u64::from_ne_bytes(b),
            Err(_) => u64::from(u32v("STATS value", v)?),
        };
    }
    Ok(out)
}

fn family_of(af: u16) -> Result<Family, DecodeError> {
    match af {
        wire::AF_INET => Ok(Family::Inet),
        wire::AF_INET6 => Ok(Family::Inet6),
        other => Err(DecodeError::AddressFamily(other)),
    }
}

/// `union nf_inet_addr`: 16 bytes (4 suffice for IPv4).
fn inet_addr(family: Family, v: &[u8]) -> Result<IpAddr, DecodeError> {
    let size = DecodeError::AttrSize { what: "ADDR", len: v.len() };
    Ok(match family {
        Family::Inet => {
            let b: [u8; 4] = v.get(..4).and_then(|b| b.try_into().ok()).ok_or(size)?;
            IpAddr::V4(Ipv4Addr::from(b))
        }
        Family::Inet6 => {
            let b: [u8; 16] = v.get(..16).and_then(|b| b.try_into().ok()).ok_or(size)?;
            IpAddr::V6(Ipv6Addr::from(b))
        }
    })
}

/// See `encode::netmask`: an IPv4 mask in network order, an
/// IPv6 prefix length in host order.
fn prefix(family: Family, raw: u32) -> Result<u8, DecodeError> {
    match family {
        Family::Inet => {
            let mask = u32::from_be_bytes(raw.to_ne_bytes());
            let ones = mask.leading_ones();
            if mask.checked_shl(ones).unwrap_or(0) != 0 {
                return Err(DecodeError::Netmask(Ipv4Addr::from(mask)));
            }
            Ok(u8::try_from(ones).expect("a u32 has at most 32 leading ones"))
        }
        Family::Inet6 => u8::try_from(raw).ok().filter(|p| *p <= 128).ok_or(DecodeError::Prefix(raw)),
    }
}

fn c_string(v: &[u8]) -> Result<String, DecodeError> {
    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
    std::str::from_utf8(&v[..end]).map(str::to_owned).map_err(|_| DecodeError::SchedulerName)
}

pub(super) fn u16v(what: &'static str, v: &[u8]) -> Result<u16, DecodeError> {
    v.try_into().map(u16::from_ne_bytes).map_err(|_| DecodeError::AttrSize { what, len: v.len() })
}

fn u16_be(what: &'static str, v: &[u8]) -> Result<u16, DecodeError> {
    v.try_into().map(u16::from_be_bytes).map_err(|_| DecodeError::AttrSize { what, len: v.len() })
}

pub(super) fn u32v(what: &'static str, v: &[u8]) -> Result<u32, DecodeError> {
    v.try_into().map(u32::from_ne_bytes).map_err(|_| DecodeError::AttrSize { what, len: v.len() })
}
