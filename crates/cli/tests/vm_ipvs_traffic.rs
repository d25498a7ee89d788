//! kproxy's IPVS mode carrying real connections, in the IPVS VM (this
//! machine's kernel has no IPVS): the kproxy binary runs `--proxy-mode
//! ipvs` in node-a of the sandbox topology inside the guest, and each test
//! checks what the backends saw (which one answered, from which source)
//! and what the clients got (an answer, a refusal, silence). The scenarios
//! mirror `netns_nftables.rs`. Each test boots the VM and fails when it
//! cannot; the guest's CPU is slow, so request counts stay small.

mod lab;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use kproxy_model::Protocol;
use kproxy_sandbox::{Netns, ProbeError, UdpFlow};
use kproxy_testkit::vm;
use lab::*;

/// How long a probe waits before calling silence a drop, in the slow guest.
const SILENCE: Duration = Duration::from_millis(1500);

const WEB: &str =
    "  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

/// web in both families.
const DUAL_WEB: &str = "  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

/// Boots the VM with the kproxy binary in the payload and runs test `name` there.
fn in_vm(name: &str) {
    vm::run_test_with(name, &[(Path::new(env!("CARGO_BIN_EXE_kproxy")), "kproxy")]);
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A lab with `pods` and the `manifests` (file, yaml), kproxy running in
/// ipvs mode in node-a after its first sync.
fn ipvs_lab(pods: &[(u8, &str)], manifests: &[(&str, String)]) -> Lab {
    let mut lab = Lab::new(pods);
    for (file, yaml) in manifests {
        lab.write(file, yaml);
    }
    lab.start_in("ipvs", &[]);
    lab
}

fn answers(lab: &Lab, from: &Netns, to: &str, protocol: Protocol) -> bool {
    matches!(lab.request(from, to, protocol, None), Outcome::Answered { .. })
}

/// Waits until `to` answers `from`: the first sync may still be settling.
fn wait_for(lab: &Lab, from: &Netns, to: &str, protocol: Protocol) {
    lab.eventually(&format!("{to}/{protocol} to answer {}", from.name()), || answers(lab, from, to, protocol));
}

/// One probe that must get no answer at all (dropped, not refused).
fn silence(from: &Netns, to: &str, source: Option<IpAddr>) -> Result<kproxy_sandbox::Reply, ProbeError> {
    kproxy_sandbox::tcp_request(from, to.parse().unwrap(), source, SILENCE)
}

/// The distinct outcomes of `count` requests.
fn outcomes(lab: &Lab, from: &Netns, to: &str, protocol: Protocol, count: usize) -> Vec<Outcome> {
    lab.spread(from, to, protocol, count).into_keys().collect()
}

#[test]
fn a_cluster_ip_reaches_both_endpoints_from_a_pod_unmasqueraded_in_both_families() {
    if !vm::in_guest() {
        return in_vm("a_cluster_ip_reaches_both_endpoints_from_a_pod_unmasqueraded_in_both_families");
    }
    let lab = ipvs_lab(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")], &[("web.yaml", service("web", DUAL_WEB))]);
    let client = lab.pod("client-a1");
    wait_for(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp);
    // rr: ten connections alternate between the two endpoints.
    assert_eq!(
        outcomes(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp, 10),
        [answered("web-a1", client.ipv4), answered("web-b1", client.ipv4)]
    );
    wait_for(&lab, &client.ns, "[fd00:96::10]:80", Protocol::Tcp);
    assert_eq!(
        outcomes(&lab, &client.ns, "[fd00:96::10]:80", Protocol::Tcp, 10),
        [answered("web-a1", client.ipv6), answered("web-b1", client.ipv6)]
    );
}

#[test]
fn a_cluster_ip_reaches_both_endpoints_from_the_node_and_from_outside_masqueraded() {
    if !vm::in_guest() {
        return in_vm("a_cluster_ip_reaches_both_endpoints_from_the_node_and_from_outside_masqueraded");
    }
    let lab = ipvs_lab(&[(1, "web-a1"), (2, "web-b1")], &[("web.yaml", service("web", DUAL_WEB))]);
    // Masqueraded to node-a's address on the way to each endpoint: the
    // bridge's towards its own pods, the uplink's towards node-b.
    let via_node = [answered("web-a1", ip("10.244.1.1")), answered("web-b1", ip("192.168.77.1"))];
    wait_for(&lab, lab.node(), "10.96.0.10:80", Protocol::Tcp);
    assert_eq!(outcomes(&lab, lab.node(), "10.96.0.10:80", Protocol::Tcp, 10), via_node, "from node-a");
    // 192.168.77.100 and fd00:77::100 are outside --cluster-cidr.
    wait_for(&lab, lab.client(), "10.96.0.10:80", Protocol::Tcp);
    assert_eq!(outcomes(&lab, lab.client(), "10.96.0.10:80", Protocol::Tcp, 10), via_node, "from outside");
    assert_eq!(outcomes(&lab, lab.client(), "[fd00:96::10]:80", Protocol::Tcp, 10), via_node_v6(), "over IPv6");
}

/// What an endpoint on each node sees of a connection masqueraded by node-a over IPv6.
fn via_node_v6() -> [Outcome; 2] {
    [answered("web-a1", ip("fd00:10:244:1::1")), answered("web-b1", ip("fd00:77::1"))]
}

#[test]
fn a_node_port_answers_outside_clients_masqueraded_and_the_node_itself() {
    if !vm::in_guest() {
        return in_vm("a_node_port_answers_outside_clients_masqueraded_and_the_node_itself");
    }
    let web = "  type: NodePort\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: web}\n  ports:\n  - {name: http, port: 80, targetPort: http, nodePort: 30080}\n  - {name: u, port: 80, protocol: UDP, targetPort: 8080, nodePort: 30080}\n";
    let lab = ipvs_lab(&[(1, "web-a1"), (2, "web-b1")], &[("web.yaml", service("web", web))]);
    wait_for(&lab, lab.client(), "192.168.77.1:30080", Protocol::Tcp);
    let via_node = [answered("web-a1", ip("10.244.1.1")), answered("web-b1", ip("192.168.77.1"))];
    for protocol in [Protocol::Tcp, Protocol::Udp] {
        let v4 = outcomes(&lab, lab.client(), "192.168.77.1:30080", protocol, 10);
        assert_eq!(v4, via_node, "from outside, {protocol}");
        let v6 = outcomes(&lab, lab.client(), "[fd00:77::1]:30080", protocol, 10);
        assert_eq!(v6, via_node_v6(), "from outside over IPv6, {protocol}");
    }
    let from_node = lab.spread(lab.node(), "192.168.77.1:30080", Protocol::Tcp, 10);
    assert_eq!(backends(&from_node), ["web-a1", "web-b1"], "from node-a: {from_node:?}");
}

/// shop: a LoadBalancer service at 198.51.100.20 with external IP
/// 198.51.100.30 (both routed to node-a by the client), node port 30443.
fn shop(policy: &str, ranges: &str) -> String {
    format!(
        "{}status:\n  loadBalancer:\n    ingress: [{{ip: 198.51.100.20}}]\n",
        service(
            "shop",
            &format!(
                "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {{app: shop}}\n  externalTrafficPolicy: {policy}\n  externalIPs: [198.51.100.30]\n{ranges}  ports: [{{name: https, port: 443, targetPort: http, nodePort: 30443}}]\n"
            )
        )
    )
}

#[test]
fn external_and_load_balancer_ips_are_served_and_source_ranges_drop_other_sources() {
    if !vm::in_guest() {
        return in_vm("external_and_load_balancer_ips_are_served_and_source_ranges_drop_other_sources");
    }
    let ranges = "  loadBalancerSourceRanges: [203.0.113.0/24]\n";
    let lab = ipvs_lab(&[(1, "shop-a1"), (2, "shop-b1")], &[("shop.yaml", shop("Cluster", ranges))]);
    let client = lab.client();
    let allowed = Some(ip("203.0.113.9"));
    lab.eventually("an allowed source", || {
        matches!(lab.request(client, "198.51.100.20:443", Protocol::Tcp, allowed), Outcome::Answered { .. })
    });
    let spread: BTreeSet<String> = (0..6)
        .map(|_| match lab.request(client, "198.51.100.20:443", Protocol::Tcp, allowed) {
            Outcome::Answered { backend, .. } => backend,
            other => panic!("an allowed source to the LB IP: {other:?}"),
        })
        .collect();
    assert_eq!(spread, BTreeSet::from(["shop-a1".into(), "shop-b1".into()]));
    // 192.168.77.100 is not in the ranges: silence, not a refusal.
    assert!(matches!(silence(client, "198.51.100.20:443", None), Err(ProbeError::TimedOut)), "denied source");
    // The ranges guard the load-balancer IP only.
    assert_eq!(
        backends(&lab.spread(client, "198.51.100.30:443", Protocol::Tcp, 6)),
        ["shop-a1", "shop-b1"],
        "the external IP"
    );
    assert!(answers(&lab, client, "192.168.77.1:30443", Protocol::Tcp), "the node port");
}

#[test]
fn external_policy_local_keeps_the_client_address_and_sends_outsiders_to_the_local_endpoint_only() {
    if !vm::in_guest() {
        return in_vm("external_policy_local_keeps_the_client_address_and_sends_outsiders_to_the_local_endpoint_only");
    }
    let pods = [(1, "shop-a1"), (2, "shop-b1"), (1, "client-a1")];
    let lab = ipvs_lab(&pods, &[("shop.yaml", shop("Local", ""))]);
    wait_for(&lab, lab.client(), "198.51.100.20:443", Protocol::Tcp);
    let outside = ip("192.168.77.100");
    for to in ["198.51.100.20:443", "198.51.100.30:443", "192.168.77.1:30443"] {
        assert_eq!(outcomes(&lab, lab.client(), to, Protocol::Tcp, 6), [answered("shop-a1", outside)], "{to}");
    }
    // Pods of the cluster reach every endpoint, unmasqueraded.
    let client = lab.pod("client-a1");
    assert_eq!(
        outcomes(&lab, &client.ns, "198.51.100.20:443", Protocol::Tcp, 6),
        [answered("shop-a1", client.ipv4), answered("shop-b1", client.ipv4)]
    );
}

#[test]
fn external_policy_local_without_a_local_endpoint_drops_outside_traffic() {
    if !vm::in_guest() {
        return in_vm("external_policy_local_without_a_local_endpoint_drops_outside_traffic");
    }
    let lab = ipvs_lab(&[(2, "shop-b1")], &[("shop.yaml", shop("Local", ""))]);
    // The cluster IP still reaches node-b's endpoint: the service is live.
    wait_for(&lab, lab.client(), "10.96.0.20:443", Protocol::Tcp);
    for to in ["198.51.100.20:443", "198.51.100.30:443", "192.168.77.1:30443"] {
        let outcome = silence(lab.client(), to, None);
        assert!(matches!(outcome, Err(ProbeError::TimedOut)), "{to}: dropped, got {outcome:?}");
    }
}

/// SEMANTICS.md ("Choosing endpoints", 4): pods and the node reach an
/// external frontend of an `externalTrafficPolicy: Local` service through
/// the cluster endpoints, as the nftables mode does: the companion DNATs
/// them to the cluster IP, whose virtual server holds every endpoint.
#[test]
fn external_policy_local_without_a_local_endpoint_still_serves_pods_and_the_node() {
    if !vm::in_guest() {
        return in_vm("external_policy_local_without_a_local_endpoint_still_serves_pods_and_the_node");
    }
    let lab = ipvs_lab(&[(2, "shop-b1"), (1, "client-a1")], &[("shop.yaml", shop("Local", ""))]);
    let client = lab.pod("client-a1");
    wait_for(&lab, &client.ns, "10.96.0.20:443", Protocol::Tcp);
    assert_eq!(lab.request(&client.ns, "198.51.100.20:443", Protocol::Tcp, None), answered("shop-b1", client.ipv4));
    assert_eq!(lab.request(&client.ns, "192.168.77.1:30443", Protocol::Tcp, None), answered("shop-b1", client.ipv4));
    // The node is masqueraded (to its uplink address, towards node-b).
    for to in ["198.51.100.20:443", "192.168.77.1:30443"] {
        assert_eq!(lab.request(lab.node(), to, Protocol::Tcp, None), answered("shop-b1", ip("192.168.77.1")), "{to}");
    }
    // Outsiders are still dropped.
    assert!(matches!(silence(lab.client(), "198.51.100.20:443", None), Err(ProbeError::TimedOut)));
}

#[test]
fn internal_policy_local_reaches_only_the_local_endpoint() {
    if !vm::in_guest() {
        return in_vm("internal_policy_local_reaches_only_the_local_endpoint");
    }
    let web = format!("{WEB}  internalTrafficPolicy: Local\n");
    let lab = ipvs_lab(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")], &[("web.yaml", service("web", &web))]);
    let client = lab.pod("client-a1");
    wait_for(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp);
    assert_eq!(outcomes(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp, 10), [answered("web-a1", client.ipv4)]);
}

#[test]
fn no_endpoints_refuses_tcp_and_udp_and_an_unserved_cluster_ip_port_is_refused() {
    if !vm::in_guest() {
        return in_vm("no_endpoints_refuses_tcp_and_udp_and_an_unserved_cluster_ip_port_is_refused");
    }
    let empty =
        "  clusterIP: 10.96.0.30\n  ports: [{name: t, port: 80, protocol: TCP}, {name: u, port: 53, protocol: UDP}]\n";
    let manifests = [("web.yaml", service("web", WEB)), ("empty.yaml", service("empty", empty))];
    let lab = ipvs_lab(&[(1, "web-a1"), (1, "client-a1")], &manifests);
    let client = &lab.pod("client-a1").ns;
    wait_for(&lab, client, "10.96.0.10:80", Protocol::Tcp);
    let fast = |to: &str, protocol: Protocol, from: &Netns| {
        let started = Instant::now();
        let outcome = lab.request(from, to, protocol, None);
        assert_eq!(outcome, Outcome::Refused, "{to}/{protocol} from {}", from.name());
        // A refusal, not a timeout that happens to be classified as one.
        assert!(started.elapsed() < ANSWER_WAIT, "{to}/{protocol}: refused only after {:?}", started.elapsed());
    };
    fast("10.96.0.30:80", Protocol::Tcp, client);
    fast("10.96.0.30:53", Protocol::Udp, client);
    fast("10.96.0.30:80", Protocol::Tcp, lab.node());
    fast("10.96.0.10:81", Protocol::Tcp, client);
    fast("10.96.0.10:81", Protocol::Udp, client);
}

#[test]
fn a_pod_reaching_itself_through_its_service_is_masqueraded() {
    if !vm::in_guest() {
        return in_vm("a_pod_reaching_itself_through_its_service_is_masqueraded");
    }
    let lab = ipvs_lab(&[(1, "web-a1"), (2, "web-b1")], &[("web.yaml", service("web", WEB))]);
    let me = lab.pod("web-a1");
    wait_for(&lab, &me.ns, "10.96.0.10:80", Protocol::Tcp);
    // Itself: back through its hairpin bridge port from the bridge's
    // address; the other endpoint sees the pod as itself.
    assert_eq!(
        outcomes(&lab, &me.ns, "10.96.0.10:80", Protocol::Tcp, 10),
        [answered("web-a1", ip("10.244.1.1")), answered("web-b1", me.ipv4)]
    );
}

/// dns: UDP 53 of 10.96.0.53 to the pods labelled `app: dns`.
fn dns() -> String {
    service(
        "dns",
        "  clusterIP: 10.96.0.53\n  selector: {app: dns}\n  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 8080}]\n",
    )
}

/// Sends datagrams on `flow` every 200 ms until one is answered by
/// `backend`, for up to `within`; returns what came back, in order.
fn until_answered_by(flow: &mut UdpFlow, backend: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let reply = flow.request();
        let done = matches!(&reply, Ok(r) if r.backend == backend);
        seen.push(match reply {
            Ok(r) => r.backend,
            Err(e) => e.to_string(),
        });
        if done {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("never answered by {backend} within {within:?}: {seen:?}");
}

#[test]
fn a_udp_flow_moves_to_the_other_endpoint_when_its_endpoint_leaves() {
    if !vm::in_guest() {
        return in_vm("a_udp_flow_moves_to_the_other_endpoint_when_its_endpoint_leaves");
    }
    let lab = ipvs_lab(&[(1, "dns-a1"), (2, "dns-b1"), (1, "client-a1")], &[("dns.yaml", dns())]);
    let client = lab.pod("client-a1");
    wait_for(&lab, &client.ns, "10.96.0.53:53", Protocol::Udp);
    let to: SocketAddr = "10.96.0.53:53".parse().unwrap();
    let mut flow = UdpFlow::open(&client.ns, to, ANSWER_WAIT).expect("a UDP flow");
    let first = flow.request().expect("the flow's first answer");
    assert_eq!(first.peer, IpAddr::V4(client.ipv4));
    // One flow, one endpoint: the same 5-tuple keeps its IPVS connection.
    for _ in 0..3 {
        assert_eq!(flow.request().expect("an answer").backend, first.backend, "the flow stays put");
    }
    let other = if first.backend == "dns-a1" { "dns-b1" } else { "dns-a1" };
    let source = flow.local_addr().expect("the flow's address");
    lab.set_app(&first.backend, None);
    let seen = until_answered_by(&mut flow, other, Duration::from_secs(8));
    assert_eq!(flow.local_addr().expect("the flow's address"), source, "the same flow");
    eprintln!("{source} after {} left: {seen:?}", first.backend);
}

#[test]
fn a_udp_service_without_endpoints_answers_the_same_socket_once_it_gains_one() {
    if !vm::in_guest() {
        return in_vm("a_udp_service_without_endpoints_answers_the_same_socket_once_it_gains_one");
    }
    let mut lab = Lab::new(&[(2, "dns-b1"), (1, "client-a1")]);
    lab.set_app("dns-b1", Some("not-yet"));
    lab.write("dns.yaml", &dns());
    lab.start_in("ipvs", &[]);
    let client = lab.pod("client-a1");
    let to: SocketAddr = "10.96.0.53:53".parse().unwrap();
    let mut flow = UdpFlow::open(&client.ns, to, ANSWER_WAIT).expect("a UDP flow");
    assert_eq!(flow.request().map_err(|e| e.to_string()), Err("refused".into()), "no endpoints yet");
    lab.set_app("dns-b1", Some("dns"));
    let seen = until_answered_by(&mut flow, "dns-b1", Duration::from_secs(8));
    eprintln!("after the endpoint came: {seen:?}");
}

#[test]
fn session_affinity_keeps_each_client_on_one_endpoint() {
    if !vm::in_guest() {
        return in_vm("session_affinity_keeps_each_client_on_one_endpoint");
    }
    let web = format!("{WEB}  sessionAffinity: ClientIP\n");
    let pods = [(1, "web-a1"), (2, "web-b1"), (1, "web-a2"), (1, "client-a1")];
    let lab = ipvs_lab(&pods, &[("web.yaml", service("web", &web))]);
    let client = lab.pod("client-a1");
    wait_for(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp);
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 10);
    assert_eq!(backends(&spread).len(), 1, "one endpoint for one client: {spread:?}");
    // Another client (outside, from 203.0.113.9) sticks to its own pick.
    let source = Some(ip("203.0.113.9"));
    let other: BTreeSet<String> = (0..8)
        .map(|_| match lab.request(lab.client(), "10.96.0.10:80", Protocol::Tcp, source) {
            Outcome::Answered { backend, .. } => backend,
            outcome => panic!("from 203.0.113.9: {outcome:?}"),
        })
        .collect();
    assert_eq!(other.len(), 1, "{other:?}");
}

#[test]
fn an_address_in_the_service_cidr_that_no_service_owns_is_dropped() {
    if !vm::in_guest() {
        return in_vm("an_address_in_the_service_cidr_that_no_service_owns_is_dropped");
    }
    let lab = ipvs_lab(&[(1, "web-a1"), (1, "client-a1")], &[("web.yaml", service("web", WEB))]);
    let client = &lab.pod("client-a1").ns;
    wait_for(&lab, client, "10.96.0.10:80", Protocol::Tcp);
    // Not on kube-ipvs0, so without the companion's drop the node would
    // route it on (here: around the client router until its TTL ran out).
    for from in [client, lab.node()] {
        let outcome = silence(from, "10.96.0.99:80", None);
        assert!(matches!(outcome, Err(ProbeError::TimedOut)), "from {}: {outcome:?}", from.name());
    }
    assert!(answers(&lab, client, "10.96.0.10:80", Protocol::Tcp), "the owned cluster IP still answers");
}

#[test]
fn masquerade_all_covers_cluster_ips_and_never_local_policy_frontends() {
    if !vm::in_guest() {
        return in_vm("masquerade_all_covers_cluster_ips_and_never_local_policy_frontends");
    }
    scenarios::masquerade_all_covers_cluster_ips_only(Mode::Ipvs);
}

#[test]
fn node_ports_answer_on_every_local_address_but_loopback_by_default() {
    if !vm::in_guest() {
        return in_vm("node_ports_answer_on_every_local_address_but_loopback_by_default");
    }
    scenarios::node_ports_answer_where_upstream_does(Mode::Ipvs);
    scenarios::node_ports_on_primary_addresses_only_when_asked(Mode::Ipvs);
}

#[test]
fn every_field_change_of_a_live_service_applies_as_a_clean_partial_sync() {
    if !vm::in_guest() {
        return in_vm("every_field_change_of_a_live_service_applies_as_a_clean_partial_sync");
    }
    scenarios::field_changes_apply_as_clean_partial_syncs(Mode::Ipvs);
}

/// Only `backend` answers web's cluster IP from the client pod.
fn only_web(lab: &Lab, backend: &str) -> bool {
    let client = &lab.pod("client-a1").ns;
    backends(&lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 6)) == [backend]
}

/// A migration between the nftables and the IPVS mode, either way: `old`
/// ran and stopped with web on web-a1 (its rules stay), web moved to
/// web-b1, `new` starts; traffic follows `new` and what `old` left goes.
fn migrate(old: &str, new: &str) -> Lab {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    lab.set_app("web-b1", Some("other"));
    lab.write("web.yaml", &service("web", WEB));
    lab.start_in(old, &[]);
    lab.eventually("the old mode to serve", || only_web(&lab, "web-a1"));
    lab.stop();
    lab.set_app("web-a1", Some("other"));
    lab.set_app("web-b1", Some("web"));
    lab.start_in(new, &[]);
    lab.eventually("the report", || lab.log().contains("removed what other proxy modes left on this node"));
    assert!(only_web(&lab, "web-b1"), "{old} -> {new}: traffic follows {new}\n{}", lab.log_tail());
    lab
}

#[test]
fn the_nftables_modes_tables_go_when_the_ipvs_mode_starts() {
    if !vm::in_guest() {
        return in_vm("the_nftables_modes_tables_go_when_the_ipvs_mode_starts");
    }
    let lab = migrate("nftables", "ipvs");
    assert!(lab.log().contains("ip kproxy"), "the report names the table\n{}", lab.log_tail());
}

#[test]
fn the_ipvs_modes_servers_and_interface_go_when_the_nftables_mode_starts() {
    if !vm::in_guest() {
        return in_vm("the_ipvs_modes_servers_and_interface_go_when_the_nftables_mode_starts");
    }
    let lab = migrate("ipvs", "nftables");
    assert!(lab.node().exec("ip", &["link", "show", "kube-ipvs0"]).is_err(), "kube-ipvs0 goes");
    // A netlink socket stays in the namespace it was opened in.
    let servers = lab.node().enter(|| {
        kproxy_netlink::ipvs::Client::connect().and_then(|mut ipvs| ipvs.services()).map(|s| s.entries.len())
    });
    assert_eq!(servers.expect("listing virtual servers in node-a"), 0, "no virtual server is left");
}
