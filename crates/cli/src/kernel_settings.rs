//! What `kproxy run` sets on the node's kernel at start, before any mode
//! plans: `conntrack.*` in the kernel modes and `oomScoreAdj` in every mode
//! that runs (docs/operations.md, "Conntrack and OOM settings"). Nothing is
//! set in a dry run. Every failure is logged and kproxy runs on, as
//! upstream does for the OOM score.

use std::path::Path;

use kproxy_config::{Config, ProxyMode};
use kproxy_dataplane::{ConntrackSettings, KernelFiles, apply_conntrack_settings, node_cpus};
use tracing::info;

/// Applies the configured kernel settings for `mode` (`None`: the dry run,
/// which sets nothing).
pub fn apply(config: &Config, mode: Option<ProxyMode>) {
    let Some(mode) = mode else { return };
    set_oom_score_adj(Path::new("/proc/self/oom_score_adj"), config.oom_score_adj);
    match mode {
        // The ebpf mode's tc path and masquerading still go through conntrack.
        ProxyMode::Nftables | ProxyMode::Iptables | ProxyMode::Ipvs | ProxyMode::Ebpf => {
            let files = KernelFiles::host();
            apply_conntrack_settings(&files, &conntrack_settings(config), node_cpus(&files));
        }
        // Connections end in kproxy, so the kernel's conntrack does not
        // carry service traffic: conntrack.* are the proxy's own idle
        // timeouts (mode::userspace_settings), and the node-wide sysctls
        // stay as they are.
        ProxyMode::Userspace => {
            info!(
                "userspace mode: conntrack.* are the proxy's idle timeouts; the node's conntrack sysctls stay as they are"
            )
        }
    }
}

/// `conntrack.*` of the configuration.
pub fn conntrack_settings(config: &Config) -> ConntrackSettings {
    let c = &config.conntrack;
    ConntrackSettings {
        max_per_core: c.max_per_core,
        min: c.min,
        tcp_established_timeout: c.tcp_established_timeout,
        tcp_close_wait_timeout: c.tcp_close_wait_timeout,
        tcp_be_liberal: c.tcp_be_liberal,
        udp_timeout: c.udp_timeout,
        udp_stream_timeout: c.udp_stream_timeout,
    }
}

/// Writes `value` to `path` (this process's `oom_score_adj`) unless it
/// holds it already. Lowering the score needs `CAP_SYS_RESOURCE`; without
/// it the kubelet's value stays (-997 for `system-node-critical` pods),
/// logged at info as upstream logs it. Returns whether `path` now holds
/// `value`.
pub fn set_oom_score_adj(path: &Path, value: i32) -> bool {
    let current = std::fs::read_to_string(path).ok().and_then(|text| text.trim().parse::<i32>().ok());
    if current == Some(value) {
        return true;
    }
    match std::fs::write(path, value.to_string()) {
        Ok(()) => {
            match current {
                Some(from) => info!(from, to = value, "OOM score adjustment set"),
                None => info!(to = value, "OOM score adjustment set"),
            }
            true
        }
        Err(e) => {
            info!(wanted = value, current, error = %e, "OOM score adjustment not applied");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oom_score_is_written_when_different() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("oom_score_adj");
        std::fs::write(&path, "0\n").expect("a file");
        assert!(set_oom_score_adj(&path, -999));
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "-999");
        assert!(set_oom_score_adj(&path, -999));
    }

    #[test]
    fn an_unwritable_oom_score_is_reported_not_fatal() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        // A directory cannot be written as a file, even by root.
        assert!(!set_oom_score_adj(dir.path(), -999));
    }

    #[test]
    fn conntrack_settings_carry_the_configuration() {
        let config = kproxy_config::load(
            None,
            &kproxy_config::Flags {
                conntrack_udp_timeout: Some("45s".into()),
                conntrack_tcp_be_liberal: Some(true),
                ..Default::default()
            },
        )
        .expect("valid flags")
        .config;
        let settings = conntrack_settings(&config);
        assert_eq!(settings.max_per_core, 32768);
        assert_eq!(settings.min, 131072);
        assert_eq!(settings.tcp_established_timeout, std::time::Duration::from_secs(86400));
        assert_eq!(settings.udp_timeout, std::time::Duration::from_secs(45));
        assert!(settings.tcp_be_liberal);
    }
}
