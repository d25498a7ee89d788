//! kproxy's own Service annotations: scheduler, endpoint weights and
//! health checks.
//!
//! A bad value does not make the Service invalid: it is served with that
//! annotation's default, and the [`InvalidAnnotation`] is kept with it for
//! the state to report (`crate::annotation`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kproxy_model::{Annotation, HealthCheck, Probe, Scheduler};

use super::ANNOTATION_SCHEDULER;
use crate::info::{Annotations, InvalidAnnotation};

/// `10.244.1.5=3,10.244.1.6=1`: endpoint address -> weight.
pub const ANNOTATION_WEIGHTS: &str = "kproxy.io/weights";
/// `tcp` or `http`: turns health checks on.
pub const ANNOTATION_HEALTH_CHECK: &str = "kproxy.io/health-check";
/// Prefix of the health check's settings.
const HEALTH_CHECK_PREFIX: &str = "kproxy.io/health-check-";
/// The settings, with their defaults in [`health_check`].
const HEALTH_CHECK_SETTINGS: [&str; 6] = ["path", "port", "interval", "timeout", "rise", "fall"];
/// The largest weight (as ipvsadm allows).
pub const MAX_WEIGHT: u32 = 65535;

/// Every `kproxy.io/*` annotation of `svc`, a bad one as its default and
/// an [`InvalidAnnotation`]; `None` when all are unset.
pub fn of(svc: &Service) -> Option<Box<Annotations>> {
    let mut invalid = Vec::new();
    let mut or_default = |e| invalid.push(e);
    let scheduler = scheduler(svc).unwrap_or_else(|e| {
        or_default(e);
        None
    });
    let weights = weights(svc).unwrap_or_else(|e| {
        or_default(e);
        BTreeMap::new()
    });
    let health_check = health_check(svc).unwrap_or_else(|e| {
        or_default(e);
        None
    });
    let annotations = Annotations { scheduler, weights, health_check, invalid };
    (annotations != Annotations::default()).then(|| Box::new(annotations))
}

fn invalid(kind: Annotation, key: &str, reason: impl Into<String>) -> InvalidAnnotation {
    InvalidAnnotation { kind, key: key.to_owned(), reason: reason.into() }
}

fn annotation<'s>(svc: &'s Service, key: &str) -> Option<&'s String> {
    svc.metadata.annotations.as_ref().and_then(|a| a.get(key))
}

/// The scheduler of `kproxy.io/scheduler`.
fn scheduler(svc: &Service) -> Result<Option<Scheduler>, InvalidAnnotation> {
    let Some(value) = annotation(svc, ANNOTATION_SCHEDULER) else { return Ok(None) };
    value.parse().map(Some).map_err(|()| {
        let allowed: Vec<&str> = Scheduler::ALL.iter().map(|s| s.as_str()).collect();
        let reason = format!("unsupported value {value:?} (allowed: {})", allowed.join(", "));
        invalid(Annotation::Scheduler, ANNOTATION_SCHEDULER, reason)
    })
}

/// The weights of `kproxy.io/weights`.
fn weights(svc: &Service) -> Result<BTreeMap<IpAddr, u32>, InvalidAnnotation> {
    let Some(value) = annotation(svc, ANNOTATION_WEIGHTS) else { return Ok(BTreeMap::new()) };
    let invalid = |reason: String| invalid(Annotation::Weights, ANNOTATION_WEIGHTS, reason);
    let mut weights = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (ip, weight) = entry
            .split_once('=')
            .ok_or_else(|| invalid(format!("{entry:?}: want ADDRESS=WEIGHT, e.g. 10.244.1.5=3")))?;
        let ip: IpAddr =
            ip.trim().parse().map_err(|_| invalid(format!("{entry:?}: {:?} is not an IP address", ip.trim())))?;
        let weight: u32 =
            weight.trim().parse().ok().filter(|w| *w <= MAX_WEIGHT).ok_or_else(|| {
                invalid(format!("{entry:?}: the weight must be a whole number from 0 to {MAX_WEIGHT}"))
            })?;
        if weights.insert(ip, weight).is_some() {
            return Err(invalid(format!("{ip} is listed twice")));
        }
    }
    Ok(weights)
}

/// The check of `kproxy.io/health-check` and its settings
/// (`kproxy.io/health-check-{path,port,interval,timeout,rise,fall}`).
fn health_check(svc: &Service) -> Result<Option<HealthCheck>, InvalidAnnotation> {
    let Some(annotations) = svc.metadata.annotations.as_ref() else { return Ok(None) };
    let bad = |key: &str, reason: String| invalid(Annotation::HealthCheck, key, reason);
    let bad_setting = |name: &str, reason: String| bad(&format!("{HEALTH_CHECK_PREFIX}{name}"), reason);
    for key in annotations.keys() {
        if let Some(setting) = key.strip_prefix(HEALTH_CHECK_PREFIX)
            && !HEALTH_CHECK_SETTINGS.contains(&setting)
        {
            let allowed: Vec<String> =
                HEALTH_CHECK_SETTINGS.iter().map(|s| format!("{HEALTH_CHECK_PREFIX}{s}")).collect();
            return Err(bad(key, format!("unknown setting (known: {})", allowed.join(", "))));
        }
    }
    let setting = |name: &str| annotations.get(&format!("{HEALTH_CHECK_PREFIX}{name}"));
    let Some(kind) = annotations.get(ANNOTATION_HEALTH_CHECK) else {
        if let Some(name) = HEALTH_CHECK_SETTINGS.iter().find(|n| setting(n).is_some()) {
            return Err(bad_setting(name, format!("set without {ANNOTATION_HEALTH_CHECK} (tcp or http)")));
        }
        return Ok(None);
    };
    let path = setting("path").cloned();
    let probe = match kind.as_str() {
        "tcp" if path.is_some() => return Err(bad_setting("path", "only for http checks".into())),
        "tcp" => Probe::Tcp,
        "http" => {
            let path = path.unwrap_or_else(|| "/".into());
            if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(bad_setting("path", "want a path starting with /".into()));
            }
            Probe::Http { path }
        }
        other => {
            return Err(bad(ANNOTATION_HEALTH_CHECK, format!("unsupported value {other:?} (allowed: tcp, http)")));
        }
    };
    let number = |name: &str, default: u32, max: u32| -> Result<u32, InvalidAnnotation> {
        match setting(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| bad_setting(name, format!("{v:?}: want a whole number from 1 to {max}"))),
        }
    };
    let duration = |name: &str, default: Duration| -> Result<Duration, InvalidAnnotation> {
        match setting(name) {
            None => Ok(default),
            Some(v) => parse_duration(v)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| bad_setting(name, format!("{v:?}: want a duration like 500ms, 5s or 1m"))),
        }
    };
    let port = match setting("port") {
        None => None,
        Some(_) => Some(u16::try_from(number("port", 1, 65535)?).unwrap_or(u16::MAX)),
    };
    let interval = duration("interval", Duration::from_secs(5))?;
    // 1 s, or the interval when that is shorter.
    let timeout = duration("timeout", interval.min(Duration::from_secs(1)))?;
    if timeout > interval {
        return Err(bad_setting("timeout", "longer than the interval".into()));
    }
    Ok(Some(HealthCheck {
        probe,
        port,
        interval,
        timeout,
        rise: number("rise", 2, 100)?,
        fall: number("fall", 3, 100)?,
    }))
}

/// `250ms`, `5s`, `2m`: a whole number and a unit.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_whole_number_and_a_unit() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration(" 5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        for bad in ["5", "s", "1.5s", "5h", "-1s", ""] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
