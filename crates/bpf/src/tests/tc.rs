//! tc NAT: client netns -- veth -- node netns (programs on the node's
//! client-facing veth) -- veth -- backend netns. Connections to a node
//! port on the node are DNATed to the backend on ingress and the replies'
//! source rewritten back on egress.

use std::net::SocketAddr;
use std::time::Duration;

use kproxy_ebpf::maps::{
    Backend as MapBackend, CidrKey, Config, Op, RangeKey, Selection, addr16, config_flags, flags, verdict,
};
use kproxy_sandbox::{Backend, Netns, ProbeError, UdpFlow, tcp_request, udp_request};

use super::sock::Cleanup;
use super::support::{Bpffs, TCP, UDP, fkey, kernel_available, service, verdict_frontend, wait_ready};
use crate::Datapath;

const TIMEOUT: Duration = Duration::from_secs(2);
const SHORT: Duration = Duration::from_millis(700);

struct Fixture {
    _cleanup: Cleanup,
    datapath: Datapath,
    _bpffs: Bpffs,
    _backend: Backend,
    port: u16,
    client: Netns,
    node: Netns,
    server: Netns,
}

fn veth(ns: &Netns, name: &str, peer: &Netns, peer_name: &str) {
    ns.ip(&["link", "add", name, "type", "veth", "peer", "name", peer_name, "netns", peer.name()]).expect("veth");
    ns.ip(&["link", "set", name, "up"]).expect("link up");
    peer.ip(&["link", "set", peer_name, "up"]).expect("peer up");
}

fn address(ns: &Netns, dev: &str, v4: &str, v6: &str) {
    ns.ip(&["addr", "add", v4, "dev", dev]).expect("v4 address");
    ns.ip(&["addr", "add", v6, "dev", dev, "nodad"]).expect("v6 address");
}

fn fixture() -> Fixture {
    let client = Netns::new("bpftcc").expect("client netns");
    let node = Netns::new("bpftcn").expect("node netns");
    let server = Netns::new("bpftcs").expect("backend netns");
    veth(&node, "n0", &client, "c0");
    veth(&node, "n1", &server, "b0");
    address(&client, "c0", "10.0.1.2/24", "fd00:1::2/64");
    address(&node, "n0", "10.0.1.1/24", "fd00:1::1/64");
    address(&node, "n1", "10.0.2.1/24", "fd00:2::1/64");
    address(&server, "b0", "10.0.2.2/24", "fd00:2::2/64");
    for (ns, v4, v6) in [(&client, "10.0.1.1", "fd00:1::1"), (&server, "10.0.2.1", "fd00:2::1")] {
        ns.ip(&["route", "add", "default", "via", v4]).expect("v4 default route");
        ns.ip(&["-6", "route", "add", "default", "via", v6]).expect("v6 default route");
    }
    wait_ready(&client, &["c0"]);
    wait_ready(&node, &["n0", "n1"]);
    wait_ready(&server, &["b0"]);
    node.sysctl("net.ipv4.ip_forward", "1").expect("forwarding");
    node.sysctl("net.ipv6.conf.all.forwarding", "1").expect("v6 forwarding");
    let backend = Backend::start(&server, "b1", 0, true, true).expect("a backend");
    let port = backend.port();
    let bpffs = Bpffs::mount();
    let cleanup = Cleanup(bpffs.pin_dir());
    let mut datapath = Datapath::load(&bpffs.pin_dir()).expect("load the datapath");
    node.enter(|| datapath.attach_tc("n0")).expect("attach to n0");
    let mut ops = Vec::new();
    ops.extend(service(("10.0.1.1", 30080, TCP), 1, &[("10.0.2.2", port)], 1));
    ops.extend(service(("10.0.1.1", 30080, UDP), 2, &[("10.0.2.2", port)], 2));
    ops.extend(service(("fd00:1::1", 30080, TCP), 3, &[("fd00:2::2", port)], 3));
    ops.extend(service(("fd00:1::1", 30080, UDP), 4, &[("fd00:2::2", port)], 4));
    ops.push(verdict_frontend(fkey("10.0.1.1", 30081, TCP), verdict::DROP, 0, 5));
    datapath.apply(&ops).expect("write the services");
    Fixture { _cleanup: cleanup, datapath, _bpffs: bpffs, _backend: backend, port, client, node, server }
}

fn at(s: &str) -> SocketAddr {
    s.parse().expect("a literal address")
}

#[test]
fn tcp_and_udp_to_a_node_port_reach_the_backend_and_replies_come_from_the_node_port() {
    if !kernel_available("tc nat") {
        return;
    }
    let f = fixture();
    for (frontend, client_ip) in [("10.0.1.1:30080", "10.0.1.2"), ("[fd00:1::1]:30080", "fd00:1::2")] {
        // TCP completes only if the SYN-ACK's source was rewritten back to
        // the node port; a connected UDP socket only accepts a reply from it.
        let reply = tcp_request(&f.client, at(frontend), None, TIMEOUT).expect(frontend);
        assert_eq!((reply.backend.as_str(), reply.peer), ("b1", client_ip.parse().expect("ip")), "tcp {frontend}");
        let reply = udp_request(&f.client, at(frontend), None, TIMEOUT).expect(frontend);
        assert_eq!((reply.backend.as_str(), reply.peer), ("b1", client_ip.parse().expect("ip")), "udp {frontend}");
    }
}

#[test]
fn a_drop_frontend_and_a_source_outside_the_ranges_are_dropped_on_tc() {
    if !kernel_available("tc drop") {
        return;
    }
    let mut f = fixture();
    let got = tcp_request(&f.client, at("10.0.1.1:30081"), None, SHORT);
    assert_eq!(got.map(|_| ()), Err(ProbeError::TimedOut), "DROP");

    // A frontend allowing only 192.168.0.0/16 drops the client...
    let mut ops = service(("10.0.1.1", 30082, TCP), 6, &[("10.0.2.2", f.port)], 7);
    if let Some(Op::PutFrontend(_, fe)) = ops.last_mut() {
        fe.flags |= flags::SOURCE_RANGES;
    }
    let range = |ip: &str, bits: u32| RangeKey {
        prefixlen: 32 + 96 + bits,
        id: 7u32.to_be(),
        addr: addr16(ip.parse().expect("ip")),
    };
    ops.push(Op::PutSourceRange(range("192.168.0.0", 16)));
    f.datapath.apply(&ops).expect("a frontend with source ranges");
    let got = tcp_request(&f.client, at("10.0.1.1:30082"), None, SHORT);
    assert_eq!(got.map(|_| ()), Err(ProbeError::TimedOut), "outside the ranges");
    // ...until its range is added.
    f.datapath.apply(&[Op::PutSourceRange(range("10.0.1.0", 24))]).expect("add the client's range");
    let reply = tcp_request(&f.client, at("10.0.1.1:30082"), None, TIMEOUT).expect("inside the ranges");
    assert_eq!(reply.backend, "b1");
}

#[test]
fn masquerade_hairpin_and_reject_marks_drive_the_companion_nftables_rules() {
    if !kernel_available("tc marks") {
        return;
    }
    let mut f = fixture();
    let config = Config { masquerade_mark: 0x4000, reject_mark: 0x8000, ..Config::default() };
    f.datapath.write_config(config).expect("config");
    let mut ops = service(("10.0.1.1", 30090, TCP), 9, &[("10.0.2.2", f.port)], 9);
    if let Some(Op::PutFrontend(_, fe)) = ops.last_mut() {
        fe.flags |= flags::MASQ_EXTERNAL;
    }
    ops.push(verdict_frontend(fkey("10.0.1.1", 30091, TCP), verdict::REJECT, 0, 10));
    // Hairpin: the client is the backend. Only masquerade makes the reply
    // come back through the node (and so from the node port).
    let hairpin = Backend::start(&f.client, "bc", 0, true, false).expect("a backend in the client");
    ops.extend(service(("10.0.1.1", 30095, TCP), 13, &[("10.0.1.2", hairpin.port())], 13));
    f.datapath.apply(&ops).expect("services");
    // Stand-ins for the companion table: masquerade on the mark, and drop
    // (so that it differs from the node's own RST) on the reject mark.
    let rules = "table ip kpmarks {
        chain post { type nat hook postrouting priority srcnat; meta mark & 0x4000 == 0x4000 masquerade; }
        chain input { type filter hook input priority 0; meta mark & 0x8000 == 0x8000 drop; }
    }";
    let file = tempfile::NamedTempFile::new().expect("a rules file");
    std::fs::write(file.path(), rules).expect("write the rules");
    f.node.exec("nft", &["-f", &file.path().display().to_string()]).expect("load the rules");

    let masqueraded = tcp_request(&f.client, at("10.0.1.1:30090"), None, TIMEOUT).expect("masqueraded");
    assert_eq!(masqueraded.peer, "10.0.2.1".parse::<std::net::IpAddr>().expect("ip"), "the node's address");
    let plain = tcp_request(&f.client, at("10.0.1.1:30080"), None, TIMEOUT).expect("not masqueraded");
    assert_eq!(plain.peer, "10.0.1.2".parse::<std::net::IpAddr>().expect("ip"), "the client's address");
    let hairpinned = tcp_request(&f.client, at("10.0.1.1:30095"), None, TIMEOUT).expect("hairpin");
    assert_eq!(hairpinned.backend, "bc");
    assert_eq!(hairpinned.peer, "10.0.1.1".parse::<std::net::IpAddr>().expect("ip"), "masqueraded to the node");
    let rejected = tcp_request(&f.client, at("10.0.1.1:30091"), None, SHORT);
    assert_eq!(rejected.map(|_| ()), Err(ProbeError::TimedOut), "the reject mark was set");
}

#[test]
fn the_local_detector_gives_local_sources_the_internal_selection() {
    if !kernel_available("tc local") {
        return;
    }
    let mut f = fixture();
    let config = Config { flags: config_flags::LOCAL_DETECTOR, ..Config::default() };
    f.datapath.write_config(config).expect("config");
    // Internal: forward; external: drop.
    let mut ops = service(("10.0.1.1", 30085, TCP), 11, &[("10.0.2.2", f.port)], 11);
    if let Some(Op::PutFrontend(_, fe)) = ops.last_mut() {
        fe.external = Selection { group: 0, count: 0, verdict: verdict::DROP, sched: 0 };
    }
    let cidr = CidrKey { prefixlen: 96 + 24, addr: addr16("10.0.1.0".parse().expect("ip")) };
    ops.push(Op::PutLocalCidr(cidr));
    f.datapath.apply(&ops).expect("services");
    let reply = tcp_request(&f.client, at("10.0.1.1:30085"), None, TIMEOUT).expect("a local source");
    assert_eq!(reply.backend, "b1");
    f.datapath.apply(&[Op::DeleteLocalCidr(cidr)]).expect("forget the cidr");
    let got = tcp_request(&f.client, at("10.0.1.1:30085"), None, SHORT);
    assert_eq!(got.map(|_| ()), Err(ProbeError::TimedOut), "an external source is dropped");
}

#[test]
fn forgetting_the_flows_to_a_removed_udp_endpoint_moves_a_live_flow_to_a_current_one() {
    if !kernel_available("tc forget") {
        return;
    }
    let mut f = fixture();
    let second = Backend::start(&f.server, "b2", 0, false, true).expect("a second backend");
    let mut flow = UdpFlow::open(&f.client, at("10.0.1.1:30080"), TIMEOUT).expect("a udp flow");
    assert_eq!(flow.request().expect("first request").backend, "b1");
    // The endpoint goes: a new group with only b2, then its flows go.
    f.datapath.apply(&service(("10.0.1.1", 30080, UDP), 12, &[("10.0.2.2", second.port())], 2)).expect("repoint");
    assert_eq!(flow.request().expect("the flow keeps its backend").backend, "b1");
    let old = MapBackend { addr: addr16("10.0.2.2".parse().expect("ip")), port: f.port.to_be(), pad: 0 };
    let forgotten = f.datapath.forget_flows(&fkey("10.0.1.1", 30080, UDP), &old).expect("forget");
    assert_eq!(forgotten, 1);
    assert_eq!(flow.request().expect("after forgetting").backend, "b2");
    // A frontend that goes: its flows go whatever their backend.
    assert_eq!(f.datapath.forget_frontend_flows(&fkey("10.0.1.1", 30080, UDP)).expect("forget all"), 1);
    assert_eq!(f.datapath.forget_frontend_flows(&fkey("10.0.1.1", 30080, UDP)).expect("forget all"), 0, "none left");
    assert_eq!(flow.request().expect("a new flow").backend, "b2");
}

#[test]
fn an_ipv4_udp_datagram_without_a_checksum_is_translated_and_still_delivered() {
    if !kernel_available("tc udp csum 0") {
        return;
    }
    let f = fixture();
    let reply = f.client.enter(|| -> std::io::Result<String> {
        use std::os::fd::AsRawFd;
        let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
        let on: libc::c_int = 1;
        // SAFETY: SO_NO_CHECK takes an int; `on` lives across the call.
        let ret = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NO_CHECK,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if ret != 0 {
            return Err(std::io::Error::last_os_error());
        }
        socket.set_read_timeout(Some(TIMEOUT))?;
        socket.connect("10.0.1.1:30080")?;
        socket.send(b"hello\n")?;
        let mut buf = [0u8; 256];
        let n = socket.recv(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    });
    // A checksum made non-zero by the rewrite would be wrong, and dropped.
    assert!(reply.expect("a reply").starts_with("b1 "));
}
