//! The state built through the public path (convert + `StateBuilder`) for a
//! generated cluster using every Service feature, before and after change
//! events, compared with snapshots taken before the records were made
//! compact (interned names, compact endpoints, one copy per object): the
//! restructuring must not change a single field of the `ProxyState` or of
//! the `Changes` handed to the dataplanes.

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kproxy_model::Changes;
use kproxy_state::{Kind, StateConfig};
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, ServiceBuilder, node, pod, service, slice};

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const NODES: [&str; 4] = ["node-a", "node-b", "node-c", ""];

/// The state and the changes of one sync, as the snapshot records them.
fn record(s: &Scenario, changes: &Changes) -> String {
    let trigger_times: Vec<(String, usize)> =
        changes.trigger_times.iter().map(|(service, times)| (service.to_string(), times.len())).collect();
    let changes = serde_json::json!({
        "servicePorts": changes.service_ports,
        "staleUdpEndpoints": changes.stale_udp_endpoints,
        "staleUdpFrontends": changes.stale_udp_frontends,
        "serviceCidrs": changes.service_cidrs,
        "node": changes.node,
        "serviceChanges": changes.service_changes,
        "endpointChanges": changes.endpoint_changes,
        "triggerTimes": trigger_times,
    });
    let json = serde_json::json!({ "changes": changes, "state": s.state() });
    serde_json::to_string_pretty(&json).expect("state serialises")
}

/// Service `i` of the generated cluster: its type, families, ports,
/// policies and annotations vary with `i`.
fn generated_service(i: usize) -> ServiceBuilder {
    let ns = format!("ns-{}", i % 3);
    let name = format!("svc-{i:02}");
    let v4 = format!("10.96.{}.{}", i / 200, i % 200 + 1);
    let v6 = format!("fd00::{:x}", i + 1);
    let mut b = service(&ns, &name);
    b = match i % 3 {
        0 => b.cluster_ip(&v4),
        1 => b.cluster_ips(&[&v4, &v6]),
        _ => b.cluster_ip(&v6),
    };
    let node_ports = matches!(i % 4, 1 | 2);
    b = b.port("http", "TCP", 80);
    if node_ports {
        b = b.node_port(30000 + i as i32);
    }
    b = match i % 5 {
        0 => b.port_named("dns", "UDP", 53, "dns-port"),
        1 => b.port_to("", "SCTP", 9000, IntOrString::String("9001".into())),
        2 => b.port_to("grpc", "TCP", 9090, IntOrString::Int(19090)),
        _ => b,
    };
    match i % 4 {
        1 => b = b.type_("NodePort"),
        2 => {
            b = b
                .type_("LoadBalancer")
                .load_balancer_ingress(&format!("203.0.113.{i}"), None)
                .load_balancer_ingress(&format!("203.0.113.{}", i + 100), Some("Proxy"))
                .load_balancer_ingress(&format!("2001:db8::{i:x}"), Some("VIP"));
            if i % 3 != 2 {
                b = b.source_ranges(&["192.0.2.0/24", "2001:db8:1::/48"]);
            }
        }
        _ => {}
    }
    if i % 7 == 3 {
        b = b.external_ips(&[&format!("198.51.100.{i}"), &format!("2001:db8:2::{i:x}")]);
    }
    if i % 6 == 2 {
        b = b.external_traffic_policy("Local").health_check_node_port(32000 + i as i32);
    }
    if i % 5 == 4 {
        b = b.internal_traffic_policy("Local");
    }
    match i % 8 {
        1 => b = b.session_affinity("ClientIP", None),
        5 => b = b.session_affinity("ClientIP", Some(60)),
        _ => {}
    }
    if i % 9 == 7 {
        b = b.publish_not_ready_addresses();
    }
    match i % 11 {
        3 => b = b.annotation("kproxy.io/scheduler", "rr").annotation("kproxy.io/weights", "10.1.3.1=3,10.1.3.2=0"),
        6 => b = b.annotation("kproxy.io/scheduler", "fastest").annotation("kproxy.io/weights", "nonsense"),
        8 => {
            b = b
                .annotation("kproxy.io/health-check", "http")
                .annotation("kproxy.io/health-check-path", "/ready")
                .annotation("kproxy.io/health-check-interval", "2s")
        }
        9 => b = b.annotation("kproxy.io/health-check", "udp").annotation("kproxy.io/health-check-rise", "0"),
        _ => {}
    }
    b
}

/// The endpoints of service `i`, `count` of them in `family`: every
/// condition, on this node, other nodes and none, with zone and node hints.
fn generated_endpoints(i: usize, family: &str, count: usize, shift: usize) -> Vec<Ep> {
    (0..count)
        .map(|e| {
            let k = e + shift;
            let ip = match family {
                "IPv4" => format!("10.1.{i}.{}", k + 1),
                _ => format!("fd01::{i:x}:{:x}", k + 1),
            };
            let mut ep = Ep::new(&ip);
            ep = match k % 6 {
                1 => ep.not_ready(),
                2 => ep.terminating_serving(),
                3 => ep.terminating_not_serving(),
                4 => ep.no_conditions(),
                _ => ep,
            };
            let node = NODES[k % NODES.len()];
            if !node.is_empty() {
                ep = ep.node(node).zone(ZONES[k % ZONES.len()]);
            }
            match i % 4 {
                1 => ep = ep.hint_zones(&[ZONES[k % 2]]),
                2 => ep = ep.hint_nodes(&[NODES[k % 3]]),
                3 if k.is_multiple_of(2) => ep = ep.hint_zones(&["zone-a", "zone-c"]).hint_nodes(&["node-a"]),
                _ => {}
            }
            ep
        })
        .collect()
}

fn families(i: usize) -> &'static [&'static str] {
    match i % 3 {
        0 => &["IPv4"],
        1 => &["IPv4", "IPv6"],
        _ => &["IPv6"],
    }
}

/// The slices of service `i`: one per family (two for some IPv4 services),
/// ports as the Service's targets resolve.
fn add_slices(s: &mut Scenario, i: usize, shift: usize) {
    let ns = format!("ns-{}", i % 3);
    let svc = format!("svc-{i:02}");
    for family in families(i) {
        let parts = if i.is_multiple_of(4) && *family == "IPv4" { 2 } else { 1 };
        for part in 0..parts {
            let mut b = slice(&ns, &format!("{svc}-{}-{part}", family.to_lowercase()), &svc)
                .address_type(family)
                .port("http", "TCP", 8080);
            b = match i % 5 {
                0 => b.port("dns", "UDP", 5353),
                1 => b.port("", "SCTP", 9001),
                2 => b.port("grpc", "TCP", 19090),
                _ => b,
            };
            if i.is_multiple_of(10) {
                b = b.annotation("endpoints.kubernetes.io/last-change-trigger-time", "2026-11-30T12:00:00Z");
            }
            for ep in generated_endpoints(i, family, 2 + (i + part) % 5, shift + part * 10) {
                b = b.endpoint(ep);
            }
            s.slice(b.build());
        }
    }
}

const SERVICES: usize = 30;

fn ignored_services(s: &mut Scenario) {
    s.service(service("ns-0", "external").type_("ExternalName").build());
    s.service(service("ns-0", "headless").cluster_ip("None").port("http", "TCP", 80).build());
    let other = service("ns-1", "other-proxy").cluster_ip("10.96.9.1").port("http", "TCP", 80);
    s.service(other.label("service.kubernetes.io/service-proxy-name", "elsewhere").build());
    let headless_slice = slice("ns-0", "headless-x", "headless").label("service.kubernetes.io/headless", "");
    s.slice(headless_slice.port("http", "TCP", 80).endpoint(Ep::new("10.1.99.1")).build());
}

fn legacy_endpoints(name: &str, ready: &[&str], not_ready: &[&str], node: &str) -> Endpoints {
    let address = |ip: &&str| serde_json::json!({"ip": ip, "nodeName": node});
    let value = serde_json::json!({
        "metadata": {"namespace": "ns-2", "name": name},
        "subsets": [{
            "addresses": ready.iter().map(address).collect::<Vec<_>>(),
            "notReadyAddresses": not_ready.iter().map(address).collect::<Vec<_>>(),
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }, {
            "addresses": [{"ip": "10.3.0.99"}],
            "ports": [{"name": "admin", "port": 9999}],
        }],
    });
    serde_json::from_value(value).expect("valid Endpoints")
}

/// A cluster: slices from the API server, this node known with a zone.
#[test]
fn cluster_state_is_unchanged_by_compact_records() {
    let mut s = Scenario::new(StateConfig {
        node_name: "node-a".into(),
        node_required: true,
        host_addresses: vec!["192.168.1.10".parse().unwrap(), "fd10::10".parse().unwrap()],
        service_cidrs: vec!["10.96.0.0/12".parse().unwrap()],
        ..StateConfig::default()
    });
    s.node(
        node("node-a").zone("zone-a").address("InternalIP", "192.168.1.10").address("InternalIP", "fd10::10").build(),
    );
    s.node(node("node-b").zone("zone-b").build());
    for i in 0..SERVICES {
        s.service(generated_service(i).build());
        add_slices(&mut s, i, 0);
    }
    ignored_services(&mut s);
    // Only terminating endpoints (the serving ones are the fallback), and
    // a Local policy whose only local endpoint is terminating.
    s.service(service("ns-0", "draining").cluster_ip("10.96.8.1").port("http", "UDP", 53).build());
    s.slice(
        slice("ns-0", "draining-a", "draining")
            .port("http", "UDP", 5353)
            .endpoint(Ep::new("10.5.0.1").node("node-a").terminating_serving())
            .endpoint(Ep::new("10.5.0.2").node("node-b").terminating_serving())
            .endpoint(Ep::new("10.5.0.3").node("node-b").terminating_not_serving())
            .build(),
    );
    let local = service("ns-0", "local-draining").type_("NodePort").cluster_ip("10.96.8.2");
    s.service(local.port("http", "TCP", 80).node_port(31999).external_traffic_policy("Local").build());
    s.slice(
        slice("ns-0", "local-draining-a", "local-draining")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.5.1.1").node("node-a").terminating_serving())
            .endpoint(Ep::new("10.5.1.2").node("node-b"))
            .build(),
    );
    let changes = s.sync();
    insta::assert_snapshot!("cluster_first_sync", record(&s, &changes));

    // Endpoints move, a service changes its ports, one is deleted, a
    // slice goes, another is relabelled to a different service.
    add_slices(&mut s, 4, 1);
    add_slices(&mut s, 7, 3);
    s.service(generated_service(5).port("extra", "UDP", 5000).build());
    s.delete(Kind::Service, "ns-0", "svc-09");
    s.delete(Kind::EndpointSlice, "ns-1", "svc-10-ipv4-0");
    let relabelled = slice("ns-2", "svc-11-ipv4-0", "svc-14").port("http", "TCP", 8080).endpoint(Ep::new("10.1.14.77"));
    s.slice(relabelled.build());
    let changes = s.sync();
    insta::assert_snapshot!("cluster_after_changes", record(&s, &changes));

    // This node moves zone: every service is rebuilt.
    s.node(node("node-a").zone("zone-b").address("InternalIP", "192.168.1.10").build());
    s.service(generated_service(9).build());
    s.delete(Kind::EndpointSlice, "ns-0", "draining-a");
    let changes = s.sync();
    insta::assert_snapshot!("cluster_after_zone_change", record(&s, &changes));
}

/// Standalone: endpoints derived from Pods by the endpoint controller,
/// legacy Endpoints, slices, and no Node object.
#[test]
fn standalone_state_is_unchanged_by_compact_records() {
    let mut s = Scenario::new(StateConfig {
        node_name: "node-a".into(),
        endpoint_controller: true,
        host_addresses: vec!["192.168.1.10".parse().unwrap()],
        ..StateConfig::default()
    });
    for i in 0..12 {
        let app = format!("app-{}", i % 4);
        s.service(generated_service(i).selector(&[("app", &app)]).build());
    }
    for p in 0..24 {
        let ns = format!("ns-{}", p % 3);
        let mut b = pod(&ns, &format!("pod-{p:02}"))
            .label("app", &format!("app-{}", p % 4))
            .ip(&format!("10.2.{}.{}", p % 3, p + 1))
            .node(["node-a", "node-b", "node-c"][p % 3])
            .container_port("http", "TCP", 8080)
            .container_port("dns-port", "UDP", 5300 + p as i32);
        if p % 5 == 1 {
            b = b.ip(&format!("fd02::{:x}", p + 1));
        }
        b = match p % 7 {
            2 => b.not_ready(),
            3 => b.terminating(),
            4 => b.phase("Succeeded"),
            5 => b.sidecar_port("grpc", "TCP", 19090),
            _ => b,
        };
        s.pod(b.build());
    }
    let plain = service("ns-2", "legacy").cluster_ip("10.96.50.1").port("http", "TCP", 80).port("admin", "TCP", 99);
    s.service(plain.build());
    s.endpoints(legacy_endpoints("legacy", &["10.3.0.1", "10.3.0.2"], &["10.3.0.3"], "node-a"));
    s.service(service("ns-2", "sliced").cluster_ip("10.96.50.2").port("http", "TCP", 80).build());
    s.slice(
        slice("ns-2", "sliced-a", "sliced")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.4.0.1").node("node-a"))
            .endpoint(Ep::new("10.4.0.2").node("node-b").not_ready())
            .build(),
    );
    ignored_services(&mut s);
    let changes = s.sync();
    insta::assert_snapshot!("standalone_first_sync", record(&s, &changes));

    // A Pod goes, one changes label, one turns ready, a new one comes;
    // the legacy Endpoints lose an address.
    s.delete(Kind::Pod, "ns-0", "pod-00");
    s.pod(
        pod("ns-1", "pod-01")
            .label("app", "app-3")
            .ip("10.2.1.2")
            .node("node-a")
            .container_port("http", "TCP", 8080)
            .build(),
    );
    s.pod(pod("ns-2", "pod-02").label("app", "app-2").ip("10.2.2.3").node("node-c").build());
    s.pod(pod("ns-0", "pod-new").label("app", "app-0").ip("10.2.0.200").node("node-a").build());
    s.endpoints(legacy_endpoints("legacy", &["10.3.0.1"], &[], "node-b"));
    s.service(generated_service(3).selector(&[("app", "app-1")]).build());
    let changes = s.sync();
    insta::assert_snapshot!("standalone_after_changes", record(&s, &changes));

    s.delete(Kind::Endpoints, "ns-2", "legacy");
    s.delete(Kind::Service, "ns-0", "svc-00");
    s.node(node("node-a").zone("zone-a").address("InternalIP", "192.168.1.10").build());
    let changes = s.sync();
    insta::assert_snapshot!("standalone_after_deletes", record(&s, &changes));
}
