//! Plans over time: partial plans keep the kernel where a full plan would
//! put it, and touch only what changed.

mod common;

use common::*;
use kproxy_model::{Changes, IpFamily, Protocol};
use kproxy_nftables::{Op, Table, plan, render, table};
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, service, slice};

/// Drives a scenario through syncs, applying each plan to in-memory tables
/// and checking them against the full desired tables.
struct Kernel {
    tables: [Table; 2],
    applied: Option<kproxy_nftables::Applied>,
}

impl Kernel {
    fn new() -> Self {
        Self { tables: [Table::default(), Table::default()], applied: None }
    }

    fn sync(&mut self, s: &mut Scenario, full: bool) -> kproxy_nftables::Planned {
        let changes = s.sync();
        let planned = plan(s.state(), &changes, full, &config(), self.applied.clone());
        apply(&mut self.tables, &planned.plan);
        for (i, family) in IpFamily::ALL.into_iter().enumerate() {
            let mut want = table(s.state(), family, &config());
            want.elements.retain(|_, e| !e.is_empty());
            assert_eq!(
                self.tables[i],
                want,
                "{family} table after {} sync",
                if planned.plan.full { "a full" } else { "a partial" }
            );
        }
        self.applied = Some(planned.applied.clone());
        planned
    }
}

fn udp_service(s: &mut Scenario, name: &str, ip: &str, endpoints: &[&str]) {
    s.service(service("default", name).cluster_ip(ip).port("dns", "UDP", 53).build());
    let sl = endpoints
        .iter()
        .fold(slice("default", &format!("{name}-1"), name).port("dns", "UDP", 5353), |sl, e| sl.endpoint(Ep::new(e)));
    s.slice(sl.build());
}

#[test]
fn partial_plans_reach_the_same_tables_as_full_ones() {
    let mut s = scenario();
    let mut k = Kernel::new();
    web(&mut s);
    assert!(k.sync(&mut s, false).plan.full, "nothing applied yet: full");
    udp_service(&mut s, "dns", "10.96.0.53", &["10.244.2.53", "10.244.2.54", "10.244.2.55"]);
    assert!(!k.sync(&mut s, false).plan.full);
    udp_service(&mut s, "dns", "10.96.0.53", &["10.244.2.53"]);
    k.sync(&mut s, false);
    // Session affinity, then round robin, then back.
    s.service(
        service("default", "web")
            .type_("NodePort")
            .cluster_ip("10.96.0.10")
            .port("http", "TCP", 80)
            .node_port(30080)
            .session_affinity("ClientIP", None)
            .build(),
    );
    k.sync(&mut s, false);
    let mut rr = service("default", "web")
        .type_("NodePort")
        .cluster_ip("10.96.0.10")
        .port("http", "TCP", 80)
        .node_port(30080)
        .build();
    rr.metadata.annotations = Some([("kproxy.io/scheduler".to_owned(), "rr".to_owned())].into());
    s.service(rr);
    k.sync(&mut s, false);
    web(&mut s);
    k.sync(&mut s, false);
    s.delete(kproxy_state::Kind::Service, "default", "dns");
    k.sync(&mut s, false);
    // A full sync over an applied state re-asserts without rebuilding.
    let planned = k.sync(&mut s, true);
    let ops = &planned.plan.families[0].ops;
    assert!(!ops.contains(&Op::DeleteTable));
    assert!(ops.iter().any(|op| matches!(op, Op::FlushChain(_))));
}

#[test]
fn a_partial_plan_for_one_service_says_nothing_about_the_others() {
    let mut s = scenario();
    let mut k = Kernel::new();
    web(&mut s);
    for i in 0..20 {
        udp_service(&mut s, &format!("svc{i}"), &format!("10.96.1.{i}"), &[&format!("10.244.2.{i}")]);
    }
    k.sync(&mut s, false);
    udp_service(&mut s, "svc7", "10.96.1.7", &["10.244.2.7", "10.244.2.77"]);
    let planned = k.sync(&mut s, false);
    let text = render::plan(&planned.plan);
    for i in (0..20).filter(|i| *i != 7) {
        assert!(!text.contains(&format!("10.96.1.{i} ")), "mentions svc{i}:\n{text}");
    }
    assert!(!text.contains("10.96.0.10"), "{text}");
    assert!(text.contains("10.96.1.7 . udp . 53"), "{text}");
}

#[test]
fn a_freed_frontend_goes_to_the_waiting_claimant_in_the_same_sync() {
    let mut s = scenario();
    let mut k = Kernel::new();
    web(&mut s);
    k.sync(&mut s, false);
    thief(&mut s);
    let planned = k.sync(&mut s, false);
    assert_eq!(
        planned.skips,
        ["default/thief:http/TCP: frontend 10.96.0.10:80 is already served by default/web:http/TCP; not served"]
    );
    s.delete(kproxy_state::Kind::Service, "default", "web");
    let planned = k.sync(&mut s, false);
    assert!(planned.skips.is_empty(), "{:?}", planned.skips);
    let key = vec![
        kproxy_nftables::ast::Atom::Addr("10.96.0.10".parse().unwrap()),
        kproxy_nftables::ast::Atom::Proto(Protocol::Tcp),
        kproxy_nftables::ast::Atom::Port(80),
    ];
    assert!(k.tables[0].lookup("service-ips", &key).is_some(), "thief now serves its external IP");
}

#[test]
fn a_node_address_change_makes_the_plan_full() {
    let mut s = scenario();
    let mut k = Kernel::new();
    web(&mut s);
    k.sync(&mut s, false);
    s.node(kproxy_testkit::node("node-a").address("InternalIP", "192.168.77.2").build());
    assert!(k.sync(&mut s, false).plan.full);
    let _ = Changes::default();
}

/// shop's Service with one field changed at a time: every step from each
/// variant to the next, and back to the start, is a partial plan the
/// kernel takes (no set deleted while a rule uses it, nothing missing) and
/// that leaves the tables a full plan would.
fn shop_variants() -> Vec<(&'static str, k8s_openapi::api::core::v1::Service)> {
    let base = || {
        service("default", "shop")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.20")
            .port("https", "TCP", 443)
            .node_port(30443)
            .load_balancer_ingress("198.51.100.20", None)
    };
    let annotated = |scheduler: &str| {
        let mut svc = base().build();
        svc.metadata.annotations = Some([("kproxy.io/scheduler".to_owned(), scheduler.to_owned())].into());
        svc
    };
    vec![
        ("LoadBalancer", base().build()),
        ("affinity on", base().session_affinity("ClientIP", None).build()),
        ("affinity timeout 60 s", base().session_affinity("ClientIP", Some(60)).build()),
        ("affinity timeout 3600 s", base().session_affinity("ClientIP", Some(3600)).build()),
        ("affinity off", base().build()),
        ("external policy Local", base().external_traffic_policy("Local").build()),
        ("internal policy Local", base().internal_traffic_policy("Local").build()),
        ("source ranges", base().source_ranges(&["203.0.113.0/24"]).build()),
        ("other source ranges", base().source_ranges(&["198.18.0.0/15"]).build()),
        ("scheduler rr", annotated("rr")),
        ("scheduler mh", annotated("mh")),
        ("another port", base().port("http", "TCP", 80).build()),
        ("type ClusterIP", service("default", "shop").cluster_ip("10.96.0.20").port("https", "TCP", 443).build()),
        (
            "type NodePort",
            service("default", "shop")
                .type_("NodePort")
                .cluster_ip("10.96.0.20")
                .port("https", "TCP", 443)
                .node_port(30443)
                .build(),
        ),
        ("external IP", base().external_ips(&["198.51.100.30"]).build()),
    ]
}

#[test]
fn every_field_change_of_a_live_service_is_a_clean_partial_plan() {
    let mut s = scenario();
    let mut k = Kernel::new();
    s.slice(
        slice("default", "shop-1", "shop")
            .port("https", "TCP", 8443)
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.1.30").node("node-a"))
            .endpoint(Ep::new("10.244.2.30").node("node-b"))
            .build(),
    );
    let variants = shop_variants();
    for (what, svc) in variants.iter().chain(variants.first()) {
        s.service(svc.clone());
        let planned = k.sync(&mut s, false);
        assert!(planned.skips.is_empty(), "{what}: {:?}", planned.skips);
        assert!(!planned.plan.full || k.applied.is_some(), "{what}");
    }
}

#[test]
fn a_partial_plan_keeps_the_state_a_full_plan_would_keep_while_frontends_change_hands() {
    // Two ports claiming web's cluster IP as an external IP, arriving and
    // leaving one by one: after each partial sync, what the planner keeps
    // (claims, owners, elements) is what a full plan over the same
    // previous state keeps, and the tables are the full desired ones.
    let mut s = scenario();
    let mut k = Kernel::new();
    web(&mut s);
    k.sync(&mut s, false);
    let late = |s: &mut Scenario| {
        s.service(
            service("default", "late")
                .cluster_ip("10.96.0.91")
                .external_ips(&["10.96.0.10"])
                .port("http", "TCP", 80)
                .build(),
        );
        s.slice(slice("default", "late-1", "late").port("http", "TCP", 80).endpoint(Ep::new("10.244.2.98")).build());
    };
    type Step = (&'static str, fn(&mut Scenario));
    let steps: [Step; 4] = [
        ("thief claims", thief),
        ("late claims too", late),
        ("web leaves", |s| {
            s.delete(kproxy_state::Kind::Service, "default", "web");
        }),
        ("web is back", web),
    ];
    let mut owners = Vec::new();
    for (step, change) in steps {
        let previous = k.applied.clone();
        change(&mut s);
        let planned = k.sync(&mut s, false);
        assert!(!planned.plan.full, "{step}: partial");
        let from_scratch = plan(s.state(), &Changes::default(), true, &config(), previous);
        assert_eq!(planned.applied, from_scratch.applied, "{step}: kept state");
        let key = [
            kproxy_nftables::ast::Atom::Addr("10.96.0.10".parse().unwrap()),
            kproxy_nftables::ast::Atom::Proto(Protocol::Tcp),
            kproxy_nftables::ast::Atom::Port(80),
        ];
        owners.push(format!("{:?}", k.tables[0].lookup("service-ips", &key).map(|d| d.is_some())));
        owners.push(planned.skips.join("; "));
    }
    // The cluster IP wins against each newcomer; without it, the first
    // claimant by name (late) takes over; back, the cluster IP wins again.
    let served_by = |who: &str, by: &str| {
        format!("default/{who}:http/TCP: frontend 10.96.0.10:80 is already served by default/{by}:http/TCP; not served")
    };
    assert_eq!(owners[1], served_by("thief", "web"));
    assert_eq!(owners[3], served_by("late", "web"));
    assert_eq!(owners[5], "", "late takes over without a complaint");
    assert_eq!(owners[7], served_by("late", "web"));
}
