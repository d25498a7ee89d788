//! Netlink messages back into a tree: the kernel's answers (errors and
//! acknowledgements), and batches themselves (for tests and debugging).
//!
//! Every length is checked against what is there: malformed input is a
//! [`DecodeError`], never a panic.

use std::borrow::Cow;
use std::fmt::Write;

use super::wire::{NLA_F_NESTED, NLA_TYPE_MASK, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, align};

/// Why bytes are not netlink messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("message at byte {at}: {have} bytes left, a header needs {NLMSG_HDRLEN}")]
    ShortHeader { at: usize, have: usize },
    #[error("message at byte {at}: length {len} is outside 16..={have}")]
    MessageLength { at: usize, len: usize, have: usize },
    #[error("message at byte {at}: a {kind} needs {need} bytes, the message has {have}")]
    ShortBody { at: usize, kind: &'static str, need: usize, have: usize },
    #[error("attribute at byte {at} of its parent: length {len} is outside 4..={have}")]
    AttrLength { at: usize, len: usize, have: usize },
    #[error("attributes nest deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// Nests deeper than this are refused (nf_tables uses about 6).
pub const MAX_DEPTH: usize = 16;

/// One netlink message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub pid: u32,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// An nfnetlink message: `nfgenmsg` and attributes.
    Netfilter {
        family: u8,
        version: u8,
        res_id: u16,
        attrs: Vec<Attr>,
    },
    /// `NLMSG_ERROR`: an error (negative errno), or an acknowledgement (0).
    Error(ErrorBody),
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorBody {
    /// 0 for an acknowledgement, else a negative errno.
    pub error: i32,
    /// The header of the message answered.
    pub request_kind: u16,
    pub request_seq: u32,
    /// The extended acknowledgement's message, if the kernel gave one.
    pub message: Option<String>,
    /// Byte offset of the offending attribute in the request.
    pub offset: Option<u32>,
}

/// One attribute; nested ones carry their children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// The type, without the nested and byte-order flags.
    pub kind: u16,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Bytes(Vec<u8>),
    Nested(Vec<Attr>),
}

impl Attr {
    pub fn bytes(&self) -> Option<&[u8]> {
        match &self.value {
            Value::Bytes(b) => Some(b),
            Value::Nested(_) => None,
        }
    }

    pub fn children(&self) -> &[Attr] {
        match &self.value {
            Value::Nested(c) => c,
            Value::Bytes(_) => &[],
        }
    }

    pub fn u32(&self) -> Option<u32> {
        self.bytes().and_then(|b| b.try_into().ok()).map(u32::from_be_bytes)
    }

    /// The attributes inside a nest. The kernel's nf_tables dumps leave
    /// `NLA_F_NESTED` off their nests (`nla_nest_start_noflag`), so a nest
    /// may have been read as bytes: those are parsed here. `None` if they
    /// are not attributes.
    pub fn nested(&self) -> Option<Cow<'_, [Attr]>> {
        match &self.value {
            Value::Nested(children) => Some(Cow::Borrowed(children)),
            Value::Bytes(bytes) => attrs(bytes, 1).ok().map(Cow::Owned),
        }
    }

    pub fn u64(&self) -> Option<u64> {
        self.bytes().and_then(|b| b.try_into().ok()).map(u64::from_be_bytes)
    }
}

/// `NLM_F_CAPPED`, `NLM_F_ACK_TLVS` on error messages.
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
/// `NLMSGERR_ATTR_MSG`, `NLMSGERR_ATTR_OFFS`.
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLMSGERR_ATTR_OFFS: u16 = 2;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses a buffer of netlink messages (one `recv`, or a whole batch).
pub fn parse(buf: &[u8]) -> Result<Vec<Message>, DecodeError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let rest = &buf[at..];
        if rest.len() < NLMSG_HDRLEN {
            return Err(DecodeError::ShortHeader { at, have: rest.len() });
        }
        let len = u32_at(rest, 0) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(DecodeError::MessageLength { at, len, have: rest.len() });
        }
        let kind = u16_at(rest, 4);
        let flags = u16_at(rest, 6);
        let seq = u32_at(rest, 8);
        let pid = u32_at(rest, 12);
        let payload = &rest[NLMSG_HDRLEN..len];
        let body = match kind {
            NLMSG_ERROR => Body::Error(error_body(payload, flags, at)?),
            NLMSG_DONE => Body::Done,
            _ => {
                if payload.len() < 4 {
                    return Err(DecodeError::ShortBody { at, kind: "nfgenmsg", need: 4, have: payload.len() });
                }
                let res_id = u16::from_be_bytes([payload[2], payload[3]]);
                Body::Netfilter { family: payload[0], version: payload[1], res_id, attrs: attrs(&payload[4..], 0)? }
            }
        };
        out.push(Message { kind, flags, seq, pid, body });
        at += align(len).min(rest.len());
    }
    Ok(out)
}

fn error_body(payload: &[u8], flags: u16, at: usize) -> Result<ErrorBody, DecodeError> {
    let need = 4 + NLMSG_HDRLEN;
    if payload.len() < need {
        return Err(DecodeError::ShortBody { at, kind: "error message", need, have: payload.len() });
    }
    let error = i32::from_ne_bytes([payload[0], payload[1], payload[2], payload[3]]);
    let request = &payload[4..];
    let request_len = u32_at(request, 0) as usize;
    let request_kind = u16_at(request, 4);
    let request_seq = u32_at(request, 8);
    let mut body = ErrorBody { error, request_kind, request_seq, message: None, offset: None };
    if flags & NLM_F_ACK_TLVS == 0 {
        return Ok(body);
    }
    // The request is echoed whole unless capped (and is never for acks).
    let echoed = if flags & NLM_F_CAPPED != 0 || error == 0 { NLMSG_HDRLEN } else { align(request_len) };
    let Some(tlvs) = request.get(echoed..) else {
        return Err(DecodeError::ShortBody { at, kind: "echoed request", need: echoed, have: request.len() });
    };
    for attr in attrs(tlvs, 0)? {
        match (attr.kind, attr.value) {
            (NLMSGERR_ATTR_MSG, Value::Bytes(b)) => {
                let text = b.split(|c| *c == 0).next().unwrap_or_default();
                body.message = Some(String::from_utf8_lossy(text).into_owned());
            }
            (NLMSGERR_ATTR_OFFS, Value::Bytes(b)) if b.len() == 4 => {
                body.offset = Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
            }
            _ => {}
        }
    }
    Ok(body)
}

/// Attributes of one level; nests below `MAX_DEPTH - depth` levels are
/// parsed as children (at `MAX_DEPTH` a nest is an error).
fn attrs(mut b: &[u8], depth: usize) -> Result<Vec<Attr>, DecodeError> {
    let mut out = Vec::new();
    let mut at = 0;
    while !b.is_empty() {
        if b.len() < 4 {
            return Err(DecodeError::AttrLength { at, len: b.len(), have: b.len() });
        }
        let len = usize::from(u16_at(b, 0));
        let raw = u16_at(b, 2);
        if len < 4 || len > b.len() {
            return Err(DecodeError::AttrLength { at, len, have: b.len() });
        }
        let payload = &b[4..len];
        let value = if raw & NLA_F_NESTED != 0 {
            if depth >= MAX_DEPTH {
                return Err(DecodeError::TooDeep);
            }
            Value::Nested(attrs(payload, depth + 1)?)
        } else {
            Value::Bytes(payload.to_vec())
        };
        out.push(Attr { kind: raw & NLA_TYPE_MASK, value });
        let step = align(len).min(b.len());
        b = &b[step..];
        at += step;
    }
    Ok(out)
}

/// nf_tables message names, for dumps.
fn kind_name(kind: u16) -> String {
    let names = [
        "NEWTABLE",
        "GETTABLE",
        "DELTABLE",
        "NEWCHAIN",
        "GETCHAIN",
        "DELCHAIN",
        "NEWRULE",
        "GETRULE",
        "DELRULE",
        "NEWSET",
        "GETSET",
        "DELSET",
        "NEWSETELEM",
        "GETSETELEM",
        "DELSETELEM",
        "NEWGEN",
        "GETGEN",
    ];
    match (kind >> 8, kind & 0xff) {
        (0, 0x10) => "BATCH_BEGIN".into(),
        (0, 0x11) => "BATCH_END".into(),
        (0, 2) => "ERROR".into(),
        (0, 3) => "DONE".into(),
        (10, t) => names.get(usize::from(t)).map_or_else(|| format!("nft:{t}"), |n| (*n).to_owned()),
        (s, t) => format!("{s}:{t}"),
    }
}

/// A readable dump, one line per message and attribute (strings shown
/// as text): what tests compare and print on mismatch.
pub fn dump(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let _ = write!(out, "{} flags={:#x}", kind_name(m.kind), m.flags);
        match &m.body {
            Body::Netfilter { family, version, res_id, attrs } => {
                let _ = writeln!(out, " family={family} version={version} res_id={res_id}");
                dump_attrs(&mut out, attrs, 1);
            }
            Body::Error(e) => {
                let _ = writeln!(out, " error={} request_seq={} message={:?}", e.error, e.request_seq, e.message);
            }
            Body::Done => out.push('\n'),
        }
    }
    out
}

fn dump_attrs(out: &mut String, attrs: &[Attr], depth: usize) {
    for a in attrs {
        let indent = "  ".repeat(depth);
        match &a.value {
            Value::Nested(children) => {
                let _ = writeln!(out, "{indent}[{}]", a.kind);
                dump_attrs(out, children, depth + 1);
            }
            Value::Bytes(b) => {
                let text = b
                    .strip_suffix(&[0])
                    .filter(|t| !t.is_empty() && t.iter().all(|c| c.is_ascii_graphic() || *c == b' '));
                match text {
                    Some(t) => {
                        let _ = writeln!(out, "{indent}{} {:?}", a.kind, String::from_utf8_lossy(t));
                    }
                    None => {
                        let hex: String = b.iter().map(|c| format!("{c:02x}")).collect();
                        let _ = writeln!(out, "{indent}{} {hex}", a.kind);
                    }
                }
            }
        }
    }
}
