//! The sync runner under paused tokio time: no sleeps, exact timings.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Call, Fake, Harness, TokioClock, at, config};
use kproxy_admin::{Health, HealthCheck, Metrics};
use kproxy_dataplane::{Runner, RunnerConfig, RunnerHandles, SyncKind};
use kproxy_model::ProxyState;
use kproxy_state::{Object, SourceEvent, StateBuilder, StateConfig, convert};
use kproxy_testkit::{EndpointBuilder as Ep, service, slice};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn no_sync_runs_before_the_initial_list_is_complete() {
    let h = Harness::start(config(), &[]);
    h.service("a", "10.96.0.1").await;
    at(120_000).await;
    assert!(h.calls().is_empty());
    h.send(SourceEvent::Synced).await;
    at(1).await;
    let calls = h.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].at_ms, calls[0].kind, calls[0].changed_ports), (120_000, SyncKind::Full, 1));
    assert_eq!(h.state.borrow().ipv4.service_ports.len(), 1, "the admin sees the folded state");
}

#[tokio::test(start_paused = true)]
async fn events_beyond_the_burst_are_coalesced_into_one_partial_sync() {
    let h = Harness::start(config(), &[]);
    h.send(SourceEvent::Synced).await;
    for (name, wait) in [("a", 100), ("b", 200), ("c", 300), ("d", 100), ("e", 100)] {
        at(wait).await;
        h.service(name, &format!("10.96.0.{}", name.as_bytes()[0] - b'a' + 1)).await;
    }
    at(2_000).await;
    let calls = h.calls();
    // a and b use the burst; c, d and e wait for 0.3 s + minSyncPeriod.
    assert_eq!(h.times(), [0, 100, 300, 1_300], "{calls:?}");
    assert_eq!(calls[3], Call { at_ms: 1_300, kind: SyncKind::Partial, changed_ports: 3, stale_udp: 0 });
}

#[tokio::test(start_paused = true)]
async fn a_sync_runs_every_sync_period_without_events() {
    let h = Harness::start(config(), &[]);
    h.send(SourceEvent::Synced).await;
    at(95_000).await;
    assert_eq!(h.times(), [0, 30_000, 60_000, 90_000]);
    assert!(h.calls()[1..].iter().all(|c| c.kind == SyncKind::Partial && c.changed_ports == 0));
}

#[tokio::test(start_paused = true)]
async fn a_failed_sync_is_retried_with_backoff_as_a_full_sync_carrying_its_changes() {
    let h = Harness::start(config(), &[true, false, false, false]);
    h.service("dns", "10.96.0.53").await;
    h.endpoints("dns", &["10.1.0.1", "10.1.0.2"]).await;
    h.send(SourceEvent::Synced).await;
    at(10).await;
    // Losing an endpoint makes conntrack work; the failing syncs must keep it.
    h.endpoints("dns", &["10.1.0.2"]).await;
    at(20_000).await;
    let calls = h.calls();
    // The partial sync at once fails; retries 1 s, 2 s and 4 s later (the
    // first two failing too), the last one succeeding.
    assert_eq!(h.times(), [0, 10, 1_010, 3_010, 7_010], "{calls:?}");
    assert_eq!(calls[1].kind, SyncKind::Partial);
    assert!(calls[2..].iter().all(|c| c.kind == SyncKind::Full), "{calls:?}");
    assert!(calls[1..=4].iter().all(|c| c.stale_udp == 1 && c.changed_ports == 1), "{calls:?}");
    let metrics = h.metrics.encode();
    assert!(metrics.contains(r#"kproxy_sync_proxy_rules_failures_total{mode="fake",reason="other"} 3"#), "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn backoff_is_capped_at_sync_period() {
    let h = Harness::start(RunnerConfig::new(Duration::from_secs(1), Duration::from_secs(5)), &[false; 6]);
    h.send(SourceEvent::Synced).await;
    at(30_000).await;
    assert_eq!(&h.times()[..7], [0, 1_000, 3_000, 7_000, 12_000, 17_000, 22_000]);
}

#[tokio::test(start_paused = true)]
async fn a_full_sync_runs_once_per_full_sync_period() {
    let mut config = RunnerConfig::new(Duration::from_secs(1), Duration::from_secs(10));
    config.full_sync_period = Duration::from_secs(35);
    let h = Harness::start(config, &[]);
    h.send(SourceEvent::Synced).await;
    at(75_000).await;
    let full: Vec<u128> = h.calls().iter().filter(|c| c.kind == SyncKind::Full).map(|c| c.at_ms).collect();
    assert_eq!(full, [0, 40_000]);
    assert_eq!(h.calls().len(), 8);
}

#[tokio::test(start_paused = true)]
async fn updates_left_unapplied_for_twice_the_sync_period_turn_health_red() {
    let h = Harness::start(config(), &[false; 100]);
    h.send(SourceEvent::Synced).await;
    at(10).await;
    h.service("a", "10.96.0.1").await;
    at(59_000).await;
    let now = || Instant::now().into_std();
    assert!(h.health.report(now()).healthy, "queued at 10 ms, not yet 60 s old");
    at(1_100).await;
    assert!(!h.health.report(now()).healthy);
}

#[tokio::test(start_paused = true)]
async fn health_recovers_when_a_sync_succeeds() {
    let h = Harness::start(config(), &[]);
    h.send(SourceEvent::Synced).await;
    at(10).await;
    h.service("a", "10.96.0.1").await;
    at(2_000).await;
    let report = h.health.report(Instant::now().into_std());
    assert!(report.healthy);
    // Applied at once, at 10 ms.
    assert_eq!(report.last_updated, Some(common::wall(Duration::from_millis(10))));
    let metrics = h.metrics.encode();
    assert!(metrics.contains("kubeproxy_sync_proxy_rules_service_changes_total 1"), "{metrics}");
    assert!(metrics.contains("kubeproxy_sync_proxy_rules_service_changes_pending 0"), "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn run_once_waits_for_the_initial_list_and_reports_the_result() {
    let start = Instant::now();
    let fake = Fake::new(start, &[false]);
    let (tx, rx) = mpsc::channel(8);
    let (state_tx, _state) = watch::channel(Arc::new(ProxyState::default()));
    let handles = RunnerHandles {
        health: Arc::new(Health::new(Duration::from_secs(60))),
        metrics: Arc::new(Metrics::new()),
        state: state_tx,
        clock: Arc::new(TokioClock(start)),
        health_checks: Arc::default(),
    };
    let runner = Runner::new(config(), StateBuilder::new(StateConfig::default()), Box::new(fake.clone()), handles);
    tx.send(SourceEvent::Synced).await.unwrap();
    let result = runner.run_once(rx).await;
    assert_eq!(result.unwrap_err().to_string(), "scripted failure");
    assert_eq!(fake.calls.lock().unwrap()[0].kind, SyncKind::Full);
}

#[tokio::test(start_paused = true)]
async fn a_sync_records_health_check_ports_with_their_local_endpoints() {
    let h = Harness::start(config(), &[]);
    let svc = service("default", "shop")
        .type_("LoadBalancer")
        .cluster_ip("10.96.0.20")
        .port("https", "TCP", 443)
        .external_traffic_policy("Local")
        .health_check_node_port(32000)
        .build();
    h.send(SourceEvent::Apply(Object::service(convert::service(&svc).unwrap()))).await;
    let sl = slice("default", "shop-1", "shop")
        .port("https", "TCP", 8443)
        .endpoint(Ep::new("10.244.1.20").node("node-a"))
        .endpoint(Ep::new("10.244.2.20").node("node-b"))
        .build();
    h.send(SourceEvent::Apply(convert::endpoint_slice(&sl).unwrap())).await;
    h.send(SourceEvent::Synced).await;
    at(10).await;
    let check = h.health_checks.by_port(32000).map(|(name, check)| (name.to_string(), check));
    assert_eq!(check, Some(("default/shop".to_owned(), HealthCheck { port: 32000, local_endpoints: 1 })));
    h.send(SourceEvent::Delete(kproxy_state::ObjectKey::new(kproxy_state::Kind::Service, "default", "shop"))).await;
    at(2_000).await;
    assert_eq!(h.health_checks.by_port(32000), None);
}

#[tokio::test(start_paused = true)]
async fn a_bad_annotation_is_counted_once_per_change_not_per_sync() {
    let h = Harness::start(config(), &[]);
    let svc = |scheduler: &str| {
        let svc = service("default", "web")
            .cluster_ip("10.96.0.30")
            .port("http", "TCP", 80)
            .annotation("kproxy.io/scheduler", scheduler)
            .build();
        SourceEvent::Apply(Object::service(convert::service(&svc).unwrap()))
    };
    let counted = |h: &Harness| {
        let line = "kproxy_annotation_fallbacks_total{annotation=\"kproxy.io/scheduler\",problem=\"invalid\"}";
        let metrics = h.metrics.encode();
        metrics.lines().find_map(|l| l.strip_prefix(line)).map(|v| v.trim().to_owned()).unwrap_or_default()
    };
    h.send(svc("bogus")).await;
    h.send(SourceEvent::Synced).await;
    at(10).await;
    assert_eq!(counted(&h), "1");
    assert_eq!(h.state.borrow().ipv4.service_ports.len(), 1, "served all the same");
    // Endpoints change and periodic syncs run: the same warning, no new count.
    let sl = slice("default", "web-1", "web").port("http", "TCP", 8080).endpoint(Ep::new("10.244.1.30")).build();
    h.send(SourceEvent::Apply(convert::endpoint_slice(&sl).unwrap())).await;
    at(60_000).await;
    let calls = h.calls();
    assert_eq!(calls[1].changed_ports, 1, "the endpoint change: {calls:?}");
    assert!(calls.len() > 2, "and periodic syncs: {calls:?}");
    assert_eq!(counted(&h), "1");
    // Another bad value is another change.
    h.send(svc("fastest")).await;
    at(2_000).await;
    assert_eq!(counted(&h), "2");
}

#[tokio::test(start_paused = true)]
async fn only_a_sync_that_applied_updates_the_applied_state() {
    for (script, served) in [(&[false][..], None), (&[][..], Some(1))] {
        let start = Instant::now();
        let fake = Fake::new(start, script);
        let (tx, rx) = mpsc::channel(8);
        let (state_tx, _state) = watch::channel(Arc::new(ProxyState::default()));
        let handles = RunnerHandles {
            health: Arc::new(Health::new(Duration::from_secs(60))),
            metrics: Arc::new(Metrics::new()),
            state: state_tx,
            clock: Arc::new(TokioClock(start)),
            health_checks: Arc::default(),
        };
        let (applied_tx, applied) = watch::channel(None);
        let runner = Runner::new(config(), StateBuilder::new(StateConfig::default()), Box::new(fake), handles)
            .on_applied(applied_tx);
        let svc = service("default", "web").cluster_ip("10.96.0.30").port("http", "TCP", 80).build();
        tx.send(SourceEvent::Apply(Object::service(convert::service(&svc).unwrap()))).await.unwrap();
        tx.send(SourceEvent::Synced).await.unwrap();
        let _ = runner.run_once(rx).await;
        let ports = applied.borrow().as_ref().map(|state| state.ipv4.service_ports.len());
        assert_eq!(ports, served, "sync script {script:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn each_sync_reports_the_states_estimated_memory_and_counts() {
    let h = Harness::start(config(), &[]);
    h.service("a", "10.96.0.1").await;
    h.endpoints("a", &["10.1.0.1", "10.1.0.2"]).await;
    h.send(SourceEvent::Synced).await;
    at(10).await;
    let value = |line: &str| -> i64 {
        let metrics = h.metrics.encode();
        let found = metrics.lines().find_map(|l| l.strip_prefix(line).map(|v| v.trim().parse().unwrap()));
        found.unwrap_or_else(|| panic!("{line} missing: {metrics}"))
    };
    assert_eq!(value(r#"kproxy_state_objects{kind="endpoints"}"#), 2);
    assert_eq!(value(r#"kproxy_state_objects{kind="services"}"#), 1);
    let before = value(r#"kproxy_state_bytes{part="endpoints"}"#);
    assert!(before > 0 && value(r#"kproxy_state_bytes{part="state"}"#) > 0);
    let many: Vec<String> = (1..=100).map(|i| format!("10.1.1.{i}")).collect();
    h.endpoints("a", &many.iter().map(String::as_str).collect::<Vec<_>>()).await;
    at(2_000).await;
    assert_eq!(value(r#"kproxy_state_objects{kind="endpoints"}"#), 100);
    let after = value(r#"kproxy_state_bytes{part="endpoints"}"#);
    // 98 more endpoint records of 48 bytes.
    assert!(after >= before + 98 * 48, "{before} -> {after}");
}
