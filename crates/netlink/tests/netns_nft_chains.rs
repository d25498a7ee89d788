//! Listing chain names and rules over netlink against a real kernel, in
//! throwaway network namespaces: chains made by `iptables-nft-restore`
//! are listed per table and family, other tables' are not, and a dump of
//! 20,000 chains (many receive buffers) comes back whole; rules are listed
//! with the handles and jumps `nft -a` shows, and go by handle. They need
//! root and the `iptables` package, and fail (never skip) without
//! sandboxes.

use std::time::Instant;

use kproxy_model::IpFamily;
use kproxy_netlink::nft::{apply, chain_names, chain_names_by_table, encode_tables, rules};
use kproxy_nftables::Op;
use kproxy_sandbox::{Netns, available};

fn netns(prefix: &str) -> Netns {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    Netns::new(prefix).expect("a network namespace")
}

/// Feeds `payload` to `tool --noflush` inside `ns`.
fn restore(ns: &Netns, tool: &str, payload: &str) {
    let file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(file.path(), payload).expect("the payload is written");
    let path = file.path().to_str().expect("a UTF-8 temporary path");
    ns.exec("sh", &["-c", &format!("{tool} --noflush -w 5 < {path}")])
        .unwrap_or_else(|e| panic!("{tool} takes the payload: {e}"));
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// The chains `nft list table FAMILY TABLE` shows (`\tchain NAME {` lines), sorted.
fn nft_chains(ns: &Netns, family: &str, table: &str) -> Vec<String> {
    let listing = ns.exec("nft", &["list", "table", family, table]).expect("nft lists the table");
    let names = listing.lines().filter_map(|l| l.trim().strip_prefix("chain ")?.strip_suffix(" {")).map(str::to_owned);
    sorted(names.collect())
}

const V4_PAYLOAD: &str = "\
*mangle
:KUBE-IPTABLES-HINT - [0:0]
COMMIT
*filter
:KUBE-FORWARD - [0:0]
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-AAAA - [0:0]
:KUBE-SEP-BBBB - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A KUBE-SERVICES -j KUBE-SVC-AAAA
-A KUBE-SVC-AAAA -j KUBE-SEP-BBBB
COMMIT
";

#[test]
fn chains_are_listed_per_table_and_family() {
    let ns = netns("a-chains");
    restore(&ns, "iptables-nft-restore", V4_PAYLOAD);
    restore(&ns, "ip6tables-nft-restore", "*nat\n:KUBE-SVC-SIX - [0:0]\nCOMMIT\n");

    let nat = sorted(ns.enter(|| chain_names(IpFamily::V4, "nat")).expect("the nat chains are listed"));
    // Base chains are chains too. iptables-nft (1.8.9 and later) makes one
    // only when a rule needs it, older versions make them all: nft is the
    // judge of which exist.
    let want = ["KUBE-SEP-BBBB", "KUBE-SERVICES", "KUBE-SVC-AAAA", "PREROUTING"];
    assert!(want.iter().all(|c| nat.contains(&(*c).to_owned())), "{nat:?}");
    assert_eq!(nat, nft_chains(&ns, "ip", "nat"));
    let filter = sorted(ns.enter(|| chain_names(IpFamily::V4, "filter")).expect("the filter chains are listed"));
    assert!(filter.contains(&"KUBE-FORWARD".to_owned()), "{filter:?}");
    assert_eq!(filter, nft_chains(&ns, "ip", "filter"));
    assert!(!nat.iter().chain(&filter).any(|c| c == "KUBE-IPTABLES-HINT"), "mangle's chain is in no other table");

    let both = ns.enter(|| chain_names_by_table(IpFamily::V4, &["filter", "nat"])).expect("both tables are listed");
    assert_eq!(both.keys().collect::<Vec<_>>(), ["filter", "nat"], "mangle is not listed");
    assert_eq!(sorted(both["nat"].clone()), nat);
    assert_eq!(sorted(both["filter"].clone()), filter);

    let six = ns.enter(|| chain_names_by_table(IpFamily::V6, &["filter", "nat"])).expect("the IPv6 chains are listed");
    assert!(six["nat"].contains(&"KUBE-SVC-SIX".to_owned()), "{six:?}");
    assert!(!six["nat"].iter().any(|c| c.starts_with("KUBE-SVC-AAAA")), "IPv4 chains are not IPv6's: {six:?}");
    assert_eq!(six["filter"], Vec::<String>::new(), "ip6 filter was never made");
}

#[test]
fn a_missing_table_has_no_chains() {
    let ns = netns("a-none");
    let nat = ns.enter(|| chain_names(IpFamily::V4, "nat")).expect("listing a missing table is no error");
    assert_eq!(nat, Vec::<String>::new());
    let both = ns.enter(|| chain_names_by_table(IpFamily::V6, &["filter", "nat"])).expect("nor are two");
    assert!(both.values().all(Vec::is_empty), "{both:?}");
}

#[test]
fn a_dump_of_20000_chains_comes_back_whole() {
    const CHAINS: usize = 20_000;
    let ns = netns("a-many");
    // Declared in descending name order: iptables-nft inserts each new
    // chain in its sorted list, which is quadratic for any other order.
    let mut names: Vec<String> = (0..CHAINS).map(|i| format!("KUBE-SEP-{i:06}")).collect();
    names.reverse();
    let mut payload = String::from("*nat\n");
    for name in &names {
        payload.push_str(&format!(":{name} - [0:0]\n"));
    }
    payload.push_str("COMMIT\n");
    restore(&ns, "iptables-nft-restore", &payload);

    let started = Instant::now();
    let listed = ns.enter(|| chain_names(IpFamily::V4, "nat")).expect("the nat chains are listed");
    let took = started.elapsed();
    let mut kube: Vec<String> = listed.into_iter().filter(|c| c.starts_with("KUBE-")).collect();
    kube.sort();
    names.sort();
    assert_eq!(kube.len(), CHAINS, "every chain is listed once");
    assert!(kube == names, "the listed names are the chains made");
    assert!(took.as_secs() < 2, "listing {CHAINS} chains took {took:?}");
}

/// `(chain, handle, jump target)` of every rule `nft -a list table` shows
/// that jumps (` jump CHAIN # handle N`).
fn nft_jumps(ns: &Netns, family: &str, table: &str) -> Vec<(String, u64, String)> {
    let listing = ns.exec("nft", &["-a", "list", "table", family, table]).expect("nft lists the table");
    let mut chain = String::new();
    let mut out = Vec::new();
    for line in listing.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("chain ").and_then(|l| l.split(' ').next()) {
            chain = name.to_owned();
        } else if let Some((rule, handle)) = line.split_once(" # handle ")
            && let Some(target) = rule.split_once("jump ").map(|(_, t)| t)
        {
            out.push((chain.clone(), handle.parse().expect("a handle"), target.to_owned()));
        }
    }
    out
}

#[test]
fn rules_are_listed_with_their_handles_and_jumps_and_go_by_handle() {
    let ns = netns("a-rules");
    restore(&ns, "iptables-nft-restore", V4_PAYLOAD);
    let chains = ["PREROUTING", "KUBE-SERVICES", "KUBE-SVC-AAAA", "KUBE-SEP-BBBB", "NO-SUCH-CHAIN"];
    let listed = ns.enter(|| rules(IpFamily::V4, "nat", &chains)).expect("the rules are listed");
    let mut jumps: Vec<(String, u64, String)> =
        listed.iter().filter_map(|r| Some((r.chain.clone(), r.handle, r.target()?.to_owned()))).collect();
    jumps.sort();
    let mut want = nft_jumps(&ns, "ip", "nat");
    want.sort();
    assert_eq!(jumps, want, "{listed:?}");
    assert_eq!(jumps.len(), 3, "{listed:?}");
    let prerouting = listed.iter().find(|r| r.chain == "PREROUTING").expect("the jump from PREROUTING").handle;

    // The jump from PREROUTING goes by its handle, and the chains behind
    // it with it, in one transaction over two tables.
    let ops = vec![
        (
            "nat",
            vec![
                Op::DeleteRule { chain: "PREROUTING".into(), handle: prerouting },
                Op::FlushChain("KUBE-SERVICES".into()),
                Op::FlushChain("KUBE-SVC-AAAA".into()),
                Op::DeleteChain("KUBE-SERVICES".into()),
                Op::DeleteChain("KUBE-SVC-AAAA".into()),
            ],
        ),
        ("filter", vec![Op::DeleteChain("KUBE-FORWARD".into())]),
    ];
    ns.enter(|| apply(&encode_tables(IpFamily::V4, &ops, 1))).expect("the kernel takes the transaction");
    assert_eq!(nft_chains(&ns, "ip", "nat"), ["KUBE-SEP-BBBB", "PREROUTING"]);
    assert!(!nft_chains(&ns, "ip", "filter").contains(&"KUBE-FORWARD".to_owned()));
    let left = ns.enter(|| rules(IpFamily::V4, "nat", &["PREROUTING"])).expect("the rules are listed");
    assert_eq!(left, [], "PREROUTING's jump is gone");
}
