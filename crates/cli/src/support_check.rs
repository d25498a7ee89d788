//! The support table (`kproxy_config::settings()`) held against the
//! planners: for every setting with an effect a plan shows, a fixed set of
//! Services is planned in each mode with a base configuration and with the
//! setting changed, and the plans must differ exactly in the modes the
//! table says act on it. A mode that starts or stops using a setting fails
//! here until the table (and so the warnings and the docs) says so.
//!
//! "The plan" is what each mode computes from the state and its settings,
//! as `run` builds them (`crate::mode`, `crate::setup::state_config`):
//! nftables' and iptables' rules, IPVS's virtual servers with the
//! companion table, and the userspace proxy's settings with the service
//! ports it serves. Settings whose effect is elsewhere (sysctls, sockets,
//! the API connection, pacing) are listed in [`ELSEWHERE`] with where they
//! are checked.

use std::collections::BTreeSet;
use std::net::IpAddr;

use clap::Parser;
use kproxy_config::{Config, Flags, MODES, ProxyMode, Support, settings};
use kproxy_model::{Changes, IpFamily};
use kproxy_testkit::{EndpointBuilder, Scenario, node, service, slice};

use ProxyMode::{Ebpf, Iptables, Ipvs, Nftables, Userspace};

const HEADER: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

/// The host's addresses as the state sees them: the node's, a second
/// interface's, loopback and IPv6.
const HOST: [&str; 4] = ["192.168.1.10", "10.0.2.15", "127.0.0.1", "fd00::10"];

/// A configuration: extra lines of the file, and flags.
#[derive(Clone, Copy)]
struct Input {
    file: &'static str,
    flags: &'static [&'static str],
}

const fn file(file: &'static str) -> Input {
    Input { file, flags: &[] }
}

const fn flags(flags: &'static [&'static str]) -> Input {
    Input { file: "", flags }
}

/// A setting (by path or flag) changed from `base` to `changed`.
/// `elsewhere`: modes that act on it where no plan shows (the table must
/// claim them; the plans are not compared).
struct Case {
    name: &'static str,
    base: Input,
    changed: Input,
    elsewhere: &'static [ProxyMode],
}

const fn case(name: &'static str, base: Input, changed: Input) -> Case {
    Case { name, base, changed, elsewhere: &[] }
}

/// conntrack sysctls: set at start in the kernel modes
/// (`kernel_settings::apply`, crates/dataplane conntrack_settings tests).
const SYSCTL: &[ProxyMode] = &[Nftables, Iptables, Ipvs, Ebpf];

const CASES: &[Case] = &[
    case("hostnameOverride", file(""), file("hostnameOverride: node-b\n")),
    case(
        "bindAddress",
        file("nodePortAddresses: [primary]\n"),
        file("nodePortAddresses: [primary]\nbindAddress: 192.168.1.20\n"),
    ),
    case("iptables.masqueradeBit", file(""), file("iptables: {masqueradeBit: 13}\n")),
    case("--iptables-masquerade-bit", flags(&[]), flags(&["--iptables-masquerade-bit=13"])),
    case("iptables.masqueradeAll", file(""), file("iptables: {masqueradeAll: true}\n")),
    case("--masquerade-all", flags(&[]), flags(&["--masquerade-all"])),
    case(
        "iptables.localhostNodePorts",
        file("nodePortAddresses: [0.0.0.0/0]\n"),
        file("nodePortAddresses: [0.0.0.0/0]\niptables: {localhostNodePorts: false}\n"),
    ),
    case("ipvs.scheduler", file(""), file("ipvs: {scheduler: lc}\n")),
    case("nftables.masqueradeBit", file(""), file("nftables: {masqueradeBit: 13}\n")),
    case("nftables.masqueradeAll", file(""), file("nftables: {masqueradeAll: true}\n")),
    case("detectLocalMode", file(""), file("detectLocalMode: NodeCIDR\n")),
    case(
        "detectLocal.bridgeInterface",
        file("detectLocalMode: BridgeInterface\ndetectLocal: {bridgeInterface: cbr0}\n"),
        file("detectLocalMode: BridgeInterface\ndetectLocal: {bridgeInterface: cbr1}\n"),
    ),
    case(
        "detectLocal.interfaceNamePrefix",
        file("detectLocalMode: InterfaceNamePrefix\ndetectLocal: {interfaceNamePrefix: veth}\n"),
        file("detectLocalMode: InterfaceNamePrefix\ndetectLocal: {interfaceNamePrefix: cali}\n"),
    ),
    case("clusterCIDR", flags(&["--cluster-cidr="]), flags(&["--cluster-cidr=10.244.0.0/16"])),
    case("nodePortAddresses", file(""), file("nodePortAddresses: [10.0.2.0/24]\n")),
    Case { elsewhere: SYSCTL, ..case("conntrack.maxPerCore", file(""), file("conntrack: {maxPerCore: 1}\n")) },
    Case { elsewhere: SYSCTL, ..case("conntrack.min", file(""), file("conntrack: {min: 1}\n")) },
    Case {
        elsewhere: SYSCTL,
        ..case("conntrack.tcpEstablishedTimeout", file(""), file("conntrack: {tcpEstablishedTimeout: 1h}\n"))
    },
    Case {
        elsewhere: SYSCTL,
        ..case("conntrack.tcpCloseWaitTimeout", file(""), file("conntrack: {tcpCloseWaitTimeout: 2h}\n"))
    },
    // Also a sysctl; IPVS's companion table keeps invalid packets anyway.
    Case { elsewhere: &[Ipvs], ..case("conntrack.tcpBeLiberal", file(""), file("conntrack: {tcpBeLiberal: true}\n")) },
    Case { elsewhere: SYSCTL, ..case("conntrack.udpTimeout", file(""), file("conntrack: {udpTimeout: 45s}\n")) },
    Case {
        elsewhere: SYSCTL,
        ..case("conntrack.udpStreamTimeout", file(""), file("conntrack: {udpStreamTimeout: 3m}\n"))
    },
    case("--service-cidrs", flags(&[]), flags(&["--service-cidrs=10.96.0.0/16"])),
];

/// Settings some mode acts on with no effect on any plan, and where that
/// is checked.
const ELSEWHERE: &[(&str, &str)] = &[
    ("apiVersion", "the file's type: crates/config tests/file.rs"),
    ("kind", "the file's type: crates/config tests/file.rs"),
    ("clientConnection.kubeconfig", "the API connection: setup::connection, crates/source kube tests"),
    ("clientConnection.qps", "the API client's rate limit: crates/source kube/client.rs tests"),
    ("clientConnection.burst", "the API client's rate limit: crates/source kube/client.rs tests"),
    ("--master", "the API connection: setup::connection, crates/source kube tests"),
    ("logging.format", "the log output: run::init_logging"),
    ("logging.verbosity", "the log level: run::init_logging"),
    ("healthzBindAddress", "the admin servers' sockets: run::serve, crates/cli tests/run.rs"),
    ("metricsBindAddress", "the admin servers' sockets: run::serve, crates/cli tests/run.rs"),
    ("bindAddressHardFail", "what a failed bind does: run::listen"),
    ("mode", "the mode itself: each case below plans every mode"),
    ("iptables.syncPeriod", "the runner's pacing: crates/config tests/file.rs, crates/dataplane tests/pacing.rs"),
    ("iptables.minSyncPeriod", "the runner's pacing: crates/config tests/file.rs, crates/dataplane tests/pacing.rs"),
    ("--iptables-sync-period", "the runner's pacing: crates/config tests/flags.rs"),
    ("--iptables-min-sync-period", "the runner's pacing: crates/config tests/flags.rs"),
    ("ipvs.syncPeriod", "the runner's pacing: crates/config tests/file.rs"),
    ("ipvs.minSyncPeriod", "the runner's pacing: crates/config tests/file.rs"),
    ("nftables.syncPeriod", "the runner's pacing: crates/config tests/file.rs"),
    ("nftables.minSyncPeriod", "the runner's pacing: crates/config tests/file.rs"),
    ("ipvs.excludeCIDRs", "which kernel servers are deleted: crates/ipvs diff tests, vm_ipvs_kernel cleanup test"),
    ("ipvs.strictARP", "arp sysctls when IPVS starts: crates/dataplane ipvs.rs prepare"),
    ("ipvs.tcpTimeout", "IPVS's timeouts over netlink when IPVS starts: crates/netlink ipvs tests"),
    ("ipvs.tcpFinTimeout", "IPVS's timeouts over netlink when IPVS starts: crates/netlink ipvs tests"),
    ("ipvs.udpTimeout", "IPVS's timeouts over netlink when IPVS starts: crates/netlink ipvs tests"),
    ("oomScoreAdj", "this process's OOM score: kernel_settings tests"),
    ("--iptables-backend", "which iptables tools run: mode::configured_backend, crates/iptables-exec"),
    ("--ebpf-cgroup", "where the socket programs attach: the lab's netns_ebpf tests (a cgroup of their own)"),
    ("--ebpf-pin-dir", "where maps and links are pinned: crates/bpf lifecycle tests, netns_ebpf (a private bpffs)"),
    ("--ebpf-devices", "where the tc programs attach: netns_ebpf (node-a's eth0), crates/bpf tc tests"),
];

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    flags: Flags,
}

/// `input` for `mode`, on node `node-a` with pods in 10.244.0.0/16 unless
/// the input says otherwise.
fn config(input: Input, mode: ProxyMode) -> Config {
    let mut text = HEADER.to_owned();
    if !input.file.contains("hostnameOverride") {
        text.push_str("hostnameOverride: node-a\n");
    }
    if !input.flags.iter().any(|f| f.starts_with("--cluster-cidr")) {
        text.push_str("clusterCIDR: 10.244.0.0/16\n");
    }
    text.push_str(input.file);
    let mode = format!("--proxy-mode={mode}");
    let argv = ["kproxy", mode.as_str()].into_iter().chain(input.flags.iter().copied());
    let flags = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{:?}: {e}", input.flags)).flags;
    kproxy_config::load(Some(&text), &flags).unwrap_or_else(|e| panic!("{text}{:?}: {e}", input.flags)).config
}

/// node-a (192.168.1.10, pods in 10.244.1.0/24) serving a NodePort
/// Service, a LoadBalancer Service with `externalTrafficPolicy: Local` and
/// an external IP, and a Service without endpoints; endpoints on node-a and
/// node-b.
fn scenario(state_config: kproxy_state::StateConfig) -> Scenario {
    let mut s = Scenario::new(state_config);
    let mut n = node("node-a").address("InternalIP", "192.168.1.10").build();
    n.spec.get_or_insert_default().pod_cidrs = Some(vec!["10.244.1.0/24".into()]);
    s.node(n);
    let web = service("default", "web").type_("NodePort").cluster_ip("10.96.0.10").port("http", "TCP", 80);
    s.service(web.node_port(30080).build());
    let local = service("default", "local").type_("LoadBalancer").cluster_ip("10.96.0.11").port("http", "TCP", 80);
    let local = local.node_port(30081).external_traffic_policy("Local").health_check_node_port(30900);
    s.service(local.load_balancer_ingress("203.0.113.10", None).external_ips(&["192.168.1.100"]).build());
    s.service(service("default", "empty").cluster_ip("10.96.0.12").port("dns", "UDP", 53).build());
    for (svc, last) in [("web", 5), ("local", 6)] {
        let mut sl = slice("default", &format!("{svc}-1"), svc).port("http", "TCP", 8080);
        sl = sl.endpoint(EndpointBuilder::new(&format!("10.244.1.{last}")).node("node-a"));
        s.slice(sl.endpoint(EndpointBuilder::new(&format!("10.244.2.{last}")).node("node-b")).build());
    }
    s.sync();
    s
}

/// What `mode` computes from the scenario under `config`, as text.
fn planned(config: &Config, mode: ProxyMode) -> String {
    let support = crate::mode::support(config, Some(mode)).expect("the mode's support");
    let host: Vec<IpAddr> = HOST.iter().map(|ip| ip.parse().expect("an address")).collect();
    let s = scenario(crate::setup::state_config(config, host, Some(mode), support));
    let state = s.state();
    // The node's conntrack is strict here, whatever this host's is.
    let nft = crate::mode::nftables_config_on(config, false);
    match mode {
        Nftables => {
            let planned = kproxy_nftables::plan(state, &Changes::default(), true, &nft, None);
            format!("{}{:?}", kproxy_nftables::render::plan(&planned.plan), planned.skips)
        }
        Iptables => {
            let plan = crate::mode::iptables_plan_config(config, nft);
            let mut out = String::new();
            for family in IpFamily::ALL {
                let planned = kproxy_iptables::plan(state, family, &plan, None);
                out += &format!("{}{:?}{:?}", planned.payload.render(), planned.jump_rules, planned.skips);
            }
            out
        }
        Ipvs => {
            let ipvs = crate::mode::ipvs_config_with(config, nft).expect("valid IPVS settings");
            let plan = kproxy_ipvs::plan(state, &ipvs.plan);
            let companion = ipvs.companion.resolved(&state.node);
            let tables = IpFamily::ALL.map(|f| kproxy_ipvs::companion::table(state, &plan, f, &companion));
            format!("{plan:#?}{tables:#?}")
        }
        Userspace => {
            // The proxy reads its settings and serves each service port's
            // frontends with its endpoints.
            let ports: Vec<_> = IpFamily::ALL.iter().flat_map(|&f| state.family(f).service_ports.values()).collect();
            format!("{:#?}{ports:#?}", crate::mode::userspace_settings(config))
        }
        Ebpf => match crate::mode::ebpf_config_with(config, nft) {
            // The maps' contents and the companion table.
            Ok(ebpf) => {
                let planned = kproxy_ebpf::desired(state, &ebpf.plan).expect("valid ebpf settings");
                let tables = kproxy_ebpf::companion::tables(state, &ebpf.plan.resolved(&state.node));
                format!("{}{:?}", kproxy_ebpf::render::all(&planned.applied.contents(), &tables), planned.skips)
            }
            Err(e) => format!("refused: {e}"),
        },
    }
}

/// The modes whose plan changes with the case's setting.
fn modes_that_plan_it(case: &Case) -> BTreeSet<&'static str> {
    let differs =
        |mode: ProxyMode| planned(&config(case.base, mode), mode) != planned(&config(case.changed, mode), mode);
    MODES.into_iter().filter(|m| !case.elsewhere.contains(m)).filter(|&m| differs(m)).map(ProxyMode::as_str).collect()
}

fn setting(name: &str) -> &'static kproxy_config::Setting {
    settings()
        .iter()
        .find(|s| s.path == Some(name) || s.flag == Some(name))
        .unwrap_or_else(|| panic!("{name}: not in the table"))
}

#[test]
fn each_mode_plans_exactly_the_settings_the_table_says_it_applies() {
    let mut wrong = Vec::new();
    for case in CASES {
        let row = setting(case.name);
        let claimed: BTreeSet<&str> =
            MODES.iter().filter(|&&m| row.applies_in(m) && !case.elsewhere.contains(&m)).map(|m| m.as_str()).collect();
        let planned = modes_that_plan_it(case);
        if planned != claimed {
            wrong.push(format!("{}: the table claims {claimed:?}, the plans change in {planned:?}", case.name));
        }
        for mode in case.elsewhere.iter().filter(|&&m| !row.applies_in(m)) {
            wrong.push(format!("{}: acts in {mode} mode outside the plan, but the table says it does not", case.name));
        }
    }
    assert!(wrong.is_empty(), "the support table in crates/config/src/support.rs is wrong:\n{}", wrong.join("\n"));
}

#[test]
fn every_setting_a_mode_acts_on_is_checked_against_the_plans_or_listed_as_acting_elsewhere() {
    let covered: BTreeSet<&str> = CASES.iter().map(|c| c.name).chain(ELSEWHERE.iter().map(|(n, _)| *n)).collect();
    let missing: Vec<&str> = settings()
        .iter()
        .filter(|s| matches!(s.support, Support::Modes(_)))
        .filter(|s| !s.path.into_iter().chain(s.flag).any(|n| covered.contains(n)))
        .map(|s| s.name())
        .collect();
    assert!(missing.is_empty(), "add a case (or an ELSEWHERE entry with its reason) for: {missing:?}");
    for name in covered {
        assert!(matches!(setting(name).support, Support::Modes(_)), "{name}: no mode acts on it; drop it here");
    }
}
