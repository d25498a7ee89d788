//! The ebpf mode: kproxy's BPF programs (`kproxy-bpf`) on the cgroup
//! socket hooks and on tc, their maps written from the planner's
//! operations (`kproxy-ebpf`), and the companion nftables table for what
//! the programs leave to netfilter (masquerade, reject, unowned addresses).
//!
//! The first sync loads the programs (reusing maps pinned by an earlier
//! run, so a restart keeps connections' flows and affinity), attaches them
//! to the cgroup and the devices, and adopts what the pinned maps hold.
//! Every sync after that is map operations only: what was applied is kept
//! in memory, and a partial sync plans only the changed service ports. A
//! failed map write forgets what was applied; the next sync reads the maps
//! back and repairs them.
//!
//! After a sync that applied, the flows and translated sockets of UDP
//! endpoints that left their frontends, and of stale UDP frontends, are
//! ended ([`stale_udp`]): the mode's equivalent of the conntrack cleanup
//! of the other modes.

pub mod host;
pub mod sockets;
mod stale_udp;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use kproxy_bpf::Datapath;
use kproxy_ebpf::{Applied, PlanConfig, companion};
use kproxy_model::{ProxyState, StaleUdpEndpoint};
use tracing::{info, warn};

use crate::companion::Companion;

use crate::dataplane::{Dataplane, DataplaneError, SyncFuture, SyncKind, SyncReport, SyncRequest};

/// The ebpf mode's settings.
#[derive(Clone, Debug, Default)]
pub struct EbpfConfig {
    pub plan: PlanConfig,
    /// Whose sockets are load balanced; `None`: the cgroup v2 root.
    pub cgroup: Option<PathBuf>,
    /// Where maps and links are pinned (inside a bpffs).
    pub pin_dir: PathBuf,
    /// The interfaces the tc programs sit on; empty: those holding the
    /// node's addresses, found at each full sync.
    pub devices: Vec<String>,
}

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum EbpfError {
    #[error(transparent)]
    Host(#[from] host::HostError),
    #[error(transparent)]
    Bpf(#[from] kproxy_bpf::BpfError),
    #[error("planning the maps")]
    Plan(#[source] kproxy_ebpf::Error),
    #[error("finding the interfaces that hold the node's addresses")]
    Devices(#[source] kproxy_netlink::links::LinkError),
    #[error("the kernel refused the companion table {}", companion::TABLE)]
    Companion(#[source] crate::nftables::NftablesError),
}

/// The ebpf mode.
pub struct Ebpf {
    config: EbpfConfig,
    /// Loaded at the first sync; taken into the blocking task of each
    /// sync and given back.
    datapath: Option<Datapath>,
    /// The cgroup the socket programs are attached to, resolved at load.
    cgroup: PathBuf,
    /// What the maps hold, as of the last successful sync; `None`: read
    /// them back first.
    applied: Option<Applied>,
    /// The devices the tc programs were attached to.
    devices: BTreeSet<String>,
    companion: Companion,
    reported: BTreeSet<String>,
}

impl Ebpf {
    pub fn new(config: EbpfConfig) -> Self {
        Self {
            config,
            datapath: None,
            cgroup: PathBuf::new(),
            applied: None,
            devices: BTreeSet::new(),
            companion: Companion::new(companion::TABLE),
            reported: BTreeSet::new(),
        }
    }

    /// Loads the programs, pins and attaches them to the cgroup.
    fn load(&mut self) -> Result<Datapath, EbpfError> {
        host::ensure_pin_dir(&self.config.pin_dir)?;
        let mut datapath = Datapath::load(&self.config.pin_dir)?;
        let cgroup = match &self.config.cgroup {
            Some(path) => path.clone(),
            None => host::cgroup2_root()?,
        };
        datapath.attach_cgroup(&cgroup)?;
        self.config.plan.node_netns_cookie = kproxy_bpf::netns_cookie()?;
        info!(cgroup = %cgroup.display(), pin_dir = %self.config.pin_dir.display(), object = kproxy_bpf::OBJECT_SOURCE, "ebpf programs loaded and attached");
        self.cgroup = cgroup;
        Ok(datapath)
    }

    /// Attaches the tc programs to the configured devices, or to those
    /// holding the node's addresses.
    async fn attach_devices(&mut self, datapath: &mut Datapath, state: &ProxyState) -> Result<(), EbpfError> {
        let wanted: BTreeSet<String> = if self.config.devices.is_empty() {
            let addresses: Vec<IpAddr> = state.node.node_port_addresses.clone();
            kproxy_netlink::links::links_holding(&addresses).await.map_err(EbpfError::Devices)?
        } else {
            self.config.devices.iter().cloned().collect()
        };
        if wanted.is_empty() {
            warn!(
                "ebpf mode: no interface holds the node's addresses; traffic from outside is not load balanced (pass --ebpf-devices)"
            );
        }
        for device in wanted.difference(&self.devices) {
            datapath.attach_tc(device)?;
            info!(device = %device, "ebpf tc programs attached");
        }
        self.devices.extend(wanted);
        Ok(())
    }

    async fn sync_inner(&mut self, request: SyncRequest<'_>) -> Result<SyncReport, DataplaneError> {
        let first = self.datapath.is_none();
        let mut datapath = match self.datapath.take() {
            Some(datapath) => datapath,
            None => self.load()?,
        };
        let full = request.kind == SyncKind::Full || first;
        if full {
            let result = self.attach_devices(&mut datapath, request.state).await;
            if let Err(e) = result {
                self.datapath = Some(datapath);
                return Err(e.into());
            }
        }
        if let Err(e) = self.sync_companion(request.state, full).await {
            self.datapath = Some(datapath);
            return Err(e.into());
        }
        let previous = match self.applied.take() {
            Some(applied) => applied,
            None => match datapath.dump() {
                Ok(contents) => Applied::adopt(&contents),
                Err(e) => {
                    self.datapath = Some(datapath);
                    return Err(EbpfError::from(e).into());
                }
            },
        };
        let planned = match kproxy_ebpf::plan(request.state, request.changes, full, &self.config.plan, previous) {
            Ok(planned) => planned,
            Err(e) => {
                self.datapath = Some(datapath);
                return Err(EbpfError::Plan(e).into());
            }
        };
        let ops = planned.ops;
        let stale: Vec<StaleUdpEndpoint> = request.changes.stale_udp_endpoints.iter().copied().collect();
        let stale_frontends = stale_udp::removed_frontends(request.state, request.changes);
        let cgroup = self.cgroup.clone();
        let (datapath, result, flushed) = tokio::task::spawn_blocking(move || {
            let result = datapath.apply(&ops).map(|_| ops.len());
            let flushed = flush_if_applied(&mut datapath, result.is_ok(), &cgroup, &stale, &stale_frontends);
            (datapath, result, flushed)
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        self.datapath = Some(datapath);
        let written = result.map_err(EbpfError::from)?;
        let (frontends, groups) = (planned.applied.frontend_count(), planned.applied.group_count());
        self.applied = Some(planned.applied);
        for error in &flushed.errors {
            warn!(error = %error, "ebpf mode: ending the flows and sockets of a stale UDP endpoint");
        }

        let current: BTreeSet<String> = planned.skips.into_iter().collect();
        let skipped: Vec<String> = current.difference(&self.reported).cloned().collect();
        if planned.full {
            self.reported = current;
        } else {
            self.reported.extend(skipped.iter().cloned());
        }
        let kind = if planned.full { "full" } else { "partial" };
        let (flows, sockets) = (flushed.flows, flushed.sockets);
        let summary = format!(
            "{kind}: {written} map operations, {frontends} frontends and {groups} backend groups in the maps, {flows} flows and {sockets} UDP sockets of stale endpoints ended"
        );
        Ok(SyncReport { summary, skipped, conntrack: flushed.cleanups, ..SyncReport::default() })
    }

    /// Brings the companion table of each family to what the configuration
    /// needs, in one transaction (it does not change with services). A
    /// full sync rewrites it whatever this process last wrote, as the
    /// other modes re-assert everything they own.
    async fn sync_companion(&mut self, state: &ProxyState, full: bool) -> Result<(), EbpfError> {
        let tables = companion::tables(state, &self.config.plan.resolved(&state.node));
        self.companion.sync(tables, full, companion::ops).await.map_err(EbpfError::Companion)
    }
}

/// The stale endpoints' and frontends' flows and sockets, once the maps
/// no longer send new ones there (nothing to do, at no cost, when
/// nothing is stale).
fn flush_if_applied(
    datapath: &mut Datapath,
    applied: bool,
    cgroup: &Path,
    endpoints: &[StaleUdpEndpoint],
    frontends: &[SocketAddr],
) -> stale_udp::Flushed {
    if !applied || (endpoints.is_empty() && frontends.is_empty()) {
        return stale_udp::Flushed::default();
    }
    stale_udp::flush_stale_udp(datapath, cgroup, endpoints, frontends)
}

impl Dataplane for Ebpf {
    fn mode(&self) -> &'static str {
        "ebpf"
    }

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a> {
        Box::pin(self.sync_inner(request))
    }
}

/// Removes every program, link, map and pin kproxy made under `pin_dir`,
/// and the companion tables; nothing else.
pub async fn cleanup(pin_dir: &std::path::Path) -> Result<kproxy_bpf::Removed, DataplaneError> {
    let removed = cleanup_pins(pin_dir)?;
    crate::companion::delete(companion::TABLE).await.map_err(EbpfError::Companion)?;
    Ok(removed)
}

/// The programs, links and maps pinned under `pin_dir` (nothing when it
/// is not in a bpffs: then kproxy never pinned anything there), and
/// kproxy's cls_bpf filters in this network namespace.
pub fn cleanup_pins(pin_dir: &std::path::Path) -> Result<kproxy_bpf::Removed, EbpfError> {
    if !host::is_bpffs(pin_dir.parent().unwrap_or(pin_dir)) {
        return Ok(kproxy_bpf::Removed::default());
    }
    Ok(kproxy_bpf::cleanup(pin_dir)?)
}
