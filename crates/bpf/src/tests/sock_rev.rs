//! `Datapath::sock_origin`: a UDP socket the connect hook translated is
//! recorded under its cookie and its backend, with the frontend it asked
//! for; another backend or another socket finds nothing.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use kproxy_ebpf::maps::{Backend, addr16};
use kproxy_sandbox::{Cgroup, Netns};

use super::sock::Cleanup;
use super::support::{Bpffs, UDP, kernel_available, service};
use crate::Datapath;

/// The socket's cookie (`SO_COOKIE`), what the programs key it by.
fn cookie(socket: &UdpSocket) -> u64 {
    let mut value = 0u64;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: value and len live across the call; len is value's size.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&mut value as *mut u64).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "SO_COOKIE: {}", std::io::Error::last_os_error());
    value
}

fn backend(ip: &str, port: u16) -> Backend {
    Backend { addr: addr16(ip.parse().expect("literal")), port: port.to_be(), pad: 0 }
}

#[test]
fn a_translated_udp_socket_names_its_frontend_under_its_cookie_and_backend() {
    if !kernel_available("sock_origin") {
        return;
    }
    let ns = Netns::new("bpfrev").expect("a netns");
    ns.ip(&["link", "set", "lo", "up"]).expect("loopback up");
    ns.ip(&["addr", "add", "10.244.1.10/32", "dev", "lo"]).expect("backend address");
    let cgroup = Cgroup::new("bpfrev").expect("a threaded test cgroup");
    let bpffs = Bpffs::mount();
    let pin_dir = bpffs.pin_dir();
    let _cleanup = Cleanup(pin_dir.clone());
    let mut datapath = Datapath::load(&pin_dir).expect("load the datapath");
    datapath.attach_cgroup(cgroup.path()).expect("attach to the test cgroup");
    datapath.apply(&service(("10.96.0.10", 53, UDP), 1, &[("10.244.1.10", 8053)], 1)).expect("write the service");

    let (translated, direct) = ns.enter_in(&cgroup, || {
        let connect = |to: &str| {
            let socket = UdpSocket::bind("0.0.0.0:0").expect("bind");
            socket.connect(to).expect("connect");
            socket
        };
        (connect("10.96.0.10:53"), connect("10.244.1.10:8053"))
    });
    assert_eq!(translated.peer_addr().expect("peer").to_string(), "10.96.0.10:53", "getpeername shows the frontend");

    let origin = datapath.sock_origin(cookie(&translated), &backend("10.244.1.10", 8053)).expect("lookup");
    let origin = origin.expect("the translated socket is recorded");
    assert_eq!((origin.addr, u16::from_be(origin.port)), (addr16("10.96.0.10".parse().expect("ip")), 53));
    let other_port = datapath.sock_origin(cookie(&translated), &backend("10.244.1.10", 8054)).expect("lookup");
    assert_eq!(other_port, None, "another backend");
    let untranslated = datapath.sock_origin(cookie(&direct), &backend("10.244.1.10", 8053)).expect("lookup");
    assert_eq!(untranslated, None, "a socket that connected to the backend itself");
    drop(datapath);
}
