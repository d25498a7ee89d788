//! The harness side of the ebpf section: cold syncs and one-service
//! changes of the ebpf and nftables modes at 10k and 100k services
//! (alternating, one fresh namespace per run), then the traffic rounds
//! ([`crate::traffic`]). Whatever fails is in the section's notes.

use std::path::PathBuf;
use std::time::Instant;

use crate::harness::Harness;
use crate::jobs::{Job, Outcome, SyncTimes};
use crate::results::{EbpfSection, EbpfSyncRow};
use crate::stats::Summary;
use crate::{traffic, userspace};

/// Sizes of the sync comparison, and the runs each gets at least.
const SIZES: [(usize, usize); 2] = [(10_000, 5), (100_000, 3)];
/// One-service changes per run.
const CHANGES: usize = 20;

/// Measures the section.
pub fn collect(harness: &Harness, endpoints: usize, wrk: PathBuf, source: &str) -> EbpfSection {
    let start = Instant::now();
    let mut section = EbpfSection {
        started: crate::now(),
        source: source.to_owned(),
        changes_per_run: CHANGES,
        ..EbpfSection::default()
    };
    for (services, min_runs) in SIZES {
        let label = format!("ebpf and nftables modes, {services} services");
        let runs = harness.repeat(&label, min_runs, || pair(harness, services, endpoints));
        match runs {
            Ok(runs) => section.sync.push(row(services, &runs)),
            Err(e) => section.notes.push(format!("{label} failed: {e:#}")),
        }
    }
    match userspace::resolve(&wrk) {
        Ok(wrk) => {
            section.wrk = userspace::version(&wrk, "--version");
            let params = traffic::Params::new(wrk);
            match traffic::run(harness, &params) {
                Ok((rounds, notes)) => {
                    section.rounds = rounds;
                    section.notes.extend(notes);
                }
                Err(e) => section.notes.push(format!("the traffic runs failed: {e:#}")),
            }
            section.traffic = Some(params);
        }
        Err(e) => section.notes.push(format!("traffic not measured: {e:#} (scripts/bench installs wrk with apt)")),
    }
    section.duration_s = start.elapsed().as_secs_f64();
    section
}

/// One run of each mode, ebpf first.
fn pair(harness: &Harness, services: usize, endpoints: usize) -> anyhow::Result<(SyncTimes, SyncTimes)> {
    let ebpf = sync_times(harness, &Job::EbpfSync { services, endpoints, changes: CHANGES })?;
    let nft = Job::Dataplane { services, endpoints, changes: CHANGES, pod: None, udp_cleanup: false };
    Ok((ebpf, sync_times(harness, &nft)?))
}

fn sync_times(harness: &Harness, job: &Job) -> anyhow::Result<SyncTimes> {
    match harness.run(job)? {
        Outcome::Sync(times) => Ok(times),
        other => anyhow::bail!("unexpected answer {other:?}"),
    }
}

fn row(services: usize, runs: &[(SyncTimes, SyncTimes)]) -> EbpfSyncRow {
    let each = |f: &dyn Fn(&(SyncTimes, SyncTimes)) -> Option<f64>| {
        Summary::of(&runs.iter().filter_map(f).collect::<Vec<_>>())
    };
    let pooled = |f: &dyn Fn(&(SyncTimes, SyncTimes)) -> &[f64]| {
        Summary::of(&runs.iter().flat_map(|r| f(r).iter().copied()).collect::<Vec<_>>())
    };
    EbpfSyncRow {
        services,
        ebpf_cold: each(&|r| Some(r.0.cold_s)),
        ebpf_change: pooled(&|r| &r.0.changes_s),
        ebpf_cold_plan: each(&|r| r.0.plan_s),
        ebpf_change_plan: pooled(&|r| &r.0.change_plan_s),
        ebpf_cold_ops: runs.last().and_then(|r| r.0.script_bytes),
        nft_cold: each(&|r| Some(r.1.cold_s)),
        nft_change: pooled(&|r| &r.1.changes_s),
        detail: runs.last().map(|r| r.0.detail.clone()).unwrap_or_default(),
    }
}
