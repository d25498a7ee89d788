//! The endpoint controller of standalone mode: Pods + a Service's selector
//! to the endpoints a cluster's EndpointSlice controller would publish
//! (SEMANTICS.md, "The endpoint controller").

use std::collections::BTreeMap;

use crate::info::{EndpointGroup, PodInfo, ServiceInfo, SliceEndpoint, SliceInfo, SlicePort, TargetPort};

/// Does `pod` carry every label of `selector`?
pub fn selects(selector: &BTreeMap<String, String>, pod: &PodInfo) -> bool {
    selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v))
}

/// The endpoints of `service` derived from `pods` (all in its namespace).
///
/// Pods are grouped by how their named target ports resolve, like the real
/// controller's slices. Unlike the real controller, a Pod whose Node is not
/// known still counts (a manifest folder rarely lists nodes), and no
/// topology hints are written (`trafficDistribution` is not implemented).
pub fn derive<'a>(service: &ServiceInfo, pods: impl IntoIterator<Item = &'a PodInfo>) -> SliceInfo {
    let selector = service.selector.as_ref();
    let mut groups: BTreeMap<Vec<SlicePort>, Vec<SliceEndpoint>> = BTreeMap::new();
    for pod in pods {
        if pod.finished || pod.ips.is_empty() || !selector.is_some_and(|s| selects(s, pod)) {
            continue;
        }
        let ports: Vec<SlicePort> = service
            .ports
            .iter()
            .filter_map(|p| {
                let port = match &p.target_port {
                    TargetPort::Number(n) => Some(*n),
                    TargetPort::Name(name) => {
                        pod.container_ports.iter().find(|c| &c.name == name && c.protocol == p.protocol).map(|c| c.port)
                    }
                }?;
                Some(SlicePort { name: p.name.clone(), protocol: p.protocol, port })
            })
            .collect();
        if ports.is_empty() {
            continue;
        }
        let serving = pod.ready;
        let ready = service.publish_not_ready_addresses || (serving && !pod.terminating);
        let endpoints = groups.entry(ports).or_default();
        for ip in &pod.ips {
            endpoints.push(SliceEndpoint {
                ip: *ip,
                ready,
                serving,
                terminating: pod.terminating,
                node_name: pod.node_name.clone(),
                hints: None,
            });
        }
    }
    SliceInfo {
        service: service.name.clone(),
        groups: std::sync::Arc::new(
            groups
                .into_iter()
                .map(|(ports, mut endpoints)| {
                    endpoints.shrink_to_fit();
                    EndpointGroup { ports, endpoints }
                })
                .collect(),
        ),
    }
}
