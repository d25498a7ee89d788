//! Shared helpers of the userspace proxy's socket tests: loopback
//! backends that say who they are, service ports, syncs.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kproxy_dataplane::{Dataplane, SyncKind, SyncRequest};
use kproxy_model::{
    Changes, Endpoint, Frontend, FrontendKind, IpFamily, Protocol, ProxyState, Scheduler, ServiceName, ServicePort,
    ServicePortName, TrafficPolicy,
};
use kproxy_userspace::{Settings, Userspace};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// A TCP backend answering every connection with its name, then echoing.
pub async fn backend(name: &'static str) -> SocketAddr {
    backend_on(name, "127.0.0.1").await
}

pub async fn backend_on(name: &'static str, ip: &str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let _ = s.write_all(format!("{name}\n").as_bytes()).await;
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A UDP backend answering each datagram with its name.
pub async fn udp_backend(name: &'static str) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((_, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(name.as_bytes(), from).await;
        }
    });
    addr
}

/// A port nothing listens on (connects are refused).
pub fn closed_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// A free loopback address for a frontend (distinct 127.x addresses keep
/// tests apart).
pub fn frontend_addr(host: u8) -> SocketAddr {
    let ip: IpAddr = format!("127.0.{host}.1").parse().unwrap();
    let probe = std::net::TcpListener::bind((ip, 0)).unwrap();
    probe.local_addr().unwrap()
}

pub fn endpoint(addr: SocketAddr) -> Endpoint {
    Endpoint { ip: addr.ip(), port: addr.port(), ready: true, serving: true, terminating: false, local: true }
}

pub fn port(
    protocol: Protocol,
    frontends: &[SocketAddr],
    endpoints: &[SocketAddr],
    scheduler: Option<Scheduler>,
) -> ServicePort {
    let name = ServicePortName::new(ServiceName::new("default", "web"), "http", protocol);
    ServicePort {
        name,
        family: IpFamily::V4,
        port: frontends[0].port(),
        node_port: None,
        frontends: frontends.iter().map(|f| Frontend::new(FrontendKind::ClusterIp, f.ip(), f.port())).collect(),
        load_balancer_source_ranges: None,
        internal_traffic_policy: TrafficPolicy::Cluster,
        external_traffic_policy: TrafficPolicy::Cluster,
        session_affinity: None,
        scheduler,
        weights: Default::default(),
        health_check: None,
        health_check_node_port: None,
        warnings: Vec::new(),
        cluster_endpoints: endpoints.iter().copied().map(endpoint).collect(),
        local_endpoints: endpoints.iter().copied().map(endpoint).collect(),
    }
}

pub fn state(ports: Vec<ServicePort>) -> ProxyState {
    let mut state = ProxyState::default();
    for p in ports {
        state.ipv4.service_ports.insert(p.name.clone(), Arc::new(p));
    }
    state
}

pub async fn sync(proxy: &mut Userspace, state: &ProxyState) -> Vec<String> {
    let changes = Changes::default();
    let report =
        proxy.sync(SyncRequest { state, changes: &changes, kind: SyncKind::Full }).await.expect("a userspace sync");
    report.skipped
}

pub fn settings() -> Settings {
    Settings { connect_timeout: Duration::from_millis(500), ..Settings::default() }
}

/// Connects and reads the backend's name line.
pub async fn who(frontend: SocketAddr) -> Option<String> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(frontend)).await.ok()?.ok()?;
    name_of(&mut s).await
}

pub async fn name_of(s: &mut TcpStream) -> Option<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut byte)).await.ok()?.is_ok() {
        if byte[0] == b'\n' {
            return String::from_utf8(line).ok();
        }
        line.push(byte[0]);
    }
    None
}

/// Waits until the proxy counts `(active, inactive)` connections to each of
/// `want` for `frontend`: closes are counted asynchronously, and the next
/// pick must see them.
pub async fn settle(proxy: &Userspace, frontend: SocketAddr, want: &[(SocketAddr, (u32, u32))]) {
    let listing = proxy.listing().expect("the userspace mode lists itself");
    let mut last = std::collections::BTreeMap::new();
    for _ in 0..400 {
        let vs = listing.list().into_iter().find(|vs| vs.frontend == frontend.to_string()).expect("frontend listed");
        last = vs
            .endpoints
            .iter()
            .map(|rs| (rs.address.clone(), (rs.active.unwrap_or(0), rs.inactive.unwrap_or(0))))
            .collect();
        if want.iter().all(|(addr, load)| last.get(&addr.to_string()) == Some(load)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("counts never became {want:?}: {last:?}");
}
