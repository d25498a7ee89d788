//! The label sets of kproxy's metrics, spelled as upstream spells them.

use kproxy_model::IpFamily;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};

/// `ip_family`: `IPv4` or `IPv6`, as upstream's `v1.IPFamily`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(clippy::upper_case_acronyms)]
pub enum FamilyValue {
    IPv4,
    IPv6,
}

impl From<IpFamily> for FamilyValue {
    fn from(family: IpFamily) -> Self {
        match family {
            IpFamily::V4 => FamilyValue::IPv4,
            IpFamily::V6 => FamilyValue::IPv6,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabel {
    pub ip_family: FamilyValue,
}

impl From<IpFamily> for FamilyLabel {
    fn from(family: IpFamily) -> Self {
        Self { ip_family: family.into() }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// `internal` or `external`.
    pub traffic_policy: String,
    pub ip_family: FamilyValue,
}

/// An iptables table (`filter` or `nat`) of one family, for the rule counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabels {
    pub ip_family: FamilyValue,
    pub table: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: u16,
}

/// A failed sync: the mode and why, in few words (the kernel's errno name
/// such as `EPERM`, or the step that failed such as `timeout`): the full
/// text is in the log and in `/healthz`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub mode: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnnotationLabels {
    /// `kproxy.io/scheduler`, `kproxy.io/weights` or `kproxy.io/health-check`
    /// (for every `kproxy.io/health-check-*` setting too).
    pub annotation: &'static str,
    /// `invalid` (the value) or `unsupported` (by the running mode).
    pub problem: &'static str,
}

/// `kubernetes_build_info`'s labels, as component-base spells them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildInfoLabels {
    pub major: String,
    pub minor: String,
    pub git_version: String,
    pub git_commit: String,
    pub git_tree_state: String,
    pub build_date: String,
    pub go_version: String,
    pub compiler: String,
    pub platform: String,
}

/// `part` of `kproxy_state_bytes`: `services`, `endpoints`, `pods`,
/// `state` or `names`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartLabel {
    pub part: &'static str,
}

/// `kind` of `kproxy_state_objects`: `services`, `endpoint_slices`,
/// `endpoints`, `pods`, `service_ports` or `names`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}
