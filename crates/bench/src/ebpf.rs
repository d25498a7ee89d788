//! The ebpf mode's cold syncs and one-service changes, through
//! `kproxy_dataplane::Ebpf` (the `Dataplane` trait), inside a worker's
//! network namespace: the programs are loaded there, pinned in a private
//! bpffs the worker mounts in a temporary folder, and attached to a
//! threaded cgroup the worker creates (holding none of its threads: no
//! socket of the bench is translated by these runs). Both go when the
//! worker ends, also on failure (drop guards).
//!
//! Also the programming step of the traffic runs ([`program`]): the same
//! dataplane in node-a's namespace, on the harness's cgroup and bpffs,
//! left attached (pinned) when the worker exits.
//!
//! A change is timed like the nftables mode's (event into the state
//! builder -> sync returned). Where its time goes is measured beside it,
//! outside the timed window: the planner alone on the same change
//! (`kproxy_ebpf::plan` against its own copy of what was applied).

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use kproxy_dataplane::ebpf::{Ebpf, EbpfConfig};
use kproxy_dataplane::{Dataplane, SyncKind, SyncRequest};
use kproxy_ebpf::{Applied, LocalDetector, PlanConfig};
use kproxy_model::IpNet;
use kproxy_sandbox::{Bpffs, Cgroup};

use crate::jobs::SyncTimes;
use crate::workload::{CLUSTER_CIDR, Spec};

/// The planner's settings: the workload's pod network is the cluster CIDR.
pub fn plan_config() -> PlanConfig {
    let cidr: IpNet = CLUSTER_CIDR.parse().expect("a valid CIDR");
    PlanConfig { local_detector: LocalDetector::Cidrs(vec![cidr]), ..PlanConfig::default() }
}

/// The dataplane on `cgroup`, pinning under `pin_dir`, its tc programs on
/// `devices` (none: the workload's node address is not in the namespace,
/// so the mode finds no interface and attaches no tc program).
fn dataplane(cgroup: &Path, pin_dir: &Path, devices: &[&str]) -> Ebpf {
    Ebpf::new(EbpfConfig {
        plan: plan_config(),
        cgroup: Some(cgroup.to_owned()),
        pin_dir: pin_dir.to_owned(),
        devices: devices.iter().map(|d| (*d).to_owned()).collect(),
    })
}

/// Cold sync (programs loaded, attached, maps written), then `changes`
/// one-service changes, each also re-planned alone outside its window.
pub async fn sync(spec: Spec, changes: usize) -> anyhow::Result<SyncTimes> {
    spec.check()?;
    let dir = tempfile::tempdir().context("a temporary folder for the bpffs")?;
    let bpffs = Bpffs::mount(&dir.path().join("bpffs")).context("mounting a private bpffs")?;
    let pin_dir = bpffs.dir("kproxy").context("the pin folder")?;
    let cgroup = Cgroup::new("bench").context("creating the bench's cgroup")?;
    let result = measure(spec, changes, cgroup.path(), &pin_dir).await;
    // The pins go with the bpffs (the links with them), then the cgroup.
    drop(bpffs);
    drop(cgroup);
    result
}

async fn measure(spec: Spec, changes: usize, cgroup: &Path, pin_dir: &Path) -> anyhow::Result<SyncTimes> {
    let start = Instant::now();
    let mut builder = spec.fold();
    let first = builder.take_changes();
    let build_s = start.elapsed().as_secs_f64();
    let rss_built_kib = crate::process::status_kib(std::process::id(), "VmRSS:");
    // The cold sync attaches the tc programs too (to the worker's own
    // loopback), as a node's first sync does.
    let mut ebpf = dataplane(cgroup, pin_dir, &["lo"]);
    let start = Instant::now();
    let request = SyncRequest { state: builder.state(), changes: &first, kind: SyncKind::Full };
    let report = ebpf.sync(request).await.map_err(anyhow::Error::from_boxed).context("cold sync")?;
    let cold_s = start.elapsed().as_secs_f64();
    let mut times = SyncTimes {
        build_s,
        cold_s,
        detail: vec![report.summary],
        rss_built_kib,
        rss_synced_kib: crate::process::status_kib(std::process::id(), "VmRSS:"),
        ..SyncTimes::default()
    };
    // The planner's own view, to time it alone: a full plan of the same state.
    let config = plan_config();
    let start = Instant::now();
    let planned = kproxy_ebpf::plan(builder.state(), &first, true, &config, Applied::default())
        .context("planning the cold sync alone")?;
    times.plan_s = Some(start.elapsed().as_secs_f64());
    times.script_bytes = Some(planned.ops.len());
    let mut applied = planned.applied;
    for k in 0..changes {
        let event = spec.change_event(spec.change_target(k, true), k);
        let start = Instant::now();
        builder.apply(event);
        let changed = builder.take_changes();
        let request = SyncRequest { state: builder.state(), changes: &changed, kind: SyncKind::Partial };
        let report = ebpf.sync(request).await.map_err(anyhow::Error::from_boxed).context("one-service change")?;
        times.changes_s.push(start.elapsed().as_secs_f64());
        anyhow::ensure!(changed.service_ports.len() == 1, "a change touched {} ports", changed.service_ports.len());
        let start = Instant::now();
        let planned =
            kproxy_ebpf::plan(builder.state(), &changed, false, &config, applied).context("planning a change alone")?;
        times.change_plan_s.push(start.elapsed().as_secs_f64());
        anyhow::ensure!(!planned.full, "the change was planned as a full sync");
        applied = planned.applied;
        if k + 1 == changes {
            times.detail.push(report.summary);
        }
    }
    Ok(times)
}

/// The traffic runs' programming: `spec` synced once by the ebpf mode in
/// this (node-a's) namespace, attached to `cgroup`, pinned under `pin_dir`
/// (which the harness owns and unmounts).
pub async fn program(spec: Spec, cgroup: &Path, pin_dir: &Path) -> anyhow::Result<SyncTimes> {
    spec.check()?;
    let mut builder = spec.fold();
    let first = builder.take_changes();
    // Only the socket hooks: every measured connection is made in the cgroup.
    let mut ebpf = dataplane(cgroup, pin_dir, &[]);
    let start = Instant::now();
    let request = SyncRequest { state: builder.state(), changes: &first, kind: SyncKind::Full };
    let report = ebpf.sync(request).await.map_err(anyhow::Error::from_boxed).context("programming the ebpf mode")?;
    Ok(SyncTimes { cold_s: start.elapsed().as_secs_f64(), detail: vec![report.summary], ..SyncTimes::default() })
}
