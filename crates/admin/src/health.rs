//! Proxy health, as upstream's ProxyHealthServer defines it.
//!
//! Healthy unless an update was queued and not applied within the timeout
//! (2 x syncPeriod): a proxy that stopped programming the node fails its
//! health check even though the process is alive. `/healthz` also fails
//! while the node is not eligible (being deleted, or tainted by the cluster
//! autoscaler); `/livez` does not look at the node.
//!
//! A source (the API server) lost for longer than the timeout makes
//! `/healthz` report itself degraded in its body, not fail: with nothing
//! arriving nothing is queued, so the rules are as fresh as kproxy can
//! make them, and cloud load balancers probe `/healthz` on every node: a
//! 503 there during an API outage would drain every node at once.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Where the admin endpoints read the time from; a test substitutes its own.
pub trait Clock: Send + Sync {
    fn now(&self) -> (Instant, SystemTime);
}

/// The real clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> (Instant, SystemTime) {
        (Instant::now(), SystemTime::now())
    }
}

#[derive(Debug)]
struct Inner {
    last_updated: Option<(Instant, SystemTime)>,
    oldest_pending_queued: Option<Instant>,
    node_eligible: bool,
    /// Parts of the source that fail, since when, and the last error.
    source_lost: BTreeMap<&'static str, (Instant, String)>,
    /// Why the last sync failed, until one succeeds.
    sync_error: Option<String>,
}

/// Shared between the runner (which reports queued and applied updates)
/// and the HTTP handlers (which report).
#[derive(Debug)]
pub struct Health {
    timeout: Duration,
    inner: Mutex<Inner>,
}

/// One answer of the health endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthReport {
    /// No update has been waiting longer than the timeout.
    pub healthy: bool,
    pub last_updated: Option<SystemTime>,
    pub node_eligible: bool,
    /// The source has not been lost for longer than the timeout.
    pub source_current: bool,
    /// What of the source is lost, and why (set when not `source_current`).
    pub source_error: Option<String>,
    /// Why the last sync failed (the kernel's error and what it refused),
    /// while no sync has succeeded since.
    pub sync_error: Option<String>,
}

impl Health {
    /// `timeout` is upstream's 2 x syncPeriod.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            inner: Mutex::new(Inner {
                last_updated: None,
                oldest_pending_queued: None,
                node_eligible: true,
                source_lost: BTreeMap::new(),
                sync_error: None,
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain timestamps behind:
        // still meaningful, so keep serving them.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A change is waiting for a sync. Only the oldest waiting one counts.
    pub fn queued_update(&self, now: Instant) {
        self.inner().oldest_pending_queued.get_or_insert(now);
    }

    /// A sync applied everything that was queued.
    pub fn updated(&self, now: (Instant, SystemTime)) {
        let mut inner = self.inner();
        inner.oldest_pending_queued = None;
        inner.last_updated = Some(now);
        inner.sync_error = None;
    }

    /// A sync failed, for `error` (the whole chain).
    pub fn sync_failed(&self, error: &str) {
        self.inner().sync_error = Some(error.to_owned());
    }

    pub fn set_node_eligible(&self, eligible: bool) {
        self.inner().node_eligible = eligible;
    }

    /// `what` of the source (a resource, say) fails; the first failure's
    /// time counts until it recovers.
    pub fn source_lost(&self, what: &'static str, now: Instant, error: String) {
        let mut inner = self.inner();
        let entry = inner.source_lost.entry(what).or_insert((now, String::new()));
        entry.1 = error;
    }

    pub fn source_recovered(&self, what: &str) {
        let mut inner = self.inner();
        if !inner.source_lost.is_empty() {
            inner.source_lost.remove(what);
        }
    }

    pub fn report(&self, now: Instant) -> HealthReport {
        let inner = self.inner();
        let expired = |since: Instant| now.saturating_duration_since(since) >= self.timeout;
        let stale = inner.oldest_pending_queued.is_some_and(expired);
        let source_error = inner
            .source_lost
            .iter()
            .filter(|(_, (since, _))| expired(*since))
            .map(|(what, (since, error))| {
                format!("{what}: failing for {}s: {error}", now.saturating_duration_since(*since).as_secs())
            })
            .reduce(|a, b| format!("{a}; {b}"));
        HealthReport {
            healthy: !stale,
            last_updated: inner.last_updated.map(|(_, wall)| wall),
            node_eligible: inner.node_eligible,
            source_current: source_error.is_none(),
            source_error,
            sync_error: inner.sync_error.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_waiting_longer_than_the_timeout_is_unhealthy() {
        let health = Health::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert!(health.report(t0).healthy, "nothing queued yet");
        health.queued_update(t0);
        health.queued_update(t0 + Duration::from_secs(50));
        assert!(health.report(t0 + Duration::from_secs(59)).healthy);
        assert!(!health.report(t0 + Duration::from_secs(60)).healthy, "the oldest queued update counts");
        health.updated((t0 + Duration::from_secs(61), SystemTime::UNIX_EPOCH));
        let report = health.report(t0 + Duration::from_secs(500));
        assert!(report.healthy);
        assert_eq!(report.last_updated, Some(SystemTime::UNIX_EPOCH));
    }

    #[test]
    fn a_source_lost_longer_than_the_timeout_is_not_current() {
        let health = Health::new(Duration::from_secs(60));
        let t0 = Instant::now();
        health.source_lost("services", t0, "connection refused".into());
        health.source_lost("services", t0 + Duration::from_secs(30), "still refused".into());
        assert!(health.report(t0 + Duration::from_secs(59)).source_current, "the first failure's time counts");
        let report = health.report(t0 + Duration::from_secs(61));
        assert!(!report.source_current);
        assert_eq!(report.source_error.as_deref(), Some("services: failing for 61s: still refused"));
        assert!(report.healthy, "the dataplane itself is fine");
        health.source_recovered("services");
        assert!(health.report(t0 + Duration::from_secs(62)).source_current);
    }
}
