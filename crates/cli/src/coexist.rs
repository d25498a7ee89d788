//! Refusing to run beside kube-proxy: two proxies programming one node
//! fight over its traffic (both hook the same points at the same priority),
//! and which one a packet meets is not defined.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use kproxy_config::Config;

use crate::UsageError;

/// Errors when kube-proxy (or another kproxy) already serves this node: a
/// `kube-proxy` process is visible, or the health address is taken by a
/// server answering like a service proxy's health endpoint.
pub fn refuse_kube_proxy(config: &Config) -> anyhow::Result<()> {
    if let Some(pid) = process_named("kube-proxy") {
        return Err(refusal(&format!("a kube-proxy process (pid {pid}) is running")));
    }
    let Some(addr) = config.healthz_bind_address else { return Ok(()) };
    if std::net::TcpListener::bind(addr).is_ok() {
        return Ok(());
    }
    match health_answer(addr) {
        Some(answer) if answer.kproxy => Err(UsageError(format!(
            "another kproxy already serves this node (its health endpoint answers on {addr}); \
             one proxy per node"
        ))
        .into()),
        Some(_) => Err(refusal(&format!("the health address {addr} is taken by a server answering like kube-proxy's"))),
        // Taken by something else: the bind later reports it as usual.
        None => Ok(()),
    }
}

fn refusal(what: &str) -> anyhow::Error {
    UsageError(format!(
        "{what}: kube-proxy already programs this node's service rules, and two proxies on one node fight over \
         its traffic. Stop kube-proxy on this node first (docs/operations.md, \"Migrating from kube-proxy\")"
    ))
    .into()
}

/// The pid of a process with this command name, if `/proc` shows one
/// (inside a container only with the host's PID namespace).
fn process_named(name: &str) -> Option<u32> {
    let own = std::process::id();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
        (pid != own && comm.trim_end() == name).then_some(pid)
    })
}

struct HealthAnswer {
    /// Served by kproxy (its `Server` header).
    kproxy: bool,
}

/// Asks `GET /healthz` of whatever holds the address; `Some` when the
/// answer has the shape of a service proxy's health body.
fn health_answer(addr: SocketAddr) -> Option<HealthAnswer> {
    let mut target = addr;
    if target.ip().is_unspecified() {
        target.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(b"GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut answer = Vec::new();
    let _ = stream.take(64 * 1024).read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let proxy_like = body.contains("\"lastupdated\"") && body.contains("\"currenttime\"");
    proxy_like.then(|| HealthAnswer { kproxy: head.lines().any(|l| l.trim() == "server: kproxy") })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-shot HTTP server answering with `response`.
    fn answer_once(response: &'static str) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(response.as_bytes());
            }
        });
        addr
    }

    fn config(addr: SocketAddr) -> Config {
        let mut config = kproxy_config::load(None, &kproxy_config::Flags::default()).unwrap().config;
        config.healthz_bind_address = Some(addr);
        config
    }

    #[test]
    fn a_kube_proxy_health_server_on_the_address_is_refused() {
        let addr = answer_once(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n\
             {\"lastUpdated\":\"2026-12-01 12:00:00\",\"currentTime\":\"2026-12-01 12:00:01\",\"nodeEligible\":true}",
        );
        let e = refuse_kube_proxy(&config(addr)).unwrap_err().to_string();
        assert!(
            e.contains(&format!("the health address {addr} is taken by a server answering like kube-proxy's")),
            "{e}"
        );
        assert!(e.contains("Stop kube-proxy on this node first"), "{e}");
    }

    #[test]
    fn another_kproxy_is_named_as_such() {
        let addr = answer_once(
            "HTTP/1.1 200 OK\r\nserver: kproxy\r\n\r\n{\"lastUpdated\":\"x\",\"currentTime\":\"y\",\"healthy\":true}",
        );
        let e = refuse_kube_proxy(&config(addr)).unwrap_err().to_string();
        assert!(e.contains("another kproxy already serves this node"), "{e}");
    }

    #[test]
    fn an_unrelated_server_or_a_free_address_is_not_refused() {
        let addr = answer_once("HTTP/1.1 404 Not Found\r\n\r\nnope");
        assert!(refuse_kube_proxy(&config(addr)).is_ok());
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        assert!(refuse_kube_proxy(&config(free)).is_ok(), "nothing listens there any more");
    }
}
