//! Test backends: plain sockets in a namespace that answer every request with
//! `<name> <peer-ip>\n`, over TCP (one line per line, or one HTTP/1.0
//! response) and UDP (one datagram per datagram).
//!
//! Serving runs on background threads that block at most 100 ms at a time
//! and check a stop flag; dropping the [`Backend`] sets it, shuts the
//! sockets down to wake the threads at once, and joins them.

use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, SocketAddrV6, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::libc;
use nix::sys::socket::{
    ControlMessage, ControlMessageOwned, MsgFlags, SockaddrIn6, recvmsg, sendmsg, setsockopt, sockopt,
};
use socket2::{Domain, Protocol, Socket, Type};

use crate::{Netns, Place, Reply, SandboxError};

/// How long a serving thread blocks before it checks the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// How long an HTTP request may take to send its headers.
const HTTP_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// A backend serving TCP and/or UDP on one port in a namespace, on all
/// addresses of both families (one IPv6 socket per protocol, not v6-only).
///
/// UDP answers leave from the address the request was sent to, so a backend
/// in a namespace with several addresses (a node) answers like a real server.
#[derive(Debug)]
pub struct Backend {
    shared: Arc<Shared>,
    port: u16,
    threads: Vec<JoinHandle<()>>,
    /// Duplicates of the serving sockets, shut down on drop to wake their threads at once.
    sockets: Vec<Socket>,
}

#[derive(Debug)]
struct Shared {
    name: String,
    requests: AtomicU64,
    stop: AtomicBool,
    connections: Mutex<Vec<(JoinHandle<()>, TcpStream)>>,
}

impl Backend {
    /// Starts serving in `at`. With `port` 0 the kernel picks one port, used for both protocols.
    ///
    /// `at` is a namespace, or a namespace and a cgroup the serving sockets then belong to.
    pub fn start<'a>(
        at: impl Into<Place<'a>>,
        name: &str,
        port: u16,
        tcp: bool,
        udp: bool,
    ) -> Result<Backend, SandboxError> {
        let at = at.into();
        let ns = at.netns();
        let socket_error = |step: String| {
            let netns = ns.name().to_owned();
            move |source| SandboxError::Socket { netns, step, source }
        };
        let (listener, socket, port) = at.try_enter(|| -> Result<_, SandboxError> {
            let listener =
                tcp.then(|| listen_tcp(port)).transpose().map_err(socket_error(format!("listen on TCP {port}")))?;
            let tcp_port = listener.as_ref().map(TcpListener::local_addr).transpose();
            let port = tcp_port.map_err(socket_error("read the TCP port".into()))?.map_or(port, |addr| addr.port());
            let socket = udp.then(|| bind_udp(port)).transpose().map_err(socket_error(format!("bind UDP {port}")))?;
            let udp_port = socket.as_ref().map(UdpSocket::local_addr).transpose();
            let port = udp_port.map_err(socket_error("read the UDP port".into()))?.map_or(port, |addr| addr.port());
            Ok((listener, socket, port))
        })??;
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            requests: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            connections: Mutex::default(),
        });
        let mut backend = Backend { shared, port, threads: Vec::new(), sockets: Vec::new() };
        // On an error below, dropping `backend` stops the threads already started.
        if let Some(listener) = listener {
            backend.sockets.push(duplicate(ns, &listener)?);
            let shared = Arc::clone(&backend.shared);
            backend.threads.push(spawn("serve TCP", move || serve_tcp(&listener, &shared))?);
        }
        if let Some(socket) = socket {
            backend.sockets.push(duplicate(ns, &socket)?);
            let shared = Arc::clone(&backend.shared);
            backend.threads.push(spawn("serve UDP", move || serve_udp(&socket, &shared))?);
        }
        tracing::debug!(netns = %ns.name(), backend = %name, port, tcp, udp, "backend started");
        Ok(backend)
    }

    /// Requests received so far, over both protocols (each counted just before it is answered).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// The port served.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The name it answers with.
    pub fn name(&self) -> &str {
        &self.shared.name
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Shutting a socket down wakes a thread blocked in accept or recv on it.
        for socket in &self.sockets {
            let _ = socket.shutdown(Shutdown::Read);
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        // No new connection can be registered now that the TCP thread has ended.
        let connections = std::mem::take(&mut *self.shared.connections.lock().unwrap_or_else(PoisonError::into_inner));
        for (thread, stream) in connections {
            let _ = stream.shutdown(Shutdown::Both);
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn reply(&self, peer: IpAddr) -> String {
        Reply { backend: self.name.clone(), peer: peer.to_canonical() }.line()
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }
}

fn spawn(step: &'static str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, SandboxError> {
    std::thread::Builder::new()
        .name("kp-backend".to_owned())
        .spawn(f)
        .map_err(|source| SandboxError::Thread { step, source })
}

fn duplicate(ns: &Netns, socket: &impl std::os::fd::AsFd) -> Result<Socket, SandboxError> {
    socket2::SockRef::from(socket).try_clone().map_err(|source| SandboxError::Socket {
        netns: ns.name().to_owned(),
        step: "duplicate a serving socket".to_owned(),
        source,
    })
}

fn dual_stack(ty: Type, protocol: Protocol, port: u16) -> io::Result<Socket> {
    let socket = Socket::new(Domain::IPV6, ty, Some(protocol))?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)).into())?;
    // On Linux SO_RCVTIMEO bounds accept() as well as recv().
    socket.set_read_timeout(Some(POLL))?;
    Ok(socket)
}

fn listen_tcp(port: u16) -> io::Result<TcpListener> {
    let socket = dual_stack(Type::STREAM, Protocol::TCP, port)?;
    socket.listen(128)?;
    Ok(socket.into())
}

fn bind_udp(port: u16) -> io::Result<UdpSocket> {
    let socket = dual_stack(Type::DGRAM, Protocol::UDP, port)?;
    // Learn each datagram's destination, to answer from it (IPv4 ones arrive v4-mapped).
    setsockopt(&socket, sockopt::Ipv6RecvPacketInfo, &true)?;
    Ok(socket.into())
}

fn serve_tcp(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopped() {
        match listener.accept() {
            Ok((stream, peer)) => {
                let Ok(handle) = stream.try_clone() else { continue };
                let conn = Arc::clone(shared);
                match spawn("serve a TCP connection", move || serve_connection(stream, peer.ip(), &conn)) {
                    Ok(thread) => {
                        let mut connections = shared.connections.lock().unwrap_or_else(PoisonError::into_inner);
                        connections.retain(|(thread, _)| !thread.is_finished());
                        connections.push((thread, handle));
                    }
                    Err(error) => tracing::warn!(error = %error, "dropping a TCP connection"),
                }
            }
            Err(error) if is_timeout(&error) => {}
            Err(_) if shared.stopped() => {}
            Err(error) => {
                tracing::warn!(error = %error, "TCP accept failed");
                std::thread::sleep(POLL);
            }
        }
    }
}

fn serve_connection(stream: TcpStream, peer: IpAddr, shared: &Shared) {
    let reply = shared.reply(peer);
    let Ok(mut writer) = stream.try_clone() else { return };
    if stream.set_nonblocking(false).and_then(|()| stream.set_read_timeout(Some(POLL))).is_err() {
        return;
    }
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    while !shared.stopped() {
        match reader.read_until(b'\n', &mut line) {
            // End of stream, possibly in the middle of a line: nothing to answer.
            Ok(_) if !line.ends_with(b"\n") => return,
            Ok(_) if line.starts_with(b"GET ") => {
                answer_http(&mut reader, &mut writer, &line, &reply, shared);
                return;
            }
            Ok(_) => {
                // Counted before answering, so a client that has its answer sees the count include it.
                shared.count();
                if writer.write_all(reply.as_bytes()).is_err() {
                    return;
                }
                line.clear();
            }
            // A timeout keeps what was read of the line so far in `line`.
            Err(error) if is_timeout(&error) => {}
            Err(_) => return,
        }
    }
}

fn answer_http(reader: &mut BufReader<TcpStream>, writer: &mut TcpStream, request: &[u8], body: &str, shared: &Shared) {
    // Read the headers before answering: closing a socket with unread input
    // makes the kernel send RST, which can destroy the response in flight.
    if request.windows(6).any(|window| window == b" HTTP/") {
        let deadline = Instant::now() + HTTP_HEADER_TIMEOUT;
        let mut header = Vec::new();
        while Instant::now() < deadline && !shared.stopped() {
            match reader.read_until(b'\n', &mut header) {
                Ok(0) => break,
                Ok(_) if header == b"\r\n" || header == b"\n" => break,
                Ok(_) => header.clear(),
                Err(error) if is_timeout(&error) => {}
                Err(_) => return,
            }
        }
    }
    let response = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    shared.count();
    let _ = writer.write_all(response.as_bytes());
    let _ = writer.shutdown(Shutdown::Write);
}

fn serve_udp(socket: &UdpSocket, shared: &Shared) {
    let mut buffer = [0u8; 2048];
    let mut control = nix::cmsg_space!(libc::in6_pktinfo);
    while !shared.stopped() {
        match receive(socket, &mut buffer, &mut control) {
            Ok((peer, local)) => {
                let reply = shared.reply(IpAddr::V6(*peer.ip()));
                shared.count();
                let sent = match answer(socket, reply.as_bytes(), peer, local) {
                    // A broadcast or multicast destination is no valid source: answer from the route's choice.
                    Err(Errno::EINVAL) if local.is_some() => answer(socket, reply.as_bytes(), peer, None),
                    sent => sent,
                };
                if let Err(error) = sent {
                    tracing::warn!(error = %error, %peer, "UDP reply failed");
                }
            }
            Err(Errno::EAGAIN | Errno::EINTR) => {}
            Err(_) if shared.stopped() => {}
            Err(error) => {
                tracing::warn!(error = %error, "UDP receive failed");
                std::thread::sleep(POLL);
            }
        }
    }
}

/// Receives one datagram: its source, and the local address it was sent to.
fn receive(
    socket: &UdpSocket,
    buffer: &mut [u8],
    control: &mut [u8],
) -> Result<(SocketAddrV6, Option<Ipv6Addr>), Errno> {
    let mut iov = [IoSliceMut::new(buffer)];
    let message = recvmsg::<SockaddrIn6>(socket.as_raw_fd(), &mut iov, Some(control), MsgFlags::empty())?;
    let peer = message.address.map(SocketAddrV6::from).ok_or(Errno::EINVAL)?;
    let local = message.cmsgs()?.find_map(|cmsg| match cmsg {
        ControlMessageOwned::Ipv6PacketInfo(info) => Some(Ipv6Addr::from(info.ipi6_addr.s6_addr)),
        _ => None,
    });
    Ok((peer, local))
}

/// Sends `payload` to `peer` from `local` (when known), whatever the route's preferred source.
fn answer(socket: &UdpSocket, payload: &[u8], peer: SocketAddrV6, local: Option<Ipv6Addr>) -> Result<usize, Errno> {
    let info =
        local.map(|addr| libc::in6_pktinfo { ipi6_addr: libc::in6_addr { s6_addr: addr.octets() }, ipi6_ifindex: 0 });
    let control: Vec<ControlMessage<'_>> = info.iter().map(ControlMessage::Ipv6PacketInfo).collect();
    let peer = SockaddrIn6::from(peer);
    sendmsg(socket.as_raw_fd(), &[IoSlice::new(payload)], &control, MsgFlags::empty(), Some(&peer))
}

fn is_timeout(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}
