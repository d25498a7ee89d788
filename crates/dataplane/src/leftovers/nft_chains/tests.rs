use kproxy_nftables::ast::Verdict;

use super::*;

fn listed(tables: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    tables.iter().map(|(t, chains)| ((*t).to_owned(), chains.iter().map(|c| (*c).to_owned()).collect())).collect()
}

fn rule(chain: &str, handle: u64, verdict: Option<Verdict>) -> ListedRule {
    ListedRule { chain: chain.into(), handle, verdict }
}

fn jump(chain: &str) -> Option<Verdict> {
    Some(Verdict::Jump(chain.into()))
}

fn upstream(table: &str, chain: &str) -> bool {
    kproxy_iptables::names::is_proxy_chain(table, chain)
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(t, c)| ((*t).to_owned(), (*c).to_owned())).collect()
}

#[test]
fn proxy_chains_are_selected_and_built_in_and_kubelets_chains_are_not() {
    let listed = listed(&[
        ("filter", &["INPUT", "KUBE-FIREWALL", "KUBE-SERVICES", "KUBE-FORWARD", "CALI-INPUT"]),
        ("nat", &["PREROUTING", "KUBE-SERVICES", "KUBE-SVC-AAAA", "KUBE-MARK-MASQ", "POSTROUTING"]),
        ("mangle", &["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"]),
    ]);
    let selected = select(&listed, &upstream);
    let names: Vec<(&str, Vec<&str>)> =
        selected.iter().map(|(t, chains)| (*t, chains.iter().map(String::as_str).collect())).collect();
    assert_eq!(
        names,
        [
            ("filter", vec!["KUBE-FORWARD", "KUBE-SERVICES"]),
            ("nat", vec!["KUBE-MARK-MASQ", "KUBE-SERVICES", "KUBE-SVC-AAAA"])
        ],
        "mangle holds only kubelet's chains"
    );
    let ipvs_only = select(&listed, &kproxy_iptables::names::is_ipvs_mode_chain);
    assert!(ipvs_only.is_empty(), "no chain here is the IPVS mode's alone: {ipvs_only:?}");
}

#[test]
fn built_in_jumps_go_by_handle_then_every_doomed_chain_is_flushed_then_deleted() {
    let selected: BTreeMap<&'static str, BTreeSet<String>> =
        [("nat", ["KUBE-SERVICES".to_owned(), "KUBE-SVC-AAAA".to_owned()].into())].into();
    let rules = [(
        "nat",
        vec![
            rule("PREROUTING", 7, jump("KUBE-SERVICES")),
            rule("PREROUTING", 8, Some(Verdict::Accept)),
            rule("OUTPUT", 9, Some(Verdict::Goto("KUBE-SERVICES".into()))),
            rule("POSTROUTING", 11, jump("SOMEONE-ELSES")),
            rule("POSTROUTING", 12, None),
        ],
    )]
    .into();
    let removal = plan(&selected, &rules, &BTreeMap::new());
    assert_eq!(
        removal.ops,
        [(
            "nat",
            vec![
                Op::DeleteRule { chain: "PREROUTING".into(), handle: 7 },
                Op::DeleteRule { chain: "OUTPUT".into(), handle: 9 },
                Op::FlushChain("KUBE-SERVICES".into()),
                Op::FlushChain("KUBE-SVC-AAAA".into()),
                Op::DeleteChain("KUBE-SERVICES".into()),
                Op::DeleteChain("KUBE-SVC-AAAA".into()),
            ]
        )]
    );
    assert_eq!(removal.removed.cleaned.jumps, 2);
    assert_eq!(removal.removed.cleaned.chains, owned(&[("nat", "KUBE-SERVICES"), ("nat", "KUBE-SVC-AAAA")]));
    assert!(removal.removed.kept.is_empty());
}

#[test]
fn a_doomed_chain_another_chain_jumps_to_is_flushed_and_stays() {
    let selected: BTreeMap<&'static str, BTreeSet<String>> =
        [("filter", ["KUBE-SERVICES".to_owned(), "KUBE-FORWARD".to_owned()].into())].into();
    let rules =
        [("filter", vec![rule("INPUT", 5, jump("KUBE-SERVICES")), rule("CALI-INPUT", 20, jump("KUBE-SERVICES"))])]
            .into();
    let removal = plan(&selected, &rules, &BTreeMap::new());
    let [(table, ops)] = removal.ops.as_slice() else { panic!("one table: {:?}", removal.ops) };
    assert_eq!(*table, "filter");
    assert!(ops.contains(&Op::FlushChain("KUBE-SERVICES".into())), "{ops:?}");
    assert!(!ops.contains(&Op::DeleteChain("KUBE-SERVICES".into())), "{ops:?}");
    assert!(ops.contains(&Op::DeleteChain("KUBE-FORWARD".into())), "{ops:?}");
    assert_eq!(removal.removed.cleaned.jumps, 1, "INPUT's jump goes all the same");
    assert_eq!(
        removal.removed.kept,
        [("filter".to_owned(), "KUBE-SERVICES".to_owned(), "chain CALI-INPUT jumps to it".to_owned())]
    );
    assert_eq!(removal.removed.cleaned.chains, owned(&[("filter", "KUBE-FORWARD")]));
}

#[test]
fn a_chain_the_kernel_refused_to_delete_stays_with_its_reason() {
    let selected: BTreeMap<&'static str, BTreeSet<String>> =
        [("nat", ["KUBE-SVC-AAAA".to_owned(), "KUBE-SVC-BBBB".to_owned()].into())].into();
    let pinned = [(("nat", "KUBE-SVC-BBBB".to_owned()), "the kernel refused: busy".to_owned())].into();
    let removal = plan(&selected, &BTreeMap::new(), &pinned);
    assert_eq!(
        removal.ops[0].1,
        [
            Op::FlushChain("KUBE-SVC-AAAA".into()),
            Op::FlushChain("KUBE-SVC-BBBB".into()),
            Op::DeleteChain("KUBE-SVC-AAAA".into())
        ]
    );
    assert_eq!(
        removal.removed.kept,
        [("nat".to_owned(), "KUBE-SVC-BBBB".to_owned(), "the kernel refused: busy".to_owned())]
    );
}
