//! Sending a [`Flow`] through the lab and judging what came back against
//! what a mode must do; and, where the lab cannot show it all, asking
//! kproxy's tracer.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use kproxy_model::Protocol;
use kproxy_nftables::trace::Fate;
use kproxy_sandbox::{Netns, tcp_request, udp_request};

use super::flow::{Expect, Flow, Masq, Sender};
use super::sctp;
use crate::lab::{DROP_WAIT, Lab, Mode, Outcome, PORT};

/// How long a probe waits where some attempts are expected to go unanswered.
const QUICK: Duration = Duration::from_millis(300);

/// The outside client's address on node-a's link.
const OUTSIDE_V4: &str = "192.168.77.100";
/// The outside client's IPv6 address on node-a's link.
const OUTSIDE_V6: &str = "fd00:77::100";

/// Where a flow's packets come from.
struct Source<'a> {
    ns: &'a Netns,
    /// The source address to bind, if not the namespace's choice.
    bind: Option<IpAddr>,
    /// The address an endpoint sees when the flow is not masqueraded;
    /// `None` when masquerade cannot be told (the node masqueraded to its
    /// own address).
    own: Option<IpAddr>,
    /// The packet's source address and input interface, for the tracer.
    address: IpAddr,
    iif: Option<&'static str>,
}

fn source<'a>(lab: &'a Lab, from: Sender, to: SocketAddr) -> Source<'a> {
    let ip = |s: &str| s.parse::<IpAddr>().expect("an address literal");
    let v6 = to.is_ipv6();
    let node = &lab.topo.node;
    let node_address = if v6 { IpAddr::V6(node.ipv6) } else { IpAddr::V4(node.ipv4) };
    let node_addresses: [IpAddr; 4] =
        [node.ipv4.into(), node.ipv6.into(), node.addressing.bridge_ipv4.into(), node.addressing.bridge_ipv6.into()];
    let pod = |name: &str| {
        let p = lab.pod(name);
        let address = if v6 { IpAddr::V6(p.ipv6) } else { IpAddr::V4(p.ipv4) };
        Source { ns: &p.ns, bind: None, own: Some(address), address, iif: Some("kpbr0") }
    };
    let outside =
        |address: IpAddr, bind| Source { ns: lab.client(), bind, own: Some(address), address, iif: Some("eth0") };
    match from {
        Sender::Pod => pod("client-a1"),
        Sender::PodNamed(name) => pod(name),
        // From loopback, masquerade shows; from the node's own address it
        // is masqueraded to one of the node's addresses, which looks alike.
        Sender::Node if to.ip().is_loopback() => {
            Source { ns: lab.node(), bind: None, own: Some(to.ip()), address: to.ip(), iif: None }
        }
        Sender::Node => Source { ns: lab.node(), bind: None, own: None, address: node_address, iif: None },
        Sender::NodeAt(address) => {
            let address = ip(address);
            let own = Some(address).filter(|a| !node_addresses.contains(a));
            Source { ns: lab.node(), bind: Some(address), own, address, iif: None }
        }
        Sender::Outside => outside(ip(if v6 { OUTSIDE_V6 } else { OUTSIDE_V4 }), None),
        Sender::OutsideAt(address) => outside(ip(address), Some(ip(address))),
    }
}

/// How many requests show every one of `n` endpoints: each is missed with
/// probability ((n-1)/n)^count, under 1e-7 for two endpoints.
fn tries(n: usize) -> usize {
    if n <= 1 { 4 } else { 12 * n }
}

/// Sends `flow` and compares what happened with what `mode` must do.
pub fn check(lab: &Lab, mode: Mode, flow: &Flow) -> Result<(), String> {
    let to: SocketAddr = flow.to.parse().expect("an IP:port literal");
    let from = source(lab, flow.from, to);
    let expect = flow.expected(mode);
    let context = format!("{mode:?}: {} ({:?} -> {}/{})", flow.what, flow.from, flow.to, flow.protocol);
    if let Some(why) = flow.tracer_only {
        return by_tracer(lab, mode, flow, &from, expect).map_err(|e| format!("{context} [tracer only: {why}]: {e}"));
    }
    if *expect == Expect::RoutedOn {
        let traced = traced(lab, mode, flow, &from);
        if traced != [Fate::Untouched] {
            return Err(format!("{context}: want untouched, the tracer says {traced:?}"));
        }
    }
    let seen = send(lab, flow, &from, expect);
    match judge(expect, &seen, from.own) {
        true => Ok(()),
        false => Err(format!("{context}: want {expect:?}, the kernel did {seen:?}")),
    }
}

/// What came back from sending `flow` as many times as `expect` needs.
fn send(lab: &Lab, flow: &Flow, from: &Source<'_>, expect: &Expect) -> BTreeSet<Outcome> {
    let to: SocketAddr = flow.to.parse().expect("an IP:port literal");
    match (expect, flow.protocol) {
        (Expect::Dnat(backends, _), Protocol::Sctp) => {
            sctp::spread(lab, from.ns, to, &sctp::candidates(lab), tries(backends.len()))
                .into_iter()
                .map(|(backend, peer)| Outcome::Answered { backend, peer })
                .collect()
        }
        (Expect::Dnat(backends, _), protocol) => {
            (0..tries(backends.len())).map(|_| lab.request(from.ns, &flow.to, protocol, from.bind)).collect()
        }
        (_, Protocol::Sctp) => panic!("{}: SCTP flows are checked for DNAT only", flow.what),
        (Expect::Reject | Expect::Node, protocol) => [lab.request(from.ns, &flow.to, protocol, from.bind)].into(),
        (Expect::Drop | Expect::RoutedOn, protocol) => {
            let result = match protocol {
                Protocol::Udp => udp_request(from.ns, to, from.bind, DROP_WAIT),
                _ => tcp_request(from.ns, to, from.bind, DROP_WAIT),
            };
            [Outcome::from(result)].into()
        }
    }
}

/// Whether `seen` is what `expect` means, for a sender whose own address
/// (when masquerade can be told) is `own`.
fn judge(expect: &Expect, seen: &BTreeSet<Outcome>, own: Option<IpAddr>) -> bool {
    match expect {
        Expect::Dnat(backends, masq) => {
            let answered: BTreeSet<(&str, bool)> = seen
                .iter()
                .filter_map(|o| match o {
                    Outcome::Answered { backend, peer } => {
                        Some((backend.as_str(), own.is_some_and(|own| *peer != own)))
                    }
                    _ => None,
                })
                .collect();
            let want_masq = *masq == Masq::Yes && own.is_some();
            let wanted: BTreeSet<(&str, bool)> = backends.iter().map(|b| (*b, want_masq)).collect();
            answered.len() == seen.len() && answered == wanted
        }
        Expect::Reject => seen.iter().all(|o| *o == Outcome::Refused),
        Expect::Drop => seen.iter().all(|o| *o == Outcome::TimedOut),
        Expect::Node => seen.iter().all(|o| matches!(o, Outcome::Answered { backend, .. } if backend == "node-a")),
        // Silence, or the ICMP time-exceeded of the loop (EHOSTUNREACH).
        Expect::RoutedOn => {
            seen.iter().all(|o| matches!(o, Outcome::TimedOut) || matches!(o, Outcome::Failed(e) if e == "Unreachable"))
        }
    }
}

/// A flow the lab cannot show all of: the tracer's fates must be
/// `expect`'s, and the kernel must show the part it can: an answer from a
/// wanted endpoint, masqueraded as wanted (the others may never answer).
fn by_tracer(lab: &Lab, mode: Mode, flow: &Flow, from: &Source<'_>, expect: &Expect) -> Result<(), String> {
    let to: SocketAddr = flow.to.parse().expect("an IP:port literal");
    let want = fates(lab, expect, to, from.own.is_some());
    let traced = traced(lab, mode, flow, from);
    if traced != want {
        return Err(format!("want {want:?}, the tracer says {traced:?}"));
    }
    let Expect::Dnat(backends, masq) = expect else { return Ok(()) };
    let answer = (0..16).find_map(|_| match Outcome::from(tcp_request(from.ns, to, from.bind, QUICK)) {
        Outcome::Answered { backend, peer } => Some((backend, peer)),
        _ => None,
    });
    let right = answer.as_ref().is_some_and(|(backend, peer)| {
        backends.contains(&backend.as_str()) && from.own.is_none_or(|own| (*peer != own) == (*masq == Masq::Yes))
    });
    match right {
        true => Ok(()),
        false => Err(format!("the kernel's first answer: {answer:?}")),
    }
}

/// The fates `expect` means for a packet to `to`; masquerade only where
/// it can be told (`masq_known`).
fn fates(lab: &Lab, expect: &Expect, to: SocketAddr, masq_known: bool) -> Vec<Fate> {
    let mut fates: Vec<Fate> = match expect {
        Expect::Dnat(backends, masq) => backends
            .iter()
            .map(|backend| {
                let (pod, port) = backend
                    .split_once(':')
                    .map_or((*backend, PORT), |(pod, port)| (pod, port.parse().expect("a port after the pod's name")));
                let p = lab.pod(pod);
                let ip = if to.is_ipv6() { IpAddr::V6(p.ipv6) } else { IpAddr::V4(p.ipv4) };
                Fate::Dnat { endpoint: SocketAddr::new(ip, port), masquerade: masq_known && *masq == Masq::Yes }
            })
            .collect(),
        Expect::Reject => vec![Fate::Reject],
        Expect::Drop => vec![Fate::Drop],
        Expect::Node | Expect::RoutedOn => vec![Fate::Untouched],
    };
    fates.sort();
    fates.dedup();
    fates
}

/// What kproxy's tracer says `mode` does with `flow`, planned from the
/// lab's manifests and kproxy's flags; masquerade only where it can be told.
fn traced(lab: &Lab, mode: Mode, flow: &Flow, from: &Source<'_>) -> Vec<Fate> {
    let mut fates = lab.trace_in(mode.name(), from.address, &flow.to, flow.protocol, from.iif);
    if from.own.is_none() {
        for fate in &mut fates {
            if let Fate::Dnat { masquerade, .. } = fate {
                *masquerade = false;
            }
        }
        fates.sort();
        fates.dedup();
    }
    fates
}

/// Checks every flow and fails once, listing every flow that went wrong.
pub fn check_all(lab: &Lab, mode: Mode, flows: &[Flow]) {
    check_case(lab, mode, "", flows);
}

/// [`check_all`] for one of upstream's cases (its settings), named in the
/// failure.
pub fn check_case(lab: &Lab, mode: Mode, case: &str, flows: &[Flow]) {
    let failures: Vec<String> = flows.iter().filter_map(|f| check(lab, mode, f).err()).collect();
    assert!(
        failures.is_empty(),
        "{case}: {} of {} flows failed:\n{}\n{}",
        failures.len(),
        flows.len(),
        failures.join("\n"),
        lab.log_tail()
    );
}

/// Waits (up to 10 s) until every flow does what it must after a change
/// (a change can reach the kernel in more than one sync), then checks them
/// all once more.
pub fn converge(lab: &Lab, mode: Mode, case: &str, flows: &[Flow]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !flows.iter().all(|f| check(lab, mode, f).is_ok()) {
        std::thread::sleep(Duration::from_millis(50));
    }
    check_case(lab, mode, case, flows);
}
