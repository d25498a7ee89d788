//! The proxies of the userspace comparison, started as children of the
//! worker in its network namespace: `kproxy run --proxy-mode userspace` on
//! a manifest folder, and HAProxy (`mode tcp`, as many threads as kproxy has
//! relay threads) from a config file, both in front of the same
//! backends. Each is ended by its handle (it is our unreaped child).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::backend;

/// Where clients reach each proxy (loopback; the worker's own namespace).
pub const KPROXY_FRONTEND: &str = "127.0.33.1:8080";
pub const HAPROXY_FRONTEND: &str = "127.0.33.2:8080";
/// kproxy's health and metrics listeners.
const KPROXY_HEALTHZ: &str = "127.0.0.1:10256";
const KPROXY_METRICS: &str = "127.0.0.1:10249";
/// How long a proxy may take to answer its first request.
const READY: Duration = Duration::from_secs(20);

/// What the load goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proxy {
    /// Straight to the first backend: the load generator's and backends' own ceiling.
    Direct,
    Kproxy,
    Haproxy,
}

impl Proxy {
    pub fn name(self) -> &'static str {
        match self {
            Proxy::Direct => "backend directly",
            Proxy::Kproxy => "kproxy userspace",
            Proxy::Haproxy => "HAProxy",
        }
    }
}

/// What both proxies are started from.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Config files and logs go here.
    pub dir: PathBuf,
    pub kproxy: PathBuf,
    pub haproxy: PathBuf,
    pub backends: Vec<SocketAddr>,
    /// HAProxy's `nbthread`: kproxy's relay threads (one per core).
    pub threads: usize,
    /// HAProxy's `maxconn` (global and per frontend); kproxy has no limit.
    pub max_connections: usize,
}

/// A started proxy; ended when dropped.
pub struct Running {
    child: Option<Child>,
    pub frontend: SocketAddr,
    log: Option<PathBuf>,
}

impl Running {
    /// The proxy's PID (`None` for [`Proxy::Direct`]).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn log_tail(&self) -> String {
        let text = self.log.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    /// Until a request through the frontend gets its reply.
    fn wait_ready(&mut self, what: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY;
        loop {
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                anyhow::bail!("{what} exited ({status}); its log ends:\n{}", self.log_tail());
            }
            let outcome = backend::probe(self.frontend, Duration::from_millis(500));
            match outcome {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    anyhow::bail!(
                        "{what} did not answer on {} within {READY:?}: {e:#}\n{}",
                        self.frontend,
                        self.log_tail()
                    )
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Our own child, not yet reaped: its PID is still ours.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `proxy` and waits until it answers through its frontend.
pub fn start(proxy: Proxy, setup: &Setup) -> anyhow::Result<Running> {
    let mut running = match proxy {
        Proxy::Direct => Running { child: None, frontend: *setup.backends.first().context("no backends")?, log: None },
        Proxy::Kproxy => {
            let manifests = setup.dir.join("manifests");
            std::fs::create_dir_all(&manifests)?;
            let frontend: SocketAddr = KPROXY_FRONTEND.parse()?;
            std::fs::write(manifests.join("web.yaml"), kproxy_manifests(frontend, &setup.backends))?;
            let mut command = Command::new(&setup.kproxy);
            command
                .args(["run", "--proxy-mode", "userspace", "--hostname-override", crate::workload::NODE])
                .arg("--manifests")
                .arg(&manifests)
                .args(["--healthz-bind-address", KPROXY_HEALTHZ, "--metrics-bind-address", KPROXY_METRICS])
                .env("RUST_LOG", "warn");
            spawn(command, frontend, &setup.dir.join("kproxy.log"))?
        }
        Proxy::Haproxy => {
            let frontend: SocketAddr = HAPROXY_FRONTEND.parse()?;
            let config = setup.dir.join("haproxy.cfg");
            std::fs::write(&config, haproxy_config(frontend, setup))?;
            let mut command = Command::new(&setup.haproxy);
            // -db: foreground, no master process; the PID is the proxy's.
            command.args(["-db", "-f"]).arg(&config);
            spawn(command, frontend, &setup.dir.join("haproxy.log"))?
        }
    };
    running.wait_ready(proxy.name())?;
    Ok(running)
}

fn spawn(mut command: Command, frontend: SocketAddr, log: &Path) -> anyhow::Result<Running> {
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    command.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
    let child = command.spawn().with_context(|| format!("starting {command:?}"))?;
    Ok(Running { child: Some(child), frontend, log: Some(log.to_owned()) })
}

/// One Service on `frontend` and its endpoints, one EndpointSlice per port
/// (a slice's ports apply to all its endpoints).
pub fn kproxy_manifests(frontend: SocketAddr, backends: &[SocketAddr]) -> String {
    let mut by_port: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for b in backends {
        by_port.entry(b.port()).or_default().push(b.ip().to_string());
    }
    let target = backends.first().map_or(frontend.port(), SocketAddr::port);
    let mut out = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\nspec:\n  clusterIP: {}\n  \
         ports: [{{name: http, port: {}, targetPort: {target}}}]\n",
        frontend.ip(),
        frontend.port()
    );
    for (i, (port, ips)) in by_port.iter().enumerate() {
        let endpoints: Vec<String> =
            ips.iter().map(|ip| format!("{{addresses: [{ip}], conditions: {{ready: true}}}}")).collect();
        let _ = write!(
            out,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-{}, namespace: default, \
             labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\nendpoints: [{}]\n\
             ports: [{{name: http, port: {port}, protocol: TCP}}]\n",
            i + 1,
            endpoints.join(", ")
        );
    }
    out
}

/// HAProxy 2.6 in `mode tcp`, round robin over the same backends, timeouts
/// that outlast the measurement (kproxy has no idle timeout), connect
/// timeout as kproxy's (2 s); everything else is HAProxy's default.
pub fn haproxy_config(frontend: SocketAddr, setup: &Setup) -> String {
    let mut out = format!(
        "# written by kproxy-bench\nglobal\n    nbthread {}\n    maxconn {max}\n\n\
         defaults\n    mode tcp\n    maxconn {max}\n    timeout connect 2s\n    timeout client 10m\n    \
         timeout server 10m\n\n\
         frontend web\n    bind {frontend}\n    default_backend endpoints\n\n\
         backend endpoints\n    balance roundrobin\n",
        setup.threads,
        max = setup.max_connections
    );
    for (i, b) in setup.backends.iter().enumerate() {
        let _ = writeln!(out, "    server b{} {b}", i + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backends() -> Vec<SocketAddr> {
        vec!["127.0.0.11:9001".parse().expect("addr"), "127.0.0.12:9001".parse().expect("addr")]
    }

    #[test]
    fn manifests_group_endpoints_by_port() {
        let text = kproxy_manifests(KPROXY_FRONTEND.parse().expect("addr"), &backends());
        assert!(text.contains("clusterIP: 127.0.33.1"), "{text}");
        assert!(text.contains("ports: [{name: http, port: 8080, targetPort: 9001}]"), "{text}");
        assert_eq!(text.matches("kind: EndpointSlice").count(), 1, "{text}");
        assert!(text.contains("{addresses: [127.0.0.12], conditions: {ready: true}}"), "{text}");
        let mut split = backends();
        split[1].set_port(9002);
        let text = kproxy_manifests(KPROXY_FRONTEND.parse().expect("addr"), &split);
        assert_eq!(text.matches("kind: EndpointSlice").count(), 2, "{text}");
        assert!(text.contains("name: web-2"), "{text}");
    }

    #[test]
    fn haproxy_uses_the_threads_and_every_backend() {
        let setup = Setup {
            dir: PathBuf::new(),
            kproxy: PathBuf::new(),
            haproxy: PathBuf::new(),
            backends: backends(),
            threads: 2,
            max_connections: 20_000,
        };
        let text = haproxy_config(HAPROXY_FRONTEND.parse().expect("addr"), &setup);
        assert!(text.contains("nbthread 2\n"), "{text}");
        assert!(text.contains("mode tcp\n"), "{text}");
        assert!(text.contains("bind 127.0.33.2:8080\n"), "{text}");
        assert!(text.contains("server b2 127.0.0.12:9001\n"), "{text}");
    }
}
