//! Everything one benchmark run measured, as the report and the JSON dump
//! see it. Times are in seconds, memory in MiB.

use serde::{Deserialize, Serialize};

use crate::machine::Machine;
use crate::process::RunMode;
use crate::proxies::Proxy;
use crate::stats::Summary;
use crate::workload::FileFormat;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    pub quick: bool,
    pub reps: usize,
    pub endpoints: usize,
    pub changes_per_run: usize,
    pub machine: Machine,
    pub started: String,
    /// The commit the binaries were built from, and whether the tree differed.
    #[serde(default)]
    pub source: String,
    pub duration_s: f64,
    pub sizes: Vec<SizeResult>,
    pub upstream: Vec<UpstreamResult>,
    pub process: Vec<ProcessResult>,
    pub idle: Option<IdleResult>,
    /// The same binary reading the Kubernetes API (the fake server), by
    /// size (runs before issue 16 hold one row, not a list).
    #[serde(default, deserialize_with = "one_or_many")]
    pub kube: Vec<IdleResult>,
    /// The same binary from the API server in each mode (nftables, iptables
    /// on both backends), at one size.
    #[serde(default)]
    pub modes: Vec<ModeResult>,
    /// `kproxy state` on the workload in one file, YAML and JSON.
    #[serde(default)]
    pub parse: Vec<ParseResult>,
    pub latency: Option<LatencyResult>,
    pub packets: Vec<PacketResult>,
    pub floor: Option<FloorResult>,
    /// The userspace mode against HAProxy (full runs and `--only userspace`).
    #[serde(default)]
    pub userspace: Option<UserspaceResult>,
    /// The iptables mode on both backends (full runs and `--only iptables`).
    #[serde(default)]
    pub iptables: Option<IptablesSection>,
    /// Changes shortly after one another (full runs and `--only pacing`).
    #[serde(default)]
    pub pacing: Option<PacingSection>,
    /// The ebpf mode against the nftables mode (full runs and `--only ebpf`).
    #[serde(default)]
    pub ebpf: Option<EbpfSection>,
    /// What was skipped or failed, in words.
    pub notes: Vec<String>,
}

/// kproxy's cold sync and one-service change at one size.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SizeResult {
    pub services: usize,
    /// Objects -> ProxyState (before any sync).
    pub build: Option<Summary>,
    /// Through `Nftables`, with the cold sync's UDP conntrack cleanup.
    pub cold: Option<Summary>,
    /// Through `Nftables`, the cold sync's UDP cleanup left out.
    pub cold_rules_only: Option<Summary>,
    pub change: Option<Summary>,
    /// kproxy's rendered text through `nft -f`, and its stages.
    pub text_cold: Option<Summary>,
    pub text_plan: Option<Summary>,
    pub text_render: Option<Summary>,
    pub text_load: Option<Summary>,
    pub text_change: Option<Summary>,
    pub text_change_load: Option<Summary>,
    pub script_bytes: Option<usize>,
    /// The worker's RSS with the state built, and after the cold sync.
    pub rss_built_mib: Option<Summary>,
    pub rss_synced_mib: Option<Summary>,
    pub detail: Vec<String>,
}

/// The iptables mode: when and from what it was measured (`--only
/// iptables` measures it apart from the rest), and its rows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IptablesSection {
    pub started: String,
    pub source: String,
    pub duration_s: f64,
    pub changes_per_run: usize,
    pub rows: Vec<IptablesResult>,
    pub notes: Vec<String>,
}

/// Cold sync and one-service changes through `Iptables`, one backend, one size.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IptablesResult {
    /// `legacy` or `nft`.
    pub backend: String,
    pub services: usize,
    pub build: Option<Summary>,
    pub cold: Option<Summary>,
    pub change: Option<Summary>,
    /// Each change's IPv4 plan and render, timed again outside the change.
    #[serde(default)]
    pub change_plan: Option<Summary>,
    /// The cold sync's IPv4 payload.
    pub cold_bytes: Option<usize>,
    pub cold_chains: Option<usize>,
    /// `iptables-restore` runs of the cold IPv4 payload.
    #[serde(default)]
    pub cold_restores: Option<usize>,
    /// Per change, pooled over runs: payload bytes, chains declared, and
    /// which chains they were.
    pub change_bytes: Option<Summary>,
    pub change_chains: Option<Summary>,
    pub change_own: Option<Summary>,
    pub change_dispatch: Option<Summary>,
    /// Other services' per-service chains declared, summed over every
    /// change of every run: must be 0.
    pub foreign_chains: usize,
    pub detail: Vec<String>,
}

/// Upstream's layout through `nft -f` at one size.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UpstreamResult {
    pub services: usize,
    pub cold: Option<Summary>,
    pub render: Option<Summary>,
    pub change: Option<Summary>,
    pub change_load: Option<Summary>,
    pub script_bytes: Option<usize>,
    pub detail: Vec<String>,
}

/// The real binary, `kproxy run --once`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProcessResult {
    pub services: usize,
    pub wall: Option<Summary>,
    pub peak_mib: Option<Summary>,
    pub children_peak_mib: Option<Summary>,
    pub all_succeeded: bool,
    pub manifest_mib: f64,
}

/// The real binary, `kproxy run`, a second after its first sync.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IdleResult {
    pub services: usize,
    pub idle_mib: Option<Summary>,
    pub peak_mib: Option<Summary>,
    pub first_sync: Option<Summary>,
    /// Cores busy during the second after the first sync.
    pub idle_cpu: Option<Summary>,
    /// kproxy's `kproxy_state_bytes` per endpoint and per Service then
    /// (the endpoint and service parts over their object counts).
    #[serde(default)]
    pub state_bytes_per_endpoint: Option<Summary>,
    #[serde(default)]
    pub state_bytes_per_service: Option<Summary>,
    /// All of `kproxy_state_bytes`, MiB.
    #[serde(default)]
    pub state_mib: Option<Summary>,
}

/// The real binary from the API server in one mode.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ModeResult {
    pub mode: RunMode,
    pub result: IdleResult,
}

/// `kproxy state --manifests DIR`, DIR holding the workload in one file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ParseResult {
    pub format: FileFormat,
    pub services: usize,
    pub file_mib: f64,
    pub wall: Option<Summary>,
    pub peak_mib: Option<Summary>,
}

/// A list, or (as older runs wrote it) one value or none.
fn one_or_many<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        Many(Vec<T>),
        One(T),
    }
    Ok(match Option::<OneOrMany<T>>::deserialize(deserializer)? {
        None => Vec::new(),
        Some(OneOrMany::One(one)) => vec![one],
        Some(OneOrMany::Many(many)) => many,
    })
}

/// Network-programming latency under a steady stream of changes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LatencyResult {
    pub services: usize,
    pub rate: u32,
    pub seconds: f64,
    pub min_sync_ms: u64,
    /// Over every change of every run.
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
    pub per_run_p99: Option<Summary>,
    pub sent: usize,
    pub unmatched: usize,
    pub syncs: usize,
    pub sync_time: Option<Summary>,
    pub batch: Option<Summary>,
    pub cold: Option<Summary>,
}

/// Sync pacing: when and from what it was measured, the setup, one row
/// per burst.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PacingSection {
    pub started: String,
    pub source: String,
    pub duration_s: f64,
    pub services: usize,
    pub min_sync_ms: u64,
    pub changes: usize,
    pub gap_ms: u64,
    pub rounds_per_run: usize,
    pub rows: Vec<PacingRow>,
    pub notes: Vec<String>,
}

/// One burst setting: each position's latency, pooled over rounds and runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PacingRow {
    pub burst: u32,
    pub runs: usize,
    pub positions: Vec<Option<Summary>>,
    /// The runner's `kubeproxy_network_programming_duration_seconds`,
    /// summed over runs.
    pub histogram_count: u64,
    pub histogram_sum_s: f64,
    pub histogram_within_250ms: u64,
}

/// New TCP connection + one request/reply from a pod, per target.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PacketResult {
    pub services: usize,
    /// Medians per run, summarised over runs.
    pub first: Option<Summary>,
    pub last: Option<Summary>,
    pub direct: Option<Summary>,
    pub samples_per_run: usize,
    pub failures: usize,
}

/// One-element `nft -f` transactions on a tiny table.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FloorResult {
    pub noop: Option<Summary>,
    pub add: Option<Summary>,
    pub delete: Option<Summary>,
}

/// kproxy's userspace mode and HAProxy in front of the same backends.
/// Latencies in seconds, rates in requests per second.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UserspaceResult {
    /// When and from what this part was measured (`--only userspace`
    /// measures it apart from the rest).
    pub started: String,
    pub source: String,
    pub duration_s: f64,
    /// kproxy's relay threads (one per core) and HAProxy's `nbthread`.
    pub threads: usize,
    pub backends: usize,
    pub wrk_threads: usize,
    pub connections: usize,
    /// Each wrk measurement's duration.
    pub seconds: f64,
    pub idle_connections: usize,
    /// `haproxy -v` and `wrk --version`, first lines.
    pub haproxy: String,
    pub wrk: String,
    /// kproxy, HAProxy, the backend directly.
    pub keep_alive: Vec<LoadResult>,
    /// The same with `Connection: close`.
    pub close: Vec<LoadResult>,
    pub idle: Vec<IdleConnectionsResult>,
    /// kproxy / HAProxy within each run, summarised over runs.
    pub keep_alive_rps_ratio: Option<Summary>,
    pub keep_alive_p99_ratio: Option<Summary>,
    pub close_rps_ratio: Option<Summary>,
    pub close_p99_ratio: Option<Summary>,
    pub idle_ratio: Option<Summary>,
    pub notes: Vec<String>,
}

impl UserspaceResult {
    pub fn load(&self, proxy: Proxy, close: bool) -> Option<&LoadResult> {
        let rows = if close { &self.close } else { &self.keep_alive };
        rows.iter().find(|l| l.proxy == proxy)
    }

    pub fn idle_of(&self, proxy: Proxy) -> Option<&IdleConnectionsResult> {
        self.idle.iter().find(|i| i.proxy == proxy)
    }
}

/// One wrk load through one proxy: each run's value, summarised over runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadResult {
    pub proxy: Proxy,
    pub rps: Option<Summary>,
    pub p50: Option<Summary>,
    pub p99: Option<Summary>,
    pub p999: Option<Summary>,
    pub max: Option<Summary>,
    /// Over all runs.
    pub requests: u64,
    pub errors: u64,
}

/// One proxy's memory with the idle connections open (a fresh process per run).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdleConnectionsResult {
    pub proxy: Proxy,
    pub before_mib: Option<Summary>,
    pub after_mib: Option<Summary>,
    pub per_connection_kib: Option<Summary>,
    /// Descriptors the proxy gained (two per proxied connection).
    pub fds_added: Option<Summary>,
    /// Connections the backends saw open meanwhile.
    pub backend_open: Option<Summary>,
}

/// The ebpf mode next to the nftables mode (full runs and `--only ebpf`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EbpfSection {
    pub started: String,
    pub source: String,
    pub duration_s: f64,
    pub changes_per_run: usize,
    /// Cold syncs and one-service changes, both modes, by size.
    pub sync: Vec<EbpfSyncRow>,
    /// The traffic runs' settings (`None`: not measured).
    pub traffic: Option<crate::traffic::Params>,
    /// wrk's version line.
    pub wrk: String,
    pub rounds: Vec<crate::traffic::Round>,
    pub notes: Vec<String>,
}

/// Both modes at one size, measured in the same run (alternating runs).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EbpfSyncRow {
    pub services: usize,
    /// Through `Ebpf`: programs loaded and attached, maps written.
    pub ebpf_cold: Option<Summary>,
    pub ebpf_change: Option<Summary>,
    /// The planner alone on the same full state and on each change.
    pub ebpf_cold_plan: Option<Summary>,
    pub ebpf_change_plan: Option<Summary>,
    /// Map operations of the cold sync.
    pub ebpf_cold_ops: Option<usize>,
    /// Through `Nftables`, without the UDP conntrack cleanup (the ebpf
    /// mode's sync does none).
    pub nft_cold: Option<Summary>,
    pub nft_change: Option<Summary>,
    pub detail: Vec<String>,
}
