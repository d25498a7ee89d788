//! The runner under paused tokio time, shared by the runner's test files: a
//! fake dataplane that records each call, and a harness that feeds events.
//! Each test binary uses part of it.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kproxy_admin::{Clock, Health, HealthChecks, Metrics};
use kproxy_dataplane::{Dataplane, Runner, RunnerConfig, RunnerHandles, SyncFuture, SyncKind, SyncReport, SyncRequest};
use kproxy_model::ProxyState;
use kproxy_state::{Object, SourceEvent, StateBuilder, StateConfig, convert};
use kproxy_testkit::{EndpointBuilder as Ep, service, slice};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// One call the runner made.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub at_ms: u128,
    pub kind: SyncKind,
    pub changed_ports: usize,
    pub stale_udp: usize,
}

#[derive(Clone)]
pub struct Fake {
    pub start: Instant,
    pub calls: Arc<Mutex<Vec<Call>>>,
    /// Results to return, in order; empty means succeed.
    pub script: Arc<Mutex<VecDeque<bool>>>,
    /// How long each sync takes (paused time: exact).
    pub took: Duration,
}

impl Fake {
    pub fn new(start: Instant, failures: &[bool]) -> Self {
        Fake {
            start,
            calls: Arc::default(),
            script: Arc::new(Mutex::new(failures.iter().copied().collect())),
            took: Duration::ZERO,
        }
    }
}

impl Dataplane for Fake {
    fn mode(&self) -> &'static str {
        "fake"
    }

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a> {
        self.calls.lock().unwrap().push(Call {
            at_ms: self.start.elapsed().as_millis(),
            kind: request.kind,
            changed_ports: request.changes.service_ports.len(),
            stale_udp: request.changes.stale_udp_endpoints.len() + request.changes.stale_udp_frontends.len(),
        });
        let ok = self.script.lock().unwrap().pop_front().unwrap_or(true);
        let took = self.took;
        Box::pin(async move {
            if !took.is_zero() {
                tokio::time::sleep(took).await;
            }
            if ok { Ok(SyncReport::default()) } else { Err("scripted failure".into()) }
        })
    }
}

/// tokio's (paused) clock, for health and latencies: the wall clock reads
/// [`wall`] of the time since `start`.
pub struct TokioClock(pub Instant);

impl Clock for TokioClock {
    fn now(&self) -> (std::time::Instant, SystemTime) {
        let now = Instant::now();
        (now.into_std(), wall(now.duration_since(self.0)))
    }
}

/// The wall time `since` after a harness started.
pub fn wall(since: Duration) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + since
}

pub struct Harness {
    pub fake: Fake,
    pub events: mpsc::Sender<SourceEvent>,
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    pub state: watch::Receiver<Arc<ProxyState>>,
    pub health_checks: Arc<HealthChecks>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Harness {
    pub fn start(config: RunnerConfig, failures: &[bool]) -> Self {
        Self::start_with(config, failures, Duration::ZERO)
    }

    /// A runner whose every sync takes `took`.
    pub fn start_with(config: RunnerConfig, failures: &[bool], took: Duration) -> Self {
        let start = Instant::now();
        let fake = Fake { took, ..Fake::new(start, failures) };
        let (events, rx) = mpsc::channel(64);
        let (state_tx, state) = watch::channel(Arc::new(ProxyState::default()));
        let health = Arc::new(Health::new(config.sync_period * 2));
        let metrics = Arc::new(Metrics::new());
        let health_checks = Arc::new(HealthChecks::default());
        let handles = RunnerHandles {
            health: health.clone(),
            metrics: metrics.clone(),
            state: state_tx,
            clock: Arc::new(TokioClock(start)),
            health_checks: health_checks.clone(),
        };
        let builder = StateBuilder::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
        let runner = Runner::new(config, builder, Box::new(fake.clone()), handles);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(runner.run(rx, async move {
            let _ = stopped.await;
        }));
        Harness { fake, events, health, metrics, state, health_checks, _stop: stop }
    }

    pub async fn send(&self, event: SourceEvent) {
        self.events.send(event).await.unwrap();
    }

    pub async fn service(&self, name: &str, ip: &str) {
        let svc = service("default", name).cluster_ip(ip).port("dns", "UDP", 53).build();
        self.send(SourceEvent::Apply(Object::service(convert::service(&svc).unwrap()))).await;
    }

    pub async fn endpoints(&self, name: &str, ips: &[&str]) {
        self.send(SourceEvent::Apply(endpoint_slice(name, ips))).await;
    }

    /// An endpoint change whose slice says it was triggered now (the
    /// `endpoints.kubernetes.io/last-change-trigger-time` annotation).
    pub async fn endpoints_triggered_now(&self, name: &str, ips: &[&str]) {
        let Object::Slice { key, info, .. } = endpoint_slice(name, ips) else {
            unreachable!("a slice converts to a slice")
        };
        let trigger_time = Some(wall(self.fake.start.elapsed()));
        self.send(SourceEvent::Apply(Object::Slice { key, info, trigger_time })).await;
    }

    pub fn calls(&self) -> Vec<Call> {
        self.fake.calls.lock().unwrap().clone()
    }

    pub fn times(&self) -> Vec<u128> {
        self.calls().iter().map(|c| c.at_ms).collect()
    }
}

fn endpoint_slice(name: &str, ips: &[&str]) -> Object {
    let sl =
        ips.iter().fold(slice("default", name, name).port("dns", "UDP", 53), |s, ip| s.endpoint(Ep::new(ip))).build();
    convert::endpoint_slice(&sl).unwrap()
}

/// Waits `ms` of (paused) time.
pub async fn at(ms: u64) {
    tokio::time::sleep_until(Instant::now() + Duration::from_millis(ms)).await;
}

/// minSyncPeriod 1 s, syncPeriod 30 s.
pub fn config() -> RunnerConfig {
    RunnerConfig::new(Duration::from_secs(1), Duration::from_secs(30))
}
