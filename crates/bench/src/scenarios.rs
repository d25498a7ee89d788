//! Which measurements a run makes, at which sizes, and how their runs fold
//! into [`Results`]. A failed measurement becomes a note in the report;
//! the others still run.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::harness::Harness;
use crate::iptables::{IptablesBackend, PayloadShape};
use crate::jobs::{Job, Latencies, Outcome, ProcessStats, SyncTimes};
use crate::process::RunMode;
use crate::results::{
    FloorResult, IdleResult, IptablesResult, IptablesSection, LatencyResult, ModeResult, PacingRow, PacingSection,
    PacketResult, ParseResult, ProcessResult, Results, SizeResult, UpstreamResult,
};
use crate::stats::{Summary, quantile};
use crate::workload::{FileFormat, Spec};
use crate::{pacing, packet, userspace};

const MIB: f64 = 1024.0;

/// The iptables mode's sizes. Not 100k: legacy `iptables-restore` rewrites
/// the whole table on every commit, so 100k services' changes would take
/// longer than the rest of the run.
pub const IPTABLES_SIZES: [usize; 2] = [1000, 10_000];

/// The size of the per-mode memory comparison (what issue 16 compared with
/// upstream kube-proxy: 2k services x 10 endpoints).
pub const MODE_SERVICES: usize = 2000;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Plan {
    pub endpoints: usize,
    pub sizes: Vec<usize>,
    pub changes_per_run: usize,
    pub upstream_sizes: Vec<usize>,
    pub upstream_changes: usize,
    /// The iptables mode's sizes (both backends); none in `--quick`.
    pub iptables_sizes: Vec<usize>,
    /// Changes shortly after one another; not in `--quick`.
    pub pacing: bool,
    pub process_sizes: Vec<usize>,
    pub idle_services: usize,
    /// Sizes read from the fake API server (nftables mode).
    pub kube_sizes: Vec<usize>,
    /// The size every mode is measured at from the fake API server; none
    /// in `--quick`.
    pub mode_services: Option<usize>,
    /// `kproxy state` on the workload in one file, YAML and JSON.
    pub parse_services: usize,
    pub latency_services: usize,
    pub latency_rate: u32,
    pub latency_seconds: f64,
    pub min_sync_ms: u64,
    pub packet_sizes: Vec<usize>,
    pub packet_samples: usize,
    /// Runs the cold-sync-and-change measurement always gets (the `--quick`
    /// guard's numbers); every other measurement gets at least one.
    pub guard_runs: usize,
    /// The userspace mode against HAProxy; not in `--quick`.
    pub userspace: Option<userspace::Plan>,
}

impl Plan {
    pub fn new(quick: bool) -> Plan {
        let (sizes, upstream_sizes) = if quick {
            (vec![1000, 10_000], vec![1000])
        } else {
            (vec![1000, 10_000, 100_000], vec![1000, 5000, 10_000])
        };
        Plan {
            endpoints: 10,
            process_sizes: if quick { vec![1000] } else { sizes.clone() },
            sizes,
            changes_per_run: 5,
            upstream_sizes,
            upstream_changes: 3,
            iptables_sizes: if quick { Vec::new() } else { IPTABLES_SIZES.to_vec() },
            pacing: !quick,
            idle_services: 10_000,
            kube_sizes: if quick { vec![10_000] } else { vec![10_000, 100_000] },
            mode_services: (!quick).then_some(MODE_SERVICES),
            parse_services: 10_000,
            latency_services: 10_000,
            latency_rate: 100,
            latency_seconds: if quick { 5.0 } else { 10.0 },
            min_sync_ms: 10,
            packet_sizes: vec![1, 1000, 10_000],
            packet_samples: 200,
            guard_runs: if quick { 3 } else { 1 },
            userspace: (!quick).then(|| userspace::Plan::new("haproxy".into(), "wrk".into())),
        }
    }
}

/// Runs every measurement of `plan`.
pub fn collect(harness: &Harness, plan: &Plan, kproxy: &Path, workdir: &Path, results: &mut Results) {
    for &n in &plan.sizes {
        let size = size(harness, plan, n, &mut results.notes);
        results.sizes.push(size);
    }
    for &n in &plan.upstream_sizes {
        match upstream(harness, plan, n) {
            Ok(row) => results.upstream.push(row),
            Err(e) => results.notes.push(format!("upstream layout at {n} services failed: {e:#}")),
        }
    }
    if !plan.iptables_sizes.is_empty() {
        let section = iptables(harness, &plan.iptables_sizes, plan.endpoints, plan.changes_per_run, &results.source);
        results.iptables = Some(section);
    }
    for &n in &plan.process_sizes {
        match process(harness, plan, n, kproxy, workdir) {
            Ok(row) => results.process.push(row),
            Err(e) => results.notes.push(format!("kproxy run --once at {n} services failed: {e:#}")),
        }
    }
    match idle(harness, plan, kproxy, workdir) {
        Ok(row) => results.idle = Some(row),
        Err(e) => results.notes.push(format!("idle RSS at {} services failed: {e:#}", plan.idle_services)),
    }
    for &n in &plan.kube_sizes {
        match kube(harness, plan, n, RunMode::Nftables, kproxy, workdir) {
            Ok(row) => results.kube.push(row),
            Err(e) => results.notes.push(format!("kproxy from the API server at {n} services failed: {e:#}")),
        }
    }
    if let Some(n) = plan.mode_services {
        results.modes = modes(harness, plan, n, kproxy, workdir, &mut results.notes);
    }
    match parse(harness, plan, kproxy, workdir) {
        Ok(rows) => results.parse = rows,
        Err(e) => results.notes.push(format!("kproxy state on one file failed: {e:#}")),
    }
    match latency(harness, plan) {
        Ok(row) => results.latency = Some(row),
        Err(e) => results.notes.push(format!("network-programming latency failed: {e:#}")),
    }
    if plan.pacing {
        results.pacing = Some(pacing(harness, &results.source));
    }
    match floor(harness) {
        Ok(row) => results.floor = Some(row),
        Err(e) => results.notes.push(format!("the one-element floor failed: {e:#}")),
    }
    match packets(harness, plan) {
        Ok(rows) => results.packets = rows,
        Err(e) => results.notes.push(format!("first-packet latency failed: {e:#}")),
    }
    if let Some(u) = &plan.userspace {
        results.userspace = Some(userspace::collect(harness, u, kproxy, workdir, &results.source));
    }
}

fn sync_times(harness: &Harness, job: &Job) -> anyhow::Result<SyncTimes> {
    match harness.run(job)? {
        Outcome::Sync(times) => Ok(times),
        other => anyhow::bail!("unexpected answer {other:?}"),
    }
}

/// Summary of one number from each run.
fn each<T>(runs: &[T], f: impl Fn(&T) -> Option<f64>) -> Option<Summary> {
    Summary::of(&runs.iter().filter_map(f).collect::<Vec<_>>())
}

/// Summary of a list from each run, pooled.
fn pooled<T>(runs: &[T], f: impl Fn(&T) -> &[f64]) -> Option<Summary> {
    Summary::of(&runs.iter().flat_map(|r| f(r).iter().copied()).collect::<Vec<_>>())
}

fn size(harness: &Harness, plan: &Plan, n: usize, notes: &mut Vec<String>) -> SizeResult {
    let (m, k) = (plan.endpoints, plan.changes_per_run);
    let mut row = SizeResult { services: n, ..SizeResult::default() };
    let job = Job::Dataplane { services: n, endpoints: m, changes: k, pod: None, udp_cleanup: true };
    match harness.repeat(&job.label(), plan.guard_runs, || sync_times(harness, &job)) {
        Ok(runs) => {
            row.build = each(&runs, |r| Some(r.build_s));
            row.rss_built_mib = each(&runs, |r| r.rss_built_kib.map(|k| k as f64 / MIB));
            row.rss_synced_mib = each(&runs, |r| r.rss_synced_kib.map(|k| k as f64 / MIB));
            row.cold = each(&runs, |r| Some(r.cold_s));
            row.change = pooled(&runs, |r| &r.changes_s);
            row.detail = runs.last().map(|r| r.detail.clone()).unwrap_or_default();
        }
        Err(e) => notes.push(format!("{} failed: {e:#}", job.label())),
    }
    let job = Job::Dataplane { services: n, endpoints: m, changes: 0, pod: None, udp_cleanup: false };
    match harness.repeat(&job.label(), 1, || sync_times(harness, &job)) {
        Ok(runs) => row.cold_rules_only = each(&runs, |r| Some(r.cold_s)),
        Err(e) => notes.push(format!("{} failed: {e:#}", job.label())),
    }
    let job = Job::Text { services: n, endpoints: m, changes: k };
    match harness.repeat(&job.label(), 1, || sync_times(harness, &job)) {
        Ok(runs) => {
            row.text_cold = each(&runs, |r| Some(r.cold_s));
            row.text_plan = each(&runs, |r| r.plan_s);
            row.text_render = each(&runs, |r| r.render_s);
            row.text_load = each(&runs, |r| r.load_s);
            row.text_change = pooled(&runs, |r| &r.changes_s);
            row.text_change_load = pooled(&runs, |r| &r.change_load_s);
            row.script_bytes = runs.last().and_then(|r| r.script_bytes);
        }
        Err(e) => notes.push(format!("{} failed: {e:#}", job.label())),
    }
    row
}

/// Once per size: upstream's cold load is slow (about a minute at 10k).
fn upstream(harness: &Harness, plan: &Plan, n: usize) -> anyhow::Result<UpstreamResult> {
    let job = Job::Upstream { services: n, endpoints: plan.endpoints, changes: plan.upstream_changes };
    let start = std::time::Instant::now();
    let run = sync_times(harness, &job)?;
    eprintln!("==> {}: one run took {:.1} s", job.label(), start.elapsed().as_secs_f64());
    Ok(UpstreamResult {
        services: n,
        cold: Summary::of(&[run.cold_s]),
        render: run.render_s.and_then(|s| Summary::of(&[s])),
        change: Summary::of(&run.changes_s),
        change_load: Summary::of(&run.change_load_s),
        script_bytes: run.script_bytes,
        detail: run.detail,
    })
}

/// The iptables mode at each size, legacy then nft; a failed cell becomes
/// a note of the section.
pub fn iptables(harness: &Harness, sizes: &[usize], endpoints: usize, changes: usize, source: &str) -> IptablesSection {
    let start = std::time::Instant::now();
    let mut section = IptablesSection {
        started: crate::now(),
        source: source.to_owned(),
        changes_per_run: changes,
        ..IptablesSection::default()
    };
    for &services in sizes {
        for backend in IptablesBackend::ALL {
            let job = Job::Iptables { backend, services, endpoints, changes };
            match harness.repeat(&job.label(), 1, || sync_times(harness, &job)) {
                Ok(runs) => section.rows.push(iptables_row(backend, services, &runs)),
                Err(e) => section.notes.push(format!("{} failed: {e:#}", job.label())),
            }
        }
    }
    section.duration_s = start.elapsed().as_secs_f64();
    section
}

fn iptables_row(backend: IptablesBackend, services: usize, runs: &[SyncTimes]) -> IptablesResult {
    let shapes = || runs.iter().flat_map(|r| &r.change_payloads);
    let of = |f: fn(&PayloadShape) -> usize| Summary::of(&shapes().map(|p| f(p) as f64).collect::<Vec<_>>());
    let cold = runs.last().and_then(|r| r.cold_payload.as_ref());
    IptablesResult {
        backend: backend.as_str().to_owned(),
        services,
        build: each(runs, |r| Some(r.build_s)),
        cold: each(runs, |r| Some(r.cold_s)),
        change: pooled(runs, |r| &r.changes_s),
        change_plan: pooled(runs, |r| &r.change_plan_s),
        cold_bytes: cold.map(|p| p.bytes),
        cold_chains: cold.map(|p| p.chains),
        cold_restores: cold.map(|p| p.restores),
        change_bytes: of(|p| p.bytes),
        change_chains: of(|p| p.chains),
        change_own: of(|p| p.own),
        change_dispatch: of(|p| p.dispatch),
        foreign_chains: shapes().map(|p| p.foreign).sum(),
        detail: runs.last().map(|r| r.detail.clone()).unwrap_or_default(),
    }
}

/// The workload as a manifest folder, written once per size.
fn manifests(workdir: &Path, spec: &Spec) -> anyhow::Result<(PathBuf, f64)> {
    let dir = workdir.join(format!("manifests-{}x{}", spec.services, spec.endpoints));
    if !dir.join("cluster.yaml").exists() {
        eprintln!("==> writing {} services as manifests to {}", spec.services, dir.display());
        spec.write_manifests(&dir)?;
    }
    let mut bytes = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        bytes += entry?.metadata()?.len();
    }
    Ok((dir, bytes as f64 / MIB / MIB))
}

fn process_stats(harness: &Harness, job: &Job) -> anyhow::Result<ProcessStats> {
    match harness.run(job)? {
        Outcome::Process(stats) if stats.success => Ok(stats),
        Outcome::Process(stats) => anyhow::bail!("kproxy did not succeed; its log ends:\n{}", stats.log_tail),
        other => anyhow::bail!("unexpected answer {other:?}"),
    }
}

fn process(harness: &Harness, plan: &Plan, n: usize, kproxy: &Path, workdir: &Path) -> anyhow::Result<ProcessResult> {
    let (dir, manifest_mib) = manifests(workdir, &Spec::new(n, plan.endpoints))?;
    let job = Job::Kproxy { binary: kproxy.to_owned(), manifests: dir, idle: false, timeout_s: 1200.0 };
    let runs = harness.repeat(&format!("{} ({n} services)", job.label()), 1, || process_stats(harness, &job))?;
    Ok(ProcessResult {
        services: n,
        wall: each(&runs, |r| Some(r.wall_s)),
        peak_mib: each(&runs, |r| Some(r.peak_kib as f64 / MIB)),
        children_peak_mib: each(&runs, |r| Some(r.children_peak_kib as f64 / MIB)),
        all_succeeded: runs.iter().all(|r| r.success),
        manifest_mib,
    })
}

fn idle(harness: &Harness, plan: &Plan, kproxy: &Path, workdir: &Path) -> anyhow::Result<IdleResult> {
    let n = plan.idle_services;
    let (dir, _) = manifests(workdir, &Spec::new(n, plan.endpoints))?;
    let job = Job::Kproxy { binary: kproxy.to_owned(), manifests: dir, idle: true, timeout_s: 1200.0 };
    let runs = harness.repeat(&format!("{} ({n} services)", job.label()), 1, || process_stats(harness, &job))?;
    Ok(idle_result(n, &runs))
}

fn idle_result(services: usize, runs: &[ProcessStats]) -> IdleResult {
    IdleResult {
        services,
        idle_mib: each(runs, |r| r.idle_kib.map(|k| k as f64 / MIB)),
        peak_mib: each(runs, |r| Some(r.peak_kib as f64 / MIB)),
        first_sync: each(runs, |r| Some(r.wall_s)),
        idle_cpu: each(runs, |r| r.idle_cpu),
        state_bytes_per_endpoint: each(runs, |r| per(r, "endpoints", "endpoints")),
        state_bytes_per_service: each(runs, |r| per(r, "services", "services")),
        state_mib: each(runs, |r| {
            let bytes: Vec<f64> = r.state.iter().filter(|(k, _)| k.starts_with("bytes/")).map(|(_, v)| *v).collect();
            (!bytes.is_empty()).then(|| bytes.iter().sum::<f64>() / MIB / MIB)
        }),
    }
}

/// `kproxy_state_bytes{part}` over `kproxy_state_objects{kind}`.
fn per(stats: &ProcessStats, part: &str, kind: &str) -> Option<f64> {
    let bytes = stats.state.get(&format!("bytes/{part}"))?;
    let objects = stats.state.get(&format!("objects/{kind}")).filter(|n| **n > 0.0)?;
    Some(bytes / objects)
}

/// The Kubernetes source's memory and time to the first sync at `n`
/// services, in `mode`.
fn kube(
    harness: &Harness,
    plan: &Plan,
    n: usize,
    mode: RunMode,
    kproxy: &Path,
    workdir: &Path,
) -> anyhow::Result<IdleResult> {
    let job = Job::Kube {
        binary: kproxy.to_owned(),
        services: n,
        endpoints: plan.endpoints,
        mode,
        workdir: workdir.to_owned(),
        timeout_s: 600.0,
    };
    let runs = harness.repeat(&job.label(), 1, || process_stats(harness, &job))?;
    Ok(idle_result(n, &runs))
}

/// Every mode from the API server at `n` services (`--only iptables` too).
pub fn modes(
    harness: &Harness,
    plan: &Plan,
    n: usize,
    kproxy: &Path,
    workdir: &Path,
    notes: &mut Vec<String>,
) -> Vec<ModeResult> {
    let mut rows = Vec::new();
    for mode in RunMode::ALL {
        match kube(harness, plan, n, mode, kproxy, workdir) {
            Ok(result) => rows.push(ModeResult { mode, result }),
            Err(e) => notes.push(format!("kproxy in {} mode at {n} services failed: {e:#}", mode.as_str())),
        }
    }
    rows
}

/// `kproxy state` on the workload written as one YAML file and as one JSON
/// `List`, each in a folder of its own.
fn parse(harness: &Harness, plan: &Plan, kproxy: &Path, workdir: &Path) -> anyhow::Result<Vec<ParseResult>> {
    let spec = Spec::new(plan.parse_services, plan.endpoints);
    let mut rows = Vec::new();
    for format in FileFormat::ALL {
        let dir = workdir.join(format!("one-file-{}x{}-{}", spec.services, spec.endpoints, format.extension()));
        let file = dir.join(format!("workload.{}", format.extension()));
        if !file.exists() {
            eprintln!(
                "==> writing {} services as one {} file to {}",
                spec.services,
                format.extension(),
                file.display()
            );
            spec.write_single_file(&file, format)?;
        }
        let file_mib = std::fs::metadata(&file)?.len() as f64 / MIB / MIB;
        let job = Job::State { binary: kproxy.to_owned(), dir, timeout_s: 300.0 };
        let runs = harness.repeat(&job.label(), plan.guard_runs, || process_stats(harness, &job))?;
        rows.push(ParseResult {
            format,
            services: spec.services,
            file_mib,
            wall: each(&runs, |r| Some(r.wall_s)),
            peak_mib: each(&runs, |r| Some(r.peak_kib as f64 / MIB)),
        });
    }
    Ok(rows)
}

fn latency(harness: &Harness, plan: &Plan) -> anyhow::Result<LatencyResult> {
    let job = Job::Latency {
        services: plan.latency_services,
        endpoints: plan.endpoints,
        rate: plan.latency_rate,
        seconds: plan.latency_seconds,
        min_sync_ms: plan.min_sync_ms,
    };
    let runs: Vec<Latencies> = harness.repeat(&job.label(), 1, || match harness.run(&job)? {
        Outcome::Latency(l) => Ok(l),
        other => anyhow::bail!("unexpected answer {other:?}"),
    })?;
    let all: Vec<f64> = runs.iter().flat_map(|r| r.latencies_s.iter().copied()).collect();
    let batches: Vec<f64> = runs.iter().flat_map(|r| r.batch.iter().map(|b| *b as f64)).collect();
    Ok(LatencyResult {
        services: plan.latency_services,
        rate: plan.latency_rate,
        seconds: plan.latency_seconds,
        min_sync_ms: plan.min_sync_ms,
        p50: quantile(&all, 0.5),
        p99: quantile(&all, 0.99),
        max: quantile(&all, 1.0),
        per_run_p99: each(&runs, |r| quantile(&r.latencies_s, 0.99)),
        sent: runs.iter().map(|r| r.sent).sum(),
        unmatched: runs.iter().map(|r| r.unmatched).sum(),
        syncs: runs.iter().map(|r| r.syncs_s.len()).sum(),
        sync_time: pooled(&runs, |r| &r.syncs_s),
        batch: Summary::of(&batches),
        cold: each(&runs, |r| Some(r.cold_s)),
    })
}

/// The runner's pacing: rounds of three changes 300 ms apart at the default
/// minSyncPeriod, with upstream's burst of two and with none (one sync per
/// period); a failed row becomes a note of the section.
pub fn pacing(harness: &Harness, source: &str) -> PacingSection {
    let start = std::time::Instant::now();
    let (services, endpoints) = (1000, 10);
    let base = pacing::Params { min_sync_ms: 1000, burst: 2, changes: 3, gap_ms: 300, rounds: 4 };
    let mut section = PacingSection {
        started: crate::now(),
        source: source.to_owned(),
        services,
        min_sync_ms: base.min_sync_ms,
        changes: base.changes,
        gap_ms: base.gap_ms,
        rounds_per_run: base.rounds,
        ..PacingSection::default()
    };
    for burst in [2, 1] {
        let job = Job::Pacing { services, endpoints, params: pacing::Params { burst, ..base } };
        let runs = harness.repeat(&job.label(), 1, || match harness.run(&job)? {
            Outcome::Pacing(p) => Ok(p),
            other => anyhow::bail!("unexpected answer {other:?}"),
        });
        match runs {
            Ok(runs) => section.rows.push(PacingRow {
                burst,
                runs: runs.len(),
                positions: (0..base.changes).map(|k| pooled(&runs, |r| &r.latencies_s[k])).collect(),
                histogram_count: runs.iter().map(|r| r.histogram.count).sum(),
                histogram_sum_s: runs.iter().map(|r| r.histogram.sum_s).sum(),
                histogram_within_250ms: runs.iter().map(|r| r.histogram.within_250ms).sum(),
            }),
            Err(e) => section.notes.push(format!("{} failed: {e:#}", job.label())),
        }
    }
    section.duration_s = start.elapsed().as_secs_f64();
    section
}

/// One topology per run, programmed with each size in turn.
fn packets(harness: &Harness, plan: &Plan) -> anyhow::Result<Vec<PacketResult>> {
    let what = format!("first-packet latency at {:?} services", plan.packet_sizes);
    let runs =
        harness.repeat(&what, 1, || packet::run(harness, &plan.packet_sizes, plan.endpoints, plan.packet_samples))?;
    let median = |samples: &[f64]| Summary::of(samples).map(|s| s.median);
    let rows = plan.packet_sizes.iter().enumerate().map(|(i, &n)| {
        let of_size: Vec<&packet::PacketRun> = runs.iter().filter_map(|r| r.get(i)).collect();
        PacketResult {
            services: n,
            first: each(&of_size, |r| median(&r.first)),
            last: each(&of_size, |r| median(&r.last)),
            direct: each(&of_size, |r| median(&r.direct)),
            samples_per_run: plan.packet_samples,
            failures: of_size.iter().map(|r| r.failures).sum(),
        }
    });
    Ok(rows.collect())
}

/// One namespace, 50 rounds: cheap, and enough for medians.
fn floor(harness: &Harness) -> anyhow::Result<FloorResult> {
    match harness.run(&Job::Floor { samples: 50 })? {
        Outcome::Floor(f) => Ok(FloorResult {
            noop: Summary::of(&f.noop_s),
            add: Summary::of(&f.add_s),
            delete: Summary::of(&f.delete_s),
        }),
        other => anyhow::bail!("unexpected answer {other:?}"),
    }
}
