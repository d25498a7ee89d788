//! Which new connections the rules masquerade, per frontend and endpoint,
//! for `kproxy list`'s forwarding column. The rules make the decision in
//! `base::chains` (the policy chains `cluster-ip`, `external`,
//! `external-local` and the `masquerading` chain) and `port` (the hairpin
//! set); this restates it for display, and `tests/masquerade.rs` walks the
//! planned table with the tracer to hold the two together.

use std::fmt;

use kproxy_model::{Endpoint, Frontend, IpFamily, NodeState, ServicePort, TrafficPolicy};

use crate::{LocalDetector, PlanConfig};

/// Whose new connections to a frontend are masqueraded (the endpoint
/// then sees this node's address instead of the client's), for the
/// endpoints a listing shows: the frontend's own set, which for an
/// external frontend is the one clients outside the cluster use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Masquerade {
    /// Every client's: external frontends under `externalTrafficPolicy:
    /// Cluster`, cluster IPs with `masqueradeAll`.
    Always,
    /// Clients outside the cluster (as the local-traffic detector tells);
    /// pods keep their address. Cluster IPs with a detector.
    FromOutside,
    /// Nobody's: cluster IPs without a detector, external frontends under
    /// `externalTrafficPolicy: Local` (which exists to keep the address).
    Never,
}

/// What happens to connections to one endpoint of one frontend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forwarding {
    pub masquerade: Masquerade,
    /// The endpoint is on this node: when it connects to itself through
    /// the frontend, that connection is masqueraded whatever
    /// [`Forwarding::masquerade`] says (hairpin), or the reply would not
    /// come back through the NAT.
    pub hairpin: bool,
}

/// The forwarding of `endpoint` (one of the endpoints `frontend` of
/// `port` uses) under `config`, on the node `node`.
pub fn forwarding(
    config: &PlanConfig,
    node: &NodeState,
    port: &ServicePort,
    frontend: &Frontend,
    endpoint: &Endpoint,
) -> Forwarding {
    let masquerade = if frontend.kind.is_external() {
        match port.external_traffic_policy {
            TrafficPolicy::Cluster => Masquerade::Always,
            TrafficPolicy::Local => Masquerade::Never,
        }
    } else if config.masquerade_all {
        Masquerade::Always
    } else {
        let detector = config.resolved(node).local_detector.for_family(IpFamily::of(&frontend.ip));
        match detector {
            // NodePodCidrs is resolved above; a node without pod CIDRs
            // leaves the detector without networks, as in the rules.
            LocalDetector::None | LocalDetector::NodePodCidrs => Masquerade::Never,
            LocalDetector::Cidrs(_) | LocalDetector::Interface(_) | LocalDetector::InterfacePrefix(_) => {
                Masquerade::FromOutside
            }
        }
    };
    Forwarding { masquerade, hairpin: endpoint.local }
}

/// The listing's words, as short as ipvsadm's: `Masq`, `MasqOut`,
/// `NoMasq`, with `*` after an endpoint on this node whose own
/// connections are masqueraded where others' are not.
impl fmt::Display for Forwarding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = match self.masquerade {
            Masquerade::Always => return f.write_str("Masq"),
            Masquerade::FromOutside => "MasqOut",
            Masquerade::Never => "NoMasq",
        };
        f.write_str(word)?;
        if self.hairpin { f.write_str("*") } else { Ok(()) }
    }
}
