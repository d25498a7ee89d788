//! The real `kproxy` binary reading the workload from the in-process fake
//! API server (kproxy-testkit) instead of manifests: its memory with the
//! Kubernetes source. The server runs in this worker, inside the worker's
//! namespace, on loopback; kproxy is its only client.

use std::ffi::OsStr;
use std::path::Path;

use anyhow::Context;
use kproxy_testkit::apiserver::FakeApiServer;
use serde_json::json;

use crate::jobs::ProcessStats;
use crate::process::{self, RunMode};
use crate::workload::{SERVICE_CIDR, Spec};

/// Loads `spec` into a fake API server, then measures `kproxy run
/// --kubeconfig` in `mode` until its first sync is done (plus a settling
/// second).
pub fn measure(
    binary: &Path,
    spec: &Spec,
    mode: RunMode,
    workdir: &Path,
    timeout_s: f64,
) -> anyhow::Result<ProcessStats> {
    // Its own threads: this one blocks watching kproxy.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let server = runtime.block_on(FakeApiServer::start());
    server.apply(serde_json::to_value(spec.node())?);
    server.apply(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes"}, "spec": {"cidrs": [SERVICE_CIDR]}
    }));
    for i in 0..spec.services {
        server.apply(serde_json::to_value(spec.service(i))?);
        server.apply(serde_json::to_value(spec.slice(i, None))?);
    }
    std::fs::create_dir_all(workdir).with_context(|| format!("creating {}", workdir.display()))?;
    let kubeconfig = workdir.join(format!("kubeconfig-{}", std::process::id()));
    std::fs::write(&kubeconfig, server.kubeconfig()).context("writing the kubeconfig")?;
    let log = workdir.join(format!("kube-{}x{}.log", spec.services, spec.endpoints));
    let source = [OsStr::new("--kubeconfig"), kubeconfig.as_os_str()];
    let stats = process::measure_with(binary, &source, mode, &log, true, timeout_s);
    let _ = std::fs::remove_file(&kubeconfig);
    stats
}
