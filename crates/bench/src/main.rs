//! `kproxy-bench`: scale and latency benchmarks of kproxy's nftables mode,
//! of its iptables mode on both backends, and of its userspace mode against
//! HAProxy.
//!
//! `kproxy-bench run` measures cold syncs, one-service changes, the real
//! binary's memory, network-programming latency under a stream of changes
//! and first-packet latency through the kernel, compares with `nft -f` and
//! with upstream kube-proxy's layout, measures the iptables mode's cold
//! syncs and one-service changes (legacy and nft; not in `--quick`) and how
//! the runner paces changes shortly after one another (not in `--quick`),
//! compares the userspace mode with HAProxy (throughput, latency, memory per
//! idle connection; not in `--quick`), and writes BENCHMARKS.md with a plot.
//! Every nftables load and every packet happens inside `kp-` network
//! namespaces this process creates (kproxy-sandbox), never in its own.
//!
//! Not shipped; run it through `scripts/bench`.

mod backend;
mod ebpf;
mod ebpf_scenarios;
mod floor;
mod harness;
mod iptables;
mod jobs;
mod kube;
mod latency;
mod machine;
mod method;
mod pacing;
mod packet;
#[cfg(feature = "parsers")]
mod parsers;
mod plot;
mod process;
mod proxies;
mod report;
mod results;
mod scenarios;
mod stats;
mod svg;
mod sync;
mod targets;
mod traffic;
mod upstream;
mod userspace;
mod workload;
mod wrk;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use crate::harness::Harness;
use crate::results::Results;
use crate::scenarios::Plan;

#[derive(Debug, Parser)]
#[command(name = "kproxy-bench", about = "Scale and latency benchmarks of kproxy (writes BENCHMARKS.md)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every benchmark (as root) and write the report.
    Run {
        /// At most 10k services and 3 runs each; fails when a cold 10k sync
        /// takes over 5 s, a one-service change at 10k over 100 ms, or
        /// kproxy's idle RSS at 10k over 90 MiB (medians).
        #[arg(long)]
        quick: bool,
        /// The kproxy binary to measure.
        #[arg(long, default_value = "target/release/kproxy")]
        kproxy: PathBuf,
        #[arg(long, default_value = "BENCHMARKS.md")]
        out: PathBuf,
        #[arg(long, default_value = "docs/bench/scale.svg")]
        plot: PathBuf,
        /// Every number, as JSON.
        #[arg(long, default_value = "target/bench/results.json")]
        json: PathBuf,
        /// Where manifest folders are written (reused between runs).
        #[arg(long, default_value = "target/bench")]
        workdir: PathBuf,
        /// What the binaries were built from, for the report.
        #[arg(long, default_value = "unknown")]
        source: String,
        /// Measure only this part and rewrite the report, keeping every other
        /// section from the JSON of the last run (`--json`).
        #[arg(long, value_enum, conflicts_with = "quick")]
        only: Option<Part>,
        /// HAProxy (the userspace comparison): a path, or a name on PATH.
        #[arg(long, default_value = "haproxy")]
        haproxy: PathBuf,
        /// wrk (the userspace comparison's load generator).
        #[arg(long, default_value = "wrk")]
        wrk: PathBuf,
    },
    /// Rewrite the report and the plot from a run's JSON, without measuring.
    Report {
        #[arg(long, default_value = "target/bench/results.json")]
        json: PathBuf,
        #[arg(long, default_value = "BENCHMARKS.md")]
        out: PathBuf,
        #[arg(long, default_value = "docs/bench/scale.svg")]
        plot: PathBuf,
    },
    /// Write the workload as a manifest folder, for `kproxy run --manifests`.
    Manifests {
        #[arg(long, default_value_t = 1000)]
        services: usize,
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        /// Write everything into one file, `DIR/workload.yaml` (one
        /// document per object) or `DIR/workload.json` (a `List`), as the
        /// parsing benchmark reads it.
        #[arg(long, value_enum)]
        one_file: Option<workload::FileFormat>,
        dir: PathBuf,
    },
    /// Time candidate YAML parsers and kproxy's manifest reading on the
    /// same files (multi-document YAML, or a JSON List): medians, Markdown.
    /// Built with `--features parsers` only.
    #[cfg(feature = "parsers")]
    Parsers {
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// One measurement inside a network namespace (started by `run`).
    #[command(hide = true)]
    Worker { job: String },
}

/// A part of the run that can be measured alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    /// kproxy's userspace mode against HAProxy.
    Userspace,
    /// The iptables mode's cold sync and one-service changes, both backends.
    Iptables,
    /// Changes shortly after one another: the runner's pacing.
    Pacing,
    /// The ebpf mode next to the nftables mode and the pod IP: syncs at
    /// 10k and 100k, and traffic through a cluster IP.
    Ebpf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { quick, kproxy, out, plot, json, workdir, source, only, haproxy, wrk } => {
            let outputs = Outputs { out, plot, json };
            let tools = Tools { haproxy, wrk };
            match only {
                None => run(quick, &kproxy, &workdir, source, &tools, &outputs),
                Some(part) => run_only(part, &kproxy, &workdir, source, &tools, &outputs),
            }
        }
        Command::Report { json, out, plot } => report_again(&json, &out, &plot),
        Command::Manifests { services, endpoints, one_file, dir } => {
            let spec = workload::Spec::new(services, endpoints);
            let write = || match one_file {
                Some(format) => spec.write_single_file(&dir.join(format!("workload.{}", format.extension())), format),
                None => spec.write_manifests(&dir),
            };
            spec.check().and_then(|()| write()).map(|()| ExitCode::SUCCESS)
        }
        #[cfg(feature = "parsers")]
        Command::Parsers { runs, files } => parsers::compare(&files, runs).map(|()| ExitCode::SUCCESS),
        Command::Worker { job } => jobs::work(&job).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kproxy-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where the report, the plot and the JSON go.
struct Outputs {
    out: PathBuf,
    plot: PathBuf,
    json: PathBuf,
}

/// The userspace comparison's tools.
struct Tools {
    haproxy: PathBuf,
    wrk: PathBuf,
}

/// Root, namespaces, and the binary and work folder as absolute paths.
fn prepare(kproxy: &Path, workdir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    kproxy_sandbox::available().context("the benchmarks need root and network namespaces")?;
    anyhow::ensure!(kproxy.exists(), "{} is missing: cargo build --release -p kproxy-cli", kproxy.display());
    let kproxy = std::fs::canonicalize(kproxy)?;
    std::fs::create_dir_all(workdir)?;
    Ok((kproxy, std::fs::canonicalize(workdir)?))
}

fn run(
    quick: bool,
    kproxy: &Path,
    workdir: &Path,
    source: String,
    tools: &Tools,
    outputs: &Outputs,
) -> anyhow::Result<ExitCode> {
    let (kproxy, workdir) = prepare(kproxy, workdir)?;
    let mut plan = Plan::new(quick);
    if let Some(u) = &mut plan.userspace {
        (u.haproxy, u.wrk) = (tools.haproxy.clone(), tools.wrk.clone());
    }
    let (reps, budget) = if quick { (3, Duration::from_secs(30)) } else { (5, Duration::from_secs(100)) };
    let harness = Harness::new(reps, budget, Duration::from_secs(1800))?;
    let started = Instant::now();
    let mut results = Results {
        quick,
        reps,
        endpoints: plan.endpoints,
        changes_per_run: plan.changes_per_run,
        machine: machine::Machine::read(),
        started: now(),
        source,
        ..Results::default()
    };
    if !quick {
        results.notes.push(
            "Upstream's layout is not loaded at 100k services: its cold load grows super-linearly (see its table), \
             so 100k would take far longer than the whole run."
                .into(),
        );
    } else {
        results.notes.push("--quick: 10k services at most, 3 runs each, upstream's layout at 1k only.".into());
    }
    scenarios::collect(&harness, &plan, &kproxy, &workdir, &mut results);
    if !quick {
        results.ebpf = Some(ebpf_scenarios::collect(&harness, plan.endpoints, tools.wrk.clone(), &results.source));
    }
    results.duration_s = started.elapsed().as_secs_f64();
    write_outputs(&results, &outputs.out, &outputs.plot, &outputs.json)?;
    print_summary(&results);
    Ok(guard(&results))
}

/// `--only PART`: measures that part, replaces it in the last run's JSON
/// (or in an empty run when there is none) and rewrites the report from
/// that.
fn run_only(
    part: Part,
    kproxy: &Path,
    workdir: &Path,
    source: String,
    tools: &Tools,
    outputs: &Outputs,
) -> anyhow::Result<ExitCode> {
    let (kproxy, workdir) = prepare(kproxy, workdir)?;
    let mut fresh = false;
    let mut results = match std::fs::read_to_string(&outputs.json) {
        Ok(text) => serde_json::from_str(&text).with_context(|| format!("parsing {}", outputs.json.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fresh = true;
            eprintln!("==> no {}: the report will have only the {part:?} section", outputs.json.display());
            Results { machine: machine::Machine::read(), started: now(), source: source.clone(), ..Results::default() }
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", outputs.json.display())),
    };
    let harness = Harness::new(5, Duration::from_secs(100), Duration::from_secs(600))?;
    match part {
        Part::Userspace => {
            let plan = userspace::Plan::new(tools.haproxy.clone(), tools.wrk.clone());
            results.userspace = Some(userspace::collect(&harness, &plan, &kproxy, &workdir, &source));
        }
        Part::Iptables => {
            let plan = Plan::new(false);
            let section =
                scenarios::iptables(&harness, &plan.iptables_sizes, plan.endpoints, plan.changes_per_run, &source);
            results.iptables = Some(section);
            let mut notes = Vec::new();
            let n = scenarios::MODE_SERVICES;
            results.modes = scenarios::modes(&harness, &plan, n, &kproxy, &workdir, &mut notes);
            results.notes.retain(|note| !note.contains(" mode at "));
            results.notes.extend(notes);
        }
        Part::Pacing => results.pacing = Some(scenarios::pacing(&harness, &source)),
        Part::Ebpf => {
            let endpoints = scenarios::Plan::new(false).endpoints;
            results.ebpf = Some(ebpf_scenarios::collect(&harness, endpoints, tools.wrk.clone(), &source));
        }
    }
    if fresh && part == Part::Ebpf && outputs.out.exists() {
        // No JSON of the last run to rebuild the other sections from: keep
        // them as the report has them, replacing only this section, its
        // target row and the static tail (how to run, method).
        splice_ebpf(&results, &outputs.out, &outputs.json)?;
        print_summary(&results);
        return Ok(ExitCode::SUCCESS);
    }
    write_outputs(&results, &outputs.out, &outputs.plot, &outputs.json)?;
    print_summary(&results);
    Ok(ExitCode::SUCCESS)
}

/// Rewrites only the ebpf parts of the report at `out`; the section's
/// numbers go to `ebpf.json` beside `json` (not to `json`, which would
/// then hold only this section).
fn splice_ebpf(results: &Results, out: &Path, json: &Path) -> anyhow::Result<()> {
    let old = std::fs::read_to_string(out).with_context(|| format!("reading {}", out.display()))?;
    let new = report::splice_ebpf(&old, results);
    std::fs::write(out, new).with_context(|| format!("writing {}", out.display()))?;
    let side = json.with_file_name("ebpf.json");
    if let Some(dir) = side.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&side, serde_json::to_string_pretty(&results.ebpf)?)
        .with_context(|| format!("writing {}", side.display()))?;
    eprintln!("==> rewrote the ebpf section of {} (numbers in {})", out.display(), side.display());
    Ok(())
}

fn report_again(json: &Path, out: &Path, plot: &Path) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let results: Results = serde_json::from_str(&text).with_context(|| format!("parsing {}", json.display()))?;
    write_outputs(&results, out, plot, json)?;
    print_summary(&results);
    Ok(ExitCode::SUCCESS)
}

fn write_outputs(results: &Results, out: &Path, plot: &Path, json: &Path) -> anyhow::Result<()> {
    for path in [out, plot, json] {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    std::fs::write(plot, plot::svg(results)).with_context(|| format!("writing {}", plot.display()))?;
    let relative = relative_to(plot, out);
    std::fs::write(out, report::markdown(results, &relative)).with_context(|| format!("writing {}", out.display()))?;
    std::fs::write(json, serde_json::to_string_pretty(results)?)
        .with_context(|| format!("writing {}", json.display()))?;
    eprintln!("==> wrote {}, {} and {}", out.display(), plot.display(), json.display());
    Ok(())
}

/// `plot`'s path as a link from the document at `doc`.
fn relative_to(plot: &Path, doc: &Path) -> String {
    let base = doc.parent().unwrap_or(Path::new(""));
    plot.strip_prefix(base).unwrap_or(plot).display().to_string()
}

fn print_summary(results: &Results) {
    println!("kproxy-bench summary ({}):", if results.quick { "quick" } else { "full" });
    let targets = targets::targets(results);
    let width = targets.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for t in targets {
        let verdict = match &t.verdict {
            targets::Verdict::Pass(how) => format!("pass, {how}"),
            targets::Verdict::Miss(how) => format!("MISS, {how}"),
            targets::Verdict::Unknown(why) => format!("not measured: {why}"),
        };
        println!("  {:<width$} {:>22}  {verdict}", t.name, t.measured);
    }
    for note in &results.notes {
        println!("  note: {}", note.lines().next().unwrap_or_default());
    }
}

/// The idle RSS `--quick` allows at 10k services (issue 16's target is 60
/// MiB; the guard leaves room for noise, not for a regression).
const IDLE_LIMIT_MIB: f64 = 90.0;

/// The CI guard of `--quick`: a cold 10k sync over 5 s, a one-service
/// change at 10k over 100 ms, or an idle RSS at 10k over 90 MiB (from
/// manifests or from the API server; medians) fails the run, as does a
/// missing measurement of any of them.
fn guard(results: &Results) -> ExitCode {
    if !results.quick {
        return ExitCode::SUCCESS;
    }
    let failures = guard_failures(results);
    for failure in &failures {
        println!("GUARD: {failure}");
    }
    if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// What the guard refuses, one line each.
fn guard_failures(results: &Results) -> Vec<String> {
    let at_10k = results.sizes.iter().find(|s| s.services == 10_000);
    let median = |s: Option<stats::Summary>| s.map(|s| s.median);
    let time = |t: Option<f64>| t.map_or("not measured".into(), report::duration);
    let mib = |m: Option<f64>| m.map_or("not measured".into(), |m| format!("{m:.0} MiB"));
    let mut failures = Vec::new();
    let cold = median(at_10k.and_then(|s| s.cold));
    if !cold.is_some_and(|c| c <= 5.0) {
        failures.push(format!("cold 10k sync {} (limit 5 s)", time(cold)));
    }
    let change = median(at_10k.and_then(|s| s.change));
    if !change.is_some_and(|c| c <= 0.1) {
        failures.push(format!("one-service change at 10k {} (limit 100 ms)", time(change)));
    }
    let idle = [
        ("manifests", median(results.idle.as_ref().and_then(|i| i.idle_mib))),
        ("the API server", median(results.kube.iter().find(|k| k.services == 10_000).and_then(|k| k.idle_mib))),
    ];
    for (source, rss) in idle {
        if !rss.is_some_and(|m| m <= IDLE_LIMIT_MIB) {
            failures.push(format!("idle RSS at 10k from {source} {} (limit {IDLE_LIMIT_MIB:.0} MiB)", mib(rss)));
        }
    }
    failures
}

/// `2026-11-30 12:00 UTC`, from `date` (one line needs no clock crate).
pub(crate) fn now() -> String {
    let out = std::process::Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default();
    if text.is_empty() { "an unknown date".into() } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{IdleResult, SizeResult};
    use crate::stats::Summary;

    fn quick_run(idle_mib: f64, kube_idle_mib: f64) -> Results {
        let idle = |services, mib: f64| IdleResult { services, idle_mib: Summary::of(&[mib]), ..IdleResult::default() };
        Results {
            quick: true,
            sizes: vec![SizeResult {
                services: 10_000,
                cold: Summary::of(&[0.4]),
                change: Summary::of(&[0.016]),
                ..SizeResult::default()
            }],
            idle: Some(idle(10_000, idle_mib)),
            kube: vec![idle(10_000, kube_idle_mib)],
            ..Results::default()
        }
    }

    #[test]
    fn the_quick_guard_passes_a_run_within_its_limits() {
        assert_eq!(guard_failures(&quick_run(58.0, 61.0)), Vec::<String>::new());
    }

    #[test]
    fn the_quick_guard_refuses_idle_memory_over_90_mib_from_either_source() {
        assert_eq!(guard_failures(&quick_run(128.0, 61.0)), ["idle RSS at 10k from manifests 128 MiB (limit 90 MiB)"]);
        assert_eq!(
            guard_failures(&quick_run(58.0, 118.0)),
            ["idle RSS at 10k from the API server 118 MiB (limit 90 MiB)"]
        );
    }

    #[test]
    fn the_quick_guard_refuses_a_missing_measurement() {
        let mut run = quick_run(58.0, 61.0);
        run.kube.clear();
        assert_eq!(guard_failures(&run), ["idle RSS at 10k from the API server not measured (limit 90 MiB)"]);
    }
}
