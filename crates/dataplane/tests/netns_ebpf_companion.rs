//! The ebpf dataplane's companion nftables table against a real kernel,
//! in a network namespace, with the programs on a cgroup and in a bpffs
//! the test made (both removed at the end): a partial sync trusts what it
//! last wrote, a full sync re-asserts the table, as the other modes
//! re-assert what they own. Needs root; fails (never skips) without
//! sandboxes.

use kproxy_dataplane::ebpf::{Ebpf, EbpfConfig};
use kproxy_dataplane::{Dataplane, SyncKind, SyncRequest};
use kproxy_model::{Changes, ProxyState};
use kproxy_sandbox::{Bpffs, Cgroup, Netns, available};

/// Runs one sync of `dataplane` inside `ns`.
fn sync(ns: &Netns, dataplane: &mut Ebpf, kind: SyncKind) {
    let state = ProxyState::default();
    let changes = Changes::default();
    ns.enter(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let request = SyncRequest { state: &state, changes: &changes, kind };
        runtime.block_on(dataplane.sync(request)).unwrap_or_else(|e| panic!("the {kind:?} sync applies: {e}"));
    });
}

fn has_companion(ns: &Netns) -> bool {
    ns.exec("nft", &["list", "tables"]).expect("nft lists the tables").contains("table ip kproxy-ebpf")
}

#[test]
fn a_full_sync_rewrites_a_companion_table_that_was_deleted_and_a_partial_one_trusts_it() {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    let ns = Netns::new("kp-ebpfc").expect("a network namespace");
    let cgroup = Cgroup::new("kp-ebpfc").expect("a test cgroup");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let bpffs = Bpffs::mount(&dir.path().join("bpffs")).expect("a private bpffs");
    let config = EbpfConfig {
        cgroup: Some(cgroup.path().to_owned()),
        pin_dir: bpffs.dir("kproxy").expect("the pin folder"),
        ..EbpfConfig::default()
    };
    let mut dataplane = Ebpf::new(config);

    sync(&ns, &mut dataplane, SyncKind::Full);
    assert!(has_companion(&ns), "the first sync writes the companion table");

    ns.exec("nft", &["delete", "table", "ip", "kproxy-ebpf"]).expect("the table is deleted");
    sync(&ns, &mut dataplane, SyncKind::Partial);
    assert!(!has_companion(&ns), "a partial sync writes only what changed");

    sync(&ns, &mut dataplane, SyncKind::Full);
    assert!(has_companion(&ns), "a full sync re-asserts the table");
    // The programs go with the bpffs (its links and maps), the cgroup and
    // the namespace when they drop, in that order.
    drop(dataplane);
    drop(bpffs);
}
