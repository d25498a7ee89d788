//! Every scheduler the userspace proxy offers, on real loopback sockets,
//! beyond what proxy.rs covers (rr, lc, sh stability, affinity, wrr
//! weights): random, wrr's cycle, wlc, sed, nq, sh spread, dh, mh, fo, ovf,
//! lblc, lblcr and twos.
//!
//! The least-connection family is driven by connections held open (active)
//! or half-closed (inactive), and each pick is checked against the exact
//! outcome docs/schedulers.md defines. The hashing schedulers are checked
//! against the tables kproxy-sched publishes (`hash_buckets`,
//! `maglev_table`), which the userspace schedulers must look up exactly.
//! Only random and twos are statistical, with bounds five sigma or more away.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use kproxy_model::{Protocol, Scheduler, ServicePort};
use kproxy_sched::{BUCKETS, Member, hash_bucket, hash_buckets, maglev_slot, maglev_table, member_id, wrr_table};
use kproxy_userspace::Userspace;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

mod common;
use common::*;

/// A free port on `ip`, for a frontend (or, unbound again, an endpoint that
/// refuses connections).
fn free_addr(ip: &str) -> SocketAddr {
    std::net::TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap()
}

/// A backend like [`backend_on`], except that it never closes a connection
/// its client half-closed: the proxy then keeps counting it as inactive.
async fn holding_backend(name: &'static str, ip: &str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(format!("{name}\n").as_bytes()).await;
                let mut buf = [0u8; 64];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                std::future::pending::<()>().await;
                drop(s);
            });
        }
    });
    addr
}

/// A connection kept open, and the endpoint that answered it.
async fn hold(frontend: SocketAddr) -> (TcpStream, String) {
    let mut s = TcpStream::connect(frontend).await.unwrap();
    let name = name_of(&mut s).await.expect("an endpoint answers");
    (s, name)
}

/// The endpoint answering a connection from `source` (any port).
async fn who_from(source: IpAddr, frontend: SocketAddr) -> Option<String> {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    let mut s = tokio::time::timeout(Duration::from_secs(2), socket.connect(frontend)).await.ok()?.ok()?;
    name_of(&mut s).await
}

/// How many of `n` sequential connections each endpoint answered.
async fn tally(frontend: SocketAddr, n: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        *counts.entry(who(frontend).await.expect("an endpoint answers")).or_insert(0) += 1;
    }
    counts
}

fn weighted(mut p: ServicePort, weights: &[(SocketAddr, u32)]) -> ServicePort {
    p.weights = weights.iter().map(|(addr, w)| (addr.ip(), *w)).collect();
    p
}

async fn serve(proxy: &mut Userspace, p: ServicePort) {
    let skipped = sync(proxy, &state(vec![p])).await;
    assert!(skipped.is_empty(), "{skipped:?}");
}

#[tokio::test]
async fn random_spreads_by_weight_and_never_picks_a_weight_zero_endpoint() {
    let a = backend_on("a", "127.0.20.2").await;
    let b = backend_on("b", "127.0.20.3").await;
    let z = backend_on("z", "127.0.20.4").await;
    let front = frontend_addr(20);
    let mut proxy = Userspace::new(settings());
    let p = port(Protocol::Tcp, &[front], &[a, b, z], Some(Scheduler::Random));
    serve(&mut proxy, weighted(p, &[(a, 1), (b, 3), (z, 0)])).await;

    let counts = tally(front, 240).await;
    assert_eq!(counts.get("z"), None, "weight 0 is never picked: {counts:?}");
    // a is expected 60 times (sigma 6.7), b 180: bounds over 4.5 sigma out.
    let (na, nb) = (counts.get("a").copied().unwrap_or(0), counts.get("b").copied().unwrap_or(0));
    assert_eq!(na + nb, 240);
    assert!((30..=95).contains(&na), "a's share follows weight 1 of 4: {counts:?}");
    assert!(nb > 2 * na, "b (weight 3) gets about three times a's: {counts:?}");
}

#[tokio::test]
async fn wrr_follows_the_ipvs_cycle_exactly_and_skips_weight_zero() {
    let a = backend_on("a", "127.0.21.2").await;
    let z = backend_on("z", "127.0.21.3").await;
    let b = backend_on("b", "127.0.21.4").await;
    let c = backend_on("c", "127.0.21.5").await;
    let front = frontend_addr(21);
    let mut proxy = Userspace::new(settings());
    let p = port(Protocol::Tcp, &[front], &[a, z, b, c], Some(Scheduler::Wrr));
    serve(&mut proxy, weighted(p, &[(a, 4), (z, 0), (b, 3), (c, 2)])).await;

    let mut seen = String::new();
    for _ in 0..27 {
        seen.push_str(&who(front).await.expect("an endpoint answers"));
    }
    // Passes cw = 4: a; 3: a b; 2: a b c; 1: a b c (docs/schedulers.md).
    assert_eq!(seen, "aababcabc".repeat(3));
    let table: String = wrr_table(&[4, 0, 3, 2]).into_iter().map(|i| ["a", "z", "b", "c"][i]).collect();
    assert_eq!(seen, table.repeat(3), "the userspace wrr picks exactly the wrr_table cycle");
}

/// The endpoints answering eight connections held open in turn, to
/// endpoints a (weight 1) and b (weight 3).
async fn eight_held_on_weights_1_and_3(scheduler: Scheduler, host: u8) -> String {
    let a = backend_on("a", &format!("127.0.{host}.2")).await;
    let b = backend_on("b", &format!("127.0.{host}.3")).await;
    let front = frontend_addr(host);
    let mut proxy = Userspace::new(settings());
    let p = port(Protocol::Tcp, &[front], &[a, b], Some(scheduler));
    serve(&mut proxy, weighted(p, &[(a, 1), (b, 3)])).await;
    let mut held = Vec::new();
    let mut seen = String::new();
    for _ in 0..8 {
        let (s, name) = hold(front).await;
        held.push(s);
        seen.push_str(&name);
    }
    seen
}

#[tokio::test]
async fn wlc_spreads_open_connections_by_weight() {
    // Least (256 * active) / weight, first on ties: both idle -> a; then b
    // until 768 / 3 ties a's 256 / 1, where the first (a) wins again.
    assert_eq!(eight_held_on_weights_1_and_3(Scheduler::Wlc, 22).await, "abbbabbb");
}

#[tokio::test]
async fn sed_prefers_the_heavier_endpoint_even_when_both_are_idle() {
    // Least (active + 1) / weight: idle b costs 1/3 against a's 1/1, so
    // sed starts on b where wlc starts on a; a ties at b = 2 and 5 active.
    assert_eq!(eight_held_on_weights_1_and_3(Scheduler::Sed, 23).await, "bbabbbab");
}

/// Three connections, each half-closed (client write side shut; the
/// backend keeps its side) before the next one opens: the endpoints that
/// answered them, in order.
async fn three_half_closed(scheduler: Scheduler, host: u8) -> String {
    let a = holding_backend("a", &format!("127.0.{host}.2")).await;
    let b = holding_backend("b", &format!("127.0.{host}.3")).await;
    let front = frontend_addr(host);
    let mut proxy = Userspace::new(settings());
    serve(&mut proxy, port(Protocol::Tcp, &[front], &[a, b], Some(scheduler))).await;
    let mut held = Vec::new();
    let mut seen = String::new();
    for _ in 0..3 {
        let (mut s, name) = hold(front).await;
        s.shutdown().await.unwrap();
        held.push(s);
        seen.push_str(&name);
        let inactive = |n: &str| seen.matches(n).count() as u32;
        settle(&proxy, front, &[(a, (0, inactive("a"))), (b, (0, inactive("b")))]).await;
    }
    seen
}

#[tokio::test]
async fn wlc_counts_half_closed_connections_as_inactive_load() {
    // Overhead = 256 * active + inactive: one inactive connection makes an
    // endpoint busier than an idle one.
    assert_eq!(three_half_closed(Scheduler::Wlc, 24).await, "aba");
}

#[tokio::test]
async fn sed_ignores_half_closed_connections() {
    // (active + 1) / weight: inactive connections do not count, so every
    // pick ties and goes to the first endpoint.
    assert_eq!(three_half_closed(Scheduler::Sed, 25).await, "aaa");
}

#[tokio::test]
async fn nq_picks_an_idle_endpoint_before_a_faster_busy_one() {
    let a = backend_on("a", "127.0.26.2").await;
    let b = backend_on("b", "127.0.26.3").await;
    let c = backend_on("c", "127.0.26.4").await;
    let front = frontend_addr(26);
    let mut proxy = Userspace::new(settings());
    let p = port(Protocol::Tcp, &[front], &[a, b, c], Some(Scheduler::Nq));
    serve(&mut proxy, weighted(p, &[(a, 10), (b, 1), (c, 1)])).await;

    let mut held = BTreeMap::new();
    let mut seen = String::new();
    for i in 0..5 {
        let (s, name) = hold(front).await;
        seen.push_str(&name);
        held.insert(i, s);
    }
    // Idle first (a, b, c; sed would keep picking a at 2/10 < 1/1), then,
    // with nobody idle, sed: a's 2/10 and 3/10 beat 2/1.
    assert_eq!(seen, "abcaa");

    // b's connection ends: b is idle again and comes first.
    drop(held.remove(&1));
    settle(&proxy, front, &[(b, (0, 0))]).await;
    assert_eq!(hold(front).await.1, "b");
}

#[tokio::test]
async fn sh_sends_each_client_address_to_its_bucket_and_spreads_clients() {
    let (a, b, c) = (backend("a").await, backend("b").await, backend("c").await);
    let front = frontend_addr(27);
    let mut proxy = Userspace::new(settings());
    serve(&mut proxy, port(Protocol::Tcp, &[front], &[a, b, c], Some(Scheduler::Sh))).await;

    let buckets = hash_buckets(&[1, 1, 1]);
    let mut used = BTreeSet::new();
    for k in 1..=12u8 {
        let client: IpAddr = format!("127.1.27.{k}").parse().unwrap();
        let expected = ["a", "b", "c"][buckets[hash_bucket(client, 0)]];
        for _ in 0..3 {
            // A new source port each time: sh hashes the address only.
            assert_eq!(who_from(client, front).await.as_deref(), Some(expected), "client {client}");
        }
        used.insert(expected);
    }
    assert_eq!(used.len(), 3, "twelve client addresses spread over all endpoints: {used:?}");
}

#[tokio::test]
async fn dh_keys_on_the_frontend_address_whoever_the_client_and_moves_only_a_dead_endpoints_keys() {
    let (a, b, c) = (backend("a").await, backend("b").await, backend("c").await);
    let fronts: Vec<SocketAddr> = (1..=12).map(|k| free_addr(&format!("127.0.28.{k}"))).collect();
    let mut proxy = Userspace::new(settings());
    serve(&mut proxy, port(Protocol::Tcp, &fronts, &[a, b, c], Some(Scheduler::Dh))).await;

    let buckets = hash_buckets(&[1, 1, 1]);
    let home = |f: &SocketAddr| hash_bucket(f.ip(), 0);
    let mut used = BTreeSet::new();
    for f in &fronts {
        let expected = ["a", "b", "c"][buckets[home(f)]];
        for k in 1..=3u8 {
            let client: IpAddr = format!("127.1.28.{k}").parse().unwrap();
            assert_eq!(who_from(client, *f).await.as_deref(), Some(expected), "frontend {f} from {client}");
        }
        used.insert(expected);
    }
    assert_eq!(used.len(), 3, "twelve frontend addresses spread over all endpoints: {used:?}");

    // c now refuses: its frontends fall back to the first live member at
    // buckets (2 * home + k) mod 256; every other frontend stays put (the
    // table depends only on the weights, which did not change).
    let dead = closed_port();
    serve(&mut proxy, port(Protocol::Tcp, &fronts, &[a, b, dead], Some(Scheduler::Dh))).await;
    let mut moved = 0;
    for f in &fronts {
        let b0 = home(f);
        let expected = match buckets[b0] {
            2 => {
                moved += 1;
                let m = (0..BUCKETS).map(|k| buckets[(2 * b0 + k) % BUCKETS]).find(|&m| m != 2).unwrap();
                ["a", "b"][m]
            }
            m => ["a", "b"][m],
        };
        for _ in 0..2 {
            assert_eq!(who(*f).await.as_deref(), Some(expected), "frontend {f}");
        }
    }
    assert!(moved > 0, "some frontend was on c");
}

fn maglev_names(endpoints: &[(SocketAddr, &'static str)], client: IpAddr) -> &'static str {
    let members: Vec<Member> = endpoints.iter().map(|(addr, _)| Member { id: member_id(*addr), weight: 1 }).collect();
    endpoints[maglev_table(&members)[maglev_slot(client, 0, 0)]].1
}

#[tokio::test]
async fn mh_keeps_each_client_on_its_maglev_slot_and_spreads_clients() {
    let (a, b, c) = (backend("a").await, backend("b").await, backend("c").await);
    let front = frontend_addr(29);
    let mut proxy = Userspace::new(settings());
    serve(&mut proxy, port(Protocol::Tcp, &[front], &[a, b, c], Some(Scheduler::Mh))).await;

    let clients: Vec<IpAddr> = (1..=24).map(|k| format!("127.1.29.{k}").parse().unwrap()).collect();
    let all = [(a, "a"), (b, "b"), (c, "c")];
    let mut used = BTreeSet::new();
    for &client in &clients {
        let expected = maglev_names(&all, client);
        for _ in 0..3 {
            assert_eq!(who_from(client, front).await.as_deref(), Some(expected), "client {client}");
        }
        used.insert(expected);
    }
    // The backends' ports (and so the table) differ per run: all 24
    // clients on one endpoint has probability 3 * 3^-24.
    assert!(used.len() >= 2, "clients spread: {used:?}");

    // c leaves: nobody goes there, and every client is where the rebuilt
    // table says.
    serve(&mut proxy, port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Mh))).await;
    for &client in &clients {
        let expected = maglev_names(&all[..2], client);
        for _ in 0..2 {
            assert_eq!(who_from(client, front).await.as_deref(), Some(expected), "client {client} without c");
        }
    }
}

#[tokio::test]
async fn fo_always_picks_the_highest_weight_available_endpoint() {
    let a = backend_on("a", "127.0.30.2").await;
    let b = backend_on("b", "127.0.30.3").await;
    let c = backend_on("c", "127.0.30.4").await;
    let dead = free_addr("127.0.30.5");
    let front = frontend_addr(30);
    let mut proxy = Userspace::new(settings());
    let fo = |endpoints: &[SocketAddr], weights: &[(SocketAddr, u32)]| {
        weighted(port(Protocol::Tcp, &[front], endpoints, Some(Scheduler::Fo)), weights)
    };
    serve(&mut proxy, fo(&[a, b, c], &[(a, 1), (b, 3), (c, 2)])).await;
    // Load does not matter: b keeps every connection open and still wins.
    let mut held = Vec::new();
    for _ in 0..4 {
        let (s, name) = hold(front).await;
        assert_eq!(name, "b");
        held.push(s);
    }

    serve(&mut proxy, fo(&[a, b, c], &[(a, 1), (b, 0), (c, 2)])).await;
    assert_eq!(tally(front, 4).await, [("c".to_string(), 4)].into(), "b at weight 0: the next highest");

    serve(&mut proxy, fo(&[a, b], &[(a, 1), (b, 0)])).await;
    assert_eq!(tally(front, 3).await, [("a".to_string(), 3)].into(), "c removed: a");

    // The highest weight refuses connections: each connection fails over
    // to the next highest (by retry, then by ejection after three).
    serve(&mut proxy, fo(&[dead, a, b, c], &[(dead, 5), (a, 1), (b, 3), (c, 2)])).await;
    assert_eq!(tally(front, 5).await, [("b".to_string(), 5)].into(), "a refusing weight 5 is skipped");
}

#[tokio::test]
async fn ovf_fills_the_highest_weight_past_its_weight_then_overflows_then_refuses() {
    let a = backend_on("a", "127.0.31.2").await;
    let b = backend_on("b", "127.0.31.3").await;
    let front = frontend_addr(31);
    let mut proxy = Userspace::new(settings());
    let p = port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Ovf));
    serve(&mut proxy, weighted(p, &[(a, 1), (b, 2)])).await;

    let mut held = Vec::new();
    let mut seen = String::new();
    for _ in 0..5 {
        let (s, name) = hold(front).await;
        held.push(s);
        seen.push_str(&name);
    }
    // IPVS skips a member only once active > weight: b (weight 2) takes
    // three, a (weight 1) two.
    assert_eq!(seen, "bbbaa");
    assert_eq!(who(front).await, None, "everyone over its weight: no endpoint, the client is reset");

    // One of b's connections ends: b is under its limit again.
    drop(held.remove(0));
    settle(&proxy, front, &[(b, (2, 0))]).await;
    assert_eq!(hold(front).await.1, "b");
}

#[tokio::test]
async fn lblc_pins_each_frontend_address_to_one_endpoint_until_it_overloads() {
    let (a, b) = (backend("a").await, backend("b").await);
    let (f1, f2) = (free_addr("127.0.32.1"), free_addr("127.0.32.2"));
    let mut proxy = Userspace::new(settings());
    serve(&mut proxy, port(Protocol::Tcp, &[f1, f2], &[a, b], Some(Scheduler::Lblc))).await;

    let mut on_f1 = Vec::new();
    let mut on_f2 = Vec::new();
    let mut seen = Vec::new();
    for f in [f1, f1, f2, f1, f2] {
        let (s, name) = hold(f).await;
        let held = if f == f1 { &mut on_f1 } else { &mut on_f2 };
        held.push(s);
        seen.push(name);
    }
    // f1 gets wlc's a and keeps it though b is idle (wlc would alternate);
    // f2 gets wlc's pick then (b) and keeps it. a at 2 active is over its
    // weight 1, but not overloaded: no endpoint is below half its weight.
    assert_eq!(seen, ["a", "a", "b", "a", "b"]);

    // b goes idle: a (3 active) is now overloaded, so f1 gets wlc's b and
    // keeps b from then on.
    on_f2.clear();
    settle(&proxy, f1, &[(a, (3, 0)), (b, (0, 0))]).await;
    for _ in 0..2 {
        let (s, name) = hold(f1).await;
        assert_eq!(name, "b");
        on_f1.push(s);
    }
}

/// Five connections to one frontend, held open, one of the first two
/// released before the fifth: the endpoints that answered.
async fn replication_script(scheduler: Scheduler, host: u8) -> Vec<String> {
    let (a, b) = (backend("a").await, backend("b").await);
    let front = frontend_addr(host);
    let mut proxy = Userspace::new(settings());
    serve(&mut proxy, port(Protocol::Tcp, &[front], &[a, b], Some(scheduler))).await;
    let mut held = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (s, name) = hold(front).await;
        held.push(s);
        seen.push(name);
    }
    assert_eq!(seen, ["a", "a", "b", "b"], "{scheduler}: a until overloaded (2 > 1 with b idle), then b");
    // One of a's connections ends: a has 1 active, b 2.
    drop(held.remove(0));
    settle(&proxy, front, &[(a, (1, 0)), (b, (2, 0))]).await;
    seen.push(hold(front).await.1);
    seen
}

#[tokio::test]
async fn lblcr_uses_the_least_loaded_of_its_set_where_lblc_keeps_one_endpoint() {
    // lblcr's set for the frontend is {b, a} once a overloaded: the least
    // loaded of them (a, 256 < 512) wins.
    assert_eq!(replication_script(Scheduler::Lblcr, 33).await.last().map(String::as_str), Some("a"));
    // lblc moved the frontend to b; b at 2 > 1 is not overloaded (a is not
    // below half its weight), so it stays.
    assert_eq!(replication_script(Scheduler::Lblc, 34).await.last().map(String::as_str), Some("b"));
}

#[tokio::test]
async fn twos_prefers_the_less_loaded_of_two_random_draws() {
    let a = backend_on("a", "127.0.35.2").await;
    let b = backend_on("b", "127.0.35.3").await;
    let front = frontend_addr(35);
    let mut proxy = Userspace::new(settings());
    let twos = |weights: &[(SocketAddr, u32)]| {
        weighted(port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Twos)), weights)
    };
    // Load a with 20 open connections while b is at weight 0.
    serve(&mut proxy, twos(&[(b, 0)])).await;
    let mut held = Vec::new();
    for _ in 0..20 {
        let (s, name) = hold(front).await;
        assert_eq!(name, "a", "weight 0 is never drawn");
        held.push(s);
    }

    // Equal weights again (the counters stay): a wins only when both
    // draws are a, 1/4 of the time; expected 50 of 200, sigma 6.1. Random
    // would give a 100, least connection 0.
    serve(&mut proxy, twos(&[])).await;
    let counts = tally(front, 200).await;
    let na = counts.get("a").copied().unwrap_or(0);
    assert!((15..=85).contains(&na), "a, drawn twice, 1/4 of picks: {counts:?}");
}
