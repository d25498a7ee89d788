//! A warning when `--hostname-override` names a node the source does not
//! have: no Node manifest or API object of that name once the first full
//! read is in. kproxy still runs (upstream does too), but nothing is known
//! of this node: no zone for topology hints, no pod CIDRs for the NodeCIDR
//! detector, no addresses; in a cluster it is also not eligible for
//! external load balancers.

use kproxy_state::{Kind, Object, SourceEvent};
use tokio::sync::mpsc;
use tracing::warn;

/// Whether a Node named `name` arrived before the source's first `Synced`.
#[derive(Debug)]
pub struct NodeSeen {
    name: String,
    seen: bool,
    decided: bool,
}

impl NodeSeen {
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), seen: false, decided: false }
    }

    /// Follows one event. `true` exactly once: at the first `Synced`, when
    /// no Node of that name came before it.
    pub fn missing_after(&mut self, event: &SourceEvent) -> bool {
        if self.decided {
            return false;
        }
        match event {
            SourceEvent::Apply(Object::Node(node)) if node.name == self.name => self.seen = true,
            SourceEvent::Delete(key) if key.kind == Kind::Node && *key.name == *self.name => self.seen = false,
            SourceEvent::Synced => {
                self.decided = true;
                return !self.seen;
            }
            _ => {}
        }
        false
    }
}

/// Passes `events` through, warning once if `hostname_override` names a
/// node that the first full read (`source`: "manifests" or "API server")
/// does not have. Without an override, `events` is returned as it is.
pub fn follow(
    events: mpsc::Receiver<SourceEvent>,
    hostname_override: Option<&str>,
    source: &'static str,
) -> mpsc::Receiver<SourceEvent> {
    let Some(name) = hostname_override else { return events };
    let mut seen = NodeSeen::new(name);
    let (tx, rx) = mpsc::channel(events.max_capacity());
    let mut events = events;
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if seen.missing_after(&event) {
                warn!(
                    node = %seen.name,
                    source,
                    "--hostname-override names a node that no Node object has; this node's zone, pod CIDRs and addresses are unknown, and no endpoint is local to it unless its nodeName says so"
                );
            }
            if tx.send(event).await.is_err() {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use kproxy_state::{ObjectKey, convert};

    use super::*;

    fn node(name: &str) -> SourceEvent {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        SourceEvent::Apply(Object::Node(convert::node(&node).unwrap()))
    }

    fn outcome(events: &[SourceEvent]) -> Vec<bool> {
        let mut seen = NodeSeen::new("node-a");
        events.iter().map(|e| seen.missing_after(e)).collect()
    }

    #[test]
    fn a_missing_node_is_reported_once_at_the_first_full_read() {
        let events = [node("node-b"), SourceEvent::Synced, SourceEvent::Synced];
        assert_eq!(outcome(&events), [false, true, false]);
    }

    #[test]
    fn a_node_of_that_name_before_the_first_full_read_is_not_reported() {
        assert_eq!(outcome(&[node("node-a"), SourceEvent::Synced]), [false, false]);
        let deleted = SourceEvent::Delete(ObjectKey::new(Kind::Node, "", "node-a"));
        assert_eq!(outcome(&[node("node-a"), deleted, SourceEvent::Synced]), [false, false, true]);
    }

    #[test]
    fn a_node_arriving_after_the_first_full_read_changes_nothing() {
        assert_eq!(outcome(&[SourceEvent::Synced, node("node-a"), SourceEvent::Synced]), [true, false, false]);
    }
}
