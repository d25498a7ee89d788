//! One nf_tables dump read to its end: a `GET*` request with
//! `NLM_F_DUMP`, its answer read part by part until `NLMSG_DONE`, and the
//! whole dump redone when the kernel says the objects changed under it.
//!
//! What the answer's messages mean is the caller's ([`Collect`]); this
//! module only owns the socket, the sequence numbers and the errors. It
//! reads; it never changes the ruleset.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use super::decode::{Attr, Body, DecodeError, Message, parse};
use super::wire::NLM_F_DUMP_INTR;
use crate::io::{recv, send};

/// What went wrong reading a dump. `what` names what was listed ("the
/// chains of IPv4 table `nat`").
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("cannot open a netfilter netlink socket")]
    Socket(#[source] io::Error),
    #[error("sending the request to list {what} failed")]
    Send { what: String, source: io::Error },
    #[error("reading the list of {what} failed")]
    Receive { what: String, source: io::Error },
    #[error("the list of {what} is malformed")]
    Decode { what: String, source: DecodeError },
    /// The kernel answered the dump with an error other than "no such table".
    #[error("the kernel refused to list {what}: {}", io::Error::from_raw_os_error(*.errno))]
    Refused { what: String, errno: i32 },
    /// The ruleset kept changing while it was dumped.
    #[error("{what} changed during each of {attempts} dumps")]
    Interrupted { what: String, attempts: usize },
}

/// How long the kernel may take between two parts of its answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// A dump part is at most 32 KiB (the kernel caps it near there whatever
/// the reader offers); a larger buffer never truncates one.
const RECEIVE_BUFFER: usize = 1 << 17;
/// A dump that sees the ruleset change says so (`NLM_F_DUMP_INTR`) and is
/// redone this many times in all before giving up.
const ATTEMPTS: usize = 3;

/// Takes a dump's object messages, one at a time.
pub(crate) trait Collect {
    /// One message of the answer: its type (subsystem << 8 | message) and
    /// attributes.
    fn take(&mut self, kind: u16, attrs: Vec<Attr>);
}

/// A socket to read dumps from, one after the other.
pub(crate) struct Dumper {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Dumper {
    pub fn open() -> Result<Dumper, DumpError> {
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(DumpError::Socket)?;
        socket.bind_auto().map_err(DumpError::Socket)?;
        socket.set_ext_ack(true).map_err(DumpError::Socket)?;
        let timeout = TimeVal::new(ANSWER_TIMEOUT.as_secs() as _, 0);
        setsockopt(&socket.as_fd(), sockopt::ReceiveTimeout, &timeout).map_err(|e| DumpError::Socket(e.into()))?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(DumpError::Socket)?;
        Ok(Dumper { socket, seq: 0, buf: vec![0u8; RECEIVE_BUFFER] })
    }

    /// Sends `request(seq)` and collects its answer into `fresh()`, redone
    /// from a fresh collector while the kernel reports the dump
    /// interrupted. `what` names the objects for errors.
    pub fn dump<C: Collect>(
        &mut self,
        what: impl Fn() -> String,
        request: impl Fn(u32) -> Vec<u8>,
        fresh: impl Fn() -> C,
    ) -> Result<C, DumpError> {
        for _ in 0..ATTEMPTS {
            self.seq = self.seq.wrapping_add(1);
            send(&self.socket, &request(self.seq)).map_err(|source| DumpError::Send { what: what(), source })?;
            let mut reply = Reply::new(self.seq, fresh());
            while !reply.done {
                let n =
                    recv(&self.socket, &mut self.buf).map_err(|source| DumpError::Receive { what: what(), source })?;
                let messages = parse(&self.buf[..n]).map_err(|source| DumpError::Decode { what: what(), source })?;
                reply.absorb(messages).map_err(|errno| DumpError::Refused { what: what(), errno })?;
            }
            if !reply.interrupted {
                return Ok(reply.collected);
            }
        }
        Err(DumpError::Interrupted { what: what(), attempts: ATTEMPTS })
    }
}

/// A dump's answer as it arrives, part by part.
#[derive(Debug)]
pub(crate) struct Reply<C> {
    seq: u32,
    pub collected: C,
    pub done: bool,
    /// The ruleset changed during the dump: what was read may miss objects.
    pub interrupted: bool,
}

impl<C: Collect> Reply<C> {
    pub fn new(seq: u32, collected: C) -> Reply<C> {
        Reply { seq, collected, done: false, interrupted: false }
    }

    /// Takes one part's messages; `Err(errno)` if the kernel refused the
    /// dump. A missing table (`ENOENT`, from kernels that look the table
    /// up) ends the dump with nothing in it.
    pub fn absorb(&mut self, messages: Vec<Message>) -> Result<(), i32> {
        for m in messages {
            // Answers to another request: none are expected, since each
            // attempt is read to its end, but a stray one must not count.
            if m.seq != self.seq {
                continue;
            }
            self.interrupted |= m.flags & NLM_F_DUMP_INTR != 0;
            match m.body {
                Body::Done => self.done = true,
                Body::Error(e) if e.error == 0 || -e.error == nix::libc::ENOENT => self.done = true,
                Body::Error(e) => return Err(-e.error),
                Body::Netfilter { attrs, .. } => self.collected.take(m.kind, attrs),
            }
        }
        Ok(())
    }
}

/// A NUL-terminated attribute string, without the NUL; not UTF-8 is empty
/// (no table or chain kproxy asks for is named so).
pub(crate) fn c_string(bytes: &[u8]) -> &str {
    let text = bytes.split(|c| *c == 0).next().unwrap_or_default();
    std::str::from_utf8(text).unwrap_or_default()
}

/// The text of attribute `kind` among `attrs`, if there.
pub(crate) fn text(attrs: &[Attr], kind: u16) -> Option<&str> {
    attrs.iter().find(|a| a.kind == kind).and_then(|a| a.bytes()).map(c_string)
}

/// The `NLMSG_DONE` that ends a dump answering request `seq`, as the kernel
/// sends it, for the dump decoders' tests. It carries an int (0) where
/// nfgenmsg would be: the same 4 bytes.
#[cfg(test)]
pub(crate) fn done_message(seq: u32) -> Vec<u8> {
    use super::wire::{NLM_F_MULTI, NLMSG_DONE, Writer};
    let mut w = Writer::with_seq(seq);
    w.begin(NLMSG_DONE, NLM_F_MULTI, 0, 0);
    w.end();
    w.into_bytes()
}
