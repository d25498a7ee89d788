//! From arguments and configuration to the values the crates take.

use std::net::IpAddr;

use anyhow::Context;
use kproxy_config::Config;
use kproxy_model::ModeSupport;
use kproxy_state::{NodePortAddresses, StateConfig};
use tracing::warn;

use crate::UsageError;
use crate::args::Common;

/// Reads the configuration file (if any), applies the flags, starts
/// logging at the configured verbosity, and logs the warnings for settings
/// kproxy does not implement.
pub fn load_config(common: &Common) -> anyhow::Result<Config> {
    let text = match &common.config {
        Some(path) => {
            Some(std::fs::read_to_string(path).with_context(|| format!("--config {}: cannot read", path.display()))?)
        }
        None => None,
    };
    let loaded = kproxy_config::load(text.as_deref(), &common.flags).map_err(|e| match &common.config {
        Some(path) => UsageError(format!("--config {}: {e}", path.display())),
        None => UsageError(e.to_string()),
    })?;
    crate::run::init_logging(&loaded.config.logging);
    for warning in &loaded.warnings {
        warn!(setting = %warning, "configuration setting has no effect");
    }
    Ok(loaded.config)
}

/// This node's name: `hostnameOverride`, else the host name.
pub fn node_name(config: &Config) -> String {
    config.hostname_override.clone().unwrap_or_else(crate::host::hostname)
}

/// The state pipeline's inputs. `mode` decides what an unset
/// `nodePortAddresses` means: every address for iptables and IPVS (as
/// upstream), the primary addresses otherwise (upstream's nftables default).
/// `support` is what the mode does of kproxy's annotations
/// ([`crate::mode::support`]).
pub fn state_config(config: &Config, host_addresses: Vec<IpAddr>, support: ModeSupport) -> StateConfig {
    let node_port_addresses = match &config.node_port_addresses {
        kproxy_config::NodePortAddresses::Primary => NodePortAddresses::Primary,
        kproxy_config::NodePortAddresses::Cidrs(cidrs) => NodePortAddresses::Cidrs(cidrs.clone()),
        // Upstream's nftables default, in every mode. Upstream's iptables
        // and IPVS modes use every address of the node (IPVS: but
        // kube-ipvs0's), 127.0.0.1 included; kproxy serves node ports on
        // loopback or link-local addresses only when asked to.
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

/// The manifest folder of the commands that only read manifests (`state`,
/// `render`, `trace`).
pub fn manifests_dir(common: &Common) -> anyhow::Result<&std::path::Path> {
    match &common.manifests {
        Some(dir) => Ok(dir),
        None => Err(UsageError(
            "pass --manifests DIR (a folder of Kubernetes manifests); this command does not read the API server".into(),
        )
        .into()),
    }
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
