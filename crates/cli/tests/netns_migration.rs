//! Swapping proxies on a node, in both directions: what the old proxy left
//! (upstream kube-proxy's iptables chains in either backend and its
//! nftables table, kproxy's tables of another mode, claimed routes) is gone
//! once the new proxy's first sync is in, traffic follows the new rules,
//! and kubelet's chains stay. `kproxy cleanup` and `--cleanup` remove every
//! mode's objects. Without the iptables tools (the default image), the nft
//! backend's chains go over netlink all the same.

mod lab;

use kproxy_model::Protocol;
use lab::*;

const WEB: &str =
    "  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

/// Upstream kube-proxy's nftables table, with a stale DNAT of 10.96.0.11
/// (a Service deleted since) to web-a1.
const UPSTREAM_NFT_TABLE: &str = "table ip kube-proxy {
  chain nat-prerouting { type nat hook prerouting priority -100; ip daddr 10.96.0.11 tcp dport 80 dnat to 10.244.1.10:8080; }
  chain nat-output { type nat hook output priority -100; ip daddr 10.96.0.11 tcp dport 80 dnat to 10.244.1.10:8080; }
}
";

/// Kubelet's chains, which no proxy may remove.
const KUBELET_CHAINS: &str = "*mangle\n:KUBE-KUBELET-CANARY - [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n\
                              *filter\n:KUBE-FIREWALL - [0:0]\nCOMMIT\n";

/// web-a1 on node-a, web-b1 on node-b, client-a1; web serves web-a1 only.
fn lab() -> Lab {
    let lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    lab.set_app("web-b1", Some("other"));
    lab.write("web.yaml", &service("web", WEB));
    lab
}

/// Both families' `iptables-save` of `backend` in node-a.
fn saved(lab: &Lab, backend: &str) -> String {
    ["iptables", "ip6tables"]
        .map(|tool| lab.node().exec(&format!("{tool}-{backend}-save"), &[]).expect("iptables-save in node-a"))
        .join("")
}

/// The `KUBE-*` chains `backend` declares in node-a, kubelet's included.
fn kube_chains(lab: &Lab, backend: &str) -> Vec<String> {
    let mut chains: Vec<String> = saved(lab, backend)
        .lines()
        .filter_map(|l| l.strip_prefix(':')?.split(' ').next())
        .filter(|c| c.starts_with("KUBE-"))
        .map(str::to_owned)
        .collect();
    chains.sort();
    chains.dedup();
    chains
}

fn load_kubelet_chains(lab: &Lab, backend: &str) {
    let path = lab.dir.path().join("kubelet.rules");
    std::fs::write(&path, KUBELET_CHAINS).expect("writing kubelet's chains");
    for tool in ["iptables", "ip6tables"] {
        lab.node()
            .exec(&format!("{tool}-{backend}-restore"), &["--noflush", &path.display().to_string()])
            .expect("loading kubelet's chains");
    }
}

fn nft_tables(lab: &Lab) -> String {
    lab.node().exec("nft", &["list", "tables"]).unwrap_or_default()
}

/// Only `backend` answers `to` from the client pod, `count` times out of `count`.
fn only(lab: &Lab, to: &str, backend: &str) -> bool {
    let client = &lab.pod("client-a1").ns;
    backends(&lab.spread(client, to, Protocol::Tcp, 12)) == [backend]
}

/// Upstream kube-proxy's iptables layout in `old` (rendered from the
/// iptables mode, which writes upstream's chains and rules) and its
/// nftables table hold stale rules; kproxy starts in `new`: once its first
/// sync is in, none of them is left and traffic follows kproxy's.
fn upstream_rules_go_when_kproxy_starts(old: &'static str, new: Mode) {
    let mut lab = lab();
    load_kubelet_chains(&lab, old);
    lab.load_rendered_iptables(old, &[]);
    let table = lab.dir.path().join("kube-proxy.nft");
    std::fs::write(&table, UPSTREAM_NFT_TABLE).expect("writing the table");
    lab.node().exec("nft", &["-f", &table.display().to_string()]).expect("loading kube-proxy's table");
    // The old proxy's rules serve: web-a1 behind web, 10.96.0.11 too.
    assert!(only(&lab, "10.96.0.10:80", "web-a1"), "the old iptables rules serve");
    assert!(only(&lab, "10.96.0.11:80", "web-a1"), "the old nftables table serves");

    // While no proxy runs, web moves to web-b1.
    lab.set_app("web-a1", Some("other"));
    lab.set_app("web-b1", Some("web"));
    lab.start_mode(new, &[]);
    // Reported once everything is done.
    lab.eventually("the report", || lab.log().contains("removed what other proxy modes left on this node"));
    assert!(!nft_tables(&lab).contains("kube-proxy"), "{new:?}: kube-proxy's table goes");
    assert!(only(&lab, "10.96.0.10:80", "web-b1"), "{new:?}: traffic follows kproxy's rules");
    assert!(
        !matches!(
            lab.request(&lab.pod("client-a1").ns, "10.96.0.11:80", Protocol::Tcp, None),
            Outcome::Answered { .. }
        ),
        "{new:?}: the stale nftables DNAT is gone"
    );
    // In the old backend only kubelet's chains stay.
    assert_eq!(
        kube_chains(&lab, old),
        ["KUBE-FIREWALL", "KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"],
        "{new:?}: {old} holds only kubelet's chains\n{}",
        lab.log_tail()
    );
    let log = lab.log();
    assert!(log.contains("ip kube-proxy"), "the log names the removed table: {log}");
}

#[test]
fn upstream_legacy_iptables_rules_go_when_the_nftables_mode_starts() {
    upstream_rules_go_when_kproxy_starts("legacy", Mode::Nftables);
}

#[test]
fn upstream_nft_iptables_rules_go_when_the_nftables_mode_starts() {
    upstream_rules_go_when_kproxy_starts("nft", Mode::Nftables);
}

/// Kubelet's firewall rules and jumps (IPv4), and someone else's rule in
/// both families: none of it is a proxy's.
const KUBELET_AND_FOREIGN_RULES: [(&str, &str); 2] = [
    (
        "iptables",
        "*filter\n\
         -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" \
         -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP\n\
         -A INPUT -j KUBE-FIREWALL\n-A OUTPUT -j KUBE-FIREWALL\n-A INPUT -p tcp -m tcp --dport 9999 -j ACCEPT\nCOMMIT\n",
    ),
    ("ip6tables", "*filter\n-A INPUT -p tcp -m tcp --dport 9999 -j ACCEPT\nCOMMIT\n"),
];

/// The `-A` lines of both families' `iptables-nft-save` that are not
/// kubelet's or the foreign rule.
fn not_kubelets_or_foreign(saved: &str) -> Vec<&str> {
    let allowed =
        ["-A INPUT -j KUBE-FIREWALL", "-A OUTPUT -j KUBE-FIREWALL", "-A INPUT -p tcp -m tcp --dport 9999 -j ACCEPT"];
    saved
        .lines()
        .filter(|l| l.starts_with("-A ") && !l.starts_with("-A KUBE-FIREWALL ") && !allowed.contains(l))
        .collect()
}

/// The default image has no iptables tools: kube-proxy's iptables-nft
/// chains and the jumps to them go over netlink, kubelet's chains and
/// rules and a foreign rule stay, and traffic follows kproxy's rules.
#[test]
fn upstream_nft_iptables_rules_go_without_the_iptables_tools() {
    let mut lab = lab();
    load_kubelet_chains(&lab, "nft");
    for (tool, rules) in KUBELET_AND_FOREIGN_RULES {
        let path = lab.dir.path().join(format!("{tool}-kubelet.rules"));
        std::fs::write(&path, rules).expect("writing kubelet's rules");
        lab.node()
            .exec(&format!("{tool}-nft-restore"), &["--noflush", &path.display().to_string()])
            .expect("loading kubelet's rules");
    }
    lab.load_rendered_iptables("nft", &[]);
    assert!(only(&lab, "10.96.0.10:80", "web-a1"), "the old iptables rules serve");
    assert!(not_kubelets_or_foreign(&saved(&lab, "nft")).len() > 20, "the old rules are in");

    lab.set_app("web-a1", Some("other"));
    lab.set_app("web-b1", Some("web"));
    // A PATH with no tool at all: kproxy runs none.
    let empty = lab.dir.path().join("no-tools");
    std::fs::create_dir(&empty).expect("an empty folder");
    lab.env.push(("PATH".into(), empty.display().to_string()));
    lab.start_mode(Mode::Nftables, &[]);
    lab.eventually("the report", || lab.log().contains("removed what other proxy modes left on this node"));

    assert!(only(&lab, "10.96.0.10:80", "web-b1"), "traffic follows kproxy's rules\n{}", lab.log_tail());
    assert_eq!(
        kube_chains(&lab, "nft"),
        ["KUBE-FIREWALL", "KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"],
        "only kubelet's chains stay\n{}",
        lab.log_tail()
    );
    let saved = saved(&lab, "nft");
    assert_eq!(not_kubelets_or_foreign(&saved), Vec::<&str>::new(), "{saved}");
    for kept in
        ["-A INPUT -j KUBE-FIREWALL", "-A OUTPUT -j KUBE-FIREWALL", "-A INPUT -p tcp -m tcp --dport 9999 -j ACCEPT"]
    {
        assert!(saved.lines().any(|l| l == kept), "{kept} stays: {saved}");
    }
    assert_eq!(saved.matches("--dport 9999").count(), 2, "the foreign rule stays in both families: {saved}");
    assert!(saved.lines().any(|l| l.starts_with("-A KUBE-FIREWALL ") && l.ends_with("-j DROP")), "{saved}");
    let log = lab.log();
    assert!(log.contains("(nft IPv4: ") && log.contains("(nft IPv6: "), "the log counts the removed chains: {log}");
    assert!(!log.contains("not installed"), "no warning about the missing tools: {log}");
    assert!(!log.contains("cannot remove what another proxy mode left"), "{log}");
}

#[test]
fn upstream_legacy_iptables_rules_go_when_the_iptables_mode_starts_on_nft() {
    upstream_rules_go_when_kproxy_starts("legacy", Mode::Iptables("nft"));
}

#[test]
fn upstream_nft_iptables_rules_go_when_the_iptables_mode_starts_on_legacy() {
    upstream_rules_go_when_kproxy_starts("nft", Mode::Iptables("legacy"));
}

/// The reverse: kproxy's nftables mode (or its userspace mode, with its
/// claimed routes) ran and stopped, leaving its rules; the iptables mode
/// (upstream's layout) starts and they go.
fn kproxy_rules_go_when_an_upstream_layout_starts(old: &str, backend: &'static str) {
    let mut lab = lab();
    lab.start_in(old, &[]);
    lab.eventually("the old mode to serve", || only(&lab, "10.96.0.10:80", "web-a1"));
    lab.stop();
    lab.set_app("web-a1", Some("other"));
    lab.set_app("web-b1", Some("web"));
    lab.start_mode(Mode::Iptables(backend), &[]);
    lab.eventually("the report", || lab.log().contains("removed what other proxy modes left on this node"));
    assert!(!nft_tables(&lab).contains("kproxy"), "kproxy's tables go");
    // The userspace mode's claims: local routes of protocol 107.
    let claimed = lab.node().exec("ip", &["route", "show", "table", "local", "proto", "107"]).unwrap_or_default();
    assert!(!claimed.contains("10.96.0.10"), "claimed routes go: {claimed}");
    assert!(only(&lab, "10.96.0.10:80", "web-b1"), "traffic follows the iptables rules\n{}", lab.log_tail());
}

#[test]
fn kproxys_nftables_tables_go_when_the_iptables_mode_starts() {
    kproxy_rules_go_when_an_upstream_layout_starts("nftables", "nft");
}

#[test]
fn the_userspace_modes_routes_go_when_the_iptables_mode_starts() {
    kproxy_rules_go_when_an_upstream_layout_starts("userspace", "legacy");
}

#[test]
fn cleanup_without_a_mode_removes_every_modes_rules_and_kubelets_chains_stay() {
    let lab = lab();
    // kproxy's nftables mode ran once (its tables stay), then kube-proxy's
    // iptables rules went into both backends and its nftables table in.
    let dir = lab.dir.path().display().to_string();
    let mut once = vec!["run", "--once", "--manifests", &dir];
    let flags = Lab::flags();
    once.extend(flags.iter().map(String::as_str));
    let (ok, out) = lab.kproxy(&once);
    assert!(ok, "{out}");
    assert!(nft_tables(&lab).contains("table ip kproxy"));
    for backend in ["legacy", "nft"] {
        load_kubelet_chains(&lab, backend);
        lab.load_rendered_iptables(backend, &[]);
    }
    let table = lab.dir.path().join("kube-proxy.nft");
    std::fs::write(&table, UPSTREAM_NFT_TABLE).expect("writing the table");
    lab.node().exec("nft", &["-f", &table.display().to_string()]).expect("loading kube-proxy's table");

    let (ok, out) = lab.kproxy(&["cleanup"]);
    assert!(ok, "{out}");
    let tables = nft_tables(&lab);
    assert!(!tables.contains("kproxy") && !tables.contains("kube-proxy"), "every proxy table goes: {tables}\n{out}");
    for backend in ["legacy", "nft"] {
        assert_eq!(
            kube_chains(&lab, backend),
            ["KUBE-FIREWALL", "KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"],
            "{backend}: {out}"
        );
    }
    assert!(out.contains("ip kube-proxy") && out.contains("ip kproxy"), "{out}");
    assert!(!out.contains("iptables: 0 chains"), "{out}");
    // kube-proxy's flag, on a node with nothing left: nothing to do, exit 0.
    let (ok, out) = lab.kproxy(&["--cleanup"]);
    assert!(ok && out.contains("nftables tables: none"), "{out}");
    let (ok, out) = lab.kproxy(&["run", "--cleanup"]);
    assert!(ok && out.contains("iptables: 0 chains"), "{out}");
}
