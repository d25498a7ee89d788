//! Active health checks of a service's endpoints (`kproxy.io/health-check*`
//! annotations), run by the modes in the data path (userspace).

use std::time::Duration;

use serde::Serialize;

/// How one endpoint is probed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Probe {
    /// A TCP connect succeeds.
    Tcp,
    /// `GET path` answers 2xx or 3xx.
    Http { path: String },
}

/// One service's check: every `interval`, each endpoint is probed (on
/// `port`, else its own port) with `timeout`; `fall` failures in a row take
/// it out of the pick set and `rise` successes in a row bring it back.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    pub probe: Probe,
    pub port: Option<u16>,
    #[serde(serialize_with = "millis")]
    pub interval: Duration,
    #[serde(serialize_with = "millis")]
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
