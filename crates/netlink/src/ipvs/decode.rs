//! The kernel's IPVS answers back into [`super::types`]: the family
//! lookup, service and destination dumps, config, info, ACKs and errors.
//!
//! Every length is checked: malformed input is a [`DecodeError`], never a
//! panic. Unknown attributes are skipped, and the nest flag is not
//! required (6.1 replies do not set it). In a dump one bad entry does not
//! fail the rest: it is returned in [`Dump::skipped`].

use std::net::Ipv4Addr;

use nix::errno::Errno;

use super::entry::{destination, service, u16v, u32v};
use super::types::{DestinationEntry, Family, GenlFamily, Info, ServiceEntry, Timeouts};
use super::wire::{self, RawMessage, attr, attrs, cmd, messages};

/// Why bytes are not the IPVS reply expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The buffer ends inside an `nlmsghdr`.
    #[error("message at byte {at}: {have} bytes left, a header needs 16")]
    ShortHeader { at: usize, have: usize },
    /// `nlmsg_len` is shorter than a header or runs past the buffer.
    #[error("message at byte {at}: length {len} is outside 16..={have}")]
    MessageLength { at: usize, len: usize, have: usize },
    /// No room for the `genlmsghdr` or the error code.
    #[error("message at byte {at}: its body needs {need} bytes, it has {have}")]
    ShortBody { at: usize, need: usize, have: usize },
    /// An attribute's length is shorter than its header or runs past its parent.
    #[error("attribute at byte {at} of its parent: length {len} is outside 4..={have}")]
    AttrLength { at: usize, len: usize, have: usize },
    /// Another family's message, or another command's reply.
    #[error("message at byte {at}: type {kind} command {command} is not the reply expected")]
    UnexpectedMessage { at: usize, kind: u16, command: u8 },
    /// A required attribute, or the reply message itself, is absent.
    #[error("the reply has no {what}")]
    Missing { what: &'static str },
    /// A scalar attribute has the wrong size.
    #[error("{what} has {len} bytes")]
    AttrSize { what: &'static str, len: usize },
    /// `AF` / `ADDR_FAMILY` is not one IPVS supports.
    #[error("address family {0} is neither AF_INET nor AF_INET6")]
    AddressFamily(u16),
    /// A persistence mask that is no prefix (ipvsadm allows them; kproxy never sets one).
    #[error("IPv4 netmask {0} is not contiguous")]
    Netmask(Ipv4Addr),
    /// An IPv6 persistence prefix past 128.
    #[error("IPv6 netmask prefix {0} is over 128")]
    Prefix(u32),
    /// `SCHED_NAME` is not UTF-8.
    #[error("scheduler name is not UTF-8")]
    SchedulerName,
}

/// Why a reply carries no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The bytes are not the reply expected.
    #[error("malformed IPVS reply")]
    Malformed(#[from] DecodeError),
    /// `NLMSG_ERROR` (or a failed dump's `NLMSG_DONE`) with a negative errno.
    #[error("the kernel refused request {seq}")]
    Refused {
        seq: u32,
        #[source]
        errno: Errno,
    },
}

impl ReplyError {
    /// The kernel's errno, if it refused.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Self::Refused { errno, .. } => Some(*errno),
            Self::Malformed(_) => None,
        }
    }

    /// The service (`ESRCH`) or destination (`ENOENT`) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self.errno(), Some(Errno::ESRCH | Errno::ENOENT))
    }

    /// The service or destination exists already (`EEXIST`).
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(Errno::EEXIST)
    }
}

/// The entries of one or more dump buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dump<T> {
    pub entries: Vec<T>,
    /// Entries that did not decode, in the order met.
    pub skipped: Vec<DecodeError>,
    /// `NLMSG_DONE` was seen: the dump is complete.
    pub done: bool,
}

impl<T> Default for Dump<T> {
    fn default() -> Self {
        Self { entries: Vec::new(), skipped: Vec::new(), done: false }
    }
}

impl<T> Dump<T> {
    /// Appends the next buffer's part.
    pub fn extend(&mut self, next: Dump<T>) {
        self.entries.extend(next.entries);
        self.skipped.extend(next.skipped);
        self.done |= next.done;
    }
}

/// The sequence number of the first ACK in `buf`.
pub fn ack(buf: &[u8]) -> Result<u32, ReplyError> {
    let mut found = None;
    walk(buf, None, |m| {
        if m.kind == wire::NLMSG_ERROR && found.is_none() {
            found = Some(m.seq);
        }
        Ok(())
    })?;
    found.ok_or(ReplyError::Malformed(DecodeError::Missing { what: "acknowledgement" }))
}

/// The family in a `CTRL_CMD_NEWFAMILY` reply.
pub fn family(buf: &[u8]) -> Result<GenlFamily, ReplyError> {
    let mut found = None;
    walk(buf, Some((wire::GENL_ID_CTRL, wire::CTRL_CMD_NEWFAMILY)), |m| {
        let (_, body) = m.genl()?;
        let (mut id, mut version, mut max_attr) = (None, 0, 0);
        for a in attrs(body) {
            let (kind, v) = a?;
            match kind {
                wire::CTRL_ATTR_FAMILY_ID => id = Some(u16v("CTRL_ATTR_FAMILY_ID", v)?),
                wire::CTRL_ATTR_VERSION => version = u32v("CTRL_ATTR_VERSION", v)?,
                wire::CTRL_ATTR_MAXATTR => max_attr = u32v("CTRL_ATTR_MAXATTR", v)?,
                _ => {}
            }
        }
        let id = id.ok_or(DecodeError::Missing { what: "CTRL_ATTR_FAMILY_ID" })?;
        found.get_or_insert(GenlFamily { id, version, max_attr });
        Ok(())
    })?;
    found.ok_or(ReplyError::Malformed(DecodeError::Missing { what: "family reply" }))
}

/// A service dump's part (the kernel answers `GET_SERVICE` with
/// `NEW_SERVICE` messages).
pub fn services(buf: &[u8], family_id: u16) -> Result<Dump<ServiceEntry>, ReplyError> {
    dump(buf, family_id, cmd::NEW_SERVICE, |body| nested(body, attr::SERVICE, "IPVS_CMD_ATTR_SERVICE", service))
}

/// The answer to a keyed `GET_SERVICE`.
pub fn service_reply(buf: &[u8], family_id: u16) -> Result<ServiceEntry, ReplyError> {
    let dump = services(buf, family_id)?;
    match (dump.entries.into_iter().next(), dump.skipped.into_iter().next()) {
        (Some(entry), _) => Ok(entry),
        (None, Some(e)) => Err(e.into()),
        (None, None) => Err(DecodeError::Missing { what: "service reply" }.into()),
    }
}

/// A destination dump's part. `service_family` stands in for a missing
/// `ADDR_FAMILY` (kernels before mixed-family support).
pub fn destinations(buf: &[u8], family_id: u16, service_family: Family) -> Result<Dump<DestinationEntry>, ReplyError> {
    dump(buf, family_id, cmd::NEW_DEST, |body| {
        nested(body, attr::DEST, "IPVS_CMD_ATTR_DEST", |n| destination(n, service_family))
    })
}

/// The answer to `GET_CONFIG` (a `SET_CONFIG` message).
pub fn config(buf: &[u8], family_id: u16) -> Result<Timeouts, ReplyError> {
    single(buf, family_id, cmd::SET_CONFIG, "config reply", |body| {
        let mut t = Timeouts::default();
        for a in attrs(body) {
            let (kind, v) = a?;
            match kind {
                attr::TIMEOUT_TCP => t.tcp = u32v("TIMEOUT_TCP", v)?,
                attr::TIMEOUT_TCP_FIN => t.tcp_fin = u32v("TIMEOUT_TCP_FIN", v)?,
                attr::TIMEOUT_UDP => t.udp = u32v("TIMEOUT_UDP", v)?,
                _ => {}
            }
        }
        Ok(t)
    })
}

/// The answer to `GET_INFO` (a `SET_INFO` message).
pub fn info(buf: &[u8], family_id: u16) -> Result<Info, ReplyError> {
    single(buf, family_id, cmd::SET_INFO, "info reply", |body| {
        let (mut version, mut size) = (None, None);
        for a in attrs(body) {
            let (kind, v) = a?;
            match kind {
                wire::info::VERSION => version = Some(u32v("INFO_ATTR_VERSION", v)?),
                wire::info::CONN_TAB_SIZE => size = Some(u32v("INFO_ATTR_CONN_TAB_SIZE", v)?),
                _ => {}
            }
        }
        Ok(Info {
            version: version.ok_or(DecodeError::Missing { what: "INFO_ATTR_VERSION" })?,
            conn_table_size: size.ok_or(DecodeError::Missing { what: "INFO_ATTR_CONN_TAB_SIZE" })?,
        })
    })
}

/// Walks the messages of `buf`: errors become [`ReplyError::Refused`],
/// ACKs and `NLMSG_NOOP` are passed over (ACKs to `f` when `expect` is
/// None), `NLMSG_DONE` ends the walk; other messages must be `expect`'s
/// (type, command) and go to `f`. Returns whether `NLMSG_DONE` was seen.
fn walk(
    buf: &[u8],
    expect: Option<(u16, u8)>,
    mut f: impl FnMut(&RawMessage<'_>) -> Result<(), DecodeError>,
) -> Result<bool, ReplyError> {
    for m in messages(buf) {
        let m = m?;
        match m.kind {
            wire::NLMSG_NOOP => {}
            wire::NLMSG_ERROR => {
                let error = i32v(&m)?;
                if error < 0 {
                    return Err(ReplyError::Refused { seq: m.seq, errno: Errno::from_raw(error.saturating_neg()) });
                }
                if expect.is_none() {
                    f(&m)?;
                }
            }
            wire::NLMSG_DONE => {
                // A dump that failed part-way reports its errno here.
                let error = i32v(&m).unwrap_or(0);
                if error < 0 {
                    return Err(ReplyError::Refused { seq: m.seq, errno: Errno::from_raw(error.saturating_neg()) });
                }
                return Ok(true);
            }
            kind => {
                let (command, _) = m.genl()?;
                if expect != Some((kind, command)) {
                    return Err(DecodeError::UnexpectedMessage { at: m.at, kind, command }.into());
                }
                f(&m)?;
            }
        }
    }
    Ok(false)
}

fn dump<T>(
    buf: &[u8],
    family_id: u16,
    command: u8,
    mut entry: impl FnMut(&[u8]) -> Result<T, DecodeError>,
) -> Result<Dump<T>, ReplyError> {
    let mut out = Dump::default();
    out.done = walk(buf, Some((family_id, command)), |m| {
        let (_, body) = m.genl()?;
        match entry(body) {
            Ok(e) => out.entries.push(e),
            Err(e) => out.skipped.push(e),
        }
        Ok(())
    })?;
    Ok(out)
}

fn single<T>(
    buf: &[u8],
    family_id: u16,
    command: u8,
    what: &'static str,
    mut decode: impl FnMut(&[u8]) -> Result<T, DecodeError>,
) -> Result<T, ReplyError> {
    let mut found = None;
    walk(buf, Some((family_id, command)), |m| {
        let (_, body) = m.genl()?;
        if found.is_none() {
            found = Some(decode(body)?);
        }
        Ok(())
    })?;
    found.ok_or(ReplyError::Malformed(DecodeError::Missing { what }))
}

/// Decodes the first top-level attribute `kind` of a message body.
fn nested<T>(
    body: &[u8],
    kind: u16,
    what: &'static str,
    decode: impl FnOnce(&[u8]) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    for a in attrs(body) {
        let (k, v) = a?;
        if k == kind {
            return decode(v);
        }
    }
    Err(DecodeError::Missing { what })
}

/// The `error` field of `NLMSG_ERROR`, or `NLMSG_DONE`'s payload.
fn i32v(m: &RawMessage<'_>) -> Result<i32, DecodeError> {
    let b = m.payload.get(..4).ok_or(DecodeError::ShortBody { at: m.at, need: 4, have: m.payload.len() })?;
    Ok(i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}
