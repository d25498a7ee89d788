//! The client side of the traffic runs: first-packet samples, one
//! request, one wrk run with the CPU it cost, and the kernel counters
//! read around it (SYN retransmits, conntrack's invalid packets).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context;
use kproxy_sandbox::Netns;
use nix::sys::resource::{UsageWho, getrusage};

use super::{Load, Params};
use crate::wrk;

const TIMEOUT: Duration = Duration::from_secs(2);
/// Untimed requests per target before a run's samples.
const WARM_UP: usize = 20;

/// Samples over both targets in turn (rotating which goes first).
pub(super) fn first_packet(targets: [SocketAddr; 2], samples: usize) -> anyhow::Result<([Vec<f64>; 2], [usize; 2])> {
    for target in targets {
        let ok = (0..WARM_UP * 5).filter(|_| request(target).is_ok()).take(WARM_UP).count();
        anyhow::ensure!(ok == WARM_UP, "{target} does not answer");
    }
    let (mut out, mut failures) = ([Vec::new(), Vec::new()], [0, 0]);
    for s in 0..samples {
        for t in 0..2 {
            let which = (s + t) % 2;
            match request(targets[which]) {
                Ok(took) => out[which].push(took.as_secs_f64()),
                Err(_) => failures[which] += 1,
            }
        }
    }
    Ok((out, failures))
}

/// Connect, write one `GET` (`Connection: close`), read the first reply
/// byte (timed up to here), then the rest, close.
pub(super) fn request(to: SocketAddr) -> std::io::Result<Duration> {
    let start = Instant::now();
    let mut stream = TcpStream::connect_timeout(&to, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_nodelay(true)?;
    stream.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
    let mut byte = [0u8; 1];
    if stream.read(&mut byte)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let took = start.elapsed();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest)?;
    Ok(took)
}

/// One wrk run (forked from this thread: in its namespace and cgroup) and
/// the CPU it, the server and the machine's softirqs used meanwhile.
pub(super) fn load_with_cpu(
    params: &Params,
    script: &std::path::Path,
    target: SocketAddr,
    load: wrk::Load,
    pid: u32,
) -> anyhow::Result<Load> {
    let children = || -> anyhow::Result<f64> {
        let usage = getrusage(UsageWho::RUSAGE_CHILDREN)?;
        let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        Ok(secs(usage.user_time()) + secs(usage.system_time()))
    };
    let (client0, server0, softirq0, syn0) = (children()?, run_time(pid)?, softirq()?, syn_retransmits()?);
    let url = format!("http://{target}/");
    let r = wrk::run(&params.wrk, script, &url, load)?;
    let (client1, server1, softirq1, syn1) = (children()?, run_time(pid)?, softirq()?, syn_retransmits()?);
    Ok(Load {
        rps: r.rps(),
        requests: r.requests,
        errors: r.errors,
        p50_s: r.p50_s,
        p99_s: r.p99_s,
        client_cpu_s: client1 - client0,
        server_cpu_s: server1 - server0,
        softirq_s: softirq1 - softirq0,
        syn_retransmits: syn1.saturating_sub(syn0),
        conntrack_invalid: 0,
    })
}

/// `TcpExt: TCPSynRetrans` of this thread's network namespace.
pub(super) fn syn_retransmits() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/net/netstat").context("reading netstat")?;
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next().context("no TcpExt names")?, lines.next().context("no TcpExt values")?);
    let at = names.split_whitespace().position(|n| n == "TCPSynRetrans").context("no TCPSynRetrans")?;
    values.split_whitespace().nth(at).and_then(|v| v.parse().ok()).context("a TCPSynRetrans value")
}

/// The `invalid=` counters of `conntrack -S` in `ns`, summed over CPUs.
pub(super) fn conntrack_invalid(ns: &Netns) -> anyhow::Result<u64> {
    let out = ns.exec("conntrack", &["-S"]).with_context(|| format!("conntrack -S in {}", ns.name()))?;
    let values = out.split_whitespace().filter_map(|f| f.strip_prefix("invalid=")).map(str::parse::<u64>);
    Ok(values.collect::<Result<Vec<_>, _>>()?.iter().sum())
}

/// Seconds on CPU of every thread of `pid` (`/proc/PID/task/*/schedstat`).
pub(super) fn run_time(pid: u32) -> anyhow::Result<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).context("listing the server's threads")? {
        let path = task?.path().join("schedstat");
        // A thread may end between the listing and the read.
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        ns += text.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    Ok(ns as f64 / 1e9)
}

/// The machine's softirq time so far (`/proc/stat`, USER_HZ = 100).
pub(super) fn softirq() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let cpu = stat.lines().next().context("an empty /proc/stat")?;
    let ticks: u64 = cpu.split_whitespace().nth(7).and_then(|v| v.parse().ok()).context("no softirq field")?;
    Ok(ticks as f64 / 100.0)
}
