//! Proxy health, as upstream's ProxyHealthServer defines it.
//!
//! Healthy unless an update was queued and not applied within the timeout
//! (2 x syncPeriod): a proxy that stopped programming the node fails its
//! health check even though the process is alive. `/healthz` also fails
//! while the node is not eligible (being deleted, or tainted by the cluster
//! autoscaler); `/livez` does not look at the node.

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
}

/// Shared between the runner (which reports queued and applied updates)
/// and the HTTP handlers (which report).
#[derive(Debug)]
pub struct Health {
    timeout: Duration,
    inner: Mutex<Inner>,
}

/// One answer of the health endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthReport {
    /// No update has been waiting longer than the timeout.
    pub healthy: bool,
    pub last_updated: Option<SystemTime>,
    pub node_eligible: bool,
}

impl Health {
    /// `timeout` is upstream's 2 x syncPeriod.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            inner: Mutex::new(Inner { last_updated: None, oldest_pending_queued: None, node_eligible: true }),
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
    }

    pub fn set_node_eligible(&self, eligible: bool) {
        self.inner().node_eligible = eligible;
    }

    pub fn report(&self, now: Instant) -> HealthReport {
        let inner = self.inner();
        let stale =
            inner.oldest_pending_queued.is_some_and(|queued| now.saturating_duration_since(queued) >= self.timeout);
        HealthReport {
            healthy: !stale,
            last_updated: inner.last_updated.map(|(_, wall)| wall),
            node_eligible: inner.node_eligible,
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
}
