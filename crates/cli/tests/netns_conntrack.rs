//! `conntrack.*` and `oomScoreAdj` on the real kernel: kproxy runs in
//! node-a, a network namespace other than the initial one, where the
//! conntrack timeouts and `tcp_be_liberal` are the namespace's own and
//! `nf_conntrack_max` and the hash size are the host's (read-only there).
//! The tests read the values back inside node-a, check that another
//! namespace and the host's global limit did not move, and read the OOM
//! score of the kproxy process they started. The global settings are only
//! ever read here; the kernel refuses their writes from node-a anyway.

mod lab;

use lab::*;

const NETFILTER: &str = "/proc/sys/net/netfilter";
const HASHSIZE: &str = "/sys/module/nf_conntrack/parameters/hashsize";

/// The sysctls that are per network namespace, as set by the flags below.
const PER_NAMESPACE: [(&str, &str); 5] = [
    ("nf_conntrack_tcp_timeout_established", "7200"),
    ("nf_conntrack_tcp_timeout_close_wait", "30"),
    ("nf_conntrack_udp_timeout", "45"),
    ("nf_conntrack_udp_timeout_stream", "150"),
    ("nf_conntrack_tcp_be_liberal", "1"),
];

const FLAGS: [&str; 9] = [
    "--conntrack-tcp-timeout-established",
    "2h",
    "--conntrack-tcp-timeout-close-wait",
    "30s",
    "--conntrack-udp-timeout",
    "45s",
    "--conntrack-udp-timeout-stream",
    "150s",
    "--conntrack-tcp-be-liberal",
];

/// A file's value, read from the calling thread's namespace.
fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().to_owned()
}

fn in_namespace(ns: &kproxy_sandbox::Netns, name: &str) -> String {
    let path = format!("{NETFILTER}/{name}");
    ns.enter(|| read(&path))
}

fn oom_score_adj(lab: &Lab) -> String {
    read(&format!("/proc/{}/oom_score_adj", lab.kproxy_pid()))
}

/// Whether this process (and so the kproxy it starts) holds
/// `CAP_SYS_RESOURCE`, without which no OOM score goes below the one
/// inherited. Some sandboxes give root every capability but this one.
fn may_lower_oom_score() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    let status = read("/proc/self/status");
    let effective = status.lines().find_map(|l| l.strip_prefix("CapEff:")).expect("CapEff");
    let bits = u64::from_str_radix(effective.trim(), 16).expect("hex capabilities");
    bits & (1 << CAP_SYS_RESOURCE) != 0
}

/// Starts kproxy in `mode` with every per-namespace setting and a limit
/// above the host's, and checks what landed where.
fn per_namespace_settings_apply_and_the_global_limit_is_left_with_a_warning(mode: &str) {
    let mut lab = Lab::new(&[]);
    // The test runs in the initial namespace: these are the host's.
    let global_max: u64 = read(&format!("{NETFILTER}/nf_conntrack_max")).parse().expect("a number");
    let global_hashsize = read(HASHSIZE);
    let before: Vec<String> = PER_NAMESPACE.iter().map(|(name, _)| in_namespace(lab.node(), name)).collect();
    for ((name, wanted), had) in PER_NAMESPACE.iter().zip(&before) {
        assert_ne!(had, wanted, "{name} already holds the value under test");
    }

    // conntrack.min above the host's limit: kproxy would raise it if it could.
    let min = (global_max * 2).min(i32::MAX as u64).to_string();
    let mut flags = FLAGS.to_vec();
    // A score above the inherited one needs no privilege.
    flags.extend(["--conntrack-min", &min, "--oom-score-adj", "500"]);
    if mode == "iptables" {
        flags.extend(["--iptables-backend", "nft"]);
    }
    lab.start_in(mode, &flags);

    for (name, wanted) in PER_NAMESPACE {
        assert_eq!(in_namespace(lab.node(), name), wanted, "{name} in node-a\n{}", lab.log_tail());
    }
    // Per namespace: the client's namespace keeps what it had.
    for ((name, _), had) in PER_NAMESPACE.iter().zip(&before) {
        assert_eq!(&in_namespace(lab.client(), name), had, "{name} in the client's namespace");
    }
    assert_eq!(read(&format!("{NETFILTER}/nf_conntrack_max")), global_max.to_string(), "the host's limit moved");
    assert_eq!(read(HASHSIZE), global_hashsize, "the host's hash size moved");

    let log = lab.log();
    let warning = log
        .lines()
        .find(|l| l.contains("conntrack setting not applied") && l.contains("net.netfilter.nf_conntrack_max"))
        .unwrap_or_else(|| panic!("no warning about nf_conntrack_max\n{log}"));
    assert!(warning.contains("WARN") && warning.contains("initial network namespace"), "{warning}");
    assert!(warning.contains(&format!("wanted={min}")), "{warning}");
    assert!(
        log.contains("conntrack setting changed")
            && log.contains("net.netfilter.nf_conntrack_udp_timeout_stream from=120 to=150"),
        "{log}"
    );
    assert_eq!(oom_score_adj(&lab), "500");
}

#[test]
fn nftables_mode_applies_per_namespace_conntrack_settings_and_warns_about_the_global_limit() {
    per_namespace_settings_apply_and_the_global_limit_is_left_with_a_warning("nftables");
}

#[test]
fn iptables_mode_applies_per_namespace_conntrack_settings_and_warns_about_the_global_limit() {
    per_namespace_settings_apply_and_the_global_limit_is_left_with_a_warning("iptables");
}

#[test]
fn upstream_defaults_set_both_tcp_timeouts_and_ask_for_an_oom_score_of_minus_999() {
    let mut lab = Lab::new(&[]);
    let udp_before = in_namespace(lab.node(), "nf_conntrack_udp_timeout");
    lab.start(&[]);
    assert_eq!(in_namespace(lab.node(), "nf_conntrack_tcp_timeout_established"), "86400");
    assert_eq!(in_namespace(lab.node(), "nf_conntrack_tcp_timeout_close_wait"), "3600");
    // udpTimeout 0 and tcpBeLiberal false leave the kernel's.
    assert_eq!(in_namespace(lab.node(), "nf_conntrack_udp_timeout"), udp_before);
    assert_eq!(in_namespace(lab.node(), "nf_conntrack_tcp_be_liberal"), "0");
    if may_lower_oom_score() {
        assert_eq!(oom_score_adj(&lab), "-999");
    } else {
        // Not fatal: the inherited score stays, and the log says why.
        assert_eq!(oom_score_adj(&lab), read("/proc/self/oom_score_adj"));
        let log = lab.log();
        assert!(
            log.lines().any(|l| l.contains("OOM score adjustment not applied") && l.contains("wanted=-999")),
            "{log}"
        );
    }
    // 32768 per core, at least 131072: a host already above needs nothing.
    let global_max: u64 = read(&format!("{NETFILTER}/nf_conntrack_max")).parse().expect("a number");
    let cpus = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    if global_max >= (32768 * cpus).max(131072) {
        let log = lab.log();
        let about_max: Vec<&str> = log.lines().filter(|l| l.contains("net.netfilter.nf_conntrack_max")).collect();
        assert_eq!(about_max.len(), 1, "{log}");
        assert!(about_max[0].contains("already as wanted") && !about_max[0].contains("WARN"), "{log}");
    }
}

#[test]
fn userspace_mode_leaves_the_conntrack_sysctls_and_sets_its_oom_score() {
    let mut lab = Lab::new(&[]);
    let before: Vec<String> = PER_NAMESPACE.iter().map(|(name, _)| in_namespace(lab.node(), name)).collect();
    let mut flags = FLAGS.to_vec();
    flags.extend(["--oom-score-adj", "300"]);
    lab.start_in("userspace", &flags);
    for ((name, _), had) in PER_NAMESPACE.iter().zip(&before) {
        assert_eq!(&in_namespace(lab.node(), name), had, "{name} in node-a");
    }
    assert_eq!(oom_score_adj(&lab), "300");
}

/// deploy/base/config.yaml, the configuration every overlay of deploy/
/// mounts (deploy_manifests.rs checks the rendered ones).
fn shipped_config() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/base/config.yaml");
    path.to_str().expect("a UTF-8 path").to_owned()
}

#[test]
fn shipped_deploy_config_leaves_conntrack_to_the_node_and_logs_nothing_about_it() {
    let mut lab = Lab::new(&[]);
    let before: Vec<String> = PER_NAMESPACE.iter().map(|(name, _)| in_namespace(lab.node(), name)).collect();
    lab.start(&["--config", &shipped_config()]);
    let after: Vec<String> = PER_NAMESPACE.iter().map(|(name, _)| in_namespace(lab.node(), name)).collect();
    assert_eq!(after, before, "{}", lab.log_tail());
    // Nothing asked for, so nothing refused: the DaemonSet's read-only
    // /proc/sys produces no "conntrack setting not applied".
    let log = lab.log();
    let about: Vec<&str> = log.lines().filter(|l| l.contains("conntrack setting")).collect();
    assert!(about.is_empty(), "{about:#?}");
}
