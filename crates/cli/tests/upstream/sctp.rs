//! SCTP on real packets without an SCTP stack: this kernel has netfilter's
//! SCTP conntrack and NAT but no SCTP sockets (`CONFIG_IP_SCTP` unset), so
//! a pod sends hand-made SCTP INIT chunks through a raw socket and every
//! candidate endpoint pod listens on a raw socket for what arrives after
//! node-a's DNAT: which pod, which destination port, which source address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use kproxy_sandbox::Netns;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::lab::Lab;

/// IANA protocol number of SCTP.
const IPPROTO_SCTP: i32 = 132;
/// `SOCK_RAW` (socket2 names it only with its "all" feature).
const SOCK_RAW: i32 = 3;
/// Source ports of the INITs start here, one port per INIT (one conntrack
/// entry, so one endpoint pick, each).
const FIRST_SOURCE_PORT: u16 = 41000;
/// How long receivers wait for the INITs.
const WAIT: Duration = Duration::from_millis(1500);

/// Every pod of the lab: where an INIT may land.
pub fn candidates(lab: &Lab) -> Vec<String> {
    lab.topo.pods().map(|p| p.name.clone()).collect()
}

/// CRC32c (Castagnoli), SCTP's checksum (RFC 9260, appendix A).
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

/// An SCTP packet holding one INIT chunk from `source_port` to `port`.
fn init(source_port: u16, port: u16) -> Vec<u8> {
    let mut packet = Vec::with_capacity(32);
    packet.extend(source_port.to_be_bytes());
    packet.extend(port.to_be_bytes());
    // Verification tag 0 (an INIT), checksum filled in below.
    packet.extend([0; 8]);
    // INIT: type 1, flags 0, length 20; initiate tag, a_rwnd, 1 outbound
    // and 1 inbound stream, initial TSN.
    packet.extend([1, 0, 0, 20]);
    packet.extend(0x1234_5678u32.to_be_bytes());
    packet.extend(65535u32.to_be_bytes());
    packet.extend([0, 1, 0, 1]);
    packet.extend(1u32.to_be_bytes());
    // The kernel (and conntrack, which checks it) stores the CRC little-endian.
    let crc = crc32c(&packet);
    packet[8..12].copy_from_slice(&crc.to_le_bytes());
    packet
}

fn raw_socket() -> Socket {
    Socket::new(Domain::IPV4, Type::from(SOCK_RAW), Some(Protocol::from(IPPROTO_SCTP))).expect("a raw SCTP socket")
}

/// The (source address, source port, destination port) of an IPv4 SCTP
/// packet as a raw socket returns it (IP header included).
fn parse(packet: &[u8]) -> Option<(Ipv4Addr, u16, u16)> {
    let header = usize::from(packet.first()? & 0x0f) * 4;
    let source = Ipv4Addr::new(*packet.get(12)?, *packet.get(13)?, *packet.get(14)?, *packet.get(15)?);
    let sctp = packet.get(header..header + 4)?;
    Some((source, u16::from_be_bytes([sctp[0], sctp[1]]), u16::from_be_bytes([sctp[2], sctp[3]])))
}

/// Receives INITs in `ns` until all `count` arrived (anywhere) or the wait
/// is over; records `(pod:port, source)` for each of ours.
fn receive(
    ns: &Netns,
    pod: &str,
    count: usize,
    ready: &Barrier,
    got: &AtomicUsize,
    seen: &Mutex<Vec<(String, IpAddr)>>,
) {
    ns.enter(|| {
        let socket = raw_socket();
        socket.set_read_timeout(Some(Duration::from_millis(50))).expect("a read timeout");
        ready.wait();
        let deadline = Instant::now() + WAIT;
        let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
        while Instant::now() < deadline && got.load(Ordering::SeqCst) < count {
            let Ok(n) = socket.recv(&mut buffer) else { continue };
            // SAFETY: recv initialised the first n bytes.
            let bytes: Vec<u8> = buffer[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
            let Some((source, source_port, port)) = parse(&bytes) else { continue };
            let ours = (FIRST_SOURCE_PORT..FIRST_SOURCE_PORT + count as u16).contains(&source_port);
            if ours {
                got.fetch_add(1, Ordering::SeqCst);
                seen.lock().expect("not poisoned").push((format!("{pod}:{port}"), IpAddr::V4(source)));
            }
        }
    });
}

/// Sends `count` INITs from `from` to `to` (IPv4), each from its own
/// source port, and returns where each arrived: `pod:port` and the source
/// address the pod saw.
pub fn spread(lab: &Lab, from: &Netns, to: SocketAddr, candidates: &[String], count: usize) -> Vec<(String, IpAddr)> {
    let SocketAddr::V4(to) = to else { panic!("SCTP probes are IPv4 only: {to}") };
    let ready = Barrier::new(candidates.len() + 1);
    let got = AtomicUsize::new(0);
    let seen = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for pod in candidates {
            let (ready, got, seen) = (&ready, &got, &seen);
            let ns = &lab.pod(pod).ns;
            scope.spawn(move || receive(ns, pod, count, ready, got, seen));
        }
        ready.wait();
        from.enter(|| {
            let socket = raw_socket();
            let target = SockAddr::from(SocketAddrV4::new(*to.ip(), 0));
            for i in 0..count as u16 {
                socket.send_to(&init(FIRST_SOURCE_PORT + i, to.port()), &target).expect("sending an INIT");
            }
        });
    });
    seen.into_inner().expect("not poisoned")
}

#[test]
fn crc32c_matches_the_rfc_check_value() {
    // RFC 3720, B.4: 32 bytes of zeros.
    assert_eq!(crc32c(&[0; 32]), 0x8A91_36AA);
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
}
