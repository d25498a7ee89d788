//! Deleting conntrack entries over ctnetlink: one dump of the family's UDP
//! flows (filtered in the kernel where it can), the matching ones picked
//! here, then one delete per flow, batched.
//!
//! Numbers are from `linux/netfilter/nfnetlink_conntrack.h`.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use kproxy_model::IpFamily;
use netlink_sys::{Socket, SocketAddr as NlAddr, protocols::NETLINK_NETFILTER};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use crate::io::{recv, send};
use crate::nft::decode::{Attr, Body, DecodeError, parse};
use crate::nft::types::nfproto;
use crate::nft::wire::{NLM_F_ACK, NLM_F_REQUEST, Writer};

/// One conntrack entry, as far as kproxy cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// The original direction: client to the address it asked for.
    pub orig_src: SocketAddr,
    pub orig_dst: SocketAddr,
    /// The reply direction's source: the endpoint that answers.
    pub reply_src: SocketAddr,
    pub zone: u16,
}

/// What went wrong cleaning conntrack.
#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    #[error("cannot open a netfilter netlink socket")]
    Socket(#[source] io::Error),
    #[error("listing the UDP conntrack entries failed")]
    Dump(#[source] io::Error),
    #[error("the kernel's conntrack answer is malformed")]
    Decode(#[from] DecodeError),
    #[error("deleting conntrack entries failed")]
    Delete(#[source] io::Error),
}

/// How long the kernel may take to answer before it is considered stuck.
const DUMP_TIMEOUT: Duration = Duration::from_secs(10);

const SUBSYS_CTNETLINK: u16 = 1;
const MSG_CT_NEW: u16 = 0;
const MSG_CT_GET: u16 = 1;
const MSG_CT_DELETE: u16 = 2;
const NLM_F_DUMP: u16 = 0x300;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_ZONE: u16 = 18;
const CTA_FILTER: u16 = 25;
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_FILTER_REPLY_FLAGS: u16 = 2;
/// `CTA_FILTER_FLAG(CTA_PROTO_NUM)`.
const FILTER_PROTO_NUM: u32 = 1 << 3;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const IPPROTO_UDP: u8 = 17;

/// Deletes every UDP flow of `family` that `stale` picks; returns how many
/// were deleted (flows that vanished meanwhile are not counted). Blocks:
/// run it off the async runtime.
pub fn delete_udp(family: IpFamily, stale: impl Fn(&Flow) -> bool) -> Result<usize, ConntrackError> {
    let socket = open()?;
    let flows = dump_udp(&socket, family)?;
    let doomed: Vec<Flow> = flows.into_iter().filter(|f| stale(f)).collect();
    delete(&socket, family, &doomed)
}

/// Every UDP flow of `family` (for tests and debugging).
pub fn list_udp(family: IpFamily) -> Result<Vec<Flow>, ConntrackError> {
    dump_udp(&open()?, family)
}

fn open() -> Result<Socket, ConntrackError> {
    let mut socket = Socket::new(NETLINK_NETFILTER).map_err(ConntrackError::Socket)?;
    socket.bind_auto().map_err(ConntrackError::Socket)?;
    socket.set_cap_ack(true).map_err(ConntrackError::Socket)?;
    socket.set_ext_ack(true).map_err(ConntrackError::Socket)?;
    let fd = socket.as_fd();
    setsockopt(&fd, sockopt::RcvBufForce, &(4usize << 20)).map_err(|e| ConntrackError::Socket(e.into()))?;
    let timeout = TimeVal::new(DUMP_TIMEOUT.as_secs() as _, 0);
    setsockopt(&fd, sockopt::ReceiveTimeout, &timeout).map_err(|e| ConntrackError::Socket(e.into()))?;
    socket.connect(&NlAddr::new(0, 0)).map_err(ConntrackError::Socket)?;
    Ok(socket)
}

/// Every UDP flow of `family`. Kernels with dump filters (5.10 and later)
/// send only UDP; older ones send everything, and the rest is dropped
/// here.
fn dump_udp(socket: &Socket, family: IpFamily) -> Result<Vec<Flow>, ConntrackError> {
    match dump(socket, family, true) {
        Err(ConntrackError::Dump(e))
            if e.raw_os_error().is_some_and(|c| c == nix::libc::EOPNOTSUPP || c == nix::libc::EINVAL) =>
        {
            dump(socket, family, false)
        }
        other => other,
    }
}

fn dump(socket: &Socket, family: IpFamily, filtered: bool) -> Result<Vec<Flow>, ConntrackError> {
    let mut w = Writer::with_seq(1);
    w.begin((SUBSYS_CTNETLINK << 8) | MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, nfproto(family), 0);
    if filtered {
        let orig = w.nest(CTA_TUPLE_ORIG);
        let proto = w.nest(CTA_TUPLE_PROTO);
        w.u8(CTA_PROTO_NUM, IPPROTO_UDP);
        w.end_nest(proto);
        w.end_nest(orig);
        let filter = w.nest(CTA_FILTER);
        // Flags are host-order u32s.
        w.bytes(CTA_FILTER_ORIG_FLAGS, &FILTER_PROTO_NUM.to_ne_bytes());
        w.bytes(CTA_FILTER_REPLY_FLAGS, &0u32.to_ne_bytes());
        w.end_nest(filter);
    }
    w.end();
    send(socket, w.as_bytes()).map_err(ConntrackError::Dump)?;

    let mut flows = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = recv(socket, &mut buf).map_err(ConntrackError::Dump)?;
        for m in parse(&buf[..n])? {
            match m.body {
                Body::Done => return Ok(flows),
                Body::Error(e) if e.error != 0 => {
                    return Err(ConntrackError::Dump(io::Error::from_raw_os_error(-e.error)));
                }
                Body::Error(_) => return Ok(flows),
                Body::Netfilter { attrs, .. } if m.kind == ((SUBSYS_CTNETLINK << 8) | MSG_CT_NEW) => {
                    if let Some(flow) = flow(&attrs) {
                        flows.push(flow);
                    }
                }
                Body::Netfilter { .. } => {}
            }
        }
    }
}

/// A UDP flow from a dump entry; `None` for other protocols or entries
/// missing a part.
fn flow(attrs: &[Attr]) -> Option<Flow> {
    let find = |attrs: &'_ [Attr], kind: u16| attrs.iter().find(|a| a.kind == kind).cloned();
    let orig = find(attrs, CTA_TUPLE_ORIG)?;
    let reply = find(attrs, CTA_TUPLE_REPLY)?;
    let zone = find(attrs, CTA_ZONE).and_then(|a| a.bytes().and_then(|b| b.try_into().ok()).map(u16::from_be_bytes));
    let (proto, orig_src, orig_dst) = tuple(orig.children())?;
    let (_, reply_src, _) = tuple(reply.children())?;
    (proto == IPPROTO_UDP).then_some(Flow { orig_src, orig_dst, reply_src, zone: zone.unwrap_or(0) })
}

/// (protocol, source, destination) of a tuple.
fn tuple(attrs: &[Attr]) -> Option<(u8, SocketAddr, SocketAddr)> {
    let ip = attrs.iter().find(|a| a.kind == CTA_TUPLE_IP)?;
    let proto = attrs.iter().find(|a| a.kind == CTA_TUPLE_PROTO)?;
    let addr = |kind: u16| -> Option<IpAddr> {
        let b = ip.children().iter().find(|a| a.kind == kind)?.bytes()?;
        match b.len() {
            4 => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(b).ok()?))),
            16 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?))),
            _ => None,
        }
    };
    let src = addr(CTA_IP_V4_SRC).or_else(|| addr(CTA_IP_V6_SRC))?;
    let dst = addr(CTA_IP_V4_DST).or_else(|| addr(CTA_IP_V6_DST))?;
    let port = |kind: u16| -> Option<u16> {
        let b = proto.children().iter().find(|a| a.kind == kind)?.bytes()?;
        Some(u16::from_be_bytes(b.try_into().ok()?))
    };
    let number = proto.children().iter().find(|a| a.kind == CTA_PROTO_NUM)?.bytes()?.first().copied()?;
    Some((number, SocketAddr::new(src, port(CTA_PROTO_SRC_PORT)?), SocketAddr::new(dst, port(CTA_PROTO_DST_PORT)?)))
}

/// Deletes flows by their original tuple, many messages per send, each
/// acknowledged.
fn delete(socket: &Socket, family: IpFamily, flows: &[Flow]) -> Result<usize, ConntrackError> {
    const PER_SEND: usize = 256;
    let mut deleted = 0;
    let mut seq = 1000u32;
    for chunk in flows.chunks(PER_SEND) {
        let mut w = Writer::with_seq(seq);
        for flow in chunk {
            w.begin((SUBSYS_CTNETLINK << 8) | MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, nfproto(family), 0);
            let orig = w.nest(CTA_TUPLE_ORIG);
            let ip = w.nest(CTA_TUPLE_IP);
            let (src, dst) = match family {
                IpFamily::V4 => (CTA_IP_V4_SRC, CTA_IP_V4_DST),
                IpFamily::V6 => (CTA_IP_V6_SRC, CTA_IP_V6_DST),
            };
            let mut bytes = Vec::with_capacity(16);
            crate::nft::types::ip_bytes(&mut bytes, &flow.orig_src.ip());
            w.bytes(src, &bytes);
            bytes.clear();
            crate::nft::types::ip_bytes(&mut bytes, &flow.orig_dst.ip());
            w.bytes(dst, &bytes);
            w.end_nest(ip);
            let proto = w.nest(CTA_TUPLE_PROTO);
            w.u8(CTA_PROTO_NUM, IPPROTO_UDP);
            w.bytes(CTA_PROTO_SRC_PORT, &flow.orig_src.port().to_be_bytes());
            w.bytes(CTA_PROTO_DST_PORT, &flow.orig_dst.port().to_be_bytes());
            w.end_nest(proto);
            w.end_nest(orig);
            if flow.zone != 0 {
                w.bytes(CTA_ZONE, &flow.zone.to_be_bytes());
            }
            w.end();
        }
        send(socket, w.as_bytes()).map_err(ConntrackError::Delete)?;
        let mut acked = 0;
        let mut buf = vec![0u8; 1 << 16];
        while acked < chunk.len() {
            let n = recv(socket, &mut buf).map_err(ConntrackError::Delete)?;
            for m in parse(&buf[..n])? {
                if let Body::Error(e) = m.body
                    && e.request_seq.wrapping_sub(seq) < chunk.len() as u32
                {
                    acked += 1;
                    match -e.error {
                        0 => deleted += 1,
                        // Gone meanwhile (expired, or deleted by someone else).
                        nix::libc::ENOENT => {}
                        errno => return Err(ConntrackError::Delete(io::Error::from_raw_os_error(errno))),
                    }
                }
            }
        }
        seq = seq.wrapping_add(chunk.len() as u32);
    }
    Ok(deleted)
}
