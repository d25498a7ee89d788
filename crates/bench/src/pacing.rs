//! Sync pacing as a user sees it: a real `Runner` over the `Nftables`
//! dataplane, at the default minSyncPeriod, fed rounds of a few endpoint
//! changes shortly after one another, each round after a quiet spell long
//! enough to refill the runner's bucket of syncs. Each change's latency runs
//! from its send to the commit of the first sync naming its service (each
//! change touches another service). The changes carry their send time as
//! trigger time, so the runner's own
//! `kubeproxy_network_programming_duration_seconds` sees them too.

use std::time::{Duration, SystemTime};

use kproxy_dataplane::RunnerConfig;
use kproxy_model::ServiceName;
use kproxy_state::{Object, SourceEvent};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::latency::{Rig, applied_at, records, with_runner};
use crate::workload::Spec;

/// How long one change may take to be applied before the run fails.
const APPLY: Duration = Duration::from_secs(30);

/// What one run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    pub min_sync_ms: u64,
    /// The runner's burst (2 is upstream's and kproxy's; 1 holds every sync
    /// to one per minSyncPeriod, kproxy's pacing before).
    pub burst: u32,
    /// Changes per round, and the time between two of them.
    pub changes: usize,
    pub gap_ms: u64,
    pub rounds: usize,
}

/// One run: per position in the round, each round's latency in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Paced {
    pub cold_s: f64,
    pub latencies_s: Vec<Vec<f64>>,
    /// The runner's histogram (IPv4) at the end of the run.
    pub histogram: Histogram,
}

/// `kubeproxy_network_programming_duration_seconds`, as scraped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub count: u64,
    pub sum_s: f64,
    /// Observations of at most 0.25 s (upstream's second bucket).
    pub within_250ms: u64,
}

pub async fn measure(spec: Spec, params: Params) -> anyhow::Result<Paced> {
    anyhow::ensure!(params.changes * params.rounds <= spec.services, "each change needs its own service");
    let mut config = RunnerConfig::new(Duration::from_millis(params.min_sync_ms), Duration::from_secs(3600));
    config.burst_syncs = params.burst;
    with_runner(&spec, config, |rig| rounds(&spec, rig, params)).await
}

async fn rounds(spec: &Spec, rig: Rig, params: Params) -> anyhow::Result<Paced> {
    let first = rig.load(spec).await?;
    let min_sync = Duration::from_millis(params.min_sync_ms);
    // A refill of the whole bucket, with room for the syncs' own time.
    let quiet = min_sync * params.burst + Duration::from_millis(200);
    let mut latencies = vec![Vec::with_capacity(params.rounds); params.changes];
    for round in 0..params.rounds {
        tokio::time::sleep(quiet).await;
        let start = Instant::now();
        let mut sent = Vec::with_capacity(params.changes);
        for position in 0..params.changes {
            let at = start + Duration::from_millis(params.gap_ms) * u32::try_from(position)?;
            tokio::time::sleep_until(at).await;
            let i = spec.change_target(round * params.changes + position, false);
            sent.push((ServiceName::new(spec.namespace(i), spec.name(i)), Instant::now()));
            rig.send(triggered_now(spec.change_event(i, round * params.changes + position))).await?;
        }
        for (position, (service, at)) in sent.into_iter().enumerate() {
            let done = wait_applied(&rig, &service, at).await?;
            latencies[position].push(done.duration_since(at).as_secs_f64());
        }
    }
    Ok(Paced { cold_s: first.took.as_secs_f64(), latencies_s: latencies, histogram: scrape(&rig.metrics.encode()) })
}

/// The change with its send time as `last-change-trigger-time`.
fn triggered_now(event: SourceEvent) -> SourceEvent {
    match event {
        SourceEvent::Apply(Object::Slice { key, info, .. }) => {
            SourceEvent::Apply(Object::Slice { key, info, trigger_time: Some(SystemTime::now()) })
        }
        other => other,
    }
}

async fn wait_applied(rig: &Rig, service: &ServiceName, at: Instant) -> anyhow::Result<Instant> {
    let deadline = at + APPLY;
    loop {
        if let Some(done) = applied_at(&records(&rig.log), service, at) {
            return Ok(done);
        }
        anyhow::ensure!(Instant::now() < deadline, "{service} was not applied within {APPLY:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The IPv4 histogram's count, sum and 0.25 s bucket from the metrics text.
fn scrape(text: &str) -> Histogram {
    let family = "kubeproxy_network_programming_duration_seconds";
    let value = |series: &str| {
        text.lines().find_map(|line| line.strip_prefix(series)?.trim().parse::<f64>().ok()).unwrap_or(0.0)
    };
    Histogram {
        count: value(&format!("{family}_count{{ip_family=\"IPv4\"}}")) as u64,
        sum_s: value(&format!("{family}_sum{{ip_family=\"IPv4\"}}")),
        within_250ms: value(&format!("{family}_bucket{{ip_family=\"IPv4\",le=\"0.25\"}}")) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_is_read_from_the_metrics_text() {
        let metrics = kproxy_admin::Metrics::new();
        let label = kproxy_admin::metrics::FamilyLabel { ip_family: kproxy_model::IpFamily::V4.into() };
        for seconds in [0.01, 0.02, 0.7] {
            metrics.network_programming_duration.get_or_create(&label).observe(seconds);
        }
        let h = scrape(&metrics.encode());
        assert_eq!((h.count, h.within_250ms), (3, 2));
        assert!((h.sum_s - 0.73).abs() < 1e-9, "{h:?}");
    }
}
