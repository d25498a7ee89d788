//! Two service ports claiming one frontend (an external IP equal to
//! another service's cluster IP, say): as in the nftables mode, a cluster
//! IP beats any other kind of claim (the API server allocates cluster IPs
//! and never twice, while anyone may write an external IP,
//! CVE-2020-8554), then the first in name order. The loser's rules leave
//! that frontend out and the conflict is reported. Without this the
//! loser's KUBE-SERVICES rule could come first and take the frontend.
//!
//! Unlike the nftables mode, the previous owner is not remembered: the
//! choice is made from the current state alone.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{FrontendKind, Protocol, ServicePort, ServicePortName};

/// A frontend: address, protocol, port.
pub(crate) type Key = (IpAddr, Protocol, u16);

/// The owner of every frontend, by address, protocol and port.
pub(crate) fn owners<'a>(ports: impl Iterator<Item = &'a Arc<ServicePort>>) -> HashMap<Key, &'a ServicePortName> {
    let mut owners: HashMap<Key, (bool, &ServicePortName)> = HashMap::new();
    for port in ports {
        for f in &port.frontends {
            let rank = (f.kind != FrontendKind::ClusterIp, &port.name);
            let owner = owners.entry((f.ip, port.name.protocol, f.port)).or_insert(rank);
            if rank < *owner {
                *owner = rank;
            }
        }
    }
    owners.into_iter().map(|(key, (_, name))| (key, name)).collect()
}

/// `port` without the frontends another port owns, and a reason for each.
pub(crate) fn owned<'a>(
    port: &'a ServicePort,
    owners: &HashMap<Key, &ServicePortName>,
    skips: &mut Vec<String>,
) -> Cow<'a, ServicePort> {
    let lost = |f: &kproxy_model::Frontend| {
        owners.get(&(f.ip, port.name.protocol, f.port)).filter(|owner| ***owner != port.name).copied()
    };
    if !port.frontends.iter().any(|f| lost(f).is_some()) {
        return Cow::Borrowed(port);
    }
    let mut kept = port.clone();
    kept.frontends.retain(|f| match lost(f) {
        Some(owner) => {
            skips.push(format!("{}: frontend {} is already served by {owner}; not served", port.name, f.addr()));
            false
        }
        None => true,
    });
    Cow::Owned(kept)
}
