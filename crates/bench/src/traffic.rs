//! Traffic through a cluster IP in the ebpf mode, in the nftables mode and
//! to the pod IP directly, measured in one run: first-packet latency,
//! wrk's requests/s and p99 (keep-alive and one connection per request),
//! CPU per request, and conntrack entries per 1k connections.
//!
//! Two kproxy-sandbox topologies side by side, one per mode, each with a
//! server pod and a client pod on node-a and `services` services
//! programmed in node-a (the first leads to the server pod). The ebpf
//! node's programs are attached to a threaded cgroup this process creates
//! and pinned in a private bpffs it mounts; the ebpf client's sockets (and
//! wrk, forked from a thread inside it) are made in that cgroup, so the
//! socket hooks translate them. The nftables client is in no cgroup of
//! ours: node-a's nftables table translates its packets. Each round
//! measures both nodes (alternating which goes first), each node its
//! cluster IP and the pod IP in turn, so noise hits them alike.
//!
//! Everything is created here and removed on return, also on failure:
//! the server processes (our children) first, then the bpffs (its pins
//! hold the links), the namespaces, and the cgroup last.

use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use kproxy_sandbox::{Bpffs, Cgroup, Netns, Place, Spawned, Topology};
use serde::{Deserialize, Serialize};

mod probe;

use probe::{conntrack_invalid, first_packet, load_with_cpu, request};

use crate::harness::Harness;
use crate::jobs::{HOST_NETNS_ENV, Job, Outcome};
use crate::workload::{Spec, TCP_PORT, TCP_TARGET};
use crate::wrk;

/// How long the server may take to listen.
const SERVER_READY: Duration = Duration::from_secs(10);

/// What the harness asks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    pub wrk: PathBuf,
    /// Services programmed on each node (the first leads to the server).
    pub services: usize,
    pub endpoints: usize,
    pub rounds: usize,
    /// First-packet samples per target and round.
    pub samples: usize,
    /// Short connections per target and round before counting conntrack entries.
    pub connections_counted: usize,
    pub seconds: f64,
    pub wrk_threads: usize,
    pub wrk_connections: usize,
    /// The server's tokio workers.
    pub server_threads: usize,
}

impl Params {
    pub fn new(wrk: PathBuf) -> Params {
        Params {
            wrk,
            services: 1000,
            endpoints: 10,
            rounds: 3,
            samples: 200,
            connections_counted: 1000,
            seconds: 4.0,
            wrk_threads: 1,
            wrk_connections: 32,
            server_threads: 1,
        }
    }
}

/// Which way a connection goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// To the cluster IP, from the ebpf node's cgroup (socket hooks).
    Ebpf,
    /// To the cluster IP, on the nftables node (nftables DNAT).
    Nftables,
    /// To the pod IP, from the ebpf node's cgroup.
    DirectEbpfNode,
    /// To the pod IP, on the nftables node.
    DirectNftablesNode,
}

impl Route {
    pub const ALL: [Route; 4] = [Route::Ebpf, Route::Nftables, Route::DirectEbpfNode, Route::DirectNftablesNode];

    pub fn name(self) -> &'static str {
        match self {
            Route::Ebpf => "cluster IP, ebpf mode",
            Route::Nftables => "cluster IP, nftables mode",
            Route::DirectEbpfNode => "pod IP directly (ebpf node)",
            Route::DirectNftablesNode => "pod IP directly (nftables node)",
        }
    }
}

/// One wrk measurement and what it cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Load {
    pub rps: f64,
    pub requests: u64,
    pub errors: u64,
    pub p50_s: f64,
    pub p99_s: f64,
    /// wrk's user+system CPU (its rusage, reaped).
    pub client_cpu_s: f64,
    /// The server process's CPU (all its threads' `schedstat` run time).
    pub server_cpu_s: f64,
    /// The whole machine's softirq time meanwhile (`/proc/stat`).
    pub softirq_s: f64,
    /// SYNs the client retransmitted meanwhile (its namespace's
    /// `TcpExt: TCPSynRetrans`): connects that waited for a timeout.
    #[serde(default)]
    pub syn_retransmits: u64,
    /// Packets node-a's conntrack found invalid meanwhile (`conntrack -S`).
    #[serde(default)]
    pub conntrack_invalid: u64,
}

impl Load {
    /// Client and server CPU per request, in seconds.
    pub fn cpu_per_request(&self) -> f64 {
        (self.client_cpu_s + self.server_cpu_s) / self.requests.max(1) as f64
    }
}

/// Conntrack entries after the counted connections, in node-a and in the client pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Conntrack {
    pub connections: usize,
    pub node: u64,
    /// Of `node`, the entries with a destination NAT.
    pub node_dnat: u64,
    pub client: u64,
}

/// One route in one round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RouteRun {
    pub route: Route,
    /// Connect + request written + first reply byte, seconds.
    pub first_packet_s: Vec<f64>,
    pub failures: usize,
    pub keep_alive: Load,
    pub close: Load,
    pub conntrack: Conntrack,
}

/// One round: every route.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Round {
    pub routes: Vec<RouteRun>,
}

impl Round {
    pub fn of(&self, route: Route) -> Option<&RouteRun> {
        self.routes.iter().find(|r| r.route == route)
    }
}

/// A server worker in a pod; stopped (stdin closed, else killed) on drop.
struct Server(Spawned);

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        if !matches!(self.0.wait_with_timeout(Duration::from_secs(5)), Ok(Some(_))) {
            // Our own child, not yet reaped.
            let _ = self.0.kill();
        }
    }
}

/// One node: its topology, its server, its client's place and targets.
struct Node {
    topo: Topology,
    server: Server,
    service: SocketAddr,
    direct: SocketAddr,
    routes: [Route; 2],
    /// The programming sync, seconds.
    programmed_s: f64,
}

impl Node {
    fn client(&self) -> &Netns {
        &self.topo.pod("client").expect("added at setup").ns
    }
}

/// Builds both nodes, then runs `params.rounds` rounds.
pub fn run(harness: &Harness, params: &Params) -> anyhow::Result<(Vec<Round>, Vec<String>)> {
    // Declared first, dropped last: the cgroup outlives everything in it.
    let cgroup = Cgroup::new("bench").context("creating the bench's cgroup")?;
    let dir = tempfile::tempdir().context("a temporary folder for the bpffs")?;
    let spec_for =
        |server: std::net::Ipv4Addr| Spec { services: params.services, endpoints: params.endpoints, pod: Some(server) };

    let nft = setup(harness, params, [Route::Nftables, Route::DirectNftablesNode], |topo, server| {
        let job = Job::Dataplane {
            services: params.services,
            endpoints: params.endpoints,
            changes: 0,
            pod: Some(server),
            udp_cleanup: false,
        };
        harness.run_in(&topo.node.ns, &job)
    })?;
    let bpffs = Bpffs::mount(&dir.path().join("bpffs")).context("mounting a private bpffs")?;
    let pin_dir = bpffs.dir("kproxy").context("the pin folder")?;
    let ebpf = setup(harness, params, [Route::Ebpf, Route::DirectEbpfNode], |topo, server| {
        let spec = spec_for(server);
        let job = Job::EbpfProgram {
            services: spec.services,
            endpoints: spec.endpoints,
            pod: server,
            cgroup: cgroup.path().to_owned(),
            pin_dir: pin_dir.clone(),
        };
        harness.run_in(&topo.node.ns, &job)
    });
    let result = ebpf.and_then(|ebpf| rounds(params, &ebpf, &nft, &cgroup).map(|r| (r, ebpf)));
    let notes = match &result {
        Ok((_, ebpf)) => vec![format!(
            "Traffic runs: {} services on each node, programmed in {:.0} ms (ebpf) and {:.0} ms (nftables).",
            params.services,
            ebpf.programmed_s * 1e3,
            nft.programmed_s * 1e3
        )],
        Err(_) => Vec::new(),
    };
    // Servers, then the pins (and the links with them), then the namespaces.
    let result = result.map(|(rounds, ebpf)| {
        drop(ebpf);
        rounds
    });
    drop(bpffs);
    drop(nft);
    drop(cgroup);
    Ok((result?, notes))
}

/// A topology with a server and a client pod on node-a, programmed by `program`.
fn setup(
    harness: &Harness,
    params: &Params,
    routes: [Route; 2],
    program: impl FnOnce(&Topology, std::net::Ipv4Addr) -> anyhow::Result<Outcome>,
) -> anyhow::Result<Node> {
    let mut topo = Topology::new().context("building the sandbox topology")?;
    let server_ip = topo.add_pod(1, "server")?.ipv4;
    topo.add_pod(1, "client")?;
    let direct = SocketAddr::V4(SocketAddrV4::new(server_ip, TCP_TARGET));
    let server = start_server(harness, &topo.pod("server").context("the server pod")?.ns, direct, params)?;
    let spec = Spec { services: params.services, endpoints: params.endpoints, pod: Some(server_ip) };
    let service = SocketAddr::V4(SocketAddrV4::new(spec.cluster_ip(0), TCP_PORT));
    let Outcome::Sync(synced) = program(&topo, server_ip)? else { anyhow::bail!("unexpected answer") };
    Ok(Node { topo, server, service, direct, routes, programmed_s: synced.cold_s })
}

fn start_server(harness: &Harness, ns: &Netns, addr: SocketAddr, params: &Params) -> anyhow::Result<Server> {
    let job = Job::Serve { addr, threads: params.server_threads };
    let mut command = Command::new(&harness.exe);
    command
        .arg("worker")
        .arg(serde_json::to_string(&job)?)
        .env(HOST_NETNS_ENV, &harness.host_netns)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    Ok(Server(ns.spawn(command).context("starting the server")?))
}

/// Where `route`'s connections are made: the ebpf client in the cgroup.
fn place<'a>(node: &'a Node, cgroup: &'a Cgroup) -> Place<'a> {
    let inside = node.routes[0] == Route::Ebpf;
    Place::new(node.client(), inside.then_some(cgroup))
}

fn rounds(params: &Params, ebpf: &Node, nft: &Node, cgroup: &Cgroup) -> anyhow::Result<Vec<Round>> {
    for node in [ebpf, nft] {
        let targets = [node.service, node.direct];
        place(node, cgroup).try_enter(|| wait_ready(targets))??;
    }
    let mut out = Vec::new();
    for round in 0..params.rounds {
        let order = if round % 2 == 0 { [ebpf, nft] } else { [nft, ebpf] };
        let mut r = Round::default();
        for node in order {
            let t = Instant::now();
            r.routes.extend(measure(params, node, cgroup).with_context(|| format!("{:?}", node.routes[0]))?);
            eprintln!(
                "==> traffic round {}/{}, {:?} node: {:.1} s",
                round + 1,
                params.rounds,
                node.routes[0],
                t.elapsed().as_secs_f64()
            );
        }
        out.push(r);
    }
    Ok(out)
}

/// Both targets answer, then warm.
fn wait_ready(targets: [SocketAddr; 2]) -> anyhow::Result<()> {
    for target in targets {
        let deadline = Instant::now() + SERVER_READY;
        while request(target).is_err() {
            anyhow::ensure!(Instant::now() < deadline, "{target} does not answer");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// One round on one node: conntrack, first packet, keep-alive, close.
fn measure(params: &Params, node: &Node, cgroup: &Cgroup) -> anyhow::Result<[RouteRun; 2]> {
    let place = place(node, cgroup);
    let targets = [node.service, node.direct];
    let mut conntrack = Vec::new();
    for target in targets {
        conntrack.push(count_conntrack(node, place, target, params.connections_counted)?);
    }
    let (first, failures) = place.try_enter(|| first_packet(targets, params.samples))??;
    let script_dir = tempfile::tempdir()?;
    let script = script_dir.path().join("report.lua");
    std::fs::write(&script, wrk::SCRIPT)?;
    let mut loads = [[Load::default(), Load::default()], [Load::default(), Load::default()]];
    for (c, close) in [false, true].into_iter().enumerate() {
        for t in 0..2 {
            let which = (t + c) % 2;
            let load = wrk::Load {
                threads: params.wrk_threads,
                connections: params.wrk_connections,
                seconds: params.seconds,
                close,
            };
            let pid = node.server.0.pid();
            let invalid = conntrack_invalid(&node.topo.node.ns)?;
            let mut measured = place.try_enter(|| load_with_cpu(params, &script, targets[which], load, pid))??;
            measured.conntrack_invalid = conntrack_invalid(&node.topo.node.ns)?.saturating_sub(invalid);
            loads[which][c] = measured;
        }
    }
    let [first_service, first_direct] = first;
    let [fail_service, fail_direct] = failures;
    let [c_service, c_direct]: [Conntrack; 2] = conntrack.try_into().expect("two targets");
    let [[ka_s, cl_s], [ka_d, cl_d]] = loads;
    Ok([
        RouteRun {
            route: node.routes[0],
            first_packet_s: first_service,
            failures: fail_service,
            keep_alive: ka_s,
            close: cl_s,
            conntrack: c_service,
        },
        RouteRun {
            route: node.routes[1],
            first_packet_s: first_direct,
            failures: fail_direct,
            keep_alive: ka_d,
            close: cl_d,
            conntrack: c_direct,
        },
    ])
}

/// Flushes node-a's and the client's conntrack tables (our namespaces'),
/// makes `n` short connections to `target`, and counts the entries.
fn count_conntrack(node: &Node, place: Place<'_>, target: SocketAddr, n: usize) -> anyhow::Result<Conntrack> {
    let (node_ns, client_ns) = (&node.topo.node.ns, node.client());
    for ns in [node_ns, client_ns] {
        ns.exec("conntrack", &["-F"]).with_context(|| format!("flushing conntrack in {}", ns.name()))?;
    }
    let failed = place.try_enter(|| (0..n).filter(|_| request(target).is_err()).count())?;
    anyhow::ensure!(failed == 0, "{failed} of {n} connections to {target} failed");
    let count = |ns: &Netns| -> anyhow::Result<u64> {
        let out = ns.exec("conntrack", &["-C"]).with_context(|| format!("counting conntrack in {}", ns.name()))?;
        out.trim().parse().with_context(|| format!("conntrack -C printed {out:?}"))
    };
    let dnat = node_ns.exec("conntrack", &["-L", "--dst-nat"]).context("listing DNAT entries")?;
    Ok(Conntrack {
        connections: n,
        node: count(node_ns)?,
        node_dnat: dnat.lines().filter(|l| !l.trim().is_empty()).count() as u64,
        client: count(client_ns)?,
    })
}
