//! kube-proxy's configuration flags, as given on the command line.
//!
//! Every field is an `Option` (`None` = not given) so a given flag can
//! override the file. Values stay text here: `crate::load` parses and
//! validates them so a bad value is a [`crate::ConfigError`] naming the
//! flag, like a bad value in the file. Booleans are the exception and take
//! Go's spellings (`--masquerade-all`, `--masquerade-all=false`). The binary
//! owns the flags that are not configuration (`--config`, `--cleanup`, ...).

/// `strconv.ParseBool`, which pflag uses for boolean flags.
fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (allowed: true, false, 1, 0, t, f)")),
    }
}

/// kube-proxy's configuration flags (upstream names) plus kproxy's own.
#[derive(clap::Args, Debug, Default, Clone, PartialEq)]
pub struct Flags {
    /// Proxy mode: iptables, ipvs, nftables or userspace; empty picks the best available.
    #[arg(long, value_name = "MODE")]
    pub proxy_mode: Option<String>,
    /// Use this name as the node name instead of the host name.
    #[arg(long, value_name = "NAME")]
    pub hostname_override: Option<String>,
    /// Override the node's primary IP (nothing binds to it).
    #[arg(long, value_name = "IP")]
    pub bind_address: Option<String>,
    /// IP or IP:port of the health check server (default 0.0.0.0:10256).
    #[arg(long, value_name = "IP[:PORT]")]
    pub healthz_bind_address: Option<String>,
    /// IP or IP:port of the metrics server (default 127.0.0.1:10249).
    #[arg(long, value_name = "IP[:PORT]")]
    pub metrics_bind_address: Option<String>,
    /// Exit when binding the health check or metrics port fails.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub bind_address_hard_fail: Option<bool>,
    /// Pod CIDRs, comma-separated, at most one per IP family.
    #[arg(long, value_name = "CIDRS")]
    pub cluster_cidr: Option<String>,
    /// Masquerade all traffic sent to service IPs.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub masquerade_all: Option<bool>,
    /// The fwmark bit (0-31) marking packets to masquerade in iptables and ipvs mode.
    #[arg(long, value_name = "BIT")]
    pub iptables_masquerade_bit: Option<String>,
    /// Serve NodePorts on 127.0.0.1 in iptables mode.
    #[arg(long = "iptables-localhost-nodeports", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub iptables_localhost_nodeports: Option<bool>,
    /// Full resync period in every mode but ipvs, e.g. 30s.
    #[arg(long, value_name = "DURATION")]
    pub iptables_sync_period: Option<String>,
    /// Shortest time between syncs in every mode but ipvs, e.g. 1s.
    #[arg(long, value_name = "DURATION")]
    pub iptables_min_sync_period: Option<String>,
    /// Full resync period in ipvs mode.
    #[arg(long, value_name = "DURATION")]
    pub ipvs_sync_period: Option<String>,
    /// Shortest time between syncs in ipvs mode.
    #[arg(long, value_name = "DURATION")]
    pub ipvs_min_sync_period: Option<String>,
    /// IPVS scheduler (empty means rr).
    #[arg(long, value_name = "NAME")]
    pub ipvs_scheduler: Option<String>,
    /// CIDRs of IPVS services not to clean up; comma-separated, repeatable.
    #[arg(long, value_name = "CIDRS", value_delimiter = ',', action = clap::ArgAction::Append)]
    pub ipvs_exclude_cidrs: Option<Vec<String>>,
    /// Set arp_ignore and arp_announce for IPVS.
    #[arg(long = "ipvs-strict-arp", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub ipvs_strict_arp: Option<bool>,
    /// IPVS TCP idle timeout; 0 leaves it as is.
    #[arg(long, value_name = "DURATION")]
    pub ipvs_tcp_timeout: Option<String>,
    /// IPVS TCP FIN_WAIT timeout; 0 leaves it as is.
    #[arg(long = "ipvs-tcpfin-timeout", value_name = "DURATION")]
    pub ipvs_tcpfin_timeout: Option<String>,
    /// IPVS UDP timeout; 0 leaves it as is.
    #[arg(long, value_name = "DURATION")]
    pub ipvs_udp_timeout: Option<String>,
    /// How to detect local traffic: ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix.
    #[arg(long, value_name = "MODE")]
    pub detect_local_mode: Option<String>,
    /// Bridge of pod traffic, for --detect-local-mode=BridgeInterface.
    #[arg(long, value_name = "NAME")]
    pub pod_bridge_interface: Option<String>,
    /// Prefix of pod interfaces, for --detect-local-mode=InterfaceNamePrefix.
    #[arg(long, value_name = "PREFIX")]
    pub pod_interface_name_prefix: Option<String>,
    /// CIDRs whose addresses serve NodePorts, or "primary"; comma-separated, repeatable.
    #[arg(long = "nodeport-addresses", value_name = "CIDRS", value_delimiter = ',',
          action = clap::ArgAction::Append)]
    pub nodeport_addresses: Option<Vec<String>>,
    /// conntrack entries per CPU core; 0 leaves the limit as is.
    #[arg(long, value_name = "N")]
    pub conntrack_max_per_core: Option<String>,
    /// Lower bound of the conntrack limit.
    #[arg(long, value_name = "N")]
    pub conntrack_min: Option<String>,
    /// Idle timeout of established TCP conntrack entries.
    #[arg(long, value_name = "DURATION")]
    pub conntrack_tcp_timeout_established: Option<String>,
    /// Timeout of CLOSE_WAIT TCP conntrack entries.
    #[arg(long, value_name = "DURATION")]
    pub conntrack_tcp_timeout_close_wait: Option<String>,
    /// Set nf_conntrack_tcp_be_liberal.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub conntrack_tcp_be_liberal: Option<bool>,
    /// Timeout of unreplied UDP conntrack entries; 0 leaves it as is.
    #[arg(long, value_name = "DURATION")]
    pub conntrack_udp_timeout: Option<String>,
    /// Timeout of assured UDP conntrack entries; 0 leaves it as is.
    #[arg(long, value_name = "DURATION")]
    pub conntrack_udp_timeout_stream: Option<String>,
    /// Resync period of the API watches.
    #[arg(long, value_name = "DURATION")]
    pub config_sync_period: Option<String>,
    /// Path of the kubeconfig file; unset means in-cluster.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<String>,
    /// API server URL, overriding the kubeconfig's.
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,
    /// Client-side queries per second to the API server.
    #[arg(long, value_name = "QPS")]
    pub kube_api_qps: Option<String>,
    /// Client-side burst of queries to the API server.
    #[arg(long, value_name = "N")]
    pub kube_api_burst: Option<String>,
    /// Content type of requests to the API server.
    #[arg(long, value_name = "TYPE")]
    pub kube_api_content_type: Option<String>,
    /// OOM score adjustment of the process, -1000 to 1000.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub oom_score_adj: Option<String>,
    /// Serve /debug/pprof on the metrics server.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub profiling: Option<bool>,
    /// Feature gates as Name=bool pairs, comma-separated.
    #[arg(long, value_name = "GATES")]
    pub feature_gates: Option<String>,
    /// The previous minor version whose hidden metrics to show.
    #[arg(long, value_name = "VERSION")]
    pub show_hidden_metrics_for_version: Option<String>,
    /// Log verbosity.
    #[arg(short = 'v', long = "v", value_name = "LEVEL")]
    pub verbosity: Option<String>,
    /// Log format: text, or json (Kubernetes' structured logging).
    #[arg(long, value_name = "FORMAT")]
    pub logging_format: Option<String>,
    /// kproxy: the cluster's service CIDRs, comma-separated, repeatable.
    #[arg(long, value_name = "CIDRS", value_delimiter = ',', action = clap::ArgAction::Append)]
    pub service_cidrs: Option<Vec<String>>,
    /// kproxy: iptables mode's tools: auto (the node's), legacy or nft.
    #[arg(long, value_name = "BACKEND")]
    pub iptables_backend: Option<String>,
    /// kproxy: ebpf mode: the cgroup v2 whose processes' sockets are load
    /// balanced (default: the root of the cgroup v2 hierarchy).
    #[arg(long, value_name = "PATH")]
    pub ebpf_cgroup: Option<std::path::PathBuf>,
    /// kproxy: ebpf mode: where its maps and links are pinned, in a bpffs
    /// (default: /sys/fs/bpf/kproxy).
    #[arg(long, value_name = "DIR")]
    pub ebpf_pin_dir: Option<std::path::PathBuf>,
    /// kproxy: ebpf mode: the interfaces whose traffic from outside is
    /// NATed by tc programs, comma-separated (default: the interfaces that
    /// hold the node's addresses).
    #[arg(long, value_name = "INTERFACES", value_delimiter = ',')]
    pub ebpf_devices: Option<Vec<String>>,
}

impl Flags {
    /// The names (`--proxy-mode`) of the flags that were given.
    pub(crate) fn given(&self) -> Vec<&'static str> {
        let text = [
            ("--proxy-mode", self.proxy_mode.is_some()),
            ("--hostname-override", self.hostname_override.is_some()),
            ("--bind-address", self.bind_address.is_some()),
            ("--healthz-bind-address", self.healthz_bind_address.is_some()),
            ("--metrics-bind-address", self.metrics_bind_address.is_some()),
            ("--bind-address-hard-fail", self.bind_address_hard_fail.is_some()),
            ("--cluster-cidr", self.cluster_cidr.is_some()),
            ("--masquerade-all", self.masquerade_all.is_some()),
            ("--iptables-masquerade-bit", self.iptables_masquerade_bit.is_some()),
            ("--iptables-localhost-nodeports", self.iptables_localhost_nodeports.is_some()),
            ("--iptables-sync-period", self.iptables_sync_period.is_some()),
            ("--iptables-min-sync-period", self.iptables_min_sync_period.is_some()),
            ("--ipvs-sync-period", self.ipvs_sync_period.is_some()),
            ("--ipvs-min-sync-period", self.ipvs_min_sync_period.is_some()),
            ("--ipvs-scheduler", self.ipvs_scheduler.is_some()),
            ("--ipvs-exclude-cidrs", self.ipvs_exclude_cidrs.is_some()),
            ("--ipvs-strict-arp", self.ipvs_strict_arp.is_some()),
            ("--ipvs-tcp-timeout", self.ipvs_tcp_timeout.is_some()),
            ("--ipvs-tcpfin-timeout", self.ipvs_tcpfin_timeout.is_some()),
            ("--ipvs-udp-timeout", self.ipvs_udp_timeout.is_some()),
            ("--detect-local-mode", self.detect_local_mode.is_some()),
            ("--pod-bridge-interface", self.pod_bridge_interface.is_some()),
            ("--pod-interface-name-prefix", self.pod_interface_name_prefix.is_some()),
            ("--nodeport-addresses", self.nodeport_addresses.is_some()),
            ("--conntrack-max-per-core", self.conntrack_max_per_core.is_some()),
            ("--conntrack-min", self.conntrack_min.is_some()),
            ("--conntrack-tcp-timeout-established", self.conntrack_tcp_timeout_established.is_some()),
            ("--conntrack-tcp-timeout-close-wait", self.conntrack_tcp_timeout_close_wait.is_some()),
            ("--conntrack-tcp-be-liberal", self.conntrack_tcp_be_liberal.is_some()),
            ("--conntrack-udp-timeout", self.conntrack_udp_timeout.is_some()),
            ("--conntrack-udp-timeout-stream", self.conntrack_udp_timeout_stream.is_some()),
            ("--config-sync-period", self.config_sync_period.is_some()),
            ("--kubeconfig", self.kubeconfig.is_some()),
            ("--master", self.master.is_some()),
            ("--kube-api-qps", self.kube_api_qps.is_some()),
            ("--kube-api-burst", self.kube_api_burst.is_some()),
            ("--kube-api-content-type", self.kube_api_content_type.is_some()),
            ("--oom-score-adj", self.oom_score_adj.is_some()),
            ("--profiling", self.profiling.is_some()),
            ("--feature-gates", self.feature_gates.is_some()),
            ("--show-hidden-metrics-for-version", self.show_hidden_metrics_for_version.is_some()),
            ("--v", self.verbosity.is_some()),
            ("--logging-format", self.logging_format.is_some()),
            ("--service-cidrs", self.service_cidrs.is_some()),
            ("--iptables-backend", self.iptables_backend.is_some()),
            ("--ebpf-cgroup", self.ebpf_cgroup.is_some()),
            ("--ebpf-pin-dir", self.ebpf_pin_dir.is_some()),
            ("--ebpf-devices", self.ebpf_devices.is_some()),
        ];
        text.into_iter().filter(|(_, given)| *given).map(|(name, _)| name).collect()
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args, Command, FromArgMatches};

    use super::Flags;
    use crate::support::FIELDS;

    fn command() -> Command {
        Flags::augment_args(Command::new("kproxy"))
    }

    /// Every flag clap knows, as `--name`.
    fn clap_flags() -> Vec<String> {
        let mut names: Vec<String> =
            command().get_arguments().filter_map(|a| a.get_long().map(|l| format!("--{l}"))).collect();
        names.sort();
        names
    }

    #[test]
    fn given_lists_every_flag_clap_parses() {
        // "1" is a valid value for every flag, booleans included.
        let argv: Vec<String> = clap_flags().into_iter().map(|f| format!("{f}=1")).collect();
        let matches = command()
            .try_get_matches_from(std::iter::once("kproxy".to_owned()).chain(argv))
            .expect("every flag takes 1");
        let flags = Flags::from_arg_matches(&matches).expect("matches fit Flags");
        let mut given: Vec<String> = flags.given().into_iter().map(str::to_owned).collect();
        given.sort();
        assert_eq!(given, clap_flags());
    }

    #[test]
    fn support_table_lists_exactly_the_clap_flags() {
        let mut table: Vec<String> = FIELDS.iter().filter_map(|f| f.flag).map(str::to_owned).collect();
        table.sort();
        assert_eq!(table, clap_flags());
    }

    #[test]
    fn booleans_take_go_spellings() {
        assert_eq!(super::parse_go_bool("T"), Ok(true));
        assert_eq!(super::parse_go_bool("0"), Ok(false));
        assert!(super::parse_go_bool("yes").is_err());
    }
}
