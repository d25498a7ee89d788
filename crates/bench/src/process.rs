//! The real `kproxy` binary, started as this worker's only child inside the
//! worker's namespace: its wall time, its own peak RSS (`VmHWM`, sampled
//! every 10 ms until it exits) and `ru_maxrss` of the reaped child.
//!
//! The worker is kproxy's parent, so it may wait for it and signal it by
//! PID: until the worker reaps it, the PID cannot belong to anyone else.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::resource::{UsageWho, getrusage};
use serde::{Deserialize, Serialize};

use crate::jobs::ProcessStats;
use crate::workload::{CLUSTER_CIDR, NODE};

/// How often the child's memory and sync state are read.
const POLL: Duration = Duration::from_millis(10);
/// How long the idle measurement waits after the first sync.
const SETTLE: Duration = Duration::from_secs(1);
/// kproxy's default metrics address (inside the worker's namespace).
const METRICS: &str = "127.0.0.1:10249";

/// The mode the real binary runs in (and, for the iptables mode, which
/// tools it uses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunMode {
    #[default]
    Nftables,
    IptablesLegacy,
    IptablesNft,
}

impl RunMode {
    pub const ALL: [RunMode; 3] = [RunMode::Nftables, RunMode::IptablesLegacy, RunMode::IptablesNft];

    pub fn as_str(self) -> &'static str {
        match self {
            RunMode::Nftables => "nftables",
            RunMode::IptablesLegacy => "iptables (legacy)",
            RunMode::IptablesNft => "iptables (nft)",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            RunMode::Nftables => &["--proxy-mode", "nftables"],
            RunMode::IptablesLegacy => &["--proxy-mode", "iptables", "--iptables-backend", "legacy"],
            RunMode::IptablesNft => &["--proxy-mode", "iptables", "--iptables-backend", "nft"],
        }
    }
}

/// Runs kproxy on `manifests`: `--once` to its exit, or (`idle`) until its
/// first sync is done, then a second more, then kills it.
pub fn measure(binary: &Path, manifests: &Path, idle: bool, timeout_s: f64) -> anyhow::Result<ProcessStats> {
    let source = [OsStr::new("--manifests"), manifests.as_os_str()];
    measure_with(binary, &source, RunMode::Nftables, &manifests.with_extension("log"), idle, timeout_s)
}

/// The same, reading the objects from wherever `source` (arguments) says,
/// in `mode`; kproxy's log goes to `log_path`.
pub fn measure_with(
    binary: &Path,
    source: &[&OsStr],
    mode: RunMode,
    log_path: &Path,
    idle: bool,
    timeout_s: f64,
) -> anyhow::Result<ProcessStats> {
    let log = std::fs::File::create(log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let mut command = Command::new(binary);
    command
        .arg("run")
        .args(source)
        .args(mode.args())
        .args(["--hostname-override", NODE, "--cluster-cidr", CLUSTER_CIDR])
        .env("RUST_LOG", log_level())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    if !idle {
        command.arg("--once");
    }
    let start = Instant::now();
    let mut child = command.spawn().with_context(|| format!("starting {}", binary.display()))?;
    let deadline = start + Duration::from_secs_f64(timeout_s);
    let mut stats = ProcessStats::default();
    let result = watch(&mut child, idle, deadline, start, &mut stats);
    // Ends the child whatever happened above (a no-op once it exited).
    let _ = child.kill();
    let status = child.wait().context("reaping kproxy")?;
    if !idle {
        stats.success = status.success();
    }
    stats.children_peak_kib = u64::try_from(getrusage(UsageWho::RUSAGE_CHILDREN)?.max_rss()).unwrap_or(0);
    stats.log_tail = tail(&std::fs::read_to_string(log_path).unwrap_or_default(), 8);
    result.map(|()| stats)
}

fn watch(
    child: &mut Child,
    idle: bool,
    deadline: Instant,
    start: Instant,
    stats: &mut ProcessStats,
) -> anyhow::Result<()> {
    let pid = child.id();
    for tick in 0u64.. {
        if let Some(kib) = status_kib(pid, "VmHWM:") {
            stats.peak_kib = stats.peak_kib.max(kib);
        }
        if child.try_wait()?.is_some() {
            stats.wall_s = start.elapsed().as_secs_f64();
            anyhow::ensure!(!idle, "kproxy exited before its first sync was done");
            return Ok(());
        }
        // Asking /metrics costs CPU: every 100 ms only.
        if idle && tick.is_multiple_of(10) && synced() {
            stats.wall_s = start.elapsed().as_secs_f64();
            let (cpu_before, at) = (cpu_seconds(pid), Instant::now());
            std::thread::sleep(SETTLE);
            stats.idle_kib = status_kib(pid, "VmRSS:");
            if let (Some(a), Some(b)) = (cpu_before, cpu_seconds(pid)) {
                stats.idle_cpu = Some((b - a) / at.elapsed().as_secs_f64());
            }
            stats.peak_kib = stats.peak_kib.max(status_kib(pid, "VmHWM:").unwrap_or(0));
            stats.state = metrics().map(|body| state_series(&body)).unwrap_or_default();
            stats.success = stats.idle_kib.is_some();
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "kproxy did not finish in time");
        std::thread::sleep(POLL);
    }
    unreachable!("the loop only ends by returning")
}

/// `kproxy state --manifests DIR` to its exit (its table goes to
/// /dev/null): the time to read, convert and plan the folder, and the
/// child's peak RSS (`ru_maxrss`: the worker runs one child).
pub fn state(binary: &Path, dir: &Path, timeout_s: f64) -> anyhow::Result<ProcessStats> {
    let start = Instant::now();
    let mut child = Command::new(binary)
        .args(["state", "--manifests"])
        .arg(dir)
        .args(["--hostname-override", NODE, "--cluster-cidr", CLUSTER_CIDR])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let deadline = start + Duration::from_secs_f64(timeout_s);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            child.wait().context("reaping kproxy")?;
            anyhow::bail!("kproxy state did not finish in {timeout_s} s");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let wall_s = start.elapsed().as_secs_f64();
    let mut errors = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut errors);
    }
    Ok(ProcessStats {
        wall_s,
        peak_kib: u64::try_from(getrusage(UsageWho::RUSAGE_CHILDREN)?.max_rss()).unwrap_or(0),
        success: status.success(),
        log_tail: tail(&errors, 8),
        ..ProcessStats::default()
    })
}

/// kproxy's log level in a measurement: warnings only, unless
/// `KPROXY_BENCH_LOG` asks for more (to see where a slow run spends its time).
fn log_level() -> String {
    std::env::var("KPROXY_BENCH_LOG").unwrap_or_else(|_| "warn".into())
}

/// A `kB` line of `/proc/<pid>/status`.
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// User plus system CPU time of `pid` so far (`/proc/<pid>/stat`, in
/// USER_HZ ticks, 100 per second on Linux).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it do not.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// kproxy's metrics count an applied sync: the runner observes the sync
/// duration histogram only for syncs that applied. (Not `nft list tables`:
/// nft 1.0.6 reads every set's elements for that, which takes tens of
/// seconds at 100k services and would count as kproxy's time.)
fn synced() -> bool {
    sync_count().is_some_and(|n| n >= 1.0)
}

fn sync_count() -> Option<f64> {
    let body = metrics()?;
    let line = body.lines().find(|l| l.starts_with("kubeproxy_sync_proxy_rules_duration_seconds_count"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// kproxy's `/metrics` text.
fn metrics() -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&METRICS.parse().ok()?, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    Some(body)
}

/// `kproxy_state_bytes{part="P"} V` -> `bytes/P`, and
/// `kproxy_state_objects{kind="K"} V` -> `objects/K`.
pub fn state_series(body: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for (metric, what) in [("kproxy_state_bytes{part=\"", "bytes"), ("kproxy_state_objects{kind=\"", "objects")] {
        for line in body.lines() {
            let Some(rest) = line.strip_prefix(metric) else { continue };
            let Some((label, value)) = rest.split_once("\"}") else { continue };
            if let Ok(value) = value.trim().parse::<f64>() {
                out.insert(format!("{what}/{label}"), value);
            }
        }
    }
    out
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_series_are_read_by_part_and_kind() {
        let body = "# HELP kproxy_state_bytes x\n\
                    kproxy_state_bytes{part=\"endpoints\"} 1000\n\
                    kproxy_state_bytes{part=\"services\"} 250.5\n\
                    kproxy_state_objects{kind=\"endpoints\"} 10\n\
                    kproxy_state_objectsx{kind=\"no\"} 1\n";
        let series = state_series(body);
        assert_eq!(series.len(), 3, "{series:?}");
        assert_eq!(series["bytes/endpoints"], 1000.0);
        assert_eq!(series["bytes/services"], 250.5);
        assert_eq!(series["objects/endpoints"], 10.0);
    }
}
