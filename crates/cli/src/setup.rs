//! From arguments and configuration to the values the crates take.

use std::net::IpAddr;

use anyhow::Context;
use kproxy_config::{Config, ProxyMode};
use kproxy_model::ModeSupport;
use kproxy_state::{NodePortAddresses, StateConfig};
use tracing::{error, warn};

use crate::UsageError;
use crate::args::Common;

/// The mode an unset `mode` stands for: `run` picks nftables as root (a
/// dry run otherwise, which programs nothing), and `state`, `render` and
/// `trace` compute nftables' rules. Its section and flags are the ones read.
pub const UNSET_MODE: ProxyMode = ProxyMode::Nftables;

/// Reads the configuration file (if any), applies the flags, starts
/// logging at the configured verbosity, and logs the warnings for settings
/// kproxy or the configured mode (else [`UNSET_MODE`]) does not act on.
pub fn load_config(common: &Common) -> anyhow::Result<Config> {
    load(common).map(|loaded| loaded.config)
}

/// [`load_config`], with the effective configuration as a document too.
pub fn load(common: &Common) -> anyhow::Result<kproxy_config::Loaded> {
    let text = match &common.config {
        Some(path) => {
            Some(std::fs::read_to_string(path).with_context(|| format!("--config {}: cannot read", path.display()))?)
        }
        None => None,
    };
    let loaded =
        kproxy_config::load_with(text.as_deref(), &common.flags, Some(UNSET_MODE)).map_err(|e| {
            match &common.config {
                Some(path) => UsageError(format!("--config {}: {e}", path.display())),
                None => UsageError(e.to_string()),
            }
        })?;
    crate::run::init_logging(&loaded.config.logging);
    for warning in &loaded.warnings {
        warn!(setting = %warning, "configuration setting has no effect");
    }
    Ok(loaded)
}

/// This node's name: `hostnameOverride`, else the host name.
pub fn node_name(config: &Config) -> String {
    config.hostname_override.clone().unwrap_or_else(crate::host::hostname)
}

/// The state pipeline's inputs. `mode` decides what an unset
/// `nodePortAddresses` means, as upstream: every local address in iptables
/// and IPVS mode, the node's primary addresses otherwise (upstream's
/// nftables default; kproxy's userspace mode and the dry run too).
/// `support` is what the mode does of kproxy's annotations
/// ([`crate::mode::support`]).
pub fn state_config(
    config: &Config,
    host_addresses: Vec<IpAddr>,
    mode: Option<ProxyMode>,
    support: ModeSupport,
) -> StateConfig {
    let node_port_addresses = match &config.node_port_addresses {
        kproxy_config::NodePortAddresses::Primary => NodePortAddresses::Primary,
        kproxy_config::NodePortAddresses::Cidrs(cidrs) => NodePortAddresses::Cidrs(cidrs.clone()),
        kproxy_config::NodePortAddresses::Unset if every_address_by_default(mode) => {
            NodePortAddresses::Cidrs(Vec::new())
        }
        kproxy_config::NodePortAddresses::Unset => NodePortAddresses::Primary,
    };
    StateConfig {
        node_name: node_name(config),
        node_port_addresses,
        host_addresses,
        bind_address: Some(config.bind_address).filter(|ip| !ip.is_unspecified()),
        service_cidrs: config.service_cidrs.clone(),
        endpoint_controller: true,
        node_required: false,
        mode: support,
    }
}

/// Whether an unset `nodePortAddresses` means every local address (upstream's
/// iptables and IPVS modes).
fn every_address_by_default(mode: Option<ProxyMode>) -> bool {
    matches!(mode, Some(ProxyMode::Iptables | ProxyMode::Ipvs))
}

/// Upstream's startup complaint about an unset `nodePortAddresses` in the
/// modes where that means every local address (`checkBadConfig`, logged at
/// error level, not fatal).
pub fn check_node_port_addresses(config: &Config, mode: Option<ProxyMode>) {
    if config.node_port_addresses == kproxy_config::NodePortAddresses::Unset && every_address_by_default(mode) {
        error!(
            error = "nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`",
            "configuration may be incomplete or incorrect"
        );
    }
}

/// Upstream's startup note when the ClusterCIDR detector has no CIDR
/// ("Detect-local-mode set to ClusterCIDR, but no cluster CIDR specified
/// for primary IP family"), as a warning: with no CIDR no traffic counts as
/// from a local pod, so the rules that depend on it (masquerading traffic
/// from outside the cluster, short-circuiting pods' traffic to external
/// IPs) do nothing or apply to everything.
pub fn check_local_detection(config: &Config) {
    if let Some(message) = local_detection_off(config) {
        warn!(detect_local_mode = config.detect_local_mode.as_str(), cluster_cidr = "", "{message}");
    }
}

fn local_detection_off(config: &Config) -> Option<&'static str> {
    let off =
        config.detect_local_mode == kproxy_config::DetectLocalMode::ClusterCIDR && config.cluster_cidrs.is_empty();
    off.then_some(
        "detectLocalMode is ClusterCIDR but no cluster CIDR is set (--cluster-cidr, clusterCIDR): local traffic detection is off",
    )
}

/// How to reach the API server: `--kubeconfig` / `clientConnection`, else
/// in-cluster; `--master` overrides the address.
pub fn connection(config: &Config) -> kproxy_source::kube::Connection {
    let client = &config.client_connection;
    kproxy_source::kube::Connection {
        kubeconfig: client.kubeconfig.as_deref().filter(|p| !p.is_empty()).map(Into::into),
        master: client.master.clone().filter(|m| !m.is_empty()),
        qps: client.qps,
        burst: client.burst,
    }
}

#[cfg(test)]
mod tests {
    use kproxy_config::{Config, DetectLocalMode};

    use super::local_detection_off;

    #[test]
    fn the_cluster_cidr_detector_without_a_cidr_says_detection_is_off() {
        let config = Config::default();
        assert_eq!(config.detect_local_mode, DetectLocalMode::ClusterCIDR);
        assert!(local_detection_off(&config).is_some_and(|m| m.contains("local traffic detection is off")));
        let with_cidr = Config { cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()], ..Config::default() };
        assert_eq!(local_detection_off(&with_cidr), None);
        let other = Config { detect_local_mode: DetectLocalMode::NodeCIDR, ..Config::default() };
        assert_eq!(local_detection_off(&other), None);
    }
}
