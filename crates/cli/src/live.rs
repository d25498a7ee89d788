//! The commands that read the node (`state`, `trace`, `render`, `list`):
//! where their answer comes from, and a plain HTTP/1.0 client for the
//! running kproxy's metrics address.
//!
//! With `--manifests` they compute from the folder, with `--kubeconfig`
//! (or `--master`) from one list of the cluster's objects, and otherwise
//! they ask the kproxy running on this node, which answers from what it
//! last applied.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use kproxy_config::Config;

use crate::UsageError;
use crate::args::{Common, Output};

/// Where a command's objects come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `--manifests DIR`.
    Manifests,
    /// `--kubeconfig` or `--master`: one list of the API server's objects.
    Cluster,
    /// The kproxy running on this node, at its metrics address.
    Running(SocketAddr),
}

/// The source the flags choose; `address` is `--address`, else the
/// configuration's `metricsBindAddress` (an unspecified IP means this
/// node's loopback).
pub fn source(common: &Common, address: Option<SocketAddr>, config: &Config) -> anyhow::Result<Source> {
    if common.manifests.is_some() {
        return Ok(Source::Manifests);
    }
    if common.flags.kubeconfig.is_some() || common.flags.master.is_some() {
        return Ok(Source::Cluster);
    }
    let addr = match address.or(config.metrics_bind_address) {
        Some(addr) => addr,
        None => {
            return Err(UsageError(
                "metricsBindAddress is off, so the running kproxy cannot be asked: pass --address IP:PORT, --manifests DIR or --kubeconfig FILE".into(),
            )
            .into());
        }
    };
    Ok(Source::Running(reachable(addr)))
}

/// Refuses to answer for the running kproxy at `addr` when `--proxy-mode`
/// asks for another mode than the one it runs: its rules are not the
/// rules asked about.
pub fn check_mode(addr: SocketAddr, common: &Common) -> anyhow::Result<()> {
    let Some(asked) = common.flags.proxy_mode.as_deref().filter(|m| !m.is_empty()) else { return Ok(()) };
    let running = get(addr, "/proxyMode")?;
    let running = running.trim();
    if running != asked {
        return Err(UsageError(format!(
            "--proxy-mode {asked}: the kproxy on {addr} runs {running}; pass --manifests DIR or --kubeconfig FILE to plan {asked} mode's rules"
        ))
        .into());
    }
    Ok(())
}

/// `0.0.0.0` and `::` listen everywhere; ask on loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port()),
        _ => addr,
    }
}

/// `GET path` from the kproxy at `addr`: the body of a 200 answer; any
/// other status is an error carrying the body (kproxy's reason).
pub fn get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let unreachable = || {
        format!(
            "no kproxy answers on {addr} (the running kproxy's metricsBindAddress: pass --address IP:PORT, or --manifests DIR or --kubeconfig FILE to plan without one)"
        )
    };
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).with_context(unreachable)?;
    // Planning a large state for `/trace` or `/render` takes a while.
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).with_context(unreachable)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).with_context(unreachable)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").with_context(|| format!("{addr}: not an HTTP answer"))?;
    let status = head.lines().next().unwrap_or_default();
    let endpoint = path.split('?').next().unwrap_or(path);
    if status.contains(" 404 ") {
        anyhow::bail!("{addr}{endpoint}: not served (a kproxy older than this command?)");
    }
    anyhow::ensure!(status.contains(" 200 "), "{addr}{endpoint}: {}", body.trim());
    Ok(body.to_owned())
}

/// The state of the running kproxy's last sync that applied (`/applied`),
/// as `output` asks.
pub fn state(addr: SocketAddr, output: Output) -> anyhow::Result<ExitCode> {
    let output = match output {
        Output::Table => "table",
        Output::Json => "json",
    };
    crate::output::print(&get(addr, &format!("/applied?output={output}"))?)?;
    Ok(ExitCode::SUCCESS)
}

/// `key=value&...` with every byte outside RFC 3986's unreserved set
/// percent-encoded; `None` values are left out.
pub fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let mut out = String::new();
    for (key, value) in pairs {
        let Some(value) = value else { continue };
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(key);
        out.push('=');
        for byte in value.bytes() {
            match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(char::from(byte)),
                _ => {
                    let _ = write!(out, "%{byte:02X}");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded_and_absent_ones_left_out() {
        let q = query(&[("from", Some("fd00::1")), ("to", Some("[fd00::2]:80/udp")), ("iif", None)]);
        assert_eq!(q, "from=fd00%3A%3A1&to=%5Bfd00%3A%3A2%5D%3A80%2Fudp");
    }

    #[test]
    fn a_kproxy_listening_everywhere_is_asked_on_loopback() {
        assert_eq!(reachable("0.0.0.0:10249".parse().unwrap()), "127.0.0.1:10249".parse().unwrap());
        assert_eq!(reachable("[::]:10249".parse().unwrap()), "[::1]:10249".parse().unwrap());
        assert_eq!(reachable("10.0.0.1:10249".parse().unwrap()), "10.0.0.1:10249".parse().unwrap());
    }
}
