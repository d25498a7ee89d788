//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// A Kubernetes service proxy: programs this node so that Services'
/// virtual addresses balance across their pods.
#[derive(Debug, Parser)]
#[command(name = "kproxy", version = crate::version_cmd::LONG_VERSION, max_term_width = 100)]
pub struct Cli {
    /// Remove every proxy mode's rules from this node, kproxy's and
    /// kube-proxy's (nftables tables, iptables chains of both backends,
    /// IPVS virtual servers and kube-ipvs0, claimed routes), then exit:
    /// kube-proxy's `--cleanup`, the same as `kproxy cleanup`.
    #[arg(long, exclusive = true)]
    pub cleanup: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch a source of Services and endpoints and keep this node programmed.
    Run(RunArgs),
    /// Print the state this node programs: from --manifests, from the
    /// cluster (--kubeconfig), or else the running kproxy's.
    State(StateArgs),
    /// Print the rules of the proxy mode: nftables as `nft -f` input,
    /// iptables as `iptables-restore` input, IPVS as `ipvsadm -R` input
    /// plus its companion nftables table. From --manifests, from the
    /// cluster (--kubeconfig), or else as the running kproxy applied them.
    Render(RenderArgs),
    /// Explain what happens to one new connection, rule by rule, in the
    /// proxy mode's rules (nftables, iptables or IPVS). From --manifests,
    /// from the cluster (--kubeconfig), or else through the rules the
    /// running kproxy applied.
    Trace(TraceArgs),
    /// Remove everything kproxy installed on this node, and nothing else.
    Cleanup(CleanupArgs),
    /// Run kproxy in a sandbox of network namespaces, send traffic to every
    /// service, show what happened, and remove the sandbox (needs root; the
    /// host's own networking is not touched).
    Demo(DemoArgs),
    /// What a running kproxy serves, as `ipvsadm -Ln` shows it: each
    /// frontend with its scheduler, then its endpoints with weight and
    /// connection counts (counted by the userspace mode; `-` where the
    /// kernel modes cannot tell). Reads `/list` of its metrics address;
    /// with --manifests or --kubeconfig, lists the state planned from them.
    List(ListArgs),
    /// Print kproxy's version, the git commit and the build date.
    Version(VersionArgs),
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: VersionOutput,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum VersionOutput {
    /// One `name: value` line each.
    #[default]
    Text,
    /// `{"version":..,"gitCommit":..,"buildDate":..}`.
    Json,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: Common,

    #[command(flatten)]
    pub running: Running,

    /// Output format: ipvsadm's layout, or the rows of /list as JSON.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
}

/// Where `state`, `trace`, `render` and `list` find the kproxy running on
/// this node, when given neither --manifests nor --kubeconfig.
#[derive(Debug, Args)]
pub struct Running {
    /// Without --manifests or --kubeconfig, ask the kproxy running here:
    /// its metrics address (default: `metricsBindAddress` of --config or
    /// --metrics-bind-address, else 127.0.0.1:10249).
    #[arg(long, value_name = "IP:PORT")]
    pub address: Option<std::net::SocketAddr>,
}

/// Where objects come from and how kproxy is configured; shared by `run`
/// and `state`.
#[derive(Debug, Args)]
pub struct Common {
    /// A folder of Kubernetes manifests (Services, Pods, EndpointSlices,
    /// Endpoints, Nodes, ServiceCIDRs): standalone mode.
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,

    /// A KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1).
    /// Flags given explicitly override its values.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(flatten)]
    pub flags: kproxy_config::Flags,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub common: Common,

    /// Sync once, then exit 0 if the sync applied cleanly (1 if not).
    #[arg(long)]
    pub once: bool,

    /// Compute and serve the state (/state, /metrics, /healthz) without
    /// programming anything on this node.
    #[arg(long)]
    pub dry_run: bool,

    /// Remove every proxy mode's rules from this node (kube-proxy's
    /// `--cleanup`; see `kproxy cleanup`) and exit instead of running.
    #[arg(long)]
    pub cleanup: bool,

    /// Write the effective configuration (the file, upstream's defaults
    /// and the flags) to FILE as a KubeProxyConfiguration, then exit
    /// (JSON if FILE ends in `.json`, else YAML).
    #[arg(long, value_name = "FILE")]
    pub write_config_to: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// An aligned table, one row per frontend (`list`: ipvsadm -Ln's
    /// layout).
    #[default]
    Table,
    /// JSON: the document the admin server serves (/state, /list).
    Json,
}

#[derive(Debug, Args)]
pub struct StateArgs {
    #[command(flatten)]
    pub common: Common,

    #[command(flatten)]
    pub running: Running,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    #[command(flatten)]
    pub common: Common,

    #[command(flatten)]
    pub running: Running,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(flatten)]
    pub common: Common,

    #[command(flatten)]
    pub running: Running,

    /// The client's address.
    #[arg(long, value_name = "IP")]
    pub from: std::net::IpAddr,

    /// The destination: IP:PORT, optionally /tcp, /udp or /sctp (default tcp).
    #[arg(long, value_name = "IP:PORT[/PROTO]")]
    pub to: String,

    /// The interface the packet arrives on (matters for interface-based
    /// local-traffic detection). Traffic from one of the node's addresses
    /// starts on the node and has none.
    #[arg(long, value_name = "NAME")]
    pub iif: Option<String>,
}

#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Only this mode's objects, kproxy's: nftables (its tables), iptables
    /// (its chains and jump rules), ipvs (its virtual servers, kube-ipvs0
    /// and its companion tables), userspace (its local routes) or ebpf (its
    /// pinned programs, links and maps, and its companion tables). Without
    /// it, every mode's objects go, kproxy's and kube-proxy's (its
    /// nftables tables and its IPVS mode's chains too), as `kube-proxy
    /// --cleanup` does.
    #[arg(long = "proxy-mode", value_name = "MODE")]
    pub mode: Option<String>,
    /// ipvs: virtual servers in these CIDRs are left alone (ipvs.excludeCIDRs).
    #[arg(long = "ipvs-exclude-cidrs", value_name = "CIDRS", value_delimiter = ',')]
    pub ipvs_exclude_cidrs: Vec<String>,
    /// iptables: whose tools to run: auto (the node's), legacy or nft
    /// (default: `KPROXY_IPTABLES_BACKEND`, else auto).
    #[arg(long = "iptables-backend", value_name = "BACKEND")]
    pub iptables_backend: Option<String>,
    /// ebpf: where its programs' links and maps are pinned (default
    /// /sys/fs/bpf/kproxy).
    #[arg(long = "ebpf-pin-dir", value_name = "DIR")]
    pub ebpf_pin_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The demo's manifests: Services, and Pods (each gets a backend and an
    /// address in the sandbox).
    #[arg(long, value_name = "DIR", default_value = "examples/demo")]
    pub manifests: PathBuf,
}
