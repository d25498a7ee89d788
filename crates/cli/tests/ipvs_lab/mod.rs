//! IPVS in a sandbox node, for the real-connection tests that run in the
//! IPVS VM (`kproxy_testkit::vm`): the `kube-ipvs0` dummy holding service
//! addresses and the virtual servers, both programmed inside a node's
//! namespace (links and IPVS are per network namespace) through kproxy's
//! own netlink code. What the IPVS mode will do itself, tests check it did.

#![allow(dead_code)]

use std::future::Future;
use std::net::{IpAddr, SocketAddr};

use kproxy_netlink::ipvs::{Client, Destination, Protocol, Request, Service, ServiceKey};
use kproxy_netlink::links;
use kproxy_sandbox::Netns;

/// The dummy link kube-proxy's IPVS mode puts its service addresses on.
pub const DUMMY: &str = "kube-ipvs0";

/// Modules the IPVS mode and its companion nf_tables table need, all
/// loaded by `tools/ipvs-vm/run.sh` by default.
pub const MODULES: &[&str] = &[
    "ip_vs",
    "ip_vs_rr",
    "nf_conntrack",
    "nf_conntrack_netlink",
    "nf_nat",
    "nfnetlink",
    "nf_tables",
    "nft_ct",
    "nft_nat",
    "nft_masq",
    "nft_chain_nat",
    "nft_reject",
    "nft_reject_inet",
    "nft_reject_ipv4",
    "nft_reject_ipv6",
    "nf_reject_ipv4",
    "nf_reject_ipv6",
    "nft_fib",
    "nft_fib_inet",
    "nft_fib_ipv4",
    "nft_fib_ipv6",
    "nft_numgen",
    "nft_hash",
    "br_netfilter",
    "dummy",
    "veth",
    "bridge",
];

/// The entries of [`MODULES`] that this kernel has neither loaded nor built in.
pub fn missing_modules() -> Vec<&'static str> {
    let loaded = std::fs::read_to_string("/proc/modules").expect("/proc/modules");
    let builtin = std::fs::read_to_string(format!(
        "/lib/modules/{}/modules.builtin",
        std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("the kernel release").trim()
    ))
    .unwrap_or_default();
    MODULES
        .iter()
        .copied()
        .filter(|m| !loaded.lines().any(|line| line.split(' ').next() == Some(m)))
        .filter(|m| !builtin.lines().any(|line| line.ends_with(&format!("/{m}.ko"))))
        .collect()
}

/// Runs the future `make` returns to completion on a thread inside `ns`:
/// sockets it opens (rtnetlink) belong to that namespace.
pub fn block_in<T: Send, F: Future<Output = T>>(ns: &Netns, make: impl FnOnce() -> F + Send) -> T {
    ns.enter(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        runtime.block_on(make())
    })
}

/// Creates [`DUMMY`] in `ns` (down) holding `addresses`; returns its index.
pub fn service_addresses(ns: &Netns, addresses: &[IpAddr]) -> u32 {
    let addresses = addresses.to_vec();
    block_in(ns, || async move {
        let index = links::ensure_dummy(DUMMY).await.unwrap_or_else(|e| panic!("{DUMMY}: {e:#?}"));
        for ip in addresses {
            links::add_address(index, ip).await.unwrap_or_else(|e| panic!("{ip} on {DUMMY}: {e:#?}"));
        }
        index
    })
}

/// An IPVS socket in `ns`'s IPVS instance; usable from any thread.
pub fn ipvs(ns: &Netns) -> Client {
    ns.enter(Client::connect).unwrap_or_else(|e| panic!("IPVS in {}: {e:#?}", ns.name()))
}

/// A TCP virtual server `vip` with masquerading destinations of weight 1.
pub fn virtual_server(ipvs: &mut Client, vip: SocketAddr, scheduler: &str, destinations: &[SocketAddr]) {
    let key = ServiceKey::Addr { protocol: Protocol::Tcp, addr: vip.ip(), port: vip.port() };
    ipvs.execute(&Request::NewService(&Service::new(key, scheduler)))
        .unwrap_or_else(|e| panic!("virtual server {vip}: {e:#?}"));
    for destination in destinations {
        let real = Destination::masq(destination.ip(), destination.port(), 1);
        ipvs.execute(&Request::NewDest(&key, &real))
            .unwrap_or_else(|e| panic!("destination {destination} of {vip}: {e:#?}"));
    }
}

/// IPVS connection entries (active and inactive) of TCP `vip`'s
/// destinations: live counters, unlike the stats, which the kernel's
/// estimator copies out of per-CPU counters only every 2 s. A closed TCP
/// connection's entry lingers in TIME_WAIT (2 min) or CLOSE (10 s).
pub fn connections(ipvs: &mut Client, vip: SocketAddr) -> u64 {
    let key = ServiceKey::Addr { protocol: Protocol::Tcp, addr: vip.ip(), port: vip.port() };
    let dump = ipvs.destinations(&key).unwrap_or_else(|e| panic!("destinations of {vip}: {e:#?}"));
    dump.entries.iter().map(|d| u64::from(d.connections.active) + u64::from(d.connections.inactive)).sum()
}

/// Total and available guest memory in MiB, from `/proc/meminfo`.
pub fn memory_mib() -> (u64, u64) {
    let info = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().strip_suffix(" kB")?.trim().parse::<u64>().ok())
            .unwrap_or(0)
            / 1024
    };
    (field("MemTotal:"), field("MemAvailable:"))
}
