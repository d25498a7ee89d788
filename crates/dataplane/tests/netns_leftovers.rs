//! Removing kube-proxy's iptables-nft chains over netlink against a real
//! kernel, in throwaway network namespaces: what another chain still
//! refers to stays (flushed) and is reported, whether the reference is a
//! rule the listing sees or one only the kernel knows (a verdict map).
//! They need root and the `iptables` package (to set up, never in the code
//! under test), and fail (never skip) without sandboxes.

use kproxy_dataplane::leftovers::{Keeping, Leftovers, remove};
use kproxy_iptables_exec::Backend;
use kproxy_model::IpFamily;
use kproxy_sandbox::{Netns, available};

fn netns(prefix: &str) -> Netns {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    Netns::new(prefix).expect("a network namespace")
}

/// Feeds `payload` to `iptables-nft-restore --noflush` inside `ns`.
fn restore(ns: &Netns, payload: &str) {
    let file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(file.path(), payload).expect("the payload is written");
    let path = file.path().to_str().expect("a UTF-8 temporary path");
    ns.exec("iptables-nft-restore", &["--noflush", path]).unwrap_or_else(|e| panic!("the payload loads: {e}"));
}

/// kube-proxy's chains in nat, a chain of a CNI's that jumps into one of
/// them, and a foreign rule in a built-in chain.
const PAYLOAD: &str = "\
*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-AAAA - [0:0]
:KUBE-SVC-BBBB - [0:0]
:KUBE-SEP-CCCC - [0:0]
:CNI-HOSTPORT - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -j KUBE-SERVICES
-A PREROUTING -p udp --dport 53 -j ACCEPT
-A PREROUTING -j CNI-HOSTPORT
-A CNI-HOSTPORT -j KUBE-SVC-BBBB
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp --dport 80 -j KUBE-SVC-AAAA
-A KUBE-SERVICES -d 10.96.0.11/32 -p tcp --dport 80 -j KUBE-SVC-BBBB
-A KUBE-SVC-AAAA -j KUBE-SEP-CCCC
-A KUBE-SVC-BBBB -j KUBE-SEP-CCCC
-A KUBE-SEP-CCCC -p tcp -j DNAT --to-destination 10.244.1.10:8080
COMMIT
";

/// `nft list table ip nat` inside `ns`.
fn nat(ns: &Netns) -> String {
    ns.exec("nft", &["list", "table", "ip", "nat"]).expect("nft lists nat")
}

/// Runs [`remove`] inside `ns` as the nftables mode would.
fn remove_in(ns: &Netns) -> Leftovers {
    ns.enter(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        // No bpffs there: the ebpf mode's pins are not looked for (the
        // host's, if any, are never touched by this test).
        let pins = std::env::temp_dir().join("kproxy-no-pins");
        runtime.block_on(remove(Keeping::Nftables, &[], &pins))
    })
}

fn nft_v4(leftovers: &Leftovers) -> &kproxy_iptables_exec::Removed {
    let found = leftovers.iptables.iter().find(|(b, f, _)| *b == Backend::Nft && *f == IpFamily::V4);
    &found.unwrap_or_else(|| panic!("nft IPv4 was handled: {leftovers:?}")).2
}

#[test]
fn a_chain_another_chain_jumps_to_is_flushed_and_stays_and_the_rest_goes() {
    let ns = netns("lo-ref");
    restore(&ns, PAYLOAD);
    let leftovers = remove_in(&ns);
    let removed = nft_v4(&leftovers);
    let chains: Vec<&str> = removed.cleaned.chains.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(chains, ["KUBE-SEP-CCCC", "KUBE-SERVICES", "KUBE-SVC-AAAA"], "{leftovers:?}");
    assert_eq!(removed.cleaned.jumps, 2, "PREROUTING's and OUTPUT's jumps: {leftovers:?}");
    assert_eq!(
        removed.kept,
        [("nat".to_owned(), "KUBE-SVC-BBBB".to_owned(), "chain CNI-HOSTPORT jumps to it".to_owned())]
    );
    assert!(leftovers.problems.iter().any(|p| p.contains("KUBE-SVC-BBBB stays")), "{:?}", leftovers.problems);

    let left = nat(&ns);
    assert!(left.contains("chain KUBE-SVC-BBBB {\n\t}"), "kept, flushed: {left}");
    for gone in ["KUBE-SERVICES", "KUBE-SVC-AAAA", "KUBE-SEP-CCCC", "dnat"] {
        assert!(!left.contains(gone), "{gone} goes: {left}");
    }
    assert!(left.contains("udp dport 53") && left.contains("jump CNI-HOSTPORT"), "others' rules stay: {left}");
    assert!(left.contains("jump KUBE-SVC-BBBB"), "the CNI's jump stays: {left}");

    // Nothing left to do: a second run removes nothing.
    let again = remove_in(&ns);
    assert_eq!(nft_v4(&again).cleaned, Default::default());
}

#[test]
fn a_chain_only_the_kernel_knows_is_referenced_stays_and_the_rest_goes_on_a_retry() {
    let ns = netns("lo-vmap");
    restore(&ns, PAYLOAD);
    // Free KUBE-SVC-BBBB of the CNI's jump, then refer to KUBE-SVC-AAAA
    // from a verdict map: no rule the listing reads names it.
    restore(&ns, "*nat\n:CNI-HOSTPORT - [0:0]\nCOMMIT\n");
    let map = "add map ip nat refs { type ipv4_addr : verdict; elements = { 10.0.0.1 : jump KUBE-SVC-AAAA } }";
    ns.exec("nft", &[map]).expect("nft adds the map");

    let leftovers = remove_in(&ns);
    let removed = nft_v4(&leftovers);
    let chains: Vec<&str> = removed.cleaned.chains.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(chains, ["KUBE-SEP-CCCC", "KUBE-SERVICES", "KUBE-SVC-BBBB"], "{leftovers:?}");
    let [(table, chain, reason)] = removed.kept.as_slice() else { panic!("one chain stays: {leftovers:?}") };
    assert_eq!((table.as_str(), chain.as_str()), ("nat", "KUBE-SVC-AAAA"));
    assert!(reason.starts_with("the kernel refused: "), "{reason}");
    let left = nat(&ns);
    assert!(left.contains("chain KUBE-SVC-AAAA {\n\t}"), "kept, flushed: {left}");
    assert!(!left.contains("KUBE-SERVICES") && !left.contains("dnat"), "{left}");
}
