//! The sync loop: events in, syncs out, at the pace the config allows.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kproxy_admin::metrics::{AnnotationLabels, FamilyLabel, SyncFailure, TableLabels};
use kproxy_admin::{Clock, Health, HealthCheck, HealthChecks, Metrics};
use kproxy_model::{Changes, IpFamily, ProxyState, ServiceName, ServicePortName};
use kproxy_state::{SourceEvent, StateBuilder};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::dataplane::{Dataplane, DataplaneError, SyncKind, SyncReport, SyncRequest};
use crate::failure::cause_of;
use crate::no_local::NoLocalEndpoints;
use crate::pacing::SyncBucket;
use crate::warnings::Warnings;

/// When to sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunnerConfig {
    /// Syncs are paced to one per this period, after a burst of
    /// `burst_syncs` (coalescing event storms).
    pub min_sync_period: Duration,
    /// Syncs that may run back to back after a quiet spell (upstream's
    /// `burstSyncs`, 2): the bucket refills one per `min_sync_period`.
    pub burst_syncs: u32,
    /// A sync runs at least this often, changes or not.
    pub sync_period: Duration,
    /// A periodic sync this long after the last full one is full (upstream
    /// `FullSyncPeriod`, one hour).
    pub full_sync_period: Duration,
    /// First retry delay after a failed sync; doubles per failure, up to
    /// `sync_period`.
    pub retry_initial: Duration,
}

impl RunnerConfig {
    pub fn new(min_sync_period: Duration, sync_period: Duration) -> Self {
        Self {
            min_sync_period,
            burst_syncs: 2,
            sync_period,
            full_sync_period: Duration::from_secs(3600),
            retry_initial: Duration::from_secs(1),
        }
    }

    fn retry_delay(&self, failures: u32) -> Duration {
        let doubled = self.retry_initial.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)));
        doubled.min(self.sync_period.max(self.retry_initial)).max(self.min_sync_period)
    }
}

/// The shared pieces the runner reports into.
pub struct RunnerHandles {
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    /// Receives a snapshot after every fold of events (cheap: the state's
    /// maps are persistent).
    pub state: watch::Sender<Arc<ProxyState>>,
    pub clock: Arc<dyn Clock>,
    /// Health-check node ports and their local endpoint counts.
    pub health_checks: Arc<HealthChecks>,
}

/// Owns the state pipeline and the dataplane for the life of the process.
pub struct Runner {
    config: RunnerConfig,
    builder: StateBuilder,
    dataplane: Box<dyn Dataplane>,
    handles: RunnerHandles,
    /// Trigger times before this are from before kproxy started: their
    /// latency says nothing about kproxy.
    started: SystemTime,
    no_local: NoLocalEndpoints,
    warnings: Warnings,
    seen_events: (u64, u64),
    // Sync bookkeeping.
    last_attempt: Option<Instant>,
    /// When the last sync returned: without a token, the next one waits
    /// `min_sync_period` from here.
    last_done: Option<Instant>,
    bucket: SyncBucket,
    last_full: Option<Instant>,
    next_full: bool,
    failures: u32,
    retry_at: Option<Instant>,
    /// Changes taken from the state but not yet applied (a failed sync's).
    unapplied: Changes,
    /// Told once, after the first successful sync.
    first_sync: Option<tokio::sync::oneshot::Sender<()>>,
    /// Receives the state of every sync that applied.
    applied: Option<watch::Sender<Option<Arc<ProxyState>>>>,
}

impl Runner {
    pub fn new(
        config: RunnerConfig,
        builder: StateBuilder,
        dataplane: Box<dyn Dataplane>,
        handles: RunnerHandles,
    ) -> Self {
        let started = handles.clock.now().1;
        // Like upstream: healthy from the start, until an update waits too long.
        handles.health.updated(handles.clock.now());
        Self {
            config,
            builder,
            dataplane,
            handles,
            started,
            no_local: NoLocalEndpoints::default(),
            warnings: Warnings::default(),
            seen_events: (0, 0),
            last_attempt: None,
            last_done: None,
            bucket: SyncBucket::new(config.min_sync_period, config.burst_syncs),
            last_full: None,
            next_full: true,
            failures: 0,
            retry_at: None,
            unapplied: Changes::default(),
            first_sync: None,
            applied: None,
        }
    }

    /// Tells `done` once the first sync has applied: the node then carries
    /// this process's rules (what another proxy left can go).
    pub fn on_first_sync(mut self, done: tokio::sync::oneshot::Sender<()>) -> Self {
        self.first_sync = Some(done);
        self
    }

    /// Sends `applied` the state of every sync that applied: what the node
    /// is programmed with (after a failed sync, the last one that worked;
    /// `None` until one has).
    pub fn on_applied(mut self, applied: watch::Sender<Option<Arc<ProxyState>>>) -> Self {
        self.applied = Some(applied);
        self
    }

    /// Runs until `shutdown` completes. The programmed state stays in place
    /// on exit (like kube-proxy: restarts must not interrupt traffic).
    pub async fn run(mut self, mut events: mpsc::Receiver<SourceEvent>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut source_open = true;
        loop {
            let due = self.next_sync_at();
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    info!(mode = self.dataplane.mode(), "shutting down; programmed rules stay in place");
                    return;
                }
                event = events.recv(), if source_open => match event {
                    Some(event) => self.receive(event, &mut events),
                    None => {
                        source_open = false;
                        warn!("event source stopped; keeping the last programmed state");
                    }
                },
                () = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    // A failed sync was logged and counted; the loop retries.
                    let _ = self.sync().await;
                }
            }
        }
    }

    /// Waits for the initial list, runs one full sync, and returns its
    /// result (`kproxy run --once`).
    pub async fn run_once(mut self, mut events: mpsc::Receiver<SourceEvent>) -> Result<(), DataplaneError> {
        while !self.builder.is_synced() {
            match events.recv().await {
                Some(event) => self.receive(event, &mut events),
                None => return Err("the event source stopped before delivering its initial list".into()),
            }
        }
        self.sync().await
    }

    fn receive(&mut self, first: SourceEvent, events: &mut mpsc::Receiver<SourceEvent>) {
        self.builder.apply(first);
        // Drain what is already queued: one wake-up per burst, not per event.
        while let Ok(event) = events.try_recv() {
            self.builder.apply(event);
        }
        self.observe_pending();
    }

    fn observe_pending(&mut self) {
        let metrics = &self.handles.metrics;
        let counts = self.builder.event_counts();
        metrics.service_changes_total.inc_by(counts.service_events - self.seen_events.0);
        metrics.endpoint_changes_total.inc_by(counts.endpoint_events - self.seen_events.1);
        self.seen_events = (counts.service_events, counts.endpoint_events);
        let (services, endpoints) = self.builder.pending_counts();
        metrics.service_changes_pending.set(i64::try_from(services).unwrap_or(i64::MAX));
        metrics.endpoint_changes_pending.set(i64::try_from(endpoints).unwrap_or(i64::MAX));
        if self.builder.has_pending() {
            let (now, wall) = self.handles.clock.now();
            self.handles.health.queued_update(now);
            for family in IpFamily::ALL {
                let label = FamilyLabel { ip_family: family.into() };
                metrics.sync_last_queued_timestamp.get_or_create(&label).set(unix_seconds(wall));
            }
        }
    }

    /// When the next sync is due, or `None` while waiting for the initial
    /// list.
    fn next_sync_at(&self) -> Option<Instant> {
        if !self.builder.is_synced() {
            return None;
        }
        let Some(last) = self.last_attempt else { return Some(Instant::now()) };
        let wanted = if let Some(retry) = self.retry_at {
            retry
        } else if self.builder.has_pending() || !self.unapplied.is_empty() {
            Instant::now()
        } else {
            last + self.config.sync_period
        };
        Some(self.paced(wanted))
    }

    /// When a sync wanted at `wanted` may start. Like upstream's runner:
    /// at once with a token; without one, `min_sync_period` after the last
    /// sync returned (a token has always refilled by then: the last sync
    /// took one no later).
    fn paced(&self, wanted: Instant) -> Instant {
        if self.bucket.has_token(wanted) {
            return wanted;
        }
        let after_last = self.last_done.map_or(wanted, |done| done + self.config.min_sync_period);
        wanted.max(after_last).max(self.bucket.token_at().unwrap_or(wanted))
    }

    async fn sync(&mut self) -> Result<(), DataplaneError> {
        let now = Instant::now();
        // The initial sync, like upstream's (the informers' "synced"
        // handlers call it directly), leaves the bucket full.
        if self.last_attempt.is_some() {
            self.bucket.take(now);
        }
        self.last_attempt = Some(now);
        let changes = self.builder.take_changes();
        self.report_warnings(&changes);
        self.unapplied.merge(changes);
        self.handles.state.send_replace(Arc::new(self.builder.state().clone()));
        self.handles.health.set_node_eligible(self.builder.state().node.eligible);
        let memory = self.builder.memory();
        self.handles.metrics.record_state_memory(&memory.parts(), &memory.objects());
        self.observe_pending();

        let full_due = self.last_full.is_none_or(|t| now.duration_since(t) >= self.config.full_sync_period);
        let kind = if self.next_full || full_due { SyncKind::Full } else { SyncKind::Partial };
        let span = info_span!("sync", mode = self.dataplane.mode(), full = kind == SyncKind::Full);
        let (services, endpoints) = (self.unapplied.service_changes, self.unapplied.endpoint_changes);
        let request = SyncRequest { state: self.builder.state(), changes: &self.unapplied, kind };
        let result = self.dataplane.sync(request).instrument(span).await;
        self.last_done = Some(Instant::now());
        let took = now.elapsed();
        match result {
            Ok(report) => {
                debug!(took_ms = took.as_millis() as u64, services, endpoints, summary = %report.summary, "sync applied");
                for skipped in &report.skipped {
                    warn!(reason = %skipped, "not programmed");
                }
                self.handles.metrics.skipped.inc_by(report.skipped.len() as u64);
                record_report(&self.handles.metrics, &report);
                self.succeeded(now, kind, took);
                Ok(())
            }
            Err(e) => {
                self.failures += 1;
                let delay = self.config.retry_delay(self.failures);
                self.retry_at = Some(now + delay);
                self.next_full = true;
                let cause = cause_of(e.as_ref());
                self.handles.metrics.record_sync_failure(&SyncFailure {
                    mode: self.dataplane.mode(),
                    reason: &cause.reason,
                    step: cause.step,
                    families: &cause.families,
                    partial: kind == SyncKind::Partial,
                });
                self.handles.health.sync_failed(&cause.text);
                error!(
                    error = %cause.text,
                    reason = %cause.reason,
                    object = cause.object.as_deref().unwrap_or(""),
                    failures = self.failures,
                    retry_in_ms = delay.as_millis() as u64,
                    "sync failed; the next attempt is a full sync"
                );
                Err(e)
            }
        }
    }

    fn succeeded(&mut self, now: Instant, kind: SyncKind, took: Duration) {
        // Wall time for timestamps and latencies; `now` (the runner's clock)
        // for scheduling.
        let wall = self.handles.clock.now().1;
        let metrics = &self.handles.metrics;
        metrics.observe_sync(took, kind == SyncKind::Full);
        self.no_local.update(self.builder.state(), &self.unapplied);
        for family in IpFamily::ALL {
            let label = FamilyLabel { ip_family: family.into() };
            metrics.sync_last_timestamp.get_or_create(&label).set(unix_seconds(wall));
            let (internal, external) = self.no_local.counts(family);
            for (policy, count) in [("internal", internal), ("external", external)] {
                let labels =
                    kproxy_admin::metrics::PolicyLabels { traffic_policy: policy.into(), ip_family: family.into() };
                metrics.no_local_endpoints.get_or_create(&labels).set(i64::try_from(count).unwrap_or(i64::MAX));
            }
        }
        for (service, times) in &self.unapplied.trigger_times {
            let state = self.builder.state();
            let families = IpFamily::ALL.into_iter().filter(|f| state.family(*f).has_service(service));
            for family in families {
                let label = FamilyLabel { ip_family: family.into() };
                for time in times.iter().filter(|t| **t >= self.started) {
                    let latency = wall.duration_since(*time).unwrap_or_default().as_secs_f64();
                    metrics.network_programming_duration.get_or_create(&label).observe(latency);
                }
            }
        }
        self.record_health_checks();
        self.handles.health.updated(self.handles.clock.now());
        self.unapplied = Changes::default();
        self.failures = 0;
        self.retry_at = None;
        self.next_full = false;
        if kind == SyncKind::Full {
            self.last_full = Some(now);
        }
        if let Some(applied) = &self.applied {
            // The state this sync applied is the one `sync` published as it
            // began (nothing folds in while it runs): share it, do not copy.
            applied.send_replace(Some(self.handles.state.borrow().clone()));
        }
        if let Some(done) = self.first_sync.take() {
            // Nobody waiting is fine.
            let _ = done.send(());
        }
    }
}

impl Runner {
    /// Logs and counts the annotation warnings `changes` brought, once each
    /// (the Service is served with the annotation's default).
    fn report_warnings(&mut self, changes: &Changes) {
        for (service, w) in self.warnings.update(self.builder.state(), changes) {
            warn!(
                %service,
                annotation = %w.annotation,
                reason = %w.reason,
                fallback = %w.fallback,
                "service annotation not honoured; using its default"
            );
            let labels = AnnotationLabels { annotation: w.kind.as_str(), problem: w.problem.as_str() };
            self.handles.metrics.annotation_fallbacks.get_or_create(&labels).inc();
        }
    }

    /// Updates the health-check registry for the services this sync
    /// changed: their node port and how many ready endpoints this node has.
    fn record_health_checks(&self) {
        let state = self.builder.state();
        let services: std::collections::BTreeSet<&ServiceName> =
            self.unapplied.service_ports.iter().map(|(_, name)| &name.service).collect();
        for service in services {
            let ports: Vec<&kproxy_model::ServicePort> = IpFamily::ALL
                .into_iter()
                .flat_map(|f| {
                    let start = ServicePortName::first_of(service.clone());
                    state
                        .family(f)
                        .service_ports
                        .range(start..)
                        .take_while(|(k, _)| k.service == *service)
                        .map(|(_, p)| p.as_ref())
                })
                .collect();
            let port = ports.iter().find_map(|p| p.health_check_node_port);
            let mut local: Vec<std::net::IpAddr> =
                ports.iter().flat_map(|p| &p.local_endpoints).filter(|e| e.ready).map(|e| e.ip).collect();
            local.sort();
            local.dedup();
            let check = port.map(|port| HealthCheck { port, local_endpoints: local.len() });
            self.handles.health_checks.set(service.clone(), check);
        }
    }
}

/// The mode's own figures of a successful sync: iptables rule counts and
/// the conntrack cleanups.
fn record_report(metrics: &Metrics, report: &SyncReport) {
    for count in &report.rules {
        let labels = TableLabels { ip_family: count.family.into(), table: count.table };
        metrics.iptables_rules_total.get_or_create(&labels).set(i64::try_from(count.total).unwrap_or(i64::MAX));
        metrics.iptables_rules_last.get_or_create(&labels).set(i64::try_from(count.written).unwrap_or(i64::MAX));
    }
    for run in &report.conntrack {
        let label = FamilyLabel::from(run.family);
        metrics.conntrack_reconciler_duration.get_or_create(&label).observe(run.took.as_secs_f64());
        metrics.conntrack_reconciler_deleted.get_or_create(&label).inc_by(run.deleted as u64);
    }
}

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
