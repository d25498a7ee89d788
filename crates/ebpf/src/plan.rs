//! Plans: the map operations of one sync, in an order that keeps every
//! frontend whole (docs/ebpf.md, "Consistency"):
//!
//! 1. the backends of new groups;
//! 2. new source ranges and local CIDRs, then `kp_config`;
//! 3. frontends written or repointed, one update each;
//! 4. frontends removed, then source ranges and local CIDRs removed;
//! 5. the groups the *previous* sync released, and their RR counters.
//!
//! A full plan recomputes every service port; a partial plan only the
//! ports in [`Changes`] (and those whose contested frontends change
//! hands), so a one-service change costs that service's entries.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use kproxy_model::{Changes, IpFamily, ProxyState, ServicePort, ServicePortName};

use crate::applied::{Applied, Group, PortEntry};
use crate::claims::claims_of;
use crate::config::{Error, PlanConfig};
use crate::desire::{Pick, PortDesire, desire, owned_key};
use crate::maps::{BackendKey, Frontend, FrontendKey, Op, RangeKey, Selection, flags, sched, verdict};

/// One sync's operations, the state they leave, and what could not be
/// programmed.
#[derive(Clone, Debug)]
pub struct Planned {
    /// Map writes, in order.
    pub ops: Vec<Op>,
    /// What the maps hold once `ops` are applied: the next plan's input.
    pub applied: Applied,
    /// Whether every service port was recomputed.
    pub full: bool,
    /// Why parts of ports were not programmed (log lines).
    pub skips: Vec<String>,
}

/// Plans a sync from `previous` (what the maps hold: the last plan's
/// [`Planned::applied`], [`Applied::adopt`] of a dump, or
/// `Applied::default()` for empty maps). The plan is partial when `full`
/// is false and `previous` was planned with the same configuration and
/// node addresses; otherwise full.
pub fn plan(
    state: &ProxyState,
    changes: &Changes,
    full: bool,
    config: &PlanConfig,
    previous: Applied,
) -> Result<Planned, Error> {
    config.validate()?;
    let config = config.resolved(&state.node);
    let node_ips = state.node.node_port_addresses.clone();
    let partial = !full && previous.partial_ok(&config, &node_ips);
    let config_changed = previous.planned_with.as_ref().is_none_or(|(c, _)| *c != config);
    let mut sync = Sync::new(previous, &config, &node_ips);
    if partial {
        sync.partial(state, changes);
    } else {
        sync.full(state);
    }
    let ops = sync.ops(!partial || config_changed);
    let Sync { mut applied, skips, .. } = sync;
    applied.planned_with = Some((config, node_ips));
    Ok(Planned { ops, applied, full: !partial, skips })
}

/// The desired contents for `state`, planned on empty maps: what `kproxy
/// render` prints and `kproxy trace` walks without a running kproxy.
pub fn desired(state: &ProxyState, config: &PlanConfig) -> Result<Planned, Error> {
    plan(state, &Changes::default(), true, config, Applied::default())
}

/// A sync in progress: the applied state being updated, and what changed.
struct Sync<'a> {
    applied: Applied,
    config: &'a PlanConfig,
    node_ips: &'a [IpAddr],
    /// Each frontend entry written or removed, with its value before.
    touched: HashMap<FrontendKey, Option<Frontend>>,
    /// Each source range added or removed, and whether it was there.
    touched_ranges: HashMap<RangeKey, bool>,
    new_groups: Vec<u32>,
    /// Groups released by the previous sync, deleted by this one.
    deleting: Vec<u32>,
    /// Frontend ids the previous sync removed: free once this one is planned.
    freeing_frontend_ids: Vec<u32>,
    released_groups: Vec<u32>,
    released_frontend_ids: Vec<u32>,
    skips: Vec<String>,
}

impl<'a> Sync<'a> {
    fn new(mut applied: Applied, config: &'a PlanConfig, node_ips: &'a [IpAddr]) -> Self {
        let deleting = std::mem::take(&mut applied.released_groups);
        let freeing_frontend_ids = std::mem::take(&mut applied.released_frontend_ids);
        Self {
            applied,
            config,
            node_ips,
            touched: HashMap::new(),
            touched_ranges: HashMap::new(),
            new_groups: Vec::new(),
            deleting,
            freeing_frontend_ids,
            released_groups: Vec::new(),
            released_frontend_ids: Vec::new(),
            skips: Vec::new(),
        }
    }

    /// Every port, owners settled from scratch; then what no port wants
    /// of an adopted dump goes.
    fn full(&mut self, state: &ProxyState) {
        let previous_claims = std::mem::take(&mut self.applied.claims);
        let mut names: BTreeSet<(IpFamily, ServicePortName)> = self.applied.ports.keys().cloned().collect();
        for family in IpFamily::ALL {
            for port in state.family(family).service_ports.values() {
                self.applied.claims.add(&port.name, &claims_of(port));
                names.insert((family, port.name.clone()));
            }
        }
        self.applied.claims.settle_all(&previous_claims);
        for (family, name) in names {
            let port = state.service_port(family, &name);
            self.update_port(family, &name, port);
        }
        let orphans: Vec<FrontendKey> = self.applied.orphan_frontends.iter().copied().collect();
        for key in orphans {
            self.set_frontend(key, None);
        }
        let ranges: Vec<RangeKey> = self.applied.orphan_ranges.drain().collect();
        for range in ranges {
            self.set_range(range, false);
        }
        let groups: Vec<u32> = self.applied.orphan_groups.drain().collect();
        self.released_groups.extend(groups);
    }

    /// The changed ports, and the ports whose frontends change hands
    /// because of them.
    fn partial(&mut self, state: &ProxyState, changes: &Changes) {
        let mut todo: BTreeSet<(IpFamily, ServicePortName)> = changes.service_ports.iter().cloned().collect();
        let mut affected: HashMap<FrontendKey, Option<ServicePortName>> = HashMap::new();
        for (family, name) in &todo {
            let old = self.applied.ports.get(&(*family, name.clone())).map(|p| p.claims.clone()).unwrap_or_default();
            let new = state.service_port(*family, name).map(claims_of).unwrap_or_default();
            for (key, _) in old.iter().chain(&new) {
                affected.entry(*key).or_insert_with(|| self.applied.claims.owner(key).cloned());
            }
            self.applied.claims.remove(name, &old);
            self.applied.claims.add(name, &new);
        }
        for (key, before) in affected {
            let after = self.applied.claims.settle(key, before.as_ref());
            if before != after {
                let family = IpFamily::of(&crate::maps::ip_of(key.addr));
                for name in before.into_iter().chain(after) {
                    todo.insert((family, name));
                }
            }
        }
        for (family, name) in todo {
            let port = state.service_port(family, &name);
            self.update_port(family, &name, port);
        }
    }

    /// Replaces what `name` put in the maps with what `port` (`None`: gone)
    /// wants now.
    fn update_port(&mut self, family: IpFamily, name: &ServicePortName, port: Option<&ServicePort>) {
        let old = self.applied.ports.remove(&(family, name.clone())).unwrap_or_default();
        for addr in &old.owned_addresses {
            self.release_owned(*addr);
        }
        for range in &old.ranges {
            self.set_range(*range, false);
        }
        let mut entry = PortEntry::default();
        let mut kept_groups = Vec::new();
        if let Some(port) = port {
            let owned: Vec<_> = port
                .frontends
                .iter()
                .filter(|f| {
                    let key = crate::desire::frontend_key(f.ip, port.name.protocol, f.port);
                    self.applied.claims.owner(&key).is_none_or(|o| o == name)
                })
                .copied()
                .collect();
            let d = desire(port, &owned, self.config, self.node_ips);
            self.skips.extend(d.skips.iter().cloned());
            let ids = self.group_ids(&d, &old);
            kept_groups = ids.clone();
            self.write_frontends(&d, &ids, &old, &mut entry);
            for addr in &d.owned_addresses {
                self.claim_owned(*addr);
            }
            entry.owned_addresses = d.owned_addresses;
            entry.groups = ids;
            entry.claims = claims_of(port);
        }
        for key in &old.frontends {
            let others = self.applied.claims.owner(key).is_some_and(|o| o != name);
            if !entry.frontends.contains(key) && !others {
                self.set_frontend(*key, None);
            }
        }
        for g in old.groups.into_iter().filter(|g| !kept_groups.contains(g)) {
            self.released_groups.push(g);
        }
        if port.is_some() {
            self.applied.ports.insert((family, name.clone()), entry);
        }
    }

    /// The group id of each group `d` wants: the port's own identical
    /// group, an identical adopted one its frontend pointed at, or new.
    fn group_ids(&mut self, d: &PortDesire, old: &PortEntry) -> Vec<u32> {
        let mut ids: Vec<Option<u32>> = vec![None; d.groups.len()];
        let same = |applied: &Applied, id: u32, i: usize| {
            applied.groups.get(&id).is_some_and(|g| g.sched == d.groups[i].sched && g.slots == d.groups[i].slots)
        };
        for (i, slot) in ids.iter_mut().enumerate() {
            *slot = old.groups.iter().copied().find(|id| same(&self.applied, *id, i));
        }
        for f in &d.frontends {
            let Some(adopted) =
                self.applied.frontends.get(&f.key).copied().filter(|_| self.applied.orphan_frontends.contains(&f.key))
            else {
                continue;
            };
            for (pick, sel) in [(f.internal, adopted.internal), (f.external, adopted.external)] {
                if let Pick::Group(i) = pick
                    && ids[i].is_none()
                    && self.applied.orphan_groups.contains(&sel.group)
                    && same(&self.applied, sel.group, i)
                {
                    self.applied.orphan_groups.remove(&sel.group);
                    ids[i] = Some(sel.group);
                }
            }
        }
        ids.into_iter()
            .enumerate()
            .map(|(i, id)| match id {
                Some(id) => id,
                None => {
                    let id = self.applied.group_ids.allocate();
                    let spec = &d.groups[i];
                    self.applied.groups.insert(id, Group { sched: spec.sched, slots: spec.slots.clone() });
                    self.new_groups.push(id);
                    id
                }
            })
            .collect()
    }

    fn write_frontends(&mut self, d: &PortDesire, ids: &[u32], old: &PortEntry, entry: &mut PortEntry) {
        let selection = |pick: Pick| match pick {
            Pick::Verdict(v) => Selection { group: 0, count: 0, verdict: v, sched: 0 },
            Pick::Group(i) => Selection {
                group: ids[i],
                count: u16::try_from(d.groups[i].slots.len()).expect("at most 4096 slots"),
                verdict: verdict::FORWARD,
                sched: d.groups[i].sched,
            },
        };
        for f in &d.frontends {
            let mine = old.frontends.contains(&f.key) || self.applied.orphan_frontends.contains(&f.key);
            let id = match self.applied.frontends.get(&f.key).filter(|_| mine) {
                Some(existing) if existing.id != 0 => existing.id,
                _ => self.applied.frontend_ids.allocate(),
            };
            let value = Frontend {
                internal: selection(f.internal),
                external: selection(f.external),
                id,
                affinity_timeout: f.affinity_timeout,
                flags: f.flags,
                pad: 0,
            };
            self.set_frontend(f.key, Some(value));
            for (addr, bits) in &f.ranges {
                let range = RangeKey { prefixlen: 32 + bits, id: id.to_be(), addr: *addr };
                self.set_range(range, true);
                entry.ranges.push(range);
            }
            entry.frontends.push(f.key);
        }
    }

    fn set_frontend(&mut self, key: FrontendKey, value: Option<Frontend>) {
        let before = match value {
            Some(v) => self.applied.frontends.insert(key, v),
            None => self.applied.frontends.remove(&key),
        };
        self.applied.orphan_frontends.remove(&key);
        if let Some(b) = before
            && b.id != 0
            && value.map(|v| v.id) != Some(b.id)
        {
            self.released_frontend_ids.push(b.id);
        }
        self.touched.entry(key).or_insert(before);
    }

    fn set_range(&mut self, range: RangeKey, present: bool) {
        let was = match present {
            true => !self.applied.source_ranges.insert(range),
            false => self.applied.source_ranges.remove(&range),
        };
        self.applied.orphan_ranges.remove(&range);
        self.touched_ranges.entry(range).or_insert(was);
    }

    /// A port owns cluster IP `addr`: its port-0 entry rejects the ports
    /// no service serves.
    fn claim_owned(&mut self, addr: [u8; 16]) {
        let count = self.applied.owned_counts.entry(addr).or_default();
        *count += 1;
        if *count == 1 {
            let reject = Selection { group: 0, count: 0, verdict: verdict::REJECT, sched: sched::RANDOM };
            let value = Frontend {
                internal: reject,
                external: reject,
                id: 0,
                affinity_timeout: 0,
                flags: flags::OWNED_ADDRESS,
                pad: 0,
            };
            self.set_frontend(owned_key(addr), Some(value));
        }
    }

    fn release_owned(&mut self, addr: [u8; 16]) {
        let Some(count) = self.applied.owned_counts.get_mut(&addr) else { return };
        *count -= 1;
        if *count == 0 {
            self.applied.owned_counts.remove(&addr);
            self.set_frontend(owned_key(addr), None);
        }
    }

    /// The operations, in the consistent order (module doc). `assert`:
    /// write `kp_config` and the local CIDRs (full plans, new config).
    fn ops(&mut self, assert: bool) -> Vec<Op> {
        let mut ops = Vec::new();
        self.new_groups.sort_unstable();
        for id in &self.new_groups {
            let group = &self.applied.groups[id];
            for (slot, backend) in (0u32..).zip(group.slots.iter()) {
                ops.push(Op::PutBackend(BackendKey { group: *id, slot }, *backend));
            }
        }
        let mut ranges: Vec<(RangeKey, bool)> = self
            .touched_ranges
            .iter()
            .map(|(r, was)| (*r, *was))
            .filter(|(r, was)| *was != self.applied.source_ranges.contains(r))
            .collect();
        ranges.sort_unstable();
        ops.extend(ranges.iter().filter(|(_, was)| !was).map(|(r, _)| Op::PutSourceRange(*r)));
        let mut removed_cidrs = Vec::new();
        if assert {
            let want: BTreeSet<_> = self.config.local_cidr_keys().into_iter().collect();
            ops.extend(want.difference(&self.applied.local_cidrs).map(|c| Op::PutLocalCidr(*c)));
            removed_cidrs = self.applied.local_cidrs.difference(&want).copied().collect();
            self.applied.local_cidrs = want;
            ops.push(Op::PutConfig(self.config.kp_config()));
        }
        let mut touched: Vec<(FrontendKey, Option<Frontend>)> = self.touched.drain().collect();
        touched.sort_unstable_by_key(|(k, _)| *k);
        let mut deletes = Vec::new();
        for (key, before) in touched {
            match (before, self.applied.frontends.get(&key)) {
                (before, Some(now)) if before.as_ref() != Some(now) => ops.push(Op::PutFrontend(key, *now)),
                (Some(_), None) => deletes.push(Op::DeleteFrontend(key)),
                _ => {}
            }
        }
        ops.extend(deletes);
        ops.extend(ranges.iter().filter(|(_, was)| *was).map(|(r, _)| Op::DeleteSourceRange(*r)));
        ops.extend(removed_cidrs.into_iter().map(Op::DeleteLocalCidr));
        self.deleting.sort_unstable();
        for id in std::mem::take(&mut self.deleting) {
            let Some(group) = self.applied.groups.remove(&id) else { continue };
            ops.extend((0..group.slots.len() as u32).map(|slot| Op::DeleteBackend(BackendKey { group: id, slot })));
            if group.sched == sched::RR {
                ops.push(Op::DeleteRr(id));
            }
            // Deleted now: free for the sync after this one.
            self.applied.group_ids.free.insert(id);
        }
        self.applied.released_groups = std::mem::take(&mut self.released_groups);
        self.applied.released_groups.sort_unstable();
        self.applied.released_frontend_ids = std::mem::take(&mut self.released_frontend_ids);
        // Gone from the maps for a whole sync: free from the next one on.
        self.applied.frontend_ids.free.extend(std::mem::take(&mut self.freeing_frontend_ids));
        ops
    }
}
