//! Payloads applied to an in-memory `iptables-restore --noflush`: partial
//! payloads over time leave the kernel exactly as a full payload would, and
//! every payload is self-consistent (upstream's `checkIPTablesRuleJumps`).

use std::collections::{BTreeMap, BTreeSet};

use kproxy_iptables::{Applied, CHUNK_BYTES, LocalDetector, Payload, PlanConfig, plan, prepare};
use kproxy_model::IpFamily;
use kproxy_state::{Kind, StateConfig};
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

/// One change to the scenario.
type Step = Box<dyn Fn(&mut Scenario)>;

/// table -> chain -> rule lines.
type Kernel = BTreeMap<String, BTreeMap<String, Vec<String>>>;

const TARGETS: [&str; 8] = ["ACCEPT", "REJECT", "DROP", "MARK", "RETURN", "DNAT", "SNAT", "MASQUERADE"];

/// What `iptables-restore --noflush` does with `payload`; panics where the
/// real one would fail (a jump to a missing chain, deleting a referenced
/// chain).
fn restore(kernel: &mut Kernel, payload: &str) {
    restore_with(kernel, payload, true);
}

/// [`restore`]; `whole` false for one restore of a split payload, after
/// which new per-service chains may not be jumped to yet and old ones may
/// still be (only jumps to missing chains are errors then).
fn restore_with(kernel: &mut Kernel, payload: &str, whole: bool) {
    let mut table = String::new();
    for line in payload.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = name.to_owned();
        } else if let Some(decl) = line.strip_prefix(':') {
            let chain = decl.split(' ').next().expect("chain line").to_owned();
            kernel.entry(table.clone()).or_default().insert(chain, Vec::new());
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let chain = rule.split(' ').next().expect("rule chain");
            let rules = kernel.get_mut(&table).and_then(|t| t.get_mut(chain));
            rules.unwrap_or_else(|| panic!("-A to undeclared chain {chain}")).push(rule.to_owned());
        } else if let Some(chain) = line.strip_prefix("-X ") {
            let t = kernel.get_mut(&table).expect("table");
            assert!(t.remove(chain).is_some(), "-X of missing chain {chain}");
        } else {
            assert_eq!(line, "COMMIT");
            check_jumps(&kernel[&table], &table, whole);
        }
    }
}

fn check_jumps(chains: &BTreeMap<String, Vec<String>>, table: &str, whole: bool) {
    let mut jumped = BTreeSet::new();
    for rule in chains.values().flatten() {
        if let Some((_, target)) = rule.split_once(" -j ") {
            let target = target.split(' ').next().expect("target");
            if !TARGETS.contains(&target) {
                assert!(chains.contains_key(target), "{table}: jump to missing chain {target}");
                if !whole {
                    continue;
                }
                // KUBE-SERVICES always jumps to KUBE-NODEPORTS, even empty.
                let may_be_empty = target == "KUBE-NODEPORTS";
                assert!(may_be_empty || !chains[target].is_empty(), "{table}: jump to empty chain {target}");
                jumped.insert(target.to_owned());
            }
        }
    }
    for chain in chains.keys().filter(|c| whole && kproxy_iptables::names::is_service_chain(c)) {
        assert!(jumped.contains(chain), "{table}: service chain {chain} is not used");
    }
}

fn config() -> PlanConfig {
    PlanConfig {
        local_detector: LocalDetector::Cidrs(vec!["10.244.0.0/16".parse().expect("literal")]),
        ..PlanConfig::default()
    }
}

fn lb(s: &mut Scenario, policy: &str, endpoints: &[(&str, &str)]) {
    s.service(
        service("ns", "lb")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.10")
            .load_balancer_ingress("198.51.100.1", None)
            .source_ranges(&["203.0.113.0/24"])
            .port("http", "TCP", 80)
            .node_port(30080)
            .external_traffic_policy(policy)
            .session_affinity("ClientIP", Some(60))
            .build(),
    );
    let sl = endpoints
        .iter()
        .fold(slice("ns", "lb-a", "lb").port("http", "TCP", 8080), |sl, (ip, n)| sl.endpoint(Ep::new(ip).node(n)));
    s.slice(sl.build());
}

fn web(s: &mut Scenario, n: usize) {
    s.service(service("ns", "web").cluster_ip("10.96.0.20").port("", "TCP", 80).build());
    let sl = (0..n).fold(slice("ns", "web-a", "web").port("", "TCP", 80), |sl, i| {
        sl.endpoint(Ep::new(&format!("10.244.5.{}", i + 1)).node("node-b"))
    });
    s.slice(sl.build());
}

fn steps() -> Vec<Step> {
    vec![
        Box::new(|s| lb(s, "Cluster", &[("10.244.1.1", "node-a"), ("10.244.2.1", "node-b")])),
        Box::new(|s| web(s, 3)),
        Box::new(|s| lb(s, "Local", &[("10.244.1.1", "node-a"), ("10.244.2.1", "node-b")])),
        Box::new(|s| lb(s, "Local", &[("10.244.2.1", "node-b")])),
        Box::new(|s| web(s, 0)),
        Box::new(|s| lb(s, "Local", &[])),
        Box::new(|s| web(s, 5)),
        Box::new(|s| {
            s.delete(Kind::Service, "ns", "lb");
        }),
        Box::new(|s| web(s, 1)),
    ]
}

fn node_a() -> Scenario {
    let mut s = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    s.node(node("node-a").address("InternalIP", "192.168.77.1").build());
    s
}

#[test]
fn partial_payloads_over_time_leave_the_kernel_as_a_full_payload_would() {
    let mut s = node_a();
    let steps = steps();
    let mut kernel = Kernel::new();
    let mut applied: Option<Applied> = None;
    for (i, step) in steps.iter().enumerate() {
        step(&mut s);
        s.sync();
        let partial = plan(s.state(), IpFamily::V4, &config(), applied.as_ref());
        restore(&mut kernel, &partial.payload.render());
        let mut fresh = Kernel::new();
        restore(&mut fresh, &plan(s.state(), IpFamily::V4, &config(), None).payload.render());
        assert_eq!(kernel, fresh, "after step {i}");
        applied = Some(partial.applied);
    }
}

#[test]
fn split_payloads_only_jump_to_chains_that_exist_and_end_as_a_full_payload_would() {
    let mut s = node_a();
    let mut kernel = Kernel::new();
    let mut applied: Option<Applied> = None;
    let mut most = 0;
    for (i, step) in steps().iter().enumerate() {
        step(&mut s);
        s.sync();
        let planned = plan(s.state(), IpFamily::V4, &config(), applied.as_ref());
        let parts = planned.payload.split(3);
        most = most.max(parts.len());
        for part in &parts {
            restore_with(&mut kernel, &part.render(), false);
        }
        let full = plan(s.state(), IpFamily::V4, &config(), None).payload;
        let mut fresh = Kernel::new();
        restore(&mut fresh, &full.render());
        assert_eq!(kernel, fresh, "after step {i}");
        // A full payload split into an empty kernel too.
        let mut cold = Kernel::new();
        let parts = full.split(3);
        most = most.max(parts.len());
        for part in &parts {
            restore_with(&mut cold, &part.render(), false);
        }
        assert_eq!(cold, fresh, "full payload after step {i}");
        for table in kernel.keys() {
            check_jumps(&kernel[table], table, true);
        }
        applied = Some(planned.applied);
    }
    assert!(most >= 4, "the payloads were split into at most {most} restores");
}

/// The restores of a prepared plan, each rendered chunk by chunk.
fn streamed(prepared: &kproxy_iptables::Prepared<'_>, max_chains: Option<usize>) -> Vec<String> {
    prepared.restores(max_chains).iter().map(|r| prepared.chunks(r).collect::<String>()).collect()
}

/// What the materialised payload gives for the same restores.
fn materialised(payload: &Payload, max_chains: Option<usize>) -> Vec<String> {
    let parts = match max_chains {
        Some(max) => payload.split(max),
        None => vec![payload.clone()],
    };
    parts.iter().filter(|p| !p.is_empty()).map(Payload::render).collect()
}

#[test]
fn streamed_restores_are_the_materialised_payloads_byte_for_byte() {
    let mut s = node_a();
    let mut applied: Option<Applied> = None;
    let stale = Payload {
        nat: kproxy_iptables::TablePayload { deleted: vec!["KUBE-SEP-STALE0000000000".into()], ..Default::default() },
        ..Payload::default()
    };
    let mut split = 0;
    for (i, step) in steps().iter().enumerate() {
        step(&mut s);
        s.sync();
        for previous in [None, applied.as_ref()] {
            let planned = plan(s.state(), IpFamily::V4, &config(), previous);
            for max in [Some(3), Some(5), Some(10_000), None] {
                let prepared = prepare(s.state(), IpFamily::V4, &config(), previous);
                assert_eq!(streamed(&prepared, max), materialised(&planned.payload, max), "step {i}, max {max:?}");
                split = split.max(prepared.restores(max).len());
                // Stale chains of an earlier run, deleted in the last restore.
                let mut prepared = prepared;
                prepared.delete_also(stale.clone());
                let mut payload = planned.payload.clone();
                payload.nat.deleted.extend(stale.nat.deleted.iter().cloned());
                assert_eq!(streamed(&prepared, max), materialised(&payload, max), "step {i}, max {max:?}, stale");
            }
            let prepared = prepare(s.state(), IpFamily::V4, &config(), previous);
            assert_eq!(prepared.written_rules(), [planned.payload.filter.rules.len(), planned.payload.nat.rules.len()]);
            assert_eq!(prepared.chain_count(), planned.payload.chain_count());
        }
        applied = Some(plan(s.state(), IpFamily::V4, &config(), applied.as_ref()).applied);
    }
    assert!(split >= 4, "the payloads were split into at most {split} restores");
}

#[test]
fn a_big_payload_streams_in_bounded_chunks_and_a_partial_one_only_declares_the_changed_chains() {
    let mut s = node_a();
    for n in 0..300 {
        s.service(
            service("big", &format!("s{n}"))
                .cluster_ip(&format!("10.96.{}.{}", n / 200, n % 200 + 1))
                .port("", "TCP", 80)
                .build(),
        );
        let sl = (0..10).fold(slice("big", &format!("s{n}-a"), &format!("s{n}")).port("", "TCP", 80), |sl, e| {
            sl.endpoint(Ep::new(&format!("10.244.{}.{}", n % 250, e + 1)).node("node-b"))
        });
        s.slice(sl.build());
    }
    s.sync();
    let cold = prepare(s.state(), IpFamily::V4, &config(), None);
    let restores = cold.restores(None);
    assert_eq!(restores.len(), 1);
    let chunks: Vec<String> = cold.chunks(&restores[0]).collect();
    assert!(chunks.len() > 4, "{} chunks", chunks.len());
    // A chunk ends after the piece that crossed the bound: one port's rules
    // or the fixed chain KUBE-SERVICES (a few hundred bytes per service).
    for chunk in &chunks {
        assert!(chunk.len() < CHUNK_BYTES + 64 * 1024, "a chunk of {} bytes", chunk.len());
    }
    let applied = cold.applied;
    // One endpoint of one service changes: only its cluster chain and the
    // endpoint chains come and go.
    let sl = (0..10).fold(slice("big", "s7-a", "s7").port("", "TCP", 80), |sl, e| {
        sl.endpoint(Ep::new(&format!("10.244.7.{}", e + 2)).node("node-b"))
    });
    s.slice(sl.build());
    s.sync();
    let partial = prepare(s.state(), IpFamily::V4, &config(), Some(&applied));
    assert_eq!(partial.ports_planned, 1);
    let text = streamed(&partial, None).concat();
    let declared: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix(':')).collect();
    let deleted: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("-X ")).collect();
    assert_eq!(declared.len(), 1 + 1 + 1, "{text}");
    assert_eq!(deleted.len(), 1, "{text}");
    assert!(declared[0].starts_with("KUBE-SVC-"), "{text}");
    assert!(declared[1].starts_with("KUBE-SEP-"), "{text}");
}
