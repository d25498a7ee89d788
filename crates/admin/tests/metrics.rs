//! `/metrics` against upstream kube-proxy v1.33's list: per mode, every
//! metric upstream registers in that mode is exported before any sync,
//! with upstream's type and labels, and no other mode's is.

use kproxy_admin::Metrics;
use kproxy_admin::metrics::{BuildInfo, FailedStep, SyncFailure};
use kproxy_config::ProxyMode;
use kproxy_model::IpFamily;

/// Upstream's name as exported, its type, and the label names of its
/// first sample (sorted; `le` of histogram buckets left out).
type Expected = (&'static str, &'static str, &'static [&'static str]);

/// `pkg/proxy/metrics/metrics.go`'s RegisterMetrics, the part every mode
/// registers (the metrics reference lists the labels).
const COMMON: &[Expected] = &[
    ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram", &["ip_family"]),
    ("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "gauge", &["ip_family"]),
    ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge", &["ip_family"]),
    ("kubeproxy_sync_proxy_rules_endpoint_changes_pending", "gauge", &[]),
    ("kubeproxy_sync_proxy_rules_endpoint_changes_total", "counter", &[]),
    ("kubeproxy_sync_proxy_rules_service_changes_pending", "gauge", &[]),
    ("kubeproxy_sync_proxy_rules_service_changes_total", "counter", &[]),
    ("kubeproxy_network_programming_duration_seconds", "histogram", &["ip_family"]),
    ("kubeproxy_sync_proxy_rules_no_local_endpoints_total", "gauge", &["ip_family", "traffic_policy"]),
];

const FULL_AND_PARTIAL: &[Expected] = &[
    ("kubeproxy_sync_full_proxy_rules_duration_seconds", "histogram", &["ip_family"]),
    ("kubeproxy_sync_partial_proxy_rules_duration_seconds", "histogram", &["ip_family"]),
];

const CONNTRACK: &[Expected] = &[
    ("kubeproxy_conntrack_reconciler_sync_duration_seconds", "histogram", &["ip_family"]),
    ("kubeproxy_conntrack_reconciler_deleted_entries_total", "counter", &["ip_family"]),
];

const IPTABLES: &[Expected] = &[
    ("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "counter", &["ip_family"]),
    ("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", "counter", &["ip_family"]),
    ("kubeproxy_sync_proxy_rules_iptables_total", "gauge", &["ip_family", "table"]),
    ("kubeproxy_sync_proxy_rules_iptables_last", "gauge", &["ip_family", "table"]),
];

const IPVS: &[Expected] = &[("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "counter", &["ip_family"])];

const NFTABLES: &[Expected] = &[
    ("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "counter", &["ip_family"]),
    ("kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", "counter", &["ip_family"]),
];

/// component-base's, in every mode.
const PROCESS: &[Expected] = &[
    ("process_cpu_seconds_total", "counter", &[]),
    ("process_resident_memory_bytes", "gauge", &[]),
    ("process_virtual_memory_bytes", "gauge", &[]),
    ("process_open_fds", "gauge", &[]),
    ("process_max_fds", "gauge", &[]),
    ("process_start_time_seconds", "gauge", &[]),
];

fn expected(mode: Option<ProxyMode>) -> Vec<Expected> {
    let mut all: Vec<Expected> = [COMMON, PROCESS].concat();
    match mode {
        Some(ProxyMode::Iptables) => all.extend([FULL_AND_PARTIAL, CONNTRACK, IPTABLES].concat()),
        // kproxy's IPVS mode syncs partially, and says so (upstream's does
        // not register the two).
        Some(ProxyMode::Ipvs) => all.extend([FULL_AND_PARTIAL, CONNTRACK, IPVS].concat()),
        Some(ProxyMode::Nftables) => all.extend([FULL_AND_PARTIAL, CONNTRACK, NFTABLES].concat()),
        // Upstream has no ebpf mode: its syncs and its conntrack-flush
        // equivalent (stale UDP flows and sockets) report as the kernel
        // modes' do, with no mode-specific family.
        Some(ProxyMode::Ebpf) => all.extend([FULL_AND_PARTIAL, CONNTRACK].concat()),
        Some(ProxyMode::Userspace) | None => {}
    }
    all
}

/// Every name upstream exports in some mode.
fn every_mode() -> Vec<&'static str> {
    [COMMON, FULL_AND_PARTIAL, CONNTRACK, IPTABLES, IPVS, NFTABLES].concat().iter().map(|e| e.0).collect()
}

const MODES: [Option<ProxyMode>; 6] = [
    Some(ProxyMode::Iptables),
    Some(ProxyMode::Ipvs),
    Some(ProxyMode::Nftables),
    Some(ProxyMode::Userspace),
    Some(ProxyMode::Ebpf),
    None,
];

/// The `# TYPE` of `name`, or `None` when it is not exported.
fn type_of<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    // Counters are declared without their `_total` suffix.
    let declared = name.strip_suffix("_total").filter(|_| !name.ends_with("endpoints_total")).unwrap_or(name);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("# TYPE {declared} ")))
        .or_else(|| text.lines().find_map(|l| l.strip_prefix(&format!("# TYPE {name} "))))
}

/// The samples of `name` (for histograms, its `_count`): labels and value.
fn samples<'a>(text: &'a str, name: &str, kind: &str) -> Vec<(Vec<&'a str>, &'a str)> {
    let sample = if kind == "histogram" { format!("{name}_count") } else { name.to_owned() };
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&sample)?;
            let (labels, value) = rest.rsplit_once(' ')?;
            let labels = labels.strip_prefix('{').and_then(|l| l.strip_suffix('}')).unwrap_or(labels);
            let mut names: Vec<&str> = labels.split(',').filter_map(|p| p.split_once('=')).map(|(k, _)| k).collect();
            names.sort();
            (labels.is_empty() || labels.starts_with(|c: char| c.is_ascii_lowercase())).then_some((names, value))
        })
        .collect()
}

#[test]
fn each_mode_exports_upstreams_metrics_for_it_at_zero_before_any_sync() {
    for mode in MODES {
        let text = Metrics::for_mode(mode, &BuildInfo::default()).encode();
        let expected = expected(mode);
        for (name, kind, labels) in &expected {
            assert_eq!(type_of(&text, name), Some(*kind), "{mode:?}: {name}\n{text}");
            let samples = samples(&text, name, kind);
            assert!(!samples.is_empty(), "{mode:?}: no sample of {name}\n{text}");
            for (names, value) in &samples {
                assert_eq!(names, labels, "{mode:?}: labels of {name}");
                if name.starts_with("kubeproxy_") {
                    assert_eq!(value.parse::<f64>().ok(), Some(0.0), "{mode:?}: {name} before any sync");
                }
            }
        }
        for name in every_mode() {
            if !expected.iter().any(|e| e.0 == name) {
                assert_eq!(type_of(&text, name), None, "{mode:?} must not export {name}");
            }
        }
    }
}

#[test]
fn probe_counters_appear_with_their_code() {
    let metrics = Metrics::for_mode(Some(ProxyMode::Nftables), &BuildInfo::default());
    metrics.healthz_total.get_or_create(&kproxy_admin::metrics::CodeLabel { code: 503 }).inc();
    let text = metrics.encode();
    assert_eq!(type_of(&text, "kubeproxy_proxy_healthz_total"), Some("counter"));
    assert!(text.contains("kubeproxy_proxy_healthz_total{code=\"503\"} 1"), "{text}");
}

#[test]
fn the_build_is_exported_as_kubernetes_build_info() {
    let build =
        BuildInfo { version: "0.3.1".into(), git_commit: "0123abc".into(), build_date: "2026-12-01T10:00:00Z".into() };
    let text = Metrics::for_mode(Some(ProxyMode::Iptables), &build).encode();
    let line = text.lines().find(|l| l.starts_with("kubernetes_build_info{")).unwrap_or_else(|| panic!("{text}"));
    for label in [
        "git_version=\"v0.3.1\"",
        "git_commit=\"0123abc\"",
        "build_date=\"2026-12-01T10:00:00Z\"",
        "major=\"0\"",
        "minor=\"3\"",
        "compiler=\"rustc\"",
    ] {
        assert!(line.contains(label), "{label} in {line}");
    }
    assert!(line.ends_with(" 1"), "{line}");
}

#[test]
fn a_failed_sync_is_counted_by_reason_and_in_the_modes_upstream_counter() {
    let metrics = Metrics::for_mode(Some(ProxyMode::Nftables), &BuildInfo::default());
    let failure = SyncFailure {
        mode: "nftables",
        reason: "EPERM",
        step: FailedStep::Transaction,
        families: &[IpFamily::V4],
        partial: false,
    };
    metrics.record_sync_failure(&failure);
    let text = metrics.encode();
    for line in [
        "kproxy_sync_proxy_rules_failures_total{mode=\"nftables\",reason=\"EPERM\"} 1",
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"} 1",
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv6\"} 0",
    ] {
        assert!(text.contains(line), "missing {line}\n{text}");
    }
}

#[test]
fn a_failed_partial_restore_counts_as_both_restore_failures() {
    let metrics = Metrics::for_mode(Some(ProxyMode::Iptables), &BuildInfo::default());
    let failure = SyncFailure {
        mode: "iptables",
        reason: "refused",
        step: FailedStep::Restore,
        families: &[IpFamily::V6],
        partial: true,
    };
    metrics.record_sync_failure(&failure);
    let text = metrics.encode();
    for line in [
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv6\"} 1",
        "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total{ip_family=\"IPv6\"} 1",
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv4\"} 0",
    ] {
        assert!(text.contains(line), "missing {line}\n{text}");
    }
}
