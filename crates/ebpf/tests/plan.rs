//! Plans across syncs: partial equals full, ids stay put, the op order
//! keeps every frontend whole, adoption of dumped maps, and the cost of a
//! one-service change.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::*;
use kproxy_ebpf::maps::{self, Backend, BackendKey, Contents, FrontendKey, Op, flags, verdict};
use kproxy_ebpf::{Applied, desired, frontend_key, owned_key, plan};
use kproxy_model::{
    Changes, Endpoint, Frontend, FrontendKind, IpFamily, Protocol, ProxyState, ServiceName, ServicePort,
    ServicePortName,
};
use kproxy_state::Kind;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, service, slice};

fn key(addr: &str, port: u16) -> FrontendKey {
    frontend_key(addr.parse().unwrap(), Protocol::Tcp, port)
}

/// A selection as what it picks from, ids aside.
fn picks(c: &Contents, s: &maps::Selection) -> (u8, u8, Vec<Backend>) {
    let slots = (0..u32::from(s.count)).map(|slot| c.backends[&BackendKey { group: s.group, slot }]).collect();
    (s.verdict, s.sched, slots)
}

type Canonical =
    BTreeMap<FrontendKey, ((u8, u8, Vec<Backend>), (u8, u8, Vec<Backend>), u32, u32, BTreeSet<(u32, [u8; 16])>)>;

/// Contents with ids replaced by what they stand for.
fn canonical(c: &Contents) -> Canonical {
    c.frontends
        .iter()
        .map(|(k, f)| {
            let ranges = c
                .source_ranges
                .iter()
                .filter(|r| u32::from_be(r.id) == f.id && f.id != 0)
                .map(|r| (r.prefixlen, r.addr))
                .collect();
            (*k, (picks(c, &f.internal), picks(c, &f.external), f.flags, f.affinity_timeout, ranges))
        })
        .collect()
}

fn everything_scenario() -> Scenario {
    let mut s = scenario();
    everything(&mut s);
    s.sync();
    s
}

/// Several changes at once: endpoints, a deletion that hands a contested
/// frontend to its other claimant, a policy change, a new service.
fn change_things(s: &mut Scenario) {
    s.slice(
        slice("default", "sticky-1", "sticky")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.1.60").node("node-a"))
            .endpoint(Ep::new("10.244.3.60").node("node-c"))
            .build(),
    );
    s.delete(Kind::Service, "default", "web");
    s.delete(Kind::Service, "default", "empty");
    s.service(
        service("default", "remote-only")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.30")
            .port("http", "TCP", 80)
            .node_port(30030)
            .load_balancer_ingress("192.0.2.30", None)
            .build(),
    );
    s.service(service("default", "new").cluster_ip("10.96.0.95").port("http", "TCP", 80).build());
    s.slice(
        slice("default", "new-1", "new")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.1.95").node("node-a"))
            .build(),
    );
}

#[test]
fn a_partial_plan_leaves_what_a_full_plan_would() {
    let mut s = everything_scenario();
    let first = full(s.state(), Applied::default());
    change_things(&mut s);
    let changes = s.sync();
    let partial = plan(s.state(), &changes, false, &config(), first.applied.clone()).expect("plans");
    assert!(!partial.full);
    let mut maps = first.applied.contents();
    apply(&mut maps, &partial.ops);
    assert_eq!(maps, partial.applied.contents(), "the ops make what the plan says");
    let again = full(s.state(), first.applied.clone());
    assert_eq!(partial.applied.contents(), again.applied.contents());
    let fresh = desired(s.state(), &config()).expect("plans").applied.contents();
    assert_eq!(canonical(&maps), canonical(&fresh));
    // The thief's external IP is web's cluster IP: with web gone, it serves it.
    let taken = maps.frontends[&key("10.96.0.10", 80)];
    assert_eq!(taken.flags & flags::EXTERNAL, flags::EXTERNAL);
    assert!(!maps.frontends.contains_key(&owned_key(maps::addr16("10.96.0.10".parse().unwrap()))));
}

#[test]
fn unchanged_service_ports_keep_their_ids_and_groups() {
    let mut s = everything_scenario();
    let first = full(s.state(), Applied::default());
    change_things(&mut s);
    s.sync();
    let second = full(s.state(), first.applied.clone());
    let (before, after) = (first.applied.contents(), second.applied.contents());
    let dns = frontend_key("10.96.0.80".parse().unwrap(), Protocol::Udp, 53);
    for k in [key("10.96.0.73", 80), key("10.96.0.20", 80), key("192.0.2.10", 80), dns] {
        assert_eq!(before.frontends[&k], after.frontends[&k], "{k:?}");
    }
    let sticky = key("10.96.0.60", 80);
    assert_eq!(before.frontends[&sticky].id, after.frontends[&sticky].id, "a changed port keeps its frontend id");
    assert_ne!(before.frontends[&sticky].internal.group, after.frontends[&sticky].internal.group);
    // Nothing changed since: a full plan deletes the groups the last one
    // released, then writes only kp_config.
    let third = full(s.state(), second.applied.clone());
    assert!(third.ops.iter().all(|op| matches!(op, Op::PutConfig(_) | Op::DeleteBackend(_) | Op::DeleteRr(_))));
    assert!(third.ops.iter().any(|op| matches!(op, Op::DeleteBackend(_))));
    let fourth = full(s.state(), third.applied);
    assert!(matches!(fourth.ops.as_slice(), [Op::PutConfig(_)]), "{:?}", fourth.ops);
}

#[test]
fn a_cluster_ip_and_its_node_port_share_one_group() {
    let s = everything_scenario();
    let c = desired(s.state(), &config()).expect("plans").applied.contents();
    let cluster = c.frontends[&key("10.96.0.10", 80)];
    let node_port = c.frontends[&key(NODE, 30080)];
    assert_eq!(cluster.internal, node_port.external);
    assert_eq!(cluster.internal, cluster.external);
    assert_ne!(cluster.id, node_port.id);
}

/// Every frontend points at groups whose slots are all present.
fn whole(c: &Contents) -> Result<(), String> {
    for (k, f) in &c.frontends {
        for s in [f.internal, f.external].iter().filter(|s| s.verdict == verdict::FORWARD) {
            if (0..u32::from(s.count)).any(|slot| !c.backends.contains_key(&BackendKey { group: s.group, slot })) {
                return Err(format!("{k:?} points at incomplete group {}", s.group));
            }
        }
    }
    Ok(())
}

fn referenced(c: &Contents) -> BTreeSet<u32> {
    c.frontends.values().flat_map(|f| [f.internal.group, f.external.group]).filter(|g| *g != 0).collect()
}

#[test]
fn no_frontend_ever_points_at_a_partial_group_and_groups_go_a_sync_after_release() {
    let mut s = everything_scenario();
    let mut applied = Applied::default();
    let mut maps = Contents::default();
    let steps: [fn(&mut Scenario); 6] = [
        |_| {},
        change_things,
        |s| {
            s.slice(
                slice("default", "new-1", "new")
                    .port("http", "TCP", 8080)
                    .endpoint(Ep::new("10.244.2.95").node("node-b"))
                    .build(),
            );
        },
        |s| {
            s.delete(Kind::Service, "default", "new");
        },
        |_| {},
        |_| {},
    ];
    let mut deleted_somewhere = false;
    for (i, step) in steps.iter().enumerate() {
        step(&mut s);
        let changes = s.sync();
        let planned = plan(s.state(), &changes, i % 2 == 0, &config(), applied).expect("plans");
        let before = referenced(&maps);
        for op in &planned.ops {
            if let Op::DeleteBackend(k) = op {
                assert!(!before.contains(&k.group), "step {i}: group {} deleted in the sync that released it", k.group);
                deleted_somewhere = true;
            }
            apply(&mut maps, std::slice::from_ref(op));
            whole(&maps).unwrap_or_else(|e| panic!("step {i}, after {op:?}: {e}"));
        }
        assert_eq!(maps, planned.applied.contents(), "step {i}");
        applied = planned.applied;
    }
    assert!(deleted_somewhere, "the steps released and deleted groups");
}

#[test]
fn a_restart_adopts_the_maps_and_writes_only_the_config() {
    let s = everything_scenario();
    let first = full(s.state(), Applied::default());
    let dump = first.applied.contents();
    let adopted = full(s.state(), Applied::adopt(&dump));
    assert!(matches!(adopted.ops.as_slice(), [Op::PutConfig(_)]), "{:?}", adopted.ops);
    assert_eq!(adopted.applied.contents(), dump);
}

#[test]
fn a_restart_removes_what_nobody_wants_and_deletes_stale_groups_one_sync_later() {
    let s = everything_scenario();
    let mut dump = full(s.state(), Applied::default()).applied.contents();
    let stale_key = key("10.96.7.7", 80);
    let stale_group = 9999;
    let backend = Backend { addr: maps::addr16("10.244.9.9".parse().unwrap()), port: 80u16.to_be(), pad: 0 };
    dump.backends.insert(BackendKey { group: stale_group, slot: 0 }, backend);
    let mut stale = *dump.frontends.values().find(|f| f.internal.verdict == verdict::FORWARD).expect("a frontend");
    stale.internal.group = stale_group;
    stale.external.group = stale_group;
    stale.id = 7777;
    dump.frontends.insert(stale_key, stale);
    let first = full(s.state(), Applied::adopt(&dump));
    assert!(first.ops.contains(&Op::DeleteFrontend(stale_key)));
    assert!(!first.ops.iter().any(|op| matches!(op, Op::DeleteBackend(_))), "groups go one sync later");
    let second = plan(s.state(), &Changes::default(), false, &config(), first.applied).expect("plans");
    assert!(second.ops.contains(&Op::DeleteBackend(BackendKey { group: stale_group, slot: 0 })));
    assert!(!second.applied.contents().backends.keys().any(|k| k.group == stale_group));
}

#[test]
fn verdicts_follow_the_traffic_policies() {
    let s = everything_scenario();
    let c = desired(s.state(), &config()).expect("plans").applied.contents();
    let empty = c.frontends[&key("10.96.0.40", 80)];
    assert_eq!((empty.internal.verdict, empty.external.verdict), (verdict::REJECT, verdict::REJECT));
    let itp_local = c.frontends[&key("10.96.0.50", 80)];
    assert_eq!(itp_local.internal.verdict, verdict::DROP);
    let remote_only = c.frontends[&key("192.0.2.30", 80)];
    assert_eq!((remote_only.internal.verdict, remote_only.external.verdict), (verdict::FORWARD, verdict::DROP));
    assert_eq!(remote_only.flags & (flags::MASQ_INTERNAL | flags::MASQ_EXTERNAL), 0);
    let lb = c.frontends[&key("192.0.2.10", 80)];
    assert_eq!(lb.flags & flags::SOURCE_RANGES, flags::SOURCE_RANGES);
    assert_ne!(lb.internal.group, lb.external.group, "Local: own-node endpoints outside, every endpoint inside");
    let cluster = c.frontends[&key("10.96.0.10", 80)];
    assert_eq!(cluster.flags, flags::MASQ_EXTERNAL);
    assert_eq!(c.frontends[&key(NODE, 30080)].flags, flags::EXTERNAL | flags::MASQ_INTERNAL | flags::MASQ_EXTERNAL);
    assert_eq!(c.frontends[&key("10.96.0.60", 80)].affinity_timeout, 600);
    assert_eq!(c.frontends[&owned_key(maps::addr16("10.96.0.10".parse().unwrap()))].internal.verdict, verdict::REJECT);
    let mh = c.frontends[&key("10.96.0.73", 80)];
    assert_eq!(usize::from(mh.internal.count), kproxy_sched::MAGLEV_SIZE);
    let wrr = c.frontends[&key("10.96.0.70", 80)];
    assert_eq!((wrr.internal.sched, wrr.internal.count), (maps::sched::RR, 4));
}

#[test]
fn a_scheduler_the_programs_cannot_do_is_reported_not_silently_replaced() {
    let mut port = port_named(0);
    port.scheduler = Some(kproxy_model::Scheduler::Lc);
    let state = state_of([port]);
    let planned = desired(&state, &config()).expect("plans");
    assert!(
        planned.skips.iter().any(|s| s.contains("scheduler lc is not supported in ebpf mode")),
        "{:?}",
        planned.skips
    );
    let f = planned.applied.contents().frontends[&key("10.96.0.1", 80)];
    assert_eq!(f.internal.sched, maps::sched::RANDOM);
}

fn port_named(i: u32) -> ServicePort {
    let name = ServicePortName::new(ServiceName::new("bench", format!("svc-{i}")), "http", Protocol::Tcp);
    let ip = std::net::Ipv4Addr::from(0x0a60_0000 + i + 1);
    let mut port = ServicePort::new(name, IpFamily::V4, 80);
    port.frontends = vec![Frontend::new(FrontendKind::ClusterIp, ip.into(), 80)];
    port.cluster_endpoints = (0..10)
        .map(|e| Endpoint {
            ip: std::net::Ipv4Addr::from(0x0af4_0000 + i * 16 + e).into(),
            port: 8080,
            ready: true,
            serving: true,
            terminating: false,
            local: false,
        })
        .collect();
    port
}

fn state_of(ports: impl IntoIterator<Item = ServicePort>) -> ProxyState {
    let mut state = ProxyState::default();
    for port in ports {
        state.ipv4.service_ports.insert(port.name.clone(), Arc::new(port));
    }
    state
}

#[test]
fn a_one_service_change_at_10k_services_touches_only_that_service() {
    let mut state = state_of((0..10_000).map(port_named));
    let first = full(&state, Applied::default());
    let mut changed = port_named(4242);
    changed.cluster_endpoints.pop();
    let name = changed.name.clone();
    state.ipv4.service_ports.insert(name.clone(), Arc::new(changed));
    let mut changes = Changes::default();
    changes.service_ports.insert((IpFamily::V4, name));
    let start = std::time::Instant::now();
    let partial = plan(&state, &changes, false, &config(), first.applied).expect("plans");
    let took = start.elapsed();
    // A new group of 9 backends, the frontend repointed; the old group
    // goes next sync.
    assert_eq!(partial.ops.len(), 10, "{:?}", partial.ops);
    assert!(!partial.full);
    eprintln!("one-service partial plan at 10k services: {took:?}");
    assert!(took < std::time::Duration::from_millis(50), "{took:?}");
}

#[test]
fn a_removed_frontends_id_is_not_reused_by_the_next_sync() {
    let mut s = everything_scenario();
    let first = full(s.state(), Applied::default());
    let gone = first.applied.contents().frontends[&key("10.96.0.40", 80)].id;
    s.delete(Kind::Service, "default", "empty");
    let changes = s.sync();
    let second = plan(s.state(), &changes, false, &config(), first.applied).expect("plans");
    s.service(service("default", "again").cluster_ip("10.96.0.41").port("http", "TCP", 80).build());
    let changes = s.sync();
    let third = plan(s.state(), &changes, false, &config(), second.applied).expect("plans");
    assert_ne!(third.applied.contents().frontends[&key("10.96.0.41", 80)].id, gone);
    s.service(service("default", "later").cluster_ip("10.96.0.42").port("http", "TCP", 80).build());
    let changes = s.sync();
    let fourth = plan(s.state(), &changes, false, &config(), third.applied).expect("plans");
    assert_eq!(fourth.applied.contents().frontends[&key("10.96.0.42", 80)].id, gone, "free again two syncs later");
}
