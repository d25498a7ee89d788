//! TCP frontends: accept, pick an endpoint (retrying refused connects on
//! others), and relay bytes both ways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use crate::Settings;
use crate::frontend::Target;
use crate::service::Picked;

/// Accepts until the task is aborted (the frontend went away); connections
/// already accepted carry on in their own tasks.
pub async fn serve(listener: TcpListener, target: Arc<Target>, settings: Arc<Settings>) {
    let frontend = listener.local_addr().ok();
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
        let (target, settings) = (target.clone(), settings.clone());
        tokio::spawn(async move { connection(client, peer, &target, &settings).await });
    }
}

async fn connection(client: TcpStream, peer: SocketAddr, target: &Target, settings: &Settings) {
    let Ok(frontend) = client.local_addr() else { return };
    let Some((upstream, picked)) = connect(peer, frontend, target, settings).await else {
        // Nothing to connect to: reset, as a closed port would.
        let _ = socket2::SockRef::from(&client).set_linger(Some(std::time::Duration::ZERO));
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    relay(client, upstream, &picked).await;
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

/// Copies both ways until both are done. The endpoint counts as active
/// while both directions are open and inactive once one is closed.
async fn relay(client: TcpStream, upstream: TcpStream, picked: &Picked) {
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let to_upstream = pipe(client_read, upstream_write);
    let to_client = pipe(upstream_read, client_write);
    tokio::pin!(to_upstream, to_client);
    // A clean end of one direction (FIN) leaves the other open, as TCP
    // half-close does; an error (reset) ends both.
    let first = tokio::select! {
        copied = &mut to_upstream => (copied, true),
        copied = &mut to_client => (copied, false),
    };
    picked.counters.half_closed();
    if first.0.is_ok() {
        let _ = if first.1 { to_client.await } else { to_upstream.await };
    }
    picked.counters.closed(true);
}

/// Bytes read at once.
const CHUNK: usize = 16 * 1024;

/// Copies `from` to `to` until `from` ends, then shuts `to` down. The
/// buffer exists only while data flows: an idle connection holds none
/// (two long-lived copy buffers were most of an idle connection's cost).
async fn pipe(from: OwnedReadHalf, mut to: OwnedWriteHalf) -> std::io::Result<()> {
    loop {
        from.readable().await?;
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.try_read(&mut buf) {
                Ok(0) => {
                    let _ = to.shutdown().await;
                    return Ok(());
                }
                Ok(n) => to.write_all(&buf[..n]).await?,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
    }
}
