//! Sync pacing: a bucket of syncs, as upstream kube-proxy's
//! bounded-frequency runner paces its proxiers (`pkg/util/async`, created
//! with `burstSyncs` 2 through Kubernetes 1.33). Arithmetic on instants
//! only: the runner asks when a sync may start and says when one did.

use std::time::Duration;

use tokio::time::Instant;

/// Holds up to `burst` syncs and refills continuously, one sync per
/// `period` (client-go's token bucket with `qps = 1 / period`). Starts
/// full, so after a quiet spell `burst` syncs may run back to back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SyncBucket {
    period: Duration,
    burst: u32,
    /// When the bucket is full again; `None` until the first sync is taken.
    /// One instant instead of a fractional token count keeps the arithmetic
    /// exact: a token is there once `full_at` is at most `burst - 1`
    /// periods away.
    full_at: Option<Instant>,
}

impl SyncBucket {
    /// A full bucket; a `burst` of 0 counts as 1.
    pub(crate) fn new(period: Duration, burst: u32) -> Self {
        Self { period, burst: burst.max(1), full_at: None }
    }

    /// When the next token is there; `None` while the bucket has one now
    /// and for as long as none is taken.
    pub(crate) fn token_at(&self) -> Option<Instant> {
        let full_at = self.full_at?;
        // Before the clock's first instant means "long ago".
        full_at.checked_sub(self.period * (self.burst - 1))
    }

    /// Whether a token is there at `at` (no later than the next `take`).
    pub(crate) fn has_token(&self, at: Instant) -> bool {
        self.token_at().is_none_or(|t| t <= at)
    }

    /// Takes the token of a sync starting at `now`.
    pub(crate) fn take(&mut self, now: Instant) {
        let from = self.full_at.map_or(now, |full| full.max(now));
        self.full_at = Some(from + self.period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_full_bucket_gives_the_burst_then_one_token_per_period() {
        let t0 = Instant::now();
        let mut bucket = SyncBucket::new(SECOND, 2);
        assert!(bucket.has_token(t0));
        bucket.take(t0);
        assert!(bucket.has_token(t0));
        bucket.take(t0);
        assert_eq!(bucket.token_at(), Some(t0 + SECOND));
        assert!(!bucket.has_token(t0 + SECOND - Duration::from_millis(1)));
        bucket.take(t0 + SECOND);
        assert_eq!(bucket.token_at(), Some(t0 + 2 * SECOND));
    }

    #[test]
    fn tokens_refill_in_fractions_of_a_period() {
        let t0 = Instant::now();
        let mut bucket = SyncBucket::new(SECOND, 2);
        bucket.take(t0);
        // 300 ms later the bucket holds 1.3 tokens: one more sync leaves
        // 0.3, and the next token is whole 700 ms after that.
        bucket.take(t0 + Duration::from_millis(300));
        assert_eq!(bucket.token_at(), Some(t0 + Duration::from_millis(1000)));
    }

    #[test]
    fn a_quiet_spell_refills_no_more_than_the_burst() {
        let t0 = Instant::now();
        let mut bucket = SyncBucket::new(SECOND, 2);
        bucket.take(t0);
        let later = t0 + 10 * SECOND;
        bucket.take(later);
        bucket.take(later);
        assert_eq!(bucket.token_at(), Some(later + SECOND));
    }

    #[test]
    fn a_zero_period_never_holds_a_sync_back() {
        let t0 = Instant::now();
        let mut bucket = SyncBucket::new(Duration::ZERO, 2);
        for _ in 0..5 {
            bucket.take(t0);
        }
        assert!(bucket.has_token(t0));
    }

    #[test]
    fn a_burst_of_one_holds_to_the_period() {
        let t0 = Instant::now();
        let mut bucket = SyncBucket::new(SECOND, 1);
        bucket.take(t0);
        assert_eq!(bucket.token_at(), Some(t0 + SECOND));
    }
}
