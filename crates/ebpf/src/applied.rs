//! What the maps hold after the last sync, and what it was planned from:
//! the input of the next plan. Built by a plan, or from a dump of pinned
//! maps ([`Applied::adopt`]) when kproxy starts with maps already there.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{FrontendKind, IpFamily, ServicePortName};

use crate::claims::Claims;
use crate::config::PlanConfig;
use crate::maps::{Backend, BackendKey, CidrKey, Contents, Frontend, FrontendKey, RangeKey, sched};

/// A backend group as written: immutable while it exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub sched: u8,
    pub slots: Arc<[Backend]>,
}

/// What one service port put in the maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PortEntry {
    /// Every frontend it claims (owned or not), for ownership changes.
    pub claims: Vec<(FrontendKey, FrontendKind)>,
    /// The frontends it programmed.
    pub frontends: Vec<FrontendKey>,
    pub groups: Vec<u32>,
    pub ranges: Vec<RangeKey>,
    pub owned_addresses: Vec<[u8; 16]>,
}

/// Id allocation: the smallest free id, else a new one. Ids come back to
/// the free list only once their map entries are gone for a whole sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ids {
    pub next: u32,
    pub free: BTreeSet<u32>,
}

impl Default for Ids {
    fn default() -> Self {
        // 0 means "none" (a group) or "an owned-address entry" (a frontend).
        Self { next: 1, free: BTreeSet::new() }
    }
}

impl Ids {
    pub fn allocate(&mut self) -> u32 {
        if let Some(id) = self.free.pop_first() {
            return id;
        }
        let id = self.next;
        self.next = self.next.checked_add(1).expect("fewer than 2^32 ids in use");
        id
    }
}

/// The maps' contents as kproxy last wrote them, with the bookkeeping a
/// partial plan needs. `Applied::default()` is empty maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The resolved configuration and node addresses of the last plan;
    /// `None` when adopted or empty (the next plan is then full).
    pub(crate) planned_with: Option<(PlanConfig, Vec<IpAddr>)>,
    pub(crate) ports: HashMap<(IpFamily, ServicePortName), PortEntry>,
    pub(crate) claims: Claims,
    pub(crate) frontends: HashMap<FrontendKey, Frontend>,
    pub(crate) groups: HashMap<u32, Group>,
    pub(crate) source_ranges: HashSet<RangeKey>,
    pub(crate) local_cidrs: BTreeSet<CidrKey>,
    /// Ports owning each cluster IP (its port-0 entry exists while > 0).
    pub(crate) owned_counts: HashMap<[u8; 16], u32>,
    /// Adopted entries no port has claimed yet: a full plan reuses what it
    /// wants of them and removes the rest.
    pub(crate) orphan_frontends: HashSet<FrontendKey>,
    pub(crate) orphan_groups: HashSet<u32>,
    pub(crate) orphan_ranges: HashSet<RangeKey>,
    /// Groups no frontend points at since the last sync: deleted by the
    /// next one, so a program that read a frontend before the last sync
    /// repointed it still finds the backends.
    pub(crate) released_groups: Vec<u32>,
    /// Frontend ids the last sync removed: free after the next one.
    pub(crate) released_frontend_ids: Vec<u32>,
    pub(crate) group_ids: Ids,
    pub(crate) frontend_ids: Ids,
}

impl Applied {
    /// What a dump of the maps says, before any plan: every entry is an
    /// orphan that the first (full) plan adopts when it wants that exact
    /// entry, and removes otherwise. An unchanged service keeps its ids
    /// and groups across a restart, so such a restart writes nothing.
    pub fn adopt(contents: &Contents) -> Applied {
        let mut applied = Applied::default();
        let mut slots: BTreeMap<u32, Vec<(u32, Backend)>> = BTreeMap::new();
        for (key, backend) in &contents.backends {
            slots.entry(key.group).or_default().push((key.slot, *backend));
        }
        let mut scheds: HashMap<u32, u8> = HashMap::new();
        for f in contents.frontends.values() {
            for s in [f.internal, f.external].into_iter().filter(|s| s.group != 0) {
                scheds.insert(s.group, s.sched);
            }
        }
        for (group, list) in slots {
            // Slots come sorted; holes make a group no plan will match.
            let whole = list.iter().enumerate().all(|(i, (slot, _))| *slot as usize == i);
            // Of a group nothing points at, the scheduler is unknown: say
            // RR so that its counter goes with it.
            let sched = match whole {
                true => scheds.get(&group).copied().unwrap_or(sched::RR),
                false => u8::MAX,
            };
            let slots: Arc<[Backend]> = list.into_iter().map(|(_, b)| b).collect();
            applied.groups.insert(group, Group { sched, slots });
            applied.orphan_groups.insert(group);
            applied.group_ids.next = applied.group_ids.next.max(group.saturating_add(1));
        }
        for (key, f) in &contents.frontends {
            applied.frontends.insert(*key, *f);
            applied.orphan_frontends.insert(*key);
            applied.frontend_ids.next = applied.frontend_ids.next.max(f.id.saturating_add(1));
        }
        applied.source_ranges = contents.source_ranges.iter().copied().collect();
        applied.orphan_ranges = applied.source_ranges.clone();
        applied.local_cidrs = contents.local_cidrs.clone();
        applied
    }

    /// The maps' contents this state stands for (including groups
    /// released by the last sync, which the next one deletes). Walks
    /// everything: for render, trace and tests, not for syncs.
    pub fn contents(&self) -> Contents {
        let mut contents = Contents {
            frontends: self.frontends.iter().map(|(k, v)| (*k, *v)).collect(),
            source_ranges: self.source_ranges.iter().copied().collect(),
            local_cidrs: self.local_cidrs.clone(),
            ..Contents::default()
        };
        for (id, group) in &self.groups {
            for (slot, backend) in (0u32..).zip(group.slots.iter()) {
                contents.backends.insert(BackendKey { group: *id, slot }, *backend);
            }
        }
        contents
    }

    /// Frontend entries (port-0 entries included).
    pub fn frontend_count(&self) -> usize {
        self.frontends.len()
    }

    /// Backend groups in the map (released ones included).
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Whether a partial plan may start from here: planned (not adopted)
    /// with this configuration and these node addresses.
    pub(crate) fn partial_ok(&self, config: &PlanConfig, node_ips: &[IpAddr]) -> bool {
        self.orphan_frontends.is_empty()
            && self.orphan_groups.is_empty()
            && self.orphan_ranges.is_empty()
            && self.planned_with.as_ref().is_some_and(|(c, ips)| c == config && ips == node_ips)
    }
}
