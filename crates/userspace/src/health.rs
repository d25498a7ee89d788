//! Active health checks (`kproxy.io/health-check*`): one task per endpoint
//! probing it every interval; `fall` failures in a row take it out of the
//! pick set, `rise` successes in a row bring it back. Endpoints start
//! healthy, so a new check does not take a working service down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kproxy_model::{HealthCheck, Probe};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{info, warn};

use crate::service::Counters;

/// Probes `endpoint` until aborted, keeping `counters.healthy` current.
pub async fn watch(endpoint: SocketAddr, counters: Arc<Counters>, check: HealthCheck) {
    let target = SocketAddr::new(endpoint.ip(), check.port.unwrap_or(endpoint.port()));
    let mut ticker = tokio::time::interval(check.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut successes, mut failures) = (0u32, 0u32);
    loop {
        ticker.tick().await;
        let outcome = tokio::time::timeout(check.timeout, probe(target, &check.probe)).await;
        let result = outcome.unwrap_or_else(|_| Err(format!("no answer within {:?}", check.timeout)));
        let healthy = counters.healthy.load(Ordering::Relaxed);
        match result {
            Ok(()) => {
                (successes, failures) = (successes + 1, 0);
                if !healthy && successes >= check.rise {
                    counters.healthy.store(true, Ordering::Relaxed);
                    info!(%endpoint, "health check passes again; endpoint back in the pick set");
                }
            }
            Err(reason) => {
                (successes, failures) = (0, failures + 1);
                if healthy && failures >= check.fall {
                    counters.healthy.store(false, Ordering::Relaxed);
                    warn!(%endpoint, %reason, "health check failed; endpoint out of the pick set");
                }
            }
        }
    }
}

async fn probe(target: SocketAddr, probe: &Probe) -> Result<(), String> {
    let mut stream = TcpStream::connect(target).await.map_err(|e| e.to_string())?;
    let Probe::Http { path } = probe else { return Ok(()) };
    let request = format!("GET {path} HTTP/1.0\r\nHost: {target}\r\nUser-Agent: kproxy-health-check\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < head.len() && !head[..read].contains(&b'\n') {
        match stream.read(&mut head[read..]).await {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) => return Err(e.to_string()),
        }
    }
    let line = String::from_utf8_lossy(&head[..read]);
    let status: Option<u16> = line.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    match status {
        Some(code) if (200..400).contains(&code) => Ok(()),
        Some(code) => Err(format!("GET {path}: HTTP {code}")),
        None => Err(format!("GET {path}: not an HTTP answer")),
    }
}
