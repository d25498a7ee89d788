//! Probes: clients that send one request (or a series on one connection or
//! flow) from inside a namespace to a sandbox [`Backend`](crate::Backend),
//! and classify what came back. Every wait is bounded by the caller's timeout.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::{Place, Reply};

/// What a probe sends: one line.
const REQUEST: &[u8] = b"hello\n";

/// A probe's timeout when the caller has no better idea.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a probe got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    /// TCP RST to the SYN, or ICMP port unreachable (`ECONNREFUSED`).
    Refused,
    /// No answer within the timeout.
    TimedOut,
    /// The connection was reset (or its write side broken) after it was established.
    Reset,
    /// No route, or ICMP host/network unreachable.
    Unreachable,
    /// Anything else, described.
    Other(String),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Refused => f.write_str("refused"),
            ProbeError::TimedOut => f.write_str("timed out"),
            ProbeError::Reset => f.write_str("connection reset"),
            ProbeError::Unreachable => f.write_str("unreachable"),
            ProbeError::Other(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for ProbeError {}

impl From<io::Error> for ProbeError {
    fn from(error: io::Error) -> ProbeError {
        use io::ErrorKind;
        match error.kind() {
            ErrorKind::ConnectionRefused => ProbeError::Refused,
            ErrorKind::TimedOut | ErrorKind::WouldBlock => ProbeError::TimedOut,
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => ProbeError::Reset,
            ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => ProbeError::Unreachable,
            _ => ProbeError::Other(error.to_string()),
        }
    }
}

/// One TCP request from inside `at` (a namespace, or a namespace and a
/// cgroup): connect (from `from` if given), send a line, read the reply line, close.
pub fn tcp_request<'a>(
    at: impl Into<Place<'a>>,
    to: SocketAddr,
    from: Option<IpAddr>,
    timeout: Duration,
) -> Result<Reply, ProbeError> {
    let deadline = Instant::now() + timeout;
    TcpSession::open_from(at, to, from, timeout)?.request_until(deadline)
}

/// One UDP request from inside `at`: send a datagram (from `from` if given), read the reply datagram.
///
/// ICMP port unreachable gives [`ProbeError::Refused`] (the socket is
/// connected, so the kernel reports it); silence gives [`ProbeError::TimedOut`].
pub fn udp_request<'a>(
    at: impl Into<Place<'a>>,
    to: SocketAddr,
    from: Option<IpAddr>,
    timeout: Duration,
) -> Result<Reply, ProbeError> {
    let deadline = Instant::now() + timeout;
    UdpFlow::open_from(at, to, from, timeout)?.request_until(deadline)
}

/// A TCP connection kept open across time, to check that established
/// connections survive rule changes and restarts.
#[derive(Debug)]
pub struct TcpSession {
    reader: BufReader<TcpStream>,
    timeout: Duration,
}

impl TcpSession {
    /// Connects from inside `at`; `timeout` bounds the connect and, later, each request.
    pub fn open<'a>(at: impl Into<Place<'a>>, to: SocketAddr, timeout: Duration) -> Result<TcpSession, ProbeError> {
        TcpSession::open_from(at, to, None, timeout)
    }

    /// Like [`TcpSession::open`], binding the source address `from` first.
    pub fn open_from<'a>(
        at: impl Into<Place<'a>>,
        to: SocketAddr,
        from: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<TcpSession, ProbeError> {
        let socket = socket_in(at.into(), to, from, Type::STREAM, Protocol::TCP)?;
        socket.connect_timeout(&to.into(), nonzero(timeout))?;
        Ok(TcpSession { reader: BufReader::new(socket.into()), timeout })
    }

    /// Sends one line and reads the reply line, within the session's timeout.
    pub fn request(&mut self) -> Result<Reply, ProbeError> {
        self.request_until(Instant::now() + self.timeout)
    }

    fn request_until(&mut self, deadline: Instant) -> Result<Reply, ProbeError> {
        let stream = self.reader.get_mut();
        stream.set_write_timeout(Some(remaining(deadline)?))?;
        stream.write_all(REQUEST)?;
        let mut line = Vec::new();
        while !line.ends_with(b"\n") {
            self.reader.get_ref().set_read_timeout(Some(remaining(deadline)?))?;
            match self.reader.read_until(b'\n', &mut line) {
                Ok(0) => return Err(ProbeError::Other("connection closed before a reply".to_owned())),
                Ok(_) => {}
                // Keeps the partial line; the loop waits out the rest of the deadline.
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error.into()),
            }
        }
        parse(&line)
    }

    /// The connection's local address.
    pub fn local_addr(&self) -> Result<SocketAddr, ProbeError> {
        Ok(self.reader.get_ref().local_addr()?)
    }
}

/// A UDP flow with a fixed local port, so every request has the same
/// 5-tuple (and hits the same conntrack entry).
#[derive(Debug)]
pub struct UdpFlow {
    socket: UdpSocket,
    timeout: Duration,
}

impl UdpFlow {
    /// Opens a connected UDP socket inside `at`; `timeout` bounds each request.
    pub fn open<'a>(at: impl Into<Place<'a>>, to: SocketAddr, timeout: Duration) -> Result<UdpFlow, ProbeError> {
        UdpFlow::open_from(at, to, None, timeout)
    }

    /// Like [`UdpFlow::open`], binding the source address `from` first.
    pub fn open_from<'a>(
        at: impl Into<Place<'a>>,
        to: SocketAddr,
        from: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<UdpFlow, ProbeError> {
        let socket = socket_in(at.into(), to, from, Type::DGRAM, Protocol::UDP)?;
        if from.is_none() {
            socket.bind(&SocketAddr::new(unspecified(to), 0).into())?;
        }
        socket.connect(&to.into())?;
        Ok(UdpFlow { socket: socket.into(), timeout })
    }

    /// Sends one datagram and reads one reply datagram, within the flow's timeout.
    pub fn request(&mut self) -> Result<Reply, ProbeError> {
        self.request_until(Instant::now() + self.timeout)
    }

    fn request_until(&mut self, deadline: Instant) -> Result<Reply, ProbeError> {
        self.drain();
        self.socket.send(REQUEST)?;
        let mut buffer = [0u8; 2048];
        loop {
            self.socket.set_read_timeout(Some(remaining(deadline)?))?;
            match self.socket.recv(&mut buffer) {
                Ok(length) => return parse(&buffer[..length]),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// The flow's local address (its port stays the same for every request).
    pub fn local_addr(&self) -> Result<SocketAddr, ProbeError> {
        Ok(self.socket.local_addr()?)
    }

    /// Discards late answers to earlier requests and stale errors, so a reply belongs to this request.
    fn drain(&self) {
        if self.socket.set_nonblocking(true).is_err() {
            return;
        }
        let mut buffer = [0u8; 2048];
        for _ in 0..64 {
            match self.socket.recv(&mut buffer) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                _ => {}
            }
        }
        let _ = self.socket.set_nonblocking(false);
    }
}

/// A socket of `to`'s family created inside `at`, bound to `from` if given.
///
/// A socket belongs to the network namespace and the cgroup of the thread
/// that created it, whichever thread uses it later.
fn socket_in(
    at: Place<'_>,
    to: SocketAddr,
    from: Option<IpAddr>,
    ty: Type,
    protocol: Protocol,
) -> Result<Socket, ProbeError> {
    let domain = Domain::for_address(to);
    let socket = at
        .try_enter(|| Socket::new(domain, ty, Some(protocol)))
        .map_err(|error| ProbeError::Other(chain(&error)))??;
    if let Some(from) = from {
        socket.bind(&SocketAddr::new(from, 0).into())?;
    }
    Ok(socket)
}

fn unspecified(to: SocketAddr) -> IpAddr {
    match to {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

fn parse(bytes: &[u8]) -> Result<Reply, ProbeError> {
    let text = String::from_utf8_lossy(bytes);
    Reply::parse(&text).ok_or_else(|| ProbeError::Other(format!("not a backend reply: {text:?}")))
}

/// Time left until `deadline`, or `TimedOut` if none (a zero socket timeout would mean "block forever").
fn remaining(deadline: Instant) -> Result<Duration, ProbeError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() { Err(ProbeError::TimedOut) } else { Ok(left) }
}

fn nonzero(timeout: Duration) -> Duration {
    timeout.max(Duration::from_millis(1))
}

/// An error and its sources, `: `-separated.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
