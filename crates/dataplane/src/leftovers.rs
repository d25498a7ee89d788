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
//!   chains stay;
//! - IPVS virtual servers kproxy or kube-proxy made, and `kube-ipvs0`.
//!
//! The userspace mode's claimed routes are the binary's to remove. Upstream
//! kube-proxy's IPVS ipsets are left: with no rule using them they match
//! nothing, and they need the ipset tool or protocol to go.

use std::fmt;

use kproxy_iptables_exec::{self as exec, Backend, Removed};
use kproxy_model::{IpFamily, IpNet};
use kproxy_netlink::nft::{self as netlink, IntervalSets};
use kproxy_nftables::{FamilyPlan, Op, Plan};
use tracing::debug;

use kproxy_ipvs::companion;

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
        match &self.ipvs {
            Some(ipvs) => write!(
                f,
                "; IPVS: {} virtual servers, {}",
                ipvs.servers,
                if ipvs.interface { "kube-ipvs0" } else { "no kube-ipvs0" }
            ),
            None => Ok(()),
        }
    }
}

/// Removes what the modes other than `keeping` left (see the module docs);
/// `ipvs_exclude` are virtual servers never to delete (`ipvs.excludeCIDRs`).
/// Never fails: a step that cannot run is reported in
/// [`Leftovers::problems`] and the others still run.
pub async fn remove(keeping: Keeping, ipvs_exclude: &[IpNet]) -> Leftovers {
    let mut out = Leftovers::default();
    let mut tables = vec![UPSTREAM_TABLE];
    if keeping != Keeping::Nftables {
        tables.push(NFTABLES_TABLE);
    }
    if keeping != Keeping::Ipvs {
        tables.push(companion::TABLE);
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
    let doomed = |table: exec::Table, chain: &str| match only_ipvs_mode {
        true => kproxy_iptables::names::is_ipvs_mode_chain(table.as_str(), chain),
        false => kproxy_iptables::names::is_proxy_chain(table.as_str(), chain),
    };
    if !exec::installed(backend) {
        if let Some(problem) = unreachable_chains(backend).await {
            out.problems.push(problem);
        }
        return;
    }
    let tools = exec::Iptables::new(backend);
    for family in IpFamily::ALL {
        match tools.remove_chains(family, doomed).await {
            Ok(removed) => {
                for (table, chain, reason) in &removed.kept {
                    out.problems.push(format!("{backend} {family} {table} chain {chain} stays: {reason}"));
                }
                out.iptables.push((backend, family, removed));
            }
            // Legacy tools on a kernel without x_tables, say: nothing there.
            Err(e) => debug!(%backend, %family, error = %e, "cannot list iptables chains; none removed"),
        }
    }
}

/// Without `backend`'s tools its chains cannot be removed: say so when
/// there may be some (legacy tables loaded; for nft, `KUBE-*` chains seen
/// over netlink).
async fn unreachable_chains(backend: Backend) -> Option<String> {
    match backend {
        Backend::Legacy => {
            let loaded = std::fs::read_to_string("/proc/net/ip_tables_names").unwrap_or_default();
            (!loaded.trim().is_empty()).then(|| {
                "legacy iptables tables are loaded but the iptables-legacy tools are not installed: \
                 kube-proxy chains there (if any) stay; run `kube-proxy --cleanup` or kproxy's iptables image"
                    .to_owned()
            })
        }
        Backend::Nft => {
            let listed = tokio::task::spawn_blocking(|| {
                IpFamily::ALL
                    .into_iter()
                    .filter_map(|f| netlink::chain_names_by_table(f, &["filter", "nat", "mangle"]).ok())
                    .flat_map(|by_table| {
                        by_table.into_iter().flat_map(|(t, chains)| chains.into_iter().map(move |c| (t.clone(), c)))
                    })
                    .filter(|(t, c)| kproxy_iptables::names::is_proxy_chain(t, c))
                    .count()
            })
            .await
            .unwrap_or(0);
            (listed > 0).then(|| {
                format!(
                    "{listed} kube-proxy iptables-nft chains stay: the iptables-nft tools are not installed; \
                     run `kube-proxy --cleanup` or kproxy's iptables image"
                )
            })
        }
    }
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
