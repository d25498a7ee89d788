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
        /// takes over 5 s or a one-service change at 10k over 100 ms (medians).
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
        dir: PathBuf,
    },
    /// Time candidate YAML parsers and kproxy's manifest reading on the
    /// same files (multi-document YAML, or a JSON List): medians, Markdown.
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
        Command::Manifests { services, endpoints, dir } => {
            let spec = workload::Spec::new(services, endpoints);
            spec.check().and_then(|()| spec.write_manifests(&dir)).map(|()| ExitCode::SUCCESS)
        }
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
    let mut results = match std::fs::read_to_string(&outputs.json) {
        Ok(text) => serde_json::from_str(&text).with_context(|| format!("parsing {}", outputs.json.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
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
        }
        Part::Pacing => results.pacing = Some(scenarios::pacing(&harness, &source)),
    }
    write_outputs(&results, &outputs.out, &outputs.plot, &outputs.json)?;
    print_summary(&results);
    Ok(ExitCode::SUCCESS)
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
    for t in targets::targets(results) {
        let verdict = match &t.verdict {
            targets::Verdict::Pass(how) => format!("pass, {how}"),
            targets::Verdict::Miss(how) => format!("MISS, {how}"),
            targets::Verdict::Unknown(why) => format!("not measured: {why}"),
        };
        println!("  {:<62} {:>22}  {verdict}", t.name, t.measured);
    }
    for note in &results.notes {
        println!("  note: {}", note.lines().next().unwrap_or_default());
    }
}

/// The CI guard of `--quick`: a cold 10k sync over 5 s or a one-service
/// change at 10k over 100 ms (medians) fails the run, as does a missing
/// measurement of either.
fn guard(results: &Results) -> ExitCode {
    if !results.quick {
        return ExitCode::SUCCESS;
    }
    let at_10k = results.sizes.iter().find(|s| s.services == 10_000);
    let cold = at_10k.and_then(|s| s.cold).map(|s| s.median);
    let change = at_10k.and_then(|s| s.change).map(|s| s.median);
    let mut failed = false;
    match cold {
        Some(c) if c <= 5.0 => {}
        other => {
            println!("GUARD: cold 10k sync {} (limit 5 s)", other.map_or("not measured".into(), report::duration));
            failed = true;
        }
    }
    match change {
        Some(c) if c <= 0.1 => {}
        other => {
            println!(
                "GUARD: one-service change at 10k {} (limit 100 ms)",
                other.map_or("not measured".into(), report::duration)
            );
            failed = true;
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// `2026-11-30 12:00 UTC`, from `date` (one line needs no clock crate).
pub(crate) fn now() -> String {
    let out = std::process::Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default();
    if text.is_empty() { "an unknown date".into() } else { text }
}
