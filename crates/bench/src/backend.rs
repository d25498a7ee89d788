//! The backends of the userspace comparison: a small HTTP/1.1 responder on
//! tokio (keep-alive, pipelining, a fixed 13-byte body with
//! `Content-Length`, `Connection: close` honoured by closing after the
//! reply), and the client side of one request/reply.
//!
//! Requests carry no body (the load generators send `GET`s), so a request
//! ends at its blank line.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Every reply's body.
pub const BODY: &[u8] = b"hello, world\n";
/// The keep-alive reply, all of it.
pub const KEEP_ALIVE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nhello, world\n";
const CLOSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhello, world\n";
/// What one request costs the client side: a `GET` with a `Host`.
pub const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
/// A connection sending more than this without a complete request is dropped.
const MAX_HEAD: usize = 64 * 1024;

/// Responders listening on some addresses, on a runtime of their own.
pub struct Backends {
    runtime: tokio::runtime::Runtime,
    open: Arc<AtomicUsize>,
}

impl Backends {
    /// Listens on every address in `addrs` (backlog 4096) and serves them
    /// on `threads` tokio workers.
    pub fn start(addrs: &[SocketAddr], threads: usize) -> anyhow::Result<Backends> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("bench-backend")
            .enable_all()
            .build()?;
        let open = Arc::new(AtomicUsize::new(0));
        for &addr in addrs {
            let listener = runtime.block_on(async {
                let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
                socket.set_reuseaddr(true)?;
                socket.bind(addr)?;
                socket.listen(4096)
            });
            let listener = listener.with_context(|| format!("listening on {addr}"))?;
            let open = open.clone();
            runtime.spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let open = open.clone();
                    tokio::spawn(async move {
                        open.fetch_add(1, Ordering::Relaxed);
                        serve(stream).await;
                        open.fetch_sub(1, Ordering::Relaxed);
                    });
                }
            });
        }
        Ok(Backends { runtime, open })
    }

    /// Connections the backends have open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Runs `f` on the backends' runtime (the idle connections' client side).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }
}

/// Answers every complete request in what arrived, in order, until the
/// client closes, a request asks for `Connection: close`, or I/O fails.
async fn serve(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(2048);
    let mut out = Vec::new();
    loop {
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let (mut start, mut close) = (0, false);
        while let Some(end) = find(&buf[start..], b"\r\n\r\n") {
            close = wants_close(&buf[start..start + end]);
            out.extend_from_slice(if close { CLOSE } else { KEEP_ALIVE });
            start += end + 4;
            if close {
                break;
            }
        }
        buf.drain(..start);
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if close {
            let _ = stream.shutdown().await;
            return;
        }
        if buf.len() > MAX_HEAD {
            return;
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A `Connection` header whose value lists `close` (case-insensitive).
fn wants_close(head: &[u8]) -> bool {
    head.split(|&b| b == b'\n').skip(1).any(|line| {
        let Some(colon) = line.iter().position(|&b| b == b':') else { return false };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        name.trim_ascii().eq_ignore_ascii_case(b"connection")
            && value.split(|&b| b == b',').any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
    })
}

/// Whether `buf` holds a whole reply (head and `Content-Length` body);
/// an error for anything but a 200 with a length.
fn reply_complete(buf: &[u8]) -> anyhow::Result<bool> {
    let Some(end) = find(buf, b"\r\n\r\n") else { return Ok(false) };
    let head = String::from_utf8_lossy(&buf[..end]);
    anyhow::ensure!(head.starts_with("HTTP/1.1 200 "), "unexpected reply {:?}", head.lines().next());
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .context("a reply without Content-Length")?;
    Ok(buf.len() >= end + 4 + length)
}

/// One request and its reply on an open connection.
pub async fn exchange(stream: &mut TcpStream) -> anyhow::Result<()> {
    stream.write_all(REQUEST).await?;
    let mut buf = Vec::with_capacity(256);
    loop {
        let n = stream.read_buf(&mut buf).await?;
        anyhow::ensure!(n > 0, "the connection closed after {} bytes of the reply", buf.len());
        if reply_complete(&buf)? {
            return Ok(());
        }
    }
}

/// A new connection to `addr` and one request/reply on it, blocking, each
/// step bounded by `timeout`: is something serving there?
pub fn probe(addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(REQUEST)?;
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 1024]);
    loop {
        let n = stream.read(&mut chunk)?;
        anyhow::ensure!(n > 0, "the connection closed after {} bytes of the reply", buf.len());
        buf.extend_from_slice(&chunk[..n]);
        if reply_complete(&buf)? {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_close_is_recognised_in_any_case_and_list() {
        assert!(wants_close(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r"));
        assert!(wants_close(b"GET / HTTP/1.1\r\nconnection:Keep-Alive, CLOSE"));
        assert!(!wants_close(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive"));
        assert!(!wants_close(b"GET /close HTTP/1.1\r\nX-Connection: close"));
    }

    #[test]
    fn replies_are_complete_with_their_body() {
        assert!(reply_complete(KEEP_ALIVE).expect("a 200"));
        assert!(reply_complete(CLOSE).expect("a 200"));
        assert!(!reply_complete(&KEEP_ALIVE[..KEEP_ALIVE.len() - 1]).expect("a 200"));
        assert!(!reply_complete(b"HTTP/1.1 200 OK\r\n").expect("no head yet"));
        assert!(reply_complete(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n").is_err());
        assert_eq!(KEEP_ALIVE.len() - BODY.len(), find(KEEP_ALIVE, b"\r\n\r\n").expect("a head") + 4);
    }

    #[test]
    fn serves_keep_alive_pipelined_and_close() {
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        // Port 0: find the bound one through a probe listener first.
        let port = std::net::TcpListener::bind(addr).and_then(|l| l.local_addr()).expect("a free port").port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let backends = Backends::start(&[addr], 1).expect("listening");
        probe(addr, Duration::from_secs(2)).expect("a reply");
        backends.block_on(async {
            let mut stream = TcpStream::connect(addr).await.expect("connected");
            exchange(&mut stream).await.expect("first reply");
            exchange(&mut stream).await.expect("second reply on the same connection");
            // Two pipelined requests, the second asking to close.
            let two = [REQUEST, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"].concat();
            stream.write_all(&two).await.expect("written");
            let mut all = Vec::new();
            stream.read_to_end(&mut all).await.expect("read until closed");
            assert_eq!(all, [KEEP_ALIVE, CLOSE].concat());
        });
    }
}
