//! One service port at run time: its endpoints with live counters, a
//! scheduler per endpoint set, session affinity, and passive ejection.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kproxy_model::{Endpoint, FrontendKind, HealthCheck, Scheduler, ServicePort, TrafficPolicy};
use kproxy_sched::{Load, Member, Request, Rng, Schedule, member_id};

use crate::Settings;

/// Counters of one endpoint, shared by every pool and connection using it,
/// and kept across syncs while the endpoint stays.
#[derive(Debug)]
pub struct Counters {
    /// Connections (or UDP flows) open in both directions.
    pub active: AtomicU32,
    /// Connections with one direction closed.
    pub inactive: AtomicU32,
    /// Consecutive failed connects.
    failures: AtomicU32,
    /// Out of the pick set until then (passive ejection).
    ejected_until: Mutex<Option<Instant>>,
    /// The active health check passes (or there is none).
    pub healthy: AtomicBool,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            active: AtomicU32::new(0),
            inactive: AtomicU32::new(0),
            failures: AtomicU32::new(0),
            ejected_until: Mutex::new(None),
            healthy: AtomicBool::new(true),
        }
    }
}

impl Counters {
    /// Out of the pick set: ejected after failed connects, or failing its
    /// health check.
    fn ejected(&self, now: Instant) -> bool {
        !self.healthy.load(Ordering::Relaxed) || lock(&self.ejected_until).is_some_and(|until| now < until)
    }

    pub fn connected(&self) {
        self.failures.store(0, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    /// A connect failed; after `settings.eject_after` in a row the
    /// endpoint leaves the pick set for `settings.eject_for`.
    pub fn failed(&self, now: Instant, settings: &Settings) -> bool {
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        let eject = settings.eject_after > 0 && failures >= settings.eject_after;
        if eject {
            *lock(&self.ejected_until) = Some(now + settings.eject_for);
            self.failures.store(0, Ordering::Relaxed);
        }
        eject
    }

    pub fn half_closed(&self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.inactive.fetch_add(1, Ordering::Relaxed);
    }

    pub fn closed(&self, half_closed_before: bool) {
        let counter = if half_closed_before { &self.inactive } else { &self.active };
        counter.fetch_sub(1, Ordering::Relaxed);
    }

    fn load(&self) -> Load {
        Load { active: self.active.load(Ordering::Relaxed), inactive: self.inactive.load(Ordering::Relaxed) }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An endpoint a connection went to.
#[derive(Clone, Debug)]
pub struct Picked {
    pub addr: SocketAddr,
    pub weight: u32,
    pub counters: Arc<Counters>,
}

/// The endpoints of one set (cluster-wide or this node's) and their
/// scheduler.
#[derive(Debug)]
struct Pool {
    slots: Vec<Picked>,
    scheduler: Box<dyn Schedule>,
    rng: Rng,
}

impl Pool {
    fn pick(&mut self, request: &Request, exclude: &[SocketAddr], now: Instant) -> Option<Picked> {
        let load: Vec<Load> = self.slots.iter().map(|s| s.counters.load()).collect();
        let usable: Vec<bool> =
            self.slots.iter().map(|s| !exclude.contains(&s.addr) && !s.counters.ejected(now)).collect();
        let i = self.scheduler.pick(request, &load, &usable, &mut self.rng)?;
        self.slots.get(i).cloned()
    }
}

/// Which endpoint set a connection uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Set {
    Cluster,
    Local,
}

impl Set {
    fn of(policy: TrafficPolicy) -> Set {
        match policy {
            TrafficPolicy::Cluster => Set::Cluster,
            TrafficPolicy::Local => Set::Local,
        }
    }
}

/// One service port as the proxy serves it.
#[derive(Debug)]
pub struct Service {
    port: Mutex<Arc<ServicePort>>,
    pools: Mutex<[Option<Pool>; 2]>,
    counters: Mutex<HashMap<SocketAddr, Arc<Counters>>>,
    /// Client address -> (endpoint, last use).
    affinity: Mutex<HashMap<IpAddr, (SocketAddr, Instant)>>,
    /// The health check in force, and a probing task per endpoint.
    checks: Mutex<(Option<HealthCheck>, HashMap<SocketAddr, Task>)>,
}

/// A task aborted when dropped.
#[derive(Debug)]
struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Service {
    /// A service for `port`, or the reason its scheduler is not available.
    pub fn new(port: Arc<ServicePort>, default: Scheduler) -> Result<Service, String> {
        let service = Service {
            port: Mutex::new(port.clone()),
            pools: Mutex::new([None, None]),
            counters: Mutex::new(HashMap::new()),
            affinity: Mutex::new(HashMap::new()),
            checks: Mutex::new((None, HashMap::new())),
        };
        service.update(port, default)?;
        Ok(service)
    }

    pub fn port(&self) -> Arc<ServicePort> {
        lock(&self.port).clone()
    }

    /// New endpoints or settings. Counters and affinity of endpoints that
    /// stay are kept; connections to endpoints that left carry on (they hold
    /// their own handle) but no new one goes there.
    pub fn update(&self, port: Arc<ServicePort>, default: Scheduler) -> Result<(), String> {
        let kind = port.scheduler.unwrap_or(default);
        let mut counters = lock(&self.counters);
        let mut keep: HashMap<SocketAddr, Arc<Counters>> = HashMap::new();
        let mut slots_of = |endpoints: &[Endpoint]| -> Vec<Picked> {
            endpoints
                .iter()
                .map(|e| {
                    let addr = e.addr();
                    // One set of counters per endpoint, in both pools.
                    let c = keep.get(&addr).or_else(|| counters.get(&addr)).cloned().unwrap_or_default();
                    keep.insert(addr, c.clone());
                    Picked { addr, weight: port.weight_of(e.ip), counters: c }
                })
                .collect()
        };
        let sets = [slots_of(&port.cluster_endpoints), slots_of(&port.local_endpoints)];
        *counters = keep;
        self.check(&port, &counters);
        drop(counters);

        let mut pools = lock(&self.pools);
        for (pool, slots) in pools.iter_mut().zip(sets) {
            let members: Vec<Member> =
                slots.iter().map(|s| Member { id: member_id(s.addr), weight: s.weight }).collect();
            match pool {
                Some(p) if p.scheduler.kind() == kind => {
                    p.scheduler.update(&members);
                    p.slots = slots;
                }
                _ => {
                    let mut scheduler = kproxy_sched::scheduler(kind).map_err(|e| e.to_string())?;
                    scheduler.update(&members);
                    *pool = Some(Pool { slots, scheduler, rng: Rng::new(seed()) });
                }
            }
        }
        drop(pools);
        *lock(&self.port) = port;
        Ok(())
    }

    /// Keeps one health-check task per endpoint while the service asks for
    /// checks (restarting them when the check changes), none otherwise.
    fn check(&self, port: &ServicePort, counters: &HashMap<SocketAddr, Arc<Counters>>) {
        let mut checks = lock(&self.checks);
        if checks.0 != port.health_check {
            checks.1.clear();
            checks.0 = port.health_check.clone();
            for c in counters.values() {
                c.healthy.store(true, Ordering::Relaxed);
            }
        }
        let Some(check) = checks.0.clone() else { return };
        checks.1.retain(|addr, _| counters.contains_key(addr));
        for (addr, c) in counters {
            checks
                .1
                .entry(*addr)
                .or_insert_with(|| Task(tokio::spawn(crate::health::watch(*addr, c.clone(), check.clone()))));
        }
    }

    /// The set traffic from `source` (outside the cluster or not) to a
    /// frontend of `kind` uses (SEMANTICS.md, "Choosing endpoints").
    pub fn set_for(&self, kind: FrontendKind, external_source: bool) -> Set {
        let port = self.port();
        match (kind.is_external(), external_source) {
            (false, _) => Set::of(port.internal_traffic_policy),
            (true, true) => Set::of(port.external_traffic_policy),
            (true, false) => Set::Cluster,
        }
    }

    /// An endpoint for a new connection from `client` to `frontend`, not
    /// one of `exclude` (endpoints already tried), honouring affinity.
    pub fn pick(
        &self,
        set: Set,
        client: SocketAddr,
        frontend: SocketAddr,
        exclude: &[SocketAddr],
        affinity_timeout: Option<Duration>,
        now: Instant,
    ) -> Option<Picked> {
        let mut pools = lock(&self.pools);
        let pool = pools[set as usize].as_mut()?;
        if let Some(timeout) = affinity_timeout {
            let mut affinity = lock(&self.affinity);
            if let Some((addr, last)) = affinity.get(&client.ip()).copied()
                && now.saturating_duration_since(last) < timeout
                && !exclude.contains(&addr)
                && let Some(slot) =
                    pool.slots.iter().find(|s| s.addr == addr && s.weight > 0 && !s.counters.ejected(now))
            {
                affinity.insert(client.ip(), (addr, now));
                return Some(slot.clone());
            }
        }
        let request = Request {
            source: client.ip(),
            source_port: client.port(),
            destination: frontend.ip(),
            destination_port: frontend.port(),
            now: now.duration_since(*EPOCH),
        };
        let picked = pool.pick(&request, exclude, now)?;
        if affinity_timeout.is_some() {
            let mut affinity = lock(&self.affinity);
            affinity.insert(client.ip(), (picked.addr, now));
            if affinity.len() > AFFINITY_SWEEP_AT {
                let timeout = affinity_timeout.unwrap_or_default();
                affinity.retain(|_, (_, last)| now.saturating_duration_since(*last) < timeout);
            }
        }
        Some(picked)
    }

    /// Endpoint addresses of a set with their counters, for `kproxy list`.
    pub fn snapshot(&self, set: Set) -> Vec<(SocketAddr, u32, Load)> {
        let pools = lock(&self.pools);
        let Some(pool) = &pools[set as usize] else { return Vec::new() };
        pool.slots.iter().map(|s| (s.addr, s.weight, s.counters.load())).collect()
    }
}

/// Affinity entries are swept of expired ones once there are this many.
const AFFINITY_SWEEP_AT: usize = 4096;

static EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// A seed for a pool's random choices: different per pool and process.
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(EPOCH.elapsed().as_nanos());
    h.finish()
}
