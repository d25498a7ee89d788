//! Which dataplane runs, and its settings from the configuration.

use kproxy_config::{Config, DetectLocalMode, ProxyMode};
use kproxy_dataplane::ebpf::{Ebpf, EbpfConfig};
use kproxy_dataplane::{Dataplane, DryRun, Iptables, IptablesConfig, Ipvs, IpvsConfig, KernelFiles, Nftables};
use kproxy_iptables_exec::BackendChoice;
use kproxy_model::ModeSupport;
use kproxy_netlink::ipvs::Timeouts;
use kproxy_nftables::{LocalDetector, PlanConfig};
use kproxy_userspace::{Settings, Userspace};
use tracing::warn;

use crate::UsageError;

/// Whether this process runs with root's privileges.
pub fn is_root() -> bool {
    // The effective UID is the second number of the `Uid:` line.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1));
    euid == Some("0")
}

/// The mode to run: the configured one, or the best this host allows
/// (nftables as root, else the dry run; the userspace mode, which needs no
/// root, only when asked for: it proxies every connection through this
/// process).
pub fn choose(config: &Config, dry_run: bool) -> anyhow::Result<Option<ProxyMode>> {
    if dry_run {
        return Ok(None);
    }
    match config.mode {
        Some(ProxyMode::Nftables) => {
            if !is_root() {
                return Err(UsageError(
                    "--proxy-mode nftables: programming nftables needs root (CAP_NET_ADMIN)".into(),
                )
                .into());
            }
            Ok(Some(ProxyMode::Nftables))
        }
        Some(ProxyMode::Ipvs) => {
            if !is_root() {
                return Err(UsageError("--proxy-mode ipvs: programming IPVS needs root (CAP_NET_ADMIN)".into()).into());
            }
            Ok(Some(ProxyMode::Ipvs))
        }
        Some(ProxyMode::Iptables) => {
            if !is_root() {
                return Err(UsageError(
                    "--proxy-mode iptables: programming iptables needs root (CAP_NET_ADMIN)".into(),
                )
                .into());
            }
            Ok(Some(ProxyMode::Iptables))
        }
        Some(ProxyMode::Ebpf) => {
            if !is_root() {
                return Err(UsageError(
                    "--proxy-mode ebpf: loading BPF programs needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)".into(),
                )
                .into());
            }
            Ok(Some(ProxyMode::Ebpf))
        }
        Some(ProxyMode::Userspace) => Ok(Some(ProxyMode::Userspace)),
        None if is_root() => Ok(Some(crate::setup::UNSET_MODE)),
        None => {
            warn!(
                fallback = "dry-run",
                "not running as root: falling back to a dry run; nothing will be programmed on this node (no rules, no routes), the state is only computed and served on /state; run as root (CAP_NET_ADMIN) to program it, or pass --proxy-mode userspace to proxy through this process"
            );
            Ok(None)
        }
    }
}

/// The planner's settings for the nftables mode.
pub fn nftables_config(config: &Config) -> PlanConfig {
    nftables_config_on(config, tcp_be_liberal())
}

/// [`nftables_config`] on a node whose `nf_conntrack_tcp_be_liberal` is
/// `node_liberal`: invalid packets are dropped unless conntrack is liberal.
pub(crate) fn nftables_config_on(config: &Config, node_liberal: bool) -> PlanConfig {
    let local_detector = match config.detect_local_mode {
        DetectLocalMode::ClusterCIDR if config.cluster_cidrs.is_empty() => LocalDetector::None,
        DetectLocalMode::ClusterCIDR => LocalDetector::Cidrs(config.cluster_cidrs.clone()),
        DetectLocalMode::NodeCIDR => LocalDetector::NodePodCidrs,
        DetectLocalMode::BridgeInterface => LocalDetector::Interface(config.bridge_interface.clone()),
        DetectLocalMode::InterfaceNamePrefix => LocalDetector::InterfacePrefix(config.interface_name_prefix.clone()),
    };
    PlanConfig {
        masquerade_all: config.masquerade_all,
        masquerade_bit: config.masquerade_bit,
        local_detector,
        drop_invalid: !(config.conntrack.tcp_be_liberal || node_liberal),
    }
}

/// The userspace mode's settings: `clusterCIDR` decides which sources are
/// in the cluster; `ipvs.scheduler` (when set) is the default scheduler.
/// The proxy holds the connections conntrack would track in the kernel
/// modes, so conntrack's timeouts are its idle timeouts: established TCP,
/// half-closed TCP (CLOSE_WAIT) and UDP streams; zero keeps the default.
pub fn userspace_settings(config: &Config) -> Settings {
    let defaults = Settings::default();
    let scheduler = config.ipvs.scheduler.parse().unwrap_or(defaults.scheduler);
    let or = |value: std::time::Duration, default| if value.is_zero() { default } else { value };
    let conntrack = &config.conntrack;
    Settings {
        cluster_cidrs: config.cluster_cidrs.clone(),
        scheduler,
        tcp_idle_timeout: or(conntrack.tcp_established_timeout, defaults.tcp_idle_timeout),
        tcp_half_closed_timeout: or(conntrack.tcp_close_wait_timeout, defaults.tcp_half_closed_timeout),
        udp_idle_timeout: or(conntrack.udp_stream_timeout, defaults.udp_idle_timeout),
        ..defaults
    }
}

/// `nf_conntrack_tcp_be_liberal` of this network namespace.
fn tcp_be_liberal() -> bool {
    KernelFiles::host().read("net/netfilter/nf_conntrack_tcp_be_liberal").is_ok_and(|v| v == "1")
}

/// The IPVS mode's settings: `ipvs.*`, and the nftables planner's
/// settings for the companion table.
pub fn ipvs_config(config: &Config) -> anyhow::Result<IpvsConfig> {
    ipvs_config_with(config, nftables_config(config))
}

/// [`ipvs_config`] with `companion` as the companion table's settings.
pub(crate) fn ipvs_config_with(config: &Config, companion: PlanConfig) -> anyhow::Result<IpvsConfig> {
    let ipvs = &config.ipvs;
    let default_scheduler = match ipvs.scheduler.as_str() {
        "" => None,
        name => Some(
            name.parse::<kproxy_model::Scheduler>()
                .map_err(|()| UsageError(format!("ipvs.scheduler {name:?}: not a scheduler kproxy knows")))?,
        ),
    };
    if let Some(s) = default_scheduler
        && kproxy_ipvs::ipvs_scheduler(s).is_none()
    {
        return Err(UsageError(format!("ipvs.scheduler {s}: the kernel's IPVS has no such scheduler")).into());
    }
    let seconds = |d: std::time::Duration| u32::try_from(d.as_secs()).unwrap_or(u32::MAX);
    Ok(IpvsConfig {
        plan: kproxy_ipvs::PlanConfig {
            default_scheduler,
            node_port_addresses: None,
            masquerade_bit: config.masquerade_bit,
        },
        companion,
        exclude_cidrs: ipvs.exclude_cidrs.clone(),
        strict_arp: ipvs.strict_arp,
        timeouts: Timeouts {
            tcp: seconds(ipvs.tcp_timeout),
            tcp_fin: seconds(ipvs.tcp_fin_timeout),
            udp: seconds(ipvs.udp_timeout),
        },
    })
}

/// The ebpf mode's settings: the nftables planner's masquerade, detector
/// and invalid-drop settings, a reject mark that shares no bit with the
/// masquerade mark, and the `--ebpf-*` flags. The interface-based
/// detectors are refused: the programs tell local sources by address.
pub fn ebpf_config(config: &Config) -> anyhow::Result<EbpfConfig> {
    ebpf_config_with(config, nftables_config(config))
}

/// [`ebpf_config`] with `nft` as the nftables planner's settings it takes
/// the detector and the invalid-drop setting from.
pub(crate) fn ebpf_config_with(config: &Config, nft: PlanConfig) -> anyhow::Result<EbpfConfig> {
    if matches!(config.detect_local_mode, DetectLocalMode::BridgeInterface | DetectLocalMode::InterfaceNamePrefix) {
        return Err(UsageError(format!(
            "detectLocalMode {:?}: the ebpf mode tells pods by address; use ClusterCIDR or NodeCIDR",
            config.detect_local_mode
        ))
        .into());
    }
    let masquerade_mark = 1u32 << config.masquerade_bit;
    let reject_mark = match kproxy_ebpf::DEFAULT_REJECT_MARK & masquerade_mark {
        0 => kproxy_ebpf::DEFAULT_REJECT_MARK,
        _ => masquerade_mark.rotate_left(1),
    };
    let plan = kproxy_ebpf::PlanConfig {
        masquerade_all: config.masquerade_all,
        masquerade_bit: config.masquerade_bit,
        reject_mark,
        local_detector: nft.local_detector,
        drop_invalid: nft.drop_invalid,
        node_netns_cookie: 0,
    };
    plan.validate().map_err(|e| UsageError(format!("--proxy-mode ebpf: {e}")))?;
    Ok(EbpfConfig {
        plan,
        cgroup: config.ebpf.cgroup.clone(),
        pin_dir: config.ebpf.pin_dir.clone(),
        devices: config.ebpf.devices.clone(),
    })
}

/// Which iptables tools to run: `--iptables-backend` when given, else
/// `KPROXY_IPTABLES_BACKEND`, else `auto` (detect the node's, as upstream's
/// iptables-wrapper does).
pub fn iptables_backend(flag: Option<&str>) -> anyhow::Result<BackendChoice> {
    let (source, value) = match flag {
        Some(v) => ("--iptables-backend", v.to_owned()),
        None => ("KPROXY_IPTABLES_BACKEND", std::env::var("KPROXY_IPTABLES_BACKEND").unwrap_or_default()),
    };
    Ok(value.parse::<BackendChoice>().map_err(|e| UsageError(format!("{source} {value:?}: {e}")))?)
}

/// [`iptables_backend`] for a flag the configuration already validated.
pub(crate) fn configured_backend(config: &Config) -> anyhow::Result<BackendChoice> {
    use kproxy_config::IptablesBackend as Flag;
    use kproxy_iptables_exec::Backend;
    Ok(match config.iptables_backend {
        Some(Flag::Auto) => BackendChoice::Auto,
        Some(Flag::Legacy) => BackendChoice::Fixed(Backend::Legacy),
        Some(Flag::Nft) => BackendChoice::Fixed(Backend::Nft),
        None => iptables_backend(None)?,
    })
}

/// The iptables mode's settings: the nftables mode's masquerade and
/// detector settings, `iptables.localhostNodePorts`, and the backend (see
/// [`iptables_backend`]).
pub fn iptables_config(config: &Config) -> anyhow::Result<IptablesConfig> {
    let backend = configured_backend(config)?;
    Ok(IptablesConfig { plan: iptables_plan_config(config, nftables_config(config)), backend })
}

/// The iptables planner's settings: `nft`'s (the nftables planner's for
/// `config`) and `iptables.localhostNodePorts`.
pub(crate) fn iptables_plan_config(config: &Config, nft: PlanConfig) -> kproxy_iptables::PlanConfig {
    kproxy_iptables::PlanConfig {
        masquerade_all: nft.masquerade_all,
        masquerade_bit: nft.masquerade_bit,
        local_detector: nft.local_detector,
        drop_invalid: nft.drop_invalid,
        localhost_node_ports: config.localhost_node_ports,
    }
}

/// What `mode` does of kproxy's `kproxy.io/*` annotations (`None`, the dry
/// run: everything), for the state: what it cannot do falls back to the
/// default with a warning.
pub fn support(config: &Config, mode: Option<ProxyMode>) -> anyhow::Result<ModeSupport> {
    Ok(match mode {
        Some(ProxyMode::Nftables) => kproxy_nftables::support(),
        Some(ProxyMode::Iptables) => kproxy_iptables::support(),
        Some(ProxyMode::Ipvs) => ipvs_config(config)?.plan.support(),
        Some(ProxyMode::Userspace) => userspace_settings(config).support(),
        Some(ProxyMode::Ebpf) => kproxy_ebpf::support(),
        None => ModeSupport::default(),
    })
}

/// The dataplane for `mode` (`None`: the dry run).
pub fn dataplane(config: &Config, mode: Option<ProxyMode>) -> anyhow::Result<Box<dyn Dataplane>> {
    Ok(match mode {
        Some(ProxyMode::Nftables) => Box::new(Nftables::new(nftables_config(config))),
        Some(ProxyMode::Ipvs) => {
            let settings = ipvs_config(config)?;
            Box::new(Ipvs::new(settings).map_err(|e| anyhow::anyhow!("--proxy-mode ipvs: {e}"))?)
        }
        Some(ProxyMode::Iptables) => Box::new(Iptables::new(iptables_config(config)?)),
        Some(ProxyMode::Userspace) => {
            Box::new(crate::claim::Claiming::on_this_host(Userspace::new(userspace_settings(config))))
        }
        Some(ProxyMode::Ebpf) => Box::new(Ebpf::new(ebpf_config(config)?)),
        _ => Box::new(DryRun),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ebpf_mode_refuses_the_interface_detectors_naming_the_setting() {
        for mode in [DetectLocalMode::BridgeInterface, DetectLocalMode::InterfaceNamePrefix] {
            let config = Config { detect_local_mode: mode, ..Config::default() };
            let error = ebpf_config(&config).expect_err("refused").to_string();
            assert!(error.contains("detectLocalMode") && error.contains(&format!("{mode:?}")), "{error}");
        }
        let config = Config { detect_local_mode: DetectLocalMode::NodeCIDR, ..Config::default() };
        assert!(ebpf_config(&config).is_ok());
    }

    #[test]
    fn the_reject_mark_never_shares_the_masquerade_bit() {
        let config = Config::default();
        let default = ebpf_config(&config).expect("valid").plan;
        assert_eq!((default.masquerade_bit, default.reject_mark), (14, kproxy_ebpf::DEFAULT_REJECT_MARK));
        let config = Config { masquerade_bit: 13, ..Config::default() };
        let moved = ebpf_config(&config).expect("valid").plan;
        assert_eq!(moved.reject_mark, 1 << 14);
        let config = Config { masquerade_bit: 31, ..Config::default() };
        assert_eq!(ebpf_config(&config).expect("valid").plan.reject_mark & (1 << 31), 0);
    }
}
