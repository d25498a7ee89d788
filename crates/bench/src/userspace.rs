//! kproxy's userspace mode against HAProxy, in front of the same backends
//! on the loopback of one `kp-` network namespace per run.
//!
//! A run (one worker, [`measure`]): two backends ([`crate::backend`]);
//! kproxy and HAProxy started, each warmed up with 1 s of wrk; then wrk
//! with keep-alive to the backend directly, to kproxy, to HAProxy (which
//! proxy goes first alternates between runs), the same with `Connection:
//! close`; then for each proxy
//! a fresh process, its `VmRSS` and open descriptors, 10,000 client
//! connections opened through it (one request/reply each, then idle), and
//! its `VmRSS` and descriptors again. [`collect`] repeats runs and folds
//! them into a [`UserspaceResult`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use serde::{Deserialize, Serialize};

use crate::backend::{self, Backends};
use crate::harness::Harness;
use crate::jobs::{Job, Outcome};
use crate::process::status_kib;
use crate::proxies::{self, Proxy, Setup};
use crate::results::{IdleConnectionsResult, LoadResult, UserspaceResult};
use crate::stats::Summary;
use crate::wrk;

/// The backends, inside the worker's namespace.
pub const BACKENDS: [&str; 2] = ["127.0.0.11:9001", "127.0.0.12:9001"];
/// Between starting something and reading a proxy's memory.
const SETTLE: Duration = Duration::from_secs(1);
/// Descriptors kept free in each process beside two per idle connection
/// (listeners, epoll, pipes, logs, the metrics server).
const SPARE_FDS: u64 = 200;
/// Client connections being opened at once for the idle measurement.
const OPENING: usize = 200;

/// What the harness asks of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    pub kproxy: PathBuf,
    pub haproxy: PathBuf,
    pub wrk: PathBuf,
    /// Config files, the Lua script and the proxies' logs.
    pub dir: PathBuf,
    /// Each wrk measurement's duration.
    pub seconds: f64,
    pub warmup_s: f64,
    pub connections: usize,
    pub wrk_threads: usize,
    /// Client connections held open for the memory measurement.
    pub idle: usize,
    pub haproxy_first: bool,
}

/// One wrk measurement through one proxy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadRun {
    pub proxy: Proxy,
    /// `Connection: close`: a new TCP connection per request.
    pub close: bool,
    pub rps: f64,
    pub requests: u64,
    pub errors: u64,
    pub p50_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
    pub max_s: f64,
}

/// One proxy's memory before and with the idle connections.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IdleRun {
    pub proxy: Proxy,
    pub connections: usize,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub fds_before: usize,
    pub fds_after: usize,
    /// Connections the backends had open meanwhile (the proxy's side).
    pub backend_open: usize,
}

impl IdleRun {
    pub fn kib_per_connection(&self) -> f64 {
        (self.rss_after_kib as f64 - self.rss_before_kib as f64) / self.connections.max(1) as f64
    }
}

/// A worker's answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UserspaceRun {
    /// Cores this worker may use: kproxy's tokio workers, HAProxy's `nbthread`.
    pub threads: usize,
    /// RLIMIT_NOFILE of the worker and the proxies.
    pub nofile: u64,
    /// Idle connections opened through each proxy (fewer than asked when
    /// `nofile` cannot hold two descriptors for each).
    pub idle_connections: usize,
    pub loads: Vec<LoadRun>,
    pub idle: Vec<IdleRun>,
}

/// Runs one comparison (inside the worker's namespace).
pub fn measure(p: &Params) -> anyhow::Result<UserspaceRun> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    // Each proxy holds two descriptors per connection, as does this
    // process (the client and the backend ends): without the right to
    // raise the hard limit, fewer connections than asked fit.
    let nofile = raise_nofile((p.idle as u64 * 8).max(65_536))?;
    let idle = p.idle.min(usize::try_from(nofile.saturating_sub(SPARE_FDS) / 2).unwrap_or(p.idle));
    let addrs: Vec<SocketAddr> = BACKENDS.iter().map(|a| a.parse()).collect::<Result<_, _>>()?;
    let backends = Backends::start(&addrs, threads)?;
    std::fs::create_dir_all(&p.dir).with_context(|| format!("creating {}", p.dir.display()))?;
    let script = p.dir.join("report.lua");
    std::fs::write(&script, wrk::SCRIPT)?;
    let setup = Setup {
        dir: p.dir.clone(),
        kproxy: p.kproxy.clone(),
        haproxy: p.haproxy.clone(),
        backends: addrs,
        threads,
        max_connections: idle + 50,
    };
    let order = if p.haproxy_first { [Proxy::Haproxy, Proxy::Kproxy] } else { [Proxy::Kproxy, Proxy::Haproxy] };
    let mut run = UserspaceRun { threads, nofile, idle_connections: idle, ..UserspaceRun::default() };
    let load =
        |seconds: f64, close: bool| wrk::Load { threads: p.wrk_threads, connections: p.connections, seconds, close };
    // All three up at once, each measured in turn per load: a proxy and
    // its rival are measured seconds apart (the idle one costs nothing).
    let mut running = Vec::new();
    for proxy in [Proxy::Direct].into_iter().chain(order) {
        let r = proxies::start(proxy, &setup)?;
        let url = format!("http://{}/", r.frontend);
        wrk::run(&p.wrk, &script, &url, load(p.warmup_s, false))
            .with_context(|| format!("{}: warm-up", proxy.name()))?;
        running.push((proxy, url, r));
    }
    for close in [false, true] {
        for (proxy, url, _) in &running {
            let what = format!("{}, {}", proxy.name(), if close { "Connection: close" } else { "keep-alive" });
            let r = wrk::run(&p.wrk, &script, url, load(p.seconds, close)).with_context(|| what.clone())?;
            eprintln!(
                "==> {what}: {:.0} requests/s, p50 {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs, {} errors",
                r.rps(),
                r.p50_s * 1e6,
                r.p99_s * 1e6,
                r.p999_s * 1e6,
                r.errors
            );
            run.loads.push(LoadRun {
                proxy: *proxy,
                close,
                rps: r.rps(),
                requests: r.requests,
                errors: r.errors,
                p50_s: r.p50_s,
                p99_s: r.p99_s,
                p999_s: r.p999_s,
                max_s: r.max_s,
            });
        }
    }
    drop(running);
    for proxy in order {
        let idle = idle_connections(proxy, &setup, &backends, idle)
            .with_context(|| format!("{} with {idle} idle connections", proxy.name()))?;
        eprintln!(
            "==> {}: {} idle connections: VmRSS {} -> {} KiB ({:.2} KiB each), {} -> {} descriptors",
            proxy.name(),
            idle.connections,
            idle.rss_before_kib,
            idle.rss_after_kib,
            idle.kib_per_connection(),
            idle.fds_before,
            idle.fds_after
        );
        run.idle.push(idle);
    }
    Ok(run)
}

/// A fresh `proxy`, `n` connections opened through it and left idle.
fn idle_connections(proxy: Proxy, setup: &Setup, backends: &Backends, n: usize) -> anyhow::Result<IdleRun> {
    let running = proxies::start(proxy, setup)?;
    let pid = running.pid().context("the direct path has no process")?;
    std::thread::sleep(SETTLE);
    let rss_before_kib = status_kib(pid, "VmRSS:").context("reading the proxy's VmRSS")?;
    let fds_before = open_fds(pid)?;
    let frontend = running.frontend;
    let streams = backends.block_on(open(frontend, n))?;
    std::thread::sleep(SETTLE);
    let rss_after_kib = status_kib(pid, "VmRSS:").context("reading the proxy's VmRSS")?;
    let fds_after = open_fds(pid)?;
    let backend_open = backends.open();
    backends.block_on(async move { drop(streams) });
    drop(running);
    // Let the backends see the closes before the next proxy starts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while backends.open() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(IdleRun { proxy, connections: n, rss_before_kib, rss_after_kib, fds_before, fds_after, backend_open })
}

/// `n` connections to `addr`, each with one request/reply done, at most
/// [`OPENING`] being opened at a time; every one must succeed.
async fn open(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<tokio::net::TcpStream>> {
    let limit = Arc::new(tokio::sync::Semaphore::new(OPENING));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let permit = limit.clone().acquire_owned().await?;
        set.spawn(async move {
            let _permit = permit;
            let step = Duration::from_secs(5);
            let mut stream = tokio::time::timeout(step, tokio::net::TcpStream::connect(addr)).await??;
            tokio::time::timeout(step, backend::exchange(&mut stream)).await??;
            anyhow::Ok(stream)
        });
    }
    let (mut streams, mut failed, mut first_error) = (Vec::with_capacity(n), 0, None);
    while let Some(joined) = set.join_next().await {
        match joined.map_err(anyhow::Error::from).and_then(|r| r) {
            Ok(stream) => streams.push(stream),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        None => Ok(streams),
        Some(e) => Err(e.context(format!("{failed} of {n} connections failed"))),
    }
}

fn open_fds(pid: u32) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd")).with_context(|| format!("listing /proc/{pid}/fd"))?.count())
}

/// RLIMIT_NOFILE of this process (and so of its children) to at least
/// `want`, raising the hard limit when allowed (CAP_SYS_RESOURCE), else to
/// the hard limit; the soft limit it ends at.
fn raise_nofile(want: u64) -> anyhow::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= want {
        return Ok(soft);
    }
    if setrlimit(Resource::RLIMIT_NOFILE, want, hard.max(want)).is_ok() {
        return Ok(want);
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    Ok(hard)
}

/// How the harness runs the comparison.
#[derive(Clone, Debug)]
pub struct Plan {
    pub haproxy: PathBuf,
    pub wrk: PathBuf,
    pub seconds: f64,
    pub warmup_s: f64,
    pub connections: usize,
    pub wrk_threads: usize,
    pub idle: usize,
    pub min_runs: usize,
    /// All runs together (a run takes about 45 s).
    pub budget: Duration,
}

impl Plan {
    pub fn new(haproxy: PathBuf, wrk: PathBuf) -> Plan {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Plan {
            haproxy,
            wrk,
            seconds: 5.0,
            warmup_s: 1.0,
            connections: 64,
            wrk_threads: cores,
            idle: 10_000,
            min_runs: 3,
            budget: Duration::from_secs(240),
        }
    }
}

/// Up to `harness.reps` runs (at least `plan.min_runs`), folded; whatever
/// failed is in the result's notes.
pub fn collect(harness: &Harness, plan: &Plan, kproxy: &Path, workdir: &Path, source: &str) -> UserspaceResult {
    let started = Instant::now();
    let mut result = UserspaceResult {
        started: crate::now(),
        source: source.to_owned(),
        backends: BACKENDS.len(),
        wrk_threads: plan.wrk_threads,
        connections: plan.connections,
        seconds: plan.seconds,
        idle_connections: plan.idle,
        ..UserspaceResult::default()
    };
    let tools = resolve(&plan.haproxy).and_then(|h| Ok((h, resolve(&plan.wrk)?)));
    let (haproxy, wrk) = match tools {
        Ok(tools) => tools,
        Err(e) => {
            result.notes.push(format!("not measured: {e:#} (scripts/bench installs haproxy and wrk with apt)"));
            return result;
        }
    };
    result.haproxy = version(&haproxy, "-v");
    result.wrk = version(&wrk, "--version");
    let harness = Harness { cell_budget: plan.budget, ..harness.clone() };
    let mut rep = 0;
    let runs = harness.repeat("userspace vs HAProxy", plan.min_runs, || {
        rep += 1;
        let job = Job::Userspace(Params {
            kproxy: kproxy.to_owned(),
            haproxy: haproxy.clone(),
            wrk: wrk.clone(),
            dir: workdir.join("userspace"),
            seconds: plan.seconds,
            warmup_s: plan.warmup_s,
            connections: plan.connections,
            wrk_threads: plan.wrk_threads,
            idle: plan.idle,
            haproxy_first: rep % 2 == 0,
        });
        match harness.run(&job)? {
            Outcome::Userspace(run) => Ok(run),
            other => anyhow::bail!("unexpected answer {other:?}"),
        }
    });
    match runs {
        Ok(runs) => fold(&runs, &mut result),
        Err(e) => result.notes.push(format!("the comparison failed: {e:#}")),
    }
    result.duration_s = started.elapsed().as_secs_f64();
    result
}

/// Every run's numbers into summaries: per proxy over runs, and kproxy /
/// HAProxy paired within each run.
pub fn fold(runs: &[UserspaceRun], result: &mut UserspaceResult) {
    result.threads = runs.first().map_or(0, |r| r.threads);
    if let Some(r) =
        runs.iter().min_by_key(|r| r.idle_connections).filter(|r| r.idle_connections < result.idle_connections)
    {
        result.notes.push(format!(
            "{} idle connections per proxy, not {}: RLIMIT_NOFILE is {} and could not be raised (no CAP_SYS_RESOURCE), \
             and each proxy, like the harness, holds two descriptors per connection.",
            r.idle_connections, result.idle_connections, r.nofile
        ));
        result.idle_connections = r.idle_connections;
    }
    for close in [false, true] {
        let rows: Vec<LoadResult> =
            [Proxy::Kproxy, Proxy::Haproxy, Proxy::Direct].into_iter().map(|p| load_result(runs, p, close)).collect();
        let rps = paired(runs, |r, p| load_of(r, p, close).map(|l| l.rps));
        let p99 = paired(runs, |r, p| load_of(r, p, close).map(|l| l.p99_s));
        if close {
            (result.close, result.close_rps_ratio, result.close_p99_ratio) = (rows, rps, p99);
        } else {
            (result.keep_alive, result.keep_alive_rps_ratio, result.keep_alive_p99_ratio) = (rows, rps, p99);
        }
    }
    result.idle = [Proxy::Kproxy, Proxy::Haproxy]
        .into_iter()
        .map(|proxy| {
            let of: Vec<&IdleRun> = runs.iter().flat_map(|r| &r.idle).filter(|i| i.proxy == proxy).collect();
            IdleConnectionsResult {
                proxy,
                before_mib: summary(&of, |i| i.rss_before_kib as f64 / 1024.0),
                after_mib: summary(&of, |i| i.rss_after_kib as f64 / 1024.0),
                per_connection_kib: summary(&of, IdleRun::kib_per_connection),
                fds_added: summary(&of, |i| i.fds_after as f64 - i.fds_before as f64),
                backend_open: summary(&of, |i| i.backend_open as f64),
            }
        })
        .collect();
    result.idle_ratio = paired(runs, |r, p| r.idle.iter().find(|i| i.proxy == p).map(IdleRun::kib_per_connection));
    let errors: u64 = runs.iter().flat_map(|r| &r.loads).map(|l| l.errors).sum();
    if errors > 0 {
        result.notes.push(format!("wrk counted {errors} errors over all runs (see the errors column)."));
    }
}

fn load_of(run: &UserspaceRun, proxy: Proxy, close: bool) -> Option<&LoadRun> {
    run.loads.iter().find(|l| l.proxy == proxy && l.close == close)
}

fn load_result(runs: &[UserspaceRun], proxy: Proxy, close: bool) -> LoadResult {
    let of: Vec<&LoadRun> = runs.iter().filter_map(|r| load_of(r, proxy, close)).collect();
    LoadResult {
        proxy,
        rps: summary(&of, |l| l.rps),
        p50: summary(&of, |l| l.p50_s),
        p99: summary(&of, |l| l.p99_s),
        p999: summary(&of, |l| l.p999_s),
        max: summary(&of, |l| l.max_s),
        requests: of.iter().map(|l| l.requests).sum(),
        errors: of.iter().map(|l| l.errors).sum(),
    }
}

fn summary<T>(items: &[&T], f: impl Fn(&T) -> f64) -> Option<Summary> {
    Summary::of(&items.iter().map(|i| f(i)).collect::<Vec<_>>())
}

/// kproxy's value over HAProxy's within each run.
fn paired(runs: &[UserspaceRun], f: impl Fn(&UserspaceRun, Proxy) -> Option<f64>) -> Option<Summary> {
    let ratios: Vec<f64> = runs
        .iter()
        .filter_map(|r| Some((f(r, Proxy::Kproxy)?, f(r, Proxy::Haproxy)?)))
        .filter(|(_, h)| *h > 0.0)
        .map(|(k, h)| k / h)
        .collect();
    Summary::of(&ratios)
}

/// `name` as a path: as given when it has a slash, else found on `PATH`.
pub(crate) fn resolve(name: &Path) -> anyhow::Result<PathBuf> {
    if name.components().count() > 1 {
        anyhow::ensure!(name.exists(), "{} is missing", name.display());
        return Ok(std::fs::canonicalize(name)?);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .with_context(|| format!("{} is not on PATH", name.display()))
}

/// The first line `binary flag` prints (wrk prints its version and exits 1).
pub(crate) fn version(binary: &Path, flag: &str) -> String {
    let out = std::process::Command::new(binary).arg(flag).output();
    let text = out.map(|o| [o.stdout, o.stderr].concat()).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let line = text.lines().next().unwrap_or("unknown");
    // HAProxy's line ends with " - https://haproxy.org/", wrk's with its copyright.
    let line = line.split(" - ").next().unwrap_or(line);
    line.split(" Copyright").next().unwrap_or(line).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(proxy: Proxy, close: bool, rps: f64, p99_s: f64) -> LoadRun {
        LoadRun {
            proxy,
            close,
            rps,
            requests: 1,
            errors: 0,
            p50_s: p99_s / 2.0,
            p99_s,
            p999_s: p99_s * 2.0,
            max_s: 1.0,
        }
    }

    fn idle(proxy: Proxy, after: u64) -> IdleRun {
        IdleRun {
            proxy,
            connections: 1000,
            rss_before_kib: 10_000,
            rss_after_kib: after,
            fds_before: 10,
            fds_after: 2010,
            backend_open: 1000,
        }
    }

    #[test]
    fn folds_runs_into_medians_and_paired_ratios() {
        let run = |k: f64, h: f64| UserspaceRun {
            threads: 2,
            nofile: 65_536,
            idle_connections: 1000,
            loads: vec![
                load(Proxy::Kproxy, false, k, 0.001),
                load(Proxy::Haproxy, false, h, 0.002),
                load(Proxy::Kproxy, true, k / 4.0, 0.004),
                load(Proxy::Haproxy, true, h / 4.0, 0.002),
            ],
            idle: vec![idle(Proxy::Kproxy, 30_000), idle(Proxy::Haproxy, 15_000)],
        };
        let runs = [run(100.0, 100.0), run(90.0, 100.0), run(120.0, 100.0)];
        let mut r = UserspaceResult { idle_connections: 1000, ..UserspaceResult::default() };
        fold(&runs, &mut r);
        assert_eq!(r.threads, 2);
        assert_eq!(r.keep_alive[0].proxy, Proxy::Kproxy);
        assert_eq!(r.keep_alive[0].rps.map(|s| (s.median, s.min, s.max, s.n)), Some((100.0, 90.0, 120.0, 3)));
        assert_eq!(r.keep_alive_rps_ratio.map(|s| (s.median, s.min, s.max)), Some((1.0, 0.9, 1.2)));
        assert_eq!(r.close_p99_ratio.map(|s| s.median), Some(2.0));
        assert_eq!(r.keep_alive[2].rps, None, "no direct runs");
        assert_eq!(r.idle[0].per_connection_kib.map(|s| s.median), Some(20.0));
        assert_eq!(r.idle[1].fds_added.map(|s| s.median), Some(2000.0));
        assert_eq!(r.idle_ratio.map(|s| s.median), Some(4.0));
        assert!(r.notes.is_empty());

        // A descriptor limit that holds fewer connections than asked is said.
        let mut fewer = runs.to_vec();
        fewer[1].idle_connections = 900;
        fewer[1].nofile = 2000;
        let mut r = UserspaceResult { idle_connections: 1000, ..UserspaceResult::default() };
        fold(&fewer, &mut r);
        assert_eq!(r.idle_connections, 900);
        assert!(
            r.notes[0].starts_with("900 idle connections per proxy, not 1000: RLIMIT_NOFILE is 2000"),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn tools_resolve_on_path_or_as_given() {
        assert!(resolve(Path::new("sh")).is_ok());
        assert!(resolve(Path::new("surely-not-a-tool-kproxy")).is_err());
        assert!(resolve(Path::new("/surely/not/here")).is_err());
    }
}
