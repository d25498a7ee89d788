//! The IPVS generic-netlink wire format: numbers, a message writer and
//! bounds-checked readers for messages and attributes.
//!
//! Numbers are from the uapi headers (`linux/netlink.h`,
//! `linux/genetlink.h`, `linux/ip_vs.h`). Unlike nf_tables, IPVS integers
//! are in host byte order; only ports are big-endian (see
//! `testdata/ipvs/README.md`). Nothing here allocates per attribute or
//! panics on malformed input.

use super::decode::DecodeError;

/// `GENL_ID_CTRL`: the generic-netlink controller's fixed family id.
pub const GENL_ID_CTRL: u16 = 0x10;
/// `CTRL_CMD_NEWFAMILY` (the reply) and `CTRL_CMD_GETFAMILY`.
pub const CTRL_CMD_NEWFAMILY: u8 = 1;
pub const CTRL_CMD_GETFAMILY: u8 = 3;
/// `CTRL_ATTR_*`.
pub const CTRL_ATTR_FAMILY_ID: u16 = 1;
pub const CTRL_ATTR_FAMILY_NAME: u16 = 2;
pub const CTRL_ATTR_VERSION: u16 = 3;
pub const CTRL_ATTR_MAXATTR: u16 = 5;
/// The version libnl puts in a GETFAMILY request (the controller answers
/// with its own, 2).
pub const CTRL_VERSION: u8 = 1;

/// `IPVS_GENL_NAME` and `IPVS_GENL_VERSION`.
pub const IPVS_GENL_NAME: &str = "IPVS";
pub const IPVS_GENL_VERSION: u8 = 1;

/// `IPVS_CMD_*`.
pub mod cmd {
    pub const NEW_SERVICE: u8 = 1;
    pub const SET_SERVICE: u8 = 2;
    pub const DEL_SERVICE: u8 = 3;
    pub const GET_SERVICE: u8 = 4;
    pub const NEW_DEST: u8 = 5;
    pub const SET_DEST: u8 = 6;
    pub const DEL_DEST: u8 = 7;
    pub const GET_DEST: u8 = 8;
    pub const SET_CONFIG: u8 = 12;
    pub const GET_CONFIG: u8 = 13;
    pub const SET_INFO: u8 = 14;
    pub const GET_INFO: u8 = 15;
    pub const FLUSH: u8 = 17;
}

/// `IPVS_CMD_ATTR_*` (top level).
pub mod attr {
    pub const SERVICE: u16 = 1;
    pub const DEST: u16 = 2;
    pub const TIMEOUT_TCP: u16 = 4;
    pub const TIMEOUT_TCP_FIN: u16 = 5;
    pub const TIMEOUT_UDP: u16 = 6;
}

/// `IPVS_SVC_ATTR_*`.
pub mod svc {
    pub const AF: u16 = 1;
    pub const PROTOCOL: u16 = 2;
    pub const ADDR: u16 = 3;
    pub const PORT: u16 = 4;
    pub const FWMARK: u16 = 5;
    pub const SCHED_NAME: u16 = 6;
    pub const FLAGS: u16 = 7;
    pub const TIMEOUT: u16 = 8;
    pub const NETMASK: u16 = 9;
    pub const STATS: u16 = 10;
    pub const STATS64: u16 = 12;
}

/// `IPVS_DEST_ATTR_*`.
pub mod dest {
    pub const ADDR: u16 = 1;
    pub const PORT: u16 = 2;
    pub const FWD_METHOD: u16 = 3;
    pub const WEIGHT: u16 = 4;
    pub const U_THRESH: u16 = 5;
    pub const L_THRESH: u16 = 6;
    pub const ACTIVE_CONNS: u16 = 7;
    pub const INACT_CONNS: u16 = 8;
    pub const PERSIST_CONNS: u16 = 9;
    pub const STATS: u16 = 10;
    pub const ADDR_FAMILY: u16 = 11;
    pub const STATS64: u16 = 12;
    pub const TUN_TYPE: u16 = 13;
    pub const TUN_PORT: u16 = 14;
    pub const TUN_FLAGS: u16 = 15;
}

/// `IPVS_STATS_ATTR_*` (both the legacy and the 64-bit nest).
pub mod stats {
    pub const CONNS: u16 = 1;
    pub const INPKTS: u16 = 2;
    pub const OUTPKTS: u16 = 3;
    pub const INBYTES: u16 = 4;
    pub const OUTBYTES: u16 = 5;
    pub const CPS: u16 = 6;
    pub const INPPS: u16 = 7;
    pub const OUTPPS: u16 = 8;
    pub const INBPS: u16 = 9;
    pub const OUTBPS: u16 = 10;
}

/// `IPVS_INFO_ATTR_*`.
pub mod info {
    pub const VERSION: u16 = 1;
    pub const CONN_TAB_SIZE: u16 = 2;
}

/// `AF_INET`, `AF_INET6`.
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;

/// `NLMSG_NOOP`, `NLMSG_ERROR`, `NLMSG_DONE`.
pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;

/// Netlink header flags.
pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_ROOT | NLM_F_MATCH`.
pub const NLM_F_DUMP: u16 = 0x300;

/// `NLA_F_NESTED`; `NLA_TYPE_MASK` strips it and `NLA_F_NET_BYTEORDER`.
pub const NLA_F_NESTED: u16 = 0x8000;
pub const NLA_TYPE_MASK: u16 = 0x3fff;

pub const NLMSG_HDRLEN: usize = 16;
/// `struct genlmsghdr`: cmd, version, 2 reserved bytes.
pub const GENL_HDRLEN: usize = 4;

/// Netlink's 4-byte alignment.
pub const fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// Builds one generic-netlink message. Attribute lengths are written as
/// each attribute ends, the message length by [`Writer::finish`].
#[derive(Debug)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Starts a message: `nlmsghdr` (length patched later) and `genlmsghdr`.
    pub fn new(kind: u16, flags: u16, seq: u32, port: u32, cmd: u8, version: u8) -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&port.to_ne_bytes());
        buf.extend_from_slice(&[cmd, version, 0, 0]);
        Self { buf }
    }

    pub fn bytes(&mut self, kind: u16, value: &[u8]) {
        let len = u16::try_from(4 + value.len()).expect("IPVS attributes are a few bytes");
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(align(self.buf.len()), 0);
    }

    pub fn u8(&mut self, kind: u16, value: u8) {
        self.bytes(kind, &[value]);
    }

    pub fn u16(&mut self, kind: u16, value: u16) {
        self.bytes(kind, &value.to_ne_bytes());
    }

    pub fn u16_be(&mut self, kind: u16, value: u16) {
        self.bytes(kind, &value.to_be_bytes());
    }

    pub fn u32(&mut self, kind: u16, value: u32) {
        self.bytes(kind, &value.to_ne_bytes());
    }

    /// A NUL-terminated string.
    pub fn str(&mut self, kind: u16, value: &str) {
        let mut v = Vec::with_capacity(value.len() + 1);
        v.extend_from_slice(value.as_bytes());
        v.push(0);
        self.bytes(kind, &v);
    }

    /// Opens a nest; `NLA_F_NESTED` is set as libnl does.
    pub fn nest(&mut self, kind: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        at
    }

    pub fn end_nest(&mut self, at: usize) {
        let len = u16::try_from(self.buf.len() - at).expect("IPVS nests are under 64 KiB");
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }

    pub fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.buf.len()).expect("IPVS messages are under 4 GiB");
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

/// One netlink message, borrowed from the receive buffer.
#[derive(Debug, Clone, Copy)]
pub struct RawMessage<'a> {
    /// Byte offset in the buffer (for error messages).
    pub at: usize,
    pub kind: u16,
    pub seq: u32,
    /// Everything after `nlmsghdr`.
    pub payload: &'a [u8],
}

impl<'a> RawMessage<'a> {
    /// Splits a generic-netlink payload into command and attributes.
    pub fn genl(&self) -> Result<(u8, &'a [u8]), DecodeError> {
        if self.payload.len() < GENL_HDRLEN {
            return Err(DecodeError::ShortBody { at: self.at, need: GENL_HDRLEN, have: self.payload.len() });
        }
        Ok((self.payload[0], &self.payload[GENL_HDRLEN..]))
    }
}

/// Splits a buffer (one or more `recv`s' worth) into messages, checking
/// every `nlmsg_len`.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = Result<RawMessage<'_>, DecodeError>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= buf.len() {
            return None;
        }
        let rest = &buf[at..];
        if rest.len() < NLMSG_HDRLEN {
            let err = DecodeError::ShortHeader { at, have: rest.len() };
            at = buf.len();
            return Some(Err(err));
        }
        let len = u32_at(rest, 0) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            let err = DecodeError::MessageLength { at, len, have: rest.len() };
            at = buf.len();
            return Some(Err(err));
        }
        let message = RawMessage { at, kind: u16_at(rest, 4), seq: u32_at(rest, 8), payload: &rest[NLMSG_HDRLEN..len] };
        // Messages in one buffer start 4-aligned; the last may be unpadded.
        at = at.saturating_add(align(len)).min(buf.len());
        Some(Ok(message))
    })
}

/// Iterates attributes as (type without flags, value). Stops after the
/// first malformed one.
pub fn attrs(buf: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), DecodeError>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= buf.len() {
            return None;
        }
        let rest = &buf[at..];
        let len = if rest.len() >= 4 { u16_at(rest, 0) as usize } else { 0 };
        if rest.len() < 4 || len < 4 || len > rest.len() {
            let err = DecodeError::AttrLength { at, len, have: rest.len() };
            at = buf.len();
            return Some(Err(err));
        }
        let kind = u16_at(rest, 2) & NLA_TYPE_MASK;
        let value = &rest[4..len];
        at = at.saturating_add(align(len)).min(buf.len());
        Some(Ok((kind, value)))
    })
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
