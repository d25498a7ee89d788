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
    services: ChangeTracker<ServiceName, ServiceInfo>,
    /// Keyed by the slice's own key; the endpoints the controller derives
    /// for a Service are keyed by that Service's key.
    slices: ChangeTracker<ObjectKey, SliceInfo>,
    slices_by_service: HashMap<ServiceName, BTreeSet<ObjectKey>>,
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
        self.slices_by_service.entry(info.service.clone()).or_default().insert(key.clone());
        self.slices.upsert(key, info);
    }

    fn delete_slice(&mut self, key: &ObjectKey) {
        if let Some(service) = self.slices.get(key).map(|s| s.service.clone()) {
            self.unindex_slice(&service, key);
            self.slices.delete(key);
        }
    }

    fn unindex_slice(&mut self, service: &ServiceName, key: &ObjectKey) {
        if let Some(keys) = self.slices_by_service.get_mut(service) {
            keys.remove(key);
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
                record_stale_udp(old.as_deref(), new.as_ref(), changes);
                changes.service_ports.insert((family, old_name.clone()));
                match new {
                    Some(new) => map.insert(old_name, Arc::new(new)),
                    None => map.remove(&old_name),
                };
            }
            for (new_name, new) in new_of_family {
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
