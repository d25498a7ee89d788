//! From the defaulted, flag-overlaid wire struct to [`Config`].
//!
//! This is upstream's v1alpha1-to-internal conversion and its validation
//! (`pkg/proxy/apis/config/validation`) in one pass, so each value is
//! checked where it is typed. Every value that lands in [`Config`] is
//! checked, plus what upstream always checks (`iptables.masqueradeBit`);
//! sync periods of inactive modes are dropped unchecked, as upstream drops
//! them. The first problem found is returned, named by its JSON path or by
//! the flag that set it.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use crate::addr::{self, HostPortError};
use crate::config::{ClientConnection, Conntrack, Ipvs, LogFormat, Logging};
use crate::overlay::Overlay;
use crate::wire::KubeProxyConfiguration;
use crate::{Config, ConfigError, DetectLocalMode, GoDuration, IptablesBackend, NodePortAddresses, ProxyMode};

const MODE_ALLOWED: &str = "iptables, ipvs, nftables, userspace, ebpf, or empty for the best available";
const DETECT_LOCAL_ALLOWED: &str =
    "ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix, or empty for ClusterCIDR";
const CIDR_ALLOWED: &str = "a CIDR such as 10.0.0.0/8 or fd00::/64";
const NODE_PORT_ALLOWED: &str = "CIDRs such as 10.0.0.0/8 or fd00::/64, or the single keyword \"primary\"";
const CLUSTER_CIDR_ALLOWED: &str = "one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma";
/// Upstream's default masquerade bit, should defaulting not have run.
const MASQUERADE_BIT: i32 = 14;

/// Names fields in errors: the flag that set a field, else its JSON path.
struct Check<'a> {
    overlay: &'a Overlay,
}

impl Check<'_> {
    fn name(&self, path: &str) -> String {
        self.overlay.origins.name(path)
    }

    fn invalid(&self, path: &str, reason: impl Into<String>, allowed: impl Into<String>) -> ConfigError {
        ConfigError::invalid(self.name(path), reason, allowed)
    }

    fn positive(&self, path: &str, d: GoDuration) -> Result<Duration, ConfigError> {
        match d.to_std() {
            Some(std) if !std.is_zero() => Ok(std),
            _ => Err(self.invalid(path, format!("{d} is not positive"), "a duration greater than 0s")),
        }
    }

    fn non_negative(&self, path: &str, d: GoDuration) -> Result<Duration, ConfigError> {
        d.to_std().ok_or_else(|| self.invalid(path, format!("{d} is negative"), "0s or more"))
    }

    fn count(&self, path: &str, n: i32) -> Result<u32, ConfigError> {
        u32::try_from(n).map_err(|_| self.invalid(path, format!("{n} is negative"), "0 or more"))
    }

    fn masquerade_bit(&self, path: &str, bit: Option<i32>) -> Result<u32, ConfigError> {
        let bit = bit.unwrap_or(MASQUERADE_BIT);
        match u32::try_from(bit) {
            Ok(b) if b <= 31 => Ok(b),
            _ => Err(self.invalid(path, format!("{bit} is out of range"), "0-31")),
        }
    }

    fn cidrs(&self, path: &str, items: &[String]) -> Result<Vec<IpNet>, ConfigError> {
        let parse = |(i, s): (usize, &String)| {
            addr::parse_cidr(s).ok_or_else(|| {
                self.invalid(&format!("{path}[{i}]"), format!("{s:?} is not a valid CIDR"), CIDR_ALLOWED)
            })
        };
        items.iter().enumerate().map(parse).collect()
    }

    fn host_port(&self, path: &str, v: &str, example: &str) -> Result<std::net::SocketAddr, ConfigError> {
        addr::parse_host_port(v).map_err(|e| {
            let reason = match e {
                HostPortError::NotHostPort => format!("{v:?} is not IP:port"),
                HostPortError::BadIp(host) => format!("{v:?} has an invalid IP {host:?}"),
                HostPortError::BadPort(port) => format!("{v:?} has an invalid port {port:?}"),
            };
            self.invalid(path, reason, format!("IP:port with a port of 1-65535, such as {example}"))
        })
    }
}

fn parse_mode(s: &str) -> Result<Option<ProxyMode>, String> {
    Ok(Some(match s {
        "" => return Ok(None),
        "iptables" => ProxyMode::Iptables,
        "ipvs" => ProxyMode::Ipvs,
        "nftables" => ProxyMode::Nftables,
        "userspace" => ProxyMode::Userspace,
        "ebpf" => ProxyMode::Ebpf,
        "kernelspace" => return Err("unsupported value \"kernelspace\": Windows only".to_owned()),
        other => return Err(format!("unsupported value {other:?}")),
    }))
}

/// The ebpf flags: paths must be absolute (kproxy may run with another
/// working directory than the one it was configured from), names non-empty.
fn ebpf(ck: &Check<'_>, given: &crate::config::Ebpf) -> Result<crate::config::Ebpf, ConfigError> {
    if let Some(cgroup) = &given.cgroup
        && !cgroup.is_absolute()
    {
        let reason = format!("{} is not an absolute path", cgroup.display());
        return Err(ck.invalid("--ebpf-cgroup", reason, "a cgroup v2 directory such as /sys/fs/cgroup"));
    }
    if !given.pin_dir.is_absolute() {
        let reason = format!("{} is not an absolute path", given.pin_dir.display());
        return Err(ck.invalid("--ebpf-pin-dir", reason, "a directory in a bpffs such as /sys/fs/bpf/kproxy"));
    }
    Ok(given.clone())
}

fn parse_detect_local_mode(s: &str) -> Option<DetectLocalMode> {
    Some(match s {
        "" | "ClusterCIDR" => DetectLocalMode::ClusterCIDR,
        "NodeCIDR" => DetectLocalMode::NodeCIDR,
        "BridgeInterface" => DetectLocalMode::BridgeInterface,
        "InterfaceNamePrefix" => DetectLocalMode::InterfaceNamePrefix,
        _ => return None,
    })
}

/// Converts and validates `c` (defaults applied, flags laid over).
pub(crate) fn resolve(c: &KubeProxyConfiguration, overlay: &Overlay) -> Result<Config, ConfigError> {
    let ck = Check { overlay };
    let mode = parse_mode(&c.mode).map_err(|reason| ck.invalid("mode", reason, MODE_ALLOWED))?;
    let (sync_period, min_sync_period) = sync_periods(&ck, c, mode)?;

    let hostname = c.hostname_override.trim();
    if hostname.is_empty() && !c.hostname_override.is_empty() {
        let reason = format!("{:?} is blank", c.hostname_override);
        return Err(ck.invalid("hostnameOverride", reason, "a node name, or empty for the host name"));
    }
    let bind_address = addr::parse_ip(&c.bind_address).ok_or_else(|| {
        let reason = format!("{:?} is not an IP address", c.bind_address);
        ck.invalid("bindAddress", reason, "an IPv4 or IPv6 address such as 0.0.0.0")
    })?;
    let healthz = ck.host_port("healthzBindAddress", &c.healthz_bind_address, "0.0.0.0:10256")?;
    let metrics = ck.host_port("metricsBindAddress", &c.metrics_bind_address, "127.0.0.1:10249")?;

    // Upstream checks the iptables bit in every mode, the nftables bit only
    // in nftables mode, and each mode uses its own.
    let iptables_bit = ck.masquerade_bit("iptables.masqueradeBit", c.iptables.masquerade_bit)?;
    let nftables = mode == Some(ProxyMode::Nftables);
    let (masquerade_bit, masquerade_all) = if nftables {
        let bit = ck.masquerade_bit("nftables.masqueradeBit", c.nftables.masquerade_bit)?;
        (bit, c.nftables.masquerade_all)
    } else {
        (iptables_bit, c.iptables.masquerade_all)
    };

    let node_port_addresses = node_port_addresses(&ck, &c.node_port_addresses)?;
    let detect_local_mode = parse_detect_local_mode(&c.detect_local_mode).ok_or_else(|| {
        let reason = format!("unsupported value {:?}", c.detect_local_mode);
        ck.invalid("detectLocalMode", reason, DETECT_LOCAL_ALLOWED)
    })?;
    check_detect_local(&ck, c, detect_local_mode)?;
    let cluster_cidrs = cluster_cidrs(&ck, &c.cluster_cidr)?;
    let service_cidrs = ck.cidrs("--service-cidrs", &overlay.service_cidrs)?;
    let iptables_backend = match overlay.iptables_backend.as_deref() {
        None => None,
        Some("auto") => Some(IptablesBackend::Auto),
        Some("legacy") => Some(IptablesBackend::Legacy),
        Some("nft") => Some(IptablesBackend::Nft),
        Some(other) => {
            return Err(ck.invalid("--iptables-backend", format!("unsupported value {other:?}"), "auto, legacy, nft"));
        }
    };

    let oom_score_adj = c.oom_score_adj.unwrap_or(-999);
    if !(-1000..=1000).contains(&oom_score_adj) {
        let reason = format!("{oom_score_adj} is out of range");
        return Err(ck.invalid("oomScoreAdj", reason, "-1000 to 1000"));
    }
    let format = match c.logging.format.as_str() {
        "text" | "" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => {
            return Err(ck.invalid("logging.format", format!("unsupported value {other:?}"), "text, json"));
        }
    };

    Ok(Config {
        mode,
        hostname_override: (!hostname.is_empty()).then(|| hostname.to_lowercase()),
        bind_address,
        healthz_bind_address: Some(healthz),
        metrics_bind_address: Some(metrics),
        bind_address_hard_fail: c.bind_address_hard_fail,
        sync_period,
        min_sync_period,
        node_port_addresses,
        detect_local_mode,
        bridge_interface: c.detect_local.bridge_interface.clone(),
        interface_name_prefix: c.detect_local.interface_name_prefix.clone(),
        cluster_cidrs,
        service_cidrs,
        iptables_backend,
        ebpf: ebpf(&ck, &overlay.ebpf)?,
        masquerade_all,
        masquerade_bit,
        localhost_node_ports: c.iptables.localhost_node_ports.unwrap_or(true),
        ipvs: ipvs(&ck, c)?,
        conntrack: conntrack(&ck, c)?,
        config_sync_period: ck.positive("configSyncPeriod", c.config_sync_period)?,
        client_connection: client_connection(&ck, c)?,
        oom_score_adj,
        feature_gates: c.feature_gates.clone(),
        logging: Logging { verbosity: c.logging.verbosity, format },
        enable_profiling: c.enable_profiling,
        show_hidden_metrics_for_version: Some(c.show_hidden_metrics_for_version.clone()).filter(|s| !s.is_empty()),
    })
}

/// The active mode's pair (§2.1 of upstream's conversion): ipvs and
/// nftables have their own, everything else uses iptables'.
fn sync_periods(
    ck: &Check<'_>,
    c: &KubeProxyConfiguration,
    mode: Option<ProxyMode>,
) -> Result<(Duration, Duration), ConfigError> {
    let (section, sync, min) = match mode {
        Some(ProxyMode::Ipvs) => ("ipvs", c.ipvs.sync_period, c.ipvs.min_sync_period),
        Some(ProxyMode::Nftables) => ("nftables", c.nftables.sync_period, c.nftables.min_sync_period),
        _ => ("iptables", c.iptables.sync_period, c.iptables.min_sync_period),
    };
    let (sync_path, min_path) = (format!("{section}.syncPeriod"), format!("{section}.minSyncPeriod"));
    let sync_std = ck.positive(&sync_path, sync)?;
    let min_std = ck.non_negative(&min_path, min)?;
    if min_std > sync_std {
        let reason = format!("{min} is greater than {} ({sync})", ck.name(&sync_path));
        return Err(ck.invalid(&min_path, reason, format!("0s to {sync}")));
    }
    Ok((sync_std, min_std))
}

/// Either `["primary"]` alone or CIDRs; like upstream, checking stops at a
/// misplaced "primary".
fn node_port_addresses(ck: &Check<'_>, items: &[String]) -> Result<NodePortAddresses, ConfigError> {
    if items.is_empty() {
        return Ok(NodePortAddresses::Unset);
    }
    let mut cidrs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("nodePortAddresses[{i}]");
        if item == "primary" {
            if items.len() == 1 {
                return Ok(NodePortAddresses::Primary);
            }
            let reason = "\"primary\" cannot be combined with CIDRs";
            return Err(ck.invalid(&path, reason, NODE_PORT_ALLOWED));
        }
        let cidr = addr::parse_cidr(item)
            .ok_or_else(|| ck.invalid(&path, format!("{item:?} is not a valid CIDR"), NODE_PORT_ALLOWED))?;
        cidrs.push(cidr);
    }
    Ok(NodePortAddresses::Cidrs(cidrs))
}

fn check_detect_local(ck: &Check<'_>, c: &KubeProxyConfiguration, mode: DetectLocalMode) -> Result<(), ConfigError> {
    let (path, value, allowed) = match mode {
        DetectLocalMode::BridgeInterface => (
            "detectLocal.bridgeInterface",
            &c.detect_local.bridge_interface,
            "the name of the pods' bridge, such as cbr0",
        ),
        DetectLocalMode::InterfaceNamePrefix => (
            "detectLocal.interfaceNamePrefix",
            &c.detect_local.interface_name_prefix,
            "a prefix of pod interface names, such as veth",
        ),
        _ => return Ok(()),
    };
    if value.is_empty() {
        let reason = format!("must not be empty when {} is {}", ck.name("detectLocalMode"), mode.as_str());
        return Err(ck.invalid(path, reason, allowed));
    }
    Ok(())
}

/// `clusterCIDR` split on commas, untrimmed as upstream splits it: one
/// CIDR, or a dual-stack pair.
fn cluster_cidrs(ck: &Check<'_>, raw: &str) -> Result<Vec<IpNet>, ConfigError> {
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    let mut cidrs = Vec::new();
    for part in raw.split(',') {
        let cidr = addr::parse_cidr(part)
            .ok_or_else(|| ck.invalid("clusterCIDR", format!("{part:?} is not a valid CIDR"), CLUSTER_CIDR_ALLOWED))?;
        cidrs.push(cidr);
    }
    match cidrs.as_slice() {
        [_] => Ok(cidrs),
        [a, b] if matches!(a.addr(), IpAddr::V4(_)) != matches!(b.addr(), IpAddr::V4(_)) => Ok(cidrs),
        [_, _] => {
            Err(ck.invalid("clusterCIDR", format!("{raw:?} has two CIDRs of the same family"), CLUSTER_CIDR_ALLOWED))
        }
        _ => Err(ck.invalid("clusterCIDR", format!("{raw:?} has more than two CIDRs"), CLUSTER_CIDR_ALLOWED)),
    }
}

fn ipvs(ck: &Check<'_>, c: &KubeProxyConfiguration) -> Result<Ipvs, ConfigError> {
    Ok(Ipvs {
        scheduler: c.ipvs.scheduler.clone(),
        exclude_cidrs: ck.cidrs("ipvs.excludeCIDRs", &c.ipvs.exclude_cidrs)?,
        strict_arp: c.ipvs.strict_arp,
        tcp_timeout: ck.non_negative("ipvs.tcpTimeout", c.ipvs.tcp_timeout)?,
        tcp_fin_timeout: ck.non_negative("ipvs.tcpFinTimeout", c.ipvs.tcp_fin_timeout)?,
        udp_timeout: ck.non_negative("ipvs.udpTimeout", c.ipvs.udp_timeout)?,
    })
}

fn conntrack(ck: &Check<'_>, c: &KubeProxyConfiguration) -> Result<Conntrack, ConfigError> {
    let ct = &c.conntrack;
    // Defaulting has filled the pointers; zero is the safe "leave it" value.
    let or_zero = |d: Option<GoDuration>| d.unwrap_or(GoDuration::ZERO);
    Ok(Conntrack {
        max_per_core: ck.count("conntrack.maxPerCore", ct.max_per_core.unwrap_or(0))?,
        min: ck.count("conntrack.min", ct.min.unwrap_or(0))?,
        tcp_established_timeout: ck
            .non_negative("conntrack.tcpEstablishedTimeout", or_zero(ct.tcp_established_timeout))?,
        tcp_close_wait_timeout: ck.non_negative("conntrack.tcpCloseWaitTimeout", or_zero(ct.tcp_close_wait_timeout))?,
        tcp_be_liberal: ct.tcp_be_liberal,
        udp_timeout: ck.non_negative("conntrack.udpTimeout", ct.udp_timeout)?,
        udp_stream_timeout: ck.non_negative("conntrack.udpStreamTimeout", ct.udp_stream_timeout)?,
    })
}

fn client_connection(ck: &Check<'_>, c: &KubeProxyConfiguration) -> Result<ClientConnection, ConfigError> {
    let cc = &c.client_connection;
    Ok(ClientConnection {
        kubeconfig: Some(cc.kubeconfig.clone()).filter(|s| !s.is_empty()),
        master: ck.overlay.master.clone(),
        qps: cc.qps,
        burst: ck.count("clientConnection.burst", cc.burst)?,
        content_type: cc.content_type.clone(),
        accept_content_types: cc.accept_content_types.clone(),
    })
}
