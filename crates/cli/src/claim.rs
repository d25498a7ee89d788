//! Claiming frontend addresses for the userspace mode: after each sync, one
//! local route (`kproxy_netlink::routes`) per cluster, external and
//! load-balancer IP the state serves, so that the kernel delivers their
//! traffic to the sockets the userspace proxy listens on. Node ports need
//! none: they listen on the node's own addresses.
//!
//! Only kproxy's own routes (its route protocol) are added or removed, and
//! addresses that are already local (on an interface, loopback) are left
//! alone. Without root, or when the kernel refuses route changes, nothing is
//! claimed: frontends answer where their address is already local
//! (loopback), as before. Routes stay when kproxy stops, like the nftables
//! mode's rules; the next run adopts them and `kproxy cleanup --proxy-mode
//! userspace` removes them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use kproxy_dataplane::{Dataplane, SyncFuture, SyncKind, SyncRequest};
use kproxy_model::{FrontendKind, Protocol, ProxyState};
use kproxy_netlink::NetlinkError;
use kproxy_netlink::routes::{Claim, LocalRoutes, ROUTE_PROTOCOL};
use tracing::{debug, info, warn};

/// Where claims are made: the kernel ([`Kernel`]), or a test's fake.
pub trait RouteTable: Send {
    /// The addresses of kproxy's local routes.
    fn list(&mut self) -> impl Future<Output = Result<BTreeSet<IpAddr>, NetlinkError>> + Send;
    /// The addresses on this host's interfaces (already local).
    fn interface_addresses(&mut self) -> impl Future<Output = Result<Vec<IpAddr>, NetlinkError>> + Send;
    fn add(&mut self, ip: IpAddr) -> impl Future<Output = Result<Claim, NetlinkError>> + Send;
    fn delete(&mut self, ip: IpAddr) -> impl Future<Output = Result<bool, NetlinkError>> + Send;
}

/// The dataplane `D` (the userspace proxy), plus claims for the addresses
/// it listens on.
pub struct Claiming<D, R> {
    inner: D,
    /// `None`: not claiming (no root, or the kernel refused).
    claims: Option<Claims<R>>,
}

impl<D> Claiming<D, Kernel> {
    /// Claims through the kernel when this process runs as root; otherwise
    /// says once, here, that frontend addresses stay unclaimed.
    pub fn on_this_host(inner: D) -> Self {
        if crate::mode::is_root() {
            return Self::new(inner, Kernel::default());
        }
        warn!(
            "not running as root: frontend addresses are not claimed (no local routes), so cluster, external and \
             load-balancer IPs answer only where they are already local, such as loopback"
        );
        Self { inner, claims: None }
    }
}

impl<D, R> Claiming<D, R> {
    pub fn new(inner: D, routes: R) -> Self {
        let claims = Claims { routes, claimed: None, already_local: BTreeSet::new(), failed: BTreeMap::new() };
        Self { inner, claims: Some(claims) }
    }
}

impl<D: Dataplane, R: RouteTable> Dataplane for Claiming<D, R> {
    fn mode(&self) -> &'static str {
        self.inner.mode()
    }

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a> {
        Box::pin(async move {
            // Sockets first: they bind with IP_FREEBIND, so they need no route.
            let mut report = self.inner.sync(request).await?;
            let Some(claims) = &mut self.claims else { return Ok(report) };
            match claims.sync(request.state, request.kind, &mut report.skipped).await {
                Ok(count) => report.summary.push_str(&format!("; {count} addresses claimed")),
                Err(refused) => {
                    warn!(
                        error = %format!("{:#}", anyhow::Error::new(refused)),
                        "the kernel refuses local routes (CAP_NET_ADMIN is missing): frontend addresses are no \
                         longer claimed; they answer only where they are already local, such as loopback"
                    );
                    self.claims = None;
                }
            }
            Ok(report)
        })
    }

    fn listing(&self) -> Option<Arc<dyn kproxy_admin::listing::Listing>> {
        self.inner.listing()
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.inner.register_metrics(registry);
    }
}

/// What has been claimed, and what could not be.
struct Claims<R> {
    routes: R,
    /// kproxy's routes as far as this process knows; `None` until listed.
    claimed: Option<BTreeSet<IpAddr>>,
    /// Wanted addresses the kernel found already local (not kproxy's):
    /// tried again on full syncs.
    already_local: BTreeSet<IpAddr>,
    /// Failures reported once each, until they clear; the key `None` is
    /// the listing.
    failed: BTreeMap<Option<IpAddr>, String>,
}

impl<R: RouteTable> Claims<R> {
    /// Lists kproxy's routes again; on the first listing, those of an
    /// earlier run are adopted. A failure keeps what is known.
    async fn refresh(&mut self, skipped: &mut Vec<String>) -> Result<(), NetlinkError> {
        match self.routes.list().await {
            Ok(listed) => {
                if self.claimed.is_none() && !listed.is_empty() {
                    info!(count = listed.len(), "adopting the local routes of an earlier run");
                }
                self.claimed = Some(listed);
                self.already_local.clear();
                self.failed.remove(&None);
            }
            Err(e) if e.is_permission_denied() => return Err(e),
            Err(e) => {
                let reason = format!("cannot list kproxy's local routes: {:#}", anyhow::Error::new(e));
                report(&mut self.failed, skipped, None, reason);
            }
        }
        Ok(())
    }

    /// Makes kproxy's routes those `state` needs and returns how many it
    /// holds. One address that fails is reported in `skipped` (once) and
    /// retried every sync; the error is a refusal for lack of privileges,
    /// after which nothing can be claimed.
    async fn sync(
        &mut self,
        state: &ProxyState,
        kind: SyncKind,
        skipped: &mut Vec<String>,
    ) -> Result<usize, NetlinkError> {
        // A full sync trusts nothing it remembers: the kernel's list again.
        if kind == SyncKind::Full || self.claimed.is_none() {
            self.refresh(skipped).await?;
        }
        // Never listed: leftovers would look like someone else's routes.
        let Some(claimed) = self.claimed.as_mut() else { return Ok(0) };
        let on_interfaces = match self.routes.interface_addresses().await {
            Ok(addresses) => addresses.into_iter().collect(),
            Err(e) => {
                // Adding checks locality anyway; this only saves requests.
                debug!(error = %e, "cannot list interface addresses");
                BTreeSet::new()
            }
        };
        let wanted = wanted(state);
        let plan = plan(&wanted, &on_interfaces, claimed, &self.already_local);
        for ip in plan.delete {
            match self.routes.delete(ip).await {
                Ok(_) => {
                    claimed.remove(&ip);
                    self.failed.remove(&Some(ip));
                }
                Err(e) if e.is_permission_denied() => return Err(e),
                Err(e) => report(&mut self.failed, skipped, Some(ip), reason(ip, "not released", e)),
            }
        }
        for ip in plan.add {
            match self.routes.add(ip).await {
                Ok(Claim::Added) => {
                    claimed.insert(ip);
                    self.failed.remove(&Some(ip));
                }
                Ok(Claim::AlreadyLocal) => {
                    debug!(%ip, "frontend address already local; not claimed");
                    self.already_local.insert(ip);
                    self.failed.remove(&Some(ip));
                }
                Err(e) if e.is_permission_denied() => return Err(e),
                Err(e) => report(&mut self.failed, skipped, Some(ip), reason(ip, "not claimed", e)),
            }
        }
        // Failures of addresses no longer wanted are forgotten (a delete
        // that failed is still in `claimed`, so still retried).
        self.failed.retain(|key, _| key.is_none_or(|ip| wanted.contains(&ip) || claimed.contains(&ip)));
        self.already_local.retain(|ip| wanted.contains(ip));
        Ok(claimed.len())
    }
}

/// The addresses the userspace mode listens on that need a route: every
/// non-node-port frontend of a TCP or UDP port (SCTP is not served), except
/// loopback, which is local already.
pub fn wanted(state: &ProxyState) -> BTreeSet<IpAddr> {
    state
        .service_ports()
        .filter(|port| port.name.protocol != Protocol::Sctp)
        .flat_map(|port| &port.frontends)
        .filter(|f| f.kind != FrontendKind::NodePort && !f.ip.is_loopback() && !f.ip.is_unspecified())
        .map(|f| f.ip)
        .collect()
}

/// Routes to add and delete, in address order.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    add: Vec<IpAddr>,
    delete: Vec<IpAddr>,
}

/// What turns `claimed` into the wanted addresses that are not on an
/// interface; addresses found `already_local` are not tried again.
fn plan(
    wanted: &BTreeSet<IpAddr>,
    on_interfaces: &BTreeSet<IpAddr>,
    claimed: &BTreeSet<IpAddr>,
    already_local: &BTreeSet<IpAddr>,
) -> Plan {
    let needed: BTreeSet<IpAddr> = wanted.difference(on_interfaces).copied().collect();
    Plan {
        add: needed.iter().filter(|ip| !claimed.contains(ip) && !already_local.contains(ip)).copied().collect(),
        delete: claimed.difference(&needed).copied().collect(),
    }
}

fn reason(ip: IpAddr, what: &str, error: NetlinkError) -> String {
    format!("frontend address {ip} {what}: {:#}", anyhow::Error::new(error))
}

/// Adds `reason` to `skipped` unless `key` already failed.
fn report(
    failed: &mut BTreeMap<Option<IpAddr>, String>,
    skipped: &mut Vec<String>,
    key: Option<IpAddr>,
    reason: String,
) {
    if failed.insert(key, reason.clone()).is_none() {
        skipped.push(reason);
    }
}

/// The kernel's routes, over one rtnetlink connection opened on first use
/// and opened again after a failure.
#[derive(Default)]
pub struct Kernel {
    routes: Option<LocalRoutes>,
    /// Whether the ARP caveat has been looked at (once, at the first IPv4
    /// claim).
    arp_checked: bool,
}

impl Kernel {
    fn routes(&mut self) -> Result<&LocalRoutes, NetlinkError> {
        if self.routes.is_none() {
            self.routes = Some(LocalRoutes::connect()?);
        }
        Ok(self.routes.as_ref().expect("connected just above"))
    }

    /// Drops the connection after a failure: the next call opens a new one.
    fn after<T>(&mut self, result: Result<T, NetlinkError>) -> Result<T, NetlinkError> {
        if result.is_err() {
            self.routes = None;
        }
        result
    }
}

impl RouteTable for Kernel {
    async fn list(&mut self) -> Result<BTreeSet<IpAddr>, NetlinkError> {
        let result = match self.routes() {
            Ok(routes) => routes.list().await,
            Err(e) => Err(e),
        };
        self.after(result)
    }

    async fn interface_addresses(&mut self) -> Result<Vec<IpAddr>, NetlinkError> {
        kproxy_netlink::host_addresses().await
    }

    async fn add(&mut self, ip: IpAddr) -> Result<Claim, NetlinkError> {
        let result = match self.routes() {
            Ok(routes) => routes.add(ip).await,
            Err(e) => Err(e),
        };
        if matches!(result, Ok(Claim::Added)) && ip.is_ipv4() && !self.arp_checked {
            self.arp_checked = true;
            warn_if_arp_answers();
        }
        self.after(result)
    }

    async fn delete(&mut self, ip: IpAddr) -> Result<bool, NetlinkError> {
        let result = match self.routes() {
            Ok(routes) => routes.delete(ip).await,
            Err(e) => Err(e),
        };
        self.after(result)
    }
}

/// A local route makes the node answer ARP for its address on every
/// interface unless `arp_ignore` is set: harmless for cluster IPs, which no
/// neighbour asks for, but a load-balancer IP that another node announces
/// (MetalLB's L2 mode) would then be answered by every node. kproxy leaves
/// the node-wide sysctls alone and says so.
fn warn_if_arp_answers() {
    let arp_ignore = kproxy_dataplane::KernelFiles::host().read("net/ipv4/conf/all/arp_ignore");
    if arp_ignore.is_ok_and(|v| v == "0") {
        warn!(
            "claimed IPv4 addresses are answered to ARP on every interface (net.ipv4.conf.all.arp_ignore is 0); \
             set net.ipv4.conf.all.arp_ignore=1 and arp_announce=2, as IPVS strictARP does, when another node or \
             a load balancer announces them"
        );
    }
}

/// `kproxy cleanup --proxy-mode userspace`: deletes every route with
/// kproxy's protocol number and nothing else; returns how many went.
pub async fn cleanup() -> anyhow::Result<usize> {
    let routes = LocalRoutes::connect()?;
    let mut removed = 0;
    for ip in routes.list().await? {
        if routes.delete(ip).await? {
            removed += 1;
        }
    }
    debug!(removed, protocol = ROUTE_PROTOCOL, "local routes removed");
    Ok(removed)
}

#[cfg(test)]
mod tests;
