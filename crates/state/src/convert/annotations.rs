//! kproxy's own Service annotations: endpoint weights and health checks.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kproxy_model::{HealthCheck, Probe};

use super::{Fields, InvalidObject};

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

fn field(annotation: &str) -> String {
    format!("metadata.annotations[{annotation}]")
}

/// The weights of `kproxy.io/weights`.
pub fn weights(f: &Fields, svc: &Service) -> Result<BTreeMap<IpAddr, u32>, InvalidObject> {
    let Some(value) = svc.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION_WEIGHTS)) else {
        return Ok(BTreeMap::new());
    };
    let invalid = |reason: String| f.invalid(field(ANNOTATION_WEIGHTS), reason);
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
pub fn health_check(f: &Fields, svc: &Service) -> Result<Option<HealthCheck>, InvalidObject> {
    let Some(annotations) = svc.metadata.annotations.as_ref() else { return Ok(None) };
    for key in annotations.keys() {
        if let Some(setting) = key.strip_prefix(HEALTH_CHECK_PREFIX)
            && !HEALTH_CHECK_SETTINGS.contains(&setting)
        {
            let allowed: Vec<String> =
                HEALTH_CHECK_SETTINGS.iter().map(|s| format!("{HEALTH_CHECK_PREFIX}{s}")).collect();
            return Err(f.invalid(field(key), format!("unknown setting (known: {})", allowed.join(", "))));
        }
    }
    let setting = |name: &str| annotations.get(&format!("{HEALTH_CHECK_PREFIX}{name}"));
    let Some(kind) = annotations.get(ANNOTATION_HEALTH_CHECK) else {
        if let Some(name) = HEALTH_CHECK_SETTINGS.iter().find(|n| setting(n).is_some()) {
            return Err(f.invalid(
                field(&format!("{HEALTH_CHECK_PREFIX}{name}")),
                format!("set without {ANNOTATION_HEALTH_CHECK} (tcp or http)"),
            ));
        }
        return Ok(None);
    };
    let path = setting("path").cloned();
    let probe = match kind.as_str() {
        "tcp" if path.is_some() => {
            return Err(f.invalid(field(&format!("{HEALTH_CHECK_PREFIX}path")), "only for http checks"));
        }
        "tcp" => Probe::Tcp,
        "http" => {
            let path = path.unwrap_or_else(|| "/".into());
            if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(f.invalid(field(&format!("{HEALTH_CHECK_PREFIX}path")), "want a path starting with /"));
            }
            Probe::Http { path }
        }
        other => {
            return Err(
                f.invalid(field(ANNOTATION_HEALTH_CHECK), format!("unsupported value {other:?} (allowed: tcp, http)"))
            );
        }
    };
    let number = |name: &str, default: u32, max: u32| -> Result<u32, InvalidObject> {
        match setting(name) {
            None => Ok(default),
            Some(v) => v.trim().parse().ok().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
                f.invalid(
                    field(&format!("{HEALTH_CHECK_PREFIX}{name}")),
                    format!("{v:?}: want a whole number from 1 to {max}"),
                )
            }),
        }
    };
    let duration = |name: &str, default: Duration| -> Result<Duration, InvalidObject> {
        match setting(name) {
            None => Ok(default),
            Some(v) => parse_duration(v).filter(|d| !d.is_zero()).ok_or_else(|| {
                f.invalid(
                    field(&format!("{HEALTH_CHECK_PREFIX}{name}")),
                    format!("{v:?}: want a duration like 500ms, 5s or 1m"),
                )
            }),
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
        return Err(f.invalid(field(&format!("{HEALTH_CHECK_PREFIX}timeout")), "longer than the interval"));
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
