//! The userspace proxy's byte relay on real loopback sockets: bulk
//! transfers (spliced, and copied when splice is off) arrive intact, idle
//! connections are closed after their timeout, a client that never reads
//! does not make the proxy buffer without bound, and floods of silent or
//! stuck connections do not stop other clients being served.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kproxy_dataplane::Dataplane;
use kproxy_model::Protocol;
use kproxy_userspace::{Settings, Userspace};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod common;
use common::*;

/// Bytes of a bulk transfer: a pattern that shows reordering or loss.
fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Sends `data` through the echo backend behind `front` while reading the
/// echo back; returns what came back after the name line.
async fn echo_through(front: SocketAddr, data: Vec<u8>) -> Vec<u8> {
    let mut s = TcpStream::connect(front).await.unwrap();
    name_of(&mut s).await.expect("the backend's name");
    let (mut read, mut write) = s.into_split();
    let len = data.len();
    let writer = tokio::spawn(async move {
        write.write_all(&data).await.unwrap();
        write.shutdown().await.unwrap();
    });
    let mut back = Vec::with_capacity(len);
    tokio::time::timeout(Duration::from_secs(20), read.read_to_end(&mut back)).await.expect("echoed in time").unwrap();
    writer.await.unwrap();
    back
}

#[tokio::test]
async fn bulk_transfers_are_spliced_and_arrive_intact() {
    let a = backend("a").await;
    let front = frontend_addr(50);
    let mut proxy = Userspace::new(settings());
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[a], None)])).await;
    let data = payload(8 << 20);
    let back = echo_through(front, data.clone()).await;
    assert!(back == data, "8 MiB echoed intact (got {} bytes)", back.len());
    let traffic = proxy.traffic();
    let spliced = traffic.spliced.get();
    assert!(spliced > 8 << 20, "most of 16 MiB moved by splice, got {spliced}");
    assert_eq!(traffic.splice_fallbacks.get(), 0);
}

#[tokio::test]
async fn with_splice_off_bulk_transfers_are_copied_intact() {
    let a = backend("a").await;
    let front = frontend_addr(51);
    let mut proxy = Userspace::new(Settings { splice: false, ..settings() });
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[a], None)])).await;
    let data = payload(4 << 20);
    let back = echo_through(front, data.clone()).await;
    assert!(back == data, "4 MiB echoed intact (got {} bytes)", back.len());
    let traffic = proxy.traffic();
    assert_eq!(traffic.spliced.get(), 0);
    assert!(traffic.copied.get() >= 8 << 20, "both directions copied");
}

/// Reads until the proxy closes the connection; `None` if it stays open
/// for `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout_at((started + within).into(), s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_its_timeout_and_a_busy_one_is_not() {
    let a = backend("a").await;
    let front = frontend_addr(52);
    let settings = Settings { tcp_idle_timeout: Duration::from_millis(400), ..settings() };
    let mut proxy = Userspace::new(settings);
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[a], None)])).await;

    let mut idle = TcpStream::connect(front).await.unwrap();
    name_of(&mut idle).await.unwrap();
    let mut busy = TcpStream::connect(front).await.unwrap();
    name_of(&mut busy).await.unwrap();
    let talker = tokio::spawn(async move {
        // 1.2 s of traffic, a byte every 100 ms, each echoed back.
        for _ in 0..12 {
            busy.write_all(b"x").await.ok()?;
            let mut byte = [0u8; 1];
            busy.read_exact(&mut byte).await.ok()?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Some(busy)
    });
    let closed = closed_within(&mut idle, Duration::from_secs(3)).await.expect("the idle connection is closed");
    assert!(closed >= Duration::from_millis(350), "not before its timeout: {closed:?}");
    let mut busy = talker.await.unwrap().expect("the busy connection stayed open past three timeouts");
    // Once quiet, it goes too.
    assert!(closed_within(&mut busy, Duration::from_secs(3)).await.is_some());
    assert_eq!(proxy.traffic().idle_closed.get(), 2);
}

/// A backend that says its name, reads until the client's end, then keeps
/// its own side open (for 10 s).
async fn lingering_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                s.write_all(b"lingering\n").await.ok()?;
                let mut sink = Vec::new();
                s.read_to_end(&mut sink).await.ok()?;
                tokio::time::sleep(Duration::from_secs(10)).await;
                Some(s)
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_half_closed_connection_is_closed_after_the_half_closed_timeout() {
    let a = lingering_backend().await;
    let front = frontend_addr(53);
    let settings = Settings { tcp_half_closed_timeout: Duration::from_millis(300), ..settings() };
    let mut proxy = Userspace::new(settings);
    sync(&mut proxy, &state(vec![port(Protocol::Tcp, &[front], &[a], None)])).await;
    let mut s = TcpStream::connect(front).await.unwrap();
    name_of(&mut s).await.unwrap();
    // The client is done sending; the backend keeps its side open.
    s.shutdown().await.unwrap();
    let closed = closed_within(&mut s, Duration::from_secs(3)).await.expect("closed after the half-closed timeout");
    assert!(closed >= Duration::from_millis(250), "{closed:?}");
}

/// A backend that writes to each connection as fast as it can, counting
/// what the kernel took.
async fn firehose() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let counter = written.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let chunk = vec![7u8; 64 * 1024];
                // Bounded: at most 1 GiB, far beyond any socket buffers.
                for _ in 0..16 * 1024 {
                    match s.write(&chunk).await {
                        Ok(n) => counter.fetch_add(n as u64, Ordering::Relaxed),
                        Err(_) => return,
                    };
                }
            });
        }
    });
    (addr, written)
}

#[tokio::test]
async fn a_client_that_never_reads_holds_back_its_endpoint_and_others_are_served() {
    let (hose, written) = firehose().await;
    let a = backend("a").await;
    let (front, other) = (frontend_addr(54), frontend_addr(55));
    let mut proxy = Userspace::new(settings());
    let mut slow = port(Protocol::Tcp, &[front], &[hose], None);
    slow.name.service.name = "hose".into();
    sync(&mut proxy, &state(vec![slow, port(Protocol::Tcp, &[other], &[a], None)])).await;

    let _reader_that_never_reads = TcpStream::connect(front).await.unwrap();
    // Socket buffers fill, then the proxy stops reading the endpoint and
    // the endpoint's writes stop: the proxy holds one buffer, not the lot.
    let mut last = 0;
    let mut stalled = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = written.load(Ordering::Relaxed);
        if now > 0 && now == last {
            stalled = true;
            break;
        }
        last = now;
    }
    assert!(stalled, "the endpoint's writes stopped (at {last} bytes)");
    assert!(last < 64 << 20, "held back within socket buffers, not {last} bytes");
    for _ in 0..5 {
        assert_eq!(who(other).await.as_deref(), Some("a"));
    }
}

/// A listener whose accept queue is full: further connects get no answer
/// (their SYNs are dropped) until they time out.
fn stuck_endpoint() -> (std::net::TcpListener, std::net::TcpStream, SocketAddr) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into()).unwrap();
    socket.listen(0).unwrap();
    let listener: std::net::TcpListener = socket.into();
    let addr = listener.local_addr().unwrap();
    let filler = std::net::TcpStream::connect(addr).unwrap();
    (listener, filler, addr)
}

#[tokio::test]
async fn floods_of_silent_and_stuck_connections_do_not_stop_other_clients() {
    let a = backend("a").await;
    let (_stuck, _filler, stuck) = stuck_endpoint();
    let (silent_front, stuck_front, other) = (frontend_addr(56), frontend_addr(57), frontend_addr(58));
    let settings = Settings {
        connect_timeout: Duration::from_millis(300),
        connect_attempts: 1,
        eject_after: 0,
        tcp_idle_timeout: Duration::from_secs(1),
        ..settings()
    };
    let mut proxy = Userspace::new(settings);
    let mut silent = port(Protocol::Tcp, &[silent_front], &[a], None);
    silent.name.service.name = "silent".into();
    let mut stuck_port = port(Protocol::Tcp, &[stuck_front], &[stuck], None);
    stuck_port.name.service.name = "stuck".into();
    let served = port(Protocol::Tcp, &[other], &[a], None);
    sync(&mut proxy, &state(vec![silent, stuck_port, served])).await;

    // 1,000 clients that connect and never send a byte, and 300 whose
    // endpoint never answers the handshake.
    let mut flood = Vec::new();
    for _ in 0..1000 {
        flood.push(TcpStream::connect(silent_front).await.unwrap());
    }
    for _ in 0..300 {
        flood.push(TcpStream::connect(stuck_front).await.unwrap());
    }
    let started = Instant::now();
    for _ in 0..10 {
        assert_eq!(who(other).await.as_deref(), Some("a"));
    }
    assert!(started.elapsed() < Duration::from_secs(2), "served in {:?} during the flood", started.elapsed());

    // The stuck ones are closed after the connect timeout, the silent ones
    // after the idle timeout: every flood connection ends.
    let deadline = Instant::now() + Duration::from_secs(10);
    for (i, s) in flood.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(closed_within(s, left).await.is_some(), "flood connection {i} still open after 10 s");
    }
    let listing = proxy.listing().expect("the userspace mode lists itself").list();
    let open: u32 = listing.iter().flat_map(|v| &v.endpoints).map(|e| e.active.unwrap_or(0)).sum();
    assert_eq!(open, 0, "no connection left open: {listing:?}");
}
