//! What the Kubernetes API source counts (`kproxy_kube_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Resource;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    pub resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub resource: &'static str,
    /// `apply` or `delete`, as passed on to the state.
    pub event: &'static str,
}

/// Shared handles; clones count into the same metrics.
#[derive(Clone, Debug, Default)]
pub struct KubeMetrics {
    pub events: Family<EventLabels, Counter>,
    pub lists: Family<ResourceLabel, Counter>,
    pub errors: Family<ResourceLabel, Counter>,
    pub invalid: Family<ResourceLabel, Counter>,
    pub objects: Family<ResourceLabel, Gauge>,
}

impl KubeMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kproxy_kube_events",
            "Changes passed on to the state, by resource and kind (apply, delete)",
            self.events.clone(),
        );
        registry.register(
            "kproxy_kube_lists",
            "Complete lists of a resource: the first, and every relist after an expired watch",
            self.lists.clone(),
        );
        registry.register(
            "kproxy_kube_watch_errors",
            "Failed lists and watches (each retried with backoff)",
            self.errors.clone(),
        );
        registry.register(
            "kproxy_kube_invalid_objects",
            "Objects (or updates of them) rejected by validation; the last valid version stays in force",
            self.invalid.clone(),
        );
        registry.register("kproxy_kube_objects", "Objects kproxy currently knows, by resource", self.objects.clone());
    }

    pub fn label_for(resource: Resource) -> ResourceLabel {
        ResourceLabel { resource: resource.as_str() }
    }
}
