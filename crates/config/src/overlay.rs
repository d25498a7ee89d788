//! Lays the given flags over the defaulted file.
//!
//! Unlike upstream, which ignores most flags once `--config` is given, a
//! flag given here always wins over the file. Each flag writes the wire
//! field upstream maps it to, chosen by the mode where upstream does
//! (`--iptables-sync-period` drives every mode but ipvs), and records that
//! field's origin so later errors name the flag instead of the path.

use std::collections::BTreeMap;

use crate::defaults::{HEALTHZ_PORT, METRICS_PORT};
use crate::duration::{self, DURATION_ALLOWED};
use crate::wire::KubeProxyConfiguration;
use crate::{ConfigError, Flags, GoDuration, ProxyMode, addr};

/// Which JSON paths a flag set.
#[derive(Debug, Default)]
pub(crate) struct Origins(BTreeMap<&'static str, &'static str>);

impl Origins {
    /// How to name the field at `path` in an error: its flag if a flag set
    /// it, else the path. List indexes are dropped for flags, which have none.
    pub(crate) fn name(&self, path: &str) -> String {
        let field = path.split('[').next().unwrap_or(path);
        if field.starts_with("--") {
            return field.to_owned();
        }
        match self.0.get(field) {
            Some(flag) => (*flag).to_owned(),
            None => path.to_owned(),
        }
    }
}

/// What the flags changed, and what they carry that the file has no place for.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    pub origins: Origins,
    /// `--master`.
    pub master: Option<String>,
    /// `--service-cidrs`, unparsed.
    pub service_cidrs: Vec<String>,
    /// `--iptables-backend`, unparsed.
    pub iptables_backend: Option<String>,
    /// `--ebpf-cgroup`, `--ebpf-pin-dir`, `--ebpf-devices`.
    pub ebpf: crate::config::Ebpf,
    /// `mode` was unset and reads as the caller's default mode.
    pub default_mode: bool,
}

impl Overlay {
    fn set(&mut self, path: &'static str, flag: &'static str) {
        self.origins.0.insert(path, flag);
    }
}

/// Address flags set to "" count as not given: pflag's `ip`/`ipport` value
/// types turn "" into nil, which leaves the default.
fn non_empty(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|s| !s.is_empty())
}

/// pflag's stringSlice reads `--flag=""` as an empty list.
fn list(v: &[String]) -> Vec<String> {
    if v.iter().all(String::is_empty) { Vec::new() } else { v.to_vec() }
}

fn parse_duration(flag: &str, v: &str) -> Result<GoDuration, ConfigError> {
    duration::parse(v)
        .map_err(|e| ConfigError::invalid(flag, format!("invalid duration {v:?}: {}", e.problem), DURATION_ALLOWED))
}

fn parse_int(flag: &str, v: &str, allowed: &str) -> Result<i32, ConfigError> {
    v.parse().map_err(|_| ConfigError::invalid(flag, format!("{v:?} is not an integer"), allowed))
}

/// `--feature-gates=A=true,B=false`, trimmed like upstream's mapStringBool.
fn parse_gates(v: &str) -> Result<BTreeMap<String, bool>, ConfigError> {
    let bad = |piece: &str| {
        ConfigError::invalid(
            "--feature-gates",
            format!("{piece:?} is not Name=bool"),
            "a comma-separated list such as Foo=true,Bar=false",
        )
    };
    let mut gates = BTreeMap::new();
    for piece in v.split(',').filter(|p| !p.trim().is_empty()) {
        let (name, value) = piece.split_once('=').ok_or_else(|| bad(piece))?;
        let value = match value.trim() {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => return Err(bad(piece)),
        };
        gates.insert(name.trim().to_owned(), value);
    }
    Ok(gates)
}

/// Applies `flags` to the defaulted `c`. `has_file` tells whether `c` came
/// from a file; an unset mode becomes `default_mode`, whose section the
/// flags then write.
pub(crate) fn apply(
    flags: &Flags,
    c: &mut KubeProxyConfiguration,
    has_file: bool,
    default_mode: Option<ProxyMode>,
) -> Result<Overlay, ConfigError> {
    let mut o = Overlay::default();
    if let Some(mode) = &flags.proxy_mode {
        c.mode.clone_from(mode);
        o.set("mode", "--proxy-mode");
    }
    if let Some(mode) = default_mode.filter(|_| c.mode.is_empty()) {
        mode.as_str().clone_into(&mut c.mode);
        o.default_mode = true;
    }
    let (ipvs, nftables) = (c.mode == "ipvs", c.mode == "nftables");
    if !has_file && ipvs {
        // Without a file upstream converts its flag defaults with mode "",
        // so ipvs mode inherits the iptables pair: minSyncPeriod is 1s there,
        // not the 0s an ipvs config file defaults to.
        c.ipvs.sync_period = c.iptables.sync_period;
        c.ipvs.min_sync_period = c.iptables.min_sync_period;
    }
    apply_node(flags, c, &mut o);
    apply_sync(flags, c, &mut o, ipvs, nftables)?;

    if let Some(v) = flags.masquerade_all {
        if nftables {
            c.nftables.masquerade_all = v;
            o.set("nftables.masqueradeAll", "--masquerade-all");
        } else {
            c.iptables.masquerade_all = v;
            o.set("iptables.masqueradeAll", "--masquerade-all");
        }
    }
    if let Some(v) = &flags.iptables_masquerade_bit {
        c.iptables.masquerade_bit = Some(parse_int("--iptables-masquerade-bit", v, "0-31")?);
        o.set("iptables.masqueradeBit", "--iptables-masquerade-bit");
    }
    if let Some(v) = flags.iptables_localhost_nodeports {
        c.iptables.localhost_node_ports = Some(v);
    }
    apply_ipvs(flags, c, &mut o)?;
    apply_conntrack(flags, c, &mut o)?;
    apply_client(flags, c, &mut o)?;
    if let Some(v) = &flags.config_sync_period {
        c.config_sync_period = parse_duration("--config-sync-period", v)?;
        o.set("configSyncPeriod", "--config-sync-period");
    }

    if let Some(v) = &flags.oom_score_adj {
        c.oom_score_adj = Some(parse_int("--oom-score-adj", v, "-1000 to 1000")?);
        o.set("oomScoreAdj", "--oom-score-adj");
    }
    if let Some(v) = flags.profiling {
        c.enable_profiling = v;
    }
    if let Some(v) = &flags.feature_gates {
        c.feature_gates.extend(parse_gates(v)?);
    }
    if let Some(v) = &flags.show_hidden_metrics_for_version {
        c.show_hidden_metrics_for_version.clone_from(v);
    }
    if let Some(v) = &flags.verbosity {
        c.logging.verbosity =
            v.parse().map_err(|_| ConfigError::invalid("--v", format!("{v:?} is not a verbosity"), "0 or more"))?;
    }
    if let Some(v) = &flags.logging_format {
        c.logging.format.clone_from(v);
        o.set("logging.format", "--logging-format");
    }
    if let Some(v) = &flags.service_cidrs {
        o.service_cidrs = list(v);
    }
    o.iptables_backend.clone_from(&flags.iptables_backend);
    o.ebpf.cgroup.clone_from(&flags.ebpf_cgroup);
    if let Some(dir) = &flags.ebpf_pin_dir {
        o.ebpf.pin_dir.clone_from(dir);
    }
    if let Some(devices) = &flags.ebpf_devices {
        o.ebpf.devices = devices.iter().map(|d| d.trim().to_owned()).filter(|d| !d.is_empty()).collect();
    }
    Ok(o)
}

/// Node identity, addresses and local-traffic detection.
fn apply_node(flags: &Flags, c: &mut KubeProxyConfiguration, o: &mut Overlay) {
    if let Some(v) = non_empty(&flags.hostname_override) {
        v.clone_into(&mut c.hostname_override);
        o.set("hostnameOverride", "--hostname-override");
    }
    if let Some(v) = non_empty(&flags.bind_address) {
        v.clone_into(&mut c.bind_address);
        o.set("bindAddress", "--bind-address");
    }
    // Like upstream's deprecated --healthz-port/--metrics-port handling: a
    // bare IP gets the default port.
    if let Some(v) = non_empty(&flags.healthz_bind_address) {
        c.healthz_bind_address = addr::append_port_if_needed(v, HEALTHZ_PORT);
        o.set("healthzBindAddress", "--healthz-bind-address");
    }
    if let Some(v) = non_empty(&flags.metrics_bind_address) {
        c.metrics_bind_address = addr::append_port_if_needed(v, METRICS_PORT);
        o.set("metricsBindAddress", "--metrics-bind-address");
    }
    if let Some(v) = flags.bind_address_hard_fail {
        c.bind_address_hard_fail = v;
    }
    if let Some(v) = &flags.cluster_cidr {
        c.cluster_cidr.clone_from(v);
        o.set("clusterCIDR", "--cluster-cidr");
    }
    if let Some(v) = &flags.nodeport_addresses {
        c.node_port_addresses = list(v);
        o.set("nodePortAddresses", "--nodeport-addresses");
    }
    if let Some(v) = &flags.detect_local_mode {
        c.detect_local_mode.clone_from(v);
        o.set("detectLocalMode", "--detect-local-mode");
    }
    if let Some(v) = &flags.pod_bridge_interface {
        c.detect_local.bridge_interface.clone_from(v);
        o.set("detectLocal.bridgeInterface", "--pod-bridge-interface");
    }
    if let Some(v) = &flags.pod_interface_name_prefix {
        c.detect_local.interface_name_prefix.clone_from(v);
        o.set("detectLocal.interfaceNamePrefix", "--pod-interface-name-prefix");
    }
}

/// The sync-period flags: --iptables-* drive every mode but ipvs (kproxy
/// extends upstream's iptables/nftables to userspace), --ipvs-* drive ipvs.
fn apply_sync(
    flags: &Flags,
    c: &mut KubeProxyConfiguration,
    o: &mut Overlay,
    ipvs: bool,
    nftables: bool,
) -> Result<(), ConfigError> {
    let pairs = [
        ("--iptables-sync-period", &flags.iptables_sync_period, false, true),
        ("--iptables-min-sync-period", &flags.iptables_min_sync_period, false, false),
        ("--ipvs-sync-period", &flags.ipvs_sync_period, true, true),
        ("--ipvs-min-sync-period", &flags.ipvs_min_sync_period, true, false),
    ];
    for (flag, value, for_ipvs, is_sync) in pairs {
        let Some(v) = value else { continue };
        let d = parse_duration(flag, v)?;
        if for_ipvs != ipvs {
            // Checked, and warned about as having no effect in this mode.
            continue;
        }
        let (target, path) = match (ipvs, nftables, is_sync) {
            (true, _, true) => (&mut c.ipvs.sync_period, "ipvs.syncPeriod"),
            (true, _, false) => (&mut c.ipvs.min_sync_period, "ipvs.minSyncPeriod"),
            (false, true, true) => (&mut c.nftables.sync_period, "nftables.syncPeriod"),
            (false, true, false) => (&mut c.nftables.min_sync_period, "nftables.minSyncPeriod"),
            (false, false, true) => (&mut c.iptables.sync_period, "iptables.syncPeriod"),
            (false, false, false) => (&mut c.iptables.min_sync_period, "iptables.minSyncPeriod"),
        };
        *target = d;
        o.set(path, flag);
    }
    Ok(())
}

fn apply_ipvs(flags: &Flags, c: &mut KubeProxyConfiguration, o: &mut Overlay) -> Result<(), ConfigError> {
    if let Some(v) = &flags.ipvs_scheduler {
        c.ipvs.scheduler.clone_from(v);
    }
    if let Some(v) = &flags.ipvs_exclude_cidrs {
        c.ipvs.exclude_cidrs = list(v);
        o.set("ipvs.excludeCIDRs", "--ipvs-exclude-cidrs");
    }
    if let Some(v) = flags.ipvs_strict_arp {
        c.ipvs.strict_arp = v;
    }
    let timeouts = [
        ("--ipvs-tcp-timeout", &flags.ipvs_tcp_timeout, "ipvs.tcpTimeout", &mut c.ipvs.tcp_timeout),
        ("--ipvs-tcpfin-timeout", &flags.ipvs_tcpfin_timeout, "ipvs.tcpFinTimeout", &mut c.ipvs.tcp_fin_timeout),
        ("--ipvs-udp-timeout", &flags.ipvs_udp_timeout, "ipvs.udpTimeout", &mut c.ipvs.udp_timeout),
    ];
    for (flag, value, path, target) in timeouts {
        if let Some(v) = value {
            *target = parse_duration(flag, v)?;
            o.set(path, flag);
        }
    }
    Ok(())
}

fn apply_conntrack(flags: &Flags, c: &mut KubeProxyConfiguration, o: &mut Overlay) -> Result<(), ConfigError> {
    let ct = &mut c.conntrack;
    if let Some(v) = &flags.conntrack_max_per_core {
        ct.max_per_core = Some(parse_int("--conntrack-max-per-core", v, "0 or more")?);
        o.set("conntrack.maxPerCore", "--conntrack-max-per-core");
    }
    if let Some(v) = &flags.conntrack_min {
        ct.min = Some(parse_int("--conntrack-min", v, "0 or more")?);
        o.set("conntrack.min", "--conntrack-min");
    }
    if let Some(v) = &flags.conntrack_tcp_timeout_established {
        ct.tcp_established_timeout = Some(parse_duration("--conntrack-tcp-timeout-established", v)?);
        o.set("conntrack.tcpEstablishedTimeout", "--conntrack-tcp-timeout-established");
    }
    if let Some(v) = &flags.conntrack_tcp_timeout_close_wait {
        ct.tcp_close_wait_timeout = Some(parse_duration("--conntrack-tcp-timeout-close-wait", v)?);
        o.set("conntrack.tcpCloseWaitTimeout", "--conntrack-tcp-timeout-close-wait");
    }
    if let Some(v) = flags.conntrack_tcp_be_liberal {
        ct.tcp_be_liberal = v;
    }
    if let Some(v) = &flags.conntrack_udp_timeout {
        ct.udp_timeout = parse_duration("--conntrack-udp-timeout", v)?;
        o.set("conntrack.udpTimeout", "--conntrack-udp-timeout");
    }
    if let Some(v) = &flags.conntrack_udp_timeout_stream {
        ct.udp_stream_timeout = parse_duration("--conntrack-udp-timeout-stream", v)?;
        o.set("conntrack.udpStreamTimeout", "--conntrack-udp-timeout-stream");
    }
    Ok(())
}

fn apply_client(flags: &Flags, c: &mut KubeProxyConfiguration, o: &mut Overlay) -> Result<(), ConfigError> {
    let cc = &mut c.client_connection;
    if let Some(v) = &flags.kubeconfig {
        cc.kubeconfig.clone_from(v);
    }
    if let Some(v) = &flags.kube_api_qps {
        cc.qps = v.parse().map_err(|_| {
            ConfigError::invalid("--kube-api-qps", format!("{v:?} is not a number"), "a number such as 5")
        })?;
    }
    if let Some(v) = &flags.kube_api_burst {
        cc.burst = parse_int("--kube-api-burst", v, "0 or more")?;
        o.set("clientConnection.burst", "--kube-api-burst");
    }
    if let Some(v) = &flags.kube_api_content_type {
        cc.content_type.clone_from(v);
    }
    o.master = non_empty(&flags.master).map(str::to_owned);
    Ok(())
}
