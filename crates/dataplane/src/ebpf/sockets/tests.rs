//! Finding the namespaces (a fake cgroup tree naming this process's own
//! tasks) and ending only the translated sockets of a stale endpoint (in
//! a real namespace, the `kp_sock_rev` lookup stubbed).

use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use kproxy_sandbox::{Netns, available};

use super::*;

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write a fake cgroup file");
}

#[test]
fn namespaces_are_found_through_procs_and_threads_of_the_subtree_once_each() {
    let root = tempfile::tempdir().expect("a temporary folder");
    let child = root.path().join("pod");
    let threaded = child.join("threads");
    std::fs::create_dir_all(&threaded).expect("fake cgroups");
    let me = std::process::id();
    let tid = nix::unistd::gettid().as_raw() as u32;
    write(&root.path().join("cgroup.procs"), "");
    write(&root.path().join("cgroup.threads"), "");
    // A process that has exited is skipped.
    write(&child.join("cgroup.procs"), &format!("{me}\n4194303\n"));
    write(&child.join("cgroup.threads"), "");
    write(&threaded.join("cgroup.threads"), &format!("{tid}\n"));
    let pinned = tempfile::tempdir().expect("an empty pin folder");
    let mut errors = Vec::new();
    let found = namespaces(root.path(), pinned.path(), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(found.len(), 1, "this process's namespace, once: {found:?}");
    let mine = std::fs::metadata("/proc/self/ns/net").expect("own namespace");
    let got = found[0].file.metadata().expect("stat");
    assert_eq!((got.dev(), got.ino()), (mine.dev(), mine.ino()));
}

#[test]
fn an_unreadable_cgroup_is_reported_not_fatal() {
    let mut errors = Vec::new();
    let pinned = tempfile::tempdir().expect("an empty pin folder");
    let found = namespaces(Path::new("/nonexistent-kproxy-cgroup"), pinned.path(), &mut errors);
    assert!(found.is_empty());
    assert!(matches!(errors.as_slice(), [SocketsError::Cgroup { .. }]), "{errors:?}");
}

fn cookie(socket: &UdpSocket) -> u64 {
    let mut value = 0u64;
    let mut len = std::mem::size_of::<u64>() as nix::libc::socklen_t;
    // SAFETY: value and len live across the call; len is value's size.
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

#[test]
fn only_sockets_translated_from_the_stale_frontend_to_the_stale_endpoint_are_ended() {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    let ns = Netns::new("socks").expect("a network namespace");
    ns.ip(&["link", "set", "lo", "up"]).expect("loopback up");
    let (endpoint, translated, direct, other_frontend, v6) = ns.enter(|| {
        let endpoint = UdpSocket::bind("127.0.0.1:0").expect("the endpoint");
        let to = endpoint.local_addr().expect("address");
        let connect = |bind: &str| {
            let socket = UdpSocket::bind(bind).expect("bind");
            socket.connect(to).expect("connect");
            socket
        };
        let v6 = connect("[::]:0");
        (endpoint, connect("127.0.0.1:0"), connect("127.0.0.1:0"), connect("127.0.0.1:0"), v6)
    });
    let to = endpoint.local_addr().expect("address");
    let frontend: SocketAddr = "10.96.0.53:53".parse().expect("literal");
    let (translated_cookie, other_cookie, v6_cookie) = (cookie(&translated), cookie(&other_frontend), cookie(&v6));
    // What kp_sock_rev would say: `direct` connected to the endpoint itself.
    let origin = |c: u64, e: SocketAddr| {
        assert_eq!(e, to, "looked up under the stale endpoint");
        Ok(match c {
            c if c == translated_cookie || c == v6_cookie => Some(frontend),
            c if c == other_cookie => Some("10.96.0.99:53".parse().expect("literal")),
            _ => None,
        })
    };
    let namespace = Namespace { path: ns.path(), file: File::open(ns.path()).expect("open the namespace") };
    let stale = Stale::new(&[StaleUdpEndpoint { frontend, endpoint: to }], &[]);
    let mut errors = Vec::new();
    let ended = terminate_stale_udp(&[namespace], &stale, origin, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(ended, BTreeMap::from([(IpFamily::V4, 2)]), "the IPv4 socket and the v4-mapped IPv6 one");
    for socket in [&translated, &v6] {
        let error = socket.recv(&mut [0u8; 8]).expect_err("ended");
        assert_eq!(error.raw_os_error(), Some(nix::libc::ECONNABORTED), "{error}");
    }
    for socket in [&direct, &other_frontend] {
        socket.send(b"x").expect("still connected");
    }
}

#[test]
fn a_stale_frontend_matches_every_endpoint_and_a_stale_endpoint_only_its_frontends() {
    let a = |s: &str| s.parse::<SocketAddr>().expect("literal");
    let endpoint = StaleUdpEndpoint { frontend: a("10.96.0.53:53"), endpoint: a("10.244.1.5:8080") };
    let stale = Stale::new(&[endpoint], &[a("10.96.0.54:53")]);
    assert!(stale.matches(a("10.96.0.54:53"), a("10.244.9.9:1")), "any endpoint of a stale frontend");
    assert!(stale.matches(a("[::ffff:10.96.0.53]:53"), a("10.244.1.5:8080")), "v4-mapped is IPv4");
    assert!(!stale.matches(a("10.96.0.99:53"), a("10.244.1.5:8080")), "another frontend of the endpoint");
    assert!(!stale.matches(a("10.96.0.53:53"), a("10.244.1.6:8080")), "another endpoint of the frontend");
    assert!(!stale.candidate(a("0.0.0.0:0")), "an unconnected socket");
    assert_eq!(stale.families(), vec![IpFamily::V4, IpFamily::V6]);
    let only_endpoints = Stale::new(&[endpoint], &[]);
    assert!(!only_endpoints.candidate(a("10.244.1.6:8080")), "no lookup for sockets to other addresses");
    assert_eq!(Stale::new(&[], &[a("[fd00::53]:53")]).families(), vec![IpFamily::V6]);
    assert!(Stale::new(&[], &[]).is_empty());
}
