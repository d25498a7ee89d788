//! kproxy's local routes against a real kernel, in a throwaway namespace:
//! added, listed and deleted by protocol number, never touching a route of
//! another protocol or an address that is already local. Needs root; fails
//! (never skips) without sandboxes.

use std::collections::BTreeSet;
use std::net::IpAddr;

use kproxy_netlink::routes::{Claim, LocalRoutes, ROUTE_PROTOCOL};
use kproxy_sandbox::{Netns, available};

fn netns() -> Netns {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    Netns::new("routes").expect("a network namespace")
}

/// Runs `f` with a route connection opened inside `ns`.
fn with_routes<T: Send>(ns: &Netns, f: impl AsyncFnOnce(&LocalRoutes) -> T + Send) -> T {
    ns.enter(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async {
            let routes = LocalRoutes::connect().expect("an rtnetlink connection");
            f(&routes).await
        })
    })
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `ip route show table local` of both families, one route a line.
fn local_table(ns: &Netns) -> String {
    let v4 = ns.ip_output(&["route", "show", "table", "local"]).unwrap();
    let v6 = ns.ip_output(&["-6", "route", "show", "table", "local"]).unwrap();
    format!("{v4}{v6}")
}

fn line_for<'a>(table: &'a str, address: &str) -> Vec<&'a str> {
    table.lines().filter(|l| l.split_whitespace().nth(1) == Some(address)).collect()
}

#[test]
fn claims_are_added_listed_and_deleted_by_kproxys_protocol_only() {
    let ns = netns();
    ns.ip(&["route", "add", "local", "10.96.0.99/32", "dev", "lo", "table", "local", "proto", "static"]).unwrap();
    ns.ip(&["-6", "route", "add", "local", "fd00:96::99/128", "dev", "lo", "table", "local", "proto", "static"])
        .unwrap();

    let (added, listed) = with_routes(&ns, async |routes| {
        let added = [routes.add(ip("10.96.0.10")).await.unwrap(), routes.add(ip("fd00:96::10")).await.unwrap()];
        (added, routes.list().await.unwrap())
    });
    assert_eq!(added, [Claim::Added, Claim::Added]);
    assert_eq!(listed, BTreeSet::from([ip("10.96.0.10"), ip("fd00:96::10")]), "the static routes are not kproxy's");
    let table = local_table(&ns);
    let proto = format!("proto {ROUTE_PROTOCOL}");
    assert!(line_for(&table, "10.96.0.10").iter().any(|l| l.contains("dev lo") && l.contains(&proto)), "{table}");
    assert!(line_for(&table, "fd00:96::10").iter().any(|l| l.contains("dev lo") && l.contains(&proto)), "{table}");

    // Deleting kproxy's routes and, by address, the static ones: only
    // kproxy's go; a second delete finds nothing.
    let deleted = with_routes(&ns, async |routes| {
        let mut deleted = Vec::new();
        for address in ["10.96.0.10", "fd00:96::10", "10.96.0.99", "fd00:96::99", "10.96.0.10"] {
            deleted.push(routes.delete(ip(address)).await.unwrap());
        }
        (deleted, routes.list().await.unwrap())
    });
    assert_eq!(deleted, (vec![true, true, false, false, false], BTreeSet::new()));
    let table = local_table(&ns);
    assert!(line_for(&table, "10.96.0.10").is_empty(), "{table}");
    assert!(line_for(&table, "10.96.0.99")[0].contains("proto static"), "{table}");
    assert!(line_for(&table, "fd00:96::99")[0].contains("proto static"), "{table}");
}

#[test]
fn addresses_that_are_already_local_are_not_claimed() {
    let ns = netns();
    // A bridge without ports holds addresses (this kernel has no dummy links).
    ns.ip(&["link", "add", "kpbr9", "type", "bridge"]).unwrap();
    ns.ip(&["link", "set", "kpbr9", "up"]).unwrap();
    ns.ip(&["addr", "add", "192.168.50.1/24", "dev", "kpbr9"]).unwrap();
    ns.ip(&["-6", "addr", "add", "fd00:50::1/64", "dev", "kpbr9", "nodad"]).unwrap();
    ns.ip(&["route", "add", "local", "10.96.0.0/16", "dev", "lo", "table", "local", "proto", "static"]).unwrap();
    let before = local_table(&ns);

    let (claims, listed) = with_routes(&ns, async |routes| {
        let mut claims = Vec::new();
        // An interface address of each family, loopback, and an address
        // inside someone else's local prefix.
        for address in ["192.168.50.1", "fd00:50::1", "127.0.0.5", "::1", "10.96.0.10"] {
            claims.push(routes.add(ip(address)).await.unwrap());
        }
        (claims, routes.list().await.unwrap())
    });
    assert_eq!(claims, [Claim::AlreadyLocal; 5]);
    assert!(listed.is_empty(), "{listed:?}");
    assert_eq!(local_table(&ns), before, "nothing was added");
}
