//! `kproxy demo`: kproxy in a sandbox, with real traffic.
//!
//! Builds two nodes, the pods of `examples/demo` (each running a tiny
//! backend) and an external client in network namespaces, runs
//! `kproxy run --proxy-mode nftables` in node-a, sends requests to every
//! frontend from a pod or from outside, prints what happened, and removes
//! the sandbox. The host's own networking is never touched.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use kproxy_model::{FrontendKind, Protocol};
use kproxy_sandbox::{Backend, Netns, ProbeError, Topology, tcp_request, udp_request};
use kproxy_source::manifests::{Folder, Parsed, parse_file};
use kproxy_state::info::PodInfo;
use kproxy_state::{Object, StateBuilder, StateConfig};

use crate::args::DemoArgs;

/// The port every demo backend listens on.
const BACKEND_PORT: u16 = 8080;
const TIMEOUT: Duration = Duration::from_millis(800);

pub fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if !crate::mode::is_root() {
        eprintln!(
            "kproxy demo needs root: it builds network namespaces and programs nftables inside them \
             (the host's own networking is not touched). Run it as root, e.g. `sudo kproxy demo`."
        );
        return Ok(ExitCode::FAILURE);
    }
    kproxy_sandbox::available().context("network namespaces are not available here")?;
    let (services, pods) = read_example(&args.manifests)?;

    crate::output::print(&format!("building the sandbox: 2 nodes, {} pods, an external client ...\n", pods.len()))?;
    let mut topo = Topology::new().context("building the sandbox")?;
    let mut backends = Vec::new();
    let mut pod_yaml = String::new();
    for pod in &pods {
        let node = if pod.node_name.as_deref() == Some("node-b") { 2 } else { 1 };
        let made = topo.add_pod(node, &pod.name).with_context(|| format!("adding pod {}", pod.name))?;
        backends.push(Backend::start(&made.ns, &pod.name, BACKEND_PORT, true, true)?);
        let _ = write!(pod_yaml, "{}", pod_manifest(pod, made.ipv4.into(), made.ipv6.into()));
    }
    let dir = tempfile::tempdir()?;
    for (name, text) in &services {
        std::fs::write(dir.path().join(name), text)?;
    }
    std::fs::write(dir.path().join("pods.yaml"), pod_yaml)?;
    std::fs::write(dir.path().join("node.yaml"), NODE_A)?;

    crate::output::print("starting kproxy in node-a (nftables mode) ...\n")?;
    let log = dir.path().join("kproxy.log");
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["run", "--manifests"])
        .arg(dir.path())
        .args(FLAGS)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?);
    let kproxy = topo.node.ns.spawn(command).context("starting kproxy")?;
    wait_for_rules(&topo.node.ns, &log)?;

    let rows = traffic(&topo, dir.path());
    // Printed before the sandbox goes, which happens whatever the reader
    // of the output does.
    let printed = match &rows {
        Ok(rows) => crate::output::print(&format!(
            "{}\nmasqueraded: the backend saw node-a's address instead of the client's.\nremoving the sandbox ...\n",
            render(rows)
        )),
        Err(_) => Ok(()),
    };
    let _ = kproxy.kill();
    drop(backends);
    drop(topo);
    rows?;
    printed?;
    Ok(ExitCode::SUCCESS)
}

const NODE_A: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\nstatus:\n  addresses:\n  \
                      - {type: InternalIP, address: 192.168.77.1}\n  - {type: InternalIP, address: fd00:77::1}\n";

const FLAGS: &[&str] = &[
    "--proxy-mode",
    "nftables",
    "--hostname-override",
    "node-a",
    "--cluster-cidr",
    "10.244.0.0/16,fd00:10:244::/48",
    "--service-cidrs",
    "10.96.0.0/16,fd00:96::/112",
    "--healthz-bind-address",
    "127.0.0.1:10256",
    "--metrics-bind-address",
    METRICS,
];

/// kproxy's metrics address inside node-a.
const METRICS: &str = "127.0.0.1:10249";

/// A manifest file: name and content.
type File = (String, String);

/// The example's files without Pods (copied as they are), and its Pods.
fn read_example(dir: &Path) -> anyhow::Result<(Vec<File>, Vec<PodInfo>)> {
    let mut services = Vec::new();
    let mut pods = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot read the demo's manifests", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path)?;
        let parsed = parse_file(&path, &text);
        if let Some(Parsed::Invalid(e)) = parsed.iter().find(|p| matches!(p, Parsed::Invalid(_))) {
            anyhow::bail!("{e}");
        }
        let found: Vec<PodInfo> = parsed
            .into_iter()
            .filter_map(|p| match p {
                Parsed::Object { object: Object::Pod(pod), .. } => Some(pod),
                _ => None,
            })
            .collect();
        if found.is_empty() {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            services.push((name, text));
        } else {
            pods.extend(found);
        }
    }
    Ok((services, pods))
}

/// A running, ready Pod at the addresses the sandbox gave it.
fn pod_manifest(pod: &PodInfo, ipv4: IpAddr, ipv6: IpAddr) -> String {
    let labels: Vec<String> = pod.labels.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let ports: Vec<String> = pod
        .container_ports
        .iter()
        .map(|p| format!("{{name: {}, containerPort: {}, protocol: {}}}", p.name, p.port, p.protocol))
        .collect();
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {}, labels: {{{}}}}}\n\
         spec: {{nodeName: {}, containers: [{{name: main, ports: [{}]}}]}}\n\
         status: {{phase: Running, podIPs: [{{ip: {ipv4}}}, {{ip: {ipv6}}}], conditions: [{{type: Ready, status: \"True\"}}]}}\n",
        pod.name,
        labels.join(", "),
        pod.node_name.as_deref().unwrap_or("node-a"),
        ports.join(", ")
    )
}

/// Waits until kproxy's metrics (inside node-a) record a successful sync of
/// both families: its rules are in place.
fn wait_for_rules(node: &Netns, log: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if node.enter(families_synced) >= 2 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(log).unwrap_or_default();
    anyhow::bail!("kproxy did not program node-a within 10 s; its log:\n{log}")
}

/// How many families `/metrics` shows a successful sync for (0 while the
/// endpoint does not answer yet).
fn families_synced() -> usize {
    let Some(body) = metrics() else { return 0 };
    body.lines()
        .filter(|l| l.starts_with("kubeproxy_sync_proxy_rules_last_timestamp_seconds{"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .count()
}

fn metrics() -> Option<String> {
    use std::io::{Read as _, Write as _};
    let address: SocketAddr = METRICS.parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    Some(body)
}

/// One frontend exercised from one client.
struct Row {
    service: String,
    frontend: String,
    from: &'static str,
    requests: usize,
    answers: BTreeMap<String, usize>,
    failures: BTreeMap<String, usize>,
    masqueraded: (usize, usize),
    latencies: Vec<Duration>,
}

/// Sends requests to every frontend of every service the state has.
fn traffic(topo: &Topology, manifests: &Path) -> anyhow::Result<Vec<Row>> {
    let mut folder = Folder::new(manifests)?;
    let mut builder = StateBuilder::new(StateConfig {
        node_name: "node-a".into(),
        endpoint_controller: true,
        ..StateConfig::default()
    });
    folder.reload()?.events.into_iter().for_each(|e| builder.apply(e));
    builder.take_changes();
    let client_pod = topo.pod("client").context("the demo needs a pod named client")?;
    let mut rows = Vec::new();
    for port in builder.state().service_ports() {
        for frontend in &port.frontends {
            let (ns, from, source, label) = match frontend.kind {
                FrontendKind::ClusterIp => (&client_pod.ns, "pod client", IpAddr::V4(client_pod.ipv4), "ClusterIP"),
                kind => (&topo.client, "outside", "192.168.77.100".parse()?, kind.as_str()),
            };
            let protocol = port.name.protocol;
            let to = SocketAddr::new(frontend.ip, frontend.port);
            let mut row = Row {
                service: port.name.service.to_string(),
                frontend: format!("{label} {to}/{protocol}"),
                from,
                requests: 60,
                answers: BTreeMap::new(),
                failures: BTreeMap::new(),
                masqueraded: (0, 0),
                latencies: Vec::new(),
            };
            for _ in 0..row.requests {
                let started = Instant::now();
                let reply = match protocol {
                    Protocol::Udp => udp_request(ns, to, None, TIMEOUT),
                    _ => tcp_request(ns, to, None, TIMEOUT),
                };
                match reply {
                    Ok(reply) => {
                        row.latencies.push(started.elapsed());
                        *row.answers.entry(reply.backend).or_default() += 1;
                        row.masqueraded.1 += 1;
                        if reply.peer != source {
                            row.masqueraded.0 += 1;
                        }
                    }
                    Err(e) => {
                        let what = match e {
                            ProbeError::Refused | ProbeError::Reset => "refused".to_owned(),
                            ProbeError::TimedOut => "no answer".to_owned(),
                            other => format!("{other:?}"),
                        };
                        *row.failures.entry(what).or_default() += 1;
                    }
                }
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

fn percentile(sorted: &[Duration], p: f64) -> String {
    if sorted.is_empty() {
        return "-".into();
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    format!("{:.2}ms", sorted[i].as_secs_f64() * 1000.0)
}

/// The results as an aligned table.
fn render(rows: &[Row]) -> String {
    let header =
        ["SERVICE", "FRONTEND", "FROM", "REQUESTS", "ANSWERED BY", "MASQUERADED", "P50", "P99"].map(String::from);
    let mut table = vec![header];
    for row in rows {
        let mut latencies = row.latencies.clone();
        latencies.sort();
        let mut answered: Vec<String> = row.answers.iter().map(|(b, n)| format!("{b} {n}")).collect();
        answered.extend(row.failures.iter().map(|(what, n)| format!("{what} {n}")));
        let masq = match row.masqueraded {
            (_, 0) => "-".to_owned(),
            (0, _) => "no".to_owned(),
            (m, total) if m == total => "yes".to_owned(),
            (m, total) => format!("{m} of {total}"),
        };
        table.push([
            row.service.clone(),
            row.frontend.clone(),
            row.from.to_owned(),
            row.requests.to_string(),
            answered.join(", "),
            masq,
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
        ]);
    }
    let widths: Vec<usize> = (0..8).map(|c| table.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut out = String::from("\n");
    for row in &table {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}
