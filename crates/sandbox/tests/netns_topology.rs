//! Real-kernel tests of the sandbox itself: real packets through a fresh
//! [`Topology`] with no kproxy rules, so every backend sees the true source.
//! They need root and fail (never skip) when sandboxes are unavailable.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use kproxy_sandbox::addressing::{CLIENT_SOURCE_IPV4, NODE_A, NODE_B};
use kproxy_sandbox::{
    Backend, Netns, ProbeError, Reply, TcpSession, Topology, UdpFlow, available, tcp_request, udp_request,
};

const PORT: u16 = 8080;
const CLOSED_PORT: u16 = 9;
const TIMEOUT: Duration = Duration::from_secs(2);

fn topology() -> Topology {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {}", chain(&error));
    }
    Topology::new().unwrap_or_else(|error| panic!("building the topology failed: {}", chain(&error)))
}

fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// A topology with pods a1, a2 on node-a and b1 on node-b, each serving TCP and UDP on [`PORT`].
fn serving_topology() -> (Topology, Vec<Backend>) {
    let mut topology = topology();
    for (node, name) in [(1, "a1"), (1, "a2"), (2, "b1")] {
        topology.add_pod(node, name).expect("add pod");
    }
    let backends =
        topology.pods().map(|pod| Backend::start(&pod.ns, &pod.name, PORT, true, true).expect("backend")).collect();
    (topology, backends)
}

fn at(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

fn reply(backend: &str, peer: impl Into<IpAddr>) -> Reply {
    Reply { backend: backend.to_owned(), peer: peer.into() }
}

/// Asserts TCP and UDP from `ns` to `to` reach `backend`, which sees `peer`.
fn assert_reaches(ns: &Netns, to: SocketAddr, backend: &str, peer: impl Into<IpAddr> + Copy) {
    assert_eq!(tcp_request(ns, to, None, TIMEOUT), Ok(reply(backend, peer)), "TCP from {} to {to}", ns.name());
    assert_eq!(udp_request(ns, to, None, TIMEOUT), Ok(reply(backend, peer)), "UDP from {} to {to}", ns.name());
}

#[test]
fn pods_on_one_node_reach_each_other_in_both_families_and_see_the_true_source() {
    let (topology, backends) = serving_topology();
    let (a1, a2) = (topology.pod("a1").expect("a1"), topology.pod("a2").expect("a2"));
    assert_reaches(&a1.ns, at(a2.ipv4, PORT), "a2", a1.ipv4);
    assert_reaches(&a1.ns, at(a2.ipv6, PORT), "a2", a1.ipv6);
    assert_eq!(backends[1].requests(), 4);
}

#[test]
fn pods_reach_pods_on_the_other_node_through_the_router() {
    let (topology, _backends) = serving_topology();
    let (a1, b1) = (topology.pod("a1").expect("a1"), topology.pod("b1").expect("b1"));
    assert_reaches(&a1.ns, at(b1.ipv4, PORT), "b1", a1.ipv4);
    assert_reaches(&a1.ns, at(b1.ipv6, PORT), "b1", a1.ipv6);
    assert_reaches(&b1.ns, at(a1.ipv4, PORT), "a1", b1.ipv4);
    assert_reaches(&b1.ns, at(a1.ipv6, PORT), "a1", b1.ipv6);
}

#[test]
fn the_client_and_the_nodes_reach_pods() {
    let (topology, _backends) = serving_topology();
    let (a1, b1) = (topology.pod("a1").expect("a1"), topology.pod("b1").expect("b1"));
    assert_reaches(&topology.client, at(a1.ipv4, PORT), "a1", NODE_A.gateway_ipv4);
    assert_reaches(&topology.client, at(b1.ipv6, PORT), "b1", NODE_B.gateway_ipv6);
    // A node reaches its own pods from its bridge address, and the other node's through the router.
    assert_reaches(&topology.node.ns, at(a1.ipv4, PORT), "a1", NODE_A.bridge_ipv4);
    assert_reaches(&topology.node.ns, at(a1.ipv6, PORT), "a1", NODE_A.bridge_ipv6);
    assert_reaches(&topology.node.ns, at(b1.ipv4, PORT), "b1", NODE_A.ipv4);
    assert_reaches(&topology.node_b.ns, at(a1.ipv6, PORT), "a1", NODE_B.ipv6);
}

#[test]
fn the_client_source_address_on_lo_reaches_a_pod_and_is_routed_back() {
    let (topology, _backends) = serving_topology();
    let (a1, b1) = (topology.pod("a1").expect("a1"), topology.pod("b1").expect("b1"));
    let from = Some(IpAddr::V4(CLIENT_SOURCE_IPV4));
    for pod in [a1, b1] {
        assert_eq!(
            tcp_request(&topology.client, at(pod.ipv4, PORT), from, TIMEOUT),
            Ok(reply(&pod.name, CLIENT_SOURCE_IPV4))
        );
        assert_eq!(
            udp_request(&topology.client, at(pod.ipv4, PORT), from, TIMEOUT),
            Ok(reply(&pod.name, CLIENT_SOURCE_IPV4))
        );
    }
}

#[test]
fn a_tcp_session_serves_several_requests_on_one_connection() {
    let (topology, backends) = serving_topology();
    let (a1, b1) = (topology.pod("a1").expect("a1"), topology.pod("b1").expect("b1"));
    let mut session = TcpSession::open(&a1.ns, at(b1.ipv6, PORT), TIMEOUT).expect("connect");
    let local = session.local_addr().expect("local address");
    for _ in 0..5 {
        assert_eq!(session.request(), Ok(reply("b1", a1.ipv6)));
    }
    assert_eq!(session.local_addr().expect("local address"), local);
    assert_eq!(backends[2].requests(), 5);
}

#[test]
fn a_udp_flow_keeps_its_local_port_across_requests() {
    let (topology, _backends) = serving_topology();
    let (a1, b1) = (topology.pod("a1").expect("a1"), topology.pod("b1").expect("b1"));
    let mut flow = UdpFlow::open(&b1.ns, at(a1.ipv4, PORT), TIMEOUT).expect("open");
    let local = flow.local_addr().expect("local address");
    for _ in 0..5 {
        assert_eq!(flow.request(), Ok(reply("a1", b1.ipv4)));
        assert_eq!(flow.local_addr().expect("local address"), local);
    }
}

#[test]
fn closed_ports_are_refused_over_tcp_and_udp() {
    let (topology, _backends) = serving_topology();
    let (a1, b1) = (topology.pod("a1").expect("a1"), topology.pod("b1").expect("b1"));
    for to in [at(b1.ipv4, CLOSED_PORT), at(b1.ipv6, CLOSED_PORT)] {
        assert_eq!(tcp_request(&a1.ns, to, None, TIMEOUT), Err(ProbeError::Refused), "TCP to {to}");
        assert_eq!(udp_request(&a1.ns, to, None, TIMEOUT), Err(ProbeError::Refused), "UDP to {to}");
    }
}

#[test]
fn a_silent_udp_port_times_out_within_the_timeout() {
    let mut topology = topology();
    topology.add_pod(1, "quiet").expect("add pod");
    let pod = topology.pod("quiet").expect("quiet");
    // A bound socket that never answers: no port-unreachable, no reply.
    let _silent = pod.ns.enter(|| std::net::UdpSocket::bind("0.0.0.0:7000")).expect("bind");
    let started = std::time::Instant::now();
    let timeout = Duration::from_millis(300);
    assert_eq!(udp_request(&topology.client, at(pod.ipv4, 7000), None, timeout), Err(ProbeError::TimedOut));
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
}

#[test]
fn a_backend_answers_http_get_with_one_response_and_closes() {
    let (topology, _backends) = serving_topology();
    let a1 = topology.pod("a1").expect("a1");
    let to = at(a1.ipv4, PORT);
    let mut stream = topology.client.enter(|| TcpStream::connect_timeout(&to, TIMEOUT)).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    stream.write_all(b"GET / HTTP/1.1\r\nHost: a1\r\nUser-Agent: test\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read until close");
    let body = format!("a1 {}\n", NODE_A.gateway_ipv4);
    assert!(response.starts_with("HTTP/1.0 200 OK\r\n"), "{response:?}");
    assert!(response.ends_with(&format!("\r\n\r\n{body}")), "{response:?}");
    assert!(response.contains(&format!("Content-Length: {}\r\n", body.len())), "{response:?}");
}

#[test]
fn a_udp_backend_on_a_node_answers_from_the_address_it_was_asked_on() {
    let topology = topology();
    // node-a owns 192.168.77.1 and 10.244.1.1; the route back to the client
    // would pick 192.168.77.1 whichever was asked, so only PKTINFO gets this right.
    topology.node.ns.ip(&["addr", "add", "198.51.100.7/32", "dev", "lo"]).expect("add VIP");
    let _backend = Backend::start(&topology.node.ns, "node-a", PORT, false, true).expect("backend");
    for ip in ["198.51.100.7", "10.244.1.1", "192.168.77.1"] {
        let to = at(ip.parse::<IpAddr>().expect("literal"), PORT);
        assert_eq!(
            udp_request(&topology.client, to, None, TIMEOUT),
            Ok(reply("node-a", NODE_A.gateway_ipv4)),
            "to {to}"
        );
    }
}

#[test]
fn sysctls_and_links_are_ready_for_tests() {
    let mut topology = topology();
    topology.add_pod(2, "p").expect("add pod");
    let pod = topology.pod("p").expect("p");
    let read = |ns: &Netns, key: &str| ns.exec("sysctl", &["-n", key]).expect("sysctl").trim().to_owned();
    assert_eq!(read(&pod.ns, "net.ipv4.ip_forward"), "0");
    assert_eq!(read(&pod.ns, "net.ipv4.conf.all.send_redirects"), "0");
    let routers = [&topology.client, &topology.node.ns, &topology.node_b.ns];
    for ns in routers {
        assert_eq!(read(ns, "net.ipv4.ip_forward"), "1", "{}", ns.name());
        assert_eq!(read(ns, "net.ipv6.conf.all.forwarding"), "1", "{}", ns.name());
        assert_eq!(read(ns, "net.ipv4.conf.all.send_redirects"), "0", "{}", ns.name());
    }
    for ns in [&topology.node.ns, &topology.node_b.ns] {
        assert_eq!(read(ns, "net.bridge.bridge-nf-call-iptables"), "1", "{}", ns.name());
        assert_eq!(read(ns, "net.bridge.bridge-nf-call-ip6tables"), "1", "{}", ns.name());
    }
    let hairpin = topology.node_b.ns.ip_output(&["-d", "link", "show", &pod.host_interface]).expect("link");
    assert!(hairpin.contains("hairpin on"), "{hairpin}");
    let everything = routers.into_iter().chain([&pod.ns]);
    for ns in everything {
        let addresses = ns.ip_output(&["-6", "addr"]).expect("addresses");
        assert!(!addresses.contains("tentative"), "{}: {addresses}", ns.name());
    }
}

#[test]
fn spawned_processes_run_inside_with_their_real_pid() {
    let topology = topology();
    let mut command = Command::new("sleep");
    command.arg("600").stdout(Stdio::piped());
    let sleeper = topology.node.ns.spawn(command).expect("spawn");
    assert!(sleeper.stdout.is_some(), "piped stdout is handed back");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", sleeper.pid())).expect("cmdline");
    assert_eq!(cmdline, b"sleep\x00600\x00");
    let inode = |path: &str| std::fs::metadata(path).expect("stat").ino();
    assert_eq!(inode(&format!("/proc/{}/ns/net", sleeper.pid())), inode(&topology.node.ns.path().to_string_lossy()));
    assert_eq!(sleeper.wait_with_timeout(Duration::from_millis(50)).expect("wait"), None);
    assert!(!sleeper.kill().expect("kill").success());
}

#[test]
fn dropping_the_topology_deletes_its_namespaces_and_kills_its_processes() {
    let mut topology = topology();
    topology.add_pod(1, "gone-a").expect("add pod");
    topology.add_pod(2, "gone-b").expect("add pod");
    let names = topology.netns_names();
    assert_eq!(names.len(), 5);
    let mut sleep = Command::new("sleep");
    sleep.arg("600");
    let pid = topology.client.spawn(sleep).expect("spawn").pid();
    // A grandchild, which Netns never saw: the teardown must find it in the namespace.
    let mut shell = Command::new("sh");
    shell.args(["-c", "sleep 600 & echo $!; wait"]).stdout(Stdio::piped());
    let mut parent = topology.pod("gone-b").expect("pod").ns.spawn(shell).expect("spawn");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(parent.stdout.take().expect("piped")), &mut line)
        .expect("grandchild pid");
    let grandchild: u32 = line.trim().parse().expect("a pid");
    for name in &names {
        assert!(Path::new("/run/netns").join(name).exists(), "{name} exists before drop");
    }

    drop(topology);

    for name in &names {
        assert!(!Path::new("/run/netns").join(name).exists(), "{name} still exists after drop");
    }
    for pid in [pid, parent.pid(), grandchild] {
        assert!(!is_alive(pid), "process {pid} survived the drop");
    }
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"))
}

#[test]
fn pods_are_checked_for_their_node_and_a_unique_name() {
    let mut topology = topology();
    topology.add_pod(1, "web").expect("add pod");
    assert!(matches!(topology.add_pod(1, "web"), Err(kproxy_sandbox::SandboxError::DuplicatePod { .. })));
    assert!(matches!(topology.add_pod(3, "db"), Err(kproxy_sandbox::SandboxError::UnknownNode { index: 3 })));
    let second = topology.add_pod(1, "web-2").expect("add pod");
    assert_eq!((second.ipv4, second.ipv6), (NODE_A.pod_ipv4(11), NODE_A.pod_ipv6(11)));
}
