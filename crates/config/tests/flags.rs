//! Flags: parsed by clap with upstream's names, laid over the file, and
//! named in errors and warnings.

use std::time::Duration;

use clap::Parser;
use kproxy_config::{Config, DetectLocalMode, Flags, Loaded, NodePortAddresses, ProxyMode, load};

const HEADER: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    flags: Flags,
}

fn flags(args: &[&str]) -> Flags {
    let argv = std::iter::once("kproxy").chain(args.iter().copied());
    match Cli::try_parse_from(argv) {
        Ok(cli) => cli.flags,
        Err(err) => panic!("{args:?} should parse: {err}"),
    }
}

fn run(file: Option<&str>, args: &[&str]) -> Result<Loaded, String> {
    let text = file.map(|body| format!("{HEADER}{body}"));
    load(text.as_deref(), &flags(args)).map_err(|e| e.to_string())
}

fn config(file: Option<&str>, args: &[&str]) -> Config {
    match run(file, args) {
        Ok(loaded) => loaded.config,
        Err(err) => panic!("{args:?} should load: {err}"),
    }
}

fn error(file: Option<&str>, args: &[&str]) -> String {
    match run(file, args) {
        Ok(loaded) => panic!("{args:?} should fail, got {:?}", loaded.config),
        Err(err) => err,
    }
}

fn warnings(file: Option<&str>, args: &[&str]) -> Vec<String> {
    match run(file, args) {
        Ok(loaded) => loaded.warnings.iter().map(ToString::to_string).collect(),
        Err(err) => panic!("{args:?} should load: {err}"),
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn clap_reads_upstream_spellings() {
    let f = flags(&[
        "--proxy-mode=ipvs",
        "--masquerade-all",
        "--ipvs-strict-arp=false",
        "--nodeport-addresses=10.0.0.0/8,fd00::/64",
        "--nodeport-addresses",
        "192.168.0.0/16",
        "-v",
        "3",
        "--oom-score-adj",
        "-500",
    ]);
    assert_eq!(f.proxy_mode.as_deref(), Some("ipvs"));
    assert_eq!(f.masquerade_all, Some(true));
    assert_eq!(f.ipvs_strict_arp, Some(false));
    assert_eq!(
        f.nodeport_addresses,
        Some(vec!["10.0.0.0/8".to_owned(), "fd00::/64".to_owned(), "192.168.0.0/16".to_owned()])
    );
    assert_eq!(f.verbosity.as_deref(), Some("3"));
    assert_eq!(f.oom_score_adj.as_deref(), Some("-500"));
    assert_eq!(flags(&["--v=5"]).verbosity.as_deref(), Some("5"));
    assert_eq!(flags(&["--profiling=T"]).profiling, Some(true));
    assert_eq!(flags(&[]), Flags::default());
    assert!(Cli::try_parse_from(["kproxy", "--masquerade-all=maybe"]).is_err());
    assert!(Cli::try_parse_from(["kproxy", "--config=x"]).is_err(), "the binary owns --config");
}

#[test]
fn flags_override_the_file() {
    let file = "mode: iptables\nclusterCIDR: 10.0.0.0/8\nnodePortAddresses: [primary]\nhostnameOverride: file-name\n\
                detectLocalMode: NodeCIDR\nbindAddress: 10.1.1.1\nconntrack: {min: 5}\n";
    let c = config(
        Some(file),
        &[
            "--proxy-mode=nftables",
            "--cluster-cidr=10.244.0.0/16,fd00:10::/56",
            "--nodeport-addresses=192.168.0.0/24",
            "--hostname-override= Flag-Name ",
            "--detect-local-mode=BridgeInterface",
            "--pod-bridge-interface=cbr0",
            "--bind-address=10.2.2.2",
            "--conntrack-min=7",
            "--kubeconfig=/k",
            "--master=https://api:6443",
            "--kube-api-qps=50",
            "--service-cidrs=10.96.0.0/12,fd00:96::/108",
            "--iptables-backend=nft",
        ],
    );
    assert_eq!(c.mode, Some(ProxyMode::Nftables));
    assert_eq!(c.cluster_cidrs.len(), 2);
    assert_eq!(c.node_port_addresses, NodePortAddresses::Cidrs(vec!["192.168.0.0/24".parse().expect("cidr")]));
    assert_eq!(c.hostname_override.as_deref(), Some("flag-name"));
    assert_eq!(c.detect_local_mode, DetectLocalMode::BridgeInterface);
    assert_eq!(c.bridge_interface, "cbr0");
    assert_eq!(c.bind_address, "10.2.2.2".parse::<std::net::IpAddr>().expect("ip"));
    assert_eq!(c.conntrack.min, 7);
    assert_eq!(c.client_connection.kubeconfig.as_deref(), Some("/k"));
    assert_eq!(c.client_connection.master.as_deref(), Some("https://api:6443"));
    assert_eq!(c.client_connection.qps, 50.0);
    assert_eq!(c.service_cidrs, ["10.96.0.0/12".parse().expect("cidr"), "fd00:96::/108".parse().expect("cidr")]);
    assert_eq!(c.iptables_backend, Some(kproxy_config::IptablesBackend::Nft));
}

#[test]
fn empty_address_flags_count_as_not_given() {
    let c = config(
        Some("metricsBindAddress: 0.0.0.0:9999"),
        &["--metrics-bind-address=", "--bind-address=", "--hostname-override="],
    );
    assert_eq!(c.metrics_bind_address, Some("0.0.0.0:9999".parse().expect("addr")));
    assert_eq!(c.bind_address, "0.0.0.0".parse::<std::net::IpAddr>().expect("ip"));
    assert_eq!(c.hostname_override, None);
    // A bare IP gets the default port.
    let c = config(None, &["--healthz-bind-address=::1"]);
    assert_eq!(c.healthz_bind_address, Some("[::1]:10256".parse().expect("addr")));
    // An empty list flag clears the file's list.
    let c = config(Some("nodePortAddresses: [primary]"), &["--nodeport-addresses="]);
    assert_eq!(c.node_port_addresses, NodePortAddresses::Unset);
}

#[test]
fn iptables_sync_flags_drive_every_mode_but_ipvs() {
    let args = ["--iptables-sync-period=10s", "--iptables-min-sync-period=2s"];
    for mode in ["iptables", "nftables", "userspace", ""] {
        let c = config(Some(&format!("mode: \"{mode}\"")), &args);
        assert_eq!((c.sync_period, c.min_sync_period), (secs(10), secs(2)), "mode {mode:?}");
    }
    let c = config(None, &["--proxy-mode=ipvs", "--ipvs-sync-period=1m", "--ipvs-min-sync-period=5s"]);
    assert_eq!((c.sync_period, c.min_sync_period), (secs(60), secs(5)));
}

#[test]
fn flags_only_ipvs_inherits_the_iptables_min_sync_period() {
    // Upstream quirk: without a file ipvs starts from the iptables pair (1s);
    // with a file it starts from ipvs' own default (0s).
    assert_eq!(config(None, &["--proxy-mode=ipvs"]).min_sync_period, secs(1));
    assert_eq!(config(Some(""), &["--proxy-mode=ipvs"]).min_sync_period, Duration::ZERO);
}

#[test]
fn masquerade_all_flag_follows_the_mode() {
    let c = config(Some("mode: nftables"), &["--masquerade-all"]);
    assert!(c.masquerade_all);
    let c = config(Some("mode: ipvs\niptables: {masqueradeAll: true}"), &["--masquerade-all=false"]);
    assert!(!c.masquerade_all);
    assert_eq!(config(None, &["--iptables-masquerade-bit=3"]).masquerade_bit, 3);
}

#[test]
fn flag_errors_name_the_flag() {
    let cases: [(&[&str], &str); 15] = [
        (
            &["--proxy-mode=foo"],
            "--proxy-mode: unsupported value \"foo\" (allowed: iptables, ipvs, nftables, userspace, ebpf, or empty for \
             the best available)",
        ),
        (&["--iptables-masquerade-bit=40"], "--iptables-masquerade-bit: 40 is out of range (allowed: 0-31)"),
        (&["--iptables-masquerade-bit=x"], "--iptables-masquerade-bit: \"x\" is not an integer (allowed: 0-31)"),
        (
            &["--iptables-sync-period=30"],
            "--iptables-sync-period: invalid duration \"30\": missing unit (allowed: a Go duration such as \"30s\", \
             \"1m30s\" or \"250ms\", in units of ns, us, ms, s, m, h)",
        ),
        (
            &["--iptables-min-sync-period=1m"],
            "--iptables-min-sync-period: 1m0s is greater than iptables.syncPeriod (30s) (allowed: 0s to 30s)",
        ),
        (
            &["--proxy-mode=nftables", "--iptables-sync-period=0s"],
            "--iptables-sync-period: 0s is not positive (allowed: a duration greater than 0s)",
        ),
        (
            &["--nodeport-addresses=primary,10.0.0.0/8"],
            "--nodeport-addresses: \"primary\" cannot be combined with CIDRs (allowed: CIDRs such as 10.0.0.0/8 or \
             fd00::/64, or the single keyword \"primary\")",
        ),
        (
            &["--cluster-cidr=10.0.0.0/8,bad"],
            "--cluster-cidr: \"bad\" is not a valid CIDR (allowed: one CIDR, or an IPv4 and an IPv6 CIDR separated \
             by a comma)",
        ),
        (
            &["--detect-local-mode=InterfaceNamePrefix"],
            "detectLocal.interfaceNamePrefix: must not be empty when --detect-local-mode is InterfaceNamePrefix \
             (allowed: a prefix of pod interface names, such as veth)",
        ),
        (
            &["--metrics-bind-address=localhost"],
            "--metrics-bind-address: \"localhost\" is not IP:port (allowed: IP:port with a port of 1-65535, such as \
             127.0.0.1:10249)",
        ),
        (
            &["--hostname-override=  "],
            "--hostname-override: \"  \" is blank (allowed: a node name, or empty for the host name)",
        ),
        (
            &["--service-cidrs=10.96.0.0/12,nope"],
            "--service-cidrs: \"nope\" is not a valid CIDR (allowed: a CIDR such as 10.0.0.0/8 or fd00::/64)",
        ),
        (
            &["--iptables-backend=nf_tables"],
            "--iptables-backend: unsupported value \"nf_tables\" (allowed: auto, legacy, nft)",
        ),
        (
            &["--feature-gates=Foo"],
            "--feature-gates: \"Foo\" is not Name=bool (allowed: a comma-separated list such as Foo=true,Bar=false)",
        ),
        (&["--conntrack-max-per-core=-1"], "--conntrack-max-per-core: -1 is negative (allowed: 0 or more)"),
    ];
    for (args, want) in cases {
        assert_eq!(error(None, args), want, "for {args:?}");
    }
    // The file's value is named when it is the file's value that is wrong.
    assert_eq!(
        error(Some("iptables: {syncPeriod: 10s}"), &["--iptables-min-sync-period=20s"]),
        "--iptables-min-sync-period: 20s is greater than iptables.syncPeriod (10s) (allowed: 0s to 10s)"
    );
}

#[test]
fn feature_gate_flag_merges_over_the_file() {
    let c = config(Some("featureGates: {A: true, B: true}"), &["--feature-gates= B=false ,C=1"]);
    let gates: Vec<(&str, bool)> = c.feature_gates.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(gates, [("A", true), ("B", false), ("C", true)]);
}

#[test]
fn settings_no_mode_or_not_the_running_mode_acts_on_warn_and_the_others_do_not() {
    let file = "featureGates: {Foo: true}\nwinkernel: {networkName: vxlan0}\nportRange: 30000-32767\n\
                conntrack: {maxPerCore: 5, tcpBeLiberal: false}\nmode: ipvs\nipvs: {scheduler: lc}\n\
                logging: {verbosity: 2, vmodule: [{filePattern: x, verbosity: 4}]}\nclusterCIDR: 10.0.0.0/8\n";
    assert_eq!(
        warnings(Some(file), &["--conntrack-min=1", "--profiling", "--proxy-mode=ipvs", "--iptables-sync-period=5s"]),
        [
            "featureGates: kproxy has no feature gates; ignored",
            "logging.vmodule[].filePattern: not implemented yet; ignored",
            "logging.vmodule[].verbosity: not implemented yet; ignored",
            "--profiling: not implemented yet; ignored",
            "--iptables-sync-period: no effect in ipvs mode (used by the nftables, iptables, userspace and ebpf modes)",
            "winkernel.networkName: Windows only; ignored",
            "portRange: unused upstream too; ignored",
        ]
    );
    assert_eq!(
        warnings(None, &["--ipvs-sync-period=5s", "--proxy-mode=nftables", "--iptables-masquerade-bit=3"]),
        [
            "--iptables-masquerade-bit: no effect in nftables mode (used by the iptables, ipvs and ebpf modes)",
            "--ipvs-sync-period: no effect in nftables mode (used by the ipvs mode)",
        ]
    );
    // The flags the issue named: applied by the mode, so never warned about.
    let applied = [
        "--iptables-masquerade-bit=13",
        "--iptables-localhost-nodeports=false",
        "--proxy-mode=iptables",
        "--iptables-backend=nft",
        "-v=2",
    ];
    assert_eq!(warnings(None, &applied), Vec::<String>::new());
    let ipvs = ["--proxy-mode=ipvs", "--ipvs-scheduler=lc", "--ipvs-exclude-cidrs=10.0.0.0/8", "--ipvs-strict-arp"];
    assert_eq!(
        warnings(None, &[&ipvs[..], &["--ipvs-tcp-timeout=5s", "--iptables-masquerade-bit=13"]].concat()),
        Vec::<String>::new()
    );
}

#[test]
fn an_unset_mode_reads_as_the_default_mode_and_stays_unset() {
    let file = format!("{HEADER}nftables: {{masqueradeBit: 5}}\nipvs: {{scheduler: lc}}\n");
    let flags = flags(&["--iptables-sync-period=7s"]);
    let loaded = kproxy_config::load_with(Some(&file), &flags, Some(ProxyMode::Nftables)).expect("valid");
    assert_eq!(loaded.config.mode, None);
    assert_eq!(loaded.config.masquerade_bit, 5, "the nftables section applies");
    assert_eq!(loaded.config.sync_period, secs(7), "--iptables-sync-period writes nftables.syncPeriod");
    let texts: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(texts, ["ipvs.scheduler: no effect in nftables mode (used by the ipvs and userspace modes)"]);

    // Without a default, the iptables section applies and no mode is known.
    let loaded = load(Some(&file), &flags).expect("valid");
    assert_eq!((loaded.config.mode, loaded.config.masquerade_bit), (None, 14));
    assert_eq!(loaded.warnings, []);

    // A configured mode wins over the default.
    let flags = self::flags(&["--proxy-mode=ipvs"]);
    let loaded = kproxy_config::load_with(Some(&file), &flags, Some(ProxyMode::Nftables)).expect("valid");
    assert_eq!((loaded.config.mode, loaded.config.masquerade_bit), (Some(ProxyMode::Ipvs), 14));
    let texts: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(texts, ["nftables.masqueradeBit: no effect in ipvs mode (used by the nftables mode)"]);
}

#[test]
fn logging_format_flag_overrides_the_file_and_is_checked_like_it() {
    let c = config(Some("logging: {format: text}\n"), &["--logging-format=json"]);
    assert_eq!(c.logging.format, kproxy_config::LogFormat::Json);
    let c = config(None, &["--logging-format", "text"]);
    assert_eq!(c.logging.format, kproxy_config::LogFormat::Text);
    let err = error(None, &["--logging-format=xml"]);
    assert!(err.contains("--logging-format") && err.contains("\"xml\""), "{err}");
}
