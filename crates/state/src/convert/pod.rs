//! Pod (v1) to [`PodInfo`], for the standalone endpoint controller.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::{Converted, Fields, InvalidObject};
use crate::event::Kind;
use crate::info::{ContainerPort, PodInfo};
use crate::intern::intern_opt;

/// Validates a Pod and keeps what the endpoint controller reads.
pub fn pod(pod: &Pod) -> Result<PodInfo, InvalidObject> {
    pod_with_warnings(pod).map(|c| c.value)
}

/// [`pod`], with the fields read leniently.
pub fn pod_with_warnings(pod: &Pod) -> Result<Converted<PodInfo>, InvalidObject> {
    let f = Fields::of(Kind::Pod, &pod.metadata)?;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();

    let mut ips = Vec::new();
    match status.and_then(|s| s.pod_ips.as_ref()).filter(|ips| !ips.is_empty()) {
        Some(pod_ips) => {
            for (i, pod_ip) in pod_ips.iter().enumerate() {
                ips.push(f.ip(format!("status.podIPs[{i}].ip"), &pod_ip.ip)?);
            }
        }
        None => {
            if let Some(ip) = status.and_then(|s| s.pod_ip.as_deref()).filter(|ip| !ip.is_empty()) {
                ips.push(f.ip("status.podIP", ip)?);
            }
        }
    }

    let phase = status.and_then(|s| s.phase.as_deref());
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");

    // Named target ports resolve against the app containers, then the
    // sidecars (init containers with `restartPolicy: Always`), as upstream's
    // FindPort does.
    let sidecars = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let containers = spec.map(|s| s.containers.iter()).into_iter().flatten().chain(sidecars);
    let mut container_ports = Vec::new();
    for (c, container) in containers.enumerate() {
        container_ports.extend(ports(&f, c, container)?);
    }

    let info = PodInfo {
        namespace: f.key().namespace.clone(),
        name: f.key().name.to_string(),
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        ips,
        node_name: intern_opt(spec.and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())),
        finished: matches!(phase, Some("Succeeded" | "Failed")),
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        container_ports,
    };
    Ok(f.finish(info))
}

fn ports(f: &Fields, c: usize, container: &Container) -> Result<Vec<ContainerPort>, InvalidObject> {
    let mut out = Vec::new();
    for (i, p) in container.ports.iter().flatten().enumerate() {
        let Some(name) = p.name.clone().filter(|n| !n.is_empty()) else { continue };
        let at = |field: &str| format!("spec.containers[{c}].ports[{i}].{field}");
        out.push(ContainerPort {
            name,
            protocol: f.protocol(at("protocol"), p.protocol.as_deref())?,
            port: f.port(at("containerPort"), p.container_port)?,
        });
    }
    Ok(out)
}
