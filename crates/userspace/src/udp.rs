//! UDP frontends: one flow per client address, each with its own socket
//! connected to the endpoint picked for it; replies go back from the
//! frontend address. A flow ends after `udp_idle_timeout` without traffic
//! either way.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tracing::debug;

use crate::Settings;
use crate::frontend::Target;
use crate::service::Picked;

/// Largest datagram relayed.
const MAX_DATAGRAM: usize = 65_535;

struct Flow {
    upstream: Arc<UdpSocket>,
    last: Arc<Mutex<Instant>>,
}

type Flows = Arc<Mutex<HashMap<SocketAddr, Flow>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Receives until the task is aborted; flows already open carry on until
/// idle.
pub async fn serve(socket: UdpSocket, target: Arc<Target>, settings: Arc<Settings>) {
    let socket = Arc::new(socket);
    let Ok(frontend) = socket.local_addr() else { return };
    let flows: Flows = Arc::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let Ok((n, client)) = socket.recv_from(&mut buf).await else { continue };
        let existing = lock(&flows).get(&client).map(|f| (f.upstream.clone(), f.last.clone()));
        let (upstream, last) = match existing {
            Some(flow) => flow,
            None => match open(client, frontend, &target, &settings, &socket, &flows).await {
                Some(flow) => flow,
                // No endpoint: drop, as the kernel modes do for a dropped flow.
                None => continue,
            },
        };
        *lock(&last) = Instant::now();
        if let Err(e) = upstream.send(&buf[..n]).await {
            debug!(%client, error = %e, "forwarding a datagram failed");
        }
    }
}

async fn open(
    client: SocketAddr,
    frontend: SocketAddr,
    target: &Target,
    settings: &Arc<Settings>,
    socket: &Arc<UdpSocket>,
    flows: &Flows,
) -> Option<(Arc<UdpSocket>, Arc<Mutex<Instant>>)> {
    let picked = target.pick(client, frontend, &[], settings)?;
    let local: SocketAddr = if picked.addr.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }.parse().ok()?;
    let upstream = UdpSocket::bind(local).await.ok()?;
    upstream.connect(picked.addr).await.ok()?;
    let upstream = Arc::new(upstream);
    let last = Arc::new(Mutex::new(Instant::now()));
    picked.counters.connected();
    lock(flows).insert(client, Flow { upstream: upstream.clone(), last: last.clone() });
    let replies = Replies {
        client,
        upstream: upstream.clone(),
        frontend_socket: socket.clone(),
        last: last.clone(),
        idle: settings.udp_idle_timeout,
        flows: flows.clone(),
        picked,
    };
    tokio::spawn(replies.run());
    Some((upstream, last))
}

/// Relays an endpoint's replies to its client until the flow is idle.
struct Replies {
    client: SocketAddr,
    upstream: Arc<UdpSocket>,
    frontend_socket: Arc<UdpSocket>,
    last: Arc<Mutex<Instant>>,
    idle: Duration,
    flows: Flows,
    picked: Picked,
}

impl Replies {
    async fn run(self) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let since = lock(&self.last).elapsed();
            let Some(left) = self.idle.checked_sub(since).filter(|d| !d.is_zero()) else { break };
            match tokio::time::timeout(left, self.upstream.recv(&mut buf)).await {
                Ok(Ok(n)) => {
                    *lock(&self.last) = Instant::now();
                    let _ = self.frontend_socket.send_to(&buf[..n], self.client).await;
                }
                // ICMP unreachable and the like: the endpoint is gone; the
                // client's next datagram opens a new flow.
                Ok(Err(_)) => break,
                // Idle for the rest of the time? The loop checks `last`.
                Err(_) => {}
            }
        }
        lock(&self.flows).remove(&self.client);
        self.picked.counters.closed(false);
    }
}
