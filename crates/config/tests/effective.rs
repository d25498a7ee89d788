//! The effective configuration as a document: `--write-config-to` writes
//! it, `--config` reads it back to the same configuration, and `/configz`
//! serves it in upstream's shape.

use clap::Parser;
use kproxy_config::{Flags, Loaded, configz, load, not_in_document, to_json, to_yaml};

const HEADER: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    flags: Flags,
}

fn flags(args: &[&str]) -> Flags {
    let argv = std::iter::once("kproxy").chain(args.iter().copied());
    Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?} should parse: {e}")).flags
}

fn loaded(file: Option<&str>, args: &[&str]) -> Loaded {
    let text = file.map(|body| format!("{HEADER}{body}"));
    load(text.as_deref(), &flags(args)).unwrap_or_else(|e| panic!("{file:?} {args:?} should load: {e}"))
}

/// Settings from the file and from flags, in every mode, including the
/// ones upstream treats specially (ipvs without a file takes the iptables
/// sync periods; nftables has its own masquerade bit).
const CASES: &[(Option<&str>, &[&str])] = &[
    (None, &[]),
    (None, &["--proxy-mode", "ipvs", "--ipvs-scheduler", "wrr", "--ipvs-strict-arp", "--ipvs-tcp-timeout", "90s"]),
    (None, &["--proxy-mode", "iptables", "--iptables-masquerade-bit", "13", "--iptables-localhost-nodeports=false"]),
    (None, &["--hostname-override", "Node-A", "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/56", "--v", "4"]),
    (None, &["--bind-address", "::", "--nodeport-addresses", "primary", "--detect-local-mode", "NodeCIDR"]),
    (None, &["--feature-gates", "Foo=true,Bar=false", "--kube-api-qps", "2.5", "--config-sync-period", "90m"]),
    (Some("mode: nftables\nnftables:\n  masqueradeBit: 3\n  syncPeriod: 1h30m\n"), &["--masquerade-all"]),
    (
        Some("mode: ipvs\nipvs:\n  excludeCIDRs: [10.0.0.0/8]\n  minSyncPeriod: 250ms\nconntrack:\n  maxPerCore: 0\n"),
        &["--conntrack-udp-timeout", "45s"],
    ),
    (Some("logging:\n  format: json\n  flushFrequency: 2s\n  vmodule: [{filePattern: x, verbosity: 3}]\n"), &[]),
    (Some("detectLocalMode: InterfaceNamePrefix\ndetectLocal:\n  interfaceNamePrefix: veth\n"), &["--profiling"]),
];

#[test]
fn the_written_yaml_reads_back_to_the_same_configuration() {
    for (file, args) in CASES {
        let first = loaded(*file, args);
        let text = to_yaml(&first.document);
        let again = load(Some(&text), &Flags::default()).unwrap_or_else(|e| panic!("{args:?}: {e}\n{text}"));
        assert_eq!(again.config, first.config, "{file:?} {args:?}\n{text}");
        // Written again, it is the same file: nothing drifts.
        assert_eq!(to_yaml(&again.document), text, "{file:?} {args:?}");
    }
}

#[test]
fn the_written_json_reads_back_to_the_same_configuration() {
    for (file, args) in CASES {
        let first = loaded(*file, args);
        let text = to_json(&first.document);
        let again = load(Some(&text), &Flags::default()).unwrap_or_else(|e| panic!("{args:?}: {e}\n{text}"));
        assert_eq!(again.config, first.config, "{file:?} {args:?}\n{text}");
    }
}

#[test]
fn a_written_file_of_defaults_reads_back_without_warnings() {
    let text = to_yaml(&loaded(None, &[]).document);
    assert_eq!(load(Some(&text), &Flags::default()).unwrap().warnings, []);
}

#[test]
fn a_default_spelled_out_in_a_file_does_not_warn_but_another_value_does() {
    let default = loaded(Some("configSyncPeriod: 15m\nlogging:\n  flushFrequency: 5s\n"), &[]);
    assert_eq!(default.warnings, []);
    let other = loaded(Some("logging:\n  flushFrequency: 2s\n"), &[]);
    let names: Vec<&str> = other.warnings.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["logging.flushFrequency"]);
}

#[test]
fn the_document_spells_fields_and_durations_as_upstream() {
    let text = to_yaml(&loaded(None, &["--proxy-mode", "ipvs"]).document);
    for line in [
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1",
        "kind: KubeProxyConfiguration",
        "clusterCIDR: \"\"",
        "configSyncPeriod: 15m0s",
        "  syncPeriod: 30s",
        "  minSyncPeriod: 1s",
        "  tcpEstablishedTimeout: 24h0m0s",
        "  strictARP: false",
        "  excludeCIDRs: []",
        "  qps: 5",
        "  masqueradeBit: 14",
        "metricsBindAddress: 127.0.0.1:10249",
    ] {
        assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
    }
}

#[test]
fn configz_nests_the_document_under_the_group_name() {
    let first = loaded(None, &["--proxy-mode", "nftables", "--cluster-cidr", "10.244.0.0/16"]);
    let body: serde_json::Value = serde_json::from_str(&configz(&first.document)).unwrap();
    let object = body.as_object().unwrap();
    assert_eq!(object.keys().collect::<Vec<_>>(), ["kubeproxy.config.k8s.io"]);
    let doc = &body["kubeproxy.config.k8s.io"];
    assert_eq!(doc["mode"], "nftables");
    assert_eq!(doc["clusterCIDR"], "10.244.0.0/16");
    assert_eq!(doc["nftables"]["syncPeriod"], "30s");
    assert_eq!(doc["conntrack"]["tcpCloseWaitTimeout"], "1h0m0s");
    assert_eq!(doc["healthzBindAddress"], "0.0.0.0:10256");
}

#[test]
fn flags_without_a_field_in_the_document_are_named() {
    let given = flags(&["--service-cidrs", "10.96.0.0/12", "--master", "https://x", "--proxy-mode", "ipvs"]);
    assert_eq!(not_in_document(&given), ["--master", "--service-cidrs"]);
    assert_eq!(not_in_document(&flags(&["--cluster-cidr", "10.0.0.0/8"])), Vec::<&str>::new());
}
