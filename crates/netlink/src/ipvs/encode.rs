//! IPVS requests as complete netlink messages (`nlmsghdr`, `genlmsghdr`,
//! attributes), byte for byte what `ipvsadm` 1.31 sends.
//!
//! Pure: sequence number, port id and the resolved family id come in as a
//! [`Header`]. Where ipvsadm sends more than the kernel reads (the service
//! fields after the key in delete and destination commands, `NLM_F_ACK`
//! on dumps), we send the same anyway: the captures then pin every byte,
//! and the kernel's own tool is the best evidence of what it accepts.

use std::net::IpAddr;

use super::types::{Destination, Family, Forward, Service, ServiceFlags, ServiceKey, Timeouts, Tunnel};
use super::wire::{self, Writer, attr, cmd, dest, svc};

/// The netlink header fields a caller owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The IPVS family id from [`super::decode::family`].
    pub family: u16,
    pub seq: u32,
    /// The socket's port id (0 lets the kernel fill it in).
    pub port: u32,
}

/// One IPVS command.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    NewService(&'a Service),
    /// A full replace of scheduler, flags, timeout and netmask.
    SetService(&'a Service),
    DelService(&'a ServiceKey),
    /// Dump every service.
    GetServices,
    /// One service by key (answered by one message, then an ACK).
    GetService(&'a ServiceKey),
    NewDest(&'a ServiceKey, &'a Destination),
    /// A full replace: thresholds not given go back to 0.
    SetDest(&'a ServiceKey, &'a Destination),
    /// The kernel reads only the address and port of the destination.
    DelDest(&'a ServiceKey, &'a Destination),
    /// Dump a service's destinations (the kernel has no keyed form).
    GetDests(&'a ServiceKey),
    SetConfig(&'a Timeouts),
    GetConfig,
    GetInfo,
    /// Delete every service and destination.
    Flush,
}

/// `CTRL_CMD_GETFAMILY "IPVS"`, the first message on any socket.
pub fn get_family(seq: u32, port: u32) -> Vec<u8> {
    let mut w = Writer::new(
        wire::GENL_ID_CTRL,
        wire::NLM_F_REQUEST | wire::NLM_F_ACK,
        seq,
        port,
        wire::CTRL_CMD_GETFAMILY,
        wire::CTRL_VERSION,
    );
    w.str(wire::CTRL_ATTR_FAMILY_NAME, wire::IPVS_GENL_NAME);
    w.finish()
}

/// Encodes `request` as one message.
pub fn encode(request: &Request<'_>, header: Header) -> Vec<u8> {
    let (command, dump) = match request {
        Request::NewService(_) => (cmd::NEW_SERVICE, false),
        Request::SetService(_) => (cmd::SET_SERVICE, false),
        Request::DelService(_) => (cmd::DEL_SERVICE, false),
        Request::GetServices => (cmd::GET_SERVICE, true),
        Request::GetService(_) => (cmd::GET_SERVICE, false),
        Request::NewDest(..) => (cmd::NEW_DEST, false),
        Request::SetDest(..) => (cmd::SET_DEST, false),
        Request::DelDest(..) => (cmd::DEL_DEST, false),
        // The kernel registers GET_DEST as dump-only.
        Request::GetDests(_) => (cmd::GET_DEST, true),
        Request::SetConfig(_) => (cmd::SET_CONFIG, false),
        Request::GetConfig => (cmd::GET_CONFIG, false),
        Request::GetInfo => (cmd::GET_INFO, false),
        Request::Flush => (cmd::FLUSH, false),
    };
    // ipvsadm asks for an ACK on dumps too; the kernel sends none after
    // NLMSG_DONE, so it costs nothing.
    let mut flags = wire::NLM_F_REQUEST | wire::NLM_F_ACK;
    if dump {
        flags |= wire::NLM_F_DUMP;
    }
    let mut w = Writer::new(header.family, flags, header.seq, header.port, command, wire::IPVS_GENL_VERSION);
    match request {
        Request::NewService(s) | Request::SetService(s) => service_full(&mut w, s),
        Request::DelService(key) => service_ref(&mut w, key, key.family().max_prefix()),
        // ipvsadm sends netmask 0 in a keyed GET; the kernel ignores it.
        Request::GetService(key) => service_ref(&mut w, key, 0),
        Request::NewDest(key, d) | Request::SetDest(key, d) | Request::DelDest(key, d) => {
            service_ref(&mut w, key, key.family().max_prefix());
            destination(&mut w, d);
        }
        Request::GetDests(key) => {
            let at = w.nest(attr::SERVICE);
            service_key(&mut w, key);
            w.end_nest(at);
        }
        Request::SetConfig(t) => {
            w.u32(attr::TIMEOUT_TCP, t.tcp);
            w.u32(attr::TIMEOUT_TCP_FIN, t.tcp_fin);
            w.u32(attr::TIMEOUT_UDP, t.udp);
        }
        Request::GetServices | Request::GetConfig | Request::GetInfo | Request::Flush => {}
    }
    w.finish()
}

/// `AF`, then `PROTOCOL`+`ADDR`+`PORT` or `FWMARK`.
fn service_key(w: &mut Writer, key: &ServiceKey) {
    w.u16(svc::AF, af(key.family()));
    match key {
        ServiceKey::Addr { protocol, addr, port } => {
            w.u16(svc::PROTOCOL, protocol.number());
            w.bytes(svc::ADDR, &inet_addr(addr));
            w.u16_be(svc::PORT, *port);
        }
        ServiceKey::Fwmark { mark, .. } => w.u32(svc::FWMARK, *mark),
    }
}

fn service_full(w: &mut Writer, s: &Service) {
    let at = w.nest(attr::SERVICE);
    service_key(w, &s.key);
    w.str(svc::SCHED_NAME, &s.scheduler);
    // The kernel never takes HASHED from userspace; mask all ones makes the
    // flags a full replace, as ipvsadm does.
    flags(w, ServiceFlags(s.flags.0 & !ServiceFlags::HASHED.0));
    w.u32(svc::TIMEOUT, s.timeout);
    w.bytes(svc::NETMASK, &netmask(s.key.family(), s.netmask));
    w.end_nest(at);
}

/// A service named by key, with ipvsadm's fillers for the fields the
/// kernel does not read in this command (empty scheduler, no flags).
fn service_ref(w: &mut Writer, key: &ServiceKey, prefix: u8) {
    let at = w.nest(attr::SERVICE);
    service_key(w, key);
    w.str(svc::SCHED_NAME, "");
    flags(w, ServiceFlags::default());
    w.u32(svc::TIMEOUT, 0);
    w.bytes(svc::NETMASK, &netmask(key.family(), prefix));
    w.end_nest(at);
}

/// `struct ip_vs_flags { flags, mask }`.
fn flags(w: &mut Writer, flags: ServiceFlags) {
    let mut v = [0u8; 8];
    v[..4].copy_from_slice(&flags.0.to_ne_bytes());
    v[4..].copy_from_slice(&u32::MAX.to_ne_bytes());
    w.bytes(svc::FLAGS, &v);
}

fn destination(w: &mut Writer, d: &Destination) {
    let tunnel = match d.forward {
        Forward::Tunnel(t) => t,
        _ => Tunnel::default(),
    };
    let at = w.nest(attr::DEST);
    w.u16(dest::ADDR_FAMILY, af(Family::of(&d.addr)));
    w.bytes(dest::ADDR, &inet_addr(&d.addr));
    w.u16_be(dest::PORT, d.port);
    w.u32(dest::FWD_METHOD, d.forward.number());
    w.u32(dest::WEIGHT, d.weight);
    // Sent for every method, zero unless tunnelling, as ipvsadm does;
    // kernels before 5.2 ignore attributes past their maximum.
    w.u8(dest::TUN_TYPE, tunnel.encap.number());
    w.u16_be(dest::TUN_PORT, tunnel.port);
    w.u16(dest::TUN_FLAGS, tunnel.flags);
    w.u32(dest::U_THRESH, d.upper_threshold);
    w.u32(dest::L_THRESH, d.lower_threshold);
    w.end_nest(at);
}

fn af(family: Family) -> u16 {
    match family {
        Family::Inet => wire::AF_INET,
        Family::Inet6 => wire::AF_INET6,
    }
}

/// `union nf_inet_addr`: 16 bytes, an IPv4 address first, then zeros.
pub(super) fn inet_addr(addr: &IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match addr {
        IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => out = a.octets(),
    }
    out
}

/// IPv4: the mask itself in network byte order; IPv6: the prefix length
/// as a host-order u32. Prefixes past the family's width are clamped.
fn netmask(family: Family, prefix: u8) -> [u8; 4] {
    let prefix = prefix.min(family.max_prefix());
    match family {
        Family::Inet => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            mask.to_be_bytes()
        }
        Family::Inet6 => u32::from(prefix).to_ne_bytes(),
    }
}
