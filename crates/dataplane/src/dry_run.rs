//! The dataplane that programs nothing: kproxy computes and serves the state
//! (`/state`, metrics, health) without touching the node. Useful next to
//! another proxy, to see what kproxy would do.

use kproxy_model::{FrontendKind, ProxyState};

use crate::dataplane::{Dataplane, SyncFuture, SyncKind, SyncReport, SyncRequest};

#[derive(Debug, Default)]
pub struct DryRun;

impl Dataplane for DryRun {
    fn mode(&self) -> &'static str {
        "dry-run"
    }

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a> {
        let summary = summary(request.state, request.kind, request.changes.service_ports.len());
        Box::pin(async move { Ok(SyncReport { summary, ..SyncReport::default() }) })
    }
}

fn summary(state: &ProxyState, kind: SyncKind, changed: usize) -> String {
    let ports: Vec<_> = state.service_ports().collect();
    let frontends: usize = ports.iter().map(|p| p.frontends.len()).sum();
    let node_ports = ports.iter().flat_map(|p| p.frontends_of(FrontendKind::NodePort)).count();
    let endpoints: usize = ports.iter().map(|p| p.cluster_endpoints.len()).sum();
    let kind = match kind {
        SyncKind::Full => "full",
        SyncKind::Partial => "partial",
    };
    format!(
        "dry run ({kind}, {changed} changed): would serve {} service ports on {frontends} frontends ({node_ports} node ports) over {endpoints} endpoints",
        ports.len()
    )
}
