//! Stale UDP conntrack entries, deleted after a sync (both kernel modes).

use std::collections::HashSet;
use std::net::SocketAddr;

use kproxy_model::{Changes, IpFamily};
use kproxy_netlink::conntrack::{self, Flow};
use tracing::{debug, warn};

use crate::dataplane::ConntrackCleanup;

/// Deletes the conntrack entries that would keep clients on a UDP endpoint
/// no longer used, or on a rejection cached before a frontend had
/// endpoints (SEMANTICS.md, "Conntrack"): one ctnetlink dump of the UDP
/// flows per family that has any, however many frontends changed.
/// Failures are logged, not fatal: the rules are right; only stale flows
/// may linger. Returns what each family's cleanup did.
pub(crate) async fn flush_stale_udp(changes: &Changes) -> Vec<ConntrackCleanup> {
    let mut runs = Vec::new();
    for family in IpFamily::ALL {
        let frontends: HashSet<SocketAddr> =
            changes.stale_udp_frontends.iter().copied().filter(|f| IpFamily::of(&f.ip()) == family).collect();
        let pairs: HashSet<(SocketAddr, SocketAddr)> = changes
            .stale_udp_endpoints
            .iter()
            .filter(|s| IpFamily::of(&s.frontend.ip()) == family)
            .map(|s| (s.frontend, s.endpoint))
            .collect();
        if frontends.is_empty() && pairs.is_empty() {
            continue;
        }
        let started = std::time::Instant::now();
        let stale = move |f: &Flow| frontends.contains(&f.orig_dst) || pairs.contains(&(f.orig_dst, f.reply_src));
        let result = tokio::task::spawn_blocking(move || conntrack::delete_udp(family, stale))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        match result {
            Ok(n) => {
                debug!(%family, deleted = n, "stale UDP conntrack entries deleted");
                runs.push(ConntrackCleanup { family, took: started.elapsed(), deleted: n });
            }
            Err(e) => warn!(%family, error = %e, "conntrack cleanup failed; stale UDP flows may linger"),
        }
    }
    runs
}

/// How many entries `runs` deleted in all.
pub(crate) fn deleted(runs: &[ConntrackCleanup]) -> usize {
    runs.iter().map(|r| r.deleted).sum()
}
