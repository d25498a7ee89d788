//! A lab for real-kernel tests: the sandbox topology, pods with backends,
//! a manifest folder describing them, and kproxy running in node-a.
//!
//! Everything lives in namespaces the lab creates; kproxy is spawned with
//! its own PID inside node-a and killed when the lab drops. In the ebpf
//! mode the lab also makes the cgroup kproxy's socket programs apply to
//! and the bpffs it pins in (see [`placement`]).

#![allow(dead_code)]

pub mod annotations;
pub mod conntrack;
pub mod live_trace;
pub mod placement;
pub mod trace;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kproxy_model::Protocol;
use kproxy_sandbox::{Netns, ProbeError, Reply, Spawned, Topology, available, tcp_request, udp_request};
use placement::{EbpfNode, Home, Served};
pub use trace::TraceCase;

/// Every backend listens on this port, TCP and UDP.
pub const PORT: u16 = 8080;
/// How long a probe waits when the answer should be "nothing" (a drop).
pub const DROP_WAIT: Duration = Duration::from_millis(700);
/// How long a probe waits for an answer that should come.
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// The kproxy binary: cargo's build on the host, the payload's copy in the
/// IPVS VM (put there by `vm::run_test_with`).
pub fn kproxy_binary() -> PathBuf {
    if kproxy_testkit::vm::in_guest() {
        kproxy_testkit::vm::payload_file("kproxy")
    } else {
        PathBuf::from(env!("CARGO_BIN_EXE_kproxy"))
    }
}

pub mod scenarios;

/// A dataplane under test: the proxy mode and, for iptables, the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Nftables,
    /// `legacy` or `nft`.
    Iptables(&'static str),
    Ipvs,
    /// Socket programs on the lab's cgroup, tc programs on node-a's uplink.
    Ebpf,
}

impl Mode {
    /// The `--proxy-mode` value.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Nftables => "nftables",
            Mode::Iptables(_) => "iptables",
            Mode::Ipvs => "ipvs",
            Mode::Ebpf => "ebpf",
        }
    }
}

pub const CLUSTER_CIDRS: &str = "10.244.0.0/16,fd00:10:244::/48";
pub const SERVICE_CIDRS: &str = "10.96.0.0/16,fd00:96::/112";

pub struct Lab {
    pub topo: Topology,
    pub dir: tempfile::TempDir,
    backends: Vec<Served>,
    kproxy: Option<Spawned>,
    log: PathBuf,
    /// Pod name -> its `app` label; `None`: not in the manifests.
    apps: std::cell::RefCell<BTreeMap<String, Option<String>>>,
    /// Extra environment for kproxy (`KPROXY_IPTABLES_BACKEND`, say).
    pub env: Vec<(String, String)>,
    /// Run kproxy without `--cluster-cidr`: no local-traffic detector.
    pub without_cluster_cidr: bool,
    /// The extra flags kproxy was last started with (the tracer follows
    /// `--masquerade-all`).
    extra: Vec<String>,
    /// The ebpf mode's cgroup and bpffs, from its first start on. Last, so
    /// the cgroup goes after every namespace and process of the lab.
    ebpf: Option<EbpfNode>,
}

fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

impl Lab {
    /// A topology with these pods (node index, name), each serving TCP and
    /// UDP on [`PORT`], and a manifest folder listing node-a and the pods
    /// (label `app` = the name up to its last `-`).
    pub fn new(pods: &[(u8, &str)]) -> Lab {
        if let Err(e) = available() {
            panic!("real-kernel tests need network namespaces (run as root): {}", chain(&e));
        }
        let mut topo = Topology::new().unwrap_or_else(|e| panic!("topology: {}", chain(&e)));
        let mut apps = BTreeMap::new();
        for (node, name) in pods {
            topo.add_pod(*node, name).unwrap_or_else(|e| panic!("pod {name}: {}", chain(&e)));
            let app = name.rsplit_once('-').map_or(*name, |(app, _)| app);
            apps.insert(name.to_string(), Some(app.to_owned()));
        }
        let dir = tempfile::tempdir().expect("a temporary folder");
        let log = dir.path().join("kproxy.log");
        let mut lab = Lab {
            topo,
            dir,
            backends: Vec::new(),
            kproxy: None,
            log,
            apps: apps.into(),
            env: Vec::new(),
            without_cluster_cidr: false,
            extra: Vec::new(),
            ebpf: None,
        };
        for (_, name) in pods {
            lab.start_backend(Home::Pod(name.to_string()), name, PORT, true);
        }
        lab.write_cluster();
        lab
    }

    /// One more backend in `pod`'s namespace, answering as `<pod>:<port>`
    /// (a target port other than [`PORT`]).
    pub fn serve(&mut self, pod: &str, port: u16, udp: bool) {
        let name = format!("{pod}:{port}");
        self.start_backend(Home::Pod(pod.to_owned()), &name, port, udp);
    }

    /// A backend in node-a itself on `port`, answering as `node-a`: what
    /// a connection to a node address meets when kproxy leaves it alone.
    pub fn serve_on_node(&mut self, port: u16) {
        self.start_backend(Home::NodeA, "node-a", port, true);
    }

    /// Lifts node-a's ICMP rate limits (per-namespace sysctls), so that a
    /// REJECT answered with ICMP (iptables mode) is seen by every probe.
    pub fn no_icmp_rate_limit(&self) {
        for key in ["net.ipv4.icmp_ratelimit", "net.ipv6.icmp.ratelimit"] {
            self.node().sysctl(key, "0").unwrap_or_else(|e| panic!("{key}: {}", chain(&e)));
        }
    }

    /// Relabels a pod (`None`: not listed at all), as a deployment would.
    pub fn set_app(&self, pod: &str, app: Option<&str>) {
        self.apps.borrow_mut().insert(pod.to_owned(), app.map(str::to_owned));
        self.write_cluster();
    }

    /// `cluster.yaml`: node-a and the listed pods.
    fn write_cluster(&self) {
        let mut manifests = String::from(
            "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\nstatus:\n  addresses:\n\
             \x20 - {type: InternalIP, address: 192.168.77.1}\n  - {type: InternalIP, address: fd00:77::1}\n",
        );
        for (name, app) in self.apps.borrow().iter() {
            let Some(app) = app else { continue };
            let pod = self.pod(name);
            let node_name = if pod.node == 1 { "node-a" } else { "node-b" };
            let _ = write!(
                manifests,
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{app: {app}}}}}\n\
                 spec: {{nodeName: {node_name}, containers: [{{name: c, ports: [{{name: http, containerPort: {PORT}}}]}}]}}\n\
                 status:\n  phase: Running\n  podIPs: [{{ip: {}}}, {{ip: {}}}]\n  conditions: [{{type: Ready, status: \"True\"}}]\n",
                pod.ipv4, pod.ipv6
            );
        }
        self.write("cluster.yaml", &manifests);
    }

    pub fn node(&self) -> &Netns {
        &self.topo.node.ns
    }

    pub fn client(&self) -> &Netns {
        &self.topo.client
    }

    pub fn pod(&self, name: &str) -> &kproxy_sandbox::Pod {
        self.topo.pod(name).unwrap_or_else(|| panic!("no pod {name}"))
    }

    /// Writes (or replaces) a manifest file; kproxy picks it up.
    pub fn write(&self, file: &str, yaml: &str) {
        let path = self.dir.path().join(file);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, yaml).expect("writing a manifest");
        std::fs::rename(&tmp, &path).expect("renaming a manifest");
    }

    pub fn remove(&self, file: &str) {
        std::fs::remove_file(self.dir.path().join(file)).expect("removing a manifest");
    }

    /// The manifests folder (the log beside them is not a manifest: only
    /// `.yaml`, `.yml` and `.json` files are read).
    fn manifests(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    /// The flags every test runs kproxy with.
    pub fn flags() -> Vec<String> {
        Self::flags_in("nftables")
    }

    /// [`Lab::flags`] with another `--proxy-mode` (ipvs mode takes its
    /// own minimum sync period flag and warns about the iptables one; the
    /// ebpf mode takes the iptables one, as nftables mode does).
    pub fn flags_in(mode: &str) -> Vec<String> {
        let min_sync = if mode == "ipvs" { "--ipvs-min-sync-period" } else { "--iptables-min-sync-period" };
        [
            "--hostname-override",
            "node-a",
            "--proxy-mode",
            mode,
            "--cluster-cidr",
            CLUSTER_CIDRS,
            "--service-cidrs",
            SERVICE_CIDRS,
            min_sync,
            "50ms",
            "--healthz-bind-address",
            "127.0.0.1:10256",
            "--metrics-bind-address",
            "127.0.0.1:10249",
        ]
        .map(String::from)
        .to_vec()
    }

    /// Starts `kproxy run` in node-a.
    pub fn start(&mut self, extra: &[&str]) {
        self.start_in("nftables", extra);
    }

    /// Starts `kproxy run --proxy-mode <mode>` in node-a and waits for its
    /// first sync: for nftables on the host until `nft` lists its table,
    /// otherwise (other modes; the IPVS VM, which has no `nft`) until its
    /// metrics report a sync.
    pub fn start_in(&mut self, mode: &str, extra: &[&str]) {
        let source = ["--manifests".into(), self.manifests().display().to_string()];
        self.spawn(&source, mode, extra);
    }

    /// Starts `kproxy run` in `mode` (for iptables, on its backend) in
    /// node-a and waits for its first sync.
    pub fn start_mode(&mut self, mode: Mode, extra: &[&str]) {
        if let Mode::Iptables(backend) = mode {
            self.env.retain(|(k, _)| k != "KPROXY_IPTABLES_BACKEND");
            self.env.push(("KPROXY_IPTABLES_BACKEND".into(), backend.into()));
        }
        self.start_in(mode.name(), extra);
    }

    /// Stops kproxy and starts it again in `mode` with `extra` flags (its
    /// rules stay in between), and waits for the new process's first sync.
    pub fn restart_mode(&mut self, mode: Mode, extra: &[&str]) {
        self.stop();
        self.start_mode(mode, extra);
        // nftables mode's start waits for its table, which the last run left.
        self.eventually("the restarted kproxy's first sync", || self.synced());
    }

    /// Starts `kproxy run` in node-a reading the API server of `kubeconfig`
    /// (a fake one listening inside node-a) instead of the manifests.
    pub fn start_kube(&mut self, kubeconfig: &str, extra: &[&str]) {
        let path = self.dir.path().join("kubeconfig");
        std::fs::write(&path, kubeconfig).expect("writing the kubeconfig");
        self.spawn(&["--kubeconfig".into(), path.display().to_string()], "nftables", extra);
    }

    fn spawn(&mut self, source: &[String], mode: &str, extra: &[&str]) {
        assert!(self.kproxy.is_none(), "kproxy is already running");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("log file");
        self.extra = extra.iter().map(|f| f.to_string()).collect();
        let mut flags = Self::flags_in(mode);
        // A test's own minimum sync period replaces the lab's (the flag may
        // be given once).
        if let Some(i) = flags.iter().position(|f| f.ends_with("-min-sync-period"))
            && extra.contains(&flags[i].as_str())
        {
            flags.drain(i..=i + 1);
        }
        if self.without_cluster_cidr {
            let at = flags.iter().position(|f| f == "--cluster-cidr").expect("the flags set a cluster CIDR");
            flags.drain(at..at + 2);
        }
        if mode == Mode::Ebpf.name() {
            flags.extend(self.ebpf_flags());
        }
        let mut command = Command::new(kproxy_binary());
        command
            .arg("run")
            .args(source)
            .args(flags)
            .args(extra)
            .env("RUST_LOG", "warn,kproxy=debug")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let spawned = self.node().spawn(command).unwrap_or_else(|e| panic!("spawning kproxy: {}", chain(&e)));
        self.kproxy = Some(spawned);
        if mode == "nftables" && !kproxy_testkit::vm::in_guest() {
            self.eventually("kproxy's tables", || self.ruleset().contains("table ip kproxy"));
        } else {
            self.eventually("kproxy's first sync", || self.synced());
        }
    }

    /// Whether kproxy's metrics report a sync (a non-zero last-sync
    /// timestamp, of any IP family).
    pub fn synced(&self) -> bool {
        self.metrics().lines().any(|line| {
            line.strip_prefix("kubeproxy_sync_proxy_rules_last_timestamp_seconds")
                .filter(|rest| rest.starts_with(['{', ' ']))
                .and_then(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
                .is_some_and(|seconds| seconds > 0.0)
        })
    }

    /// The sum of every sample of metric `name` (all label sets; 0 when
    /// absent), as kproxy's `/metrics` reports it now.
    pub fn metric(&self, name: &str) -> f64 {
        self.metrics()
            .lines()
            .filter(|line| line.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// How many syncs kproxy's metrics report so far (every mode).
    pub fn sync_count(&self) -> f64 {
        self.metric("kubeproxy_sync_proxy_rules_duration_seconds_count")
    }

    /// Stops kproxy (SIGTERM) and waits for it; its rules stay.
    pub fn stop(&mut self) {
        let kproxy = self.kproxy.take().expect("kproxy is running");
        kproxy.terminate().expect("signalling kproxy");
        let status = kproxy.wait_with_timeout(Duration::from_secs(5)).expect("waiting for kproxy");
        assert!(status.is_some(), "kproxy did not stop within 5 s");
    }

    /// Runs a kproxy subcommand in node-a and returns (success, stdout+stderr).
    ///
    /// Through `ip netns exec`, except once the lab runs the ebpf mode:
    /// that remounts `/sys`, hiding the cgroup2 mount the mode's
    /// `--ebpf-cgroup` path lies in, so then the subcommand only joins
    /// node-a's network namespace, as `kproxy run` does.
    pub fn kproxy(&self, args: &[&str]) -> (bool, String) {
        let binary = kproxy_binary();
        let out = match self.ebpf {
            Some(_) => {
                let mut command = Command::new(&binary);
                command.args(args);
                self.node().output(command)
            }
            None => self.node().exec(&binary.to_string_lossy(), args),
        };
        match out {
            Ok(stdout) => (true, stdout),
            Err(e) => (false, chain(&e)),
        }
    }

    /// kproxy's `/metrics`, fetched inside node-a.
    pub fn metrics(&self) -> String {
        self.node().enter(|| {
            use std::io::{Read, Write};
            let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", 10249)) else { return String::new() };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
            let mut body = String::new();
            let _ = stream.read_to_string(&mut body);
            body
        })
    }

    pub fn ruleset(&self) -> String {
        self.node().exec("nft", &["list", "ruleset"]).unwrap_or_default()
    }

    /// Polls `check` every 50 ms for up to 10 s.
    pub fn eventually(&self, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if check() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}\n{}", self.log_tail());
    }

    /// The running kproxy's PID.
    pub fn kproxy_pid(&self) -> u32 {
        self.kproxy.as_ref().expect("kproxy is running").pid()
    }

    /// Everything kproxy logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!("--- kproxy log (last lines) ---\n{}", lines[lines.len().saturating_sub(30)..].join("\n"))
    }

    /// `count` TCP requests from `from` to `to`: how often each outcome came.
    pub fn spread(&self, from: &Netns, to: &str, protocol: Protocol, count: usize) -> BTreeMap<Outcome, usize> {
        let mut seen = BTreeMap::new();
        for _ in 0..count {
            *seen.entry(self.request(from, to, protocol, None)).or_default() += 1;
        }
        seen
    }

    /// One request from `from` (inside the lab's cgroup where [`Lab::place`] says so).
    pub fn request(&self, from: &Netns, to: &str, protocol: Protocol, source: Option<IpAddr>) -> Outcome {
        let to: SocketAddr = to.parse().expect("an address");
        let wait = ANSWER_WAIT;
        let result = match protocol {
            Protocol::Udp => udp_request(self.place(from), to, source, wait),
            _ => tcp_request(self.place(from), to, source, wait),
        };
        Outcome::from(result)
    }

    /// One TCP request from `from` waiting `wait`, with the probe's own
    /// result (a drop is `Err(TimedOut)`), made where [`Lab::place`] says.
    pub fn tcp(&self, from: &Netns, to: &str, source: Option<IpAddr>, wait: Duration) -> Result<Reply, ProbeError> {
        tcp_request(self.place(from), to.parse().expect("an address"), source, wait)
    }

    /// Whether a TCP connection from `from` to `to` is silently dropped
    /// (no answer within [`DROP_WAIT`]).
    pub fn dropped(&self, from: &Netns, to: &str, source: Option<IpAddr>) -> bool {
        matches!(self.tcp(from, to, source, DROP_WAIT), Err(ProbeError::TimedOut))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail());
        }
        if let Some(kproxy) = self.kproxy.take() {
            let _ = kproxy.kill();
        }
        // Before the tempdir it is mounted in goes; the cgroup (the last
        // field) goes after the namespaces and their processes.
        self.unmount_bpffs();
    }
}

impl Lab {
    /// Loads what `kproxy render --proxy-mode iptables` prints for the
    /// lab's manifests (with the lab's flags and `extra`) with `backend`'s
    /// tools, as an operator would: each family's payload with
    /// `iptables-restore --noflush`, then the jump rules. Upstream
    /// kube-proxy's iptables mode writes the same chains and rules.
    pub fn load_rendered_iptables(&self, backend: &str, extra: &[&str]) {
        let dir = self.dir.path().display().to_string();
        let mut args = vec!["render".to_owned(), "--manifests".to_owned(), dir];
        args.extend(Self::flags_in("iptables"));
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, script) = self.kproxy(&args);
        assert!(ok, "{script}");
        let (mut tool, mut payloads, mut jumps) = ("", Vec::<(&str, String)>::new(), Vec::new());
        for line in script.lines() {
            if line.starts_with("# IPv4: ") || line.starts_with("# IPv6: ") {
                tool = if line.starts_with("# IPv4") { "iptables" } else { "ip6tables" };
                if line.ends_with("-restore --noflush") {
                    payloads.push((tool, String::new()));
                }
            } else if let Some(jump) = line.strip_prefix("# -t ") {
                jumps.push((tool, words(&format!("-t {jump}"))));
            } else if !line.starts_with('#') {
                let payload = &mut payloads.last_mut().expect("a payload heading first").1;
                payload.push_str(line);
                payload.push('\n');
            }
        }
        assert_eq!(payloads.iter().map(|(t, _)| *t).collect::<Vec<_>>(), ["iptables", "ip6tables"], "{script}");
        assert!(jumps.len() > 20, "{script}");
        for (tool, payload) in &payloads {
            let path = self.dir.path().join(format!("{tool}.rules"));
            std::fs::write(&path, payload).expect("writing the payload");
            let path = path.display().to_string();
            self.node()
                .exec(&format!("{tool}-{backend}-restore"), &["--noflush", &path])
                .unwrap_or_else(|e| panic!("{tool}-restore loads the rendered payload: {e}\n{payload}"));
        }
        for (tool, args) in &jumps {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.node().exec(&format!("{tool}-{backend}"), &args).unwrap_or_else(|e| panic!("{tool} {args:?}: {e}"));
        }
    }
}

/// A rendered jump rule's arguments: words split at white space, a
/// "double-quoted" one (backslash escapes inside) kept together.
pub fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let (mut quoted, mut escaped) = (false, false);
    for c in line.chars() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
            continue;
        } else if c == '"' {
            quoted = !quoted;
            word.get_or_insert_default();
            continue;
        } else if c.is_whitespace() && !quoted {
            words.extend(word.take());
            continue;
        }
        word.get_or_insert_default().push(c);
    }
    words.extend(word);
    words
}

/// One request's result, comparable and printable.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The backend that answered and the source address it saw.
    Answered {
        backend: String,
        peer: IpAddr,
    },
    Refused,
    TimedOut,
    Failed(String),
}

impl From<Result<Reply, ProbeError>> for Outcome {
    fn from(result: Result<Reply, ProbeError>) -> Self {
        match result {
            Ok(reply) => Outcome::Answered { backend: reply.backend, peer: reply.peer },
            Err(ProbeError::Refused | ProbeError::Reset) => Outcome::Refused,
            Err(ProbeError::TimedOut) => Outcome::TimedOut,
            Err(e) => Outcome::Failed(format!("{e:?}")),
        }
    }
}

pub fn answered(backend: &str, peer: impl Into<IpAddr>) -> Outcome {
    Outcome::Answered { backend: backend.to_owned(), peer: peer.into() }
}

/// The backends seen in a spread.
pub fn backends(spread: &BTreeMap<Outcome, usize>) -> Vec<String> {
    let mut names: Vec<String> = spread
        .keys()
        .filter_map(|o| match o {
            Outcome::Answered { backend, .. } => Some(backend.clone()),
            _ => None,
        })
        .collect();
    names.dedup();
    names
}

/// A Service manifest: `ports` are (name, protocol, port, nodePort).
pub fn service(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}
