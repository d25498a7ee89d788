//! Real-packet scenarios shared by every kernel mode: each takes the
//! [`Mode`] to run kproxy in and asserts what clients and backends saw,
//! so a behaviour is written once and checked in nftables mode, in
//! iptables mode on both backends, in IPVS mode in the VM, and in the ebpf
//! mode. Where a mode must differ (say, the ebpf mode's socket hooks
//! connect a pod straight to the endpoint, so nothing is masqueraded), the
//! expectation is a per-mode value with the reason beside it.
//!
//! The frontends: [`cluster_ip`] (from pods, the node and outside, no
//! endpoints, hairpin, internal policy, conntrack), [`external`] (node
//! ports, external and load-balancer IPs, `externalTrafficPolicy: Local`,
//! source ranges, IPv6 and UDP node ports), [`affinity`] (session affinity
//! and the schedulers), [`udp`] (UDP flows across endpoint changes); the
//! rest below.

pub mod affinity;
pub mod cluster_ip;
pub mod external;
pub mod udp;

use std::net::IpAddr;

use kproxy_model::Protocol;
use kproxy_sandbox::ProbeError;

use super::*;

/// How many requests a spread sends: the IPVS VM's guest is slow.
fn tries(mode: Mode) -> usize {
    if mode == Mode::Ipvs { 6 } else { 16 }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address literal")
}

/// Whether a request from `from` to `to` answers.
pub fn answers(lab: &Lab, from: &Netns, to: &str, protocol: Protocol) -> bool {
    matches!(lab.request(from, to, protocol, None), Outcome::Answered { .. })
}

/// The backend that answered, or a panic naming what came instead.
pub fn backend_of(outcome: Outcome) -> String {
    match outcome {
        Outcome::Answered { backend, .. } => backend,
        other => panic!("no answer: {other:?}"),
    }
}

/// web: a cluster IP 10.96.0.10 port 80 over the `web` pods.
pub const WEB: &str =
    "  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

/// web (cluster IP) with its pods, kproxy started in `mode`.
pub fn web_lab(mode: Mode, pods: &[(u8, &str)]) -> Lab {
    let mut lab = Lab::new(pods);
    lab.write("web.yaml", &service("web", WEB));
    lab.start_mode(mode, &[]);
    lab
}

/// Waits until `to` answers `from`.
pub fn wait_for(lab: &Lab, from: &Netns, to: &str, protocol: Protocol) {
    lab.eventually(&format!("{to}/{protocol} to answer {}", from.name()), || {
        matches!(lab.request(from, to, protocol, None), Outcome::Answered { .. })
    });
}

/// The distinct outcomes of `count` requests.
pub fn outcomes(lab: &Lab, from: &Netns, to: &str, protocol: Protocol, count: usize) -> Vec<Outcome> {
    lab.spread(from, to, protocol, count).into_keys().collect()
}

/// shop: a LoadBalancer Service under `externalTrafficPolicy: Local` at
/// 198.51.100.20, with external IP 198.51.100.30 (both routed to node-a by
/// the client), cluster IP 10.96.0.20 and node port 30443.
pub fn local_shop() -> String {
    format!(
        "{}status:\n  loadBalancer:\n    ingress: [{{ip: 198.51.100.20}}]\n",
        service(
            "shop",
            "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {app: shop}\n  externalTrafficPolicy: Local\n  externalIPs: [198.51.100.30]\n  ports: [{name: https, port: 443, targetPort: http, nodePort: 30443}]\n",
        )
    )
}

/// `masqueradeAll` masquerades cluster-IP traffic, pods' included, and
/// never traffic to an `externalTrafficPolicy: Local` frontend: outsiders
/// keep their address (and reach the local endpoint only), pods keep
/// theirs (and reach every endpoint).
///
/// The ebpf mode masquerades only what its tc programs translate: a pod
/// whose socket is in the node's cgroup connects straight to the endpoint
/// (no packet is ever addressed to the cluster IP), so it keeps its address.
pub fn masquerade_all_covers_cluster_ips_only(mode: Mode) {
    let mut lab = Lab::new(&[(1, "shop-a1"), (2, "shop-b1"), (1, "client-a1")]);
    lab.write("shop.yaml", &local_shop());
    lab.start_mode(mode, &["--masquerade-all"]);
    let client = lab.pod("client-a1");
    let count = tries(mode);

    // The cluster IP: even a pod is masqueraded (to the bridge's address
    // towards its own node's endpoint, to the uplink's towards node-b).
    wait_for(&lab, &client.ns, "10.96.0.20:443", Protocol::Tcp);
    let spread = lab.spread(&client.ns, "10.96.0.20:443", Protocol::Tcp, count * 2);
    assert_eq!(backends(&spread), ["shop-a1", "shop-b1"], "{mode:?}: {spread:?}");
    let pods_masqueraded = mode != Mode::Ebpf;
    for outcome in spread.keys() {
        assert!(
            matches!(outcome, Outcome::Answered { peer, .. } if (*peer != IpAddr::V4(client.ipv4)) == pods_masqueraded),
            "{mode:?}: a pod to a cluster IP under masqueradeAll (masqueraded: {pods_masqueraded}): {spread:?}"
        );
    }

    // Local-policy frontends from outside: the client's own address, the
    // local endpoint only.
    let outside = ip("192.168.77.100");
    for to in ["198.51.100.20:443", "198.51.100.30:443", "192.168.77.1:30443"] {
        wait_for(&lab, lab.client(), to, Protocol::Tcp);
        assert_eq!(
            outcomes(&lab, lab.client(), to, Protocol::Tcp, count),
            [answered("shop-a1", outside)],
            "{mode:?}: outside -> {to}"
        );
    }

    // Pods to a Local-policy frontend: every endpoint, their own address.
    let spread = lab.spread(&client.ns, "198.51.100.20:443", Protocol::Tcp, count * 2);
    assert_eq!(
        spread.keys().cloned().collect::<Vec<_>>(),
        [answered("shop-a1", client.ipv4), answered("shop-b1", client.ipv4)],
        "{mode:?}: a pod to the load-balancer IP"
    );

    // Without the local endpoint, outsiders are dropped (masqueradeAll
    // does not turn the frontend into a Cluster-policy one).
    lab.set_app("shop-a1", None);
    lab.eventually("the local endpoint to go", || lab.dropped(lab.client(), "198.51.100.20:443", None));
}

/// web: a NodePort Service on 30080 (both families), web-a1 on node-a and
/// web-b1 on node-b.
pub const NODE_PORT_WEB: &str = "  type: NodePort\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n";

/// With `nodePortAddresses` unset, node ports answer where upstream's
/// proxy of the same mode answers: the iptables and IPVS modes on every
/// local address (a secondary one too; IPv4 loopback in iptables mode
/// only, masqueraded), the nftables mode on the node's primary addresses
/// only. The iptables and IPVS modes say so at start, as upstream. The
/// ebpf mode, which upstream lacks, follows kproxy's nftables mode.
pub fn node_ports_answer_where_upstream_does(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", NODE_PORT_WEB));
    lab.start_mode(mode, &[]);
    let every_address = matches!(mode, Mode::Iptables(_) | Mode::Ipvs);
    let client = lab.pod("client-a1");
    let bridge = lab.topo.node.addressing;

    // The primary addresses: every mode.
    wait_for(&lab, lab.client(), "192.168.77.1:30080", Protocol::Tcp);
    wait_for(&lab, lab.client(), "[fd00:77::1]:30080", Protocol::Tcp);
    // A secondary address (the pod bridge's), from outside and from a pod.
    for (from, to) in [
        (lab.client(), format!("{}:30080", bridge.bridge_ipv4)),
        (&client.ns, format!("{}:30080", bridge.bridge_ipv4)),
        (lab.client(), format!("[{}]:30080", bridge.bridge_ipv6)),
    ] {
        let outcome = lab.request(from, &to, Protocol::Tcp, None);
        if every_address {
            assert!(matches!(outcome, Outcome::Answered { .. }), "{mode:?}: {} -> {to}: {outcome:?}", from.name());
        } else {
            assert_eq!(outcome, Outcome::Refused, "{mode:?}: {} -> {to}: not a node-port address", from.name());
        }
    }
    // Localhost: IPv4 in iptables mode only (route_localnet), masqueraded
    // to the node's address on the way out; never IPv6.
    let localhost = lab.spread(lab.node(), "127.0.0.1:30080", Protocol::Tcp, tries(mode));
    if matches!(mode, Mode::Iptables(_)) {
        assert_eq!(backends(&localhost), ["web-a1", "web-b1"], "{mode:?}: {localhost:?}");
        assert!(
            localhost.keys().all(|o| matches!(o, Outcome::Answered { peer, .. } if !peer.is_loopback())),
            "{mode:?}: masqueraded: {localhost:?}"
        );
    } else {
        assert_eq!(localhost.into_keys().collect::<Vec<_>>(), [Outcome::Refused], "{mode:?}: 127.0.0.1");
    }
    assert_eq!(lab.request(lab.node(), "[::1]:30080", Protocol::Tcp, None), Outcome::Refused, "{mode:?}: ::1");

    let warned = lab.log().contains("nodePortAddresses is unset");
    assert_eq!(warned, every_address, "{mode:?}: the startup warning about an unset nodePortAddresses");
}

/// `--nodeport-addresses primary` narrows the iptables and IPVS modes to
/// the primary addresses (and no warning).
pub fn node_ports_on_primary_addresses_only_when_asked(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", NODE_PORT_WEB));
    lab.start_mode(mode, &["--nodeport-addresses", "primary"]);
    wait_for(&lab, lab.client(), "192.168.77.1:30080", Protocol::Tcp);
    let bridge = format!("{}:30080", lab.topo.node.addressing.bridge_ipv4);
    assert_eq!(lab.request(lab.client(), &bridge, Protocol::Tcp, None), Outcome::Refused, "{mode:?}: {bridge}");
    assert_eq!(lab.request(lab.node(), "127.0.0.1:30080", Protocol::Tcp, None), Outcome::Refused, "{mode:?}");
    assert!(!lab.log().contains("nodePortAddresses is unset"), "{mode:?}: no warning when set");
}

/// Who sends a probe.
#[derive(Clone, Copy, Debug)]
enum Client {
    /// client-a1, a pod on node-a.
    Pod,
    /// The outside client (192.168.77.100).
    Outside,
    /// The outside client from 203.0.113.9 (inside the first source range).
    Allowed,
}

/// What the probes to a frontend must see.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Both endpoints answer.
    Both,
    /// Only this endpoint answers.
    Only(&'static str),
    /// One endpoint answers every request (affinity).
    One,
    /// Answered, by whichever endpoint (a hashing scheduler).
    Served,
    Refused,
    Dropped,
}

/// One step of [`field_changes_apply_as_clean_partial_syncs`]: shop's
/// spec after the change, and what traffic must do then.
struct Change {
    what: &'static str,
    spec: String,
    /// `kproxy.io/scheduler`.
    scheduler: Option<&'static str>,
    /// Has the load-balancer IP in its status.
    load_balancer: bool,
    probes: Vec<(Client, &'static str, Expect)>,
}

const SHOP_PORT: &str = "  ports: [{name: https, port: 443, targetPort: http, nodePort: 30443}]\n";
const LB: &str = "198.51.100.20:443";
const CIP: &str = "10.96.0.20:443";
const NP: &str = "192.168.77.1:30443";

/// A LoadBalancer shop with `extra` in its spec.
fn change(what: &'static str, extra: &str, probes: Vec<(Client, &'static str, Expect)>) -> Change {
    let spec = format!("  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {{app: shop}}\n{extra}{SHOP_PORT}");
    Change { what, spec, scheduler: None, load_balancer: true, probes }
}

/// Every kind of field change, one at a time, ending where it began.
fn changes() -> Vec<Change> {
    use Client::*;
    use Expect::*;
    let plain = || vec![(Pod, CIP, Both), (Outside, LB, Both), (Outside, NP, Both)];
    let sticky = || vec![(Pod, CIP, One), (Outside, LB, One)];
    let affinity = |seconds: u32| {
        format!("  sessionAffinity: ClientIP\n  sessionAffinityConfig: {{clientIP: {{timeoutSeconds: {seconds}}}}}\n")
    };
    let scheduler = |what: &'static str, name: &'static str, expect: Expect| Change {
        scheduler: Some(name),
        ..change(what, "", vec![(Pod, CIP, expect), (Outside, LB, Served)])
    };
    let two_ports = "  ports:\n  - {name: https, port: 443, targetPort: http, nodePort: 30443}\n  \
                     - {name: web, port: 80, targetPort: http, nodePort: 30080}\n";
    vec![
        change("LoadBalancer", "", plain()),
        change("affinity on", "  sessionAffinity: ClientIP\n", sticky()),
        change("affinity timeout 60 s", &affinity(60), sticky()),
        change("affinity timeout 3600 s", &affinity(3600), sticky()),
        change("affinity off", "", plain()),
        change(
            "externalTrafficPolicy Local",
            "  externalTrafficPolicy: Local\n",
            vec![(Outside, LB, Only("shop-a1")), (Outside, NP, Only("shop-a1")), (Pod, LB, Both)],
        ),
        change(
            "internalTrafficPolicy Local",
            "  internalTrafficPolicy: Local\n",
            vec![(Pod, CIP, Only("shop-a1")), (Outside, LB, Both)],
        ),
        change(
            "source ranges",
            "  loadBalancerSourceRanges: [203.0.113.0/24]\n",
            vec![(Allowed, LB, Both), (Outside, LB, Dropped), (Outside, NP, Both)],
        ),
        change("other source ranges", "  loadBalancerSourceRanges: [198.18.0.0/15]\n", vec![(Allowed, LB, Dropped)]),
        scheduler("scheduler rr", "rr", Both),
        scheduler("scheduler mh", "mh", Served),
        change("no scheduler", "", plain()),
        Change {
            spec: format!("  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {{app: shop}}\n{two_ports}"),
            ..change("a second port", "", vec![(Pod, "10.96.0.20:80", Both), (Outside, "192.168.77.1:30080", Both)])
        },
        Change {
            spec: "  clusterIP: 10.96.0.20\n  selector: {app: shop}\n  ports: [{name: https, port: 443, targetPort: http}]\n"
                .to_owned(),
            load_balancer: false,
            ..change("type ClusterIP", "", vec![(Pod, CIP, Both), (Outside, NP, Refused)])
        },
        Change {
            spec: format!("  type: NodePort\n  clusterIP: 10.96.0.20\n  selector: {{app: shop}}\n{SHOP_PORT}"),
            load_balancer: false,
            ..change("type NodePort", "", vec![(Outside, NP, Both), (Pod, CIP, Both)])
        },
        change("an external IP", "  externalIPs: [198.51.100.30]\n", vec![(Outside, "198.51.100.30:443", Both)]),
        change("LoadBalancer at last", "", plain()),
    ]
}

/// shop's manifest for a change.
fn shop_manifest(c: &Change) -> String {
    let annotation =
        c.scheduler.map(|name| format!("  annotations: {{kproxy.io/scheduler: {name}}}\n")).unwrap_or_default();
    let status = if c.load_balancer { "status:\n  loadBalancer:\n    ingress: [{ip: 198.51.100.20}]\n" } else { "" };
    format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: shop\n{annotation}spec:\n{}{status}", c.spec)
}

/// Each kind of change to a live Service (type, ports, traffic policies,
/// source ranges, affinity on, off and its timeout, the scheduler
/// annotation) reaches the kernel as one partial sync that does not fail,
/// and traffic does what the new spec says.
pub fn field_changes_apply_as_clean_partial_syncs(mode: Mode) {
    let mut lab = Lab::new(&[(1, "shop-a1"), (2, "shop-b1"), (1, "client-a1")]);
    let changes = changes();
    lab.write("shop.yaml", &shop_manifest(&changes[0]));
    lab.start_mode(mode, &[]);
    wait_for(&lab, lab.client(), LB, Protocol::Tcp);
    let failures = "kproxy_sync_proxy_rules_failures_total";
    let partial = "kubeproxy_sync_partial_proxy_rules_duration_seconds_count";
    let full = "kubeproxy_sync_full_proxy_rules_duration_seconds_count";
    for c in &changes[1..] {
        let (partial_before, full_before) = (lab.metric(partial), lab.metric(full));
        lab.write("shop.yaml", &shop_manifest(c));
        lab.eventually(&format!("{mode:?}: a sync after '{}'", c.what), || lab.metric(partial) > partial_before);
        assert_eq!(lab.metric(failures), 0.0, "{mode:?}: '{}' failed a sync\n{}", c.what, lab.log_tail());
        assert_eq!(lab.metric(full), full_before, "{mode:?}: '{}' needed a full sync\n{}", c.what, lab.log_tail());
        for &(from, to, expect) in &c.probes {
            check(&lab, mode, c.what, from, to, expect);
        }
    }
}

fn check(lab: &Lab, mode: Mode, what: &str, from: Client, to: &str, expect: Expect) {
    let (ns, source) = match from {
        Client::Pod => (&lab.pod("client-a1").ns, None),
        Client::Outside => (lab.client(), None),
        Client::Allowed => (lab.client(), Some(ip("203.0.113.9"))),
    };
    let context = format!("{mode:?}: after '{what}', {from:?} -> {to}");
    if let Expect::Dropped = expect {
        let outcome = lab.tcp(ns, to, source, DROP_WAIT);
        assert!(matches!(outcome, Err(ProbeError::TimedOut)), "{context}: dropped, got {outcome:?}");
        return;
    }
    let seen: std::collections::BTreeSet<Outcome> = (0..tries(mode) * 2)
        .map(|_| match lab.request(ns, to, Protocol::Tcp, source) {
            Outcome::Answered { backend, .. } => Outcome::Answered { backend, peer: ip("0.0.0.0") },
            other => other,
        })
        .collect();
    let names: Vec<String> = seen
        .iter()
        .filter_map(|o| match o {
            Outcome::Answered { backend, .. } => Some(backend.clone()),
            _ => None,
        })
        .collect();
    let all_answered = names.len() == seen.len();
    match expect {
        Expect::Both => assert!(all_answered && names == ["shop-a1", "shop-b1"], "{context}: both, got {seen:?}"),
        Expect::Only(name) => assert!(all_answered && names == [name], "{context}: only {name}, got {seen:?}"),
        Expect::One => assert!(all_answered && names.len() == 1, "{context}: one endpoint, got {seen:?}"),
        Expect::Served => assert!(all_answered && !names.is_empty(), "{context}: answered, got {seen:?}"),
        Expect::Refused => assert_eq!(seen.into_iter().collect::<Vec<_>>(), [Outcome::Refused], "{context}"),
        Expect::Dropped => unreachable!("checked above"),
    }
}
