//! Cold syncs and one-service changes, three ways: through the `Nftables`
//! dataplane, as kproxy's rendered text through `nft -f`, and in upstream
//! kube-proxy's layout through `nft -f`. Runs inside a worker's namespace.
//!
//! A change is timed from the event reaching the state builder to the
//! sync returning (the kernel's commit done); building the event's object
//! is the source's work and is not counted.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use kproxy_dataplane::{Dataplane, Nftables, SyncKind, SyncRequest, nft};
use kproxy_model::{Changes, IpNet, ServiceName, ServicePort, ServicePortName};
use kproxy_nftables::{LocalDetector, PlanConfig, plan, render};
use kproxy_state::StateBuilder;

use crate::jobs::SyncTimes;
use crate::upstream;
use crate::workload::{CLUSTER_CIDR, Spec};

/// The planner's settings in every run: the workload's pod network is the
/// cluster CIDR (as `--cluster-cidr` for the real binary).
pub fn plan_config() -> PlanConfig {
    let cidr: IpNet = CLUSTER_CIDR.parse().expect("a valid CIDR");
    PlanConfig { local_detector: LocalDetector::Cidrs(vec![cidr]), ..PlanConfig::default() }
}

/// The workload folded into a state builder, and the first changes.
fn build(spec: &Spec) -> anyhow::Result<(StateBuilder, Changes, f64)> {
    spec.check()?;
    let start = Instant::now();
    let mut builder = spec.fold();
    let changes = builder.take_changes();
    Ok((builder, changes, start.elapsed().as_secs_f64()))
}

/// Through the `Dataplane` trait, as the runner drives it.
pub async fn dataplane(spec: Spec, changes: usize, udp_cleanup: bool) -> anyhow::Result<SyncTimes> {
    let (mut builder, mut first, build_s) = build(&spec)?;
    let rss_built_kib = crate::process::status_kib(std::process::id(), "VmRSS:");
    if !udp_cleanup {
        first.stale_udp_frontends.clear();
        first.stale_udp_endpoints.clear();
    }
    let mut nftables = Nftables::new(plan_config());
    let start = Instant::now();
    let request = SyncRequest { state: builder.state(), changes: &first, kind: SyncKind::Full };
    let report = nftables.sync(request).await.map_err(anyhow::Error::from_boxed).context("cold sync")?;
    let cold_s = start.elapsed().as_secs_f64();
    let mut times = SyncTimes {
        build_s,
        cold_s,
        detail: vec![report.summary],
        rss_built_kib,
        rss_synced_kib: crate::process::status_kib(std::process::id(), "VmRSS:"),
        ..SyncTimes::default()
    };
    for k in 0..changes {
        let event = spec.change_event(spec.change_target(k, true), k);
        let start = Instant::now();
        builder.apply(event);
        let changed = builder.take_changes();
        let request = SyncRequest { state: builder.state(), changes: &changed, kind: SyncKind::Partial };
        let report = nftables.sync(request).await.map_err(anyhow::Error::from_boxed).context("one-service change")?;
        times.changes_s.push(start.elapsed().as_secs_f64());
        anyhow::ensure!(changed.service_ports.len() == 1, "a change touched {} ports", changed.service_ports.len());
        if k + 1 == changes {
            times.detail.push(report.summary);
        }
    }
    Ok(times)
}

/// kproxy's own plans rendered to text and loaded with `nft -f`.
pub async fn text(spec: Spec, changes: usize) -> anyhow::Result<SyncTimes> {
    let (mut builder, first, build_s) = build(&spec)?;
    let config = plan_config();
    let start = Instant::now();
    let planned = plan(builder.state(), &first, true, &config, None);
    let plan_s = start.elapsed().as_secs_f64();
    let script = render::plan(&planned.plan);
    let render_s = start.elapsed().as_secs_f64() - plan_s;
    nft(&script).await.context("loading kproxy's full plan")?;
    let cold_s = start.elapsed().as_secs_f64();
    let mut times = SyncTimes {
        build_s,
        cold_s,
        plan_s: Some(plan_s),
        render_s: Some(render_s),
        load_s: Some(cold_s - plan_s - render_s),
        script_bytes: Some(script.len()),
        detail: vec![format!("{} lines", script.lines().count())],
        ..SyncTimes::default()
    };
    let mut applied = planned.applied;
    for k in 0..changes {
        let event = spec.change_event(spec.change_target(k, true), k);
        let start = Instant::now();
        builder.apply(event);
        let changed = builder.take_changes();
        let planned = plan(builder.state(), &changed, false, &config, Some(applied));
        anyhow::ensure!(!planned.plan.full, "the change was planned as a full sync");
        let script = render::plan(&planned.plan);
        let load = Instant::now();
        nft(&script).await.context("loading kproxy's partial plan")?;
        times.change_load_s.push(load.elapsed().as_secs_f64());
        times.changes_s.push(start.elapsed().as_secs_f64());
        applied = planned.applied;
        if k + 1 == changes {
            times.detail.push(format!("change: {} lines", script.lines().count()));
        }
    }
    Ok(times)
}

/// Upstream's layout for the same state, loaded the way upstream does.
pub async fn upstream(spec: Spec, changes: usize) -> anyhow::Result<SyncTimes> {
    let (mut builder, _, build_s) = build(&spec)?;
    let cidr = CLUSTER_CIDR;
    let start = Instant::now();
    let script = upstream::full(builder.state(), cidr);
    let render_s = start.elapsed().as_secs_f64();
    nft(&script).await.context("loading upstream's layout")?;
    let cold_s = start.elapsed().as_secs_f64();
    let mut times = SyncTimes {
        build_s,
        cold_s,
        render_s: Some(render_s),
        load_s: Some(cold_s - render_s),
        script_bytes: Some(script.len()),
        detail: vec![format!("{} lines", script.lines().count())],
        ..SyncTimes::default()
    };
    for k in 0..changes {
        let i = spec.change_target(k, true);
        let event = spec.change_event(i, k);
        let start = Instant::now();
        let old = port_of(&builder, &spec, i)?;
        builder.apply(event);
        builder.take_changes();
        let new = port_of(&builder, &spec, i)?;
        let script = upstream::change(&old, &new, cidr);
        let load = Instant::now();
        nft(&script).await.context("loading upstream's change")?;
        times.change_load_s.push(load.elapsed().as_secs_f64());
        times.changes_s.push(start.elapsed().as_secs_f64());
    }
    Ok(times)
}

/// Service `i`'s (only) IPv4 port.
fn port_of(builder: &StateBuilder, spec: &Spec, i: usize) -> anyhow::Result<Arc<ServicePort>> {
    let service = ServiceName::new(spec.namespace(i), spec.name(i));
    let ports = &builder.state().ipv4.service_ports;
    let mut range = ports.range(ServicePortName::first_of(service.clone())..);
    let found = range.next().filter(|(name, _)| name.service == service).map(|(_, port)| Arc::clone(port));
    found.with_context(|| format!("service {service} has no IPv4 port"))
}
