//! UDP sockets over `NETLINK_SOCK_DIAG` (inet_diag): listing the calling
//! thread's network namespace's UDP sockets of one family, and destroying
//! one (`SOCK_DESTROY`, which needs `CONFIG_INET_DIAG_DESTROY`).
//!
//! The messages are hand-encoded: a request is one `inet_diag_req_v2`
//! and an answer one `inet_diag_msg` (both fixed-size structs of
//! `linux/inet_diag.h`, numbers from there and `linux/sock_diag.h`), too
//! small to be worth a codec crate. This module decides nothing: which
//! sockets to destroy is the caller's choice.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use kproxy_model::IpFamily;
use netlink_sys::{Socket, SocketAddr as NlAddr, protocols::NETLINK_SOCK_DIAG};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use crate::io::{recv, send};

/// One socket as `struct inet_diag_sockid` names it. An unconnected
/// socket's destination is the unspecified address, port 0. Sockets of
/// an IPv6 dump have IPv6 addresses (v4-mapped for IPv4 peers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SockId {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The interface the socket is bound to; 0: none.
    pub interface: u32,
    /// The socket's cookie (what `bpf_get_socket_cookie` returns).
    pub cookie: u64,
}

/// What went wrong talking sock_diag.
#[derive(Debug, thiserror::Error)]
pub enum SockDiagError {
    #[error("cannot open a sock_diag netlink socket")]
    Socket(#[source] io::Error),
    #[error("listing the UDP sockets failed")]
    Dump(#[source] io::Error),
    #[error("the kernel's sock_diag answer is malformed at byte {at}")]
    Decode { at: usize },
    #[error("destroying the UDP socket {src} -> {dst} failed")]
    Destroy {
        src: SocketAddr,
        dst: SocketAddr,
        #[source]
        source: io::Error,
    },
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const SOCK_DESTROY: u16 = 21;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HDRLEN: usize = 16;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_UDP: u8 = 17;
/// `sizeof(struct inet_diag_req_v2)`.
const REQ_LEN: usize = 56;
/// `sizeof(struct inet_diag_sockid)`.
const SOCKID_LEN: usize = 48;
/// `sizeof(struct inet_diag_msg)`.
const MSG_LEN: usize = 72;
/// Every socket state (`idiag_states` is a bit mask of `1 << TCP_*`).
const ALL_STATES: u32 = !0;
/// How long the kernel may take to answer before it is considered stuck.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A sock_diag netlink socket of the network namespace of the thread that
/// opened it (the kernel answers for the socket's namespace, wherever it
/// is used from later).
pub struct SockDiag {
    socket: Socket,
    seq: u32,
}

impl SockDiag {
    /// Opens the socket in the calling thread's network namespace.
    pub fn open() -> Result<SockDiag, SockDiagError> {
        let mut socket = Socket::new(NETLINK_SOCK_DIAG).map_err(SockDiagError::Socket)?;
        socket.bind_auto().map_err(SockDiagError::Socket)?;
        let timeout = TimeVal::new(TIMEOUT.as_secs() as _, 0);
        setsockopt(&socket.as_fd(), sockopt::ReceiveTimeout, &timeout).map_err(|e| SockDiagError::Socket(e.into()))?;
        socket.connect(&NlAddr::new(0, 0)).map_err(SockDiagError::Socket)?;
        Ok(SockDiag { socket, seq: 1 })
    }

    /// Every UDP socket of `family` in the namespace, in any state.
    pub fn udp_sockets(&mut self, family: IpFamily) -> Result<Vec<SockId>, SockDiagError> {
        let empty = SockId { src: unspecified(family), dst: unspecified(family), interface: 0, cookie: 0 };
        let request = encode(SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, self.next_seq(), &empty);
        send(&self.socket, &request).map_err(SockDiagError::Dump)?;
        let mut sockets = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = recv(&self.socket, &mut buf).map_err(SockDiagError::Dump)?;
            for answer in decode(&buf[..n])? {
                match answer {
                    Answer::Socket(id) => sockets.push(id),
                    Answer::Done => return Ok(sockets),
                    Answer::Error(0) => {}
                    Answer::Error(errno) => return Err(SockDiagError::Dump(io::Error::from_raw_os_error(errno))),
                }
            }
        }
    }

    /// Destroys the UDP socket `id` names (its cookie included): the
    /// kernel disconnects it and its owner's next `recv` fails with
    /// `ECONNABORTED`. Returns false when no socket has these addresses
    /// and cookie (gone already, or disconnected).
    pub fn destroy_udp(&mut self, id: &SockId) -> Result<bool, SockDiagError> {
        let err = |source| SockDiagError::Destroy { src: id.src, dst: id.dst, source };
        let seq = self.next_seq();
        send(&self.socket, &encode(SOCK_DESTROY, NLM_F_REQUEST | NLM_F_ACK, seq, id)).map_err(err)?;
        let mut buf = vec![0u8; 4096];
        loop {
            let n = recv(&self.socket, &mut buf).map_err(err)?;
            for answer in decode(&buf[..n])? {
                match answer {
                    Answer::Error(0) => return Ok(true),
                    Answer::Error(nix::libc::ENOENT) => return Ok(false),
                    Answer::Error(errno) => return Err(err(io::Error::from_raw_os_error(errno))),
                    Answer::Socket(_) | Answer::Done => {}
                }
            }
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }
}

fn unspecified(family: IpFamily) -> SocketAddr {
    match family {
        IpFamily::V4 => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpFamily::V6 => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
}

/// One `nlmsghdr` + `inet_diag_req_v2` for UDP, of the family of `id`'s
/// source address.
fn encode(kind: u16, flags: u16, seq: u32, id: &SockId) -> Vec<u8> {
    let mut out = Vec::with_capacity(NLMSG_HDRLEN + REQ_LEN);
    out.extend_from_slice(&((NLMSG_HDRLEN + REQ_LEN) as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    let family = if id.src.is_ipv4() { AF_INET } else { AF_INET6 };
    out.extend_from_slice(&[family, IPPROTO_UDP, 0, 0]);
    out.extend_from_slice(&ALL_STATES.to_ne_bytes());
    encode_sockid(&mut out, id);
    out
}

/// `struct inet_diag_sockid`: ports big-endian, addresses in 16 bytes
/// (IPv4 in the first 4), interface and cookie halves host-order.
fn encode_sockid(out: &mut Vec<u8>, id: &SockId) {
    out.extend_from_slice(&id.src.port().to_be_bytes());
    out.extend_from_slice(&id.dst.port().to_be_bytes());
    for ip in [id.src.ip(), id.dst.ip()] {
        let mut bytes = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => bytes[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => bytes.copy_from_slice(&v6.octets()),
        }
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(&id.interface.to_ne_bytes());
    // The kernel stores the 64-bit cookie as two u32s, low half first.
    out.extend_from_slice(&(id.cookie as u32).to_ne_bytes());
    out.extend_from_slice(&((id.cookie >> 32) as u32).to_ne_bytes());
}

/// What one netlink message of an answer says.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Socket(SockId),
    Done,
    /// `NLMSG_ERROR`: 0 an acknowledgement, else an errno (positive).
    Error(i32),
}

/// The messages of one `recv`; other message types are skipped.
fn decode(buf: &[u8]) -> Result<Vec<Answer>, SockDiagError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let len = u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(buf[at + 4..at + 6].try_into().expect("2 bytes"));
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            return Err(SockDiagError::Decode { at });
        }
        let body = &buf[at + NLMSG_HDRLEN..at + len];
        let errno = || -> Result<i32, SockDiagError> {
            let code = body.get(..4).ok_or(SockDiagError::Decode { at })?;
            Ok(-i32::from_ne_bytes(code.try_into().expect("4 bytes")))
        };
        match kind {
            NLMSG_DONE => match errno() {
                Ok(0) | Err(_) => out.push(Answer::Done),
                Ok(e) => out.push(Answer::Error(e)),
            },
            NLMSG_ERROR => out.push(Answer::Error(errno()?)),
            SOCK_DIAG_BY_FAMILY => out.push(Answer::Socket(decode_msg(body).ok_or(SockDiagError::Decode { at })?)),
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Ok(out)
}

/// The socket of one `struct inet_diag_msg` (its attributes ignored).
fn decode_msg(body: &[u8]) -> Option<SockId> {
    if body.len() < MSG_LEN {
        return None;
    }
    let family = body[0];
    let id = &body[4..4 + SOCKID_LEN];
    let u32_at = |i: usize| u32::from_ne_bytes(id[i..i + 4].try_into().expect("4 bytes"));
    let ip = |from: usize| -> Option<IpAddr> {
        match family {
            AF_INET => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&id[from..from + 4]).ok()?))),
            AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&id[from..from + 16]).ok()?))),
            _ => None,
        }
    };
    let sport = u16::from_be_bytes([id[0], id[1]]);
    let dport = u16::from_be_bytes([id[2], id[3]]);
    Some(SockId {
        src: SocketAddr::new(ip(4)?, sport),
        dst: SocketAddr::new(ip(20)?, dport),
        interface: u32_at(36),
        cookie: u64::from(u32_at(40)) | (u64::from(u32_at(44)) << 32),
    })
}

#[cfg(test)]
mod tests;
