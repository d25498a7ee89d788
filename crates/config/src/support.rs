//! Which upstream settings kproxy honours, in one table.
//!
//! [`FIELDS`] lists every field of `KubeProxyConfiguration` v1alpha1 (in
//! upstream's order) and every flag of [`crate::Flags`], each with its
//! support status. The table doubles as the schema the file is checked
//! against for unknown keys, so the allowed names in an error come from
//! here. Implementing a setting means flipping its entry to `Implemented`.

use crate::Warning;

/// How far kproxy honours a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Support {
    /// Parsed, validated and acted on.
    Implemented,
    /// Parsed and validated, but nothing acts on it yet.
    NotYet,
    /// Accepted and never acted on, for the given reason.
    Ignored(&'static str),
}

/// One setting: its JSON path in the file and/or its flag.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Field {
    /// Dotted JSON path; `[]` marks the elements of a list of objects.
    pub path: Option<&'static str>,
    /// The flag that sets it, `--name`.
    pub flag: Option<&'static str>,
    pub support: Support,
}

use Support::{Ignored, Implemented, NotYet};

const fn field(path: &'static str, flag: &'static str, support: Support) -> Field {
    Field {
        path: if path.is_empty() { None } else { Some(path) },
        flag: if flag.is_empty() { None } else { Some(flag) },
        support,
    }
}

const WINDOWS: Support = Ignored("Windows only");
/// kube-rs reads and writes JSON; protobuf is not available to it.
const JSON_ONLY: Support = Ignored("kproxy talks JSON to the API server");

/// Every setting, in upstream's field order.
pub(crate) const FIELDS: &[Field] = &[
    field("apiVersion", "", Implemented),
    field("kind", "", Implemented),
    field("featureGates", "--feature-gates", Ignored("kproxy has no feature gates")),
    field("clientConnection.kubeconfig", "--kubeconfig", Implemented),
    field("clientConnection.acceptContentTypes", "", JSON_ONLY),
    field("clientConnection.contentType", "--kube-api-content-type", JSON_ONLY),
    field("clientConnection.qps", "--kube-api-qps", Implemented),
    field("clientConnection.burst", "--kube-api-burst", Implemented),
    field("", "--master", Implemented),
    field("logging.format", "", Implemented),
    field("logging.flushFrequency", "", NotYet),
    field("logging.verbosity", "--v", Implemented),
    field("logging.vmodule[].filePattern", "", NotYet),
    field("logging.vmodule[].verbosity", "", NotYet),
    field("logging.options.text.splitStream", "", NotYet),
    field("logging.options.text.infoBufferSize", "", NotYet),
    field("logging.options.json.splitStream", "", NotYet),
    field("logging.options.json.infoBufferSize", "", NotYet),
    field("hostnameOverride", "--hostname-override", Implemented),
    field("bindAddress", "--bind-address", Implemented),
    field("healthzBindAddress", "--healthz-bind-address", Implemented),
    field("metricsBindAddress", "--metrics-bind-address", Implemented),
    field("bindAddressHardFail", "--bind-address-hard-fail", Implemented),
    field("enableProfiling", "--profiling", NotYet),
    field("showHiddenMetricsForVersion", "--show-hidden-metrics-for-version", NotYet),
    field("mode", "--proxy-mode", Implemented),
    field("iptables.masqueradeBit", "--iptables-masquerade-bit", NotYet),
    field("iptables.masqueradeAll", "--masquerade-all", Implemented),
    field("iptables.localhostNodePorts", "--iptables-localhost-nodeports", Implemented),
    field("iptables.syncPeriod", "--iptables-sync-period", Implemented),
    field("iptables.minSyncPeriod", "--iptables-min-sync-period", Implemented),
    field("ipvs.syncPeriod", "--ipvs-sync-period", Implemented),
    field("ipvs.minSyncPeriod", "--ipvs-min-sync-period", Implemented),
    field("ipvs.scheduler", "--ipvs-scheduler", NotYet),
    field("ipvs.excludeCIDRs", "--ipvs-exclude-cidrs", NotYet),
    field("ipvs.strictARP", "--ipvs-strict-arp", NotYet),
    field("ipvs.tcpTimeout", "--ipvs-tcp-timeout", NotYet),
    field("ipvs.tcpFinTimeout", "--ipvs-tcpfin-timeout", NotYet),
    field("ipvs.udpTimeout", "--ipvs-udp-timeout", NotYet),
    field("nftables.masqueradeBit", "", Implemented),
    field("nftables.masqueradeAll", "", Implemented),
    field("nftables.syncPeriod", "", Implemented),
    field("nftables.minSyncPeriod", "", Implemented),
    field("winkernel.networkName", "", WINDOWS),
    field("winkernel.sourceVip", "", WINDOWS),
    field("winkernel.enableDSR", "", WINDOWS),
    field("winkernel.rootHnsEndpointName", "", WINDOWS),
    field("winkernel.forwardHealthCheckVip", "", WINDOWS),
    field("detectLocalMode", "--detect-local-mode", Implemented),
    field("detectLocal.bridgeInterface", "--pod-bridge-interface", Implemented),
    field("detectLocal.interfaceNamePrefix", "--pod-interface-name-prefix", Implemented),
    field("clusterCIDR", "--cluster-cidr", Implemented),
    field("nodePortAddresses", "--nodeport-addresses", Implemented),
    field("oomScoreAdj", "--oom-score-adj", Implemented),
    field("conntrack.maxPerCore", "--conntrack-max-per-core", Implemented),
    field("conntrack.min", "--conntrack-min", Implemented),
    field("conntrack.tcpEstablishedTimeout", "--conntrack-tcp-timeout-established", Implemented),
    field("conntrack.tcpCloseWaitTimeout", "--conntrack-tcp-timeout-close-wait", Implemented),
    field("conntrack.tcpBeLiberal", "--conntrack-tcp-be-liberal", Implemented),
    field("conntrack.udpTimeout", "--conntrack-udp-timeout", Implemented),
    field("conntrack.udpStreamTimeout", "--conntrack-udp-timeout-stream", Implemented),
    field("configSyncPeriod", "--config-sync-period", NotYet),
    field("portRange", "", Ignored("unused upstream too")),
    field("windowsRunAsService", "", WINDOWS),
    field("", "--service-cidrs", Implemented),
    field("", "--iptables-backend", Implemented),
];

/// How a key at some place in the file is shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A value checked by its type alone (scalars, lists of scalars, maps
    /// with free keys like `featureGates`).
    Leaf,
    /// A mapping with the fixed keys listed under it.
    Object,
    /// A list of such mappings (`logging.vmodule`).
    ObjectList,
}

/// The keys allowed in the mapping at `schema` ("" for the root, `a.b[]` for
/// the elements of a list), in table order, with their shapes.
pub(crate) fn children(schema: &str) -> Vec<(&'static str, Shape)> {
    let mut out: Vec<(&'static str, Shape)> = Vec::new();
    for path in FIELDS.iter().filter_map(|f| f.path) {
        let rest = if schema.is_empty() {
            path
        } else {
            match path.strip_prefix(schema).and_then(|r| r.strip_prefix('.')) {
                Some(rest) => rest,
                None => continue,
            }
        };
        let segment = rest.split('.').next().unwrap_or(rest);
        let (key, shape) = match segment.strip_suffix("[]") {
            Some(key) => (key, Shape::ObjectList),
            None if segment.len() < rest.len() => (segment, Shape::Object),
            None => (segment, Shape::Leaf),
        };
        if !out.iter().any(|(k, _)| *k == key) {
            out.push((key, shape));
        }
    }
    out
}

fn warning(name: &str, support: Support) -> Option<Warning> {
    let reason = match support {
        Implemented => return None,
        NotYet => "not implemented yet; ignored".to_owned(),
        Ignored(why) => format!("{why}; ignored"),
    };
    Some(Warning { name: name.to_owned(), reason })
}

/// Warnings for the not-implemented settings among `present_paths` (schema
/// paths set in the file) and `given_flags`, in table order.
pub(crate) fn warnings(present_paths: &[String], given_flags: &[&str]) -> Vec<Warning> {
    let mut out = Vec::new();
    for f in FIELDS {
        if let Some(path) = f.path.filter(|p| present_paths.iter().any(|q| q == p)) {
            out.extend(warning(path, f.support));
        }
        if let Some(flag) = f.flag.filter(|fl| given_flags.contains(fl)) {
            out.extend(warning(flag, f.support));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_follow_table_order_and_shapes() {
        let iptables: Vec<_> = children("iptables").into_iter().map(|(k, _)| k).collect();
        assert_eq!(iptables, ["masqueradeBit", "masqueradeAll", "localhostNodePorts", "syncPeriod", "minSyncPeriod"]);
        let logging = children("logging");
        assert!(logging.contains(&("vmodule", Shape::ObjectList)));
        assert!(logging.contains(&("options", Shape::Object)));
        assert!(logging.contains(&("format", Shape::Leaf)));
        let vmodule: Vec<_> = children("logging.vmodule[]").into_iter().map(|(k, _)| k).collect();
        assert_eq!(vmodule, ["filePattern", "verbosity"]);
        assert_eq!(children("mode"), []);
    }

    #[test]
    fn implemented_settings_do_not_warn() {
        let present = ["mode".to_owned(), "configSyncPeriod".to_owned(), "winkernel.sourceVip".to_owned()];
        let texts: Vec<String> =
            warnings(&present, &["--proxy-mode", "--feature-gates"]).iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "--feature-gates: kproxy has no feature gates; ignored",
                "winkernel.sourceVip: Windows only; ignored",
                "configSyncPeriod: not implemented yet; ignored",
            ]
        );
    }

    #[test]
    fn every_path_and_flag_is_listed_once() {
        let mut names: Vec<&str> = FIELDS.iter().flat_map(|f| f.path.into_iter().chain(f.flag)).collect();
        let total = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), total);
    }
}
