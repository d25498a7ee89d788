//! The nf_tables wire format: netlink headers, `nfgenmsg`, attributes.
//!
//! Numbers are from the kernel's uapi headers (`linux/netlink.h`,
//! `linux/netfilter/nfnetlink.h`, `linux/netfilter/nf_tables.h`). Integer
//! attributes are big-endian; register contents are in the byte order of
//! the value they hold.

/// `NFNL_SUBSYS_NFTABLES`.
pub const SUBSYS_NFTABLES: u16 = 10;
/// `NFNL_MSG_BATCH_BEGIN` and `_END` (subsystem 0).
pub const MSG_BATCH_BEGIN: u16 = 0x10;
pub const MSG_BATCH_END: u16 = 0x11;

/// `NFT_MSG_*`.
pub mod msg {
    pub const NEWTABLE: u8 = 0;
    pub const DELTABLE: u8 = 2;
    pub const NEWCHAIN: u8 = 3;
    pub const GETCHAIN: u8 = 4;
    pub const DELCHAIN: u8 = 5;
    pub const NEWRULE: u8 = 6;
    pub const GETRULE: u8 = 7;
    pub const DELRULE: u8 = 8;
    pub const NEWSET: u8 = 9;
    pub const DELSET: u8 = 11;
    pub const NEWSETELEM: u8 = 12;
    pub const DELSETELEM: u8 = 14;
    pub const NEWGEN: u8 = 15;
    pub const GETGEN: u8 = 16;
}

/// `NLMSG_ERROR`, `NLMSG_DONE`.
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;

/// Netlink header flags.
pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
/// Set on a dump's messages when the objects changed while it ran.
pub const NLM_F_DUMP_INTR: u16 = 0x10;
/// `NLM_F_ROOT | NLM_F_MATCH`.
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;

/// `NLA_F_NESTED`; `NLA_TYPE_MASK` strips it and `NLA_F_NET_BYTEORDER`.
pub const NLA_F_NESTED: u16 = 0x8000;
pub const NLA_TYPE_MASK: u16 = 0x3fff;

pub const NLMSG_HDRLEN: usize = 16;
/// `struct nfgenmsg`: family, version, resource id.
pub const NFGENMSG_LEN: usize = 4;

/// Netlink's 4-byte alignment.
pub const fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// Builds netlink messages into one buffer: a batch, sent with one
/// `sendmsg`. Attribute nests are closed in order; lengths are patched
/// when a nest or message ends.
///
/// A [`Writer::chunked`] writer keeps its messages in chunks of about
/// [`CHUNK`] bytes instead (a new chunk starts with the first message past
/// it; a message never spans two): a large batch then never reallocates
/// and copies a growing buffer, and goes to the kernel as the chunks
/// themselves, gathered by one `sendmsg`.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
    /// Full chunks, in order, before `buf` (chunked writers only).
    done: Vec<Vec<u8>>,
    done_len: usize,
    chunked: bool,
    message: usize,
    seq: u32,
}

/// Bytes of messages per chunk of a [`Writer::chunked`] writer.
pub const CHUNK: usize = 1 << 20;
/// Room past [`CHUNK`] a chunk is allocated with: the largest message
/// (element lists stop at 48 KiB; attribute lengths are 16-bit).
const CHUNK_SLACK: usize = 128 << 10;

/// An open attribute nest: where its header is.
#[derive(Debug)]
#[must_use = "a nest must be closed with Writer::end_nest"]
pub struct Nest(usize);

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Numbers messages from `seq`.
    pub fn with_seq(seq: u32) -> Self {
        Self { seq, ..Self::default() }
    }

    /// Numbers messages from `seq`, in chunks of about [`CHUNK`] bytes.
    pub fn chunked(seq: u32) -> Self {
        Self { seq, chunked: true, ..Self::default() }
    }

    /// The sequence number the next message gets.
    pub fn next_seq(&self) -> u32 {
        self.seq
    }

    /// Counts `n` messages written elsewhere and appended whole.
    pub fn skip_seq(&mut self, n: u32) {
        self.seq = self.seq.wrapping_add(n);
    }

    pub fn len(&self) -> usize {
        self.done_len + self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the current chunk when it is full; only between messages.
    fn rotate(&mut self) {
        if self.chunked && self.buf.len() >= CHUNK {
            let full = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK + CHUNK_SLACK));
            self.done_len += full.len();
            self.done.push(full);
        }
    }

    /// Appends whole messages written by another writer, after the last
    /// closed one: a large chunk is kept as it is, a small one copied into
    /// the current chunk (so the chunks stay few: `sendmsg` takes at most
    /// 1024).
    pub fn append(&mut self, chunk: Vec<u8>) {
        debug_assert!(self.chunked, "only chunked writers take chunks");
        if chunk.len() >= CHUNK / 2 {
            if !self.buf.is_empty() {
                let current = std::mem::take(&mut self.buf);
                self.done_len += current.len();
                self.done.push(current);
            }
            self.done_len += chunk.len();
            self.done.push(chunk);
        } else {
            if !self.buf.is_empty() && self.buf.len() + chunk.len() > CHUNK {
                let current = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK + CHUNK_SLACK));
                self.done_len += current.len();
                self.done.push(current);
            }
            self.buf.extend_from_slice(&chunk);
        }
        self.message = self.buf.len();
    }

    /// The chunks, in order (one for a writer that is not chunked).
    pub fn into_chunks(mut self) -> Vec<Vec<u8>> {
        if !self.buf.is_empty() || self.done.is_empty() {
            self.done.push(self.buf);
        }
        self.done
    }

    /// Bytes of the message being built so far.
    pub fn message_len(&self) -> usize {
        self.buf.len() - self.message
    }

    /// Starts a message of `kind` (subsystem << 8 | type) with an
    /// `nfgenmsg` header; returns its sequence number.
    pub fn begin(&mut self, kind: u16, flags: u16, family: u8, res_id: u16) -> u32 {
        debug_assert_eq!(self.buf.len() % 4, 0);
        self.rotate();
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        self.message = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&[family, 0]);
        self.buf.extend_from_slice(&res_id.to_be_bytes());
        seq
    }

    /// Closes the current message.
    pub fn end(&mut self) {
        let len = u32::try_from(self.buf.len() - self.message).expect("a netlink message is under 4 GiB");
        self.buf[self.message..self.message + 4].copy_from_slice(&len.to_ne_bytes());
    }

    pub fn bytes(&mut self, kind: u16, value: &[u8]) {
        let len = u16::try_from(4 + value.len()).expect("an attribute is under 64 KiB");
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.pad();
    }

    /// An attribute whose value `fill` appends to the buffer in place (no
    /// temporary copy: elements are most of a large batch).
    pub fn with_value(&mut self, kind: u16, fill: impl FnOnce(&mut Vec<u8>)) {
        let at = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        fill(&mut self.buf);
        let len = u16::try_from(self.buf.len() - at).expect("an attribute is under 64 KiB");
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        self.pad();
    }

    pub fn u8(&mut self, kind: u16, value: u8) {
        self.bytes(kind, &[value]);
    }

    pub fn u32(&mut self, kind: u16, value: u32) {
        self.bytes(kind, &value.to_be_bytes());
    }

    pub fn i32(&mut self, kind: u16, value: i32) {
        self.bytes(kind, &value.to_be_bytes());
    }

    pub fn u64(&mut self, kind: u16, value: u64) {
        self.bytes(kind, &value.to_be_bytes());
    }

    /// A NUL-terminated string.
    pub fn str(&mut self, kind: u16, value: &str) {
        let len = u16::try_from(5 + value.len()).expect("an attribute is under 64 KiB");
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value.as_bytes());
        self.buf.push(0);
        self.pad();
    }

    pub fn nest(&mut self, kind: u16) -> Nest {
        let at = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        Nest(at)
    }

    pub fn end_nest(&mut self, nest: Nest) {
        let len = u16::try_from(self.buf.len() - nest.0).expect("an attribute nest is under 64 KiB");
        self.buf[nest.0..nest.0 + 2].copy_from_slice(&len.to_ne_bytes());
    }

    /// Bytes of the nest so far.
    pub fn nest_len(&self, nest: &Nest) -> usize {
        self.buf.len() - nest.0
    }

    fn pad(&mut self) {
        let padded = align(self.buf.len());
        self.buf.resize(padded, 0);
    }

    /// All messages in one buffer.
    pub fn into_bytes(self) -> Vec<u8> {
        if self.done.is_empty() {
            return self.buf;
        }
        let mut all = Vec::with_capacity(self.len());
        for chunk in self.done.iter().chain([&self.buf]) {
            all.extend_from_slice(chunk);
        }
        all
    }

    /// The messages of a writer that is not chunked (or has one chunk).
    pub fn as_bytes(&self) -> &[u8] {
        assert!(self.done.is_empty(), "a chunked writer's bytes are in several chunks");
        &self.buf
    }
}
