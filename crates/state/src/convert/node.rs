//! Node (v1) to [`NodeInfo`].

use k8s_openapi::api::core::v1::Node;

use super::{Converted, Fields, InvalidObject, LABEL_ZONE, TAINT_TO_BE_DELETED};
use crate::event::Kind;
use crate::info::NodeInfo;

/// Validates a Node and keeps its zone, addresses and deletion state.
pub fn node(node: &Node) -> Result<NodeInfo, InvalidObject> {
    node_with_warnings(node).map(|c| c.value)
}

/// [`node`], with the fields read leniently.
pub fn node_with_warnings(node: &Node) -> Result<Converted<NodeInfo>, InvalidObject> {
    let f = Fields::of(Kind::Node, &node.metadata)?;
    let status_addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref());
    let mut addresses = Vec::new();
    // InternalIP before ExternalIP: the node's primary IP is the first
    // InternalIP of a family (upstream GetNodeHostIPs).
    for wanted in ["InternalIP", "ExternalIP"] {
        for (i, address) in status_addresses.into_iter().flatten().enumerate() {
            if address.type_ == wanted {
                addresses.push(f.ip(format!("status.addresses[{i}].address"), &address.address)?);
            }
        }
    }
    let spec = node.spec.as_ref();
    let taints = spec.and_then(|s| s.taints.as_ref());
    let raw_cidrs: Vec<&String> = match spec.and_then(|s| s.pod_cidrs.as_ref()).filter(|c| !c.is_empty()) {
        Some(cidrs) => cidrs.iter().collect(),
        None => spec.and_then(|s| s.pod_cidr.as_ref()).into_iter().collect(),
    };
    let pod_cidrs = raw_cidrs
        .into_iter()
        .enumerate()
        .map(|(i, c)| f.cidr(format!("spec.podCIDRs[{i}]"), c))
        .collect::<Result<Vec<_>, _>>()?;
    let info = NodeInfo {
        name: f.key().name.to_string(),
        zone: node.metadata.labels.as_ref().and_then(|l| l.get(LABEL_ZONE)).filter(|z| !z.is_empty()).cloned(),
        addresses,
        pod_cidrs,
        deleting: node.metadata.deletion_timestamp.is_some(),
        to_be_deleted: taints.into_iter().flatten().any(|t| t.key == TAINT_TO_BE_DELETED),
    };
    Ok(f.finish(info))
}
