//! lblc and lblcr: IPVS's locality-based least connection, keyed by the
//! destination address, with the kernel's expiry and overload rules. Time
//! is `Request::now`; this module never reads a clock.
//!
//! In kproxy the destination is the frontend address the client dialled,
//! so these pin each frontend address to a member (lblc) or a set of
//! members (lblcr) until it overloads.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use kproxy_model::Scheduler;

use crate::least::{overhead, weighted_least_connection, weighted_least_connection_of};
use crate::member::{View, weights};
use crate::{Load, Member, Request, Rng, Schedule};

/// How often expired entries are swept (IPVS `CHECK_EXPIRE_INTERVAL`).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// When over [`MAX_ENTRIES`], entries idle this long are dropped (IPVS
/// `ENTRY_TIMEOUT`).
pub const ENTRY_TIMEOUT: Duration = Duration::from_secs(6 * 60);
/// Entries above which no new one is made (IPVS: table size 1024 * 16).
pub const MAX_ENTRIES: usize = 1024 * 16;

/// Options of lblc and lblcr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalityOptions {
    /// An entry unused this long is forgotten; lblcr also drops a replica
    /// from a set unchanged this long (sysctl `lblc_expiration` /
    /// `lblcr_expiration`, default 24 hours).
    pub expiration: Duration,
}

impl Default for LocalityOptions {
    fn default() -> Self {
        LocalityOptions { expiration: Duration::from_secs(24 * 60 * 60) }
    }
}

#[derive(Clone, Debug)]
struct Entry<V> {
    value: V,
    last_use: Duration,
}

/// Destination address -> what it is pinned to, with IPVS's expiry.
#[derive(Clone, Debug)]
struct Cache<V> {
    entries: BTreeMap<IpAddr, Entry<V>>,
    next_sweep: Option<Duration>,
    expiration: Duration,
}

impl<V> Cache<V> {
    fn new(expiration: Duration) -> Self {
        Cache { entries: BTreeMap::new(), next_sweep: None, expiration }
    }

    fn expired(&self, e: &Entry<V>, now: Duration) -> bool {
        now.saturating_sub(e.last_use) >= self.expiration
    }

    /// At most every [`SWEEP_INTERVAL`]: drops expired entries, then, over
    /// [`MAX_ENTRIES`], up to min((len - max) * 4 / 3, max / 2) entries
    /// idle for [`ENTRY_TIMEOUT`], oldest first (IPVS's goal).
    fn sweep(&mut self, now: Duration) {
        if self.next_sweep.is_some_and(|at| now < at) {
            return;
        }
        self.next_sweep = Some(now + SWEEP_INTERVAL);
        let expiration = self.expiration;
        self.entries.retain(|_, e| now.saturating_sub(e.last_use) < expiration);
        if self.entries.len() <= MAX_ENTRIES {
            return;
        }
        let goal = ((self.entries.len() - MAX_ENTRIES) * 4 / 3).min(MAX_ENTRIES / 2);
        let mut idle: Vec<(Duration, IpAddr)> = self
            .entries
            .iter()
            .filter(|(_, e)| now.saturating_sub(e.last_use) >= ENTRY_TIMEOUT)
            .map(|(k, e)| (e.last_use, *k))
            .collect();
        idle.sort();
        for (_, k) in idle.into_iter().take(goal) {
            self.entries.remove(&k);
        }
    }

    /// The live entry of `key`, touched at `now`.
    fn touch(&mut self, key: IpAddr, now: Duration) -> Option<&mut V> {
        let live = self.entries.get(&key).is_some_and(|e| !self.expired(e, now));
        let e = self.entries.get_mut(&key).filter(|_| live)?;
        e.last_use = now;
        Some(&mut e.value)
    }

    /// Stores `value` for `key` unless the table is full (replacing is
    /// always allowed).
    fn insert(&mut self, key: IpAddr, value: V, now: Duration) {
        if self.entries.len() <= MAX_ENTRIES || self.entries.contains_key(&key) {
            self.entries.insert(key, Entry { value, last_use: now });
        }
    }
}

/// The members by id, for entries that outlive an update.
#[derive(Clone, Debug, Default)]
struct Roster {
    members: Vec<Member>,
    weights: Vec<u32>,
    index: BTreeMap<u64, usize>,
}

impl Roster {
    /// False when `members` are the ones already held.
    fn set(&mut self, members: &[Member]) -> bool {
        if self.members == members {
            return false;
        }
        self.members = members.to_vec();
        self.weights = weights(members);
        self.index = members.iter().enumerate().rev().map(|(i, m)| (m.id, i)).collect();
        true
    }
}

/// IPVS `is_overloaded`: more active connections than weight while some
/// eligible member is below half its weight.
fn overloaded(view: View<'_>, i: usize) -> bool {
    let busy = |j: usize| u64::from(view.load(j).active);
    busy(i) > u64::from(view.weight(i)) && view.eligible_indices().any(|j| busy(j) * 2 < u64::from(view.weight(j)))
}

/// Locality-based least connection: a destination address keeps the member
/// it was given (by wlc) while that member is eligible and not
/// [overloaded](overloaded); else it gets a new one by wlc.
#[derive(Clone, Debug)]
pub struct Lblc {
    roster: Roster,
    cache: Cache<u64>,
}

impl Lblc {
    pub fn new(options: LocalityOptions) -> Self {
        Lblc { roster: Roster::default(), cache: Cache::new(options.expiration) }
    }
}

impl Schedule for Lblc {
    fn kind(&self) -> Scheduler {
        Scheduler::Lblc
    }

    fn update(&mut self, members: &[Member]) {
        if self.roster.set(members) {
            let index = &self.roster.index;
            self.cache.entries.retain(|_, e| index.contains_key(&e.value));
        }
    }

    fn pick(&mut self, request: &Request, load: &[Load], usable: &[bool], _: &mut Rng) -> Option<usize> {
        let now = request.now;
        let key = request.destination.to_canonical();
        self.cache.sweep(now);
        let view = View::new(&self.roster.weights, load, usable);
        if let Some(&mut id) = self.cache.touch(key, now)
            && let Some(&i) = self.roster.index.get(&id)
            && view.eligible(i)
            && !overloaded(view, i)
        {
            return Some(i);
        }
        let i = weighted_least_connection(view)?;
        self.cache.insert(key, self.roster.members[i].id, now);
        Some(i)
    }
}

/// An lblcr entry: the member ids serving one destination, newest first.
#[derive(Clone, Debug)]
struct Replicas {
    ids: Vec<u64>,
    last_mod: Duration,
}

/// Locality-based least connection with replication: a destination address
/// keeps a set of members and gets the least loaded (wlc) of them; when
/// that one is [overloaded](overloaded) or none is eligible, the wlc pick
/// of all members joins the set. A set of two or more unchanged for the
/// expiration loses its most loaded member.
#[derive(Clone, Debug)]
pub struct Lblcr {
    roster: Roster,
    cache: Cache<Replicas>,
}

impl Lblcr {
    pub fn new(options: LocalityOptions) -> Self {
        Lblcr { roster: Roster::default(), cache: Cache::new(options.expiration) }
    }
}

/// IPVS `ip_vs_dest_set_max`: the first member of the set with the highest
/// overhead / weight among those with weight > 0.
fn most_loaded(view: View<'_>, set: &[usize]) -> Option<usize> {
    let mut most: Option<(usize, u128)> = None;
    for &i in set.iter().filter(|&&i| view.weight(i) > 0) {
        let oh = u128::from(overhead(view.load(i)));
        let worse = most.is_none_or(|(m, moh)| moh * u128::from(view.weight(i)) < oh * u128::from(view.weight(m)));
        if worse {
            most = Some((i, oh));
        }
    }
    most.map(|(i, _)| i)
}

impl Schedule for Lblcr {
    fn kind(&self) -> Scheduler {
        Scheduler::Lblcr
    }

    fn update(&mut self, members: &[Member]) {
        if self.roster.set(members) {
            let index = &self.roster.index;
            self.cache.entries.retain(|_, e| {
                e.value.ids.retain(|id| index.contains_key(id));
                !e.value.ids.is_empty()
            });
        }
    }

    fn pick(&mut self, request: &Request, load: &[Load], usable: &[bool], _: &mut Rng) -> Option<usize> {
        let now = request.now;
        let key = request.destination.to_canonical();
        let expiration = self.cache.expiration;
        self.cache.sweep(now);
        let view = View::new(&self.roster.weights, load, usable);
        let (index, members) = (&self.roster.index, &self.roster.members);
        let Some(replicas) = self.cache.touch(key, now) else {
            let i = weighted_least_connection(view)?;
            self.cache.insert(key, Replicas { ids: vec![members[i].id], last_mod: now }, now);
            return Some(i);
        };
        let set: Vec<usize> = replicas.ids.iter().filter_map(|id| index.get(id).copied()).collect();
        let least = weighted_least_connection_of(view, set.iter().copied());
        if set.len() > 1
            && now.saturating_sub(replicas.last_mod) > expiration
            && let Some(m) = most_loaded(view, &set)
        {
            replicas.ids.retain(|&id| id != members[m].id);
            replicas.last_mod = now;
        }
        if let Some(i) = least.filter(|&i| !overloaded(view, i)) {
            return Some(i);
        }
        let i = weighted_least_connection(view)?;
        if !replicas.ids.contains(&members[i].id) {
            replicas.ids.insert(0, members[i].id);
            replicas.last_mod = now;
        }
        Some(i)
    }
}

#[cfg(test)]
mod tests;
