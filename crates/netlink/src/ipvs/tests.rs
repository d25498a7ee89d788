//! The codec against `testdata/ipvs/*.hex`: what ipvsadm 1.31 sent and
//! the Debian 6.1 kernel answered. Requests are rebuilt with the
//! capture's seq, port id and family id and compared byte for byte;
//! replies are decoded and checked against ipvsadm's printed output.
//! Little-endian hosts only (the captures are x86_64's host order).

use std::net::IpAddr;

use nix::errno::Errno;
use proptest::prelude::*;

use super::decode::{self, ReplyError};
use super::encode::{Header, Request, encode, get_family};
use super::entry;
use super::types::*;
use super::wire::{self, attrs};

/// One request line and the reply lines after it, concatenated as a
/// socket would deliver them.
pub(super) struct Exchange {
    pub(super) sent: Vec<u8>,
    pub(super) received: Vec<u8>,
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("capture hex")).collect()
}

pub(super) fn capture(name: &str) -> Vec<Exchange> {
    let (_, text) = ALL_CAPTURES.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no capture {name}"));
    let mut out: Vec<Exchange> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (dir, bytes) = line.split_once(' ').expect("direction and hex");
        match dir {
            ">" => out.push(Exchange { sent: hex(bytes), received: Vec::new() }),
            "<" => out.last_mut().expect("a reply follows a request").received.extend(hex(bytes)),
            other => panic!("{name}: bad direction {other:?}"),
        }
    }
    out
}

/// seq, port id and (for IPVS messages) family id as the capture has them.
fn header_of(message: &[u8]) -> Header {
    Header {
        family: u16::from_ne_bytes([message[4], message[5]]),
        seq: u32::from_ne_bytes(message[8..12].try_into().unwrap()),
        port: u32::from_ne_bytes(message[12..16].try_into().unwrap()),
    }
}

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|c| format!("{c:02x}")).collect()
}

enum Sent<'a> {
    Family,
    Ipvs(Request<'a>),
}

/// Every `>` line of `name`, in order, equals what we encode.
fn assert_sent(name: &str, expected: &[Sent<'_>]) -> Vec<Exchange> {
    let exchanges = capture(name);
    assert_eq!(exchanges.len(), expected.len(), "{name}: number of requests");
    for (i, (x, want)) in exchanges.iter().zip(expected).enumerate() {
        let h = header_of(&x.sent);
        let ours = match want {
            Sent::Family => get_family(h.seq, h.port),
            Sent::Ipvs(r) => encode(r, h),
        };
        assert_eq!(to_hex(&ours), to_hex(&x.sent), "{name}: request {i}");
    }
    exchanges
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn key(protocol: Protocol, addr: &str, port: u16) -> ServiceKey {
    ServiceKey::Addr { protocol, addr: ip(addr), port }
}

fn vip() -> ServiceKey {
    key(Protocol::Tcp, "10.96.0.10", 80)
}

const FWMARK_42: ServiceKey = ServiceKey::Fwmark { family: Family::Inet, mark: 42 };

/// ipvsadm's destination for `-d` (its defaults: direct routing, weight 1).
fn dest_as_ipvsadm_deletes(addr: &str, port: u16) -> Destination {
    Destination { forward: Forward::Direct, ..Destination::masq(ip(addr), port, 1) }
}

fn acked(x: &Exchange) {
    assert_eq!(decode::ack(&x.received), Ok(header_of(&x.sent).seq));
}

#[test]
fn family_lookup_and_info_match_ipvsadm_version() {
    let x = assert_sent("family", &[Sent::Family, Sent::Family, Sent::Ipvs(Request::GetInfo)]);
    for lookup in &x[..2] {
        let family = decode::family(&lookup.received).unwrap();
        assert_eq!(family, GenlFamily { id: 0x20, version: 1, max_attr: 6 });
    }
    let info = decode::info(&x[2].received, 0x20).unwrap();
    assert_eq!(info, Info { version: 0x010201, conn_table_size: 4096 });
    assert_eq!(info.version_triple(), (1, 2, 1));
}

#[test]
fn new_service_requests_match_ipvsadm_for_each_kind() {
    let with = |key: ServiceKey, sched: &str| Service::new(key, sched);
    let persistent = Service { flags: ServiceFlags::PERSISTENT, timeout: 10800, netmask: 24, ..with(vip(), "rr") };
    let sh = Service { flags: ServiceFlags::SH_FALLBACK | ServiceFlags::SH_PORT, ..with(vip(), "sh") };
    let cases = [
        ("add-svc-tcp4-rr", with(vip(), "rr")),
        ("add-svc-tcp4-wrr", with(vip(), "wrr")),
        ("add-svc-tcp4-mh", with(vip(), "mh")),
        ("add-svc-tcp4-sh-flags", sh),
        ("add-svc-tcp4-persistent", persistent),
        ("add-svc-udp4", with(key(Protocol::Udp, "10.96.0.10", 53), "rr")),
        ("add-svc-sctp4", with(key(Protocol::Sctp, "10.96.0.10", 80), "rr")),
        ("add-svc-tcp6", with(key(Protocol::Tcp, "fd00::10", 80), "rr")),
        ("add-svc-fwmark", with(FWMARK_42, "rr")),
        ("error-add-svc-exists", with(vip(), "rr")),
    ];
    for (name, service) in &cases {
        let x = assert_sent(name, &[Sent::Ipvs(Request::NewService(service))]);
        if *name == "error-add-svc-exists" {
            continue;
        }
        acked(&x[0]);
        // A request's SERVICE nest is what a reply carries: it decodes back.
        let back = decode::services(&x[0].sent, 0x20).unwrap();
        assert_eq!(back.entries.len(), 1, "{name}");
        assert_eq!(&back.entries[0].service, service, "{name}");
    }
}

#[test]
fn edit_and_delete_service_match_ipvsadm() {
    let wrr = Service::new(vip(), "wrr");
    let x = assert_sent("edit-svc", &[Sent::Ipvs(Request::SetService(&wrr))]);
    acked(&x[0]);
    let x = assert_sent("del-svc", &[Sent::Ipvs(Request::DelService(&vip()))]);
    acked(&x[0]);
}

#[test]
fn destination_requests_match_ipvsadm() {
    let thresholds =
        Destination { upper_threshold: 100, lower_threshold: 10, ..Destination::masq(ip("10.244.1.2"), 8080, 3) };
    let x = assert_sent("add-dest", &[Sent::Ipvs(Request::NewDest(&vip(), &thresholds))]);
    acked(&x[0]);

    let v6 = key(Protocol::Tcp, "fd00::10", 80);
    let d6 = Destination::masq(ip("fd00:10:244:1::2"), 8080, 1);
    let x = assert_sent("add-dest-tcp6", &[Sent::Ipvs(Request::NewDest(&v6, &d6))]);
    acked(&x[0]);

    let quiesced = Destination::masq(ip("10.244.1.2"), 8080, 0);
    let x = assert_sent("edit-dest-weight0", &[Sent::Ipvs(Request::SetDest(&vip(), &quiesced))]);
    acked(&x[0]);

    let gone = dest_as_ipvsadm_deletes("10.244.1.2", 8080);
    let x = assert_sent("del-dest", &[Sent::Ipvs(Request::DelDest(&vip(), &gone))]);
    acked(&x[0]);
}

#[test]
fn kernel_errors_decode_to_errno() {
    let missing = key(Protocol::Tcp, "10.96.0.99", 80);
    let x = assert_sent("error-del-svc-missing", &[Sent::Ipvs(Request::DelService(&missing))]);
    let err = decode::ack(&x[0].received).unwrap_err();
    assert_eq!(err, ReplyError::Refused { seq: header_of(&x[0].sent).seq, errno: Errno::ESRCH });
    assert!(err.is_not_found());

    let x = capture("error-add-svc-exists");
    let err = decode::ack(&x[0].received).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EEXIST));
    assert!(err.is_exists());

    let absent = dest_as_ipvsadm_deletes("10.244.1.9", 80);
    let x = assert_sent("error-del-dest-missing", &[Sent::Ipvs(Request::DelDest(&vip(), &absent))]);
    let err = decode::ack(&x[0].received).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT));
    assert!(err.is_not_found());
}

#[test]
fn timeouts_set_and_read_back() {
    for (name, want) in [
        ("get-timeout-default", Timeouts { tcp: 900, tcp_fin: 120, udp: 300 }),
        ("get-timeout", Timeouts { tcp: 900, tcp_fin: 120, udp: 300 }),
        // --set 3600 0 30: the 0 kept the old tcp_fin.
        ("get-timeout-after-keep", Timeouts { tcp: 3600, tcp_fin: 120, udp: 30 }),
    ] {
        let x = assert_sent(name, &[Sent::Ipvs(Request::GetConfig)]);
        assert_eq!(decode::config(&x[0].received, 0x20), Ok(want), "{name}");
    }
    for (name, set) in [
        ("set-timeout", Timeouts { tcp: 900, tcp_fin: 120, udp: 300 }),
        ("set-timeout-keep-fin", Timeouts { tcp: 3600, tcp_fin: 0, udp: 30 }),
    ] {
        let x = assert_sent(name, &[Sent::Ipvs(Request::SetConfig(&set))]);
        acked(&x[0]);
    }
}

#[test]
fn flush_matches_ipvsadm() {
    let x = assert_sent("flush", &[Sent::Ipvs(Request::Flush)]);
    acked(&x[0]);
}

#[test]
fn empty_dump_is_a_lone_done() {
    let x = assert_sent("list-empty", &[Sent::Ipvs(Request::GetServices)]);
    let dump = decode::services(&x[0].received, 0x20).unwrap();
    assert!(dump.done);
    assert!(dump.entries.is_empty() && dump.skipped.is_empty());
}

fn services_by_key(dump: decode::Dump<ServiceEntry>) -> Vec<Service> {
    assert!(dump.done && dump.skipped.is_empty(), "{dump:?}");
    let mut out: Vec<Service> = dump.entries.into_iter().map(|e| e.service).collect();
    out.sort_by_key(|s| s.key);
    out
}

/// (address, weight, active, inactive, persistent), sorted as ipvsadm prints.
fn dest_rows(dump: decode::Dump<DestinationEntry>) -> Vec<(IpAddr, u16, u32, u32, u32, u32)> {
    assert!(dump.done && dump.skipped.is_empty(), "{dump:?}");
    let mut rows: Vec<_> = dump
        .entries
        .iter()
        .map(|e| {
            assert_eq!(e.destination.forward, Forward::Masq);
            let c = e.connections;
            (e.destination.addr, e.destination.port, e.destination.weight, c.active, c.inactive, c.persistent)
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn list_mixed_decodes_every_kind_of_service() {
    let udp = key(Protocol::Udp, "10.96.0.10", 53);
    let sctp = key(Protocol::Sctp, "10.96.0.10", 80);
    let tcp6 = key(Protocol::Tcp, "fd00::10", 80);
    // ipvsadm lists in its sorted order, not the dump's.
    let x = assert_sent(
        "list-mixed",
        &[
            Sent::Ipvs(Request::GetServices),
            Sent::Ipvs(Request::GetDests(&udp)),
            Sent::Ipvs(Request::GetDests(&sctp)),
            Sent::Ipvs(Request::GetDests(&tcp6)),
            Sent::Ipvs(Request::GetDests(&FWMARK_42)),
        ],
    );
    let services = services_by_key(decode::services(&x[0].received, 0x20).unwrap());
    let keys: Vec<_> = services.iter().map(|s| s.key).collect();
    let mut want = vec![udp, sctp, tcp6, FWMARK_42];
    want.sort();
    assert_eq!(keys, want);
    for s in &services {
        assert_eq!((s.scheduler.as_str(), s.flags, s.timeout), ("rr", ServiceFlags(0), 0));
        assert_eq!(s.netmask, s.key.family().max_prefix());
    }
    let dests = |i: usize, family| dest_rows(decode::destinations(&x[i].received, 0x20, family).unwrap());
    assert_eq!(dests(1, Family::Inet), [(ip("10.244.1.2"), 53, 1, 0, 0, 0)]);
    assert_eq!(dests(2, Family::Inet), []);
    assert_eq!(dests(3, Family::Inet6), [(ip("fd00:10:244:1::2"), 8080, 1, 0, 0, 0)]);
    assert_eq!(dests(4, Family::Inet), [(ip("10.244.1.3"), 80, 1, 0, 0, 0)]);
}

#[test]
fn lists_decode_services_destinations_and_counters() {
    let second = key(Protocol::Tcp, "10.96.0.11", 80);
    for name in ["list", "list-stats", "list-rate"] {
        let x = assert_sent(
            name,
            &[
                Sent::Ipvs(Request::GetServices),
                Sent::Ipvs(Request::GetDests(&vip())),
                Sent::Ipvs(Request::GetDests(&second)),
            ],
        );
        let dump = decode::services(&x[0].received, 0x20).unwrap();
        // 16 connections per service (counts were stable across runs).
        assert!(dump.entries.iter().all(|e| e.stats.map(|s| s.conns) == Some(16)), "{name}");
        let services = services_by_key(dump);
        let persistent =
            Service { flags: ServiceFlags::PERSISTENT, timeout: 10800, netmask: 24, ..Service::new(second, "wrr") };
        assert_eq!(services, [Service::new(vip(), "rr"), persistent], "{name}");

        let first = decode::destinations(&x[1].received, 0x20, Family::Inet).unwrap();
        assert!(first.entries.iter().all(|e| e.stats.map(|s| s.conns) == Some(8)), "{name}");
        // `-> 10.244.1.2:80 Masq 1 0 8` and `-> 10.244.1.3:80 Masq 1 0 8`
        assert_eq!(
            dest_rows(first),
            [(ip("10.244.1.2"), 80, 1, 0, 8, 0), (ip("10.244.1.3"), 80, 1, 0, 8, 0)],
            "{name}"
        );
        let persistent = decode::destinations(&x[2].received, 0x20, Family::Inet).unwrap();
        assert_eq!(
            dest_rows(persistent),
            [(ip("10.244.1.2"), 80, 2, 0, 8, 1), (ip("10.244.1.3"), 80, 1, 0, 8, 1)],
            "{name}"
        );
    }
}

#[test]
fn keyed_service_get_and_both_stats_nests() {
    let x =
        assert_sent("list-one-svc", &[Sent::Ipvs(Request::GetService(&vip())), Sent::Ipvs(Request::GetDests(&vip()))]);
    let entry = decode::service_reply(&x[0].received, 0x20).unwrap();
    assert_eq!(entry.service, Service::new(vip(), "rr"));
    let want = Stats {
        conns: 16,
        in_packets: 104,
        out_packets: 88,
        in_bytes: 6704,
        out_bytes: 8096,
        cps: 1,
        in_pps: 8,
        out_pps: 6,
        in_bps: 495,
        out_bps: 589,
    };
    assert_eq!(entry.stats, Some(want));
    // The legacy nest (u32 and u64 mixed) says the same as STATS64.
    let (legacy, wide) = stats_nests(&x[0].received);
    // Attribute lengths 92 and 124, less their 4-byte headers.
    assert_eq!((legacy.len(), wide.len()), (88, 120));
    assert_eq!(entry::stats(&legacy), Ok(want));
    assert_eq!(entry::stats(&wide), Ok(want));

    let rows = dest_rows(decode::destinations(&x[1].received, 0x20, Family::Inet).unwrap());
    assert_eq!(rows, [(ip("10.244.1.2"), 80, 1, 0, 8, 0), (ip("10.244.1.3"), 80, 1, 0, 8, 0)]);
}

/// The values of SERVICE/STATS and SERVICE/STATS64 of a reply.
fn stats_nests(reply: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let body = &reply[wire::NLMSG_HDRLEN + wire::GENL_HDRLEN..];
    let (_, service) = attrs(body).next().unwrap().unwrap();
    let mut found = (Vec::new(), Vec::new());
    for a in attrs(service) {
        let (kind, v) = a.unwrap();
        match kind {
            wire::svc::STATS => found.0 = v.to_vec(),
            wire::svc::STATS64 => found.1 = v.to_vec(),
            _ => {}
        }
    }
    found
}

/// Every capture, compiled in: the test binary also runs inside the IPVS
/// VM, where the source tree is not.
pub(super) const ALL_CAPTURES: [(&str, &str); 31] = [
    ("family", include_str!("../../testdata/ipvs/family.hex")),
    ("list-empty", include_str!("../../testdata/ipvs/list-empty.hex")),
    ("add-svc-tcp4-rr", include_str!("../../testdata/ipvs/add-svc-tcp4-rr.hex")),
    ("add-svc-tcp4-wrr", include_str!("../../testdata/ipvs/add-svc-tcp4-wrr.hex")),
    ("add-svc-tcp4-sh-flags", include_str!("../../testdata/ipvs/add-svc-tcp4-sh-flags.hex")),
    ("add-svc-tcp4-mh", include_str!("../../testdata/ipvs/add-svc-tcp4-mh.hex")),
    ("add-svc-tcp4-persistent", include_str!("../../testdata/ipvs/add-svc-tcp4-persistent.hex")),
    ("add-svc-udp4", include_str!("../../testdata/ipvs/add-svc-udp4.hex")),
    ("add-svc-sctp4", include_str!("../../testdata/ipvs/add-svc-sctp4.hex")),
    ("add-svc-tcp6", include_str!("../../testdata/ipvs/add-svc-tcp6.hex")),
    ("add-svc-fwmark", include_str!("../../testdata/ipvs/add-svc-fwmark.hex")),
    ("add-dest-tcp6", include_str!("../../testdata/ipvs/add-dest-tcp6.hex")),
    ("list-mixed", include_str!("../../testdata/ipvs/list-mixed.hex")),
    ("edit-svc", include_str!("../../testdata/ipvs/edit-svc.hex")),
    ("add-dest", include_str!("../../testdata/ipvs/add-dest.hex")),
    ("edit-dest-weight0", include_str!("../../testdata/ipvs/edit-dest-weight0.hex")),
    ("del-dest", include_str!("../../testdata/ipvs/del-dest.hex")),
    ("del-svc", include_str!("../../testdata/ipvs/del-svc.hex")),
    ("error-del-svc-missing", include_str!("../../testdata/ipvs/error-del-svc-missing.hex")),
    ("error-add-svc-exists", include_str!("../../testdata/ipvs/error-add-svc-exists.hex")),
    ("error-del-dest-missing", include_str!("../../testdata/ipvs/error-del-dest-missing.hex")),
    ("get-timeout-default", include_str!("../../testdata/ipvs/get-timeout-default.hex")),
    ("set-timeout", include_str!("../../testdata/ipvs/set-timeout.hex")),
    ("get-timeout", include_str!("../../testdata/ipvs/get-timeout.hex")),
    ("set-timeout-keep-fin", include_str!("../../testdata/ipvs/set-timeout-keep-fin.hex")),
    ("get-timeout-after-keep", include_str!("../../testdata/ipvs/get-timeout-after-keep.hex")),
    ("list-rate", include_str!("../../testdata/ipvs/list-rate.hex")),
    ("list-stats", include_str!("../../testdata/ipvs/list-stats.hex")),
    ("list", include_str!("../../testdata/ipvs/list.hex")),
    ("list-one-svc", include_str!("../../testdata/ipvs/list-one-svc.hex")),
    ("flush", include_str!("../../testdata/ipvs/flush.hex")),
];

/// Every `<` line of every capture decodes with the decoder its request
/// calls for; only the error captures are refusals.
#[test]
fn every_captured_reply_decodes() {
    // In the source tree (not in the VM), every capture must be listed.
    if let Ok(dir) = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/ipvs")) {
        let listed = dir.filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "hex"))).count();
        assert_eq!(listed, ALL_CAPTURES.len(), "a capture is missing from ALL_CAPTURES");
    }
    for (name, _) in ALL_CAPTURES {
        for (i, x) in capture(name).iter().enumerate() {
            let result = decode_as_requested(x);
            let refused = matches!(result, Err(ReplyError::Refused { .. }));
            assert!(result.is_ok() || (refused && name.starts_with("error-")), "{name} reply {i}: {result:?}");
        }
    }
}

fn decode_as_requested(x: &Exchange) -> Result<(), ReplyError> {
    let h = header_of(&x.sent);
    if h.family == wire::GENL_ID_CTRL {
        return decode::family(&x.received).map(drop);
    }
    let command = x.sent[wire::NLMSG_HDRLEN];
    let dump = u16::from_ne_bytes([x.sent[6], x.sent[7]]) & wire::NLM_F_DUMP != 0;
    match command {
        wire::cmd::GET_SERVICE if dump => decode::services(&x.received, h.family).map(drop),
        wire::cmd::GET_SERVICE => decode::service_reply(&x.received, h.family).map(drop),
        wire::cmd::GET_DEST => decode::destinations(&x.received, h.family, Family::Inet).map(drop),
        wire::cmd::GET_CONFIG => decode::config(&x.received, h.family).map(drop),
        wire::cmd::GET_INFO => decode::info(&x.received, h.family).map(drop),
        _ => decode::ack(&x.received).map(drop),
    }
}

#[test]
fn malformed_replies_are_typed_errors() {
    let x = capture("list-one-svc");
    let reply = &x[0].received;
    // Cut inside the message: its length now overruns the buffer.
    assert!(matches!(
        decode::services(&reply[..100], 0x20),
        Err(ReplyError::Malformed(decode::DecodeError::MessageLength { .. }))
    ));
    // Another family's id: not the reply asked for.
    assert!(matches!(
        decode::services(reply, 0x21),
        Err(ReplyError::Malformed(decode::DecodeError::UnexpectedMessage { kind: 0x20, .. }))
    ));
    // A bad service inside a dump is skipped, not fatal: break its AF.
    let mut bad = reply.clone();
    let af_value = wire::NLMSG_HDRLEN + wire::GENL_HDRLEN + 4 + 4;
    bad[af_value] = 99;
    let dump = decode::services(&bad, 0x20).unwrap();
    assert!(dump.entries.is_empty());
    assert_eq!(dump.skipped, [decode::DecodeError::AddressFamily(99)]);
    // No family reply at all.
    assert!(decode::family(&[]).is_err());
}

#[test]
fn failed_dump_reports_errno_from_done() {
    let mut done = capture("list-empty").remove(0).received;
    done[16..20].copy_from_slice(&(-(Errno::EPERM as i32)).to_ne_bytes());
    assert_eq!(decode::services(&done, 0x20).unwrap_err().errno(), Some(Errno::EPERM));
}

/// All `<` bytes of the richest captures, as one buffer to corrupt.
fn corpus() -> Vec<u8> {
    ["list", "list-mixed", "list-one-svc", "family", "get-timeout", "error-del-dest-missing"]
        .iter()
        .flat_map(|n| capture(n))
        .flat_map(|x| x.received)
        .collect()
}

/// Runs every decoder; the result is ignored, only a panic would fail.
fn decode_all(bytes: &[u8]) {
    let _ = decode::ack(bytes);
    let _ = decode::family(bytes);
    let _ = decode::services(bytes, 0x20);
    let _ = decode::service_reply(bytes, 0x20);
    let _ = decode::destinations(bytes, 0x20, Family::Inet6);
    let _ = decode::config(bytes, 0x20);
    let _ = decode::info(bytes, 0x20);
}

fn arb_service() -> impl Strategy<Value = Service> {
    let addr = prop_oneof![any::<[u8; 4]>().prop_map(IpAddr::from), any::<[u8; 16]>().prop_map(IpAddr::from),];
    let key = prop_oneof![
        (any::<u16>(), addr, any::<u16>()).prop_map(|(p, addr, port)| ServiceKey::Addr {
            protocol: Protocol::from_number(p),
            addr,
            port
        }),
        (any::<bool>(), any::<u32>())
            .prop_map(|(v6, mark)| ServiceKey::Fwmark { family: if v6 { Family::Inet6 } else { Family::Inet }, mark }),
    ];
    (key, "[a-z]{0,15}", any::<u32>(), any::<u32>(), any::<u8>()).prop_map(
        |(key, scheduler, flags, timeout, prefix)| Service {
            key,
            scheduler,
            flags: ServiceFlags(flags & !ServiceFlags::HASHED.0),
            timeout,
            netmask: prefix % (key.family().max_prefix() + 1),
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        decode_all(&bytes);
    }

    #[test]
    fn corrupted_captures_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        start in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = corpus();
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let start = start.index(bytes.len());
        let end = start + cut.index(bytes.len() - start + 1);
        decode_all(&bytes[start..end]);
        decode_all(&bytes[..end]);
    }

    #[test]
    fn services_round_trip_through_the_codec(service in arb_service(), seq in any::<u32>()) {
        let bytes = encode(&Request::NewService(&service), Header { family: 0x20, seq, port: 0 });
        let back = decode::services(&bytes, 0x20).unwrap();
        prop_assert_eq!(back.entries.len(), 1);
        prop_assert_eq!(&back.entries[0].service, &service);
    }
}
