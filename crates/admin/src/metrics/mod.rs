//! Prometheus metrics with upstream kube-proxy's names (`kubeproxy_*`),
//! labels and buckets (as of v1.33), registered for the running mode only
//! as upstream's `RegisterMetrics(mode)` does; plus `process_*`,
//! `kubernetes_build_info` and kproxy's own (`kproxy_*`).
//!
//! Failure counters are touched for both IP families at registration, so
//! they are exported at 0 before anything fails (an alert on `rate()`
//! needs the series to exist).

mod build_info;
mod labels;
mod process;
mod registration;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use kproxy_config::ProxyMode;
use kproxy_model::IpFamily;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use build_info::BuildInfo;
pub use labels::{
    AnnotationLabels, BuildInfoLabels, CodeLabel, FailureLabels, FamilyLabel, FamilyValue, KindLabel, PartLabel,
    PolicyLabels, TableLabels,
};
pub use process::{ProcessCollector, ProcessFigures};

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, AtomicU64>;

fn sync_buckets() -> Histogram {
    // Upstream: ExponentialBuckets(0.001, 2, 15), 1 ms to 16 s (the sync
    // durations and the conntrack reconciler's).
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

/// Every metric kproxy exports. Families of other modes exist (recording
/// into them is harmless) but are not registered, so never exported.
pub struct Metrics {
    registry: Registry,
    mode: Option<ProxyMode>,
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
    /// iptables mode: failed `iptables-restore` runs. IPVS mode: failed
    /// transactions of its companion nftables table, which plays the part
    /// upstream's iptables rules play there.
    pub iptables_restore_failures: Family<FamilyLabel, Counter>,
    /// iptables mode: failed partial syncs (the retry is a full one).
    pub iptables_partial_restore_failures: Family<FamilyLabel, Counter>,
    /// iptables mode: rules kproxy owns, per family and table.
    pub iptables_rules_total: Family<TableLabels, Gauge>,
    /// iptables mode: rules written by the last sync, per family and table.
    pub iptables_rules_last: Family<TableLabels, Gauge>,
    pub nftables_sync_failures: Family<FamilyLabel, Counter>,
    /// Stays 0: kproxy deletes stale chains in the sync's own transaction,
    /// never in a separate cleanup that could fail alone.
    pub nftables_cleanup_failures: Family<FamilyLabel, Counter>,
    pub conntrack_reconciler_duration: HistogramFamily<FamilyLabel>,
    pub conntrack_reconciler_deleted: Family<FamilyLabel, Counter>,
    /// Failed syncs by mode and reason (kproxy's own).
    pub sync_failures: Family<FailureLabels, Counter>,
    /// Manifest documents skipped because they failed to parse or validate.
    pub manifest_invalid_documents: Counter,
    /// Reads of the manifest folder (the first, on changes, rescans).
    pub manifest_reads: Counter,
    /// Objects (or parts of them) a dataplane could not program.
    pub skipped: Counter,
    /// Service annotations not honoured and replaced by their default.
    pub annotation_fallbacks: Family<AnnotationLabels, Counter>,
    /// Estimated heap bytes of the state pipeline's records, by part.
    pub state_bytes: Family<PartLabel, Gauge>,
    /// How many records those bytes are for, by kind.
    pub state_objects: Family<KindLabel, Gauge>,
}

impl Metrics {
    /// Upstream's common metrics, with no mode's own (tests, dry runs).
    pub fn new() -> Self {
        Self::for_mode(None, &BuildInfo::default())
    }

    /// The metrics of `mode` (`None`: a dry run, which programs nothing),
    /// with the build's `kubernetes_build_info` and the `process_*`
    /// metrics of this process.
    pub fn for_mode(mode: Option<ProxyMode>, build: &BuildInfo) -> Self {
        let mut m = Self {
            registry: Registry::default(),
            mode,
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
            iptables_restore_failures: Family::default(),
            iptables_partial_restore_failures: Family::default(),
            iptables_rules_total: Family::default(),
            iptables_rules_last: Family::default(),
            nftables_sync_failures: Family::default(),
            nftables_cleanup_failures: Family::default(),
            conntrack_reconciler_duration: HistogramFamily::new_with_constructor(sync_buckets),
            conntrack_reconciler_deleted: Family::default(),
            sync_failures: Family::default(),
            manifest_invalid_documents: Counter::default(),
            manifest_reads: Counter::default(),
            skipped: Counter::default(),
            annotation_fallbacks: Family::default(),
            state_bytes: Family::default(),
            state_objects: Family::default(),
        };
        m.touch();
        let mut registry = Registry::default();
        m.register_all(&mut registry, mode);
        let build_info: Family<BuildInfoLabels, Gauge> = Family::default();
        build_info.get_or_create(&build.labels()).set(1);
        registry.register(
            "kubernetes_build_info",
            "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
            build_info,
        );
        registry.register_collector(Box::new(ProcessCollector::current()));
        m.registry = registry;
        m
    }

    /// The mode the metrics were registered for.
    pub fn mode(&self) -> Option<ProxyMode> {
        self.mode
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
            let label = FamilyLabel::from(family);
            self.sync_duration.get_or_create(&label).observe(took.as_secs_f64());
            let by_kind = if full { &self.sync_full_duration } else { &self.sync_partial_duration };
            by_kind.get_or_create(&label).observe(took.as_secs_f64());
        }
    }
}

/// The step of a sync that failed, as upstream's counters tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedStep {
    /// iptables mode's `iptables-restore`; IPVS mode's companion table.
    Restore,
    /// nftables mode's transaction.
    Transaction,
    /// Anything else (a tool missing, a netlink socket refused).
    Other,
}

/// What a failed sync reports to the metrics.
#[derive(Clone, Copy, Debug)]
pub struct SyncFailure<'a> {
    /// The mode's name, as `--proxy-mode` spells it.
    pub mode: &'a str,
    /// Few words: the errno name (`EPERM`) or the step (`timeout`).
    pub reason: &'a str,
    pub step: FailedStep,
    /// The families the failed step programmed.
    pub families: &'a [IpFamily],
    /// The sync was a partial one.
    pub partial: bool,
}

impl Metrics {
    /// Counts a failed sync in kproxy's counter and in upstream's counter
    /// of the failed step (registered only in the modes that have it).
    pub fn record_sync_failure(&self, failure: &SyncFailure<'_>) {
        let labels = FailureLabels { mode: failure.mode.to_owned(), reason: failure.reason.to_owned() };
        self.sync_failures.get_or_create(&labels).inc();
        for family in failure.families {
            let label = FamilyLabel::from(*family);
            match failure.step {
                FailedStep::Restore => drop(self.iptables_restore_failures.get_or_create(&label).inc()),
                FailedStep::Transaction => drop(self.nftables_sync_failures.get_or_create(&label).inc()),
                FailedStep::Other => {}
            }
            if failure.partial {
                self.iptables_partial_restore_failures.get_or_create(&label).inc();
            }
        }
    }
}

impl Metrics {
    /// Sets `kproxy_state_bytes` and `kproxy_state_objects`.
    pub fn record_state_memory(&self, bytes: &[(&'static str, usize)], objects: &[(&'static str, usize)]) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for (part, n) in bytes {
            self.state_bytes.get_or_create(&PartLabel { part }).set(gauge(*n));
        }
        for (kind, n) in objects {
            self.state_objects.get_or_create(&KindLabel { kind }).set(gauge(*n));
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
