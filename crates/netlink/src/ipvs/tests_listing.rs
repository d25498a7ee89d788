//! [`super::listing::render`] against what ipvsadm 1.31 printed for the
//! captured dumps (the `#|` lines of `testdata/ipvs/*.hex`): the replies
//! are decoded, put in a [`Table`] and rendered, and the text must be the
//! same byte for byte, trailing blanks included.

use super::decode;
use super::entry;
use super::listing::{self, render};
use super::table::{ListedService, Table};
use super::tests::{ALL_CAPTURES, Exchange, capture};
use super::types::*;
use super::wire::attrs;

/// ipvsadm's stdout in capture `name`, verbatim.
fn printed(name: &str) -> String {
    let (_, text) = ALL_CAPTURES.iter().find(|(n, _)| *n == name).expect("a capture");
    text.lines().filter_map(|l| l.strip_prefix("#| ")).map(|l| format!("{l}\n")).collect()
}

/// The service a `GET_DEST` request names (its `SERVICE` nest).
fn requested_service(x: &Exchange) -> ServiceKey {
    let (_, nest) = attrs(&x.sent[20..]).map(Result::unwrap).find(|(kind, _)| kind & 0x3fff == 1).expect("a nest");
    entry::service(nest).expect("the request's service").service.key
}

/// `GET_INFO`'s reply: in `family.hex` only (elided from the others).
fn info() -> Info {
    decode::info(&capture("family")[2].received, 0x20).unwrap()
}

/// The table a captured `ipvsadm -Ln` session read: its service dump,
/// then one destination dump per service, matched by the key requested.
fn table_of(name: &str) -> Table {
    let x = capture(name);
    let services = decode::services(&x[0].received, 0x20).unwrap();
    assert!(services.done && services.skipped.is_empty());
    let listed = services
        .entries
        .into_iter()
        .map(|entry| {
            let key = entry.service.key;
            let dump = x[1..].iter().find(|d| requested_service(d) == key).expect("a GET_DEST for each service");
            let dests = decode::destinations(&dump.received, 0x20, key.family()).unwrap();
            ListedService { entry, destinations: dests.entries }
        })
        .collect();
    Table::new(info(), listed)
}

#[test]
fn render_equals_ipvsadm_for_every_captured_listing() {
    for name in ["list-empty", "list", "list-mixed"] {
        let want = printed(name);
        assert!(want.starts_with("IP Virtual Server version 1.2.1 (size=4096)\n"), "{name}: {want}");
        assert_eq!(render(&table_of(name)), want, "{name}");
    }
}

/// `-Ln -t VIP` prints no version line and one service; the same lines.
#[test]
fn one_service_listing_is_the_same_lines_without_the_version() {
    let x = capture("list-one-svc");
    let entry = decode::service_reply(&x[0].received, 0x20).unwrap();
    let dests = decode::destinations(&x[1].received, 0x20, Family::Inet).unwrap();
    let table = Table::new(info(), vec![ListedService { entry, destinations: dests.entries }]);
    let text = render(&table);
    let (first, rest) = text.split_once('\n').unwrap();
    assert_eq!(first, "IP Virtual Server version 1.2.1 (size=4096)");
    assert_eq!(rest, printed("list-one-svc"));
}

/// The dump order is random (the service hash is salted per netns); the
/// table's order is ipvsadm's whatever order the entries came in.
#[test]
fn table_order_does_not_depend_on_dump_order() {
    let table = table_of("list-mixed");
    let mut reversed = table.services.clone();
    reversed.reverse();
    for s in &mut reversed {
        s.destinations.reverse();
    }
    assert_eq!(Table::new(table.info, reversed), table);
}

fn service(key: ServiceKey, scheduler: &str, flags: ServiceFlags, timeout: u32, netmask: u8) -> ListedService {
    let service = Service { flags, timeout, netmask, ..Service::new(key, scheduler) };
    ListedService { entry: ServiceEntry { service, stats: None }, destinations: Vec::new() }
}

fn dest(addr: &str, port: u16, forward: Forward, weight: u32, active: u32, inactive: u32) -> DestinationEntry {
    DestinationEntry {
        destination: Destination { forward, ..Destination::masq(addr.parse().unwrap(), port, weight) },
        connections: Connections { active, inactive, persistent: 0 },
        stats: None,
    }
}

fn addr(protocol: Protocol, a: &str, port: u16) -> ServiceKey {
    ServiceKey::Addr { protocol, addr: a.parse().unwrap(), port }
}

/// What the captures do not show, from ipvsadm 1.31's source: scheduler
/// flags in parentheses before `persistent`, an IPv6 mask as a prefix
/// length, `ops` without persistence, `FWM  N IPv6`, the other forwarding
/// names, and the wrapped address comparison putting 192.168/16 before
/// 10/8.
#[test]
fn render_follows_ipvsadm_for_flags_masks_and_forwarding() {
    let mut sh = service(
        addr(Protocol::Tcp, "10.96.0.12", 443),
        "sh",
        ServiceFlags::SH_FALLBACK | ServiceFlags::SH_PORT | ServiceFlags::PERSISTENT,
        60,
        24,
    );
    sh.destinations = vec![
        dest("10.244.2.9", 8443, Forward::Direct, 0, 0, 0),
        dest("10.244.1.9", 8443, Forward::Tunnel(Tunnel::default()), 1, 12, 3),
        dest("10.244.1.9", 443, Forward::Local, 2, 0, 0),
    ];
    let services = vec![
        service(ServiceKey::Fwmark { family: Family::Inet6, mark: 7 }, "wrr", ServiceFlags::default(), 0, 128),
        sh,
        service(addr(Protocol::Udp, "fd00::53", 53), "rr", ServiceFlags::PERSISTENT, 300, 64),
        service(addr(Protocol::Udp, "10.96.0.53", 53), "rr", ServiceFlags::ONE_PACKET, 0, 32),
        service(addr(Protocol::Tcp, "192.168.1.10", 30080), "mh", ServiceFlags::SH_FALLBACK, 0, 32),
        service(ServiceKey::Fwmark { family: Family::Inet, mark: 7 }, "rr", ServiceFlags::PERSISTENT, 10, 32),
    ];
    let text = render(&Table::new(Info { version: 0x010201, conn_table_size: 4096 }, services));
    let want = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  192.168.1.10:30080 mh (mh-fallback)
TCP  10.96.0.12:443 sh (sh-fallback,sh-port) persistent 60 mask 255.255.255.0
  -> 10.244.1.9:443               Local   2      0          0         
  -> 10.244.1.9:8443              Tunnel  1      12         3         
  -> 10.244.2.9:8443              Route   0      0          0         
UDP  10.96.0.53:53 rr ops
UDP  [fd00::53]:53 rr persistent 300 mask 64
FWM  7 rr persistent 10
FWM  7 IPv6 wrr
";
    assert_eq!(text, want);
}

#[test]
fn field_texts_match_ipvsadms() {
    let sh = Service { flags: ServiceFlags(0x20), ..Service::new(addr(Protocol::Sctp, "10.96.0.1", 80), "sh") };
    // A bit `sh` has no name for: ipvsadm prints `sh ()`.
    assert_eq!(listing::scheduler_flags(&sh).as_deref(), Some(""));
    assert_eq!(listing::protocol_name(&sh.key), "SCTP");
    assert_eq!(listing::protocol_name(&addr(Protocol::Other(50), "10.0.0.1", 0)), "?");
    assert_eq!(listing::virtual_address(&ServiceKey::Fwmark { family: Family::Inet, mark: u32::MAX }), "-1");
    assert_eq!(listing::forward_name(Forward::Other(7)), "(null)");
    let wide = Service { netmask: 0, ..Service::new(addr(Protocol::Tcp, "10.0.0.1", 1), "rr") };
    assert_eq!(listing::persistence_mask(&wide).as_deref(), Some("0.0.0.0"));
}

/// kproxy's `/list` rows for a table read from the kernel, as the IPVS
/// dataplane fills them (kind and service are its own; here fixed).
fn rows(table: &Table) -> Vec<kproxy_admin::listing::VirtualServer> {
    use kproxy_admin::listing::{RealServer, VirtualServer};
    let row = |listed: &ListedService| {
        let s = &listed.entry.service;
        let endpoints = listed
            .destinations
            .iter()
            .map(|d| RealServer {
                address: listing::address_port(d.destination.addr, d.destination.port),
                forward: listing::forward_name(d.destination.forward).into(),
                weight: d.destination.weight,
                active: Some(d.connections.active),
                inactive: Some(d.connections.inactive),
            })
            .collect();
        VirtualServer {
            protocol: listing::protocol_name(&s.key).into(),
            frontend: listing::virtual_address(&s.key),
            kind: "ClusterIP".into(),
            service: "default/web:http".into(),
            scheduler: s.scheduler.clone(),
            scheduler_flags: listing::scheduler_flags(s),
            persistent: s.flags.contains(ServiceFlags::PERSISTENT).then_some(s.timeout),
            netmask: listing::persistence_mask(s),
            one_packet: s.flags.contains(ServiceFlags::ONE_PACKET),
            endpoints,
        }
    };
    table.services.iter().map(row).collect()
}

/// Each line's whitespace-separated fields, up to a `#` comment.
fn fields(text: &str) -> Vec<Vec<&str>> {
    text.lines().map(|l| l.split('#').next().unwrap_or_default().split_whitespace().collect()).collect()
}

/// A service to program: key, scheduler, (flags, persistence timeout,
/// netmask; 0 for the whole address) and destinations.
type Programmed<'a> = (ServiceKey, &'a str, (ServiceFlags, u32, u8), Vec<Destination>);

/// A realistic table programmed through [`super::Client`], listed by
/// ipvsadm in the guest and by kproxy: [`render`] must equal `ipvsadm
/// -Ln` byte for byte, and admin's `/list` rendering field for field
/// (without the version line it does not print). On the host this test
/// boots `tools/ipvs-vm` and runs itself there; a VM that cannot start
/// fails it.
#[test]
fn kproxy_listings_equal_ipvsadm_on_a_real_ipvs_kernel() {
    use super::Request;
    if !kproxy_testkit::vm::in_guest() {
        return kproxy_testkit::vm::run_test(
            "ipvs::tests_listing::kproxy_listings_equal_ipvsadm_on_a_real_ipvs_kernel",
        );
    }
    let mut ipvs = super::Client::connect().expect("IPVS in the VM");
    ipvs.execute(&Request::Flush).unwrap();
    let persistent = |timeout, netmask| (ServiceFlags::PERSISTENT, timeout, netmask);
    let none = (ServiceFlags::default(), 0, 0);
    let masq = |a: &str, port, weight| Destination::masq(a.parse().unwrap(), port, weight);
    #[rustfmt::skip]
    let table: Vec<Programmed<'_>> = vec![
        (addr(Protocol::Tcp, "10.96.0.10", 80), "rr", none,
            vec![masq("10.244.2.4", 8080, 0), masq("10.244.1.3", 8080, 1), masq("10.244.1.2", 8080, 1)]),
        // A node port: 192.168/16 lists before 10/8 (ipvsadm's wrapped compare).
        (addr(Protocol::Tcp, "192.168.122.10", 30080), "wrr", none,
            vec![masq("10.244.1.3", 8080, 1), masq("10.244.1.2", 8080, 3)]),
        (addr(Protocol::Tcp, "10.96.0.11", 80), "wrr", persistent(10800, 24),
            vec![masq("10.244.1.2", 80, 2), masq("10.244.1.3", 80, 1),
                 Destination { forward: Forward::Direct, ..masq("10.244.1.4", 80, 1) }]),
        (addr(Protocol::Udp, "10.96.0.10", 53), "rr", persistent(10800, 32),
            vec![masq("10.244.1.3", 53, 1), masq("10.244.1.2", 53, 1)]),
        (addr(Protocol::Udp, "10.96.0.54", 53), "rr", (ServiceFlags::ONE_PACKET, 0, 32),
            vec![masq("10.244.1.2", 53, 1)]),
        (addr(Protocol::Sctp, "10.96.0.20", 3868), "sh", (ServiceFlags::SH_FALLBACK | ServiceFlags::SH_PORT, 0, 32),
            vec![masq("10.244.1.2", 3868, 1), masq("10.244.1.3", 3868, 1)]),
        (addr(Protocol::Tcp, "10.96.0.30", 443), "mh", (ServiceFlags::SH_FALLBACK, 0, 32), vec![]),
        (addr(Protocol::Tcp, "fd00::10", 443), "sh", (ServiceFlags::PERSISTENT | ServiceFlags::SH_PORT, 60, 64),
            vec![masq("fd00:10:244:1::3", 8443, 1), masq("fd00:10:244:1::2", 8443, 0)]),
        (addr(Protocol::Udp, "fd00::53", 53), "rr", none, vec![masq("fd00:10:244:1::2", 53, 1)]),
        (ServiceKey::Fwmark { family: Family::Inet, mark: 42 }, "rr", none, vec![masq("10.244.1.3", 80, 1)]),
        (ServiceKey::Fwmark { family: Family::Inet6, mark: 42 }, "wlc", persistent(300, 128),
            vec![masq("fd00:10:244:1::2", 80, 5)]),
    ];
    for (key, scheduler, (flags, timeout, netmask), dests) in &table {
        let netmask = if *netmask == 0 { key.family().max_prefix() } else { *netmask };
        let service = Service { flags: *flags, timeout: *timeout, netmask, ..Service::new(*key, scheduler) };
        ipvs.execute(&Request::NewService(&service)).unwrap_or_else(|e| panic!("{service:?}: {e:#?}"));
        for d in dests {
            ipvs.execute(&Request::NewDest(key, d)).unwrap_or_else(|e| panic!("{key:?} {d:?}: {e:#?}"));
        }
    }

    let ours = super::read_table(&mut ipvs).expect("the table");
    assert!(ours.skipped.is_empty(), "{:?}", ours.skipped);
    assert_eq!(ours.services.len(), table.len());
    let out = std::process::Command::new("ipvsadm").arg("-Ln").output().expect("ipvsadm in the VM");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs = String::from_utf8(out.stdout).expect("ipvsadm prints ASCII");
    println!("{theirs}");
    assert_eq!(render(&ours), theirs);
    let first_tcp = theirs.lines().find(|l| l.starts_with("TCP")).unwrap_or_default();
    assert!(first_tcp.starts_with("TCP  192.168.122.10:30080 wrr"), "{theirs}");

    let admin = kproxy_admin::listing::render(&rows(&ours));
    let (_version, columns_on) = theirs.split_once('\n').expect("a version line");
    assert_eq!(fields(&admin), fields(columns_on), "admin's render:\n{admin}");
    assert!(admin.lines().nth(2).is_some_and(|l| l.ends_with("    # ClusterIP default/web:http")), "{admin}");
    ipvs.execute(&Request::Flush).unwrap();
}
