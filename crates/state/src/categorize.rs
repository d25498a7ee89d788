//! Choosing endpoints: the one function every dataplane's endpoint sets
//! come from (SEMANTICS.md, "Choosing endpoints"; upstream `topology.go`).

use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::Endpoint;

use crate::info::Hints;

/// An endpoint of one service port, before categorisation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub ip: IpAddr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub node_name: Option<Arc<str>>,
    pub hints: Option<Box<Hints>>,
}

/// Where this proxy runs, as far as choosing endpoints goes.
#[derive(Clone, Copy, Debug)]
pub struct Locality<'a> {
    pub node_name: &'a str,
    pub zone: Option<&'a str>,
}

/// The two endpoint sets of a service port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointSets {
    /// Usable from anywhere: ready ones (restricted by topology hints when
    /// they apply), else serving-and-terminating ones.
    pub cluster: Vec<Endpoint>,
    /// Usable on this node: ready local ones, else serving-and-terminating
    /// local ones. Topology never applies here.
    pub local: Vec<Endpoint>,
}

/// Which topology hints restrict the cluster set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Topology {
    Ignore,
    SameNode,
    SameZone,
}

/// Splits `candidates` into the cluster and local sets for this node.
pub fn categorize(candidates: &[Candidate], here: Locality<'_>) -> EndpointSets {
    let is_local = |c: &Candidate| c.node_name.as_deref() == Some(here.node_name);
    let fallback = |c: &Candidate| c.serving && c.terminating;

    let topology = topology(candidates, here);
    let mut cluster = select(candidates, |c| c.ready && available(c, topology, here));
    if cluster.is_empty() {
        // KEP-1669: rather than fail, use endpoints that are shutting down
        // but still serve. Topology is ignored for this fallback.
        cluster = select(candidates, fallback);
    }
    let mut local = select(candidates, |c| is_local(c) && c.ready);
    if local.is_empty() {
        local = select(candidates, |c| is_local(c) && fallback(c));
    }
    let endpoint = |c: &Candidate| Endpoint {
        ip: c.ip,
        port: c.port,
        ready: c.ready,
        serving: c.serving,
        terminating: c.terminating,
        local: is_local(c),
    };
    EndpointSets {
        cluster: cluster.into_iter().map(endpoint).collect(),
        local: local.into_iter().map(endpoint).collect(),
    }
}

fn select(candidates: &[Candidate], keep: impl Fn(&Candidate) -> bool) -> Vec<&Candidate> {
    candidates.iter().filter(|c| keep(c)).collect()
}

/// Hints apply only when every ready endpoint carries one and some hint
/// names this node (preferred) or this node's zone; one ready endpoint
/// without hints turns them off for the whole service port.
fn topology(candidates: &[Candidate], here: Locality<'_>) -> Topology {
    let ready: Vec<&Candidate> = candidates.iter().filter(|c| c.ready).collect();
    if ready.is_empty() {
        return Topology::Ignore;
    }
    fn node_hints(c: &Candidate) -> &[Arc<str>] {
        c.hints.as_ref().map_or(&[], |h| &h.for_nodes)
    }
    fn zone_hints(c: &Candidate) -> &[Arc<str>] {
        c.hints.as_ref().map_or(&[], |h| &h.for_zones)
    }
    let all_node_hints = ready.iter().all(|c| !node_hints(c).is_empty());
    let for_node = ready.iter().any(|c| node_hints(c).iter().any(|n| **n == *here.node_name));
    if all_node_hints && for_node {
        return Topology::SameNode;
    }
    let all_zone_hints = ready.iter().all(|c| !zone_hints(c).is_empty());
    let for_zone = here.zone.is_some_and(|zone| ready.iter().any(|c| zone_hints(c).iter().any(|z| **z == *zone)));
    if all_zone_hints && for_zone {
        return Topology::SameZone;
    }
    Topology::Ignore
}

fn available(c: &Candidate, topology: Topology, here: Locality<'_>) -> bool {
    let hints = c.hints.as_ref();
    match topology {
        Topology::Ignore => true,
        Topology::SameNode => hints.is_some_and(|h| h.for_nodes.iter().any(|n| **n == *here.node_name)),
        Topology::SameZone => {
            hints.is_some_and(|h| here.zone.is_some_and(|zone| h.for_zones.iter().any(|z| **z == *zone)))
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn candidate() -> impl Strategy<Value = Candidate> {
        (0u8..16, any::<bool>(), any::<bool>(), any::<bool>(), prop::option::of(0u8..3), prop::option::of(0u8..3))
            .prop_map(|(host, ready, serving, terminating, node, zone)| Candidate {
                ip: IpAddr::from([10, 0, 0, host]),
                port: 80,
                // An endpoint the API would never publish (ready but not
                // serving) is still possible from a hand-written slice.
                ready,
                serving,
                terminating,
                node_name: node.map(|n| format!("node-{n}").into()),
                hints: zone
                    .map(|z| Box::new(Hints { for_zones: vec![format!("zone-{z}").into()], for_nodes: Vec::new() })),
            })
    }

    proptest! {
        #[test]
        fn sets_hold_only_usable_endpoints(candidates in prop::collection::vec(candidate(), 0..12)) {
            let here = Locality { node_name: "node-0", zone: Some("zone-0") };
            let sets = categorize(&candidates, here);
            let any_ready = candidates.iter().any(|c| c.ready);
            for e in &sets.cluster {
                let usable = if any_ready { e.ready } else { e.serving && e.terminating };
                prop_assert!(usable, "{:?}", e);
            }
            let any_local_ready = candidates.iter().any(|c| c.ready && c.node_name.as_deref() == Some("node-0"));
            for e in &sets.local {
                prop_assert!(e.local);
                let usable = if any_local_ready { e.ready } else { e.serving && e.terminating };
                prop_assert!(usable, "{:?}", e);
            }
            // Some ready endpoint always means a non-empty cluster set:
            // topology only narrows when it keeps at least one.
            prop_assert_eq!(any_ready, sets.cluster.iter().any(|e| e.ready));
        }

        #[test]
        fn without_hints_every_ready_endpoint_is_in_the_cluster_set(candidates in prop::collection::vec(candidate(), 0..12)) {
            let candidates: Vec<Candidate> = candidates.into_iter().map(|c| Candidate { hints: None, ..c }).collect();
            let sets = categorize(&candidates, Locality { node_name: "node-0", zone: Some("zone-0") });
            let ready = candidates.iter().filter(|c| c.ready).count();
            if ready > 0 {
                prop_assert_eq!(sets.cluster.len(), ready);
            }
        }
    }
}
