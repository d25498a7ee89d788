//! The document `/state` serves and `kproxy state -o json` prints: the
//! state a mode is asked to program, and what of it the mode does not
//! program as asked, each with its reason. The `kproxy state` table is
//! rendered from the same value, so the two cannot disagree.
//!
//! Keys are camelCase with Kubernetes' initialisms (`serviceCIDRs`), as
//! Kubernetes' own APIs and `/list` spell them.

use kproxy_model::{AnnotationWarning, ProxyState, ServiceName};
use serde::Serialize;

/// What the running mode leaves out of a state: the reasons its planner
/// gives (a frontend another Service holds, SCTP in userspace mode, a
/// loopback node port). Asked on each `/state` request, off the async
/// workers: a full plan of a large state takes a while.
pub trait NotProgrammed: Send + Sync {
    fn not_programmed(&self, state: &ProxyState) -> Vec<String>;
}

impl<F: Fn(&ProxyState) -> Vec<String> + Send + Sync> NotProgrammed for F {
    fn not_programmed(&self, state: &ProxyState) -> Vec<String> {
        self(state)
    }
}

/// `/state`: `mode`, the state's own fields (`node`, `ipv4`, `ipv6`,
/// `ignored`), then `notProgrammed` and `warnings`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateReport<'a> {
    /// The mode the report is for, as `--proxy-mode` spells it
    /// (`dry-run` for a run that programs nothing).
    pub mode: &'a str,
    #[serde(flatten)]
    pub state: &'a ProxyState,
    /// Sorted, each once.
    pub not_programmed: Vec<String>,
    /// Every Service's annotations not honoured, once per Service (each
    /// service port also lists its own, under `warnings`).
    pub warnings: Vec<ServiceWarning>,
}

/// An annotation of a Service that is not honoured, and what is done
/// instead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServiceWarning {
    pub service: ServiceName,
    #[serde(flatten)]
    pub warning: AnnotationWarning,
}

impl<'a> StateReport<'a> {
    pub fn new(mode: &'a str, state: &'a ProxyState, mut not_programmed: Vec<String>) -> Self {
        not_programmed.sort();
        not_programmed.dedup();
        let warnings = state
            .warnings()
            .into_iter()
            .flat_map(|(service, warnings)| {
                warnings.into_iter().map(move |warning| ServiceWarning { service: service.clone(), warning })
            })
            .collect();
        Self { mode, state, not_programmed, warnings }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kproxy_model::{
        Annotation, FrontendKind, IgnoreReason, IpFamily, Problem, Protocol, ServicePort, ServicePortName,
    };

    use super::*;

    fn port(service: &str, ip: &str) -> ServicePort {
        let name = ServicePortName::new(ServiceName::new("default", service), "http", Protocol::Tcp);
        let ip = ip.parse().unwrap();
        ServicePort {
            frontends: vec![kproxy_model::Frontend::new(FrontendKind::ClusterIp, ip, 80)],
            ..ServicePort::new(name, IpFamily::V4, 80)
        }
    }

    #[test]
    fn the_report_carries_ignored_services_skips_and_warnings_with_kubernetes_spelling() {
        let mut state = ProxyState::default();
        let mut web = port("web", "10.96.0.10");
        web.warnings.push(AnnotationWarning {
            annotation: "kproxy.io/scheduler".into(),
            kind: Annotation::Scheduler,
            problem: Problem::Unsupported,
            reason: "scheduler lc is not supported in nftables mode".into(),
            fallback: "using random".into(),
        });
        state.ipv4.service_ports.insert(web.name.clone(), Arc::new(web));
        state.ipv4.service_cidrs.push("10.96.0.0/16".parse().unwrap());
        state.ignored.insert(ServiceName::new("default", "db"), IgnoreReason::Headless);
        let skips = vec!["b: second".to_owned(), "a: first".to_owned(), "b: second".to_owned()];
        let report = StateReport::new("nftables", &state, skips);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["mode"], "nftables");
        assert_eq!(json["ipv4"]["serviceCIDRs"][0], "10.96.0.0/16");
        assert_eq!(json["ipv4"]["servicePorts"][0]["frontends"][0]["kind"], "ClusterIP");
        assert_eq!(json["node"]["podCIDRs"], serde_json::json!([]));
        assert_eq!(
            json["ignored"],
            serde_json::json!([{"service": {"namespace": "default", "name": "db"}, "reason": "headless (clusterIP: None)"}])
        );
        assert_eq!(json["notProgrammed"], serde_json::json!(["a: first", "b: second"]));
        assert_eq!(
            json["warnings"],
            serde_json::json!([{
                "service": {"namespace": "default", "name": "web"},
                "annotation": "kproxy.io/scheduler",
                "problem": "unsupported",
                "reason": "scheduler lc is not supported in nftables mode",
                "fallback": "using random"
            }])
        );
    }
}
