//! Reading configuration files: typical content, defaults, and every kind
//! of rejected file with its exact message.

use std::time::Duration;

use kproxy_config::{
    Config, ConfigError, DetectLocalMode, Flags, Loaded, LogFormat, NodePortAddresses, ProxyMode, load,
};

const HEADER: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

fn load_file(text: &str) -> Result<Loaded, ConfigError> {
    load(Some(text), &Flags::default())
}

/// Loads HEADER + `body` and returns the config.
fn config(body: &str) -> Config {
    match load_file(&format!("{HEADER}{body}")) {
        Ok(loaded) => loaded.config,
        Err(err) => panic!("{body:?} should load: {err}"),
    }
}

/// Loads HEADER + `body` and returns the error text.
fn error(body: &str) -> String {
    match load_file(&format!("{HEADER}{body}")) {
        Ok(loaded) => panic!("{body:?} should fail, got {:?}", loaded.config),
        Err(err) => err.to_string(),
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn net(s: &str) -> ipnet::IpNet {
    s.parse().expect("test CIDR")
}

#[test]
fn kubeadm_configmap_loads_with_upstream_defaults() {
    let loaded = load_file(include_str!("data/kubeadm.yaml")).expect("kubeadm's file loads");
    let c = &loaded.config;
    assert_eq!(c.mode, None);
    assert_eq!(c.sync_period, secs(30));
    assert_eq!(c.min_sync_period, secs(1));
    assert_eq!(c.cluster_cidrs, [net("10.244.0.0/16")]);
    assert_eq!(c.detect_local_mode, DetectLocalMode::ClusterCIDR);
    assert_eq!(c.node_port_addresses, NodePortAddresses::Unset);
    assert_eq!(c.healthz_bind_address, Some("0.0.0.0:10256".parse().expect("addr")));
    assert_eq!(c.metrics_bind_address, Some("127.0.0.1:10249".parse().expect("addr")));
    assert_eq!(c.masquerade_bit, 14);
    assert!(c.localhost_node_ports);
    assert_eq!(c.conntrack.max_per_core, 32768);
    assert_eq!(c.conntrack.tcp_established_timeout, secs(24 * 3600));
    assert_eq!(c.config_sync_period, secs(15 * 60));
    assert_eq!(c.client_connection.kubeconfig.as_deref(), Some("/var/lib/kube-proxy/kubeconfig.conf"));
    assert_eq!(c.client_connection.qps, 5.0);
    assert_eq!(c.client_connection.burst, 10);
    assert_eq!(c.oom_score_adj, -999);
    // Its zero values set nothing, and the kubeconfig is used: no warnings.
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings, Vec::<String>::new());
}

#[test]
fn tuned_file_resolves_every_section() {
    let loaded = load_file(include_str!("data/tuned.yaml")).expect("tuned file loads");
    let c = &loaded.config;
    assert_eq!(c.mode, Some(ProxyMode::Nftables));
    assert_eq!(c.hostname_override.as_deref(), Some("node-a.example"));
    assert_eq!(c.bind_address, "fd00::10".parse::<std::net::IpAddr>().expect("ip"));
    assert_eq!(c.healthz_bind_address, Some("[fd00::10]:12000".parse().expect("addr")));
    // A bare IP gets the default port appended.
    assert_eq!(c.metrics_bind_address, Some("[::]:10249".parse().expect("addr")));
    assert!(c.bind_address_hard_fail);
    // nftables mode takes the nftables section and ignores the others.
    assert_eq!(c.sync_period, secs(90 * 60));
    assert_eq!(c.min_sync_period, Duration::from_millis(250));
    assert_eq!(c.masquerade_bit, 9);
    assert!(c.masquerade_all);
    assert!(!c.localhost_node_ports);
    assert_eq!(c.detect_local_mode, DetectLocalMode::InterfaceNamePrefix);
    assert_eq!(c.interface_name_prefix, "veth");
    assert_eq!(c.cluster_cidrs, [net("10.244.0.0/16"), net("fd00:244::/56")]);
    assert_eq!(c.node_port_addresses, NodePortAddresses::Cidrs(vec![net("192.168.1.0/24"), net("fd00::/64")]));
    assert_eq!(c.ipvs.scheduler, "lc");
    assert_eq!(c.ipvs.exclude_cidrs, [net("10.99.0.0/16")]);
    assert!(c.ipvs.strict_arp);
    assert_eq!(c.ipvs.tcp_timeout, secs(900));
    assert_eq!(c.ipvs.tcp_fin_timeout, secs(120));
    assert_eq!(c.ipvs.udp_timeout, Duration::from_millis(300));
    assert_eq!(c.conntrack.max_per_core, 0);
    assert_eq!(c.conntrack.min, 65536);
    assert_eq!(c.conntrack.tcp_established_timeout, secs(7200));
    assert_eq!(c.conntrack.tcp_close_wait_timeout, secs(1800));
    assert!(c.conntrack.tcp_be_liberal);
    assert_eq!(c.conntrack.udp_timeout, secs(30));
    assert_eq!(c.conntrack.udp_stream_timeout, secs(120));
    assert_eq!(c.config_sync_period, secs(300));
    assert_eq!(c.client_connection.qps, 20.0);
    assert_eq!(c.client_connection.burst, 40);
    assert_eq!(c.client_connection.content_type, "application/json");
    assert_eq!(c.oom_score_adj, -500);
    assert_eq!(c.feature_gates.get("SomeGate"), Some(&true));
    assert_eq!(c.logging.verbosity, 4);
    assert_eq!(c.logging.format, LogFormat::Json);
    assert!(c.enable_profiling);
    assert_eq!(c.show_hidden_metrics_for_version.as_deref(), Some("1.32"));
}

#[test]
fn json_is_read_like_yaml() {
    let text = r#"{"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
                  "mode": "ipvs", "ipvs": {"syncPeriod": "45s"}}"#;
    let c = load_file(text).expect("JSON loads").config;
    assert_eq!(c.mode, Some(ProxyMode::Ipvs));
    assert_eq!(c.sync_period, secs(45));
}

#[test]
fn empty_file_defaults_depend_on_the_mode() {
    let cases = [
        ("", None, secs(1)),
        ("mode: iptables", Some(ProxyMode::Iptables), secs(1)),
        ("mode: userspace", Some(ProxyMode::Userspace), secs(1)),
        ("mode: nftables", Some(ProxyMode::Nftables), secs(1)),
        // ipvs.minSyncPeriod has no default upstream.
        ("mode: ipvs", Some(ProxyMode::Ipvs), Duration::ZERO),
    ];
    for (body, mode, min_sync) in cases {
        let c = config(body);
        assert_eq!(c.mode, mode, "{body}");
        assert_eq!(c.sync_period, secs(30), "{body}");
        assert_eq!(c.min_sync_period, min_sync, "{body}");
        assert_eq!(c.masquerade_bit, 14, "{body}");
        assert_eq!(c.node_port_addresses, NodePortAddresses::Unset, "{body}");
    }
    assert_eq!(config(""), Config::default());
}

#[test]
fn sync_periods_come_from_the_active_mode_only() {
    let body = "iptables: {syncPeriod: 10s, minSyncPeriod: 2s}\n\
                ipvs: {syncPeriod: 20s, minSyncPeriod: 3s}\n\
                nftables: {syncPeriod: 40s, minSyncPeriod: 4s}\n";
    for (mode, sync, min) in [("", 10, 2), ("userspace", 10, 2), ("ipvs", 20, 3), ("nftables", 40, 4)] {
        let c = config(&format!("{body}mode: \"{mode}\""));
        assert_eq!((c.sync_period, c.min_sync_period), (secs(sync), secs(min)), "mode {mode:?}");
    }
    // An inactive section is not validated: upstream drops it.
    assert_eq!(config("mode: nftables\niptables: {syncPeriod: -1s}").sync_period, secs(30));
}

#[test]
fn masquerade_settings_follow_the_mode() {
    let body = "iptables: {masqueradeBit: 3, masqueradeAll: true}\nnftables: {masqueradeBit: 5}\n";
    let ipvs = config(&format!("{body}mode: ipvs"));
    assert_eq!((ipvs.masquerade_bit, ipvs.masquerade_all), (3, true));
    let nft = config(&format!("{body}mode: nftables"));
    assert_eq!((nft.masquerade_bit, nft.masquerade_all), (5, false));
}

#[test]
fn ipv6_bind_address_switches_server_defaults() {
    let c = config("bindAddress: \"::\"");
    assert_eq!(c.healthz_bind_address, Some("[::]:10256".parse().expect("addr")));
    assert_eq!(c.metrics_bind_address, Some("[::1]:10249".parse().expect("addr")));
    // Sloppy IPv4 with leading zeros still counts as IPv4.
    let c = config("bindAddress: 010.0.0.1");
    assert_eq!(c.bind_address, "10.0.0.1".parse::<std::net::IpAddr>().expect("ip"));
    assert_eq!(c.metrics_bind_address, Some("127.0.0.1:10249".parse().expect("addr")));
}

#[test]
fn null_means_unset_except_for_plain_durations() {
    let c = config("hostnameOverride: null\nnodePortAddresses: null\nconntrack: {min: null}\nlogging: null");
    assert_eq!(c.hostname_override, None);
    assert_eq!(c.conntrack.min, 131072);
    assert_eq!(
        error("iptables:\n  syncPeriod: null"),
        "iptables.syncPeriod: invalid type: null, expected a Go duration such as \"30s\", \"1m30s\" or \"250ms\", \
         in units of ns, us, ms, s, m, h"
    );
}

#[test]
fn node_port_addresses_take_primary_alone() {
    assert_eq!(config("nodePortAddresses: [primary]").node_port_addresses, NodePortAddresses::Primary);
    assert_eq!(config("nodePortAddresses: []").node_port_addresses, NodePortAddresses::Unset);
}

#[test]
fn unknown_fields_are_named_with_their_allowed_siblings() {
    assert_eq!(
        error("iptables:\n  masqueradeBitt: 1"),
        "iptables.masqueradeBitt: unknown field (allowed: masqueradeBit, masqueradeAll, localhostNodePorts, \
         syncPeriod, minSyncPeriod)"
    );
    assert_eq!(
        error("syncPeriod: 30s"),
        "syncPeriod: unknown field (allowed: apiVersion, kind, featureGates, clientConnection, logging, \
         hostnameOverride, bindAddress, healthzBindAddress, metricsBindAddress, bindAddressHardFail, \
         enableProfiling, showHiddenMetricsForVersion, mode, iptables, ipvs, nftables, winkernel, \
         detectLocalMode, detectLocal, clusterCIDR, nodePortAddresses, oomScoreAdj, conntrack, \
         configSyncPeriod, portRange, windowsRunAsService)"
    );
    assert_eq!(
        error("logging:\n  options:\n    text:\n      splitstream: true"),
        "logging.options.text.splitstream: unknown field (allowed: splitStream, infoBufferSize)"
    );
    // Keys are case-sensitive, as upstream's strict decoder.
    assert_eq!(
        error("ipvs:\n  strictArp: true"),
        "ipvs.strictArp: unknown field (allowed: syncPeriod, minSyncPeriod, scheduler, excludeCIDRs, strictARP, \
         tcpTimeout, tcpFinTimeout, udpTimeout)"
    );
}

#[test]
fn invalid_values_name_field_value_and_allowed() {
    let cases = [
        (
            "mode: foo",
            "mode: unsupported value \"foo\" (allowed: iptables, ipvs, nftables, userspace, ebpf, or empty for the best \
             available)",
        ),
        (
            "mode: kernelspace",
            "mode: unsupported value \"kernelspace\": Windows only (allowed: iptables, ipvs, nftables, userspace, \
             ebpf, or empty for the best available)",
        ),
        ("iptables:\n  masqueradeBit: 40", "iptables.masqueradeBit: 40 is out of range (allowed: 0-31)"),
        // Upstream checks the iptables bit in every mode.
        (
            "mode: nftables\niptables:\n  masqueradeBit: -1",
            "iptables.masqueradeBit: -1 is out of range (allowed: 0-31)",
        ),
        (
            "mode: nftables\nnftables:\n  masqueradeBit: 32",
            "nftables.masqueradeBit: 32 is out of range (allowed: 0-31)",
        ),
        (
            "detectLocalMode: PodCIDR",
            "detectLocalMode: unsupported value \"PodCIDR\" (allowed: ClusterCIDR, NodeCIDR, BridgeInterface, \
             InterfaceNamePrefix, or empty for ClusterCIDR)",
        ),
        (
            "detectLocalMode: BridgeInterface",
            "detectLocal.bridgeInterface: must not be empty when detectLocalMode is BridgeInterface (allowed: the \
             name of the pods' bridge, such as cbr0)",
        ),
        (
            "nodePortAddresses: [10.0.0.0/8, primary]",
            "nodePortAddresses[1]: \"primary\" cannot be combined with CIDRs (allowed: CIDRs such as 10.0.0.0/8 or \
             fd00::/64, or the single keyword \"primary\")",
        ),
        (
            "nodePortAddresses: [10.0.0.0/8, 10.0.0.0/33]",
            "nodePortAddresses[1]: \"10.0.0.0/33\" is not a valid CIDR (allowed: CIDRs such as 10.0.0.0/8 or \
             fd00::/64, or the single keyword \"primary\")",
        ),
        (
            "clusterCIDR: 10.0.0.0/8, fd00::/48",
            "clusterCIDR: \" fd00::/48\" is not a valid CIDR (allowed: one CIDR, or an IPv4 and an IPv6 CIDR \
             separated by a comma)",
        ),
        (
            "clusterCIDR: 10.0.0.0/8,10.1.0.0/16",
            "clusterCIDR: \"10.0.0.0/8,10.1.0.0/16\" has two CIDRs of the same family (allowed: one CIDR, or an \
             IPv4 and an IPv6 CIDR separated by a comma)",
        ),
        (
            "ipvs:\n  excludeCIDRs: [10.0.0.0/8, bogus]",
            "ipvs.excludeCIDRs[1]: \"bogus\" is not a valid CIDR (allowed: a CIDR such as 10.0.0.0/8 or fd00::/64)",
        ),
        (
            "mode: nftables\nnftables:\n  minSyncPeriod: 40s",
            "nftables.minSyncPeriod: 40s is greater than nftables.syncPeriod (30s) (allowed: 0s to 30s)",
        ),
        (
            "iptables:\n  syncPeriod: -5s",
            "iptables.syncPeriod: -5s is not positive (allowed: a duration greater than 0s)",
        ),
        ("iptables:\n  minSyncPeriod: -1ms", "iptables.minSyncPeriod: -1ms is negative (allowed: 0s or more)"),
        (
            "iptables:\n  syncPeriod: 30",
            "iptables.syncPeriod: invalid type: integer `30`, expected a Go duration such as \"30s\", \"1m30s\" or \
             \"250ms\", in units of ns, us, ms, s, m, h",
        ),
        (
            "configSyncPeriod: 15 minutes",
            "configSyncPeriod: invalid duration \"15 minutes\": unknown unit \" minutes\" (allowed: a Go duration \
             such as \"30s\", \"1m30s\" or \"250ms\", in units of ns, us, ms, s, m, h)",
        ),
        ("conntrack:\n  min: -1", "conntrack.min: -1 is negative (allowed: 0 or more)"),
        ("conntrack:\n  udpTimeout: -1s", "conntrack.udpTimeout: -1s is negative (allowed: 0s or more)"),
        ("oomScoreAdj: 1001", "oomScoreAdj: 1001 is out of range (allowed: -1000 to 1000)"),
        ("clientConnection:\n  burst: -1", "clientConnection.burst: -1 is negative (allowed: 0 or more)"),
        (
            "bindAddress: localhost",
            "bindAddress: \"localhost\" is not an IP address (allowed: an IPv4 or IPv6 address such as 0.0.0.0)",
        ),
        (
            "healthzBindAddress: 0.0.0.0:0",
            "healthzBindAddress: \"0.0.0.0:0\" has an invalid port \"0\" (allowed: IP:port with a port of 1-65535, \
             such as 0.0.0.0:10256)",
        ),
        (
            "metricsBindAddress: \"localhost:10249\"",
            "metricsBindAddress: \"localhost:10249\" has an invalid IP \"localhost\" (allowed: IP:port with a port \
             of 1-65535, such as 127.0.0.1:10249)",
        ),
        (
            "hostnameOverride: \"  \"",
            "hostnameOverride: \"  \" is blank (allowed: a node name, or empty for the host name)",
        ),
        ("logging:\n  format: xml", "logging.format: unsupported value \"xml\" (allowed: text, json)"),
        ("iptables: 5", "iptables: invalid type: integer `5`, expected a mapping"),
        ("iptables:\n  masqueradeBit: abc", "iptables.masqueradeBit: invalid type: string \"abc\", expected i32"),
        (
            "iptables:\n  masqueradeAll: \"yes\"",
            "iptables.masqueradeAll: invalid type: string \"yes\", expected a boolean",
        ),
    ];
    for (body, want) in cases {
        assert_eq!(error(body), want, "for {body:?}");
    }
}

#[test]
fn api_version_and_kind_must_match() {
    let err = |text: &str| load_file(text).expect_err("rejected").to_string();
    assert_eq!(
        err("apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration"),
        "apiVersion: unsupported value \"kubeproxy.config.k8s.io/v1alpha2\" (allowed: kubeproxy.config.k8s.io/v1alpha1)"
    );
    assert_eq!(
        err("kind: KubeProxyConfiguration\nmode: ipvs"),
        "apiVersion: missing (allowed: kubeproxy.config.k8s.io/v1alpha1)"
    );
    assert_eq!(
        err("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration"),
        "kind: unsupported value \"KubeletConfiguration\" (allowed: KubeProxyConfiguration)"
    );
    assert_eq!(err(""), "apiVersion: missing (allowed: kubeproxy.config.k8s.io/v1alpha1)");
    assert_eq!(err("- mode: ipvs"), "document: expected a mapping, found a list");
}

#[test]
fn syntax_errors_give_line_and_column() {
    assert_eq!(error("mode: [ipvs\n"), "syntax error at line 3, column 7: unclosed bracket '['");
    assert_eq!(
        error("mode: ipvs\nmode: iptables"),
        "syntax error at line 4, column 1: duplicate mapping key `mode` is not allowed here"
    );
    let ConfigError::Syntax { line, column, .. } =
        load_file(&format!("{HEADER}iptables:\n  a: b: c")).expect_err("bad YAML")
    else {
        panic!("expected a syntax error");
    };
    assert_eq!((line, column), (4, 7));
}
