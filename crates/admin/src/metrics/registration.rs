//! Which of [`Metrics`]' families each mode registers (upstream's
//! `RegisterMetrics(mode)`), and the series created at 0 up front.

use kproxy_config::ProxyMode;
use kproxy_model::IpFamily;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::{FamilyLabel, Metrics, PolicyLabels, TableLabels};

/// Which modes a metric is registered in.
#[derive(Clone, Copy)]
enum Modes {
    All,
    /// The kernel modes: iptables, IPVS, nftables and ebpf.
    Kernel,
    /// Modes that sync partially: iptables and nftables, as upstream's,
    /// and kproxy's IPVS and ebpf modes (upstream's IPVS mode always syncs in full
    /// and does not register the full and partial durations).
    FullAndPartial,
    Only(ProxyMode),
}

impl Modes {
    fn include(self, mode: Option<ProxyMode>) -> bool {
        match (self, mode) {
            (Modes::All, _) => true,
            (_, None) => false,
            (Modes::Kernel, Some(m)) => m != ProxyMode::Userspace,
            (Modes::FullAndPartial, Some(m)) => m != ProxyMode::Userspace,
            (Modes::Only(only), Some(m)) => only == m,
        }
    }
}

impl Metrics {
    /// Registers upstream's metrics that `mode` has (counters named
    /// without `_total`, which the encoder appends), then kproxy's own.
    pub(super) fn register_all(&self, r: &mut Registry, mode: Option<ProxyMode>) {
        let mut upstream = |name: &str, help: &str, modes: Modes, metric: Box<dyn EncodeMetric + Send + Sync>| {
            if modes.include(mode) {
                r.register(name, help, MetricBox(metric));
            }
        };
        upstream(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            Modes::All,
            Box::new(self.sync_duration.clone()),
        );
        upstream(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            Modes::FullAndPartial,
            Box::new(self.sync_full_duration.clone()),
        );
        upstream(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            Modes::FullAndPartial,
            Box::new(self.sync_partial_duration.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            Modes::All,
            Box::new(self.sync_last_timestamp.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
            Modes::All,
            Box::new(self.sync_last_queued_timestamp.clone()),
        );
        upstream(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            Modes::All,
            Box::new(self.network_programming_duration.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
            Modes::All,
            Box::new(self.endpoint_changes_pending.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "Cumulative proxy rules Endpoint changes",
            Modes::All,
            Box::new(self.endpoint_changes_total.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
            Modes::All,
            Box::new(self.service_changes_pending.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Cumulative proxy rules Service changes",
            Modes::All,
            Box::new(self.service_changes_total.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints",
            Modes::All,
            Box::new(self.no_local_endpoints.clone()),
        );
        upstream(
            "kubeproxy_proxy_healthz",
            "Cumulative proxy healthz HTTP status",
            Modes::All,
            Box::new(self.healthz_total.clone()),
        );
        upstream(
            "kubeproxy_proxy_livez",
            "Cumulative proxy livez HTTP status",
            Modes::All,
            Box::new(self.livez_total.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures",
            "Cumulative proxy iptables restore failures",
            Modes::Only(ProxyMode::Iptables),
            Box::new(self.iptables_restore_failures.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures",
            "Cumulative proxy iptables partial restore failures",
            Modes::Only(ProxyMode::Iptables),
            Box::new(self.iptables_partial_restore_failures.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_iptables_total",
            "Total number of iptables rules owned by kube-proxy",
            Modes::Only(ProxyMode::Iptables),
            Box::new(self.iptables_rules_total.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_iptables_last",
            "Number of iptables rules written by kube-proxy in last sync",
            Modes::Only(ProxyMode::Iptables),
            Box::new(self.iptables_rules_last.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures",
            "Cumulative proxy iptables restore failures",
            Modes::Only(ProxyMode::Ipvs),
            Box::new(self.iptables_restore_failures.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures",
            "Cumulative proxy nftables sync failures",
            Modes::Only(ProxyMode::Nftables),
            Box::new(self.nftables_sync_failures.clone()),
        );
        upstream(
            "kubeproxy_sync_proxy_rules_nftables_cleanup_failures",
            "Cumulative proxy nftables cleanup failures",
            Modes::Only(ProxyMode::Nftables),
            Box::new(self.nftables_cleanup_failures.clone()),
        );
        upstream(
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "ReconcileConntrackFlowsLatency latency in seconds",
            Modes::Kernel,
            Box::new(self.conntrack_reconciler_duration.clone()),
        );
        upstream(
            "kubeproxy_conntrack_reconciler_deleted_entries",
            "Cumulative conntrack flows deleted by conntrack reconciler",
            Modes::Kernel,
            Box::new(self.conntrack_reconciler_deleted.clone()),
        );
        r.register(
            "kproxy_sync_proxy_rules_failures",
            "Failed syncs, by proxy mode and reason (the kernel's errno name, or the step that failed); the full error is in the log and in /healthz",
            self.sync_failures.clone(),
        );
        r.register(
            "kproxy_manifest_invalid_documents",
            "Manifest documents skipped because they failed to parse or validate",
            self.manifest_invalid_documents.clone(),
        );
        r.register(
            "kproxy_manifest_reads",
            "Reads of the manifest folder: the first, one per burst of changes, and the periodic rescans",
            self.manifest_reads.clone(),
        );
        r.register(
            "kproxy_sync_skipped_objects",
            "Services or frontends a dataplane could not program (each reported once, with the reason, in the log)",
            self.skipped.clone(),
        );
        r.register(
            "kproxy_annotation_fallbacks",
            "kproxy.io annotations of Services that are invalid or not supported by the proxy mode, replaced by their default (each counted once per change, with a warning in the log and in /state)",
            self.annotation_fallbacks.clone(),
        );
        r.register(
            "kproxy_state_bytes",
            "Estimated heap bytes of the records the state pipeline holds, by part (services, endpoints, pods, state: the ProxyState, names: interned strings); set after each sync",
            self.state_bytes.clone(),
        );
        r.register(
            "kproxy_state_objects",
            "Records the state pipeline holds, by kind (services, endpoint_slices, endpoints, pods, service_ports, names); set after each sync",
            self.state_objects.clone(),
        );
    }

    /// Creates every series whose labels are known in advance at 0, so that
    /// each metric is exported, with its labels, before the first sync.
    pub(super) fn touch(&self) {
        for family in IpFamily::ALL {
            let label = FamilyLabel::from(family);
            for counter in [
                &self.iptables_restore_failures,
                &self.iptables_partial_restore_failures,
                &self.nftables_sync_failures,
                &self.nftables_cleanup_failures,
                &self.conntrack_reconciler_deleted,
            ] {
                drop(counter.get_or_create(&label));
            }
            for histogram in [
                &self.sync_duration,
                &self.sync_full_duration,
                &self.sync_partial_duration,
                &self.network_programming_duration,
                &self.conntrack_reconciler_duration,
            ] {
                drop(histogram.get_or_create(&label));
            }
            for gauge in [&self.sync_last_timestamp, &self.sync_last_queued_timestamp] {
                drop(gauge.get_or_create(&label));
            }
            for traffic_policy in ["internal", "external"] {
                let labels = PolicyLabels { traffic_policy: traffic_policy.into(), ip_family: family.into() };
                drop(self.no_local_endpoints.get_or_create(&labels));
            }
            for table in ["filter", "nat"] {
                let labels = TableLabels { ip_family: family.into(), table };
                drop(self.iptables_rules_total.get_or_create(&labels));
                drop(self.iptables_rules_last.get_or_create(&labels));
            }
        }
    }
}

/// A metric of any type, boxed so one table can list them all.
struct MetricBox(Box<dyn EncodeMetric + Send + Sync>);

impl std::fmt::Debug for MetricBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricBox")
    }
}

impl EncodeMetric for MetricBox {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
