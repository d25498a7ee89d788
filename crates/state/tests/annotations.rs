//! A bad `kproxy.io/*` annotation, or one the mode cannot do, never takes a
//! Service down: the Service is in the state with that annotation's
//! default and a warning naming the annotation, the reason and the
//! fallback.

use std::net::IpAddr;

use kproxy_model::{Annotation, AnnotationWarning, ModeSupport, Problem, Scheduler, ServicePort, WeightSupport};
use kproxy_state::{StateConfig, convert};
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, ServiceBuilder, service, slice};

fn web() -> ServiceBuilder {
    service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80)
}

/// A mode like nftables: six schedulers, weights as pick slots, no checks.
fn slots_mode() -> ModeSupport {
    ModeSupport {
        mode: "nftables",
        default_scheduler: Scheduler::Random,
        schedulers: vec![Scheduler::Random, Scheduler::Rr, Scheduler::Wrr, Scheduler::Sh, Scheduler::Dh, Scheduler::Mh],
        weights: WeightSupport::Slots { max: 4096 },
        health_checks: false,
    }
}

/// A mode like iptables: random only, weights ignored.
fn random_only() -> ModeSupport {
    ModeSupport {
        mode: "iptables",
        default_scheduler: Scheduler::Random,
        schedulers: vec![Scheduler::Random],
        weights: WeightSupport::Ignored,
        health_checks: false,
    }
}

fn scenario(mode: ModeSupport) -> Scenario {
    Scenario::new(StateConfig { node_name: "node-a".into(), mode, ..StateConfig::default() })
}

fn endpoints() -> k8s_openapi::api::discovery::v1::EndpointSlice {
    slice("default", "web-1", "web")
        .port("http", "TCP", 8080)
        .endpoint(Ep::new("10.1.0.1"))
        .endpoint(Ep::new("10.1.0.2"))
        .build()
}

/// The service port of `svc` with two endpoints, built under `mode`.
fn port_of(svc: ServiceBuilder, mode: ModeSupport) -> ServicePort {
    let mut s = scenario(mode);
    s.service(svc.build()).slice(endpoints()).sync();
    s.port("default", "web", "http").clone()
}

fn warnings(port: &ServicePort) -> Vec<String> {
    port.warnings.iter().map(ToString::to_string).collect()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_bad_annotation_does_not_make_the_service_invalid() {
    for (key, value) in [
        ("kproxy.io/scheduler", "fastest"),
        ("kproxy.io/weights", "10.1.0.1:3"),
        ("kproxy.io/health-check", "grpc"),
        ("kproxy.io/health-check-intervall", "5s"),
    ] {
        let info = convert::service(&web().annotation(key, value).build()).expect("still a valid Service");
        let invalid = &info.annotations.expect("kept").invalid;
        assert_eq!(invalid.len(), 1, "{key}");
        assert_eq!(invalid[0].key, key);
    }
}

#[test]
fn an_unknown_scheduler_is_served_with_the_modes_default_and_a_warning() {
    let port = port_of(web().annotation("kproxy.io/scheduler", "fastest"), slots_mode());
    assert_eq!(port.scheduler, None, "the mode's default");
    assert_eq!(port.cluster_endpoints.len(), 2, "served");
    assert_eq!(
        port.warnings,
        [AnnotationWarning {
            annotation: "kproxy.io/scheduler".into(),
            kind: Annotation::Scheduler,
            problem: Problem::Invalid,
            reason: "unsupported value \"fastest\" (allowed: random, rr, wrr, lc, wlc, sed, nq, sh, dh, mh, fo, ovf, lblc, lblcr, twos)".into(),
            fallback: "using random".into(),
        }]
    );
    // The default named is the mode's (IPVS: its configured scheduler).
    let ipvs = ModeSupport { mode: "ipvs", default_scheduler: Scheduler::Wlc, ..ModeSupport::default() };
    let port = port_of(web().annotation("kproxy.io/scheduler", "fastest"), ipvs);
    assert_eq!(port.warnings[0].fallback, "using wlc");
}

#[test]
fn bad_weights_fall_back_to_equal_weights_and_keep_the_other_annotations() {
    for (value, reason) in [
        ("10.1.0.1:3", r#""10.1.0.1:3": want ADDRESS=WEIGHT, e.g. 10.244.1.5=3"#),
        ("10.1.0.1=70000", r#""10.1.0.1=70000": the weight must be a whole number from 0 to 65535"#),
        ("10.1.0.1=3,nowhere=1", r#""nowhere=1": "nowhere" is not an IP address"#),
        ("10.1.0.1=3,10.1.0.1=2", "10.1.0.1 is listed twice"),
    ] {
        let svc = web().annotation("kproxy.io/weights", value).annotation("kproxy.io/scheduler", "wrr");
        let port = port_of(svc, ModeSupport::default());
        assert!(port.weights.is_empty(), "{value}: every endpoint weighs 1");
        assert_eq!(port.weight_of(ip("10.1.0.1")), 1);
        assert_eq!(port.scheduler, Some(Scheduler::Wrr), "{value}: the scheduler annotation still counts");
        assert_eq!(warnings(&port), [format!("kproxy.io/weights: {reason}; every endpoint weighs 1")], "{value}");
        assert_eq!(port.warnings[0].problem, Problem::Invalid);
    }
}

#[test]
fn a_bad_health_check_falls_back_to_no_check() {
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("kproxy.io/health-check", "grpc")],
            r#"kproxy.io/health-check: unsupported value "grpc" (allowed: tcp, http)"#,
        ),
        (
            &[("kproxy.io/health-check-interval", "5s")],
            "kproxy.io/health-check-interval: set without kproxy.io/health-check (tcp or http)",
        ),
        (
            &[("kproxy.io/health-check", "tcp"), ("kproxy.io/health-check-intervall", "5s")],
            "kproxy.io/health-check-intervall: unknown setting (known: kproxy.io/health-check-path, \
             kproxy.io/health-check-port, kproxy.io/health-check-interval, kproxy.io/health-check-timeout, \
             kproxy.io/health-check-rise, kproxy.io/health-check-fall)",
        ),
        (
            &[("kproxy.io/health-check", "tcp"), ("kproxy.io/health-check-timeout", "10s")],
            "kproxy.io/health-check-timeout: longer than the interval",
        ),
        (
            &[("kproxy.io/health-check", "http"), ("kproxy.io/health-check-rise", "0")],
            r#"kproxy.io/health-check-rise: "0": want a whole number from 1 to 100"#,
        ),
    ];
    for (annotations, warning) in cases {
        let svc = annotations.iter().fold(web(), |svc, (k, v)| svc.annotation(k, v));
        let port = port_of(svc.annotation("kproxy.io/weights", "10.1.0.1=3"), ModeSupport::default());
        assert_eq!(port.health_check, None, "{annotations:?}");
        assert_eq!(port.weight_of(ip("10.1.0.1")), 3, "the weights still count");
        assert_eq!(warnings(&port), [format!("{warning}; no health check")]);
        assert_eq!(port.warnings[0].kind, Annotation::HealthCheck);
    }
}

#[test]
fn a_scheduler_the_mode_cannot_do_becomes_the_modes_default_with_a_warning() {
    let port = port_of(web().annotation("kproxy.io/scheduler", "lc"), slots_mode());
    assert_eq!(port.scheduler, None);
    assert_eq!(
        warnings(&port),
        [
            "kproxy.io/scheduler: scheduler lc is not supported in nftables mode (supported: random, rr, wrr, sh, dh, mh); using random"
        ]
    );
    assert_eq!(port.warnings[0].problem, Problem::Unsupported);
    // One the mode can do is kept, without a warning.
    let port = port_of(web().annotation("kproxy.io/scheduler", "mh"), slots_mode());
    assert_eq!((port.scheduler, port.warnings.len()), (Some(Scheduler::Mh), 0));
}

#[test]
fn weights_and_health_checks_a_mode_ignores_are_dropped_and_said() {
    let svc = web()
        .annotation("kproxy.io/scheduler", "rr")
        .annotation("kproxy.io/weights", "10.1.0.1=3")
        .annotation("kproxy.io/health-check", "tcp");
    let port = port_of(svc, random_only());
    assert_eq!((port.scheduler, port.weights.len(), port.health_check.is_some()), (None, 0, false));
    assert_eq!(
        warnings(&port),
        [
            "kproxy.io/scheduler: scheduler rr is not supported in iptables mode (supported: random); using random",
            "kproxy.io/weights: iptables mode picks every endpoint with the same probability; every endpoint weighs 1",
            "kproxy.io/health-check: iptables mode runs no health checks (the userspace mode does); no health check",
        ]
    );
}

#[test]
fn weights_needing_more_pick_slots_than_the_mode_has_are_dropped() {
    let svc = || web().annotation("kproxy.io/weights", "10.1.0.1=1,10.1.0.2=65535");
    let port = port_of(svc(), slots_mode());
    assert!(port.weights.is_empty());
    assert_eq!(
        warnings(&port),
        [
            "kproxy.io/weights: weights [1, 65535] need 65536 pick slots in nftables mode (at most 4096); use smaller weights; every endpoint weighs 1"
        ]
    );
    // Maglev's table has a fixed size; a mode taking weights as they are
    // has no limit.
    let port = port_of(svc().annotation("kproxy.io/scheduler", "mh"), slots_mode());
    assert_eq!((port.weight_of(ip("10.1.0.2")), port.warnings.len()), (65535, 0));
    let port = port_of(svc(), ModeSupport::default());
    assert_eq!((port.weight_of(ip("10.1.0.2")), port.warnings.len()), (65535, 0));
    // Weights with a common divisor need few slots.
    let port = port_of(web().annotation("kproxy.io/weights", "10.1.0.1=30000,10.1.0.2=60000"), slots_mode());
    assert_eq!((port.weight_of(ip("10.1.0.2")), port.warnings.len()), (60000, 0));
}

#[test]
fn fixing_the_annotation_changes_the_port_and_clears_the_warning() {
    let mut s = scenario(slots_mode());
    s.service(web().annotation("kproxy.io/scheduler", "lc").build()).slice(endpoints()).sync();
    let warned = s.state().warnings();
    assert_eq!(warned.len(), 1);
    assert_eq!(warned.keys().next().expect("one").to_string(), "default/web");

    let changes = s.service(web().annotation("kproxy.io/scheduler", "rr").build()).sync();
    assert_eq!(changes.service_ports.len(), 1, "the port is reprogrammed");
    let port = s.port("default", "web", "http");
    assert_eq!((port.scheduler, port.warnings.len()), (Some(Scheduler::Rr), 0));
    assert!(s.state().warnings().is_empty());
}

#[test]
fn the_state_json_lists_a_ports_warnings() {
    let mut s = scenario(slots_mode());
    s.service(web().annotation("kproxy.io/scheduler", "lc").build()).sync();
    let json = serde_json::to_value(s.state()).expect("serialises");
    let port = &json["ipv4"]["servicePorts"][0];
    assert_eq!(port["scheduler"], serde_json::Value::Null);
    assert_eq!(port["warnings"][0]["annotation"], "kproxy.io/scheduler");
    assert_eq!(port["warnings"][0]["problem"], "unsupported");
    assert_eq!(port["warnings"][0]["fallback"], "using random");
}
