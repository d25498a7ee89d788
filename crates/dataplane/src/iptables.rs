//! The iptables mode: plans with `kproxy-iptables` (upstream's chain
//! layout), applies each family's payload with `iptables-restore --noflush`
//! of the node's backend (legacy or nft, `kproxy-iptables-exec`), then
//! deletes stale UDP conntrack entries.
//!
//! A full sync (the first, after a failure, hourly, or when the canary
//! chains are gone because someone flushed the tables) rewrites every
//! kproxy chain, deletes stale per-service chains left by an earlier run,
//! and ensures the jump rules from the built-in chains. A partial sync
//! rewrites only the per-service chains that changed plus the dispatch
//! chains. What was applied is kept in memory, per family, as a summary
//! (chain names and content hashes, not rule text); each restore's input is
//! generated chunk by chunk while it is written to the tool.

use std::collections::{BTreeSet, HashMap};

use kproxy_iptables::{Applied, PlanConfig, Table, prepare};
use kproxy_iptables_exec::{self as exec, Backend, BackendChoice, Iptables as Exec, IptablesError};
use kproxy_model::IpFamily;
use tracing::{info, warn};

use crate::conntrack::flush_stale_udp;
use crate::dataplane::{Dataplane, DataplaneError, RuleCount, SyncFuture, SyncKind, SyncReport, SyncRequest};
use crate::failure::RestoreFailed;
use crate::sysctl::{Ensured, KernelFiles};

/// Declared chains per `iptables-nft-restore` run (see
/// [`kproxy_iptables::Payload::split`] and [`kproxy_iptables::Prepared::restores`]), about 230 services of 10
/// endpoints. A cold 10k-service payload (114k chains) in restores of about
/// 1.1k or 2.8k chains took 12 s in all (iptables 1.8.9), of 5.5k 15 s, of
/// 11k 17.5 s; in one restore it did not finish in 400 s.
pub const NFT_CHAINS_PER_RESTORE: usize = 2500;

/// The iptables mode's settings.
#[derive(Clone, Debug, Default)]
pub struct IptablesConfig {
    pub plan: PlanConfig,
    /// Which backend's tools to run; `Auto` detects the node's.
    pub backend: BackendChoice,
}

/// The iptables mode.
pub struct Iptables {
    config: IptablesConfig,
    /// Chosen at the first sync.
    exec: Option<Exec>,
    applied: [Option<Applied>; 2],
    reported: BTreeSet<String>,
    /// `route_localnet` was set (or found set).
    route_localnet: bool,
}

impl Iptables {
    pub fn new(config: IptablesConfig) -> Self {
        Self { config, exec: None, applied: [None, None], reported: BTreeSet::new(), route_localnet: false }
    }

    async fn sync_inner(&mut self, request: SyncRequest<'_>) -> Result<SyncReport, DataplaneError> {
        let exec = match &self.exec {
            Some(exec) => exec.clone(),
            None => {
                let detection = exec::detect(self.config.backend).await?;
                info!(backend = detection.backend.as_str(), reason = ?detection.reason, "iptables backend chosen");
                let exec = Exec::new(detection.backend);
                self.exec = Some(exec.clone());
                exec
            }
        };
        let node = &request.state.node;
        let localhost = self.config.plan.localhost_node_ports
            && (node.node_port_match_all.contains(&IpFamily::V4)
                || node.node_port_addresses.iter().any(|ip| ip.is_ipv4() && ip.is_loopback()));
        if localhost && !self.route_localnet {
            // Node ports on 127.0.0.1 are DNATed off the loopback; the
            // kernel routes such packets only with route_localnet (upstream
            // sets it too, and KUBE-FIREWALL guards 127/8 from outside).
            self.route_localnet = set_route_localnet();
        }
        let mut skips = Vec::new();
        let mut summary = Vec::new();
        let mut rules = Vec::new();
        let mut any_full = false;
        for (i, family) in IpFamily::ALL.into_iter().enumerate() {
            // Someone flushed the tables (a firewall reload): rebuild.
            if self.applied[i].is_some() {
                match exec.canary_present(family).await {
                    Ok(true) => {}
                    Ok(false) => {
                        warn!(%family, "kproxy's canary chain is gone (tables flushed?); doing a full sync");
                        self.applied[i] = None;
                    }
                    Err(e) => warn!(%family, error = %e, "cannot check the canary chain"),
                }
            }
            let full = request.kind == SyncKind::Full || self.applied[i].is_none();
            any_full |= full;
            let previous = if full { None } else { self.applied[i].as_ref() };
            let mut planned = prepare(request.state, family, &self.config.plan, previous);
            skips.extend(planned.skips.iter().cloned());
            if full {
                // Per-service chains of an earlier run that this plan no
                // longer has: deleted in the same restore.
                let existing = existing_chains(&exec, family).await;
                planned.delete_also(kproxy_iptables::cleanup(&existing, Some(&planned.applied)));
            }
            // iptables-nft-restore is quadratic in the chains of one
            // transaction (a cold 10k-service payload did not finish in
            // 400 s); legacy rewrites the whole table per commit, so it gets
            // one restore. Each restore's text is generated as it is
            // written to the tool, never whole in memory.
            let written = planned.written_rules();
            let parts = planned.restores(match exec.backend() {
                Backend::Nft => Some(NFT_CHAINS_PER_RESTORE),
                Backend::Legacy => None,
            });
            let mut bytes = 0;
            for part in &parts {
                let line = |n: usize| planned.render(part).lines().nth(n.checked_sub(1)?).map(str::to_owned);
                match exec.restore_streamed(family, planned.chunks(part), line).await {
                    Ok(sent) => bytes += sent,
                    Err(source) => {
                        self.applied[i] = None;
                        return Err(RestoreFailed { family, source }.into());
                    }
                }
            }
            for (table, written) in [Table::Filter, Table::Nat].into_iter().zip(written) {
                let total = planned.applied.rule_count(table);
                rules.push(RuleCount { family, table: table.as_str(), total, written });
            }
            if full {
                exec.ensure_canary(family).await?;
                for jump in &planned.jump_rules {
                    exec.ensure_jump(family, &exec_jump(jump)).await?;
                }
            }
            let restores = parts.len();
            summary.push(format!(
                "{family}: {bytes} bytes in {restores} restores, {} chains, {} ports planned",
                planned.applied.chain_count(),
                planned.ports_planned
            ));
            self.applied[i] = Some(planned.applied);
        }
        let conntrack_runs = flush_stale_udp(request.changes).await;
        let conntrack = crate::conntrack::deleted(&conntrack_runs);
        let current: BTreeSet<String> = skips.into_iter().collect();
        let skipped: Vec<String> = current.difference(&self.reported).cloned().collect();
        self.reported = current;
        let kind = if any_full { "full" } else { "partial" };
        Ok(SyncReport {
            summary: format!("{kind}: {}, {conntrack} conntrack entries deleted", summary.join("; ")),
            skipped,
            rules,
            conntrack: conntrack_runs,
        })
    }
}

impl Dataplane for Iptables {
    fn mode(&self) -> &'static str {
        "iptables"
    }

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a> {
        Box::pin(self.sync_inner(request))
    }
}

/// `net.ipv4.conf.all.route_localnet=1`; false (and a warning) when it
/// cannot be written.
fn set_route_localnet() -> bool {
    match KernelFiles::host().ensure("net/ipv4/conf/all/route_localnet", "1") {
        Ok(Ensured::Unchanged) => true,
        Ok(Ensured::Changed { .. }) => {
            info!(
                "Setting route_localnet=1 to allow node-ports on localhost; to change this either disable iptables.localhostNodePorts (--iptables-localhost-nodeports) or set nodePortAddresses (--nodeport-addresses) to filter loopback addresses"
            );
            true
        }
        Err(e) => {
            warn!(error = %e.chain(), "cannot set route_localnet; node ports on 127.0.0.1 will not answer");
            false
        }
    }
}

fn exec_table(table: Table) -> exec::Table {
    match table {
        Table::Filter => exec::Table::Filter,
        Table::Nat => exec::Table::Nat,
    }
}

fn exec_jump(jump: &kproxy_iptables::JumpRule) -> exec::JumpRule {
    exec::JumpRule { table: exec_table(jump.table), chain: jump.chain.to_owned(), spec: jump.args.clone() }
}

/// The chains in `family`'s filter and nat tables (over netlink with the
/// nft backend, see [`Exec::chains`]); empty when they cannot be read (a
/// full sync then only leaves stale chains behind).
async fn existing_chains(exec: &Exec, family: IpFamily) -> HashMap<Table, Vec<String>> {
    let tables = [Table::Filter, Table::Nat];
    let mut listed = match exec.chains(family, &tables.map(exec_table)).await {
        Ok(listed) => listed,
        Err(e) => {
            warn!(%family, error = %e, "cannot list the iptables chains; stale chains of an earlier run may stay");
            return HashMap::new();
        }
    };
    tables.into_iter().map(|t| (t, listed.remove(&exec_table(t)).unwrap_or_default())).collect()
}

/// Removes kproxy's jump rules and chains (every `KUBE-*` chain kproxy
/// makes, and nothing else) from both families of the detected backend.
pub async fn cleanup(backend: BackendChoice) -> Result<exec::Cleaned, IptablesError> {
    let detection = exec::detect(backend).await?;
    let exec = Exec::new(detection.backend);
    let mut total = exec::Cleaned::default();
    let config = PlanConfig { localhost_node_ports: false, ..PlanConfig::default() };
    for family in IpFamily::ALL {
        let jumps = kproxy_iptables::jump_rules(&config, family).iter().map(exec_jump).collect();
        let existing = existing_chains(&exec, family).await;
        let doomed = kproxy_iptables::cleanup(&existing, None);
        let mut chains: Vec<String> = doomed.filter.deleted.iter().chain(&doomed.nat.deleted).cloned().collect();
        // kubelet's chain, also used by kproxy for localhost node ports:
        // the kubelet still needs it.
        chains.retain(|c| c != "KUBE-FIREWALL");
        chains.push(exec::CANARY_CHAIN.to_owned());
        chains.sort();
        chains.dedup();
        let what = exec::Cleanup { jumps, chain_prefixes: chains };
        let cleaned = exec.cleanup(family, &what).await?;
        total.jumps += cleaned.jumps;
        total.chains.extend(cleaned.chains);
    }
    Ok(total)
}
