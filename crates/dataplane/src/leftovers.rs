//! What other service proxies left on this node, and removing it.
//!
//! A node that changes proxy (kube-proxy to kproxy, one kproxy mode to
//! another, or back) keeps the old proxy's rules in the kernel: they stop
//! following changes but keep taking traffic, and a DNAT, REJECT or DROP
//! frozen at the old proxy's last sync can win over the new proxy's rules
//! (both DNAT at nat priority -100). So every mode removes, once its own
//! rules are in, what the other modes left:
//!
//! - nf_tables tables: upstream's `ip`/`ip6 kube-proxy`, kproxy's `kproxy`
//!   (nftables mode) and `kproxy-ipvs` (the IPVS mode's companion);
//! - iptables chains of upstream's iptables and IPVS modes (kproxy's
//!   iptables mode uses upstream's names), in both backends and both
//!   families, with the jumps to them from the built-in chains; kubelet's
//!   chains stay. The nft backend's go over netlink ([`nft_chains`]), with
//!   or without the iptables tools; the legacy backend's need its tools;
//! - IPVS virtual servers kproxy or kube-proxy made, and `kube-ipvs0`;
//! - the ebpf mode's programs, links and maps pinned in its pin directory,
//!   and its companion table `kproxy-ebpf`.
//!
//! The userspace mode's claimed routes are the binary's to remove. Upstream
//! kube-proxy's IPVS ipsets are left: with no rule using them they match
//! nothing, and they need the ipset tool or protocol to go.

mod nft_chains;

use std::fmt;

use kproxy_iptables_exec::{self as exec, Backend, Removed};
use kproxy_model::{IpFamily, IpNet};
use kproxy_netlink::nft::{self as netlink, IntervalSets};
use kproxy_nftables::{FamilyPlan, Op, Plan};
use tracing::debug;

use kproxy_ipvs::companion;

pub use nft_chains::NftChainsError;

use crate::ipvs::{Cleaned as CleanedIpvs, INTERFACE, cleanup as cleanup_ipvs};

/// Upstream kube-proxy's nftables mode's table, in both families.
pub const UPSTREAM_TABLE: &str = "kube-proxy";
/// The nftables mode's table.
const NFTABLES_TABLE: &str = "kproxy";

/// The mode whose objects stay; everything else goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keeping {
    Nftables,
    /// The iptables mode on this backend: the other backend's proxy chains
    /// go, and in this one the chains only upstream's IPVS mode makes
    /// (the mode's own full sync replaces or deletes the rest).
    Iptables(Backend),
    Ipvs,
    Userspace,
    Ebpf,
    /// Nothing: `kproxy cleanup` and `--cleanup`.
    Nothing,
}

/// What [`remove`] found and removed.
#[derive(Debug, Default)]
pub struct Leftovers {
    /// Tables deleted, as `ip kube-proxy`.
    pub nft_tables: Vec<String>,
    /// Per backend and family, the chains and jump rules deleted.
    pub iptables: Vec<(Backend, IpFamily, Removed)>,
    /// Virtual servers and `kube-ipvs0` (when not kept).
    pub ipvs: Option<CleanedIpvs>,
    /// The ebpf mode's pinned objects (when not kept).
    pub ebpf: kproxy_bpf::Removed,
    /// Steps that failed or could not run, each naming what may remain.
    pub problems: Vec<String>,
}

impl Leftovers {
    /// iptables chains deleted, every backend and family.
    pub fn chains(&self) -> usize {
        self.iptables.iter().map(|(_, _, r)| r.cleaned.chains.len()).sum()
    }

    /// iptables jump rules deleted.
    pub fn jumps(&self) -> usize {
        self.iptables.iter().map(|(_, _, r)| r.cleaned.jumps).sum()
    }

    /// Whether anything was removed.
    pub fn any(&self) -> bool {
        !self.nft_tables.is_empty()
            || self.chains() > 0
            || self.jumps() > 0
            || self.ipvs.as_ref().is_some_and(|c| c.servers > 0 || c.interface)
            || self.ebpf.links + self.ebpf.maps + self.ebpf.filters > 0
    }
}

impl fmt::Display for Leftovers {
    /// One line: what went, by kind.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tables = if self.nft_tables.is_empty() { "none".to_owned() } else { self.nft_tables.join(", ") };
        write!(f, "nftables tables: {tables}; iptables: {} chains, {} jump rules", self.chains(), self.jumps())?;
        for (backend, family, removed) in self.iptables.iter().filter(|(_, _, r)| !r.cleaned.chains.is_empty()) {
            write!(f, " ({backend} {family}: {})", removed.cleaned.chains.len())?;
        }
        if let Some(ipvs) = &self.ipvs {
            let interface = if ipvs.interface { "kube-ipvs0" } else { "no kube-ipvs0" };
            write!(f, "; IPVS: {} virtual servers, {interface}", ipvs.servers)?;
        }
        let ebpf = &self.ebpf;
        if ebpf.links + ebpf.maps + ebpf.filters > 0 {
            write!(f, "; ebpf: {} links, {} maps, {} tc filters", ebpf.links, ebpf.maps, ebpf.filters)?;
        }
        Ok(())
    }
}

/// Removes what the modes other than `keeping` left (see the module docs);
/// `ipvs_exclude` are virtual servers never to delete (`ipvs.excludeCIDRs`);
/// `ebpf_pin_dir` is where the ebpf mode pins its objects. Never fails: a step that cannot run is reported in
/// [`Leftovers::problems`] and the others still run.
pub async fn remove(keeping: Keeping, ipvs_exclude: &[IpNet], ebpf_pin_dir: &std::path::Path) -> Leftovers {
    let mut out = Leftovers::default();
    let mut tables = vec![UPSTREAM_TABLE];
    if keeping != Keeping::Nftables {
        tables.push(NFTABLES_TABLE);
    }
    if keeping != Keeping::Ipvs {
        tables.push(companion::TABLE);
    }
    if keeping != Keeping::Ebpf {
        tables.push(kproxy_ebpf::companion::TABLE);
        match crate::ebpf::cleanup_pins(ebpf_pin_dir) {
            Ok(removed) => out.ebpf = removed,
            Err(e) => out.problems.push(format!("the ebpf mode's objects in {}: {e}", ebpf_pin_dir.display())),
        }
    }
    match remove_tables(&tables).await {
        Ok(removed) => out.nft_tables = removed,
        Err(e) => out.problems.push(format!("nftables tables {}: {e}", tables.join(", "))),
    }
    if keeping != Keeping::Ipvs && ipvs_may_hold_something().await {
        match cleanup_ipvs(ipvs_exclude).await {
            Ok(cleaned) => out.ipvs = Some(cleaned),
            Err(e) => out.problems.push(format!("IPVS virtual servers and kube-ipvs0: {e}")),
        }
    }
    for backend in Backend::ALL {
        remove_chains(keeping, backend, &mut out).await;
    }
    out
}

/// Whether IPVS may hold a proxy's objects: `ip_vs` is loaded (asking a
/// kernel without it would load the module on some kernels) or
/// `kube-ipvs0` exists.
async fn ipvs_may_hold_something() -> bool {
    std::path::Path::new("/proc/net/ip_vs").exists()
        || matches!(kproxy_netlink::links::link_index(INTERFACE).await, Ok(Some(_)))
}

/// A proxy's chains in `backend`, both families, as `keeping` allows.
async fn remove_chains(keeping: Keeping, backend: Backend, out: &mut Leftovers) {
    let only_ipvs_mode = keeping == Keeping::Iptables(backend);
    let doomed = move |table: &str, chain: &str| match only_ipvs_mode {
        true => kproxy_iptables::names::is_ipvs_mode_chain(table, chain),
        false => kproxy_iptables::names::is_proxy_chain(table, chain),
    };
    if backend == Backend::Legacy && !exec::installed(backend) {
        out.problems.extend(unreachable_legacy_chains());
        return;
    }
    for family in IpFamily::ALL {
        let removed = match backend {
            Backend::Nft => remove_nft_chains(family, doomed).await,
            Backend::Legacy => remove_legacy_chains(family, doomed).await,
        };
        match removed {
            Ok(Some(removed)) => {
                for (table, chain, reason) in &removed.kept {
                    out.problems.push(format!("{backend} {family} {table} chain {chain} stays: {reason}"));
                }
                out.iptables.push((backend, family, removed));
            }
            Ok(None) => {}
            Err(problem) => out.problems.push(problem),
        }
    }
}

/// The nft backend's chains, over netlink: no tools needed, and no
/// quadratic restore. `None`: the chains could not be listed, so none is
/// known to be there (as with the legacy tools).
async fn remove_nft_chains(
    family: IpFamily,
    doomed: impl Fn(&str, &str) -> bool + Send + 'static,
) -> Result<Option<Removed>, String> {
    match tokio::task::spawn_blocking(move || nft_chains::remove(family, doomed)).await {
        Ok(Ok(removed)) => Ok(Some(removed)),
        Ok(Err(NftChainsError::List(e))) => {
            debug!(backend = %Backend::Nft, %family, error = %e, "cannot list iptables chains; none removed");
            Ok(None)
        }
        Ok(Err(e)) => Err(format!("{} {family} kube-proxy chains: {}", Backend::Nft, with_causes(&e))),
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// The legacy backend's chains, with its tools. `None` as for nft (a
/// kernel without x_tables, say).
async fn remove_legacy_chains(
    family: IpFamily,
    doomed: impl Fn(&str, &str) -> bool,
) -> Result<Option<Removed>, String> {
    let tools = exec::Iptables::new(Backend::Legacy);
    match tools.remove_chains(family, |table: exec::Table, chain: &str| doomed(table.as_str(), chain)).await {
        Ok(removed) => Ok(Some(removed)),
        Err(e) => {
            debug!(backend = %Backend::Legacy, %family, error = %e, "cannot list iptables chains; none removed");
            Ok(None)
        }
    }
}

/// An error and its causes, as one line.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// Without the legacy tools its chains cannot be removed: say so when
/// there may be some (legacy tables loaded).
fn unreachable_legacy_chains() -> Option<String> {
    let loaded = std::fs::read_to_string("/proc/net/ip_tables_names").unwrap_or_default();
    (!loaded.trim().is_empty()).then(|| {
        "legacy iptables tables are loaded but the iptables-legacy tools are not installed: \
         kube-proxy chains there (if any) stay; run `kube-proxy --cleanup` or kproxy's iptables image"
            .to_owned()
    })
}

/// Deletes the nf_tables tables among `names` that exist, in both
/// families; returns them as `ip NAME` / `ip6 NAME`.
async fn remove_tables(names: &[&'static str]) -> Result<Vec<String>, String> {
    let names = names.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut removed = Vec::new();
        for family in IpFamily::ALL {
            let listed = netlink::chain_names_by_table(family, &names).map_err(|e| e.to_string())?;
            for name in names.iter().filter(|n| listed.get(**n).is_some_and(|chains| !chains.is_empty())) {
                let plan = Plan { full: true, families: vec![FamilyPlan { family: Some(family), ops: delete() }] };
                let encoded = netlink::encode_table(name, &plan, 1, &IntervalSets::default());
                netlink::apply(&encoded).map_err(|e| format!("deleting table {} {name}: {e}", family_word(family)))?;
                removed.push(format!("{} {name}", family_word(family)));
            }
        }
        Ok(removed)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

fn delete() -> Vec<Op> {
    vec![Op::AddTable, Op::DeleteTable]
}

/// `ip` or `ip6`, as `nft` names the families.
fn family_word(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "ip",
        IpFamily::V6 => "ip6",
    }
}
