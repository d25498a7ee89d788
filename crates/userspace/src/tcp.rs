//! TCP frontends: accept, pick an endpoint (retrying refused connects on
//! others), and relay bytes both ways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use crate::Settings;
use crate::frontend::Target;
use crate::service::Picked;
use crate::{buffers, splice};

/// Accepts until the task is aborted (the frontend went away); connections
/// already accepted carry on in their own tasks.
pub async fn serve(listener: TcpListener, target: Arc<Target>, settings: Arc<Settings>, traffic: Arc<Traffic>) {
    let frontend = listener.local_addr().ok();
    // A listener on one address is every connection's local address: no
    // getsockname per connection (a wildcard one asks each time).
    let bound = frontend.filter(|a| !a.ip().is_unspecified());
    loop {
        let (client, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and friends: wait a little instead of spinning.
                debug!(?frontend, error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (target, settings, traffic) = (target.clone(), settings.clone(), traffic.clone());
        tokio::spawn(async move { connection(client, peer, bound, &target, &settings, &traffic).await });
    }
}

async fn connection(
    client: TcpStream,
    peer: SocketAddr,
    bound: Option<SocketAddr>,
    target: &Target,
    settings: &Settings,
    traffic: &Traffic,
) {
    let Some(frontend) = bound.or_else(|| client.local_addr().ok()) else { return };
    let Some((upstream, picked)) = connect(peer, frontend, target, settings).await else {
        // Nothing to connect to: reset, as a closed port would.
        let _ = socket2::SockRef::from(&client).set_linger(Some(std::time::Duration::ZERO));
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    relay(client, upstream, &picked, settings, traffic).await;
}

/// An endpoint that accepted the connection. A refused or timed-out
/// connect is retried on another endpoint, up to `connect_attempts` in
/// all: nothing has been sent to any endpoint yet, so a retry is safe.
async fn connect(
    peer: SocketAddr,
    frontend: SocketAddr,
    target: &Target,
    settings: &Settings,
) -> Option<(TcpStream, Picked)> {
    let mut tried = Vec::new();
    for _ in 0..settings.connect_attempts.max(1) {
        let picked = target.pick(peer, frontend, &tried, settings)?;
        match tokio::time::timeout(settings.connect_timeout, TcpStream::connect(picked.addr)).await {
            Ok(Ok(stream)) => {
                picked.counters.connected();
                return Some((stream, picked));
            }
            outcome => {
                let reason = match outcome {
                    Ok(Err(e)) => e.to_string(),
                    _ => "timed out".into(),
                };
                let ejected = picked.counters.failed(Instant::now(), settings);
                debug!(endpoint = %picked.addr, %reason, ejected, "connect failed; trying another endpoint");
                tried.push(picked.addr);
            }
        }
    }
    None
}

/// Copies both ways until both are done, or until the connection has been
/// idle (no byte either way) for the idle timeout: `tcp_idle_timeout`
/// while both directions are open, `tcp_half_closed_timeout` once one is
/// closed. The endpoint counts as active while both directions are open
/// and inactive once one is closed.
async fn relay(client: TcpStream, upstream: TcpStream, picked: &Picked, settings: &Settings, traffic: &Traffic) {
    let clock = Clock::new();
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let to_upstream = pipe(client_read, upstream_write, &clock, settings, traffic);
    let to_client = pipe(upstream_read, client_write, &clock, settings, traffic);
    tokio::pin!(to_upstream, to_client);
    // A clean end of one direction (FIN) leaves the other open, as TCP
    // half-close does; an error (reset) or the idle timeout ends both.
    let first = tokio::select! {
        copied = &mut to_upstream => Some((copied, true)),
        copied = &mut to_client => Some((copied, false)),
        () = clock.idle_for(settings.tcp_idle_timeout) => None,
    };
    match first {
        Some((Ok(()), upstream_done)) => {
            picked.counters.half_closed();
            let rest = async { if upstream_done { to_client.await } else { to_upstream.await } };
            tokio::select! {
                _ = rest => {}
                () = clock.idle_for(settings.tcp_half_closed_timeout) => {
                    traffic.idle_closed.inc();
                }
            }
            picked.counters.closed(true);
        }
        Some((Err(_), _)) => picked.counters.closed(false),
        None => {
            traffic.idle_closed.inc();
            picked.counters.closed(false);
        }
    }
}

/// What the TCP relays moved, for every frontend of a proxy; exported as
/// `kproxy_userspace_*` metrics.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Bytes copied through a userspace buffer.
    pub copied: Counter,
    /// Bytes moved with `splice` (never through userspace).
    pub spliced: Counter,
    /// Directions that wanted to splice and could not (no pipe, or the
    /// sockets do not support it): they copy instead.
    pub splice_fallbacks: Counter,
    /// Connections closed for being idle.
    pub idle_closed: Counter,
}

impl Traffic {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("kproxy_userspace");
        r.register("copied_bytes", "Bytes relayed through a userspace buffer", self.copied.clone());
        r.register("spliced_bytes", "Bytes relayed with splice(2), never through userspace", self.spliced.clone());
        r.register(
            "splice_fallbacks",
            "Bulk transfers that could not use splice (no pipe, or the sockets do not support it) and copied instead",
            self.splice_fallbacks.clone(),
        );
        r.register(
            "idle_closed_connections",
            "TCP connections closed after their idle (or half-closed) timeout",
            self.idle_closed.clone(),
        );
    }
}

/// What both directions of a relay share: when it last moved a byte (in
/// milliseconds since it started), and whether one direction has ended.
pub struct Clock {
    start: Instant,
    last: AtomicU64,
    one_ended: AtomicBool,
}

impl Clock {
    fn new() -> Self {
        Self { start: Instant::now(), last: AtomicU64::new(0), one_ended: AtomicBool::new(false) }
    }

    /// A direction saw its source end: sends the FIN on to `to`, unless the
    /// other direction has ended already. Then both sockets are about to
    /// close, and with nothing unread on either (both sources ended), the
    /// close sends that FIN: one syscall less per connection. (Dropping a
    /// write half would shut it down too: `forget` leaves it to the close.)
    async fn ended(&self, mut to: OwnedWriteHalf) {
        if self.one_ended.swap(true, Ordering::Relaxed) {
            to.forget();
        } else {
            let _ = to.shutdown().await;
        }
    }

    pub fn touch(&self) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::Relaxed);
    }

    /// Returns once nothing has moved for `timeout` (never for zero).
    async fn idle_for(&self, timeout: Duration) {
        if timeout.is_zero() {
            return std::future::pending().await;
        }
        loop {
            let last = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let deadline = last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

/// Copies `from` to `to` until `from` ends, then shuts `to` down.
///
/// Small messages are copied through a pooled buffer that a direction holds
/// only while data flows: an idle connection holds none. A read that fills
/// the whole buffer means a bulk transfer; from then on the direction moves
/// bytes with `splice` through a pipe (socket to pipe to socket, never
/// through userspace), when `settings.splice` allows and the kernel does.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    clock: &Clock,
    settings: &Settings,
    traffic: &Traffic,
) -> std::io::Result<()> {
    let mut may_splice = settings.splice;
    loop {
        from.readable().await?;
        let mut buf = buffers::take();
        let bulk = loop {
            buf.clear();
            // tokio's reader clears the socket's readiness on a short read:
            // a drained socket costs no extra read before the next wait.
            let n = from.read_buf(&mut buf).await?;
            if n == 0 {
                buffers::give(buf);
                clock.ended(to).await;
                return Ok(());
            }
            clock.touch();
            to.write_all(&buf[..n]).await?;
            traffic.copied.inc_by(n as u64);
            if n < buf.capacity() {
                break false;
            }
            if may_splice {
                break true;
            }
        };
        buffers::give(buf);
        if !bulk {
            continue;
        }
        match splice::Pipe::new() {
            // Boxed: only splicing connections pay for its state, which
            // would otherwise be in every idle connection's future.
            Ok(pipe) => match Box::pin(splice::relay(&from, &mut to, &pipe, clock, traffic)).await? {
                splice::Ended::Eof => {
                    clock.ended(to).await;
                    return Ok(());
                }
                splice::Ended::Unsupported => debug!("splice not supported on these sockets; copying"),
            },
            Err(e) => debug!(error = %e, "no pipe for splice; copying"),
        }
        traffic.splice_fallbacks.inc();
        may_splice = false;
    }
}
