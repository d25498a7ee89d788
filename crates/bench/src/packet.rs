//! First-packet latency through the kernel: the sandbox topology, a backend
//! pod and a client pod on node-a, N services programmed by the `Nftables`
//! dataplane in node-a (its cold sync, conntrack cleanup left out), where the first and the last service (in map order)
//! lead to the backend. The client times a new TCP connection plus one
//! request/reply to the first service, to the last, and straight to the pod.
//!
//! The three targets are probed in turn (rotating which goes first), so
//! noise hits them alike; their ratio is what the verdict map's O(1)
//! lookup promises to keep at 1.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context;
use kproxy_sandbox::{Backend, Topology};

use crate::harness::Harness;
use crate::jobs::{Job, Outcome};
use crate::workload::{Spec, TCP_PORT, TCP_TARGET};

const TIMEOUT: Duration = Duration::from_secs(2);
/// Untimed requests per target first: ARP, route and socket caches warm.
const WARM_UP: usize = 10;

/// One run's samples, in seconds.
#[derive(Clone, Debug, Default)]
pub struct PacketRun {
    pub first: Vec<f64>,
    pub last: Vec<f64>,
    pub direct: Vec<f64>,
    pub failures: usize,
}

/// Builds a topology, then for each size programs that many services
/// (replacing the previous table) and probes.
pub fn run(harness: &Harness, sizes: &[usize], endpoints: usize, samples: usize) -> anyhow::Result<Vec<PacketRun>> {
    let mut topo = Topology::new().context("building the sandbox topology")?;
    let server_ip = topo.add_pod(1, "server")?.ipv4;
    topo.add_pod(1, "client")?;
    let server = topo.pod("server").context("the server pod")?;
    let _backend = Backend::start(&server.ns, "server", TCP_TARGET, true, false)?;
    let client = topo.pod("client").context("the client pod")?;
    let mut runs = Vec::new();
    for &services in sizes {
        let spec = Spec { services, endpoints, pod: Some(server_ip) };
        let job = Job::Dataplane { services, endpoints, changes: 0, pod: Some(server_ip), udp_cleanup: false };
        let Outcome::Sync(_) = harness.run_in(&topo.node.ns, &job)? else { anyhow::bail!("unexpected answer") };
        let targets = [
            SocketAddr::V4(SocketAddrV4::new(spec.cluster_ip(0), TCP_PORT)),
            SocketAddr::V4(SocketAddrV4::new(spec.cluster_ip(services - 1), TCP_PORT)),
            SocketAddr::V4(SocketAddrV4::new(server_ip, TCP_TARGET)),
        ];
        runs.push(client.ns.try_enter(|| probe(targets, samples))??);
    }
    Ok(runs)
}

/// Inside the client pod: warm up, then `samples` rounds over the targets.
fn probe(targets: [SocketAddr; 3], samples: usize) -> anyhow::Result<PacketRun> {
    for target in targets {
        let ok = (0..WARM_UP * 5).filter(|_| request(target).is_ok()).take(WARM_UP).count();
        anyhow::ensure!(ok == WARM_UP, "{target} does not answer");
    }
    let mut run = PacketRun::default();
    for s in 0..samples {
        for t in 0..targets.len() {
            let which = (s + t) % targets.len();
            match request(targets[which]) {
                Ok(took) => [&mut run.first, &mut run.last, &mut run.direct][which].push(took.as_secs_f64()),
                Err(_) => run.failures += 1,
            }
        }
    }
    Ok(run)
}

/// Connect, send a line, read the reply line, close.
fn request(to: SocketAddr) -> std::io::Result<Duration> {
    let start = Instant::now();
    let mut stream = TcpStream::connect_timeout(&to, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_nodelay(true)?;
    stream.write_all(b"hello\n")?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    if line.is_empty() {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(start.elapsed())
}
