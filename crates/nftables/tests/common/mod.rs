//! Shared fixtures: a small cluster as seen from node-a.

#![allow(dead_code)]

use kproxy_model::{Changes, ProxyState};
use kproxy_nftables::{Applied, PlanConfig, Planned, plan};
use kproxy_state::StateConfig;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

pub fn scenario() -> Scenario {
    let mut s = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    s.node(node("node-a").address("InternalIP", "192.168.77.1").build());
    s
}

/// default/web: ClusterIP + NodePort 30080, two endpoints (one local).
pub fn web(s: &mut Scenario) {
    s.service(
        service("default", "web")
            .type_("NodePort")
            .cluster_ip("10.96.0.10")
            .port("http", "TCP", 80)
            .node_port(30080)
            .build(),
    );
    s.slice(
        slice("default", "web-1", "web")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.1.10").node("node-a"))
            .endpoint(Ep::new("10.244.2.10").node("node-b"))
            .build(),
    );
}

/// default/thief: its own cluster IP, and web's cluster IP as an external IP.
pub fn thief(s: &mut Scenario) {
    s.service(
        service("default", "thief")
            .cluster_ip("10.96.0.90")
            .external_ips(&["10.96.0.10"])
            .port("http", "TCP", 80)
            .build(),
    );
    s.slice(slice("default", "thief-1", "thief").port("http", "TCP", 80).endpoint(Ep::new("10.244.2.99")).build());
}

pub fn config() -> PlanConfig {
    PlanConfig {
        local_detector: kproxy_nftables::LocalDetector::Cidrs(vec!["10.244.0.0/16".parse().unwrap()]),
        ..PlanConfig::default()
    }
}

pub fn full(state: &ProxyState, previous: Option<&Applied>) -> Planned {
    plan(state, &Changes::default(), true, &config(), previous.cloned())
}

use kproxy_model::IpFamily;
use kproxy_nftables::{Op, Plan, Table};

/// Applies a plan's operations to in-memory tables, as the kernel would
/// (panicking where the kernel would refuse: a missing object, a chain or
/// set deleted while still referenced).
pub fn apply(tables: &mut [Table; 2], plan: &Plan) {
    for family_plan in &plan.families {
        let family = family_plan.family.expect("a family");
        let table = &mut tables[usize::from(family == IpFamily::V6)];
        for op in &family_plan.ops {
            match op {
                Op::AddTable => {}
                Op::DeleteTable => *table = Table::default(),
                Op::AddSet(set) => {
                    table.sets.entry(set.name.clone()).or_insert_with(|| set.clone());
                }
                Op::FlushSet(set) => {
                    table.elements.remove(&set.name);
                }
                Op::DeleteSet(set) => {
                    let user = table.chains.values().find(|c| c.rules.iter().any(|r| r.uses_set(&set.name)));
                    assert!(
                        user.is_none(),
                        "deleting set {} still used by chain {}",
                        set.name,
                        user.map_or("", |c| &c.name)
                    );
                    assert!(table.sets.remove(&set.name).is_some(), "deleting missing set {}", set.name);
                    table.elements.remove(&set.name);
                }
                Op::AddChain(chain) => {
                    table.chains.entry(chain.name.clone()).or_insert_with(|| chain.clone());
                }
                Op::FlushChain(name) => table.chains.get_mut(name).expect("flushing a missing chain").rules.clear(),
                Op::DeleteRule { chain, handle } => panic!("the planner deleted rule {handle} of {chain} by handle"),
                Op::DeleteChain(name) => {
                    let chain = table.chains.remove(name).expect("deleting a missing chain");
                    assert!(chain.rules.is_empty(), "deleting chain {name} with rules");
                    let referenced = table.elements.values().flat_map(|e| e.values()).any(|d| {
                        matches!(d, Some(kproxy_nftables::ast::Data::Verdict(kproxy_nftables::ast::Verdict::Goto(c))) if c == name)
                    });
                    assert!(!referenced, "deleting chain {name} still referenced by an element");
                }
                Op::AddRule { chain, rule } => {
                    table.chains.get_mut(chain).expect("rule in a missing chain").rules.push(rule.clone())
                }
                Op::AddElements { set, elements } => {
                    assert!(table.sets.contains_key(set), "elements for missing set {set}");
                    for e in elements {
                        let previous =
                            table.elements.entry(set.clone()).or_default().insert(e.key.clone(), e.data.clone());
                        assert!(previous.is_none(), "adding existing element {:?} to {set}", e.key);
                    }
                }
                Op::DeleteElements { set, keys } => {
                    for k in keys {
                        let removed = table.elements.get_mut(set).and_then(|e| e.remove(k));
                        assert!(removed.is_some(), "deleting missing element {k:?} of {set}");
                    }
                }
            }
        }
        table.elements.retain(|_, e| !e.is_empty());
    }
}
