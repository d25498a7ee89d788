//! Shared fixtures: a cluster seen from node-a with one Service per
//! feature, and helpers to plan and to apply ops to map contents.

#![allow(dead_code)]

use kproxy_ebpf::maps::{Contents, Op};
use kproxy_ebpf::{Applied, LocalDetector, PlanConfig, Planned, plan, support};
use kproxy_model::{Changes, ProxyState};
use kproxy_state::StateConfig;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

pub const NODE: &str = "192.168.77.1";

pub fn scenario() -> Scenario {
    let mut s = Scenario::new(StateConfig {
        node_name: "node-a".into(),
        service_cidrs: vec!["10.96.0.0/16".parse().unwrap(), "fd00:96::/112".parse().unwrap()],
        mode: support(),
        ..StateConfig::default()
    });
    s.node(node("node-a").address("InternalIP", NODE).build());
    s
}

pub fn config() -> PlanConfig {
    PlanConfig {
        local_detector: LocalDetector::Cidrs(vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:10:244::/48".parse().unwrap(),
        ]),
        ..PlanConfig::default()
    }
}

/// default/web: ClusterIP + NodePort 30080, one local and one remote endpoint.
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

/// Every feature: traffic policies, no endpoints, source ranges, external
/// IPs, affinity, schedulers with weights, UDP, IPv6, terminating
/// fallback, a contested external IP.
pub fn everything(s: &mut Scenario) {
    web(s);
    s.service(
        service("default", "lb-local")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.20")
            .port("http", "TCP", 80)
            .node_port(30020)
            .external_ips(&["198.51.100.5"])
            .load_balancer_ingress("192.0.2.10", None)
            .source_ranges(&["203.0.113.0/24", "192.168.77.0/24"])
            .external_traffic_policy("Local")
            .build(),
    );
    s.slice(
        slice("default", "lb-local-1", "lb-local")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.1.20").node("node-a"))
            .endpoint(Ep::new("10.244.2.20").node("node-b"))
            .build(),
    );
    s.service(
        service("default", "remote-only")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.30")
            .port("http", "TCP", 80)
            .node_port(30030)
            .load_balancer_ingress("192.0.2.30", None)
            .external_traffic_policy("Local")
            .build(),
    );
    s.slice(
        slice("default", "remote-only-1", "remote-only")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.2.30").node("node-b"))
            .build(),
    );
    s.service(service("default", "empty").cluster_ip("10.96.0.40").port("http", "TCP", 80).build());
    s.service(
        service("default", "itp-local")
            .cluster_ip("10.96.0.50")
            .port("http", "TCP", 80)
            .internal_traffic_policy("Local")
            .build(),
    );
    s.slice(
        slice("default", "itp-local-1", "itp-local")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.2.50").node("node-b"))
            .build(),
    );
    s.service(
        service("default", "sticky")
            .cluster_ip("10.96.0.60")
            .port("http", "TCP", 80)
            .session_affinity("ClientIP", Some(600))
            .build(),
    );
    s.slice(
        slice("default", "sticky-1", "sticky")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.1.60").node("node-a"))
            .endpoint(Ep::new("10.244.2.60").node("node-b"))
            .build(),
    );
    for (name, ip, sched) in [
        ("wrr", "10.96.0.70", "wrr"),
        ("sh", "10.96.0.71", "sh"),
        ("dh", "10.96.0.72", "dh"),
        ("mh", "10.96.0.73", "mh"),
    ] {
        s.service(
            service("default", name)
                .cluster_ip(ip)
                .port("http", "TCP", 80)
                .annotation("kproxy.io/scheduler", sched)
                .annotation("kproxy.io/weights", "10.244.2.70=3")
                .build(),
        );
        s.slice(
            slice("default", &format!("{name}-1"), name)
                .port("http", "TCP", 8080)
                .endpoint(Ep::new("10.244.1.70").node("node-a"))
                .endpoint(Ep::new("10.244.2.70").node("node-b"))
                .build(),
        );
    }
    s.service(
        service("default", "lc")
            .cluster_ip("10.96.0.74")
            .port("http", "TCP", 80)
            .annotation("kproxy.io/scheduler", "lc")
            .build(),
    );
    s.slice(
        slice("default", "lc-1", "lc")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.2.74").node("node-b"))
            .build(),
    );
    s.service(service("kube-system", "dns").cluster_ip("10.96.0.80").port("dns", "UDP", 53).build());
    s.slice(
        slice("kube-system", "dns-1", "dns")
            .port("dns", "UDP", 53)
            .endpoint(Ep::new("10.244.1.80").node("node-a"))
            .endpoint(Ep::new("10.244.2.80").node("node-b").terminating_serving())
            .build(),
    );
    s.service(service("default", "dying").cluster_ip("10.96.0.85").port("http", "TCP", 80).build());
    s.slice(
        slice("default", "dying-1", "dying")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.2.85").node("node-b").terminating_serving())
            .build(),
    );
    // Claims web's node port? No: an external IP on web's cluster IP.
    s.service(
        service("default", "thief")
            .cluster_ip("10.96.0.90")
            .external_ips(&["10.96.0.10"])
            .port("http", "TCP", 80)
            .build(),
    );
    s.slice(slice("default", "thief-1", "thief").port("http", "TCP", 80).endpoint(Ep::new("10.244.2.99")).build());
    s.service(
        service("default", "v6")
            .type_("NodePort")
            .cluster_ips(&["fd00:96::10"])
            .port("http", "TCP", 80)
            .node_port(30600)
            .build(),
    );
    s.slice(
        slice("default", "v6-1", "v6")
            .address_type("IPv6")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("fd00:10:244:1::10").node("node-a"))
            .endpoint(Ep::new("fd00:10:244:2::10").node("node-b"))
            .build(),
    );
}

pub fn full(state: &ProxyState, previous: Applied) -> Planned {
    plan(state, &Changes::default(), true, &config(), previous).expect("valid config")
}

/// The maps after `ops` on `contents`, as the kernel would hold them.
pub fn apply(contents: &mut Contents, ops: &[Op]) {
    for op in ops {
        match op {
            Op::PutBackend(k, v) => {
                contents.backends.insert(*k, *v);
            }
            Op::DeleteBackend(k) => {
                contents.backends.remove(k);
            }
            Op::PutFrontend(k, v) => {
                contents.frontends.insert(*k, *v);
            }
            Op::DeleteFrontend(k) => {
                contents.frontends.remove(k);
            }
            Op::PutSourceRange(k) => {
                contents.source_ranges.insert(*k);
            }
            Op::DeleteSourceRange(k) => {
                contents.source_ranges.remove(k);
            }
            Op::PutLocalCidr(k) => {
                contents.local_cidrs.insert(*k);
            }
            Op::DeleteLocalCidr(k) => {
                contents.local_cidrs.remove(k);
            }
            Op::DeleteRr(_) | Op::PutConfig(_) => {}
        }
    }
}
