//! Partial plans: only the service ports that changed, and the ports
//! whose frontends changed hands because of them, starting from what the
//! last sync applied.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{Changes, IpFamily, ProxyState, ServicePortName};

use crate::base;
use crate::claims::frontend_key;
use crate::names::SERVICE_CIDRS;
use crate::objects::Element;
use crate::plan::{FamilyApplied, FrontendKey, Op, objects_for};
use crate::port::PortObjects;

/// Updates `applied` (the previous sync's) for the ports that changed;
/// touches nothing else.
pub(crate) fn plan_partial(
    state: &ProxyState,
    changes: &Changes,
    family: IpFamily,
    node_ips: &[IpAddr],
    mut applied: FamilyApplied,
    skips: &mut Vec<String>,
) -> (Vec<Op>, FamilyApplied) {
    let ports = &state.family(family).service_ports;
    let mut todo: BTreeSet<ServicePortName> =
        changes.service_ports.iter().filter(|(f, _)| *f == family).map(|(_, name)| name.clone()).collect();

    // Replace the changed ports' claims; every frontend they claimed before
    // or claim now may change hands, and a port that gains or loses one is
    // rebuilt too.
    let mut affected: BTreeMap<FrontendKey, Option<ServicePortName>> = BTreeMap::new();
    let mut changed = Vec::new();
    for name in &todo {
        let old = applied.ports.get(name).map(|p| Arc::clone(&p.port));
        for port in old.iter().chain(ports.get(name)) {
            for f in &port.frontends {
                let key = frontend_key(port, f);
                affected.entry(key).or_insert_with(|| applied.claims.owner(&key).cloned());
            }
        }
        changed.push((old, ports.get(name)));
    }
    for (old, new) in changed {
        if let Some(old) = old {
            applied.claims.remove(&old);
        }
        if let Some(new) = new {
            applied.claims.add(new);
        }
    }
    for (key, before) in affected {
        let after = applied.claims.settle(key, before.as_ref());
        if before != after {
            todo.extend(before.into_iter().chain(after).filter(|n| ports.contains_key(n)));
        }
    }

    let mut diff = crate::diff::Diff::default();
    for name in &todo {
        let old = applied.ports.remove(name).map(|p| p.objects(node_ips)).unwrap_or_default();
        let (entry, new) = match ports.get(name) {
            Some(port) => {
                let (entry, objects) = objects_for(port, &applied, node_ips);
                (Some(entry), objects)
            }
            None => (None, PortObjects::default()),
        };
        applied.port_elements = applied.port_elements - old.elements.len() + new.elements.len();
        skips.extend(new.skips.iter().cloned());
        diff.port(&old, &new, &mut applied);
        if let Some(entry) = entry {
            applied.ports.insert(name.clone(), entry);
        }
    }
    let cidrs = &state.family(family).service_cidrs;
    if *cidrs != applied.service_cidrs {
        for key in base::service_cidr_elements(&applied.service_cidrs) {
            diff.delete.entry(SERVICE_CIDRS.into()).or_default().push(key);
        }
        for key in base::service_cidr_elements(cidrs) {
            diff.add.entry(SERVICE_CIDRS.into()).or_default().push(Element { key, data: None });
        }
        applied.service_cidrs = cidrs.clone();
    }
    let ops = diff.ops(&mut applied);
    (ops, applied)
}
