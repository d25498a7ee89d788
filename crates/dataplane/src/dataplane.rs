//! The trait every proxy mode implements.

use std::future::Future;
use std::pin::Pin;

use kproxy_model::{Changes, IpFamily, ProxyState};

/// Whether a sync may rely on what the dataplane applied before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    /// Re-assert everything kproxy owns and remove what it no longer wants.
    Full,
    /// Touch only what `Changes` lists.
    Partial,
}

/// One sync: the whole desired state, what changed since the last
/// successful sync, and how much may be trusted.
#[derive(Clone, Copy, Debug)]
pub struct SyncRequest<'a> {
    pub state: &'a ProxyState,
    pub changes: &'a Changes,
    pub kind: SyncKind,
}

/// What a successful sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// In words, for the log.
    pub summary: String,
    /// Objects or parts not programmed, each with the reason (a scheduler
    /// the mode cannot do, a frontend another service already serves).
    /// Reported once each: the runner logs and counts them.
    pub skipped: Vec<String>,
    /// iptables mode: the rules of each family's tables.
    pub rules: Vec<RuleCount>,
    /// The stale-conntrack cleanups this sync ran, one per family.
    pub conntrack: Vec<ConntrackCleanup>,
}

/// The rules of one iptables table kproxy owns, for
/// `kubeproxy_sync_proxy_rules_iptables_{total,last}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleCount {
    pub family: IpFamily,
    /// `filter` or `nat`.
    pub table: &'static str,
    /// Rules kproxy has in the table after the sync.
    pub total: usize,
    /// Rules the sync wrote.
    pub written: usize,
}

/// One family's stale UDP conntrack cleanup (upstream's conntrack
/// reconciler metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConntrackCleanup {
    pub family: IpFamily,
    pub took: std::time::Duration,
    pub deleted: usize,
}

/// Any failure of a dataplane; each mode has its own error enum.
pub type DataplaneError = Box<dyn std::error::Error + Send + Sync>;

/// The future a [`Dataplane::sync`] returns.
pub type SyncFuture<'a> = Pin<Box<dyn Future<Output = Result<SyncReport, DataplaneError>> + Send + 'a>>;

/// A proxy mode: programs the node so that it serves `state`.
///
/// A sync is atomic from the user's point of view: after an error the node
/// still serves the previous state or the new one, and the runner's next
/// attempt is a full sync.
pub trait Dataplane: Send {
    /// The mode's name, as `--proxy-mode` spells it.
    fn mode(&self) -> &'static str;

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a>;

    /// The mode's own view for `/list`, when it knows more than the state
    /// (connection counts); `None` lists the state.
    fn listing(&self) -> Option<std::sync::Arc<dyn kproxy_admin::listing::Listing>> {
        None
    }

    /// Adds the mode's own metrics to the admin registry (once, at start).
    fn register_metrics(&self, _registry: &mut prometheus_client::registry::Registry) {}
}
