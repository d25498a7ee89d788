//! The state's annotation warnings ([`AnnotationWarning`]), each reported
//! once: when a Service that changed carries a warning it did not carry
//! before. A warning that goes away and comes back is reported again.
//! Only the changed services are looked at, so a sync never walks every
//! service.

use std::collections::{BTreeSet, HashMap};

use kproxy_model::{AnnotationWarning, Changes, ProxyState, ServiceName};

/// The warnings reported so far, per Service.
#[derive(Debug, Default)]
pub struct Warnings {
    reported: HashMap<ServiceName, BTreeSet<AnnotationWarning>>,
}

impl Warnings {
    /// The warnings of the services `changes` touched that were not
    /// reported yet; forgets those that are gone.
    pub fn update(&mut self, state: &ProxyState, changes: &Changes) -> Vec<(ServiceName, AnnotationWarning)> {
        let services: BTreeSet<&ServiceName> = changes.service_ports.iter().map(|(_, name)| &name.service).collect();
        let mut new = Vec::new();
        for service in services {
            let now: BTreeSet<AnnotationWarning> =
                state.ports_of(service).flat_map(|p| p.warnings.iter().cloned()).collect();
            let before = match now.is_empty() {
                true => self.reported.remove(service),
                false => self.reported.insert(service.clone(), now.clone()),
            };
            let before = before.unwrap_or_default();
            new.extend(now.difference(&before).map(|w| (service.clone(), w.clone())));
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kproxy_model::{
        Annotation, IpFamily, Problem, Protocol, ServicePort, ServicePortName, SessionAffinity, TrafficPolicy,
    };

    use super::*;

    fn warning(reason: &str) -> AnnotationWarning {
        AnnotationWarning {
            annotation: "kproxy.io/scheduler".into(),
            kind: Annotation::Scheduler,
            problem: Problem::Invalid,
            reason: reason.into(),
            fallback: "using random".into(),
        }
    }

    fn port(port: &str, family: IpFamily, warnings: &[&str]) -> ServicePort {
        ServicePort {
            name: ServicePortName::new(ServiceName::new("default", "web"), port, Protocol::Tcp),
            family,
            port: 80,
            node_port: None,
            frontends: Vec::new(),
            load_balancer_source_ranges: None,
            internal_traffic_policy: TrafficPolicy::Cluster,
            external_traffic_policy: TrafficPolicy::Cluster,
            session_affinity: None::<SessionAffinity>,
            scheduler: None,
            weights: Default::default(),
            health_check: None,
            health_check_node_port: None,
            warnings: warnings.iter().map(|r| warning(r)).collect(),
            cluster_endpoints: Vec::new(),
            local_endpoints: Vec::new(),
        }
    }

    /// A state of `ports` and changes naming all of them.
    fn sync(ports: Vec<ServicePort>) -> (ProxyState, Changes) {
        let mut state = ProxyState::default();
        let mut changes = Changes::default();
        for p in ports {
            changes.service_ports.insert((p.family, p.name.clone()));
            state.family_mut(p.family).service_ports.insert(p.name.clone(), Arc::new(p));
        }
        (state, changes)
    }

    fn reasons(new: &[(ServiceName, AnnotationWarning)]) -> Vec<String> {
        new.iter().map(|(s, w)| format!("{s}: {}", w.reason)).collect()
    }

    #[test]
    fn a_warning_is_reported_once_per_service_until_it_changes() {
        let mut warnings = Warnings::default();
        // Two ports in two families carry the same warning: one report.
        let (state, changes) = sync(vec![port("a", IpFamily::V4, &["bad"]), port("b", IpFamily::V6, &["bad"])]);
        assert_eq!(reasons(&warnings.update(&state, &changes)), ["default/web: bad"]);
        // The service changes again (endpoints, say), the warning stays.
        assert!(warnings.update(&state, &changes).is_empty());
        // Another value: reported.
        let (state, changes) = sync(vec![port("a", IpFamily::V4, &["worse"])]);
        assert_eq!(reasons(&warnings.update(&state, &changes)), ["default/web: worse"]);
        // Fixed, then broken again: reported again.
        let (state, changes) = sync(vec![port("a", IpFamily::V4, &[])]);
        assert!(warnings.update(&state, &changes).is_empty());
        let (state, changes) = sync(vec![port("a", IpFamily::V4, &["worse"])]);
        assert_eq!(reasons(&warnings.update(&state, &changes)), ["default/web: worse"]);
    }

    #[test]
    fn services_that_did_not_change_are_not_looked_at() {
        let mut warnings = Warnings::default();
        let (state, _) = sync(vec![port("a", IpFamily::V4, &["bad"])]);
        assert!(warnings.update(&state, &Changes::default()).is_empty());
    }
}
