//! Links and addresses against a real kernel: lookups anywhere, the
//! `dummy` lifecycle inside the IPVS VM (this machine's kernel has no
//! `dummy` links; the guest is throwaway, so the test owns its root namespace).

use std::net::{IpAddr, TcpListener};
use std::process::Command;

use super::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("a literal address")
}

/// `ip <args>` in the guest, which must succeed.
fn ip_command(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("iproute2's ip in the guest");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The link's `IFF_UP` bit, from sysfs.
fn is_up(name: &str) -> bool {
    let flags = std::fs::read_to_string(format!("/sys/class/net/{name}/flags")).expect("the link's flags");
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).expect("hex flags");
    flags & 1 != 0
}

#[test]
fn loopback_is_found_by_name_and_a_missing_link_is_none() {
    runtime().block_on(async {
        assert_eq!(link_index("lo").await.expect("a lookup needs no privileges"), Some(1));
        assert_eq!(link_index("kp-no-such0").await.expect("a lookup needs no privileges"), None);
    });
}

/// On the host this test boots `tools/ipvs-vm` and runs itself there; a
/// VM that cannot start fails it.
#[test]
fn a_dummy_link_holds_local_addresses_and_a_foreign_link_is_refused() {
    if !kproxy_testkit::vm::in_guest() {
        return kproxy_testkit::vm::run_test(
            "links::tests::a_dummy_link_holds_local_addresses_and_a_foreign_link_is_refused",
        );
    }
    const NAME: &str = "kube-ipvs0";
    runtime().block_on(async {
        assert_eq!(link_index(NAME).await.unwrap(), None);
        assert!(!delete_link(NAME).await.unwrap(), "nothing to delete yet");

        // Created once, down, and found again on the second call.
        let index = ensure_dummy(NAME).await.unwrap();
        assert_eq!(ensure_dummy(NAME).await.unwrap(), index);
        assert_eq!(link_index(NAME).await.unwrap(), Some(index));
        assert!(!is_up(NAME), "kube-ipvs0 must stay down");
        assert!(ip_command(&["-d", "link", "show", NAME]).contains("dummy"));

        // Both families, each added twice; usable at once (bind needs a local,
        // non-tentative address) although the link is down.
        let (v4, v6) = (ip("10.96.0.10"), ip("fd00:96::10"));
        for address in [v4, v6, v4, v6] {
            add_address(index, address).await.unwrap();
        }
        assert_eq!(addresses(index).await.unwrap(), BTreeSet::from([v4, v6]));
        let shown = ip_command(&["-o", "addr", "show", "dev", NAME]);
        assert!(shown.contains("inet 10.96.0.10/32"), "{shown}");
        assert!(shown.contains("inet6 fd00:96::10/128") && shown.contains("nodad"), "{shown}");
        assert!(!shown.contains("tentative"), "{shown}");
        for address in [v4, v6] {
            TcpListener::bind((address, 0)).unwrap_or_else(|e| panic!("{address} is not local: {e}"));
        }

        // Deleted once each; deleting again is fine.
        for address in [v4, v6, v4, v6] {
            delete_address(index, address).await.unwrap();
        }
        assert!(addresses(index).await.unwrap().is_empty());
        assert!(TcpListener::bind((v4, 0)).is_err(), "10.96.0.10 is still local");

        assert!(delete_link(NAME).await.unwrap());
        assert!(!delete_link(NAME).await.unwrap());
        assert_eq!(link_index(NAME).await.unwrap(), None);

        // Someone else's link of that name: neither adopted nor deleted.
        ip_command(&["link", "add", NAME, "type", "bridge"]);
        let refused = ensure_dummy(NAME).await.unwrap_err();
        assert!(matches!(&refused, LinkError::NotDummy { kind, .. } if kind == "bridge"), "{refused:?}");
        assert_eq!(refused.to_string(), "link kube-ipvs0 exists but is a bridge link, not a dummy; refusing to use it");
        assert!(matches!(delete_link(NAME).await, Err(LinkError::NotDummy { .. })));
        assert!(ip_command(&["-d", "link", "show", NAME]).contains("bridge"), "the bridge is untouched");
        ip_command(&["link", "del", NAME]);

        // A veth end named like it is refused too, and the guest is left clean.
        ip_command(&["link", "add", NAME, "type", "veth", "peer", "name", "kp-peer0"]);
        assert!(matches!(ensure_dummy(NAME).await, Err(LinkError::NotDummy { kind, .. }) if kind == "veth"));
        ip_command(&["link", "del", NAME]);
        assert_eq!(link_index(NAME).await.unwrap(), None);
    });
}
