//! The userspace proxy on real loopback sockets: schedulers, retries,
//! affinity, draining, UDP flows, a taken port, and clients that misbehave.

use std::net::SocketAddr;
use std::time::Duration;

use kproxy_dataplane::Dataplane;
use kproxy_model::{
    FrontendKind, HealthCheck, Probe, Protocol, Scheduler, ServiceName, ServicePortName, SessionAffinity,
};
use kproxy_userspace::Userspace;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

mod common;
use common::*;

#[tokio::test]
async fn rr_alternates_and_a_refused_endpoint_is_retried_elsewhere() {
    let (a, b) = (backend("a").await, backend("b").await);
    let front = frontend_addr(1);
    let mut proxy = Userspace::new(settings());
    assert!(
        sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Rr))])).await.is_empty()
    );
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(who(front).await.expect("an answer"));
    }
    assert_eq!(seen, ["a", "b", "a", "b"]);

    // One endpoint refuses: every connection still gets through.
    let dead = closed_port();
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[dead, b], Some(Scheduler::Rr))])).await;
    for _ in 0..6 {
        assert_eq!(who(front).await.as_deref(), Some("b"));
    }
}

#[tokio::test]
async fn lc_sends_new_connections_to_the_less_busy_endpoint() {
    let (a, b) = (backend("a").await, backend("b").await);
    let front = frontend_addr(2);
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Lc))])).await;
    let mut held = TcpStream::connect(front).await.unwrap();
    let first = name_of(&mut held).await.unwrap();
    let (busy, idle) = if first == "a" { (a, b) } else { (b, a) };
    for _ in 0..3 {
        let other = who(front).await.unwrap();
        assert_ne!(other, first, "the endpoint holding a connection is busier");
        // The proxy counts the close when it sees it: wait for that.
        settle(&proxy, front, &[(busy, (1, 0)), (idle, (0, 0))]).await;
    }
}

#[tokio::test]
async fn sh_keeps_a_client_on_one_endpoint() {
    let (a, b, c) = (backend("a").await, backend("b").await, backend("c").await);
    let front = frontend_addr(3);
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[a, b, c], Some(Scheduler::Sh))])).await;
    let first = who(front).await.unwrap();
    for _ in 0..10 {
        assert_eq!(who(front).await.unwrap(), first);
    }
}

#[tokio::test]
async fn affinity_pins_a_client_until_its_timeout() {
    let (a, b) = (backend("a").await, backend("b").await);
    let front = frontend_addr(4);
    let mut p = port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Rr));
    p.session_affinity = Some(SessionAffinity { timeout_seconds: 1 });
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![p])).await;
    let first = who(front).await.unwrap();
    for _ in 0..5 {
        assert_eq!(who(front).await.unwrap(), first, "pinned");
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Expired: rr moves on to the other endpoint.
    assert_ne!(who(front).await.unwrap(), first);
}

#[tokio::test]
async fn a_removed_endpoint_drains_its_open_connection_and_gets_no_new_ones() {
    let (a, b) = (backend("a").await, backend("b").await);
    let front = frontend_addr(5);
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Rr))])).await;
    let mut open = TcpStream::connect(front).await.unwrap();
    let pinned = name_of(&mut open).await.unwrap();
    let stays = if pinned == "a" { b } else { a };
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[stays], Some(Scheduler::Rr))])).await;

    open.write_all(b"still here\n").await.unwrap();
    assert_eq!(name_of(&mut open).await.as_deref(), Some("still here"), "the open connection carries on");
    for _ in 0..4 {
        assert_ne!(who(front).await.unwrap(), pinned, "no new connection to the removed endpoint");
    }
}

#[tokio::test]
async fn udp_flows_stay_on_their_endpoint_and_spread_across_clients() {
    let (a, b) = (udp_backend("a").await, udp_backend("b").await);
    let front = {
        let probe = std::net::UdpSocket::bind("127.0.6.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![port(Protocol::Udp, &[front], &[a, b], Some(Scheduler::Rr))])).await;
    let mut firsts = Vec::new();
    for _ in 0..2 {
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut answers = Vec::new();
        for _ in 0..3 {
            client.send_to(b"hi", front).await.unwrap();
            let mut buf = [0u8; 16];
            let (n, from) =
                tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buf)).await.unwrap().unwrap();
            assert_eq!(from, front, "replies come from the frontend address");
            answers.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        assert!(answers.iter().all(|x| *x == answers[0]), "one flow, one endpoint: {answers:?}");
        firsts.push(answers[0].clone());
    }
    assert_ne!(firsts[0], firsts[1], "two clients, two flows, rr");
}

#[tokio::test]
async fn a_taken_port_is_reported_for_its_frontend_and_the_others_work() {
    let a = backend("a").await;
    let taken = std::net::TcpListener::bind("127.0.7.1:0").unwrap();
    let busy = taken.local_addr().unwrap();
    let free = frontend_addr(7);
    let mut proxy = Userspace::new(settings());
    let skipped = sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[busy, free], &[a], None)])).await;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].starts_with(&format!("frontend {busy}/TCP: cannot listen: ")), "{skipped:?}");
    assert_eq!(who(free).await.as_deref(), Some("a"));
}

#[tokio::test]
async fn idle_and_slow_clients_do_not_stop_others_being_served() {
    let a = backend("a").await;
    let front = frontend_addr(8);
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[a], None)])).await;
    // 200 connections that never send, and one dribbling a byte at a time.
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(front).await.unwrap());
    }
    let mut slow = TcpStream::connect(front).await.unwrap();
    let dribble = tokio::spawn(async move {
        for _ in 0..20 {
            if slow.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let started = std::time::Instant::now();
    for _ in 0..10 {
        assert_eq!(who(front).await.as_deref(), Some("a"));
    }
    assert!(started.elapsed() < Duration::from_secs(2), "served in {:?}", started.elapsed());
    dribble.abort();
}

#[tokio::test]
async fn no_endpoint_resets_the_connection() {
    let front = frontend_addr(9);
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[], None)])).await;
    let mut s = TcpStream::connect(front).await.unwrap();
    let mut buf = [0u8; 8];
    let read = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await.unwrap();
    assert!(matches!(read, Ok(0) | Err(_)), "closed without data: {read:?}");
}

#[tokio::test]
async fn the_listing_counts_open_connections_per_endpoint() {
    let (a, b) = (backend("a").await, backend("b").await);
    let front = frontend_addr(10);
    let mut p = port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Rr));
    p.session_affinity = Some(SessionAffinity { timeout_seconds: 60 });
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![p])).await;
    let mut held = TcpStream::connect(front).await.unwrap();
    let name = name_of(&mut held).await.unwrap();
    let listing = proxy.listing().expect("the userspace mode lists itself").list();
    assert_eq!(listing.len(), 1, "{listing:?}");
    let vs = &listing[0];
    assert_eq!((vs.protocol.as_str(), vs.frontend.clone(), vs.scheduler.as_str()), ("TCP", front.to_string(), "rr"));
    assert_eq!(vs.persistent, Some(60));
    let busy = if name == "a" { a } else { b };
    for rs in &vs.endpoints {
        let expected = if rs.address == busy.to_string() { 1 } else { 0 };
        assert_eq!(rs.active, Some(expected), "{listing:?}");
    }
    let table = kproxy_admin::listing::render(&listing);
    assert!(table.contains(&format!("TCP  {front} rr persistent 60")), "{table}");
}

/// Accepts (and drops) connections on `addr` until aborted: a TCP health
/// port.
fn health_port(addr: SocketAddr) -> tokio::task::JoinHandle<()> {
    let listener = std::net::TcpListener::bind(addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let listener = TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            drop(s);
        }
    })
}

#[tokio::test]
async fn a_failing_health_check_takes_an_endpoint_out_until_it_passes_again() {
    let (a, b) = (backend_on("a", "127.0.12.1").await, backend_on("b", "127.0.12.2").await);
    let check_port = std::net::TcpListener::bind("127.0.12.1:0").unwrap().local_addr().unwrap().port();
    let a_health = SocketAddr::new(a.ip(), check_port);
    let mut a_check = health_port(a_health);
    let _b_check = health_port(SocketAddr::new(b.ip(), check_port));
    let front = frontend_addr(11);
    let mut p = port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Rr));
    p.health_check = Some(HealthCheck {
        probe: Probe::Tcp,
        port: Some(check_port),
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(50),
        rise: 2,
        fall: 2,
    });
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![p.clone()])).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4 {
        seen.insert(who(front).await.unwrap());
    }
    assert_eq!(seen.len(), 2, "both healthy: {seen:?}");

    a_check.abort();
    let _ = (&mut a_check).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..6 {
        assert_eq!(who(front).await.as_deref(), Some("b"), "a fails its check");
    }
    // A sync that changes nothing keeps the verdict.
    sync(&mut proxy, &state(vec![p])).await;
    assert_eq!(who(front).await.as_deref(), Some("b"));

    let _a_back = health_port(a_health);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4 {
        seen.insert(who(front).await.unwrap());
    }
    assert_eq!(seen.len(), 2, "a passes again: {seen:?}");
}

#[tokio::test]
async fn weights_split_round_robin_and_weight_zero_drains() {
    // Weights are by address: the backends need addresses of their own.
    let (a, b) = (backend_on("a", "127.0.13.1").await, backend_on("b", "127.0.13.2").await);
    let front = frontend_addr(12);
    let mut p = port(Protocol::Tcp, &[front], &[a, b], Some(Scheduler::Wrr));
    p.weights = [(a.ip(), 3)].into();
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![p.clone()])).await;
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..8 {
        *counts.entry(who(front).await.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(counts, [("a".to_string(), 6), ("b".to_string(), 2)].into());

    p.weights = [(a.ip(), 0)].into();
    sync(&mut proxy, &state(vec![p])).await;
    for _ in 0..4 {
        assert_eq!(who(front).await.as_deref(), Some("b"), "weight 0: no new connections");
    }
}

#[tokio::test]
async fn a_frontend_two_services_claim_goes_to_the_cluster_ip_and_the_loser_is_reported_once() {
    let (a, b) = (backend("a").await, backend("b").await);
    let front = frontend_addr(14);
    let web = port(Protocol::Tcp, &[front], &[a], None);
    // Sorts after web, which used to make it the frontend's last (winning)
    // claim; an external IP never beats a cluster IP.
    let mut thief = port(Protocol::Tcp, &[front], &[b], None);
    thief.name = ServicePortName::new(ServiceName::new("default", "zzz"), "http", Protocol::Tcp);
    thief.frontends[0].kind = FrontendKind::ExternalIp;
    let state = state(vec![web, thief]);
    let mut proxy = Userspace::new(settings());
    let skipped = sync(&mut proxy, &state).await;
    assert_eq!(
        skipped,
        [format!("default/zzz:http/TCP: frontend {front} is already served by default/web:http/TCP; not served")]
    );
    assert_eq!(who(front).await.as_deref(), Some("a"));
    assert_eq!(sync(&mut proxy, &state).await, Vec::<String>::new(), "reported once, not every sync");
    assert_eq!(who(front).await.as_deref(), Some("a"));
}
