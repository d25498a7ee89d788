//! Service (v1) to [`ServiceInfo`].

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Service, ServicePort as K8sServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kproxy_model::{IpFamily, ServiceName, SessionAffinity, TrafficPolicy};

use super::annotations;
use super::{Converted, Fields, InvalidObject, LABEL_SERVICE_PROXY_NAME};
use crate::event::Kind;
use crate::info::{IgnoreReason, PortInfo, ServiceInfo, TargetPort};
use crate::intern::intern;

/// Upstream's default `sessionAffinityConfig.clientIP.timeoutSeconds`.
pub const DEFAULT_AFFINITY_TIMEOUT_SECONDS: u32 = 10800;
const MAX_AFFINITY_TIMEOUT_SECONDS: u32 = 86400;

/// Validates a Service and keeps what the proxy needs.
pub fn service(svc: &Service) -> Result<ServiceInfo, InvalidObject> {
    service_with_warnings(svc).map(|c| c.value)
}

/// [`service`], with the fields read leniently.
pub fn service_with_warnings(svc: &Service) -> Result<Converted<ServiceInfo>, InvalidObject> {
    let f = Fields::of(Kind::Service, &svc.metadata)?;
    let name = ServiceName::new(f.key().namespace.clone(), intern(&f.key().name));
    let labels = svc.metadata.labels.as_ref();
    if let Some(proxy) = labels.and_then(|l| l.get(LABEL_SERVICE_PROXY_NAME)) {
        return Ok(f.finish(ServiceInfo::ignored(name, IgnoreReason::OtherProxy(proxy.clone()))));
    }
    let Some(spec) = svc.spec.as_ref() else {
        return Err(f.invalid("spec", "must be set"));
    };
    let types = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    let type_ = f.one_of("spec.type", spec.type_.as_deref(), &types, "ClusterIP")?;
    if type_ == "ExternalName" {
        return Ok(f.finish(ServiceInfo::ignored(name, IgnoreReason::ExternalName)));
    }
    let Some(cluster_ips) = cluster_ips(&f, spec)? else {
        return Ok(f.finish(ServiceInfo::ignored(name, IgnoreReason::Headless)));
    };

    let node_ports_allowed = matches!(type_, "NodePort" | "LoadBalancer");
    let ports = ports(&f, spec.ports.as_deref().unwrap_or_default())?;
    if ports.is_empty() {
        return Err(f.invalid("spec.ports", "must list at least one port"));
    }
    // kproxy's own annotations never make the Service invalid: a bad one
    // falls back to its default and is reported with the Service.
    let annotations = annotations::of(svc);
    let external_ips = spec
        .external_ips
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, ip)| f.ip(format!("spec.externalIPs[{i}]"), ip))
        .collect::<Result<Vec<_>, _>>()?;
    let load_balancer_ips = if type_ == "LoadBalancer" { load_balancer_ips(&f, svc)? } else { Vec::new() };
    let load_balancer_source_ranges = spec
        .load_balancer_source_ranges
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, cidr)| f.cidr(format!("spec.loadBalancerSourceRanges[{i}]"), cidr))
        .collect::<Result<Vec<_>, _>>()?;

    let policy = |field: &str, value: Option<&str>| {
        f.one_of(field, value, &["Cluster", "Local"], "Cluster")
            .map(|p| if p == "Local" { TrafficPolicy::Local } else { TrafficPolicy::Cluster })
    };
    let internal_traffic_policy = policy("spec.internalTrafficPolicy", spec.internal_traffic_policy.as_deref())?;
    let mut external_traffic_policy = policy("spec.externalTrafficPolicy", spec.external_traffic_policy.as_deref())?;
    // Only services reachable from outside the cluster have an external
    // policy (upstream `ExternallyAccessible`): NodePort, LoadBalancer, or
    // any service with external IPs.
    if !node_ports_allowed && external_ips.is_empty() {
        external_traffic_policy = TrafficPolicy::Cluster;
    }
    let health_check_node_port = match (type_, external_traffic_policy, spec.health_check_node_port) {
        ("LoadBalancer", TrafficPolicy::Local, Some(p)) if p != 0 => Some(f.port("spec.healthCheckNodePort", p)?),
        _ => None,
    };

    let info = ServiceInfo {
        name,
        ignored: None,
        selector: spec.selector.clone().filter(|s| !s.is_empty()),
        cluster_ips,
        ports: ports
            .into_iter()
            .map(|p| PortInfo { node_port: p.node_port.filter(|_| node_ports_allowed), ..p })
            .collect(),
        external_ips,
        load_balancer_ips,
        load_balancer_source_ranges,
        session_affinity: session_affinity(&f, spec)?,
        internal_traffic_policy,
        external_traffic_policy,
        health_check_node_port,
        publish_not_ready_addresses: spec.publish_not_ready_addresses.unwrap_or(false),
        annotations,
    };
    Ok(f.finish(info))
}

/// The cluster IPs, at most one per family; `None` for a headless service.
/// `clusterIPs` is authoritative; old objects may only have `clusterIP`.
fn cluster_ips(f: &Fields, spec: &ServiceSpec) -> Result<Option<Vec<IpAddr>>, InvalidObject> {
    let (field, raw): (&str, Vec<&str>) = match spec.cluster_ips.as_deref() {
        Some(ips) if !ips.is_empty() => ("spec.clusterIPs", ips.iter().map(String::as_str).collect()),
        _ => ("spec.clusterIP", spec.cluster_ip.as_deref().into_iter().collect()),
    };
    if raw.first() == Some(&"None") {
        return Ok(None);
    }
    if raw.iter().all(|ip| ip.is_empty()) {
        return Err(f.invalid(
            "spec.clusterIP",
            "must be set to an IP address (or \"None\" for a headless service); without an API server nothing allocates one",
        ));
    }
    let mut ips = Vec::new();
    for (i, value) in raw.iter().enumerate() {
        let field = if field == "spec.clusterIPs" { format!("{field}[{i}]") } else { field.to_owned() };
        let ip = f.ip(&field, value)?;
        if ips.iter().any(|other| IpFamily::of(other) == IpFamily::of(&ip)) {
            return Err(f.invalid(field, format!("a second {} address; at most one per family", IpFamily::of(&ip))));
        }
        ips.push(ip);
    }
    Ok(Some(ips))
}

/// `status.loadBalancer.ingress[].ip`, without hostname-only entries and
/// without `ipMode: Proxy` ones (the load balancer proxies to node ports
/// itself; claiming the address on the node would bypass it).
fn load_balancer_ips(f: &Fields, svc: &Service) -> Result<Vec<IpAddr>, InvalidObject> {
    let ingress = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|lb| lb.ingress.as_ref());
    let mut ips = Vec::new();
    for (i, ingress) in ingress.into_iter().flatten().enumerate() {
        if ingress.ip_mode.as_deref() == Some("Proxy") {
            continue;
        }
        if let Some(ip) = ingress.ip.as_deref().filter(|ip| !ip.is_empty()) {
            ips.push(f.ip(format!("status.loadBalancer.ingress[{i}].ip"), ip)?);
        }
    }
    Ok(ips)
}

fn session_affinity(f: &Fields, spec: &ServiceSpec) -> Result<Option<SessionAffinity>, InvalidObject> {
    let affinity = f.one_of("spec.sessionAffinity", spec.session_affinity.as_deref(), &["None", "ClientIP"], "None")?;
    if affinity != "ClientIP" {
        return Ok(None);
    }
    let timeout =
        spec.session_affinity_config.as_ref().and_then(|c| c.client_ip.as_ref()).and_then(|c| c.timeout_seconds);
    let timeout_seconds = match timeout {
        None => DEFAULT_AFFINITY_TIMEOUT_SECONDS,
        Some(t) => {
            u32::try_from(t).ok().filter(|t| (1..=MAX_AFFINITY_TIMEOUT_SECONDS).contains(t)).ok_or_else(|| {
                f.invalid(
                    "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                    format!("{t} is out of range (allowed: 1-86400)"),
                )
            })?
        }
    };
    Ok(Some(SessionAffinity { timeout_seconds }))
}

fn ports(f: &Fields, ports: &[K8sServicePort]) -> Result<Vec<PortInfo>, InvalidObject> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(ports.len());
    for (i, p) in ports.iter().enumerate() {
        let at = |field: &str| format!("spec.ports[{i}].{field}");
        let name = intern(p.name.as_deref().unwrap_or_default());
        let protocol = f.protocol(at("protocol"), p.protocol.as_deref())?;
        let port = f.port(at("port"), p.port)?;
        let node_port = match p.node_port {
            None | Some(0) => None,
            Some(n) => Some(f.port(at("nodePort"), n)?),
        };
        let target_port = match &p.target_port {
            None => TargetPort::Number(port),
            Some(IntOrString::Int(n)) => TargetPort::Number(f.port(at("targetPort"), *n)?),
            Some(IntOrString::String(s)) if s.is_empty() => TargetPort::Number(port),
            Some(IntOrString::String(s)) => match s.parse::<i32>() {
                // A number written as a string is still a number to the API.
                Ok(n) => TargetPort::Number(f.port(at("targetPort"), n)?),
                Err(_) => TargetPort::Name(s.clone()),
            },
        };
        if !seen.insert((name.clone(), protocol)) {
            return Err(f.invalid(at("name"), format!("duplicate port {name:?} for protocol {protocol}")));
        }
        out.push(PortInfo { name, protocol, port, node_port, target_port });
    }
    Ok(out)
}
