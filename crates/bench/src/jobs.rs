//! Jobs: one measurement run, done by a worker process (`kproxy-bench worker
//! JOB`) that the harness starts inside a fresh network namespace.
//!
//! The whole worker process lives in the namespace (it joins it before
//! exec), so whatever the dataplane does - `nft` or `iptables-restore`
//! children, netlink sockets on any thread - lands there. A worker refuses to run in
//! the namespace the harness started in ([`HOST_NETNS_ENV`]).

use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::iptables::{IptablesBackend, PayloadShape};
use crate::process::RunMode;
use crate::workload::Spec;
use crate::{ebpf, floor, iptables, kube, latency, pacing, process, sync, userspace};

/// Set by the harness to the `dev:inode` of its own network namespace.
pub const HOST_NETNS_ENV: &str = "KPROXY_BENCH_HOST_NETNS";

/// What a worker measures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Job {
    /// Cold full sync, then `changes` one-service changes, through
    /// `kproxy_dataplane::Nftables` (the `Dataplane` trait).
    Dataplane {
        services: usize,
        endpoints: usize,
        changes: usize,
        pod: Option<Ipv4Addr>,
        /// Pass the cold sync's stale UDP frontends on (what kproxy does);
        /// off, the sync does only the rules.
        udp_cleanup: bool,
    },
    /// The same, as kproxy's rendered plans loaded with `nft -f`.
    Text { services: usize, endpoints: usize, changes: usize },
    /// The same workload in upstream kube-proxy's layout, with `nft -f`.
    Upstream { services: usize, endpoints: usize, changes: usize },
    /// The same through `kproxy_dataplane::Ebpf`, on a bpffs and a cgroup
    /// the worker creates and removes.
    EbpfSync { services: usize, endpoints: usize, changes: usize },
    /// One sync of the ebpf mode (first and last service to `pod`), left
    /// attached to `cgroup` and pinned under `pin_dir` (the harness's).
    EbpfProgram { services: usize, endpoints: usize, pod: Ipv4Addr, cgroup: PathBuf, pin_dir: PathBuf },
    /// An HTTP server on `addr` until stdin closes (the traffic runs' backend).
    Serve { addr: std::net::SocketAddr, threads: usize },
    /// The same through `kproxy_dataplane::Iptables` on one backend.
    Iptables { backend: IptablesBackend, services: usize, endpoints: usize, changes: usize },
    /// A real runner fed `rate` endpoint changes per second.
    Latency { services: usize, endpoints: usize, rate: u32, seconds: f64, min_sync_ms: u64 },
    /// A real runner fed rounds of changes shortly after one another.
    Pacing { services: usize, endpoints: usize, params: pacing::Params },
    /// One-element transactions on a tiny table: the kernel's floor.
    Floor { samples: usize },
    /// The real `kproxy` binary on a manifest folder: `run --once`, or
    /// `run` until its first sync is done (`idle`).
    Kproxy { binary: PathBuf, manifests: PathBuf, idle: bool, timeout_s: f64 },
    /// The real `kproxy` binary reading the workload from a fake API server
    /// in the worker, until its first sync is done.
    Kube {
        binary: PathBuf,
        services: usize,
        endpoints: usize,
        #[serde(default)]
        mode: RunMode,
        workdir: PathBuf,
        timeout_s: f64,
    },
    /// kproxy's userspace mode against HAProxy on this namespace's loopback.
    Userspace(userspace::Params),
    /// `kproxy state --manifests DIR` on a folder holding the workload in
    /// one file: how fast manifests are read.
    State { binary: PathBuf, dir: PathBuf, timeout_s: f64 },
}

impl Job {
    pub fn label(&self) -> String {
        match self {
            Job::Dataplane { services, udp_cleanup, pod, .. } => {
                let what = if pod.is_some() { "program" } else { "dataplane" };
                format!("{what} {services} services{}", if *udp_cleanup { "" } else { " (no UDP cleanup)" })
            }
            Job::Text { services, .. } => format!("nft -f kproxy text, {services} services"),
            Job::Upstream { services, .. } => format!("nft -f upstream layout, {services} services"),
            Job::EbpfSync { services, .. } => format!("ebpf dataplane {services} services"),
            Job::EbpfProgram { services, .. } => format!("ebpf program {services} services"),
            Job::Serve { addr, .. } => format!("server on {addr}"),
            Job::Iptables { backend, services, .. } => format!("iptables ({}), {services} services", backend.as_str()),
            Job::Latency { services, rate, .. } => format!("latency, {services} services, {rate} changes/s"),
            Job::Pacing { params: p, .. } => {
                format!("pacing, burst {}, {} changes {} ms apart", p.burst, p.changes, p.gap_ms)
            }
            Job::Kproxy { idle, .. } => format!("kproxy run{}", if *idle { " (idle)" } else { " --once" }),
            Job::Floor { .. } => "one-element transactions".into(),
            Job::Kube { services, mode, .. } => {
                format!("kproxy run from the API server, {services} services, {} mode", mode.as_str())
            }
            Job::State { dir, .. } => format!("kproxy state --manifests {}", dir.display()),
            Job::Userspace(p) => {
                format!("userspace vs HAProxy ({} first)", if p.haproxy_first { "HAProxy" } else { "kproxy" })
            }
        }
    }
}

/// Times of one cold sync and the one-service changes after it, seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncTimes {
    /// Objects -> state (not part of any sync time).
    pub build_s: f64,
    pub cold_s: f64,
    pub changes_s: Vec<f64>,
    /// For `nft -f` jobs: the cold sync's stages.
    pub plan_s: Option<f64>,
    pub render_s: Option<f64>,
    pub load_s: Option<f64>,
    pub script_bytes: Option<usize>,
    /// The `nft` load part of each change.
    pub change_load_s: Vec<f64>,
    /// The dataplane's own summaries of the cold sync and the last change.
    pub detail: Vec<String>,
    /// This worker's `VmRSS` once the state is built, and after the cold sync.
    pub rss_built_kib: Option<u64>,
    pub rss_synced_kib: Option<u64>,
    /// For iptables jobs: what the cold sync and each change sent (IPv4).
    #[serde(default)]
    pub cold_payload: Option<PayloadShape>,
    #[serde(default)]
    pub change_payloads: Vec<PayloadShape>,
    /// For iptables jobs: each change's IPv4 plan and render, timed again
    /// outside the change.
    #[serde(default)]
    pub change_plan_s: Vec<f64>,
}

/// A runner under a stream of changes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latencies {
    pub cold_s: f64,
    /// Event sent -> first sync containing its service committed.
    pub latencies_s: Vec<f64>,
    pub sent: usize,
    /// Changes no sync picked up before the deadline.
    pub unmatched: usize,
    /// Syncs after the first, and their durations.
    pub syncs_s: Vec<f64>,
    /// Changed services per sync.
    pub batch: Vec<usize>,
}

/// The real kproxy process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    pub success: bool,
    /// Start -> exit (`--once`), or start -> first sync done (idle).
    pub wall_s: f64,
    /// The kproxy process's own peak (`VmHWM`, sampled every 10 ms).
    pub peak_kib: u64,
    /// `ru_maxrss` of the reaped child: kproxy or any `nft` it ran.
    pub children_peak_kib: u64,
    /// `VmRSS` about a second after the first sync (idle only).
    pub idle_kib: Option<u64>,
    /// Cores kproxy kept busy during that second (idle only).
    pub idle_cpu: Option<f64>,
    /// kproxy's own account of its state's memory then (idle only):
    /// `kproxy_state_bytes` and `kproxy_state_objects` from `/metrics`,
    /// by series (`bytes/services`, `objects/endpoints`, ...).
    #[serde(default)]
    pub state: std::collections::BTreeMap<String, f64>,
    pub log_tail: String,
}

/// `nft -f` of one tiny transaction, seconds per sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    pub noop_s: Vec<f64>,
    pub add_s: Vec<f64>,
    pub delete_s: Vec<f64>,
}

/// A worker's answer: one JSON line on stdout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    Sync(SyncTimes),
    Latency(Latencies),
    Pacing(pacing::Paced),
    Process(ProcessStats),
    Floor(Floor),
    Userspace(userspace::UserspaceRun),
    /// A server that ran until told to stop.
    Served,
}

/// `dev:inode` of this thread's network namespace.
pub fn current_netns() -> anyhow::Result<String> {
    let meta = std::fs::metadata("/proc/thread-self/ns/net").context("reading this thread's network namespace")?;
    Ok(format!("{}:{}", meta.dev(), meta.ino()))
}

/// Runs one job (the `worker` subcommand) and prints its outcome.
pub fn work(job: &str) -> anyhow::Result<()> {
    let host = std::env::var(HOST_NETNS_ENV).context("workers are started by `kproxy-bench run`")?;
    anyhow::ensure!(current_netns()? != host, "refusing to run a job in the harness's own network namespace");
    let job: Job = serde_json::from_str(job).context("parsing the job")?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let outcome = match job {
        Job::Dataplane { services, endpoints, changes, pod, udp_cleanup } => {
            let spec = Spec { services, endpoints, pod };
            Outcome::Sync(runtime.block_on(sync::dataplane(spec, changes, udp_cleanup))?)
        }
        Job::Text { services, endpoints, changes } => {
            Outcome::Sync(runtime.block_on(sync::text(Spec::new(services, endpoints), changes))?)
        }
        Job::Upstream { services, endpoints, changes } => {
            Outcome::Sync(runtime.block_on(sync::upstream(Spec::new(services, endpoints), changes))?)
        }
        Job::EbpfSync { services, endpoints, changes } => {
            Outcome::Sync(runtime.block_on(ebpf::sync(Spec::new(services, endpoints), changes))?)
        }
        Job::EbpfProgram { services, endpoints, pod, cgroup, pin_dir } => {
            let spec = Spec { services, endpoints, pod: Some(pod) };
            Outcome::Sync(runtime.block_on(ebpf::program(spec, &cgroup, &pin_dir))?)
        }
        Job::Serve { addr, threads } => {
            let _backends = crate::backend::Backends::start(&[addr], threads)?;
            // Until the harness closes our stdin (or ends).
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            Outcome::Served
        }
        Job::Iptables { backend, services, endpoints, changes } => {
            Outcome::Sync(runtime.block_on(iptables::measure(Spec::new(services, endpoints), backend, changes))?)
        }
        Job::Latency { services, endpoints, rate, seconds, min_sync_ms } => {
            let spec = Spec::new(services, endpoints);
            Outcome::Latency(runtime.block_on(latency::measure(spec, rate, seconds, min_sync_ms))?)
        }
        Job::Pacing { services, endpoints, params } => {
            Outcome::Pacing(runtime.block_on(pacing::measure(Spec::new(services, endpoints), params))?)
        }
        Job::Floor { samples } => Outcome::Floor(runtime.block_on(floor::measure(samples))?),
        Job::Kproxy { binary, manifests, idle, timeout_s } => {
            Outcome::Process(process::measure(&binary, &manifests, idle, timeout_s)?)
        }
        Job::Kube { binary, services, endpoints, mode, workdir, timeout_s } => {
            Outcome::Process(kube::measure(&binary, &Spec::new(services, endpoints), mode, &workdir, timeout_s)?)
        }
        Job::Userspace(params) => Outcome::Userspace(userspace::measure(&params)?),
        Job::State { binary, dir, timeout_s } => Outcome::Process(process::state(&binary, &dir, timeout_s)?),
    };
    println!("{}", serde_json::to_string(&outcome)?);
    Ok(())
}
