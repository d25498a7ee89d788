//! The userspace mode on the real kernel, as root in node-a: frontend
//! addresses are claimed with local routes of kproxy's protocol, so an
//! outside client reaches a cluster IP through kproxy's sockets; the routes
//! follow the services, are adopted after a restart, and `kproxy cleanup
//! --proxy-mode userspace` removes them. Routes of other protocols stay.

mod lab;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use kproxy_model::Protocol;
use kproxy_netlink::routes::ROUTE_PROTOCOL;
use kproxy_sandbox::Spawned;
use lab::*;

/// A lab with kproxy run in the userspace mode (the lab's own `start` runs
/// the nftables mode).
struct Userspace {
    lab: Lab,
    kproxy: Option<Spawned>,
    log: PathBuf,
}

impl Userspace {
    fn new(pods: &[(u8, &str)]) -> Self {
        let lab = Lab::new(pods);
        let log = lab.dir.path().join("kproxy-userspace.log");
        Self { lab, kproxy: None, log }
    }

    fn start(&mut self) {
        assert!(self.kproxy.is_none(), "kproxy is already running");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_kproxy"));
        command
            .args(["run", "--manifests"])
            .arg(self.lab.dir.path())
            .args(["--hostname-override", "node-a", "--proxy-mode", "userspace"])
            .args(["--cluster-cidr", CLUSTER_CIDRS, "--service-cidrs", SERVICE_CIDRS])
            .args(["--iptables-min-sync-period", "50ms"])
            .args(["--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249"])
            .env("RUST_LOG", "warn,kproxy=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.kproxy = Some(self.lab.node().spawn(command).expect("spawning kproxy"));
    }

    /// SIGTERM, and wait: its routes stay.
    fn stop(&mut self) {
        let kproxy = self.kproxy.take().expect("kproxy is running");
        kproxy.terminate().expect("signalling kproxy");
        let status = kproxy.wait_with_timeout(Duration::from_secs(5)).expect("waiting for kproxy");
        assert!(status.is_some(), "kproxy did not stop within 5 s");
    }

    /// Routes of `proto` in node-a's local table, both families, one a line.
    fn local_routes(&self, proto: &str) -> String {
        let node = self.lab.node();
        let v4 = node.ip_output(&["route", "show", "table", "local", "proto", proto]).expect("ip route");
        let v6 = node.ip_output(&["-6", "route", "show", "table", "local", "proto", proto]).expect("ip -6 route");
        format!("{v4}{v6}")
    }

    fn kproxys(&self) -> String {
        self.local_routes(&ROUTE_PROTOCOL.to_string())
    }

    /// Polls `check` for up to 10 s; on a timeout, Drop prints our log.
    fn eventually(&self, what: &str, check: impl FnMut() -> bool) {
        self.lab.eventually(what, check);
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!("--- kproxy log (last lines) ---\n{}", lines[lines.len().saturating_sub(30)..].join("\n"))
    }

    fn answered_by(&self, from: &kproxy_sandbox::Netns, to: &str, backend: &str) -> bool {
        matches!(self.lab.request(from, to, Protocol::Tcp, None), Outcome::Answered { backend: b, .. } if b == backend)
    }
}

impl Drop for Userspace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail());
        }
        if let Some(kproxy) = self.kproxy.take() {
            let _ = kproxy.kill();
        }
    }
}

/// A LoadBalancer with a cluster IP of each family, node-a's own address as
/// external IP, an ingress IP and a node port.
const WEB: &str = "  type: LoadBalancer\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n\
                   \x20 ipFamilyPolicy: RequireDualStack\n  externalIPs: [192.168.77.1]\n  selector: {app: web}\n\
                   \x20 ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n";

fn web() -> String {
    format!("{}status:\n  loadBalancer:\n    ingress: [{{ip: 198.51.100.20}}]\n", service("web", WEB))
}

fn cluster_ip(name: &str, ip: &str) -> String {
    service(
        name,
        &format!(
            "  clusterIP: {ip}\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80, targetPort: http}}]\n"
        ),
    )
}

/// Someone else's local routes (`proto static`), one of each family.
fn add_foreign_routes(lab: &Lab) {
    lab.node()
        .ip(&["route", "add", "local", "10.96.0.99/32", "dev", "lo", "table", "local", "proto", "static"])
        .unwrap();
    lab.node()
        .ip(&["-6", "route", "add", "local", "fd00:96::99/128", "dev", "lo", "table", "local", "proto", "static"])
        .unwrap();
}

fn has_route(routes: &str, address: &str) -> bool {
    routes.lines().any(|l| l.starts_with(&format!("local {address} dev lo ")))
}

#[test]
fn frontend_addresses_are_claimed_served_and_released_and_other_routes_stay() {
    let mut us = Userspace::new(&[(1, "web-a1")]);
    add_foreign_routes(&us.lab);
    let foreign = us.local_routes("static");
    us.lab.write("web.yaml", &web());
    // Its cluster IP is already local through someone else's route.
    us.lab.write("db.yaml", &cluster_ip("db", "10.96.0.99"));
    us.start();

    let client = us.lab.client();
    us.eventually("the cluster IP to answer the client", || us.answered_by(client, "10.96.0.10:80", "web-a1"));
    assert!(us.answered_by(client, "[fd00:96::10]:80", "web-a1"), "the IPv6 cluster IP");
    assert!(us.answered_by(client, "198.51.100.20:80", "web-a1"), "the load-balancer IP");
    assert!(us.answered_by(client, "192.168.77.1:80", "web-a1"), "the external IP, node-a's own address");
    assert!(us.answered_by(us.lab.node(), "10.96.0.10:80", "web-a1"), "the node itself");
    assert!(us.answered_by(client, "10.96.0.99:80", "web-a1"), "db, through the foreign route");

    let claimed = us.kproxys();
    for address in ["10.96.0.10", "198.51.100.20", "fd00:96::10"] {
        assert!(has_route(&claimed, address), "{address} claimed:\n{claimed}");
    }
    assert_eq!(claimed.lines().count(), 3, "not the node's address, not db's:\n{claimed}");
    assert!(!claimed.contains("192.168.77.1"), "{claimed}");

    us.lab.remove("web.yaml");
    us.lab.remove("db.yaml");
    us.eventually("kproxy's routes to go with the services", || us.kproxys().is_empty());
    assert_eq!(us.local_routes("static"), foreign, "the foreign routes stay");
}

#[test]
fn a_restart_adopts_the_routes_it_left_and_cleanup_removes_only_kproxys() {
    let mut us = Userspace::new(&[(1, "web-a1")]);
    add_foreign_routes(&us.lab);
    let foreign = us.local_routes("static");
    us.lab.write("web.yaml", &cluster_ip("web", "10.96.0.10"));
    us.lab.write("old.yaml", &cluster_ip("old", "10.96.0.20"));
    us.start();
    us.eventually("both cluster IPs claimed", || {
        let routes = us.kproxys();
        has_route(&routes, "10.96.0.10") && has_route(&routes, "10.96.0.20")
    });
    us.stop();
    assert_eq!(us.kproxys().lines().count(), 2, "stopping keeps the routes:\n{}", us.kproxys());

    // Deleted while kproxy was down: the next run removes its leftover route.
    us.lab.remove("old.yaml");
    us.start();
    us.eventually("the leftover route removed", || !has_route(&us.kproxys(), "10.96.0.20"));
    us.eventually("web still served", || us.answered_by(us.lab.client(), "10.96.0.10:80", "web-a1"));
    assert!(has_route(&us.kproxys(), "10.96.0.10"), "{}", us.kproxys());
    us.stop();

    let (ok, out) = us.lab.kproxy(&["cleanup", "--proxy-mode", "userspace"]);
    assert!(ok, "{out}");
    assert_eq!(us.kproxys(), "", "kproxy's routes are gone");
    assert_eq!(us.local_routes("static"), foreign, "the foreign routes stay");
    let (ok, out) = us.lab.kproxy(&["cleanup", "--proxy-mode", "userspace"]);
    assert!(ok, "cleaning up twice is fine: {out}");
}
