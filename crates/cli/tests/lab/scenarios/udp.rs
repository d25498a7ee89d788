//! UDP across endpoint changes: a client's flow must never stay stuck on
//! a rejection or on an endpoint that left.

use std::net::SocketAddr;
use std::time::Duration;

use kproxy_sandbox::{ProbeError, UdpFlow};

use crate::lab::*;

/// How a mode moves a connected UDP socket's traffic when endpoints change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UdpFlows {
    /// Translation is per packet and remembered by conntrack: kproxy
    /// deletes the entries of a removed endpoint (and of a rejection), so
    /// the same socket, the same 5-tuple, reaches the new endpoint.
    Move,
    /// The socket hook translates when the socket connects: a connect with
    /// no endpoints is refused, and a socket connected to an endpoint that
    /// left must stop reaching it (kproxy ends or retargets it); a new
    /// socket reaches the new endpoint.
    Reconnect,
}

fn udp_flows(mode: Mode) -> UdpFlows {
    match mode {
        Mode::Ebpf => UdpFlows::Reconnect,
        Mode::Nftables | Mode::Iptables(_) | Mode::Ipvs => UdpFlows::Move,
    }
}

/// dns: a UDP cluster IP 10.96.0.53 over the pods labelled `selector`.
fn dns(selector: &str) -> String {
    service(
        "dns",
        &format!(
            "  clusterIP: 10.96.0.53\n  selector: {{app: {selector}}}\n  ports: [{{name: dns, port: 53, protocol: UDP, targetPort: 8080}}]\n"
        ),
    )
}

/// A UDP client moves off a cached rejection once endpoints appear, and
/// off an endpoint that left: the same flow in the conntrack-based modes,
/// a new socket (the old one no longer reaching the old endpoint) in the
/// ebpf mode. The conntrack-based modes count the deleted entries.
pub fn a_udp_flow_moves_off_a_removed_endpoint_and_off_a_cached_rejection(mode: Mode) {
    let mut lab = Lab::new(&[(2, "dns-b1"), (2, "dns-b2"), (1, "client-a1")]);
    lab.set_app("dns-b1", Some("one"));
    lab.set_app("dns-b2", Some("two"));
    lab.write("dns.yaml", &dns("nobody"));
    lab.start_mode(mode, &[]);
    let client = lab.place(&lab.pod("client-a1").ns);
    let to: SocketAddr = "10.96.0.53:53".parse().expect("literal");
    let wait = Duration::from_millis(500);
    let fresh = || UdpFlow::open(client, to, wait).and_then(|mut flow| flow.request());
    match udp_flows(mode) {
        UdpFlows::Move => {
            // 0 -> N: the flow is rejected while there are no endpoints...
            let mut flow = UdpFlow::open(client, to, wait).expect("a flow");
            assert!(flow.request().is_err(), "{mode:?}: no endpoints yet");
            lab.write("dns.yaml", &dns("one"));
            // ...and the same 5-tuple is answered once there are.
            lab.eventually("the same flow to reach dns-b1", || flow.request().is_ok_and(|r| r.backend == "dns-b1"));
            // Endpoint removal: without cleanup conntrack would keep sending
            // this flow to dns-b1 for as long as it stays busy.
            lab.write("dns.yaml", &dns("two"));
            lab.eventually("the same flow to move to dns-b2", || flow.request().is_ok_and(|r| r.backend == "dns-b2"));
            assert_eq!(flow.request().expect("still moved").backend, "dns-b2", "{mode:?}");
            // Upstream's conntrack reconciler metrics count the deleted flows.
            let metrics = lab.metrics();
            let deleted = lab.metric("kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"}");
            assert!(deleted >= 1.0, "{mode:?}: the flow to dns-b1:\n{metrics}");
            let runs = lab.metric("kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family=\"IPv4\"}");
            assert!(runs >= 2.0, "{mode:?}: {metrics}");
        }
        UdpFlows::Reconnect => {
            assert_eq!(fresh(), Err(ProbeError::Refused), "{mode:?}: no endpoints: the connect is refused");
            lab.write("dns.yaml", &dns("one"));
            lab.eventually("a new flow to reach dns-b1", || fresh().is_ok_and(|r| r.backend == "dns-b1"));
            let mut flow = UdpFlow::open(client, to, wait).expect("a flow");
            assert_eq!(flow.request().expect("an answer").backend, "dns-b1", "{mode:?}");
            lab.write("dns.yaml", &dns("two"));
            // dns-b1 still serves (it only left the selector): a socket
            // still connected to it would keep getting answers from it.
            lab.eventually("the old flow to stop reaching dns-b1", || {
                !flow.request().is_ok_and(|r| r.backend == "dns-b1")
            });
            lab.eventually("a new flow to reach dns-b2", || fresh().is_ok_and(|r| r.backend == "dns-b2"));
        }
    }
}
