//! Prometheus metrics with upstream kube-proxy's names (`kubeproxy_*`),
//! plus kproxy's own (`kproxy_*`).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use kproxy_model::IpFamily;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(clippy::upper_case_acronyms)]
pub enum FamilyValue {
    IPv4,
    IPv6,
}

impl From<IpFamily> for FamilyValue {
    fn from(family: IpFamily) -> Self {
        match family {
            IpFamily::V4 => FamilyValue::IPv4,
            IpFamily::V6 => FamilyValue::IPv6,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabel {
    pub ip_family: FamilyValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// `internal` or `external`.
    pub traffic_policy: String,
    pub ip_family: FamilyValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnnotationLabels {
    /// `kproxy.io/scheduler`, `kproxy.io/weights` or `kproxy.io/health-check`
    /// (for every `kproxy.io/health-check-*` setting too).
    pub annotation: &'static str,
    /// `invalid` (the value) or `unsupported` (by the running mode).
    pub problem: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, AtomicU64>;

fn sync_buckets() -> Histogram {
    // Upstream: ExponentialBuckets(0.001, 2, 15), 1 ms to 16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn programming_buckets() -> Histogram {
    // Upstream: 0, 0.25, 0.5, 1..59 by 1, 60..115 by 5, 120..300 by 30.
    let mut buckets = vec![0.0, 0.25, 0.5];
    buckets.extend((1..60).map(f64::from));
    buckets.extend((60..120).step_by(5).map(f64::from));
    buckets.extend((120..=300).step_by(30).map(f64::from));
    Histogram::new(buckets)
}

/// Every metric kproxy exports, registered once.
pub struct Metrics {
    registry: Registry,
    pub sync_duration: HistogramFamily<FamilyLabel>,
    pub sync_full_duration: HistogramFamily<FamilyLabel>,
    pub sync_partial_duration: HistogramFamily<FamilyLabel>,
    pub sync_last_timestamp: Family<FamilyLabel, FloatGauge>,
    pub sync_last_queued_timestamp: Family<FamilyLabel, FloatGauge>,
    pub network_programming_duration: HistogramFamily<FamilyLabel>,
    pub endpoint_changes_pending: Gauge,
    pub endpoint_changes_total: Counter,
    pub service_changes_pending: Gauge,
    pub service_changes_total: Counter,
    pub no_local_endpoints: Family<PolicyLabels, Gauge>,
    pub healthz_total: Family<CodeLabel, Counter>,
    pub livez_total: Family<CodeLabel, Counter>,
    pub sync_failures: Family<ModeLabel, Counter>,
    /// Manifest documents skipped because they failed to parse or validate.
    pub manifest_invalid_documents: Counter,
    /// Reads of the manifest folder (the first, on changes, rescans).
    pub manifest_reads: Counter,
    /// Objects (or parts of them) a dataplane could not program.
    pub skipped: Counter,
    /// Service annotations not honoured and replaced by their default.
    pub annotation_fallbacks: Family<AnnotationLabels, Counter>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            sync_duration: HistogramFamily::new_with_constructor(sync_buckets),
            sync_full_duration: HistogramFamily::new_with_constructor(sync_buckets),
            sync_partial_duration: HistogramFamily::new_with_constructor(sync_buckets),
            sync_last_timestamp: Family::default(),
            sync_last_queued_timestamp: Family::default(),
            network_programming_duration: HistogramFamily::new_with_constructor(programming_buckets),
            endpoint_changes_pending: Gauge::default(),
            endpoint_changes_total: Counter::default(),
            service_changes_pending: Gauge::default(),
            service_changes_total: Counter::default(),
            no_local_endpoints: Family::default(),
            healthz_total: Family::default(),
            livez_total: Family::default(),
            sync_failures: Family::default(),
            manifest_invalid_documents: Counter::default(),
            manifest_reads: Counter::default(),
            skipped: Counter::default(),
            annotation_fallbacks: Family::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            m.sync_duration.clone(),
        );
        r.register(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            m.sync_full_duration.clone(),
        );
        r.register(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            m.sync_partial_duration.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            m.sync_last_timestamp.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
            m.sync_last_queued_timestamp.clone(),
        );
        r.register(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            m.network_programming_duration.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
            m.endpoint_changes_pending.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "Cumulative proxy rules Endpoint changes",
            m.endpoint_changes_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
            m.service_changes_pending.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Cumulative proxy rules Service changes",
            m.service_changes_total.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints",
            m.no_local_endpoints.clone(),
        );
        r.register("kubeproxy_proxy_healthz", "Cumulative proxy healthz HTTP status", m.healthz_total.clone());
        r.register("kubeproxy_proxy_livez", "Cumulative proxy livez HTTP status", m.livez_total.clone());
        r.register("kproxy_sync_proxy_rules_failures", "Failed syncs, by proxy mode", m.sync_failures.clone());
        r.register(
            "kproxy_manifest_invalid_documents",
            "Manifest documents skipped because they failed to parse or validate",
            m.manifest_invalid_documents.clone(),
        );
        r.register(
            "kproxy_manifest_reads",
            "Reads of the manifest folder: the first, one per burst of changes, and the periodic rescans",
            m.manifest_reads.clone(),
        );
        r.register(
            "kproxy_sync_skipped_objects",
            "Services or frontends a dataplane could not program (each reported once, with the reason, in the log)",
            m.skipped.clone(),
        );
        r.register(
            "kproxy_annotation_fallbacks",
            "kproxy.io annotations of Services that are invalid or not supported by the proxy mode, replaced by their default (each counted once per change, with a warning in the log and in /state)",
            m.annotation_fallbacks.clone(),
        );
        Self { registry, ..m }
    }

    /// Adds metrics of another crate (a source's, say) to the registry.
    pub fn register(&mut self, add: impl FnOnce(&mut Registry)) {
        add(&mut self.registry);
    }

    /// The `Content-Type` of [`Metrics::encode`]'s output.
    pub const CONTENT_TYPE: &'static str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

    /// The registry in Prometheus text format (version 0.0.4).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// Records one successful sync of both families.
    pub fn observe_sync(&self, took: Duration, full: bool) {
        for family in IpFamily::ALL {
            let label = FamilyLabel { ip_family: family.into() };
            self.sync_duration.get_or_create(&label).observe(took.as_secs_f64());
            let by_kind = if full { &self.sync_full_duration } else { &self.sync_partial_duration };
            by_kind.get_or_create(&label).observe(took.as_secs_f64());
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
