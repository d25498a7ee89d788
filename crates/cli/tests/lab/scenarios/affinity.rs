//! Which endpoint a client gets: session affinity and its timeout, and the
//! schedulers of the `kproxy.io/scheduler` annotation (rr, wrr, sh, dh,
//! Maglev).

use std::collections::BTreeSet;
use std::time::Duration;

use kproxy_model::Protocol;

use super::{WEB, answers, backend_of, ip};
use crate::lab::*;

/// web with the `kproxy.io/scheduler` annotation `scheduler` (and `extra`
/// annotations, comma-first).
fn scheduled_web(scheduler: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, annotations: {{kproxy.io/scheduler: {scheduler}{extra}}}}}\nspec:\n{WEB}"
    )
}

/// `sessionAffinity: ClientIP` keeps a pod on one endpoint, and another
/// client (from outside, another source) on its own pick.
pub fn session_affinity_keeps_a_client_on_one_endpoint(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "web-a2"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", &format!("{WEB}  sessionAffinity: ClientIP\n")));
    lab.start_mode(mode, &[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 15);
    assert_eq!(spread.len(), 1, "{mode:?}: one endpoint for one client: {spread:?}");
    let source = Some(ip("203.0.113.9"));
    let other: BTreeSet<Outcome> =
        (0..10).map(|_| lab.request(lab.client(), "10.96.0.10:80", Protocol::Tcp, source)).collect();
    assert_eq!(other.len(), 1, "{mode:?}: {other:?}");
    // Where each mode keeps the pins: nftables mode's sticky sets hold
    // both clients. (The ebpf mode's LRU map is keyed by a pod's network
    // namespace, which no address names: its pins are shown by behaviour.)
    if mode == Mode::Nftables {
        let ruleset = lab.ruleset();
        assert!(ruleset.contains("10.244.1.12 expires") && ruleset.contains("203.0.113.9 expires"), "{ruleset}");
    }
}

/// A pinned client is forgotten after the affinity timeout: within ten
/// timeouts its next connection lands on the other endpoint at least once
/// (a fair pick misses it ten times in a row one time in 1024).
pub fn a_pinned_client_is_forgotten_after_the_affinity_timeout(mode: Mode) {
    let mut lab = Lab::new(&[(2, "web-b1"), (2, "web-b2"), (1, "client-a1")]);
    let affinity = "  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 1}}\n";
    lab.write("web.yaml", &service("web", &format!("{WEB}{affinity}")));
    lab.start_mode(mode, &[]);
    let client = lab.pod("client-a1");
    lab.eventually("web", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    let first = backend_of(lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None));
    let pinned: BTreeSet<String> =
        (0..6).map(|_| backend_of(lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None))).collect();
    assert_eq!(pinned, BTreeSet::from([first.clone()]), "{mode:?}: pinned within the timeout");
    let in_ruleset = format!("{} expires", client.ipv4);
    if mode == Mode::Nftables {
        assert!(lab.ruleset().contains(&in_ruleset), "{}", lab.ruleset());
    }
    let mut moved = false;
    for round in 0..10 {
        std::thread::sleep(Duration::from_millis(1500));
        if mode == Mode::Nftables && round == 0 {
            assert!(!lab.ruleset().contains(&in_ruleset), "still pinned after the timeout:\n{}", lab.ruleset());
        }
        if backend_of(lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None)) != first {
            moved = true;
            break;
        }
    }
    assert!(moved, "{mode:?}: still on {first} after ten timeouts");
}

/// `rr` rotates through the endpoints in turn.
pub fn round_robin_rotates_through_the_endpoints_in_turn(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "web-a2"), (1, "client-a1")]);
    lab.write("web.yaml", &scheduled_web("rr", ""));
    lab.start_mode(mode, &[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    let order: Vec<String> =
        (0..9).map(|_| backend_of(lab.request(client, "10.96.0.10:80", Protocol::Tcp, None))).collect();
    // Three endpoints in turn: every window of three holds all of them.
    for window in order.windows(3) {
        let mut w = window.to_vec();
        w.sort();
        assert_eq!(w, ["web-a1", "web-a2", "web-b1"], "{mode:?}: {order:?}");
    }
}

/// `wrr` splits connections by the weights (3:1 here).
pub fn weighted_round_robin_splits_connections_by_the_weights(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    let a1 = lab.pod("web-a1").ipv4;
    lab.write("web.yaml", &scheduled_web("wrr", &format!(", kproxy.io/weights: \"{a1}=3\"")));
    lab.start_mode(mode, &[]);
    let client = lab.pod("client-a1");
    lab.eventually("web to answer", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 40);
    let count = |name: &str| {
        spread
            .iter()
            .filter(|(o, _)| matches!(o, Outcome::Answered { backend, .. } if backend == name))
            .map(|(_, n)| *n)
            .sum::<usize>()
    };
    // One connection went by before the spread: wrr is exact over every
    // cycle of four, so 40 more split 30:10 give or take that one.
    let (a, b) = (count("web-a1"), count("web-b1"));
    assert_eq!(a + b, 40, "{mode:?}: {spread:?}");
    assert!((28..=32).contains(&a), "{mode:?}: 3:1 expected, got {a}:{b}");
}

/// `sh` keeps each client on one endpoint, the same after a restart
/// rebuilt the dataplane (the hash seed is fixed); `dh` sends every
/// client of a frontend to one endpoint.
pub fn source_and_destination_hashing_pick_by_address(mode: Mode) {
    // Clients on node-a, where kproxy runs.
    let pods = [(1, "web-a1"), (2, "web-b1"), (1, "web-a2"), (1, "c-a1"), (1, "c-a2"), (1, "c-a3"), (1, "c-a4")];
    let mut lab = Lab::new(&pods);
    let spec = |name: &str, ip: &str, scheduler: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, annotations: {{kproxy.io/scheduler: {scheduler}}}}}\n\
             spec:\n  clusterIP: {ip}\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80, targetPort: http}}]\n"
        )
    };
    lab.write("sh.yaml", &spec("by-source", "10.96.0.10", "sh"));
    lab.write("dh.yaml", &spec("by-destination", "10.96.0.11", "dh"));
    lab.start_mode(mode, &[]);
    let clients = ["c-a1", "c-a2", "c-a3", "c-a4"];
    lab.eventually("by-source", || answers(&lab, &lab.pod("c-a1").ns, "10.96.0.10:80", Protocol::Tcp));
    let picks = |lab: &Lab, to: &str| -> Vec<String> {
        clients
            .iter()
            .map(|c| {
                let seen = backends(&lab.spread(&lab.pod(c).ns, to, Protocol::Tcp, 6));
                assert_eq!(seen.len(), 1, "{mode:?}: {c} to {to}: one endpoint per client: {seen:?}");
                seen[0].clone()
            })
            .collect()
    };
    let by_source = picks(&lab, "10.96.0.10:80");
    // Fixed seed, fixed addresses: this spread is deterministic.
    let distinct: BTreeSet<&String> = by_source.iter().collect();
    assert!(distinct.len() > 1, "{mode:?}: sh spreads clients over endpoints: {by_source:?}");
    let by_destination = picks(&lab, "10.96.0.11:80");
    assert!(by_destination.iter().all(|b| *b == by_destination[0]), "{mode:?}: dh: one for all: {by_destination:?}");

    lab.restart_mode(mode, &[]);
    lab.eventually("by-source", || answers(&lab, &lab.pod("c-a1").ns, "10.96.0.10:80", Protocol::Tcp));
    assert_eq!(picks(&lab, "10.96.0.10:80"), by_source, "{mode:?}: sh picks the same after a restart");
    assert_eq!(picks(&lab, "10.96.0.11:80"), by_destination, "{mode:?}");
}

/// Maglev (`mh`) keeps a client on its endpoint when another endpoint leaves.
pub fn maglev_keeps_a_client_on_its_endpoint_when_another_leaves(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "web-a2"), (1, "client-a1")]);
    lab.write("web.yaml", &scheduled_web("mh", ""));
    lab.start_mode(mode, &[]);
    let client = lab.pod("client-a1");
    lab.eventually("web to answer", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 10);
    let chosen = backends(&spread);
    assert_eq!(chosen.len(), 1, "{mode:?}: one client, one endpoint: {spread:?}");
    let other = ["web-a1", "web-b1", "web-a2"].into_iter().find(|p| *p != chosen[0]).expect("three endpoints");
    let gone = lab.pod(other).ipv4.to_string();
    // The first sync may not be counted yet when traffic already flows.
    lab.eventually("the first sync to be counted", || lab.sync_count() >= 1.0);
    let syncs = lab.sync_count();
    lab.set_app(other, None);
    lab.eventually("a sync after the endpoint left", || lab.sync_count() > syncs);
    if mode == Mode::Nftables {
        lab.eventually("the other endpoint to leave the ruleset", || !lab.ruleset().contains(&gone));
    }
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 10);
    assert_eq!(backends(&spread), chosen, "{mode:?}: {spread:?}");
}
