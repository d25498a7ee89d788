//! From Kubernetes objects through kproxy-state to a plan, and plans over
//! time applied to an in-memory kernel.

use std::collections::BTreeMap;

use kproxy_ipvs::{Connections, ObservedServer, Op, PlanConfig, ServerKey, VirtualServer, plan};
use kproxy_model::Protocol;
use kproxy_state::StateConfig;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

fn scenario() -> Scenario {
    let mut s = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    s.node(node("node-a").address("InternalIP", "192.168.77.1").build());
    s
}

/// default/web: LoadBalancer with `externalTrafficPolicy: Local`, ClientIP
/// affinity, the wrr scheduler and weights from annotations.
fn web(s: &mut Scenario, endpoints: &[(&str, &str)]) {
    let mut svc = service("default", "web")
        .type_("LoadBalancer")
        .cluster_ip("10.96.0.10")
        .external_ips(&["203.0.113.7"])
        .load_balancer_ingress("198.51.100.1", None)
        .port("http", "TCP", 80)
        .node_port(30080)
        .external_traffic_policy("Local")
        .session_affinity("ClientIP", Some(600))
        .build();
    svc.metadata.annotations = Some(
        [
            ("kproxy.io/scheduler".to_owned(), "wrr".to_owned()),
            ("kproxy.io/weights".to_owned(), "10.244.2.10=3".to_owned()),
        ]
        .into(),
    );
    s.service(svc);
    let sl = endpoints.iter().fold(slice("default", "web-1", "web").port("http", "TCP", 8080), |sl, (ip, n)| {
        sl.endpoint(Ep::new(ip).node(n))
    });
    s.slice(sl.build());
}

fn key(addr: &str, port: u16) -> ServerKey {
    ServerKey::new(Protocol::Tcp, addr.parse().expect("test address"), port)
}

#[test]
fn a_load_balancer_service_plans_every_frontend_from_the_annotations() {
    let mut s = scenario();
    web(&mut s, &[("10.244.1.10", "node-a"), ("10.244.2.10", "node-b")]);
    s.sync();
    let plan = plan(s.state(), &PlanConfig::default());
    assert!(plan.rejected.is_empty(), "{:?}", plan.rejected);
    let summary: Vec<String> = plan
        .servers
        .values()
        .filter(|v| v.mark.is_none())
        .map(|v| {
            let dests: Vec<String> =
                v.destinations.iter().map(|d| format!("{}/{}", d.socket_addr(), d.weight)).collect();
            format!("{} {} {:?} {}", v.key(), v.scheduler, v.persistence, dests.join(","))
        })
        .collect();
    assert_eq!(
        summary,
        [
            "TCP 10.96.0.10:80 wrr Some(600) 10.244.1.10:8080/1,10.244.2.10:8080/3",
            "TCP 192.168.77.1:30080 wrr Some(600) 10.244.1.10:8080/1",
            "TCP 198.51.100.1:80 wrr Some(600) 10.244.1.10:8080/1",
            "TCP 203.0.113.7:80 wrr Some(600) 10.244.1.10:8080/1",
        ]
    );
    let addresses: Vec<String> = plan.addresses.iter().map(ToString::to_string).collect();
    assert_eq!(addresses, ["10.96.0.10", "198.51.100.1", "203.0.113.7"]);
    // In-cluster clients of the three Local-policy frontends: two mark
    // servers each (pods, node), with every endpoint.
    let marked: Vec<&VirtualServer> = plan.servers.values().filter(|v| v.mark.is_some()).collect();
    assert_eq!(marked.len(), 6);
    for v in marked {
        let dests: Vec<String> = v.destinations.iter().map(|d| format!("{}/{}", d.socket_addr(), d.weight)).collect();
        assert_eq!(dests, ["10.244.1.10:8080/1", "10.244.2.10:8080/3"], "{}", v.key());
    }
}

/// `random` is no IPVS scheduler: the service is served with the default,
/// and the state (built with the mode's support, as `run` builds it) says so.
#[test]
fn a_random_scheduler_annotation_is_served_with_the_default_and_a_warning() {
    let config = PlanConfig { default_scheduler: Some(kproxy_model::Scheduler::Wrr), ..PlanConfig::default() };
    let mut s =
        Scenario::new(StateConfig { node_name: "node-a".into(), mode: config.support(), ..StateConfig::default() });
    let svc = service("default", "dice").cluster_ip("10.96.0.30").port("http", "TCP", 80);
    s.service(svc.annotation("kproxy.io/scheduler", "random").build());
    s.sync();
    let port = s.port("default", "dice", "http");
    assert_eq!(
        port.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "kproxy.io/scheduler: scheduler random is not supported in ipvs mode (supported: rr, wrr, lc, wlc, sed, nq, sh, dh, mh, fo, ovf, lblc, lblcr); using wrr"
        ]
    );
    let plan = plan(s.state(), &config);
    assert!(plan.rejected.is_empty(), "{:?}", plan.rejected);
    let servers: Vec<String> = plan.servers.values().map(|v| format!("{} {}", v.key(), v.scheduler)).collect();
    assert_eq!(servers, ["TCP 10.96.0.30:80 wrr"]);
}

/// Applies ops the way the kernel would, with no connections anywhere.
fn apply(kernel: &mut BTreeMap<ServerKey, ObservedServer>, ops: &[Op]) {
    for op in ops {
        match op {
            Op::AddServer(v) => {
                kernel.insert(v.key(), ObservedServer::idle(v.clone()));
            }
            Op::EditServer(v) => {
                let have = &mut kernel.get_mut(&v.key()).expect("edited server exists").server;
                have.scheduler.clone_from(&v.scheduler);
                have.persistence = v.persistence;
            }
            Op::DeleteServer(k) => {
                kernel.remove(k).expect("deleted server exists");
            }
            Op::AddDest { server, dest } | Op::EditDest { server, dest } => {
                let dests = &mut kernel.get_mut(server).expect("server exists").server.destinations;
                dests.retain(|d| d.socket_addr() != dest.socket_addr());
                dests.push(*dest);
                dests.sort();
            }
            Op::DeleteDest { server, dest } => {
                let dests = &mut kernel.get_mut(server).expect("server exists").server.destinations;
                dests.retain(|d| d.socket_addr() != *dest);
            }
        }
    }
}

#[test]
fn syncs_converge_on_the_plan_and_drain_a_removed_endpoint() {
    let mut s = scenario();
    let mut kernel = BTreeMap::new();
    web(&mut s, &[("10.244.1.10", "node-a"), ("10.244.2.10", "node-b")]);
    s.sync();
    let first = plan(s.state(), &PlanConfig::default());
    let ops = kproxy_ipvs::diff(&kernel, &first.servers, &[]);
    apply(&mut kernel, &ops);
    assert_eq!(kproxy_ipvs::diff(&kernel, &first.servers, &[]), [], "converged");

    // node-b's endpoint leaves while it holds a connection through the cluster IP.
    web(&mut s, &[("10.244.1.10", "node-a")]);
    s.sync();
    let second = plan(s.state(), &PlanConfig::default());
    let cluster_ip = key("10.96.0.10", 80);
    let busy = "10.244.2.10:8080".parse().expect("test socket address");
    kernel.get_mut(&cluster_ip).expect("planned").connections.insert(busy, Connections { active: 1, inactive: 0 });
    let ops = kproxy_ipvs::diff(&kernel, &second.servers, &[]);
    // The idle mark servers (in-cluster clients of the LB frontends) lose
    // it at once; the cluster IP quiesces it.
    let (marked, ops_now): (Vec<Op>, Vec<Op>) =
        ops.into_iter().partition(|op| matches!(op, Op::DeleteDest { server, .. } if server.mark.is_some()));
    assert_eq!(marked.len(), 6, "{marked:?}");
    apply(&mut kernel, &marked);
    let ops = ops_now;
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert!(matches!(ops[0], Op::EditDest { server, dest } if server == cluster_ip && dest.weight == 0));
    apply(&mut kernel, &ops);

    kernel.get_mut(&cluster_ip).expect("planned").connections.clear();
    let ops = kproxy_ipvs::diff(&kernel, &second.servers, &[]);
    assert_eq!(ops, [Op::DeleteDest { server: cluster_ip, dest: busy }]);
    apply(&mut kernel, &ops);
    assert_eq!(kproxy_ipvs::diff(&kernel, &second.servers, &[]), []);

    // The service goes away: every server it had is deleted.
    s.delete(kproxy_state::Kind::Service, "default", "web");
    s.sync();
    let third = plan(s.state(), &PlanConfig::default());
    let ops = kproxy_ipvs::diff(&kernel, &third.servers, &[]);
    assert_eq!(ops.len(), 4 + 6, "4 frontends and 6 mark servers");
    assert!(ops.iter().all(|op| matches!(op, Op::DeleteServer(_))));
}
