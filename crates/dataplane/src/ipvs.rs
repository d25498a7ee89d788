//! The IPVS mode: virtual servers over generic netlink (`kproxy-netlink`'s
//! `ipvs::Client`), their addresses on the `kube-ipvs0` dummy interface,
//! and the companion nftables table `kproxy-ipvs` for what IPVS cannot do
//! (`kproxy_ipvs::companion`).
//!
//! Which virtual servers are kproxy's: those on an address of `kube-ipvs0`,
//! those this process programmed, and node ports (an address node ports
//! are served on, a port in the default node-port range). Nothing else in
//! the kernel is read, changed or deleted, so a virtual server someone
//! else made survives every sync and `kproxy cleanup`; `ipvs.excludeCIDRs`
//! protects kproxy's own as well.
//!
//! A full sync (the first, after a failure, hourly) reads every owned
//! server with its destinations from the kernel; a partial sync trusts
//! what the last one applied and reads back only the servers with a
//! destination leaving (for its connection counts, to finish graceful
//! termination). Either way only the differences are sent.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};

use kproxy_admin::listing::{Listing, RealServer as ListedReal, VirtualServer as ListedServer};
use kproxy_ipvs::companion;
use kproxy_ipvs::{Connections, ObservedServer, Op, Owner, Plan, PlanConfig, RealServer, ServerKey, VirtualServer};
use kproxy_model::{IpFamily, IpNet, Protocol, ProxyState};
use kproxy_netlink::ipvs::{
    self as kernel, Client, ClientError, Destination, Family, Request, Service, ServiceEntry, ServiceFlags, ServiceKey,
    Timeouts,
};
use kproxy_netlink::links;
use tracing::{debug, info, warn};

use crate::companion::Companion;
use crate::conntrack::flush_stale_udp;
use crate::dataplane::{Dataplane, DataplaneError, SyncFuture, SyncKind, SyncReport, SyncRequest};
use crate::sysctl::{Ensured, KernelFiles};

/// The dummy interface holding service addresses, as kube-proxy names it.
pub const INTERFACE: &str = "kube-ipvs0";

/// Node ports live here unless the API server was told otherwise; only
/// such servers on node addresses count as kproxy's.
const NODE_PORT_RANGE: RangeInclusive<u16> = 30000..=32767;

/// The IPVS mode's settings.
#[derive(Clone, Debug, Default)]
pub struct IpvsConfig {
    pub plan: PlanConfig,
    /// The companion table's masquerade bit, `masqueradeAll` and
    /// local-traffic detector (the nftables planner's settings).
    pub companion: kproxy_nftables::PlanConfig,
    /// `ipvs.excludeCIDRs`: servers there are never deleted.
    pub exclude_cidrs: Vec<IpNet>,
    /// `ipvs.strictARP`.
    pub strict_arp: bool,
    /// `ipvs.tcpTimeout`, `tcpFinTimeout`, `udpTimeout` in seconds; 0
    /// keeps the kernel's value.
    pub timeouts: Timeouts,
}

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum IpvsError {
    #[error("IPVS: {0}")]
    Client(#[source] ClientError),
    #[error("{INTERFACE}: {0}")]
    Interface(#[source] links::LinkError),
    /// Some IPVS changes were refused; the others were applied.
    #[error("IPVS refused {count} of {total} changes; the first: {first}")]
    Refused {
        count: usize,
        total: usize,
        first: String,
        /// The kernel's errno for the first, when it gave one.
        errno: Option<i32>,
    },
    #[error("the kernel refused the companion table kproxy-ipvs")]
    Companion(#[source] crate::nftables::NftablesError),
}

/// The IPVS mode.
pub struct Ipvs {
    config: IpvsConfig,
    /// Taken into the blocking task for each sync, and given back.
    client: Option<Client>,
    /// What the last successful sync left in the kernel; `None` forces a
    /// full read.
    applied: Option<BTreeMap<ServerKey, VirtualServer>>,
    /// Servers this process programmed, whether or not they are on
    /// `kube-ipvs0` (node ports).
    programmed: BTreeSet<ServerKey>,
    companion: Companion,
    prepared: bool,
    reported: BTreeSet<String>,
    /// What each of kproxy's servers serves, for `/list`.
    labels: Arc<Mutex<BTreeMap<ServiceKey, Label>>>,
}

impl Ipvs {
    /// Connects to IPVS; fails when the kernel has none.
    pub fn new(config: IpvsConfig) -> Result<Self, IpvsError> {
        let client = Client::connect().map_err(IpvsError::Client)?;
        Ok(Self {
            config,
            client: Some(client),
            applied: None,
            programmed: BTreeSet::new(),
            companion: Companion::new(companion::TABLE),
            prepared: false,
            reported: BTreeSet::new(),
            labels: Arc::default(),
        })
    }

    async fn sync_inner(&mut self, request: SyncRequest<'_>) -> Result<SyncReport, DataplaneError> {
        if !self.prepared {
            prepare(&self.config);
            self.prepared = true;
        }
        let full = request.kind == SyncKind::Full || self.applied.is_none();
        let plan = kproxy_ipvs::plan(request.state, &self.config.plan);

        let index = links::ensure_dummy(INTERFACE).await.map_err(IpvsError::Interface)?;
        let bound = links::addresses(index).await.map_err(IpvsError::Interface)?;
        let mut bind_failures = Vec::new();
        for ip in plan.addresses.difference(&bound) {
            if let Err(e) = links::add_address(index, *ip).await {
                bind_failures.push(format!("binding {ip} to {INTERFACE}: {e}"));
            }
        }

        let client = self.client.take().expect("the client is given back after each sync");
        let mut marks: BTreeMap<(Family, u32), ServerKey> = self.programmed.iter().filter_map(mark_entry).collect();
        marks.extend(plan.servers.keys().filter_map(mark_entry));
        let owned = Ownership {
            addresses: bound.union(&plan.addresses).copied().collect(),
            node_addresses: request.state.node.node_port_addresses.iter().copied().collect(),
            programmed: self.programmed.clone(),
            marks,
            masquerade_bit: Some(self.config.plan.masquerade_bit),
        };
        let applied = if full { None } else { self.applied.take() };
        let desired = plan.servers.clone();
        let exclude = self.config.exclude_cidrs.clone();
        let (client, outcome) = tokio::task::spawn_blocking(move || {
            let mut client = client;
            let outcome = apply(&mut client, applied, &desired, &owned, &exclude);
            (client, outcome)
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        self.client = Some(client);
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                self.applied = None;
                return Err(IpvsError::Client(e).into());
            }
        };

        for ip in bound.difference(&plan.addresses) {
            if let Err(e) = links::delete_address(index, *ip).await {
                warn!(%ip, error = %e, "cannot unbind an address no service uses from {INTERFACE}");
            }
        }

        self.sync_companion(request.state, &plan).await?;
        let conntrack_runs = flush_stale_udp(request.changes).await;
        let conntrack = crate::conntrack::deleted(&conntrack_runs);

        self.programmed = outcome.kernel.keys().copied().collect();
        *self.labels.lock().expect("labels lock") = labels(&plan);
        let failures = outcome.failures;
        let total = outcome.ops;
        let servers = outcome.kernel.len();
        self.applied = if failures.is_empty() { Some(outcome.kernel) } else { None };

        let mut skipped: Vec<String> = plan.rejected.iter().map(|r| r.to_string()).collect();
        skipped.extend(bind_failures);
        let current: BTreeSet<String> = skipped.into_iter().collect();
        let new: Vec<String> = current.difference(&self.reported).cloned().collect();
        self.reported = current;
        if let Some((first, errno)) = failures.first() {
            let (count, first, errno) = (failures.len(), first.clone(), *errno);
            return Err(IpvsError::Refused { count, total, first, errno }.into());
        }
        let kind = if full { "full" } else { "partial" };
        let summary = format!(
            "{kind}: {total} IPVS changes, {servers} virtual servers, {} addresses on {INTERFACE}, {conntrack} conntrack entries deleted",
            plan.addresses.len()
        );
        Ok(SyncReport { summary, skipped: new, conntrack: conntrack_runs, ..SyncReport::default() })
    }

    /// Brings the companion table of each family to what `plan` needs, in
    /// one transaction.
    async fn sync_companion(&mut self, state: &ProxyState, plan: &Plan) -> Result<(), IpvsError> {
        let config = self.config.companion.resolved(&state.node);
        let tables = IpFamily::ALL.into_iter().map(|f| (f, companion::table(state, plan, f, &config))).collect();
        self.companion.sync(tables, false, companion::ops).await.map_err(IpvsError::Companion)
    }
}

impl Dataplane for Ipvs {
    fn mode(&self) -> &'static str {
        "ipvs"
    }

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a> {
        Box::pin(self.sync_inner(request))
    }

    fn listing(&self) -> Option<Arc<dyn Listing>> {
        Some(Arc::new(KernelListing { labels: self.labels.clone() }))
    }
}

/// `/list` in IPVS mode: every virtual server in the kernel, in
/// `ipvsadm -Ln`'s order and with its counts, kproxy's own ones annotated
/// with the service and frontend kind.
struct KernelListing {
    labels: Arc<Mutex<BTreeMap<ServiceKey, Label>>>,
}

/// The `# kind service` comment of one of kproxy's servers in `/list`.
#[derive(Clone, Debug)]
struct Label {
    kind: String,
    service: String,
}

fn labels(plan: &Plan) -> BTreeMap<ServiceKey, Label> {
    let label = |owner: &Owner, suffix: &str| Label {
        kind: format!("{}{suffix}", owner.kind.as_str()),
        service: format!("{}:{}", owner.port.service, owner.port.port),
    };
    let mut out: BTreeMap<ServiceKey, Label> =
        plan.owners.iter().map(|(key, owner)| (kernel_key(key), label(owner, ""))).collect();
    for (frontend, marks) in &plan.short_circuits {
        let Some(owner) = plan.owners.get(frontend) else { continue };
        let address = SocketAddr::new(frontend.addr, frontend.port);
        for (mark, who) in [(marks.pods, "pods"), (marks.node, "node")] {
            let key = kernel_key(&ServerKey { mark: Some(mark), ..*frontend });
            out.insert(key, label(owner, &format!(" {address} in-cluster ({who})")));
        }
    }
    out
}

impl Listing for KernelListing {
    fn list(&self) -> Vec<ListedServer> {
        let table = Client::connect().and_then(|mut client| kernel::read_table(&mut client));
        let table = match table {
            Ok(table) => table,
            Err(e) => {
                warn!(error = %e, "cannot read IPVS for /list");
                return Vec::new();
            }
        };
        let labels = self.labels.lock().expect("labels lock").clone();
        table.services.iter().map(|listed| row(listed, &labels)).collect()
    }
}

fn row(listed: &kernel::ListedService, labels: &BTreeMap<ServiceKey, Label>) -> ListedServer {
    use kernel::listing;
    let s = &listed.entry.service;
    let label = labels.get(&s.key);
    let endpoints = listed
        .destinations
        .iter()
        .map(|d| ListedReal {
            address: listing::address_port(d.destination.addr, d.destination.port),
            forward: listing::forward_name(d.destination.forward).into(),
            weight: d.destination.weight,
            active: Some(d.connections.active),
            inactive: Some(d.connections.inactive),
        })
        .collect();
    ListedServer {
        protocol: listing::protocol_name(&s.key).into(),
        frontend: listing::virtual_address(&s.key),
        kind: label.map(|l| l.kind.clone()).unwrap_or_default(),
        service: label.map(|l| l.service.clone()).unwrap_or_default(),
        scheduler: s.scheduler.clone(),
        scheduler_flags: listing::scheduler_flags(s),
        persistent: s.flags.contains(ServiceFlags::PERSISTENT).then_some(s.timeout),
        netmask: listing::persistence_mask(s),
        one_packet: s.flags.contains(ServiceFlags::ONE_PACKET),
        endpoints,
    }
}

/// Which servers in the kernel are kproxy's, and the planner's keys of
/// firewall-mark servers (the kernel knows only family and mark).
struct Ownership {
    /// On `kube-ipvs0`, or about to be.
    addresses: BTreeSet<IpAddr>,
    node_addresses: BTreeSet<IpAddr>,
    programmed: BTreeSet<ServerKey>,
    /// Mark servers wanted or programmed, by kernel key.
    marks: BTreeMap<(Family, u32), ServerKey>,
    /// Which marks are kproxy's; `None` (cleanup, which has no
    /// configuration): those of any masquerade bit.
    masquerade_bit: Option<u32>,
}

impl Ownership {
    /// The planner's key of a kernel service kproxy owns; `None` for
    /// everything else.
    fn key_of(&self, key: &ServiceKey) -> Option<ServerKey> {
        match *key {
            ServiceKey::Addr { protocol, addr, port } => {
                let key = ServerKey::new(model_protocol(protocol)?, addr, port);
                let owned = self.addresses.contains(&key.addr)
                    || self.programmed.contains(&key)
                    || (self.node_addresses.contains(&key.addr) && NODE_PORT_RANGE.contains(&key.port));
                owned.then_some(key)
            }
            ServiceKey::Fwmark { family, mark } => {
                if let Some(key) = self.marks.get(&(family, mark)) {
                    return Some(*key);
                }
                // Left by an earlier run: only deleted, so the frontend is moot.
                let ours = match self.masquerade_bit {
                    Some(bit) => kproxy_ipvs::is_short_circuit_mark(mark, bit),
                    None => (0..32).any(|bit| kproxy_ipvs::is_short_circuit_mark(mark, bit)),
                };
                ours.then(|| ServerKey { mark: Some(mark), ..ServerKey::new(Protocol::Tcp, unspecified(family), 0) })
            }
        }
    }
}

fn mark_entry(key: &ServerKey) -> Option<((Family, u32), ServerKey)> {
    key.mark.map(|mark| ((Family::of(&key.addr), mark), *key))
}

fn unspecified(family: Family) -> IpAddr {
    match family {
        Family::Inet => IpAddr::from([0u8; 4]),
        Family::Inet6 => IpAddr::from([0u8; 16]),
    }
}

/// What one application did.
struct Outcome {
    /// The owned servers as they now are (as far as the kernel accepted).
    kernel: BTreeMap<ServerKey, VirtualServer>,
    ops: usize,
    /// Each refused op, described, with the kernel's errno.
    failures: Vec<(String, Option<i32>)>,
}

/// Reads what is needed, diffs and applies; blocking.
fn apply(
    client: &mut Client,
    applied: Option<BTreeMap<ServerKey, VirtualServer>>,
    desired: &BTreeMap<ServerKey, VirtualServer>,
    owned: &Ownership,
    exclude: &[IpNet],
) -> Result<Outcome, ClientError> {
    let observed = match applied {
        None => read_owned(client, owned)?,
        Some(applied) => with_counts(client, applied, desired)?,
    };
    let ops = kproxy_ipvs::diff(&observed, desired, exclude);
    let mut kernel: BTreeMap<ServerKey, VirtualServer> = observed.into_iter().map(|(key, o)| (key, o.server)).collect();
    let mut failures = Vec::new();
    for op in &ops {
        match execute(client, op) {
            Ok(()) => record(&mut kernel, op),
            Err(e) => {
                let reason = e.errno().map_or_else(|| format!("{e:#}"), |errno| format!("{e}: {errno}"));
                failures.push((format!("{}: {reason}", describe(op)), e.errno().map(|errno| errno as i32)));
            }
        }
    }
    debug!(ops = ops.len(), failed = failures.len(), "IPVS changes applied");
    Ok(Outcome { kernel, ops: ops.len(), failures })
}

/// Every owned server with its destinations and their connection counts.
fn read_owned(client: &mut Client, owned: &Ownership) -> Result<BTreeMap<ServerKey, ObservedServer>, ClientError> {
    let services = client.services()?;
    for skipped in &services.skipped {
        warn!(error = %skipped, "an IPVS service the kernel reported did not decode; left alone");
    }
    let mut out = BTreeMap::new();
    for entry in services.entries {
        let Some(key) = owned.key_of(&entry.service.key) else { continue };
        let observed = observe(client, &entry, key)?;
        out.insert(key, observed);
    }
    Ok(out)
}

/// `applied` as observed, with the kernel's connection counts read for
/// the servers that have a destination leaving.
fn with_counts(
    client: &mut Client,
    applied: BTreeMap<ServerKey, VirtualServer>,
    desired: &BTreeMap<ServerKey, VirtualServer>,
) -> Result<BTreeMap<ServerKey, ObservedServer>, ClientError> {
    let mut out = BTreeMap::new();
    for (key, server) in applied {
        let leaving = match desired.get(&key) {
            None => false,
            Some(want) => server
                .destinations
                .iter()
                .any(|d| !want.destinations.iter().any(|w| w.socket_addr() == d.socket_addr())),
        };
        let observed = if leaving && key.protocol != Protocol::Udp {
            let dests = client.destinations(&kernel_key(&key))?;
            ObservedServer { server, connections: connections(&dests.entries) }
        } else {
            ObservedServer::idle(server)
        };
        out.insert(key, observed);
    }
    Ok(out)
}

/// The kernel's connection counts per destination.
fn connections(dests: &[kernel::DestinationEntry]) -> BTreeMap<SocketAddr, Connections> {
    dests
        .iter()
        .map(|d| {
            let c = d.connections;
            (
                SocketAddr::new(d.destination.addr, d.destination.port),
                Connections { active: c.active, inactive: c.inactive },
            )
        })
        .collect()
}

fn observe(client: &mut Client, entry: &ServiceEntry, key: ServerKey) -> Result<ObservedServer, ClientError> {
    let service = &entry.service;
    let dests = client.destinations(&service.key)?;
    let mut destinations: Vec<RealServer> = dests
        .entries
        .iter()
        .map(|d| RealServer { addr: d.destination.addr, port: d.destination.port, weight: d.destination.weight })
        .collect();
    destinations.sort();
    let connections = connections(&dests.entries);
    let persistence = service.flags.contains(ServiceFlags::PERSISTENT).then_some(service.timeout);
    let server = VirtualServer {
        protocol: key.protocol,
        addr: key.addr,
        port: key.port,
        scheduler: service.scheduler.clone(),
        persistence,
        destinations,
        mark: key.mark,
    };
    Ok(ObservedServer { server, connections })
}

fn execute(client: &mut Client, op: &Op) -> Result<(), ClientError> {
    match op {
        Op::AddServer(server) => client.execute(&Request::NewService(&service(server))),
        Op::EditServer(server) => client.execute(&Request::SetService(&service(server))),
        Op::DeleteServer(key) => client.execute(&Request::DelService(&kernel_key(key))),
        Op::AddDest { server, dest } => client
            .execute(&Request::NewDest(&kernel_key(server), &Destination::masq(dest.addr, dest.port, dest.weight))),
        Op::EditDest { server, dest } => client
            .execute(&Request::SetDest(&kernel_key(server), &Destination::masq(dest.addr, dest.port, dest.weight))),
        Op::DeleteDest { server, dest } => {
            client.execute(&Request::DelDest(&kernel_key(server), &Destination::masq(dest.ip(), dest.port(), 0)))
        }
    }
}

/// Updates the picture of the kernel after `op` succeeded.
fn record(kernel: &mut BTreeMap<ServerKey, VirtualServer>, op: &Op) {
    match op {
        Op::AddServer(server) => {
            kernel.insert(server.key(), server.clone());
        }
        Op::EditServer(server) => {
            if let Some(have) = kernel.get_mut(&server.key()) {
                have.scheduler = server.scheduler.clone();
                have.persistence = server.persistence;
            }
        }
        Op::DeleteServer(key) => {
            kernel.remove(key);
        }
        Op::AddDest { server, dest } | Op::EditDest { server, dest } => {
            if let Some(have) = kernel.get_mut(server) {
                have.destinations.retain(|d| d.socket_addr() != dest.socket_addr());
                have.destinations.push(*dest);
                have.destinations.sort();
            }
        }
        Op::DeleteDest { server, dest } => {
            if let Some(have) = kernel.get_mut(server) {
                have.destinations.retain(|d| d.socket_addr() != *dest);
            }
        }
    }
}

fn describe(op: &Op) -> String {
    match op {
        Op::AddServer(s) => format!("add virtual server {} ({})", s.key(), s.scheduler),
        Op::EditServer(s) => format!("edit virtual server {} ({})", s.key(), s.scheduler),
        Op::DeleteServer(key) => format!("delete virtual server {key}"),
        Op::AddDest { server, dest } => format!("add {} to {server}", dest.socket_addr()),
        Op::EditDest { server, dest } => format!("set weight {} of {} in {server}", dest.weight, dest.socket_addr()),
        Op::DeleteDest { server, dest } => format!("delete {dest} from {server}"),
    }
}

fn service(server: &VirtualServer) -> Service {
    let mut service = Service::new(kernel_key(&server.key()), &server.scheduler);
    if let Some(timeout) = server.persistence {
        service.flags = ServiceFlags::PERSISTENT;
        service.timeout = timeout;
        service.netmask = server.netmask();
    }
    service
}

fn kernel_key(key: &ServerKey) -> ServiceKey {
    if let Some(mark) = key.mark {
        return ServiceKey::Fwmark { family: Family::of(&key.addr), mark };
    }
    let protocol = match key.protocol {
        Protocol::Tcp => kernel::Protocol::Tcp,
        Protocol::Udp => kernel::Protocol::Udp,
        Protocol::Sctp => kernel::Protocol::Sctp,
    };
    ServiceKey::Addr { protocol, addr: key.addr, port: key.port }
}

/// `None` for protocols kproxy does not use (never kproxy's).
fn model_protocol(protocol: kernel::Protocol) -> Option<Protocol> {
    match protocol {
        kernel::Protocol::Tcp => Some(Protocol::Tcp),
        kernel::Protocol::Udp => Some(Protocol::Udp),
        kernel::Protocol::Sctp => Some(Protocol::Sctp),
        kernel::Protocol::Other(_) => None,
    }
}

/// The sysctls IPVS needs, and why (docs/ipvs.md has the long form). A
/// sysctl that cannot be written is logged: the node may have set it, or
/// forbid it (a read-only /proc/sys), and kproxy runs on regardless.
pub const SYSCTLS: &[(&str, &str, &str)] = &[
    // Without it IPVS bypasses conntrack: no masquerade (nftables' NAT
    // needs the connection), and the companion table's ct state sees nothing.
    ("net/ipv4/vs/conntrack", "1", "IPVS connections pass conntrack, so they can be masqueraded"),
    // 1 (the default) reschedules a reused source port only when the old
    // connection ended, making a fresh connection wait for the old
    // destination; 0 lets the kernel reschedule, as kube-proxy sets it.
    ("net/ipv4/vs/conn_reuse_mode", "0", "a reused client port is not stuck on an old destination"),
    // Packets of a connection whose destination was deleted drop the
    // connection at once, so the client reconnects elsewhere.
    ("net/ipv4/vs/expire_nodest_conn", "1", "connections to a deleted destination end at once"),
    // A persistence template pointing at a quiesced (weight 0) destination
    // expires, so affinity moves clients off a draining endpoint.
    ("net/ipv4/vs/expire_quiescent_template", "1", "affinity does not pin clients to a draining endpoint"),
];

/// `ipvs.strictARP`: the node answers ARP only for addresses on the
/// interface asked, so service addresses on `kube-ipvs0` are not announced.
pub const STRICT_ARP: &[(&str, &str, &str)] = &[
    ("net/ipv4/conf/all/arp_ignore", "1", "answer ARP only for addresses of the receiving interface"),
    ("net/ipv4/conf/all/arp_announce", "2", "announce only addresses of the sending interface"),
];

/// Sysctls and timeouts, once at the first sync.
fn prepare(config: &IpvsConfig) {
    let strict: &[(&str, &str, &str)] = if config.strict_arp { STRICT_ARP } else { &[] };
    let files = KernelFiles::host();
    for (key, value, why) in SYSCTLS.iter().chain(strict) {
        match files.ensure(key, value) {
            Ok(Ensured::Unchanged) => {}
            Ok(Ensured::Changed { .. }) => info!(sysctl = key, value, why, "set"),
            Err(e) => warn!(sysctl = key, value, why, error = %e.chain(), "cannot set a sysctl IPVS mode needs"),
        }
    }
    let t = config.timeouts;
    if t.tcp != 0 || t.tcp_fin != 0 || t.udp != 0 {
        let result = Client::connect().and_then(|mut c| c.execute(&Request::SetConfig(&t)));
        if let Err(e) = result {
            warn!(error = %e, "cannot set the IPVS timeouts");
        }
    }
}

/// What `kproxy cleanup --proxy-mode ipvs` removed.
#[derive(Debug, Default)]
pub struct Cleaned {
    pub servers: usize,
    pub addresses: usize,
    pub interface: bool,
}

/// Removes kproxy's virtual servers (those on `kube-ipvs0` addresses and
/// node ports on this host's addresses, outside `exclude_cidrs`), the
/// interface with its addresses, and the companion tables. A kernel
/// without IPVS has no servers to remove; the rest is still cleaned.
pub async fn cleanup(exclude_cidrs: &[IpNet]) -> Result<Cleaned, DataplaneError> {
    let mut cleaned = Cleaned::default();
    let index = links::link_index(INTERFACE).await.map_err(IpvsError::Interface)?;
    let bound = match index {
        Some(index) => links::addresses(index).await.map_err(IpvsError::Interface)?,
        None => BTreeSet::new(),
    };
    let host: BTreeSet<IpAddr> = kproxy_netlink::host_addresses().await?.into_iter().collect();
    let owned = Ownership {
        addresses: bound.clone(),
        node_addresses: host,
        programmed: BTreeSet::new(),
        marks: BTreeMap::new(),
        masquerade_bit: None,
    };
    let exclude = exclude_cidrs.to_vec();
    let removed = tokio::task::spawn_blocking(move || -> Result<usize, ClientError> {
        let mut client = match Client::connect() {
            Ok(client) => client,
            Err(ClientError::NotAvailable) => return Ok(0),
            Err(e) => return Err(e),
        };
        let observed = read_owned(&mut client, &owned)?;
        let ops = kproxy_ipvs::diff(&observed, &BTreeMap::new(), &exclude);
        for op in &ops {
            execute(&mut client, op)?;
        }
        Ok(ops.len())
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    .map_err(IpvsError::Client)?;
    cleaned.servers = removed;
    cleaned.addresses = bound.len();
    cleaned.interface = links::delete_link(INTERFACE).await.map_err(IpvsError::Interface)?;
    crate::companion::delete(companion::TABLE).await.map_err(IpvsError::Companion)?;
    Ok(cleaned)
}
