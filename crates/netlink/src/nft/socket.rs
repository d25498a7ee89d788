//! Sending a batch to nf_tables and reading the verdict.
//!
//! The batch goes in one `sendmsg` (the kernel takes a batch from one
//! buffer: a batch's chunks are gathered as an iovec) and is processed
//! before the call returns. Messages ask for no
//! acknowledgement, so a large batch cannot flood the socket with them;
//! instead a `GETGEN` request follows, and its answer marks the end of
//! what the kernel has to say. Errors before it are the batch's.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use super::decode::{Body, DecodeError, parse};
use super::encode::Encoded;
use super::stream::Batch;
use super::wire::{NLM_F_REQUEST, SUBSYS_NFTABLES, Writer, msg};

/// What went wrong applying a batch.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot open a netfilter netlink socket")]
    Socket(#[source] io::Error),
    #[error("sending the transaction ({bytes} bytes) failed")]
    Send { bytes: usize, source: io::Error },
    #[error("reading the kernel's answer failed")]
    Receive(#[source] io::Error),
    #[error("the kernel's answer is malformed")]
    Decode(#[from] DecodeError),
    /// The kernel refused the transaction and changed nothing.
    #[error("the kernel rejected the transaction: {}", describe(.0))]
    Rejected(Vec<KernelError>),
}

/// One message the kernel refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    /// The errno (positive).
    pub errno: i32,
    /// The kernel's extended message, when it gave one.
    pub message: Option<String>,
    /// The family plan and op index of the refused message, if it is one
    /// of the batch's.
    pub origin: Option<(usize, usize)>,
}

impl KernelError {
    pub fn reason(&self) -> String {
        let text = io::Error::from_raw_os_error(self.errno).to_string();
        match &self.message {
            Some(m) => format!("{text}: {m}"),
            None => text,
        }
    }
}

fn describe(errors: &[KernelError]) -> String {
    match errors {
        [] => "no reason given".into(),
        [only] => only.reason(),
        [first, rest @ ..] => format!("{} (and {} more errors)", first.reason(), rest.len()),
    }
}

/// The kernel may take long over a huge batch; an answer later than this
/// means something is wrong.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// Receive buffer: room for many error messages before any is lost.
const RECEIVE_BUFFER: usize = 4 << 20;

/// Most iovec entries one `sendmsg` takes (`UIO_MAXIOV`).
const MAX_IOV: usize = 1024;

/// A batch's messages: where they are, and what they were encoded from.
struct Transaction<'a> {
    parts: Vec<&'a [u8]>,
    first_seq: u32,
    origins: &'a [Option<(usize, usize)>],
}

impl Transaction<'_> {
    fn len(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum()
    }

    fn next_seq(&self) -> u32 {
        self.first_seq.wrapping_add(u32::try_from(self.origins.len()).unwrap_or(u32::MAX))
    }

    fn contains(&self, seq: u32) -> bool {
        (seq.wrapping_sub(self.first_seq) as usize) < self.origins.len()
    }

    fn origin(&self, seq: u32) -> Option<(usize, usize)> {
        self.origins.get(seq.wrapping_sub(self.first_seq) as usize).copied().flatten()
    }
}

/// Sends `batch` and waits for the kernel to finish with it. Blocks: run
/// it off the async runtime.
pub fn apply(batch: &Encoded) -> Result<(), ApplyError> {
    transact(&Transaction { parts: vec![&batch.bytes], first_seq: batch.first_seq, origins: &batch.origins })
}

/// [`apply`] for a batch in chunks: still one `sendmsg`, one transaction.
pub fn apply_batch(batch: &Batch) -> Result<(), ApplyError> {
    let parts = batch.chunks.iter().map(Vec::as_slice).collect();
    transact(&Transaction { parts, first_seq: batch.first_seq, origins: &batch.origins })
}

fn transact(batch: &Transaction<'_>) -> Result<(), ApplyError> {
    let mut socket = Socket::new(NETLINK_NETFILTER).map_err(ApplyError::Socket)?;
    socket.bind_auto().map_err(ApplyError::Socket)?;
    socket.set_cap_ack(true).map_err(ApplyError::Socket)?;
    socket.set_ext_ack(true).map_err(ApplyError::Socket)?;
    let fd = socket.as_fd();
    // A batch is one datagram: the send buffer must hold it whole.
    let send_buffer = batch.len() + (64 << 10);
    setsockopt(&fd, sockopt::SndBufForce, &send_buffer).map_err(|e| ApplyError::Socket(e.into()))?;
    setsockopt(&fd, sockopt::RcvBufForce, &RECEIVE_BUFFER).map_err(|e| ApplyError::Socket(e.into()))?;
    let timeout = TimeVal::new(ANSWER_TIMEOUT.as_secs() as _, 0);
    setsockopt(&fd, sockopt::ReceiveTimeout, &timeout).map_err(|e| ApplyError::Socket(e.into()))?;
    socket.connect(&SocketAddr::new(0, 0)).map_err(ApplyError::Socket)?;

    send_parts(&socket, &batch.parts)?;
    let marker = batch.next_seq();
    let mut getgen = Writer::with_seq(marker);
    getgen.begin((SUBSYS_NFTABLES << 8) | u16::from(msg::GETGEN), NLM_F_REQUEST, 0, 0);
    getgen.end();
    send(&socket, getgen.as_bytes())?;

    let mut errors = Vec::new();
    let mut lost = false;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match socket.recv(&mut &mut buf[..], 0) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // ENOBUFS: answers were dropped, which only errors can cause.
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOBUFS) => {
                lost = true;
                continue;
            }
            Err(e) => return Err(ApplyError::Receive(e)),
        };
        let mut done = false;
        for m in parse(&buf[..n])? {
            match m.body {
                Body::Error(e) if e.error != 0 && batch.contains(e.request_seq) => errors.push(KernelError {
                    errno: -e.error,
                    message: e.message,
                    origin: batch.origin(e.request_seq),
                }),
                Body::Error(e) if e.request_seq == marker => {
                    // GETGEN itself failed: the batch's errors came first.
                    done = true;
                    if e.error != 0 && errors.is_empty() && !lost {
                        return Err(ApplyError::Receive(io::Error::from_raw_os_error(-e.error)));
                    }
                }
                _ if m.seq == marker => done = true,
                _ => {}
            }
        }
        if done {
            break;
        }
    }
    if lost && errors.is_empty() {
        errors.push(KernelError {
            errno: nix::libc::ENOBUFS,
            message: Some("too many errors to read them all".into()),
            origin: None,
        });
    }
    if errors.is_empty() { Ok(()) } else { Err(ApplyError::Rejected(errors)) }
}

/// Sends `parts` as one message (one `sendmsg` with an iovec).
fn send_parts(socket: &Socket, parts: &[&[u8]]) -> Result<(), ApplyError> {
    if parts.len() == 1 {
        return send(socket, parts[0]);
    }
    if parts.len() > MAX_IOV {
        // Never at kproxy's sizes (chunks are about 1 MiB): one buffer.
        return send(socket, &parts.concat());
    }
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let iov: Vec<std::io::IoSlice<'_>> = parts.iter().map(|p| std::io::IoSlice::new(p)).collect();
    let fd = std::os::fd::AsRawFd::as_raw_fd(socket);
    loop {
        let flags = nix::sys::socket::MsgFlags::empty();
        match nix::sys::socket::sendmsg::<()>(fd, &iov, &[], flags, None) {
            Ok(n) if n == total => return Ok(()),
            Ok(n) => {
                let source = io::Error::other(format!("only {n} bytes were sent"));
                return Err(ApplyError::Send { bytes: total, source });
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ApplyError::Send { bytes: total, source: e.into() }),
        }
    }
}

fn send(socket: &Socket, bytes: &[u8]) -> Result<(), ApplyError> {
    loop {
        match socket.send(bytes, 0) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(n) => {
                let source = io::Error::other(format!("only {n} bytes were sent"));
                return Err(ApplyError::Send { bytes: bytes.len(), source });
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(ApplyError::Send { bytes: bytes.len(), source }),
        }
    }
}
