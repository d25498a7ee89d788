//! Which upstream settings kproxy honours, in which mode, in one table.
//!
//! [`FIELDS`] lists every field of `KubeProxyConfiguration` v1alpha1 (in
//! upstream's order) and every flag of [`crate::Flags`], each with the
//! modes that act on it. The one table drives three things: the startup
//! warnings ([`warnings`]: a setting the running mode does not use says so,
//! naming the mode), the support table in `docs/configuration.md`
//! ([`markdown`], checked against the file by a test), and the schema the
//! file is checked against for unknown keys ([`children`]). kproxy-cli's
//! `support_check` tests hold each claim against what the mode's planner
//! produces.

mod markdown;
#[cfg(test)]
mod tests;

pub use markdown::markdown;

use crate::{ProxyMode, Warning};

/// How far kproxy honours a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Parsed, validated and acted on in these modes; given in another
    /// mode, it is warned about as having no effect there.
    Modes(&'static [ProxyMode]),
    /// Parsed and validated, but no mode acts on it yet.
    NotYet,
    /// Accepted and never acted on, for the given reason.
    Ignored(&'static str),
}

/// One setting: its JSON path in the file and/or its flag.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// Dotted JSON path; `[]` marks the elements of a list of objects.
    pub path: Option<&'static str>,
    /// The flag that sets it, `--name`.
    pub flag: Option<&'static str>,
    pub support: Support,
    /// What the setting does where it is not what upstream does, or what
    /// a mode makes of it (shown in the docs' table).
    pub note: &'static str,
}

impl Setting {
    /// The path, else the flag: how the setting is named in the table.
    pub fn name(&self) -> &'static str {
        self.path.or(self.flag).expect("every setting has a path or a flag")
    }

    /// Whether `mode` acts on the setting.
    pub fn applies_in(&self, mode: ProxyMode) -> bool {
        matches!(self.support, Support::Modes(modes) if modes.contains(&mode))
    }

    const fn with_note(self, note: &'static str) -> Self {
        Setting { note, ..self }
    }
}

use ProxyMode::{Ebpf, Iptables, Ipvs, Nftables, Userspace};
use Support::{Ignored, Modes, NotYet};

/// The modes in the order the docs' table shows them.
pub const MODES: [ProxyMode; 5] = [Nftables, Iptables, Ipvs, Userspace, Ebpf];

const ALL: Support = Modes(&MODES);
const KERNEL: Support = Modes(&[Nftables, Iptables, Ipvs, Ebpf]);
/// The interface-based local-traffic detectors: the ebpf mode's programs
/// tell local sources by address only.
const INTERFACE_DETECTOR: Support = Modes(&[Nftables, Iptables, Ipvs]);
const EBPF: Support = Modes(&[Ebpf]);
const NFTABLES: Support = Modes(&[Nftables]);
const IPTABLES: Support = Modes(&[Iptables]);
const IPVS: Support = Modes(&[Ipvs]);
/// The modes that read the `iptables` section (upstream: every mode but
/// ipvs and nftables).
const IPTABLES_SECTION: Support = Modes(&[Iptables, Userspace, Ebpf]);
/// The iptables masquerade bit and `masqueradeAll`: the iptables mode,
/// IPVS's companion table and the ebpf mode.
const IPTABLES_MASQUERADE: Support = Modes(&[Iptables, Ipvs, Ebpf]);
const WINDOWS: Support = Ignored("Windows only");
/// kube-rs reads and writes JSON; protobuf is not available to it.
const JSON_ONLY: Support = Ignored("kproxy talks JSON to the API server");

const fn field(path: &'static str, flag: &'static str, support: Support) -> Setting {
    Setting {
        path: if path.is_empty() { None } else { Some(path) },
        flag: if flag.is_empty() { None } else { Some(flag) },
        support,
        note: "",
    }
}

/// Every setting, in upstream's field order. A flag that does not write
/// one field in every mode (`--masquerade-all`, the sync-period flags) has
/// a row of its own.
pub(crate) const FIELDS: &[Setting] = &[
    field("apiVersion", "", ALL),
    field("kind", "", ALL),
    field("featureGates", "--feature-gates", Ignored("kproxy has no feature gates")),
    field("clientConnection.kubeconfig", "--kubeconfig", ALL),
    field("clientConnection.acceptContentTypes", "", JSON_ONLY),
    field("clientConnection.contentType", "--kube-api-content-type", JSON_ONLY),
    field("clientConnection.qps", "--kube-api-qps", ALL),
    field("clientConnection.burst", "--kube-api-burst", ALL),
    field("", "--master", ALL),
    field("logging.format", "--logging-format", ALL),
    field("logging.flushFrequency", "", Ignored("kproxy writes each log line at once; nothing waits to be flushed")),
    field("logging.verbosity", "--v", ALL),
    field("logging.vmodule[].filePattern", "", NotYet).with_note("`RUST_LOG` sets levels per module"),
    field("logging.vmodule[].verbosity", "", NotYet).with_note("`RUST_LOG` sets levels per module"),
    field("logging.options.text.splitStream", "", NotYet).with_note("every line goes to stderr"),
    field("logging.options.text.infoBufferSize", "", Ignored("kproxy does not buffer log lines")),
    field("logging.options.json.splitStream", "", NotYet).with_note("every line goes to stderr"),
    field("logging.options.json.infoBufferSize", "", Ignored("kproxy does not buffer log lines")),
    field("hostnameOverride", "--hostname-override", ALL),
    field("bindAddress", "--bind-address", ALL)
        .with_note("the node's primary IP (`nodePortAddresses: [primary]`); nothing binds to it"),
    field("healthzBindAddress", "--healthz-bind-address", ALL),
    field("metricsBindAddress", "--metrics-bind-address", ALL),
    field("bindAddressHardFail", "--bind-address-hard-fail", ALL),
    field("enableProfiling", "--profiling", NotYet).with_note("kproxy serves no `/debug/pprof`"),
    field("showHiddenMetricsForVersion", "--show-hidden-metrics-for-version", Ignored("kproxy hides no metrics")),
    field("mode", "--proxy-mode", ALL)
        .with_note("unset: nftables as root, else a dry run; the nftables settings apply"),
    field("iptables.masqueradeBit", "--iptables-masquerade-bit", IPTABLES_MASQUERADE)
        .with_note("nftables mode reads `nftables.masqueradeBit`"),
    field("iptables.masqueradeAll", "", IPTABLES_MASQUERADE).with_note("nftables mode reads `nftables.masqueradeAll`"),
    field("", "--masquerade-all", KERNEL).with_note("writes `nftables.masqueradeAll` in nftables mode"),
    field("iptables.localhostNodePorts", "--iptables-localhost-nodeports", IPTABLES),
    field("iptables.syncPeriod", "", IPTABLES_SECTION),
    field("iptables.minSyncPeriod", "", IPTABLES_SECTION),
    field("", "--iptables-sync-period", Modes(&[Nftables, Iptables, Userspace, Ebpf]))
        .with_note("writes `nftables.syncPeriod` in nftables mode"),
    field("", "--iptables-min-sync-period", Modes(&[Nftables, Iptables, Userspace, Ebpf]))
        .with_note("writes `nftables.minSyncPeriod` in nftables mode"),
    field("ipvs.syncPeriod", "--ipvs-sync-period", IPVS),
    field("ipvs.minSyncPeriod", "--ipvs-min-sync-period", IPVS),
    field("ipvs.scheduler", "--ipvs-scheduler", Modes(&[Ipvs, Userspace]))
        .with_note("userspace: the scheduler of Services without `kproxy.io/scheduler`"),
    field("ipvs.excludeCIDRs", "--ipvs-exclude-cidrs", ALL).with_note(
        "other modes: IPVS servers there survive the removal of IPVS leftovers at start and `kproxy cleanup`",
    ),
    field("ipvs.strictARP", "--ipvs-strict-arp", IPVS),
    field("ipvs.tcpTimeout", "--ipvs-tcp-timeout", IPVS),
    field("ipvs.tcpFinTimeout", "--ipvs-tcpfin-timeout", IPVS),
    field("ipvs.udpTimeout", "--ipvs-udp-timeout", IPVS),
    field("nftables.masqueradeBit", "", NFTABLES),
    field("nftables.masqueradeAll", "", NFTABLES),
    field("nftables.syncPeriod", "", NFTABLES),
    field("nftables.minSyncPeriod", "", NFTABLES),
    field("winkernel.networkName", "", WINDOWS),
    field("winkernel.sourceVip", "", WINDOWS),
    field("winkernel.enableDSR", "", WINDOWS),
    field("winkernel.rootHnsEndpointName", "", WINDOWS),
    field("winkernel.forwardHealthCheckVip", "", WINDOWS),
    field("detectLocalMode", "--detect-local-mode", KERNEL)
        .with_note("userspace mode tells pods by `clusterCIDR` alone; ebpf mode refuses the interface detectors"),
    field("detectLocal.bridgeInterface", "--pod-bridge-interface", INTERFACE_DETECTOR),
    field("detectLocal.interfaceNamePrefix", "--pod-interface-name-prefix", INTERFACE_DETECTOR),
    field("clusterCIDR", "--cluster-cidr", ALL),
    field("nodePortAddresses", "--nodeport-addresses", ALL),
    field("oomScoreAdj", "--oom-score-adj", ALL).with_note("not in a dry run"),
    field("conntrack.maxPerCore", "--conntrack-max-per-core", KERNEL),
    field("conntrack.min", "--conntrack-min", KERNEL),
    field("conntrack.tcpEstablishedTimeout", "--conntrack-tcp-timeout-established", ALL)
        .with_note("userspace: the proxy's TCP idle timeout"),
    field("conntrack.tcpCloseWaitTimeout", "--conntrack-tcp-timeout-close-wait", ALL)
        .with_note("userspace: the proxy's half-closed TCP timeout"),
    field("conntrack.tcpBeLiberal", "--conntrack-tcp-be-liberal", KERNEL)
        .with_note("nftables, iptables: also stops the rules dropping packets conntrack finds invalid, as upstream"),
    field("conntrack.udpTimeout", "--conntrack-udp-timeout", KERNEL),
    field("conntrack.udpStreamTimeout", "--conntrack-udp-timeout-stream", ALL)
        .with_note("userspace: the proxy's UDP idle timeout"),
    field(
        "configSyncPeriod",
        "--config-sync-period",
        Ignored("kproxy's API watches stream every change and never resync"),
    ),
    field("portRange", "", Ignored("unused upstream too")),
    field("windowsRunAsService", "", WINDOWS),
    field("", "--service-cidrs", Modes(&[Nftables, Ipvs, Ebpf]))
        .with_note("kproxy's own; the `ServiceCIDR` objects of the API server add to them"),
    field("", "--iptables-backend", IPTABLES).with_note("kproxy's own"),
    field("", "--ebpf-cgroup", EBPF).with_note("kproxy's own; default: the cgroup v2 root"),
    field("", "--ebpf-pin-dir", EBPF).with_note("kproxy's own; default: /sys/fs/bpf/kproxy"),
    field("", "--ebpf-devices", EBPF).with_note("kproxy's own; default: the interfaces holding the node's addresses"),
];

/// Every setting, in upstream's field order (see [`FIELDS`]).
pub fn settings() -> &'static [Setting] {
    FIELDS
}

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

/// "the ipvs and userspace modes", for a warning.
fn the_modes(modes: &[ProxyMode]) -> String {
    let names: Vec<&str> = modes.iter().map(|m| m.as_str()).collect();
    match names.as_slice() {
        [one] => format!("the {one} mode"),
        [init @ .., last] => format!("the {} and {last} modes", init.join(", ")),
        [] => "no mode".to_owned(),
    }
}

/// The warning for `name` in `mode` (`None`: not known yet, so only what
/// no mode acts on is warned about).
fn warning(name: &str, support: Support, mode: Option<ProxyMode>) -> Option<Warning> {
    let reason = match support {
        Modes(modes) => match mode {
            Some(mode) if !modes.contains(&mode) => {
                format!("no effect in {mode} mode (used by {})", the_modes(modes))
            }
            _ => return None,
        },
        NotYet => "not implemented yet; ignored".to_owned(),
        Ignored(why) => format!("{why}; ignored"),
    };
    Some(Warning { name: name.to_owned(), reason })
}

/// Warnings for the settings among `present_paths` (schema paths set in
/// the file) and `given_flags` that have no effect in `mode`, in table
/// order.
pub(crate) fn warnings(present_paths: &[String], given_flags: &[&str], mode: Option<ProxyMode>) -> Vec<Warning> {
    let mut out = Vec::new();
    for f in FIELDS {
        if let Some(path) = f.path.filter(|p| present_paths.iter().any(|q| q == p)) {
            out.extend(warning(path, f.support, mode));
        }
        if let Some(flag) = f.flag.filter(|fl| given_flags.contains(fl)) {
            out.extend(warning(flag, f.support, mode));
        }
    }
    out
}
