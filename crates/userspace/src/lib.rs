//! The userspace dataplane: a TCP and UDP proxy per frontend, in this
//! process. It runs anywhere (without root it serves loopback addresses),
//! and does what only a proxy in the data path can: every IPVS scheduler
//! with live connection counts (kproxy-sched), retrying a refused connect
//! on another endpoint, and ejecting endpoints that keep refusing.
//!
//! A sync swaps what each frontend serves in place: endpoints that leave
//! get no new connections while connections already open to them carry on
//! (they drain); frontends that leave stop accepting, and their open
//! connections carry on too. A frontend that cannot listen (its port is
//! taken, its address is not local) is reported for that frontend; the
//! others keep working.

mod buffers;
mod claims;
mod frontend;
mod health;
mod service;
mod splice;
mod tcp;
mod udp;
mod workers;

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use kproxy_admin::listing::{Listing, RealServer, VirtualServer};
use kproxy_dataplane::{Dataplane, SyncFuture, SyncReport, SyncRequest};
use kproxy_model::{IpFamily, ModeSupport, Protocol, Scheduler, ServicePortName};
use tokio::task::JoinHandle;
use tracing::warn;

pub use claims::not_served;
use frontend::Target;
pub use service::{Counters, Service, Set};
pub use tcp::Traffic;
use workers::Workers;

/// How the proxy behaves; [`Settings::default`] has the production values.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Sources counted as inside the cluster (`clusterCIDR`); loopback
    /// sources always are. Traffic from outside follows
    /// `externalTrafficPolicy` on external frontends.
    pub cluster_cidrs: Vec<IpNet>,
    /// The scheduler of services without `kproxy.io/scheduler`.
    pub scheduler: Scheduler,
    pub connect_timeout: Duration,
    /// Endpoints tried per connection before giving up (refused or timed
    /// out connects only; nothing has reached an endpoint yet).
    pub connect_attempts: usize,
    /// Consecutive failed connects that take an endpoint out of the pick
    /// set (0: never), and for how long.
    pub eject_after: u32,
    pub eject_for: Duration,
    pub udp_idle_timeout: Duration,
    /// A TCP connection idle (no byte either way) this long is closed
    /// (zero: never); `tcp_half_closed_timeout` once one side has closed.
    pub tcp_idle_timeout: Duration,
    pub tcp_half_closed_timeout: Duration,
    /// Move bulk transfers with `splice` (zero-copy) where the kernel can;
    /// otherwise, and for small messages, bytes are copied.
    pub splice: bool,
    /// Relay threads for TCP (0: one per core), each accepting and
    /// carrying its own connections.
    pub workers: usize,
    /// Bind addresses that are not local (cluster IPs routed here) with
    /// `IP_FREEBIND`; needs `CAP_NET_ADMIN` only for routing them here.
    pub freebind: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            cluster_cidrs: Vec::new(),
            scheduler: Scheduler::Rr,
            connect_timeout: Duration::from_secs(2),
            connect_attempts: 3,
            eject_after: 3,
            eject_for: Duration::from_secs(10),
            udp_idle_timeout: Duration::from_secs(30),
            // conntrack's defaults for established and CLOSE_WAIT entries,
            // which is what the kernel modes give an idle connection.
            tcp_idle_timeout: Duration::from_secs(24 * 3600),
            tcp_half_closed_timeout: Duration::from_secs(3600),
            splice: true,
            workers: 0,
            freebind: true,
        }
    }
}

impl Settings {
    /// What this mode does of kproxy's annotations, for the state: every
    /// scheduler, weights as they are, health checks.
    pub fn support(&self) -> ModeSupport {
        ModeSupport { mode: "userspace", default_scheduler: self.scheduler, ..ModeSupport::default() }
    }

    pub fn in_cluster(&self, ip: IpAddr) -> bool {
        ip.is_loopback() || self.cluster_cidrs.iter().any(|c| c.contains(&ip))
    }
}

/// A listening frontend: its accept loops (one per relay thread for TCP).
struct Listening {
    target: Arc<Target>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A frontend as `/list` shows it.
type Frontend = (Protocol, SocketAddr, kproxy_model::FrontendKind, Arc<Service>);

/// The frontends of the last sync, for `/list`.
struct Published {
    frontends: std::sync::Mutex<Vec<Frontend>>,
    scheduler: Scheduler,
}

impl Listing for Published {
    fn list(&self) -> Vec<VirtualServer> {
        let frontends = self.frontends.lock().unwrap_or_else(|p| p.into_inner()).clone();
        frontends
            .into_iter()
            .map(|(protocol, addr, kind, service)| {
                let port = service.port();
                let set = service.set_for(kind, kind != kproxy_model::FrontendKind::ClusterIp);
                let endpoints = service
                    .snapshot(set)
                    .into_iter()
                    .map(|(addr, weight, load)| RealServer {
                        address: addr.to_string(),
                        forward: "Masq".into(),
                        weight,
                        active: Some(load.active),
                        inactive: Some(load.inactive),
                    })
                    .collect();
                VirtualServer {
                    protocol: protocol.to_string(),
                    frontend: addr.to_string(),
                    kind: kind.as_str().into(),
                    service: format!("{}:{}", port.name.service, port.name.port),
                    scheduler: port.scheduler.unwrap_or(self.scheduler).to_string(),
                    scheduler_flags: None,
                    persistent: port.session_affinity.map(|a| a.timeout_seconds),
                    netmask: None,
                    one_packet: false,
                    endpoints,
                }
            })
            .collect()
    }
}

/// The userspace proxy as a [`Dataplane`].
pub struct Userspace {
    published: Arc<Published>,
    settings: Arc<Settings>,
    traffic: Arc<Traffic>,
    /// `None`: the threads could not start; TCP is then served on the
    /// caller's runtime.
    workers: Option<Workers>,
    services: HashMap<(ServicePortName, IpFamily), Arc<Service>>,
    listening: HashMap<(Protocol, SocketAddr), Listening>,
    /// Frontends that failed to listen, with the reason, until they work.
    failed: HashMap<(Protocol, SocketAddr), String>,
    /// What the last sync left out by [`claims::owners`], reported once
    /// each while it lasts.
    unserved: BTreeSet<String>,
}

impl Userspace {
    pub fn new(settings: Settings) -> Self {
        let published = Arc::new(Published { frontends: Default::default(), scheduler: settings.scheduler });
        let workers = match Workers::start(settings.workers) {
            Ok(workers) => Some(workers),
            Err(e) => {
                warn!(error = %e, "cannot start relay threads; serving TCP on the main runtime");
                None
            }
        };
        Self {
            workers,
            published,
            settings: Arc::new(settings),
            traffic: Arc::default(),
            services: HashMap::new(),
            listening: HashMap::new(),
            failed: HashMap::new(),
            unserved: BTreeSet::new(),
        }
    }

    /// What the TCP relays moved (copied or spliced) and closed as idle.
    pub fn traffic(&self) -> Arc<Traffic> {
        self.traffic.clone()
    }

    /// The services being served, for `kproxy list`.
    pub fn services(&self) -> impl Iterator<Item = &Arc<Service>> {
        self.services.values()
    }

    fn apply(&mut self, request: &SyncRequest<'_>) -> SyncReport {
        let mut skipped = Vec::new();
        let mut services = HashMap::new();
        let mut unserved = Vec::new();
        let owners = claims::owners(request.state, &mut unserved);
        let unserved: BTreeSet<String> = unserved.into_iter().collect();
        skipped.extend(unserved.difference(&self.unserved).cloned());
        self.unserved = unserved;
        let mut wanted: HashMap<(Protocol, SocketAddr), (Arc<Service>, kproxy_model::FrontendKind)> = HashMap::new();
        for port in request.state.service_ports() {
            let key = (port.name.clone(), port.family);
            let shared = Arc::new(port.clone());
            let service = match self.services.remove(&key) {
                Some(existing) => match existing.update(shared, self.settings.scheduler) {
                    Ok(()) => existing,
                    Err(reason) => {
                        skipped.push(format!("{}: {reason}", port.name));
                        continue;
                    }
                },
                None => match Service::new(shared, self.settings.scheduler) {
                    Ok(service) => Arc::new(service),
                    Err(reason) => {
                        skipped.push(format!("{}: {reason}", port.name));
                        continue;
                    }
                },
            };
            // Not served (reported by `claims::owners`).
            if port.name.protocol == Protocol::Sctp {
                continue;
            }
            for frontend in &port.frontends {
                let key = (port.name.protocol, frontend.addr());
                if owners.get(&key).is_some_and(|(owner, _)| *owner == port.name) {
                    wanted.insert(key, (service.clone(), frontend.kind));
                }
            }
            services.insert(key, service);
        }
        self.services = services;

        self.listening.retain(|key, _| wanted.contains_key(key));
        self.failed.retain(|key, _| wanted.contains_key(key));
        for ((protocol, addr), (service, kind)) in wanted {
            if let Some(listening) = self.listening.get(&(protocol, addr)) {
                listening.target.set(service, kind);
                continue;
            }
            let target = Arc::new(Target::new(service, kind));
            match self.listen(protocol, addr, target.clone()) {
                Ok(tasks) => {
                    self.failed.remove(&(protocol, addr));
                    self.listening.insert((protocol, addr), Listening { target, tasks });
                }
                Err(e) => {
                    let reason = format!("frontend {addr}/{protocol}: cannot listen: {e}");
                    // Reported once; retried every sync.
                    if self.failed.insert((protocol, addr), reason.clone()).is_none() {
                        warn!(%reason, "frontend not served");
                        skipped.push(reason);
                    }
                }
            }
        }
        let mut published: Vec<_> = self
            .listening
            .iter()
            .map(|((protocol, addr), l)| {
                let (service, kind) = l.target.get();
                (*protocol, *addr, kind, service)
            })
            .collect();
        published.sort_by_key(|(protocol, addr, ..)| (*addr, *protocol));
        *self.published.frontends.lock().unwrap_or_else(|p| p.into_inner()) = published;
        let summary = format!(
            "userspace: {} service ports on {} frontends ({} not listening)",
            self.services.len(),
            self.listening.len(),
            self.failed.len()
        );
        SyncReport { summary, skipped, ..SyncReport::default() }
    }

    /// Listens on `addr`: for TCP one socket and accept loop per relay
    /// thread, for UDP one socket on the caller's runtime.
    fn listen(
        &self,
        protocol: Protocol,
        addr: SocketAddr,
        target: Arc<Target>,
    ) -> std::io::Result<Vec<JoinHandle<()>>> {
        let freebind = self.settings.freebind;
        let handles = self.workers.as_ref().map_or(&[][..], Workers::handles);
        if protocol == Protocol::Tcp && !handles.is_empty() {
            // Every socket is bound before any serves: a taken port fails
            // the frontend as a whole.
            let sockets = handles
                .iter()
                .map(|_| frontend::bind(protocol, addr, freebind, true))
                .collect::<std::io::Result<Vec<_>>>()?;
            let tasks = sockets
                .into_iter()
                .zip(handles)
                .map(|(socket, handle)| {
                    let (target, settings, traffic) = (target.clone(), self.settings.clone(), self.traffic.clone());
                    // The listener registers with the runtime it is made
                    // on: the relay thread's.
                    handle.spawn(async move {
                        match tokio::net::TcpListener::from_std(socket.into()) {
                            Ok(listener) => tcp::serve(listener, target, settings, traffic).await,
                            Err(e) => warn!(%addr, error = %e, "a relay thread cannot listen"),
                        }
                    })
                })
                .collect();
            return Ok(tasks);
        }
        let socket = frontend::bind(protocol, addr, freebind, false)?;
        let settings = self.settings.clone();
        Ok(vec![match protocol {
            Protocol::Tcp => {
                let listener = tokio::net::TcpListener::from_std(socket.into())?;
                tokio::spawn(tcp::serve(listener, target, settings, self.traffic.clone()))
            }
            _ => {
                let socket = tokio::net::UdpSocket::from_std(socket.into())?;
                tokio::spawn(udp::serve(socket, target, settings))
            }
        }])
    }
}

impl Dataplane for Userspace {
    fn mode(&self) -> &'static str {
        "userspace"
    }

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a> {
        Box::pin(async move { Ok(self.apply(&request)) })
    }

    fn listing(&self) -> Option<Arc<dyn Listing>> {
        Some(self.published.clone())
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.traffic.register(registry);
    }
}
