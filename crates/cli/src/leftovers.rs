//! Removing what other proxy modes left on this node: at start, once the
//! running mode's first sync is in (so the node is never without rules),
//! and for `kproxy cleanup` / `--cleanup`, everything.
//!
//! The kernel side is `kproxy_dataplane::leftovers`; the userspace mode's
//! claimed routes are this binary's.

use kproxy_config::{Config, ProxyMode};
use kproxy_dataplane::leftovers::{self, Keeping, Leftovers};
use kproxy_iptables_exec::BackendChoice;
use tracing::{debug, info, warn};

/// What was removed, kernel objects and claimed routes.
pub struct Report {
    pub kernel: Leftovers,
    /// The userspace mode's claimed local routes (when not kept).
    pub routes: usize,
}

impl Report {
    pub fn any(&self) -> bool {
        self.kernel.any() || self.routes > 0
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; userspace mode routes: {}", self.kernel, self.routes)
    }
}

/// Removes what modes other than `mode` left (`None`: every mode's,
/// kproxy's and kube-proxy's alike). Never fails; what could not be
/// removed is in the report's problems.
pub async fn remove(mode: Option<ProxyMode>, config: &Config) -> Report {
    let keeping = match mode {
        None => Keeping::Nothing,
        Some(ProxyMode::Nftables) => Keeping::Nftables,
        Some(ProxyMode::Ipvs) => Keeping::Ipvs,
        Some(ProxyMode::Userspace) => Keeping::Userspace,
        Some(ProxyMode::Ebpf) => Keeping::Ebpf,
        Some(ProxyMode::Iptables) => match iptables_backend(config).await {
            Some(backend) => Keeping::Iptables(backend),
            // The mode itself fails on this; leave both backends alone.
            None => Keeping::Iptables(kproxy_iptables_exec::Backend::Nft),
        },
    };
    let mut kernel = leftovers::remove(keeping, &config.ipvs.exclude_cidrs, &config.ebpf.pin_dir).await;
    let mut routes = 0;
    if mode != Some(ProxyMode::Userspace) {
        match crate::claim::cleanup().await {
            Ok(removed) => routes = removed,
            Err(e) => kernel.problems.push(format!("the userspace mode's local routes: {e:#}")),
        }
    }
    Report { kernel, routes }
}

/// [`remove`] at start, logged: what went, with counts, and what could not.
pub async fn remove_at_start(mode: ProxyMode, config: &Config) {
    let report = remove(Some(mode), config).await;
    if report.any() {
        info!(mode = mode.as_str(), removed = %report, "removed what other proxy modes left on this node");
    } else {
        debug!(mode = mode.as_str(), "no other proxy mode's rules on this node");
    }
    for problem in &report.kernel.problems {
        warn!(problem = %problem, "cannot remove what another proxy mode left; its rules may still take traffic");
    }
}

/// The backend the iptables mode will use (as its first sync detects it).
async fn iptables_backend(config: &Config) -> Option<kproxy_iptables_exec::Backend> {
    let choice = crate::mode::configured_backend(config).unwrap_or(BackendChoice::Auto);
    kproxy_iptables_exec::detect(choice).await.ok().map(|d| d.backend)
}
