//! Upstream's v1alpha1 defaulting (`SetDefaults_KubeProxyConfiguration`).
//!
//! Runs on the wire struct right after decoding and before flags are laid
//! over it, as upstream defaults the file before its flags apply. A Go zero
//! value (0, "", nil) counts as unset, so `syncPeriod: 0s` also becomes
//! 30s. Settings upstream leaves alone here (mode, detectLocalMode,
//! nodePortAddresses, ...) are resolved in `resolve`.

use std::net::IpAddr;

use crate::GoDuration;
use crate::addr;
use crate::wire::KubeProxyConfiguration;

/// Port of the health check server when `healthzBindAddress` has none.
pub(crate) const HEALTHZ_PORT: u16 = 10256;
/// Port of the metrics server when `metricsBindAddress` has none.
pub(crate) const METRICS_PORT: u16 = 10249;

const MINUTE: i64 = 60;
const HOUR: i64 = 60 * MINUTE;

fn default_duration(d: &mut GoDuration, secs: i64) {
    if *d == GoDuration::ZERO {
        *d = GoDuration::from_secs(secs);
    }
}

fn default_string(s: &mut String, value: &str) {
    if s.is_empty() {
        value.clone_into(s);
    }
}

/// Fills upstream's defaults into `c`.
pub(crate) fn apply(c: &mut KubeProxyConfiguration) {
    default_string(&mut c.bind_address, "0.0.0.0");
    // An IPv6 (or unparsable) bindAddress switches the server defaults to
    // IPv6, as getDefaultAddresses does.
    let (healthz_host, metrics_host) = match addr::parse_ip(&c.bind_address) {
        Some(IpAddr::V4(_)) => ("0.0.0.0", "127.0.0.1"),
        _ => ("[::]", "[::1]"),
    };
    c.healthz_bind_address = match c.healthz_bind_address.as_str() {
        "" => format!("{healthz_host}:{}", HEALTHZ_PORT),
        given => addr::append_port_if_needed(given, HEALTHZ_PORT),
    };
    c.metrics_bind_address = match c.metrics_bind_address.as_str() {
        "" => format!("{metrics_host}:{}", METRICS_PORT),
        given => addr::append_port_if_needed(given, METRICS_PORT),
    };
    // qos.KubeProxyOOMScoreAdj
    c.oom_score_adj.get_or_insert(-999);

    default_duration(&mut c.iptables.sync_period, 30);
    default_duration(&mut c.iptables.min_sync_period, 1);
    c.iptables.localhost_node_ports.get_or_insert(true);
    c.iptables.masquerade_bit.get_or_insert(14);

    // ipvs.minSyncPeriod has no default upstream: it stays 0s.
    default_duration(&mut c.ipvs.sync_period, 30);

    default_duration(&mut c.nftables.sync_period, 30);
    default_duration(&mut c.nftables.min_sync_period, 1);
    c.nftables.masquerade_bit.get_or_insert(14);

    c.conntrack.max_per_core.get_or_insert(32 * 1024);
    c.conntrack.min.get_or_insert(128 * 1024);
    c.conntrack.tcp_established_timeout.get_or_insert(GoDuration::from_secs(24 * HOUR));
    c.conntrack.tcp_close_wait_timeout.get_or_insert(GoDuration::from_secs(HOUR));

    default_duration(&mut c.config_sync_period, 15 * MINUTE);

    default_string(&mut c.client_connection.content_type, "application/vnd.kubernetes.protobuf");
    if c.client_connection.qps == 0.0 {
        c.client_connection.qps = 5.0;
    }
    if c.client_connection.burst == 0 {
        c.client_connection.burst = 10;
    }

    // logsapi.SetRecommendedLoggingConfiguration
    default_string(&mut c.logging.format, "text");
    default_duration(&mut c.logging.flush_frequency.0, 5);
}
