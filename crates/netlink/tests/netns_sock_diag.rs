//! Listing and destroying UDP sockets over sock_diag against a real
//! kernel, in a throwaway namespace. Needs root; fails (never skips)
//! without sandboxes.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use kproxy_model::IpFamily;
use kproxy_netlink::sock_diag::SockDiag;
use kproxy_sandbox::{Netns, available};

fn netns() -> Netns {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    let ns = Netns::new("sd").expect("a network namespace");
    ns.ip(&["link", "set", "lo", "up"]).expect("loopback up");
    ns
}

/// The socket's cookie, as the kernel reports it (`SO_COOKIE`).
fn cookie(socket: &UdpSocket) -> u64 {
    let mut value = 0u64;
    let mut len = std::mem::size_of::<u64>() as nix::libc::socklen_t;
    // SAFETY: value and len are valid for the duration of the call and
    // len is value's size, as SO_COOKIE needs.
    let rc = unsafe {
        nix::libc::getsockopt(
            socket.as_raw_fd(),
            nix::libc::SOL_SOCKET,
            nix::libc::SO_COOKIE,
            (&mut value as *mut u64).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "SO_COOKIE: {}", io::Error::last_os_error());
    value
}

fn connected(to: SocketAddr) -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(to).expect("connect");
    socket.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    socket
}

#[test]
fn a_destroyed_connected_udp_socket_fails_its_next_recv_and_others_survive() {
    let ns = netns();
    ns.enter(|| {
        let server = UdpSocket::bind("127.0.0.1:0").expect("bind the server");
        let to = server.local_addr().expect("server address");
        let doomed = connected(to);
        let other = connected(to);
        let mut diag = SockDiag::open().expect("a sock_diag socket");

        let sockets = diag.udp_sockets(IpFamily::V4).expect("dump");
        let local = doomed.local_addr().expect("local address");
        let listed = sockets.iter().find(|s| s.src == local).copied().expect("the connected socket is listed");
        assert_eq!(listed.dst, to, "its destination");
        assert_eq!(listed.cookie, cookie(&doomed), "its cookie");
        assert!(sockets.iter().any(|s| s.src == to && s.dst.port() == 0), "the unconnected server too");
        assert!(diag.udp_sockets(IpFamily::V6).expect("dump").iter().all(|s| s.src != local), "not in IPv6");

        assert!(diag.destroy_udp(&listed).expect("destroy"), "destroyed");
        let error = doomed.recv(&mut [0u8; 16]).expect_err("recv after destroy");
        assert_eq!(error.raw_os_error(), Some(nix::libc::ECONNABORTED), "{error}");
        assert!(doomed.send(b"x").is_err(), "no longer connected");
        assert!(!diag.destroy_udp(&listed).expect("destroy again"), "gone");

        other.send(b"ping").expect("the other socket still sends");
        let mut buf = [0u8; 16];
        let (n, from) = server.recv_from(&mut buf).expect("the server hears it");
        assert_eq!((&buf[..n], from), (&b"ping"[..], other.local_addr().expect("address")));
        server.send_to(b"pong", from).expect("answer");
        let n = other.recv(&mut buf).expect("the other socket still receives");
        assert_eq!(&buf[..n], b"pong");
    });
}

#[test]
fn a_socket_with_another_cookie_is_not_destroyed() {
    let ns = netns();
    ns.enter(|| {
        let server = UdpSocket::bind("127.0.0.1:0").expect("bind the server");
        let socket = connected(server.local_addr().expect("address"));
        let mut diag = SockDiag::open().expect("a sock_diag socket");
        let local = socket.local_addr().expect("local address");
        let mut id =
            diag.udp_sockets(IpFamily::V4).expect("dump").into_iter().find(|s| s.src == local).expect("listed");
        id.cookie ^= 1;
        // The kernel finds the socket by its addresses, then checks the
        // cookie: another cookie is a socket that is gone (ENOENT).
        assert!(!diag.destroy_udp(&id).expect("no error"), "a stale cookie names no socket");
        socket.send(b"still").expect("still connected");
    });
}
