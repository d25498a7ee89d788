//! Network-programming latency: a real `Runner` over the `Nftables`
//! dataplane, fed endpoint changes at a steady rate. Each change's latency
//! runs from its send into the runner's event channel to the commit of the
//! first sync whose changes name its service.
//!
//! Every change touches a different service (see `Spec::change_target`),
//! so the first sync naming a service after its send is the one that
//! carried that change.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kproxy_admin::{Health, HealthChecks, Metrics, SystemClock};
use kproxy_dataplane::{Dataplane, Nftables, Runner, RunnerConfig, RunnerHandles, SyncFuture, SyncRequest};
use kproxy_model::{ProxyState, ServiceName};
use kproxy_state::{SourceEvent, StateBuilder};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::jobs::Latencies;
use crate::sync::plan_config;
use crate::workload::Spec;

/// How long to wait, after the last send, for every change to be applied.
const DRAIN: Duration = Duration::from_secs(30);
/// How long the initial full sync may take.
const FIRST_SYNC: Duration = Duration::from_secs(600);

/// One completed sync.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub done: Instant,
    pub took: Duration,
    pub ok: bool,
    pub services: BTreeSet<ServiceName>,
}

pub(crate) type Log = Arc<Mutex<Vec<Record>>>;

/// Delegates to `Nftables` and records when each sync returned and which
/// services it carried.
struct Recorder {
    inner: Nftables,
    log: Log,
}

impl Dataplane for Recorder {
    fn mode(&self) -> &'static str {
        self.inner.mode()
    }

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a> {
        Box::pin(async move {
            let services = request.changes.service_ports.iter().map(|(_, name)| name.service.clone()).collect();
            let start = Instant::now();
            let result = self.inner.sync(request).await;
            let record = Record { done: Instant::now(), took: start.elapsed(), ok: result.is_ok(), services };
            self.log.lock().unwrap_or_else(PoisonError::into_inner).push(record);
            result
        })
    }
}

pub(crate) fn records(log: &Log) -> Vec<Record> {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// What a feed gets: the runner's event channel, its syncs, its metrics.
pub(crate) struct Rig {
    pub events: mpsc::Sender<SourceEvent>,
    pub log: Log,
    pub metrics: Arc<Metrics>,
}

impl Rig {
    pub async fn send(&self, event: SourceEvent) -> anyhow::Result<()> {
        self.events.send(event).await.map_err(|_| anyhow::anyhow!("the runner stopped"))
    }

    /// Sends the workload and waits for the first sync, which must succeed.
    pub async fn load(&self, spec: &Spec) -> anyhow::Result<Record> {
        for event in spec.events() {
            self.send(event).await?;
        }
        let deadline = Instant::now() + FIRST_SYNC;
        let first = loop {
            if let Some(first) = records(&self.log).first().cloned() {
                break first;
            }
            anyhow::ensure!(Instant::now() < deadline, "no first sync within {FIRST_SYNC:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        anyhow::ensure!(first.ok, "the first sync failed");
        Ok(first)
    }
}

/// Runs a real runner with `config` over a recording `Nftables` beside
/// `feed`, on this thread, until `feed` returns.
pub(crate) async fn with_runner<T, F, Fut>(spec: &Spec, config: RunnerConfig, feed: F) -> anyhow::Result<T>
where
    F: FnOnce(Rig) -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    spec.check()?;
    let log: Log = Arc::default();
    let dataplane = Recorder { inner: Nftables::new(plan_config()), log: Arc::clone(&log) };
    let metrics = Arc::new(Metrics::new());
    let handles = RunnerHandles {
        health: Arc::new(Health::new(Duration::from_secs(3600))),
        metrics: Arc::clone(&metrics),
        state: watch::channel(Arc::new(ProxyState::default())).0,
        clock: Arc::new(SystemClock),
        health_checks: Arc::new(HealthChecks::default()),
    };
    let runner = Runner::new(config, StateBuilder::new(spec.state_config()), Box::new(dataplane), handles);
    let (events, receiver) = mpsc::channel(4096);
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    let feed = async move {
        let result = feed(Rig { events, log, metrics }).await;
        let _ = stop.send(());
        result
    };
    let ((), result) = tokio::join!(runner.run(receiver, shutdown), feed);
    result
}

/// Runs the runner and the change feed side by side on this thread.
pub async fn measure(spec: Spec, rate: u32, seconds: f64, min_sync_ms: u64) -> anyhow::Result<Latencies> {
    let config = RunnerConfig::new(Duration::from_millis(min_sync_ms), Duration::from_secs(3600));
    with_runner(&spec, config, |rig| feed(&spec, rig, rate, seconds)).await
}

/// Sends the workload, waits for the first sync, sends the changes, and
/// waits until each has been applied.
async fn feed(spec: &Spec, rig: Rig, rate: u32, seconds: f64) -> anyhow::Result<Latencies> {
    let first = rig.load(spec).await?;
    let log = &rig.log;

    let count = (f64::from(rate) * seconds).round() as usize;
    anyhow::ensure!(count <= spec.services, "more changes than services: each change needs its own service");
    let period = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let start = Instant::now();
    let mut sent = Vec::with_capacity(count);
    for k in 0..count {
        let i = spec.change_target(k, false);
        let event = spec.change_event(i, k);
        tokio::time::sleep_until(start + period * u32::try_from(k).unwrap_or(u32::MAX)).await;
        sent.push((ServiceName::new(spec.namespace(i), spec.name(i)), Instant::now()));
        rig.send(event).await?;
    }

    let deadline = Instant::now() + DRAIN;
    loop {
        let done = records(log);
        let unmatched = sent.iter().filter(|(service, at)| applied_at(&done, service, *at).is_none()).count();
        if unmatched == 0 || Instant::now() >= deadline {
            return Ok(summarise(&done, &sent, first.took));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// When the first successful sync after `at` that carried `service` returned.
pub(crate) fn applied_at(done: &[Record], service: &ServiceName, at: Instant) -> Option<Instant> {
    done.iter().find(|r| r.ok && r.done >= at && r.services.contains(service)).map(|r| r.done)
}

fn summarise(done: &[Record], sent: &[(ServiceName, Instant)], cold: Duration) -> Latencies {
    let latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(service, at)| applied_at(done, service, *at).map(|t| t.duration_since(*at).as_secs_f64()))
        .collect();
    let later = done.iter().skip(1);
    Latencies {
        cold_s: cold.as_secs_f64(),
        unmatched: sent.len() - latencies.len(),
        latencies_s: latencies,
        sent: sent.len(),
        syncs_s: later.clone().map(|r| r.took.as_secs_f64()).collect(),
        batch: later.map(|r| r.services.len()).collect(),
    }
}
