//! What a service port uses of its Service's `kproxy.io/*` annotations in
//! the running mode, and the warnings for what it does not.
//!
//! A bad annotation (kept by conversion as an [`InvalidAnnotation`]) and a
//! valid one the mode cannot do ([`ModeSupport`]) both fall back to the
//! annotation's default: the mode's default scheduler, weight 1 for every
//! endpoint, no health check. The Service stays served; the warning goes
//! with its ports into the state, where the runner logs and counts it and
//! `kproxy state` and `/state` show it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kproxy_model::{
    Annotation, AnnotationWarning, HealthCheck, ModeSupport, Problem, Scheduler, ServicePort, WeightSupport,
};

use crate::info::{InvalidAnnotation, ServiceInfo};

/// The annotations' values a service port uses.
pub(crate) struct Honoured {
    pub scheduler: Option<Scheduler>,
    pub weights: BTreeMap<IpAddr, u32>,
    pub health_check: Option<HealthCheck>,
    pub warnings: Vec<AnnotationWarning>,
}

const EQUAL_WEIGHTS: &str = "every endpoint weighs 1";
const NO_HEALTH_CHECK: &str = "no health check";

/// What of `service`'s annotations the mode of `support` honours, before
/// looking at endpoints (see [`check_weight_slots`]).
pub(crate) fn honoured(service: &ServiceInfo, support: &ModeSupport) -> Honoured {
    let Some(annotations) = service.annotations.as_deref() else {
        return Honoured { scheduler: None, weights: BTreeMap::new(), health_check: None, warnings: Vec::new() };
    };
    let mut warnings: Vec<AnnotationWarning> =
        annotations.invalid.iter().map(|invalid| warning_for(invalid, support)).collect();
    let mut unsupported = |kind: Annotation, reason: String, fallback: String| {
        warnings.push(AnnotationWarning {
            annotation: kind.as_str().to_owned(),
            kind,
            problem: Problem::Unsupported,
            reason,
            fallback,
        });
    };
    let mut scheduler = annotations.scheduler;
    if let Some(asked) = scheduler.filter(|s| !support.supports(*s)) {
        let reason = format!(
            "scheduler {asked} is not supported in {} mode (supported: {})",
            support.mode,
            support.scheduler_list()
        );
        unsupported(Annotation::Scheduler, reason, using(support));
        scheduler = None;
    }
    let mut weights = annotations.weights.clone();
    if support.weights == WeightSupport::Ignored && !weights.is_empty() {
        let reason = format!("{} mode picks every endpoint with the same probability", support.mode);
        unsupported(Annotation::Weights, reason, EQUAL_WEIGHTS.into());
        weights.clear();
    }
    let mut health_check = annotations.health_check.clone();
    if !support.health_checks && health_check.is_some() {
        let reason = format!("{} mode runs no health checks (the userspace mode does)", support.mode);
        unsupported(Annotation::HealthCheck, reason, NO_HEALTH_CHECK.into());
        health_check = None;
    }
    Honoured { scheduler, weights, health_check, warnings }
}

fn warning_for(invalid: &InvalidAnnotation, support: &ModeSupport) -> AnnotationWarning {
    let fallback = match invalid.kind {
        Annotation::Scheduler => using(support),
        Annotation::Weights => EQUAL_WEIGHTS.into(),
        Annotation::HealthCheck => NO_HEALTH_CHECK.into(),
    };
    AnnotationWarning {
        annotation: invalid.key.clone(),
        kind: invalid.kind,
        problem: Problem::Invalid,
        reason: invalid.reason.clone(),
        fallback,
    }
}

fn using(support: &ModeSupport) -> String {
    format!("using {}", support.default_scheduler)
}

/// Drops the weights of `port` when the mode turns weights into pick slots
/// and one of its endpoint lists would need more than the mode allows.
pub(crate) fn check_weight_slots(port: &mut ServicePort, support: &ModeSupport) {
    let WeightSupport::Slots { max } = support.weights else { return };
    let scheduler = port.scheduler.unwrap_or(support.default_scheduler);
    if port.weights.is_empty() || scheduler == Scheduler::Mh {
        return;
    }
    for list in [&port.cluster_endpoints, &port.local_endpoints] {
        let weights: Vec<u32> = list.iter().map(|e| port.weight_of(e.ip)).collect();
        // Equal weights take one slot per endpoint, however many.
        if weights.iter().all(|w| *w == 1) {
            continue;
        }
        let slots = kproxy_sched::wrr_table_len(&weights);
        if slots > max as u64 {
            port.warnings.push(AnnotationWarning {
                annotation: Annotation::Weights.as_str().to_owned(),
                kind: Annotation::Weights,
                problem: Problem::Unsupported,
                reason: format!(
                    "weights {weights:?} need {slots} pick slots in {} mode (at most {max}); use smaller weights",
                    support.mode
                ),
                fallback: EQUAL_WEIGHTS.into(),
            });
            port.weights.clear();
            return;
        }
    }
}
