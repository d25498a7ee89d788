//! Estimated heap bytes of what the state pipeline holds, by part, so a
//! memory regression shows up as a number (`kproxy_state_bytes`).
//!
//! The builder keeps running totals, adjusted as records come and go
//! (`Tally`), so asking costs nothing however big the cluster: the
//! records' own heap (vectors by capacity, boxed and shared parts, strings
//! not interned), plus the maps holding them from their capacity and
//! length. Interned strings are counted once, in `names`. Allocator
//! overhead and fragmentation are not: the estimate is of what is live.

use std::collections::BTreeMap;
use std::mem::size_of;
use std::sync::Arc;

use kproxy_model::{ServiceName, ServicePort, ServicePortName};

use crate::event::ObjectKey;
use crate::info::{EndpointGroup, Hints, PodInfo, ServiceInfo, SliceInfo, TargetPort};

/// What [`crate::StateBuilder::memory`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Services: their records and the maps of them.
    pub services: usize,
    /// Endpoint slices (and legacy Endpoints, and the controller's derived
    /// endpoints): their records, shared endpoint lists and indexes.
    pub endpoints: usize,
    /// Pods kept for the endpoint controller (standalone mode).
    pub pods: usize,
    /// The `ProxyState` handed to the dataplanes.
    pub state: usize,
    /// The interned strings (namespaces, names, node names, zones, port
    /// names), shared by every part and by the sources.
    pub names: usize,
    pub counts: Counts,
}

/// How many records the estimate covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub services: usize,
    pub slices: usize,
    /// Endpoints of all slices (an address in two slices counts twice).
    pub endpoints: usize,
    pub pods: usize,
    /// Service ports of both families in the state.
    pub service_ports: usize,
    pub interned: usize,
}

impl Memory {
    /// Every part together.
    pub fn total(&self) -> usize {
        self.services + self.endpoints + self.pods + self.state + self.names
    }

    /// The bytes by part, named as `kproxy_state_bytes{part}` names them.
    pub fn parts(&self) -> [(&'static str, usize); 5] {
        [
            ("services", self.services),
            ("endpoints", self.endpoints),
            ("pods", self.pods),
            ("state", self.state),
            ("names", self.names),
        ]
    }

    /// The counts, named as `kproxy_state_objects{kind}` names them.
    pub fn objects(&self) -> [(&'static str, usize); 6] {
        let c = &self.counts;
        [
            ("services", c.services),
            ("endpoint_slices", c.slices),
            ("endpoints", c.endpoints),
            ("pods", c.pods),
            ("service_ports", c.service_ports),
            ("names", c.interned),
        ]
    }
}

/// Running totals of the records' own heap, kept by the builder.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    pub services: usize,
    pub slices: usize,
    pub endpoints: usize,
    pub pods: usize,
    pub ports: usize,
}

impl Tally {
    /// `total` with `old` replaced by `new` (added first: `old` was added
    /// before, so the total never goes below it).
    pub fn swap(total: &mut usize, old: usize, new: usize) {
        *total = *total + new - old;
    }
}

/// A B-tree map or set of `len` entries of `entry` bytes: nodes of eleven,
/// about two thirds full.
pub(crate) fn btree(len: usize, entry: usize) -> usize {
    if len == 0 { 0 } else { len.div_ceil(7) * (11 * entry + 2 * size_of::<usize>()) }
}

/// A hash map's slots: `capacity` entries of `entry` bytes and a control
/// byte each.
pub(crate) fn hash_slots(capacity: usize, entry: usize) -> usize {
    capacity * (entry + 1)
}

/// An `imbl::OrdMap` of `len` entries: chunks of up to 64, half full or
/// more, with their child pointers.
pub(crate) fn ord_map(len: usize, entry: usize) -> usize {
    len * (entry + size_of::<usize>()) * 3 / 2
}

fn vec<T>(v: &Vec<T>) -> usize {
    v.capacity() * size_of::<T>()
}

fn string_map(map: &BTreeMap<String, String>) -> usize {
    btree(map.len(), size_of::<(String, String)>())
        + map.iter().map(|(k, v)| k.capacity() + v.capacity()).sum::<usize>()
}

/// A service's heap, in its `Arc`.
pub(crate) fn service(s: &ServiceInfo) -> usize {
    let ignored = match &s.ignored {
        Some(kproxy_model::IgnoreReason::OtherProxy(proxy)) => proxy.capacity(),
        _ => 0,
    };
    let target_names: usize = s
        .ports
        .iter()
        .map(|p| match &p.target_port {
            TargetPort::Name(name) => name.capacity(),
            TargetPort::Number(_) => 0,
        })
        .sum();
    let annotations = s.annotations.as_ref().map_or(0, |a| {
        let invalid: usize = a.invalid.iter().map(|i| i.key.capacity() + i.reason.capacity()).sum();
        let path = match a.health_check.as_ref().map(|h| &h.probe) {
            Some(kproxy_model::Probe::Http { path }) => path.capacity(),
            _ => 0,
        };
        size_of_val(a.as_ref()) + btree(a.weights.len(), 24) + vec(&a.invalid) + invalid + path
    });
    2 * size_of::<usize>()
        + size_of::<ServiceInfo>()
        + ignored
        + s.selector.as_ref().map_or(0, string_map)
        + vec(&s.cluster_ips)
        + vec(&s.ports)
        + target_names
        + vec(&s.external_ips)
        + vec(&s.load_balancer_ips)
        + vec(&s.load_balancer_source_ranges)
        + annotations
}

fn hints(h: &Hints) -> usize {
    size_of::<Hints>() + vec(&h.for_zones) + vec(&h.for_nodes)
}

fn group(g: &EndpointGroup) -> usize {
    let hinted: usize = g.endpoints.iter().filter_map(|e| e.hints.as_deref()).map(hints).sum();
    vec(&g.ports) + vec(&g.endpoints) + hinted
}

/// A slice's heap, its shared endpoint list counted whole.
pub(crate) fn slice(s: &SliceInfo) -> usize {
    2 * size_of::<usize>()
        + size_of::<Vec<EndpointGroup>>()
        + vec(&s.groups)
        + s.groups.iter().map(group).sum::<usize>()
}

pub(crate) fn endpoint_count(s: &SliceInfo) -> usize {
    s.groups.iter().map(|g| g.endpoints.len()).sum()
}

pub(crate) fn pod(p: &PodInfo) -> usize {
    let ports: usize = p.container_ports.iter().map(|c| c.name.capacity()).sum();
    p.name.capacity() + string_map(&p.labels) + vec(&p.ips) + vec(&p.container_ports) + ports
}

/// A service port of the state, in its `Arc`.
pub(crate) fn port(p: &ServicePort) -> usize {
    let warnings: usize = p.warnings.iter().map(|w| w.annotation.capacity() + w.reason.capacity()).sum();
    let path = match p.health_check.as_ref().map(|h| &h.probe) {
        Some(kproxy_model::Probe::Http { path }) => path.capacity(),
        _ => 0,
    };
    2 * size_of::<usize>()
        + size_of::<ServicePort>()
        + vec(&p.frontends)
        + p.load_balancer_source_ranges.as_ref().map_or(0, vec)
        + btree(p.weights.len(), 24)
        + path
        + vec(&p.warnings)
        + warnings
        + vec(&p.cluster_endpoints)
        + vec(&p.local_endpoints)
}

/// Entry sizes of the builder's maps, for [`hash_slots`], [`btree`] and
/// [`ord_map`].
pub(crate) const SLICE_INDEX_ENTRY: usize = size_of::<(ServiceName, Vec<ObjectKey>)>();
pub(crate) const POD_ENTRY: usize = size_of::<((Arc<str>, String), PodInfo)>();
pub(crate) const PORT_ENTRY: usize = size_of::<(ServicePortName, Arc<ServicePort>)>();
pub(crate) const IGNORED_ENTRY: usize = size_of::<(ServiceName, kproxy_model::IgnoreReason)>();
