//! Valid Services kproxy programs nothing for, and why.

use std::fmt;

use serde::Serialize;

/// Why a valid Service gets no rules from kproxy (SEMANTICS.md, "Inputs").
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum IgnoreReason {
    /// `type: ExternalName`: DNS only.
    ExternalName,
    /// `clusterIP: None`: DNS only.
    Headless,
    /// Labelled `service.kubernetes.io/service-proxy-name`: another proxy
    /// owns it.
    OtherProxy(String),
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IgnoreReason::ExternalName => f.write_str("type ExternalName (DNS only)"),
            IgnoreReason::Headless => f.write_str("headless (clusterIP: None)"),
            IgnoreReason::OtherProxy(proxy) => {
                write!(f, "owned by service proxy {proxy:?} (label service.kubernetes.io/service-proxy-name)")
            }
        }
    }
}
