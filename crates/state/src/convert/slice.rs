//! EndpointSlice (discovery.k8s.io/v1) and legacy Endpoints (v1) to
//! [`SliceInfo`].

use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kproxy_model::{IpFamily, ServiceName};

use super::{
    ANNOTATION_TRIGGER_TIME, Converted, Fields, InvalidObject, LABEL_HEADLESS, LABEL_SERVICE_NAME,
    LABEL_SERVICE_PROXY_NAME, MAX_ENDPOINTS_PER_SLICE,
};
use crate::event::{Kind, Object};
use crate::info::{EndpointGroup, Hints, SliceEndpoint, SliceInfo, SlicePort};
use crate::intern::{intern, intern_opt};

/// Validates an EndpointSlice. Slices kproxy ignores (headless, owned by
/// another proxy, FQDN addresses) convert to a slice with no endpoints, so
/// a slice that turns into one of those stops contributing.
pub fn endpoint_slice(slice: &EndpointSlice) -> Result<Object, InvalidObject> {
    endpoint_slice_with_warnings(slice).map(|c| c.value)
}

/// [`endpoint_slice`], with the fields read leniently.
pub fn endpoint_slice_with_warnings(slice: &EndpointSlice) -> Result<Converted<Object>, InvalidObject> {
    let f = Fields::of(Kind::EndpointSlice, &slice.metadata)?;
    let labels = slice.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key));
    let service = label(LABEL_SERVICE_NAME)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| f.invalid("metadata.labels", format!("{LABEL_SERVICE_NAME} must name the slice's Service")))?;
    let service = ServiceName::new(f.key().namespace.clone(), intern(service));
    let trigger_time = trigger_time(slice.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION_TRIGGER_TIME)));
    let key = f.key().clone();
    let object = |groups: Vec<EndpointGroup>| Object::Slice {
        key: key.clone(),
        info: SliceInfo { service: service.clone(), groups: Arc::new(groups) },
        trigger_time,
    };

    let family = match slice.address_type.as_str() {
        "IPv4" => IpFamily::V4,
        "IPv6" => IpFamily::V6,
        "FQDN" => return Ok(f.finish(object(Vec::new()))),
        other => {
            return Err(f.invalid("addressType", format!("unsupported value {other:?} (allowed: IPv4, IPv6, FQDN)")));
        }
    };
    if label(LABEL_HEADLESS).is_some() || label(LABEL_SERVICE_PROXY_NAME).is_some() {
        return Ok(f.finish(object(Vec::new())));
    }

    let mut ports = Vec::with_capacity(slice.ports.as_ref().map_or(0, Vec::len));
    for (i, p) in slice.ports.iter().flatten().enumerate() {
        // Upstream skips ports without a number; an unset name is the
        // unnamed port (upstream skips it too, but hand-written slices in a
        // manifest folder often leave it out).
        let Some(port) = p.port.filter(|p| *p != 0) else { continue };
        ports.push(SlicePort {
            name: intern(p.name.as_deref().unwrap_or_default()),
            protocol: f.protocol(format!("ports[{i}].protocol"), p.protocol.as_deref())?,
            port: f.port(format!("ports[{i}].port"), port)?,
        });
    }

    if slice.endpoints.len() > MAX_ENDPOINTS_PER_SLICE {
        let reason = format!("{} entries; at most {MAX_ENDPOINTS_PER_SLICE} per slice", slice.endpoints.len());
        return Err(f.invalid("endpoints", reason));
    }
    // Exact capacity: at 10 endpoints a grown vector would hold 16.
    let mut endpoints = Vec::with_capacity(slice.endpoints.len());
    for (i, ep) in slice.endpoints.iter().enumerate() {
        // Only the first address counts (upstream does the same).
        let Some(address) = ep.addresses.first() else { continue };
        let field = format!("endpoints[{i}].addresses[0]");
        let ip = f.ip(&field, address)?;
        if IpFamily::of(&ip) != family {
            return Err(f.invalid(field, format!("{ip} is not an {family} address (addressType: {family})")));
        }
        let conditions = ep.conditions.as_ref();
        let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
        let hints = ep.hints.as_ref().map(|h| Hints {
            for_zones: h.for_zones.iter().flatten().map(|z| intern(&z.name)).collect(),
            for_nodes: h.for_nodes.iter().flatten().map(|n| intern(&n.name)).collect(),
        });
        endpoints.push(SliceEndpoint {
            ip,
            ready,
            serving: conditions.and_then(|c| c.serving).unwrap_or(ready),
            terminating: conditions.and_then(|c| c.terminating).unwrap_or(false),
            node_name: intern_opt(ep.node_name.as_deref().filter(|n| !n.is_empty())),
            hints: hints.filter(|h| !h.for_zones.is_empty() || !h.for_nodes.is_empty()).map(Box::new),
        });
    }
    endpoints.shrink_to_fit();
    let converted = object(vec![EndpointGroup { ports, endpoints }]);
    Ok(f.finish(converted))
}

/// Validates a legacy Endpoints object (accepted from manifest folders for
/// services without a selector). `addresses` are ready, `notReadyAddresses`
/// are neither ready nor serving.
pub fn endpoints(eps: &Endpoints) -> Result<Object, InvalidObject> {
    endpoints_with_warnings(eps).map(|c| c.value)
}

/// [`endpoints`], with the fields read leniently.
pub fn endpoints_with_warnings(eps: &Endpoints) -> Result<Converted<Object>, InvalidObject> {
    let f = Fields::of(Kind::Endpoints, &eps.metadata)?;
    let service = ServiceName::new(f.key().namespace.clone(), intern(&f.key().name));
    let trigger_time = trigger_time(eps.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION_TRIGGER_TIME)));
    let mut groups = Vec::new();
    for (s, subset) in eps.subsets.iter().flatten().enumerate() {
        let mut ports = Vec::new();
        for (i, p) in subset.ports.iter().flatten().enumerate() {
            ports.push(SlicePort {
                name: intern(p.name.as_deref().unwrap_or_default()),
                protocol: f.protocol(format!("subsets[{s}].ports[{i}].protocol"), p.protocol.as_deref())?,
                port: f.port(format!("subsets[{s}].ports[{i}].port"), p.port)?,
            });
        }
        let mut endpoints = Vec::new();
        let lists = [("addresses", true, &subset.addresses), ("notReadyAddresses", false, &subset.not_ready_addresses)];
        for (list, ready, addresses) in lists {
            for (i, address) in addresses.iter().flatten().enumerate() {
                endpoints.push(legacy_endpoint(&f, &format!("subsets[{s}].{list}[{i}].ip"), address, ready)?);
            }
        }
        ports.shrink_to_fit();
        endpoints.shrink_to_fit();
        groups.push(EndpointGroup { ports, endpoints });
    }
    groups.shrink_to_fit();
    let object =
        Object::Slice { key: f.key().clone(), info: SliceInfo { service, groups: Arc::new(groups) }, trigger_time };
    Ok(f.finish(object))
}

fn legacy_endpoint(
    f: &Fields,
    field: &str,
    address: &EndpointAddress,
    ready: bool,
) -> Result<SliceEndpoint, InvalidObject> {
    let ip: IpAddr = f.ip(field, &address.ip)?;
    Ok(SliceEndpoint {
        ip,
        ready,
        serving: ready,
        terminating: false,
        node_name: intern_opt(address.node_name.as_deref().filter(|n| !n.is_empty())),
        hints: None,
    })
}

/// A missing or unparsable annotation is no trigger time (upstream ignores
/// it too): it only feeds a metric.
fn trigger_time(value: Option<&String>) -> Option<SystemTime> {
    value.and_then(|v| jiff::Timestamp::from_str(v).ok()).map(SystemTime::from)
}
