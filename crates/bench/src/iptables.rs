//! The iptables mode's cold sync and one-service changes, through
//! `kproxy_dataplane::Iptables` (the `Dataplane` trait) on one fixed
//! backend, legacy or nft. Runs inside a worker's namespace, like the
//! nftables `Dataplane` job, and is timed the same way.
//!
//! What each sync sent is re-planned outside the timed window with
//! `kproxy_iptables::plan` against the same previous state (the planner is
//! pure, so the payload is the one the dataplane rendered; the byte count is
//! checked against the dataplane's own summary). Its declared chains are
//! sorted into the changed service's chains, dispatch chains (every chain
//! that is not per-service) and per-service chains of other services, which
//! must be none.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use kproxy_dataplane::{Dataplane, Iptables, IptablesConfig, NFT_CHAINS_PER_RESTORE, SyncKind, SyncRequest};
use kproxy_iptables::names::{PortChains, endpoint_chain, is_service_chain};
use kproxy_iptables::{Applied, Payload, PlanConfig, plan};
use kproxy_iptables_exec::{Backend, BackendChoice};
use kproxy_model::{IpFamily, ServiceName, ServicePort, ServicePortName};
use kproxy_state::StateBuilder;
use serde::{Deserialize, Serialize};

use crate::jobs::SyncTimes;
use crate::workload::Spec;

/// Which iptables tools a job runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IptablesBackend {
    Legacy,
    Nft,
}

impl IptablesBackend {
    pub const ALL: [IptablesBackend; 2] = [IptablesBackend::Legacy, IptablesBackend::Nft];

    pub fn as_str(self) -> &'static str {
        self.backend().as_str()
    }

    fn backend(self) -> Backend {
        match self {
            IptablesBackend::Legacy => Backend::Legacy,
            IptablesBackend::Nft => Backend::Nft,
        }
    }
}

/// What one IPv4 payload declared (the workload has no IPv6 services).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PayloadShape {
    /// The rendered `iptables-restore` input (all restores).
    pub bytes: usize,
    /// `iptables-restore` runs it took (the nft backend splits big payloads).
    #[serde(default)]
    pub restores: usize,
    /// Chains declared (`:CHAIN`) in both tables, deleted ones included.
    pub chains: usize,
    /// Of those, `-X` deletions.
    pub deleted: usize,
    /// Per-service chains of the changed service (before or after).
    pub own: usize,
    /// Chains that are not per-service (KUBE-SERVICES, KUBE-NODEPORTS, ...).
    pub dispatch: usize,
    /// Per-service chains of any other service: must be 0.
    pub foreign: usize,
}

/// The planner's settings in every run, as for the nftables mode.
fn plan_config() -> PlanConfig {
    PlanConfig { local_detector: crate::sync::plan_config().local_detector, ..PlanConfig::default() }
}

/// Cold full sync, then `changes` one-service changes, on `backend`.
pub async fn measure(spec: Spec, backend: IptablesBackend, changes: usize) -> anyhow::Result<SyncTimes> {
    spec.check()?;
    let start = Instant::now();
    let mut builder = spec.fold();
    let first = builder.take_changes();
    let build_s = start.elapsed().as_secs_f64();
    let config = IptablesConfig { plan: plan_config(), backend: BackendChoice::Fixed(backend.backend()) };
    let mut iptables = Iptables::new(config.clone());

    let start = Instant::now();
    let request = SyncRequest { state: builder.state(), changes: &first, kind: SyncKind::Full };
    let report = iptables.sync(request).await.map_err(anyhow::Error::from_boxed).context("cold sync")?;
    let cold_s = start.elapsed().as_secs_f64();
    let cold = plan(builder.state(), IpFamily::V4, &config.plan, None);
    let cold_shape = shape(&cold.payload, &BTreeSet::new(), backend);
    check_bytes(&report.summary, &cold_shape)?;
    let mut applied: Applied = cold.applied;
    let mut times = SyncTimes {
        build_s,
        cold_s,
        script_bytes: Some(cold_shape.bytes),
        detail: vec![report.summary],
        cold_payload: Some(cold_shape),
        ..SyncTimes::default()
    };
    for k in 0..changes {
        let i = spec.change_target(k, true);
        let service = ServiceName::new(spec.namespace(i), spec.name(i));
        let before = ports_of(&builder, &service);
        let event = spec.change_event(i, k);
        let start = Instant::now();
        builder.apply(event);
        let changed = builder.take_changes();
        let request = SyncRequest { state: builder.state(), changes: &changed, kind: SyncKind::Partial };
        let report = iptables.sync(request).await.map_err(anyhow::Error::from_boxed).context("one-service change")?;
        times.changes_s.push(start.elapsed().as_secs_f64());
        anyhow::ensure!(changed.service_ports.len() == 1, "a change touched {} ports", changed.service_ports.len());

        // The same planning and rendering the sync did for IPv4, timed
        // again: how much of a change is the planner's whole-ruleset pass.
        let again = Instant::now();
        let planned = plan(builder.state(), IpFamily::V4, &config.plan, Some(&applied));
        let text = planned.payload.render();
        times.change_plan_s.push(again.elapsed().as_secs_f64());
        anyhow::ensure!(!planned.full, "the change was planned as a full sync");
        let own = own_chains(before.iter().chain(&ports_of(&builder, &service)));
        let change = shape(&planned.payload, &own, backend);
        debug_assert!(change.restores != 1 || change.bytes == text.len());
        check_bytes(&report.summary, &change)?;
        anyhow::ensure!(
            change.foreign == 0,
            "change {k} to {service} declared {} other services' chains",
            change.foreign
        );
        applied = planned.applied;
        times.change_payloads.push(change);
        if k + 1 == changes {
            times.detail.push(report.summary);
        }
    }
    Ok(times)
}

/// Every port of `service` in the builder's IPv4 state.
fn ports_of(builder: &StateBuilder, service: &ServiceName) -> Vec<Arc<ServicePort>> {
    let ports = &builder.state().ipv4.service_ports;
    let range = ports.range(ServicePortName::first_of(service.clone())..);
    range.take_while(|(name, _)| name.service == *service).map(|(_, port)| Arc::clone(port)).collect()
}

/// The per-service chains `ports` use or may have used: the four port
/// chains and one `KUBE-SEP-` per endpoint.
fn own_chains<'a>(ports: impl Iterator<Item = &'a Arc<ServicePort>>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for port in ports {
        let chains = PortChains::of(&port.name);
        out.extend([chains.cluster, chains.local, chains.external, chains.firewall]);
        for endpoint in port.cluster_endpoints.iter().chain(&port.local_endpoints) {
            out.insert(endpoint_chain(&port.name, endpoint));
        }
    }
    out
}

/// Sorts what `payload` declares; per-service chains not in `own` are
/// another service's.
fn shape(payload: &Payload, own: &BTreeSet<String>, backend: IptablesBackend) -> PayloadShape {
    let parts = match backend {
        IptablesBackend::Nft => payload.split(NFT_CHAINS_PER_RESTORE),
        IptablesBackend::Legacy => vec![payload.clone()],
    };
    let parts: Vec<&Payload> = parts.iter().filter(|p| !p.is_empty()).collect();
    let bytes = parts.iter().map(|p| p.render().len()).sum();
    let mut out = PayloadShape { bytes, restores: parts.len(), ..PayloadShape::default() };
    for table in [&payload.filter, &payload.nat] {
        out.deleted += table.deleted.len();
        for chain in table.chains.iter().chain(&table.deleted) {
            out.chains += 1;
            match (is_service_chain(chain), own.contains(chain)) {
                (false, _) => out.dispatch += 1,
                (true, true) => out.own += 1,
                (true, false) => out.foreign += 1,
            }
        }
    }
    out
}

/// The dataplane reports `IPv4: N bytes, ...`: the re-planned payload must
/// be the one it sent.
fn check_bytes(summary: &str, shape: &PayloadShape) -> anyhow::Result<()> {
    let expected = format!("{}: {} bytes in {} restores", IpFamily::V4, shape.bytes, shape.restores);
    anyhow::ensure!(summary.contains(&expected), "the dataplane sent another payload: {summary:?}, not {expected:?}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_service_plan_declares_only_its_chains_and_dispatch_chains() {
        let spec = Spec::new(50, 3);
        let mut builder = spec.fold();
        builder.take_changes();
        let config = plan_config();
        let applied = plan(builder.state(), IpFamily::V4, &config, None).applied;
        let i = spec.change_target(0, true);
        let service = ServiceName::new(spec.namespace(i), spec.name(i));
        let before = ports_of(&builder, &service);
        builder.apply(spec.change_event(i, 0));
        builder.take_changes();
        let planned = plan(builder.state(), IpFamily::V4, &config, Some(&applied));
        let own = own_chains(before.iter().chain(&ports_of(&builder, &service)));
        let s = shape(&planned.payload, &own, IptablesBackend::Legacy);
        // The service's KUBE-SVC- chain, the new endpoint's KUBE-SEP- and the old one's deletion.
        assert_eq!((s.own, s.deleted, s.foreign), (3, 1, 0), "{s:?}");
        // Against an unrelated service's chains, the same payload counts as foreign.
        let other = ServiceName::new(spec.namespace(i + 1), spec.name(i + 1));
        let wrong = own_chains(ports_of(&builder, &other).iter());
        assert_eq!(shape(&planned.payload, &wrong, IptablesBackend::Legacy).foreign, 3);
    }
}
