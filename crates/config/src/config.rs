//! The resolved configuration the rest of kproxy reads.
//!
//! Defaults are applied, the per-mode sections are folded into one value
//! per setting, and every value is typed and validated. Nothing here reads
//! the host: "the best available mode" and "the node's primary IP" stay
//! undecided (`None`, [`NodePortAddresses::Unset`]) for the binary.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;

/// How services are programmed into the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProxyMode {
    /// iptables rules (upstream's default on Linux).
    Iptables,
    /// IPVS virtual servers plus iptables/ipset helpers.
    Ipvs,
    /// nftables rules.
    Nftables,
    /// kproxy's own mode: forwarding through userspace sockets.
    Userspace,
    /// kproxy's own mode: BPF programs on cgroup socket hooks and tc.
    Ebpf,
}

impl ProxyMode {
    /// The name as written in `mode` and `--proxy-mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Iptables => "iptables",
            ProxyMode::Ipvs => "ipvs",
            ProxyMode::Nftables => "nftables",
            ProxyMode::Userspace => "userspace",
            ProxyMode::Ebpf => "ebpf",
        }
    }
}

impl std::str::FromStr for ProxyMode {
    type Err = ();

    /// A mode by the name [`ProxyMode::as_str`] gives it.
    fn from_str(s: &str) -> Result<Self, ()> {
        [ProxyMode::Iptables, ProxyMode::Ipvs, ProxyMode::Nftables, ProxyMode::Userspace, ProxyMode::Ebpf]
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or(())
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The ebpf mode's settings (kproxy's own flags; the configuration file
/// has no section for them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ebpf {
    /// `--ebpf-cgroup`: whose sockets are load balanced; `None`: the root
    /// of the cgroup v2 hierarchy (every process, every pod, on a node).
    pub cgroup: Option<std::path::PathBuf>,
    /// `--ebpf-pin-dir`: where maps and links are pinned.
    pub pin_dir: std::path::PathBuf,
    /// `--ebpf-devices`: the interfaces tc programs sit on; empty: the
    /// interfaces holding the node's addresses.
    pub devices: Vec<String>,
}

impl Default for Ebpf {
    fn default() -> Self {
        Ebpf { cgroup: None, pin_dir: std::path::PathBuf::from(EBPF_PIN_DIR), devices: Vec::new() }
    }
}

/// Where the ebpf mode pins its maps and links unless told otherwise.
pub const EBPF_PIN_DIR: &str = "/sys/fs/bpf/kproxy";

/// How traffic from local pods is recognised (`detectLocalMode`).
/// Which iptables tools iptables mode runs (`--iptables-backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IptablesBackend {
    /// The node's: the one kubelet and other software use (see docs/iptables.md).
    #[default]
    Auto,
    /// `iptables-legacy` (the kernel's x_tables).
    Legacy,
    /// `iptables-nft` (nf_tables through the xt compatibility layer).
    Nft,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DetectLocalMode {
    /// Source inside `cluster_cidrs`; with none, nothing is local.
    #[default]
    ClusterCIDR,
    /// Source inside the Node's `spec.podCIDRs`.
    NodeCIDR,
    /// Arriving on `bridge_interface`.
    BridgeInterface,
    /// Arriving on an interface named `interface_name_prefix*`.
    InterfaceNamePrefix,
}

impl DetectLocalMode {
    /// The name as written in `detectLocalMode`.
    pub fn as_str(self) -> &'static str {
        match self {
            DetectLocalMode::ClusterCIDR => "ClusterCIDR",
            DetectLocalMode::NodeCIDR => "NodeCIDR",
            DetectLocalMode::BridgeInterface => "BridgeInterface",
            DetectLocalMode::InterfaceNamePrefix => "InterfaceNamePrefix",
        }
    }
}

/// Which node addresses serve NodePorts (`nodePortAddresses`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NodePortAddresses {
    /// Not set: the mode's default, which upstream makes every local
    /// address in iptables and ipvs mode and `Primary` in nftables mode.
    /// Left for the binary, which knows the mode when `mode` is `None`.
    #[default]
    Unset,
    /// The node's primary IP of each family (`["primary"]`).
    Primary,
    /// Addresses inside these CIDRs; a family with no CIDR here matches all
    /// of its addresses.
    Cidrs(Vec<IpNet>),
}

/// IPVS settings. Zero timeouts leave the kernel's values alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ipvs {
    /// Scheduler name; empty means `rr`. Checked when IPVS is set up.
    pub scheduler: String,
    /// IPVS services in these CIDRs are never cleaned up.
    pub exclude_cidrs: Vec<IpNet>,
    /// Set arp_ignore=1 and arp_announce=2.
    pub strict_arp: bool,
    /// TCP idle timeout.
    pub tcp_timeout: Duration,
    /// TCP FIN_WAIT timeout.
    pub tcp_fin_timeout: Duration,
    /// UDP timeout.
    pub udp_timeout: Duration,
}

/// conntrack sysctls. A zero leaves the sysctl alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conntrack {
    /// nf_conntrack_max per CPU core; 0 also ignores `min`.
    pub max_per_core: u32,
    /// Lower bound of nf_conntrack_max.
    pub min: u32,
    /// nf_conntrack_tcp_timeout_established.
    pub tcp_established_timeout: Duration,
    /// nf_conntrack_tcp_timeout_close_wait.
    pub tcp_close_wait_timeout: Duration,
    /// Set nf_conntrack_tcp_be_liberal=1.
    pub tcp_be_liberal: bool,
    /// nf_conntrack_udp_timeout (unreplied entries).
    pub udp_timeout: Duration,
    /// nf_conntrack_udp_timeout_stream (assured entries).
    pub udp_stream_timeout: Duration,
}

/// How to reach the API server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientConnection {
    /// Path of the kubeconfig file; `None` means in-cluster.
    pub kubeconfig: Option<String>,
    /// API server URL overriding the kubeconfig's (`--master`).
    pub master: Option<String>,
    /// Client-side queries per second.
    pub qps: f32,
    /// Client-side burst.
    pub burst: u32,
    /// Content type of requests.
    pub content_type: String,
    /// The `Accept` header; empty means the client's default.
    pub accept_content_types: String,
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Logging settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Logging {
    /// klog-style verbosity (`-v`): 0 is the least.
    pub verbosity: u32,
    /// Output format.
    pub format: LogFormat,
}

/// The resolved configuration: upstream defaults applied, flags over the
/// file, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The proxy mode; `None` lets the binary pick the best available.
    pub mode: Option<ProxyMode>,
    /// Node name to use instead of the host name, trimmed and lowercased.
    pub hostname_override: Option<String>,
    /// Overrides the node's primary IP when not unspecified; nothing binds to it.
    pub bind_address: IpAddr,
    /// Health check server address. Always set today: upstream offers no
    /// way to turn it off from the file.
    pub healthz_bind_address: Option<SocketAddr>,
    /// Metrics server address. Always set today, as for healthz.
    pub metrics_bind_address: Option<SocketAddr>,
    /// Exit instead of logging when a bind fails.
    pub bind_address_hard_fail: bool,
    /// Full resync period of the active mode.
    pub sync_period: Duration,
    /// Shortest time between syncs of the active mode.
    pub min_sync_period: Duration,
    /// Which addresses serve NodePorts.
    pub node_port_addresses: NodePortAddresses,
    /// How traffic from local pods is recognised.
    pub detect_local_mode: DetectLocalMode,
    /// Pod bridge for [`DetectLocalMode::BridgeInterface`].
    pub bridge_interface: String,
    /// Pod interface prefix for [`DetectLocalMode::InterfaceNamePrefix`].
    pub interface_name_prefix: String,
    /// Pod CIDRs (`clusterCIDR`), at most one per family.
    pub cluster_cidrs: Vec<IpNet>,
    /// kproxy: the service CIDRs (`--service-cidrs`).
    pub service_cidrs: Vec<IpNet>,
    /// kproxy: which iptables tools iptables mode runs
    /// (`--iptables-backend`); `None` when not given.
    pub iptables_backend: Option<IptablesBackend>,
    /// kproxy: the ebpf mode's settings (flags only).
    pub ebpf: Ebpf,
    /// Masquerade all service traffic.
    pub masquerade_all: bool,
    /// The fwmark bit (0-31) of packets to masquerade.
    pub masquerade_bit: u32,
    /// iptables mode: serve NodePorts on 127.0.0.1 (route_localnet).
    pub localhost_node_ports: bool,
    /// IPVS settings.
    pub ipvs: Ipvs,
    /// conntrack sysctls.
    pub conntrack: Conntrack,
    /// Resync period of the API watches.
    pub config_sync_period: Duration,
    /// How to reach the API server.
    pub client_connection: ClientConnection,
    /// OOM score adjustment, -1000 to 1000.
    pub oom_score_adj: i32,
    /// Feature gates as given; kproxy has none.
    pub feature_gates: BTreeMap<String, bool>,
    /// Logging.
    pub logging: Logging,
    /// Serve /debug/pprof on the metrics server.
    pub enable_profiling: bool,
    /// Previous minor version whose hidden metrics to show.
    pub show_hidden_metrics_for_version: Option<String>,
}

/// Upstream's defaults: what `load(None, &Flags::default())` gives.
impl Default for Config {
    fn default() -> Self {
        crate::load(None, &crate::Flags::default()).expect("upstream's defaults pass validation").config
    }
}
