//! The iptables edge against a real kernel, on both backends, each test in
//! throwaway network namespaces: restores with `--noflush` read back with
//! `*-save`, refusals naming the payload line, backend detection, the
//! canary chains and cleanup. Needs root and the `iptables` package; fails
//! (never skips) without sandboxes.

use kproxy_iptables_exec::{
    Backend, BackendChoice, CANARY_CHAIN, Cleanup, Detection, Iptables, IptablesError, JumpRule, Reason, Table, detect,
};
use std::collections::HashMap;

use kproxy_model::IpFamily;
use kproxy_sandbox::{Netns, available};

fn netns(prefix: &str) -> Netns {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    Netns::new(prefix).expect("a network namespace")
}

/// Runs `f` on a current-thread runtime inside `ns`, so the tools it
/// spawns run in `ns`.
fn inside<T: Send>(ns: &Netns, f: impl AsyncFnOnce() -> T + Send) -> T {
    ns.enter(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(f())
    })
}

fn restore(ns: &Netns, backend: Backend, family: IpFamily, payload: &str) -> Result<(), IptablesError> {
    inside(ns, async || Iptables::new(backend).restore(family, payload).await)
}

/// The chain declarations and rules of `*-save`, without comments or counters.
fn saved(ns: &Netns, backend: Backend, family: IpFamily) -> Vec<String> {
    let dump = ns.exec(&backend.save(family), &[]).expect("a save dump");
    dump.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.strip_prefix(':') {
            Some(chain) => format!(":{}", chain.split_whitespace().take(2).collect::<Vec<_>>().join(" ")),
            None => l.to_owned(),
        })
        .collect()
}

/// The lines of `saved` that declare or fill one of `chains`.
fn of_chains(saved: &[String], chains: &[&str]) -> Vec<String> {
    saved
        .iter()
        .filter(|l| {
            let name = l.strip_prefix(':').or_else(|| l.strip_prefix("-A ")).and_then(|r| r.split(' ').next());
            name.is_some_and(|n| chains.contains(&n))
        })
        .cloned()
        .collect()
}

/// The lines of one table's section, from `*table` to its `COMMIT`.
fn section(lines: &[String], table: &str) -> Vec<String> {
    let header = format!("*{table}");
    lines.iter().skip_while(|l| **l != header).take_while(|l| *l != "COMMIT").cloned().collect()
}

fn run(ns: &Netns, program: &str, args: &[&str]) {
    ns.exec(program, args).unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
}

const NAT_AND_FILTER: &str = "\
*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-AAAA - [0:0]
:KUBE-SVC-BBBB - [0:0]
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-AAAA
-A KUBE-SERVICES -d 10.96.0.11/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-BBBB
-A KUBE-SVC-AAAA -p tcp -m tcp -j DNAT --to-destination 10.0.1.1:8080
-A KUBE-SVC-BBBB -p tcp -m tcp -j DNAT --to-destination 10.0.1.2:8080
COMMIT
*filter
:KUBE-FORWARD - [0:0]
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
COMMIT
";

#[test]
fn a_noflush_restore_is_read_back_by_save_on_both_backends() {
    for backend in Backend::ALL {
        let ns = netns("ipt-rest");
        restore(&ns, backend, IpFamily::V4, NAT_AND_FILTER).unwrap();
        let v6 = NAT_AND_FILTER
            .replace("10.96.0.", "fd00:96::")
            .replace("/32", "/128")
            .replace("10.0.1.1:8080", "[fd00:1::1]:8080");
        let v6 = v6.replace("10.0.1.2:8080", "[fd00:1::2]:8080");
        restore(&ns, backend, IpFamily::V6, &v6).unwrap();

        for (family, payload) in [(IpFamily::V4, NAT_AND_FILTER), (IpFamily::V6, v6.as_str())] {
            let saved = saved(&ns, backend, family);
            let payload: Vec<String> = payload.lines().map(|l| l.replace(" [0:0]", "")).collect();
            let chains = ["KUBE-SERVICES", "KUBE-SVC-AAAA", "KUBE-SVC-BBBB", "KUBE-FORWARD"];
            for table in ["nat", "filter"] {
                let wanted: Vec<String> =
                    section(&payload, table).into_iter().filter(|l| l.starts_with([':', '-'])).collect();
                assert_eq!(of_chains(&section(&saved, table), &chains), wanted, "{backend} {family:?} {table}");
            }
        }
    }
}

#[test]
fn reapplying_one_chain_leaves_the_other_chains_untouched() {
    for backend in Backend::ALL {
        let ns = netns("ipt-part");
        let iptables = backend.iptables(IpFamily::V4);
        run(&ns, &iptables, &["-t", "nat", "-N", "FOREIGN"]);
        run(&ns, &iptables, &["-t", "nat", "-A", "FOREIGN", "-j", "RETURN"]);
        restore(&ns, backend, IpFamily::V4, NAT_AND_FILTER).unwrap();
        let before = saved(&ns, backend, IpFamily::V4);

        let partial = "*nat\n:KUBE-SVC-AAAA - [0:0]\n-A KUBE-SVC-AAAA -p tcp -m tcp -j DNAT --to-destination 10.0.1.9:8080\nCOMMIT\n";
        restore(&ns, backend, IpFamily::V4, partial).unwrap();
        let after = saved(&ns, backend, IpFamily::V4);

        assert_eq!(
            of_chains(&after, &["KUBE-SVC-AAAA"]),
            [":KUBE-SVC-AAAA -", "-A KUBE-SVC-AAAA -p tcp -m tcp -j DNAT --to-destination 10.0.1.9:8080"],
            "{backend}"
        );
        let others = ["KUBE-SERVICES", "KUBE-SVC-BBBB", "KUBE-FORWARD", "FOREIGN"];
        assert_eq!(of_chains(&after, &others), of_chains(&before, &others), "{backend}");
        assert_eq!(of_chains(&after, &["FOREIGN"]), [":FOREIGN -", "-A FOREIGN -j RETURN"], "{backend}");
    }
}

#[test]
fn a_refused_payload_names_its_line_and_commits_nothing_of_that_table() {
    for backend in Backend::ALL {
        let ns = netns("ipt-err");
        let payload =
            "*filter\n:KUBE-NEW - [0:0]\n-A KUBE-NEW -j ACCEPT\n-A KUBE-NEW -p tcp --bogus 1 -j ACCEPT\nCOMMIT\n";
        let error = restore(&ns, backend, IpFamily::V4, payload).unwrap_err();
        let IptablesError::Refused { line, ref offending, ref command, .. } = error else {
            panic!("{backend}: not a refusal: {error}");
        };
        assert_eq!(line, Some(4), "{backend}: {error}");
        assert_eq!(offending.as_deref(), Some("-A KUBE-NEW -p tcp --bogus 1 -j ACCEPT"), "{backend}");
        assert_eq!(command, &format!("iptables-{backend}-restore --noflush -w 5"));
        let message = error.to_string();
        assert!(message.contains("--bogus") && message.contains("payload line 4"), "{message}");
        assert!(of_chains(&saved(&ns, backend, IpFamily::V4), &["KUBE-NEW"]).is_empty(), "{backend}");
    }
}

#[test]
fn a_streamed_payload_is_one_restore_and_its_refused_line_is_asked_for() {
    for backend in Backend::ALL {
        let ns = netns("ipt-stream");
        // Three chunks, one table: the second chunk's rule is refused, so
        // the chain the first chunk declared is not committed either.
        let chunks = [
            "*filter\n:KUBE-NEW - [0:0]\n",
            "-A KUBE-NEW -j ACCEPT\n-A KUBE-NEW -p tcp --bogus 1 -j ACCEPT\n",
            "COMMIT\n",
        ];
        let whole = chunks.concat();
        let mut asked = None;
        let line = |n: usize| {
            asked = Some(n);
            whole.lines().nth(n - 1).map(str::to_owned)
        };
        let tools = Iptables::new(backend);
        let chunked = chunks.iter().map(|c| c.to_string());
        let error = inside(&ns, async || tools.restore_streamed(IpFamily::V4, chunked, line).await).unwrap_err();
        let IptablesError::Refused { line, ref offending, .. } = error else {
            panic!("{backend}: not a refusal: {error}");
        };
        assert_eq!((line, asked), (Some(4), Some(4)), "{backend}: {error}");
        assert_eq!(offending.as_deref(), Some("-A KUBE-NEW -p tcp --bogus 1 -j ACCEPT"), "{backend}");
        assert!(of_chains(&saved(&ns, backend, IpFamily::V4), &["KUBE-NEW"]).is_empty(), "{backend}");

        let good = ["*filter\n:KUBE-NEW - [0:0]\n", "-A KUBE-NEW -j ACCEPT\n", "COMMIT\n"];
        let chunked = good.iter().map(|c| c.to_string());
        let sent = inside(&ns, async || tools.restore_streamed(IpFamily::V4, chunked, |_| None).await);
        assert_eq!(sent.expect("a valid payload"), good.concat().len(), "{backend}");
        let saved = saved(&ns, backend, IpFamily::V4);
        assert_eq!(of_chains(&saved, &["KUBE-NEW"]), [":KUBE-NEW -", "-A KUBE-NEW -j ACCEPT"], "{backend}");
    }
}

fn detected(ns: &Netns) -> Detection {
    inside(ns, async || detect(BackendChoice::Auto).await).expect("a backend")
}

#[test]
fn detection_picks_the_backend_holding_the_rules_and_nft_when_neither_does() {
    let empty = netns("ipt-det0");
    assert_eq!(detected(&empty), Detection { backend: Backend::Nft, reason: Reason::Default });

    let legacy = netns("ipt-detl");
    run(&legacy, "iptables-legacy", &["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"]);
    run(&legacy, "ip6tables-legacy", &["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"]);
    assert_eq!(
        detected(&legacy),
        Detection { backend: Backend::Legacy, reason: Reason::MoreRules { legacy: 2, nft: 0 } }
    );

    let nft = netns("ipt-detn");
    run(&nft, "iptables-nft", &["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"]);
    run(&nft, "iptables-legacy", &["-N", "EMPTY"]);
    assert_eq!(detected(&nft), Detection { backend: Backend::Nft, reason: Reason::MoreRules { legacy: 0, nft: 1 } });

    let configured = inside(&legacy, async || detect(BackendChoice::Fixed(Backend::Nft)).await).unwrap();
    assert_eq!(configured, Detection { backend: Backend::Nft, reason: Reason::Configured });
}

#[test]
fn kubelets_hint_chain_outweighs_the_rule_counts() {
    let nft = netns("ipt-hintn");
    for _ in 0..3 {
        run(&nft, "iptables-legacy", &["-A", "INPUT", "-j", "ACCEPT"]);
    }
    run(&nft, "ip6tables-nft", &["-t", "mangle", "-N", "KUBE-IPTABLES-HINT"]);
    assert_eq!(detected(&nft), Detection { backend: Backend::Nft, reason: Reason::KubeletHint });

    let legacy = netns("ipt-hintl");
    for _ in 0..3 {
        run(&legacy, "iptables-nft", &["-A", "INPUT", "-j", "ACCEPT"]);
    }
    run(&legacy, "iptables-legacy", &["-t", "mangle", "-N", "KUBE-KUBELET-CANARY"]);
    assert_eq!(detected(&legacy), Detection { backend: Backend::Legacy, reason: Reason::KubeletHint });
}

#[test]
fn the_canary_is_present_after_setup_and_gone_after_a_flush() {
    for backend in Backend::ALL {
        let ns = netns("ipt-can");
        let present = |family| inside(&ns, async || Iptables::new(backend).canary_present(family).await).unwrap();
        assert!(!present(IpFamily::V4), "{backend}: no canary before setup");

        for family in IpFamily::ALL {
            inside(&ns, async || Iptables::new(backend).ensure_canary(family).await).unwrap();
        }
        assert!(present(IpFamily::V4) && present(IpFamily::V6), "{backend}");
        // Setting up again keeps them.
        inside(&ns, async || Iptables::new(backend).ensure_canary(IpFamily::V4).await).unwrap();
        assert!(present(IpFamily::V4), "{backend}");

        // What a firewall reload does to one table.
        let iptables = backend.iptables(IpFamily::V4);
        run(&ns, &iptables, &["-t", "nat", "-F"]);
        run(&ns, &iptables, &["-t", "nat", "-X", CANARY_CHAIN]);
        assert!(!present(IpFamily::V4), "{backend}: the nat canary is gone");
        assert!(present(IpFamily::V6), "{backend}: IPv6 was not flushed");
    }
}

#[test]
fn cleanup_removes_exactly_the_listed_chains_and_jumps() {
    for backend in Backend::ALL {
        let ns = netns("ipt-clean");
        let payload = "\
*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-AAAA - [0:0]
:KUBE-KEEP - [0:0]
-A PREROUTING -p tcp -m tcp --dport 22 -j ACCEPT
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-SERVICES -j KUBE-SVC-AAAA
-A KUBE-SVC-AAAA -j RETURN
-A KUBE-KEEP -j RETURN
COMMIT
*filter
:KUBE-SVC-FFFF - [0:0]
:FOREIGN - [0:0]
-A FOREIGN -j RETURN
COMMIT
";
        restore(&ns, backend, IpFamily::V4, payload).unwrap();
        let jump = |chain: &str| JumpRule {
            table: Table::Nat,
            chain: chain.to_owned(),
            spec: ["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"]
                .map(str::to_owned)
                .to_vec(),
        };
        let what = Cleanup {
            jumps: vec![jump("PREROUTING"), jump("OUTPUT"), jump("POSTROUTING")],
            chain_prefixes: vec!["KUBE-SERVICES".to_owned(), "KUBE-SVC-".to_owned()],
        };
        let cleaned = inside(&ns, async || Iptables::new(backend).cleanup(IpFamily::V4, &what).await).unwrap();
        assert_eq!(cleaned.jumps, 3, "{backend}");
        let chains: Vec<(&str, &str)> = cleaned.chains.iter().map(|(t, c)| (t.as_str(), c.as_str())).collect();
        assert_eq!(chains, [("filter", "KUBE-SVC-FFFF"), ("nat", "KUBE-SERVICES"), ("nat", "KUBE-SVC-AAAA")]);

        let after = saved(&ns, backend, IpFamily::V4);
        let rules: Vec<&str> = after.iter().filter(|l| l.starts_with(['-', ':'])).map(String::as_str).collect();
        // Sorted: the backends dump their tables in different orders.
        let mut user_chains_and_rules: Vec<&str> =
            rules.into_iter().filter(|l| l.starts_with('-') || l.ends_with(" -")).collect();
        user_chains_and_rules.sort();
        assert_eq!(
            user_chains_and_rules,
            [
                "-A FOREIGN -j RETURN",
                "-A KUBE-KEEP -j RETURN",
                "-A PREROUTING -p tcp -m tcp --dport 22 -j ACCEPT",
                ":FOREIGN -",
                ":KUBE-KEEP -",
            ],
            "{backend}: {after:#?}"
        );

        // A second cleanup finds nothing left to remove.
        let again = inside(&ns, async || Iptables::new(backend).cleanup(IpFamily::V4, &what).await).unwrap();
        assert_eq!((again.jumps, again.chains.len()), (0, 0), "{backend}");
    }
}

/// The `KUBE-*` chains of `listed`, sorted, per table.
fn kube_chains(listed: &HashMap<Table, Vec<String>>) -> Vec<(Table, Vec<String>)> {
    let mut out: Vec<(Table, Vec<String>)> = listed
        .iter()
        .map(|(t, names)| {
            let mut kube: Vec<String> = names.iter().filter(|n| n.starts_with("KUBE-")).cloned().collect();
            kube.sort();
            (*t, kube)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn chains_are_listed_per_table_on_both_backends() {
    for backend in Backend::ALL {
        let ns = netns("a-list");
        restore(&ns, backend, IpFamily::V4, NAT_AND_FILTER).unwrap();
        restore(&ns, backend, IpFamily::V4, "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n").unwrap();
        let iptables = Iptables::new(backend);
        let listed = inside(&ns, async || iptables.chains(IpFamily::V4, &[Table::Filter, Table::Nat]).await)
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        let nat = ["KUBE-SERVICES", "KUBE-SVC-AAAA", "KUBE-SVC-BBBB"].map(String::from).to_vec();
        let want = vec![(Table::Filter, vec!["KUBE-FORWARD".to_owned()]), (Table::Nat, nat)];
        assert_eq!(kube_chains(&listed), want, "{backend}: mangle's chain is not listed");

        // The nft backend lists over netlink: the same names `*-save` declares.
        let mut declared: Vec<String> = saved(&ns, backend, IpFamily::V4)
            .iter()
            .filter_map(|l| Some(l.strip_prefix(':')?.split(' ').next()?.to_owned()))
            .filter(|c| c.starts_with("KUBE-") && c != "KUBE-IPTABLES-HINT")
            .collect();
        declared.sort();
        let mut listed_kube: Vec<String> = kube_chains(&listed).into_iter().flat_map(|(_, c)| c).collect();
        listed_kube.sort();
        assert_eq!(listed_kube, declared, "{backend}");

        let six = inside(&ns, async || iptables.chains(IpFamily::V6, &[Table::Filter, Table::Nat]).await)
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(kube_chains(&six), [(Table::Filter, vec![]), (Table::Nat, vec![])], "{backend}: no IPv6 chains");
    }
}
