//! What a change of one service port means for conntrack.

use kproxy_model::{Changes, Protocol, ServicePort, StaleUdpEndpoint};

/// Records the UDP conntrack work that replacing `old` with `new` (same
/// name and family; either may be absent) requires (SEMANTICS.md,
/// "Conntrack"): endpoints a frontend stopped using, frontends that went
/// away, and frontends that went from no endpoints to some.
pub fn record_stale_udp(old: Option<&ServicePort>, new: Option<&ServicePort>, changes: &mut Changes) {
    let protocol = old.or(new).map(|p| p.name.protocol);
    if protocol != Some(Protocol::Udp) {
        return;
    }
    for frontend in old.iter().flat_map(|p| &p.frontends) {
        let before = old.map(|p| p.reachable_via(frontend.kind)).unwrap_or_default();
        let Some(new) = new.filter(|p| p.frontends.contains(frontend)) else {
            changes.stale_udp_frontends.insert(frontend.addr());
            continue;
        };
        let after = new.reachable_via(frontend.kind);
        // By address: an endpoint that only changed condition (ready to
        // terminating, say) is still in use.
        for gone in before.iter().filter(|e| !after.iter().any(|a| a.addr() == e.addr())) {
            changes.stale_udp_endpoints.insert(StaleUdpEndpoint { frontend: frontend.addr(), endpoint: gone.addr() });
        }
        if before.is_empty() && !after.is_empty() {
            changes.stale_udp_frontends.insert(frontend.addr());
        }
    }
    // Frontends that are new, with endpoints: whatever conntrack holds for
    // them predates the rules (un-NATed or rejected flows).
    for frontend in new.iter().flat_map(|p| &p.frontends) {
        let existed = old.is_some_and(|p| p.frontends.contains(frontend));
        if !existed && new.is_some_and(|p| !p.reachable_via(frontend.kind).is_empty()) {
            changes.stale_udp_frontends.insert(frontend.addr());
        }
    }
}
