//! [`StateBuilder`]: folds source events into the node's [`ProxyState`]
//! and hands out the [`Changes`] since the last call.
//!
//! Work per sync is proportional to what changed: only services touched by
//! an event (directly, through a slice, or through a Pod the endpoint
//! controller maps to them) are rebuilt. A change of this node's zone or
//! addresses rebuilds every service, unavoidably.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use kproxy_model::{Changes, IpFamily, IpNet, ProxyState, ServiceName, ServicePort, ServicePortName};

use crate::config::StateConfig;
use crate::controller;
use crate::diff::record_stale_udp;
use crate::event::{Kind, Object, ObjectKey, SourceEvent};
use crate::info::{NodeInfo, PodInfo, ServiceInfo, SliceInfo};
use crate::memory::{self, Counts, Memory, Tally};
use crate::node::node_state;
use crate::service_port::service_ports;
use crate::tracker::ChangeTracker;

/// Event counts since start, for the `*_changes_total` metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    pub service_events: u64,
    pub endpoint_events: u64,
}

/// The state pipeline of one node.
#[derive(Debug)]
pub struct StateBuilder {
    config: StateConfig,
    /// Shared with the source (see [`Object::Service`]).
    services: ChangeTracker<ServiceName, Arc<ServiceInfo>>,
    /// Keyed by the slice's own key; the endpoints the controller derives
    /// for a Service are keyed by that Service's key.
    slices: ChangeTracker<ObjectKey, SliceInfo>,
    /// Sorted (slices merge in key order); a vector, as most services have
    /// one or two slices and a B-tree node is half a kilobyte.
    slices_by_service: HashMap<ServiceName, Vec<ObjectKey>>,
    /// Sorted so one namespace is a range.
    pods: BTreeMap<(Arc<str>, String), PodInfo>,
    /// Services with a selector, sorted so one namespace is a range.
    selecting: BTreeSet<ServiceName>,
    /// Services whose derived endpoints must be recomputed.
    derive_pending: BTreeSet<ServiceName>,
    /// This node's Node object.
    node: Option<NodeInfo>,
    node_pending: bool,
    service_cidr_objects: BTreeMap<String, Vec<IpNet>>,
    cidrs_pending: bool,
    trigger_times: BTreeMap<ServiceName, Vec<SystemTime>>,
    synced: bool,
    counts: EventCounts,
    state: ProxyState,
    /// The records' heap, for [`StateBuilder::memory`].
    tally: Tally,
}

impl StateBuilder {
    pub fn new(config: StateConfig) -> Self {
        let mut state = ProxyState { node: node_state(&config, None), ..ProxyState::default() };
        for family in IpFamily::ALL {
            state.family_mut(family).service_cidrs = cidrs_of(config.service_cidrs.iter(), family);
        }
        Self {
            config,
            services: ChangeTracker::default(),
            slices: ChangeTracker::default(),
            slices_by_service: HashMap::new(),
            pods: BTreeMap::new(),
            selecting: BTreeSet::new(),
            derive_pending: BTreeSet::new(),
            node: None,
            node_pending: true,
            service_cidr_objects: BTreeMap::new(),
            cidrs_pending: false,
            trigger_times: BTreeMap::new(),
            synced: false,
            counts: EventCounts::default(),
            state,
            tally: Tally::default(),
        }
    }

    /// The state as of the last [`StateBuilder::take_changes`].
    pub fn state(&self) -> &ProxyState {
        &self.state
    }

    /// The source has delivered its initial list.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Something happened since the last `take_changes` (possibly undone
    /// since: the sync then finds no changes).
    pub fn has_pending(&self) -> bool {
        self.services.touched()
            || self.slices.touched()
            || !self.derive_pending.is_empty()
            || self.node_pending
            || self.cidrs_pending
    }

    /// Net pending changes: (services, endpoint slices).
    pub fn pending_counts(&self) -> (usize, usize) {
        (self.services.pending(), self.slices.pending())
    }

    pub fn event_counts(&self) -> EventCounts {
        self.counts
    }

    /// Estimated heap bytes held, by part (`crate::memory`); costs nothing
    /// to ask: the totals are kept as records come and go.
    pub fn memory(&self) -> Memory {
        let (services, slices) = (self.services.current(), self.slices.current());
        let (interned, names) = crate::intern::interned();
        let ports = self.state.ipv4.service_ports.len() + self.state.ipv6.service_ports.len();
        Memory {
            services: self.tally.services + self.services.slot_bytes(),
            endpoints: self.tally.slices
                + self.slices.slot_bytes()
                + memory::hash_slots(self.slices_by_service.capacity(), memory::SLICE_INDEX_ENTRY)
                + slices.len() * size_of::<ObjectKey>(),
            pods: self.tally.pods + memory::btree(self.pods.len(), memory::POD_ENTRY),
            state: self.tally.ports
                + memory::ord_map(ports, memory::PORT_ENTRY)
                + memory::ord_map(self.state.ignored.len(), memory::IGNORED_ENTRY),
            names,
            counts: Counts {
                services: services.len(),
                slices: slices.len(),
                endpoints: self.tally.endpoints,
                pods: self.pods.len(),
                service_ports: ports,
                interned,
            },
        }
    }

    pub fn apply(&mut self, event: SourceEvent) {
        match event {
            SourceEvent::Apply(object) => self.apply_object(object),
            SourceEvent::Delete(key) => self.delete(&key),
            SourceEvent::Synced => self.synced = true,
        }
    }

    fn apply_object(&mut self, object: Object) {
        match object {
            Object::Service(info) => {
                self.counts.service_events += 1;
                let name = info.name.clone();
                if info.selector.is_some() && info.ignored.is_none() {
                    self.selecting.insert(name.clone());
                } else {
                    self.selecting.remove(&name);
                }
                let old = self.services.get(&name).map_or(0, |s| memory::service(s));
                Tally::swap(&mut self.tally.services, old, memory::service(&info));
                self.services.upsert(name.clone(), info);
                if self.config.endpoint_controller {
                    self.derive_pending.insert(name);
                }
            }
            Object::Slice { key, info, trigger_time } => {
                self.counts.endpoint_events += 1;
                if let Some(time) = trigger_time {
                    self.trigger_times.entry(info.service.clone()).or_default().push(time);
                }
                self.upsert_slice(key, info);
            }
            Object::Pod(pod) => {
                let id = (pod.namespace.clone(), pod.name.clone());
                let old = self.pods.insert(id, pod.clone());
                Tally::swap(&mut self.tally.pods, old.as_ref().map_or(0, memory::pod), memory::pod(&pod));
                self.pod_changed(old.as_ref(), Some(&pod));
            }
            // Only this node matters; a manifest folder may list others.
            Object::Node(node) => {
                if node.name == self.config.node_name {
                    self.node = Some(node);
                    self.node_pending = true;
                }
            }
            Object::ServiceCidr(cidr) => {
                self.service_cidr_objects.insert(cidr.name, cidr.cidrs);
                self.cidrs_pending = true;
            }
        }
    }

    fn delete(&mut self, key: &ObjectKey) {
        match key.kind {
            Kind::Service => {
                self.counts.service_events += 1;
                let name = ServiceName::new(key.namespace.clone(), key.name.clone());
                self.selecting.remove(&name);
                Tally::swap(&mut self.tally.services, self.services.get(&name).map_or(0, |s| memory::service(s)), 0);
                self.services.delete(&name);
                if self.config.endpoint_controller {
                    self.derive_pending.insert(name);
                }
            }
            Kind::EndpointSlice | Kind::Endpoints => {
                self.counts.endpoint_events += 1;
                self.delete_slice(key);
            }
            Kind::Pod => {
                if let Some(old) = self.pods.remove(&(key.namespace.clone(), key.name.to_string())) {
                    Tally::swap(&mut self.tally.pods, memory::pod(&old), 0);
                    self.pod_changed(Some(&old), None);
                }
            }
            Kind::Node => {
                if *key.name == *self.config.node_name {
                    self.node = None;
                    self.node_pending = true;
                }
            }
            Kind::ServiceCidr => {
                self.service_cidr_objects.remove(&*key.name);
                self.cidrs_pending = true;
            }
        }
    }

    fn upsert_slice(&mut self, key: ObjectKey, info: SliceInfo) {
        // A slice relabelled to another Service leaves the old one.
        if let Some(old) = self.slices.get(&key).filter(|old| old.service != info.service) {
            let old_service = old.service.clone();
            self.unindex_slice(&old_service, &key);
        }
        // Most services have one slice: no room for four.
        let keys = self.slices_by_service.entry(info.service.clone()).or_insert_with(|| Vec::with_capacity(1));
        if let Err(at) = keys.binary_search(&key) {
            keys.insert(at, key.clone());
        }
        let old = self.slices.get(&key);
        let t = &mut self.tally;
        Tally::swap(&mut t.slices, old.map_or(0, memory::slice), memory::slice(&info));
        Tally::swap(&mut t.endpoints, old.map_or(0, memory::endpoint_count), memory::endpoint_count(&info));
        self.slices.upsert(key, info);
    }

    fn delete_slice(&mut self, key: &ObjectKey) {
        if let Some(old) = self.slices.get(key) {
            let service = old.service.clone();
            Tally::swap(&mut self.tally.slices, memory::slice(old), 0);
            Tally::swap(&mut self.tally.endpoints, memory::endpoint_count(old), 0);
            self.unindex_slice(&service, key);
            self.slices.delete(key);
        }
    }

    fn unindex_slice(&mut self, service: &ServiceName, key: &ObjectKey) {
        if let Some(keys) = self.slices_by_service.get_mut(service) {
            keys.retain(|k| k != key);
            if keys.is_empty() {
                self.slices_by_service.remove(service);
            }
        }
    }

    /// Marks the services that select the Pod before or after the change.
    fn pod_changed(&mut self, old: Option<&PodInfo>, new: Option<&PodInfo>) {
        if !self.config.endpoint_controller {
            return;
        }
        let Some(namespace) = old.or(new).map(|p| p.namespace.clone()) else { return };
        let in_namespace = self.selecting.range(ServiceName::new(namespace.clone(), "")..);
        for name in in_namespace.take_while(|s| *s.namespace == *namespace) {
            let Some(selector) = self.services.get(name).and_then(|s| s.selector.as_ref()) else { continue };
            if [old, new].into_iter().flatten().any(|pod| controller::selects(selector, pod)) {
                self.derive_pending.insert(name.clone());
            }
        }
    }

    /// Folds everything pending into the state and returns what changed.
    pub fn take_changes(&mut self) -> Changes {
        self.derive_endpoints();
        let mut changes = Changes::default();
        let mut dirty: BTreeSet<ServiceName> = BTreeSet::new();

        if std::mem::take(&mut self.node_pending) {
            let node = node_state(&self.config, self.node.as_ref());
            if node != self.state.node {
                changes.node = true;
                let topology_changed = node.zone != self.state.node.zone
                    || node.node_port_addresses != self.state.node.node_port_addresses;
                self.state.node = node;
                if topology_changed {
                    dirty.extend(self.services.current().keys().cloned());
                }
            }
        }

        // Only the names are needed: the values are not copied.
        changes.service_changes = self.services.take_with(|name, _, _| {
            dirty.insert(name);
        });
        changes.endpoint_changes = self.slices.take_with(|_, before, after| {
            dirty.extend(before.map(|s| s.service).into_iter().chain(after.map(|s| s.service.clone())));
        });

        for name in &dirty {
            self.rebuild(name, &mut changes);
        }
        if std::mem::take(&mut self.cidrs_pending) {
            self.rebuild_cidrs(&mut changes);
        }
        changes.trigger_times = std::mem::take(&mut self.trigger_times);
        changes
    }

    fn derive_endpoints(&mut self) {
        for name in std::mem::take(&mut self.derive_pending) {
            let key = ObjectKey::new(Kind::Service, name.namespace.clone(), name.name.clone());
            let service = self.services.get(&name).filter(|s| s.selector.is_some() && s.ignored.is_none());
            match service.filter(|_| self.config.endpoint_controller) {
                Some(service) => {
                    let start = (name.namespace.clone(), String::new());
                    let pods =
                        self.pods.range(start..).take_while(|((ns, _), _)| **ns == *name.namespace).map(|(_, p)| p);
                    let derived = controller::derive(service, pods);
                    self.upsert_slice(key, derived);
                }
                None => self.delete_slice(&key),
            }
        }
    }

    /// Recomputes one service's ports in both families and records what
    /// differs from the current state.
    fn rebuild(&mut self, name: &ServiceName, changes: &mut Changes) {
        match self.services.get(name).and_then(|s| s.ignored.clone()) {
            Some(reason) => self.state.ignored.insert(name.clone(), reason),
            None => self.state.ignored.remove(name),
        };
        let slices = self.slices_by_service.get(name).into_iter().flatten().filter_map(|k| self.slices.get(k));
        let new_ports = match self.services.get(name) {
            Some(service) => service_ports(service, slices, &self.state.node, &self.config.mode),
            None => Vec::new(),
        };
        let mut by_family: [BTreeMap<ServicePortName, ServicePort>; 2] = Default::default();
        for port in new_ports {
            by_family[usize::from(port.family == IpFamily::V6)].insert(port.name.clone(), port);
        }
        for (family, mut new_of_family) in IpFamily::ALL.into_iter().zip(by_family) {
            let map = &mut self.state.family_mut(family).service_ports;
            let start = ServicePortName::first_of(name.clone());
            let old_names: Vec<ServicePortName> =
                map.range(start..).take_while(|(k, _)| k.service == *name).map(|(k, _)| k.clone()).collect();
            for old_name in old_names {
                let new = new_of_family.remove(&old_name);
                let old = map.get(&old_name).cloned();
                if old.as_deref() == new.as_ref() {
                    continue;
                }
                let sizes = (old.as_deref().map_or(0, memory::port), new.as_ref().map_or(0, memory::port));
                Tally::swap(&mut self.tally.ports, sizes.0, sizes.1);
                record_stale_udp(old.as_deref(), new.as_ref(), changes);
                changes.service_ports.insert((family, old_name.clone()));
                match new {
                    Some(new) => map.insert(old_name, Arc::new(new)),
                    None => map.remove(&old_name),
                };
            }
            for (new_name, new) in new_of_family {
                Tally::swap(&mut self.tally.ports, 0, memory::port(&new));
                record_stale_udp(None, Some(&new), changes);
                changes.service_ports.insert((family, new_name.clone()));
                map.insert(new_name, Arc::new(new));
            }
        }
    }

    fn rebuild_cidrs(&mut self, changes: &mut Changes) {
        let all: Vec<IpNet> =
            self.config.service_cidrs.iter().chain(self.service_cidr_objects.values().flatten()).copied().collect();
        for family in IpFamily::ALL {
            let cidrs = cidrs_of(all.iter(), family);
            let state = self.state.family_mut(family);
            if state.service_cidrs != cidrs {
                state.service_cidrs = cidrs;
                changes.service_cidrs = true;
            }
        }
    }
}

fn cidrs_of<'a>(cidrs: impl Iterator<Item = &'a IpNet>, family: IpFamily) -> Vec<IpNet> {
    let mut out: Vec<IpNet> = cidrs.copied().filter(|c| IpFamily::of(&c.addr()) == family).collect();
    out.sort();
    out.dedup();
    out
}
