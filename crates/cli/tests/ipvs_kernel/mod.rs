//! What the IPVS-mode tests of `vm_ipvs_kernel.rs` stand on: kproxy run
//! in IPVS mode inside node-a of the lab (in the IPVS VM), the kernel's
//! own view of its virtual servers (`ipvsadm -Ln` in node-a), kproxy's
//! sync summaries from its log, and connections held open across changes.
//! Nothing here programs IPVS for kproxy: tests check what kproxy did.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use kproxy_model::{IpFamily, Protocol};
use kproxy_netlink::nft::{self as netlink, IntervalSets};
use kproxy_sandbox::{Netns, Reply};
use kproxy_testkit::vm;

use crate::lab::{Lab, Outcome, PORT};

/// Resyncs come this often, so graceful termination finishes within a
/// couple of seconds of a connection's end (changes sync within the lab's
/// 50 ms `--ipvs-min-sync-period`).
pub const SYNC_FLAGS: &[&str] = &["--ipvs-sync-period", "1s"];

/// Boots the VM with the kproxy binary in the payload and runs test `name` there.
pub fn in_vm(name: &str) {
    vm::run_test_with(name, &[(Path::new(env!("CARGO_BIN_EXE_kproxy")), "kproxy")]);
}

/// A Service manifest with annotations (`kproxy.io/scheduler`, ...).
pub fn service_with(name: &str, annotations: &[(&str, &str)], spec: &str) -> String {
    let annotations: Vec<String> = annotations.iter().map(|(k, v)| format!("{k}: \"{v}\"")).collect();
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, annotations: {{{}}}}}\nspec:\n{spec}",
        annotations.join(", ")
    )
}

/// A ClusterIP service on `ip:80` -> the pods labelled `app`, port [`PORT`].
pub fn cluster_ip(ip: &str, app: &str) -> String {
    format!("  clusterIP: {ip}\n  selector: {{app: {app}}}\n  ports: [{{name: http, port: 80, targetPort: http}}]\n")
}

/// Starts kproxy in IPVS mode in node-a with [`SYNC_FLAGS`] and `extra`.
pub fn start_ipvs(lab: &mut Lab, extra: &[&str]) {
    let mut flags = SYNC_FLAGS.to_vec();
    flags.extend_from_slice(extra);
    lab.start_in("ipvs", &flags);
}

/// One real server as `ipvsadm -Ln` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Real {
    pub weight: u32,
    pub active: u32,
    pub inactive: u32,
}

/// One virtual server as `ipvsadm -Ln` shows it: the scheduler and flags
/// (`rr`, `wrr`, `sh persistent 10800`), and its real servers by address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Virtual {
    pub scheduler: String,
    pub reals: BTreeMap<String, Real>,
}

/// `ipvsadm -Ln` in node-a, as printed.
pub fn ipvsadm(lab: &Lab) -> String {
    lab.node().exec("ipvsadm", &["-Ln"]).unwrap_or_else(|e| panic!("ipvsadm -Ln in node-a: {e}"))
}

/// `ipvsadm -Ln` in node-a, parsed: `"TCP 10.96.0.10:80"` -> its server.
pub fn kernel(lab: &Lab) -> BTreeMap<String, Virtual> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in ipvsadm(lab).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [proto @ ("TCP" | "UDP" | "SCTP"), addr, rest @ ..] => {
                let key = format!("{proto} {addr}");
                out.insert(key.clone(), Virtual { scheduler: rest.join(" "), reals: BTreeMap::new() });
                current = Some(key);
            }
            ["->", addr, _forward, weight, active, inactive] if *addr != "RemoteAddress:Port" => {
                let key = current.as_ref().unwrap_or_else(|| panic!("a real server before any virtual: {line}"));
                let parse = |n: &str| n.parse::<u32>().unwrap_or_else(|_| panic!("not a number in {line:?}"));
                let real = Real { weight: parse(weight), active: parse(active), inactive: parse(inactive) };
                out.get_mut(key).expect("inserted above").reals.insert((*addr).to_owned(), real);
            }
            _ => {}
        }
    }
    out
}

/// The real servers' weights of `server` (`"TCP 10.96.0.10:80"`), by address.
pub fn weights(lab: &Lab, server: &str) -> Option<BTreeMap<String, u32>> {
    kernel(lab).get(server).map(|v| v.reals.iter().map(|(a, r)| (a.clone(), r.weight)).collect())
}

/// Polls `check` every 100 ms for up to `limit`; panics with `what` and
/// the kernel's table when it never holds (the lab adds kproxy's log).
pub fn within(lab: &Lab, limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out after {limit:?} waiting for {what}\n{}", ipvsadm(lab));
}

/// The backend that answered, or a panic naming what came instead.
pub fn backend(outcome: Outcome, what: &str) -> String {
    match outcome {
        Outcome::Answered { backend, .. } => backend,
        other => panic!("{what}: {other:?}"),
    }
}

/// The backends that answered `count` TCP connections from `from` to `to`
/// (optionally from source `source`), in order; a short pause after each,
/// so the kernel has seen the connection close before the next one opens.
pub fn sequence(lab: &Lab, from: &Netns, to: &str, source: Option<IpAddr>, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let name = backend(lab.request(from, to, Protocol::Tcp, source), &format!("connection {i} to {to}"));
            std::thread::sleep(Duration::from_millis(50));
            name
        })
        .collect()
}

/// The sync summaries kproxy logged so far (`full: 6 IPVS changes, ...`),
/// oldest first.
pub fn sync_summaries(lab: &Lab) -> Vec<String> {
    let log = std::fs::read_to_string(lab.dir.path().join("kproxy.log")).unwrap_or_default();
    log.lines()
        .filter(|line| line.contains("sync applied"))
        .filter_map(|line| line.split_once("summary=").map(|(_, s)| s.trim_matches('"').to_owned()))
        .collect()
}

/// The number of IPVS changes a summary reports.
pub fn changes(summary: &str) -> usize {
    summary
        .split_once(" IPVS changes")
        .and_then(|(head, _)| head.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no IPVS change count in {summary:?}"))
}

/// Whether node-a holds kproxy's companion table `kproxy-ipvs` of
/// `family`: a batch deleting it is refused (ENOENT) when it is missing.
/// Deletes the table when it exists, so only call it where it must not.
pub fn companion_table_exists(lab: &Lab, family: IpFamily) -> bool {
    let ops = vec![kproxy_nftables::Op::DeleteTable];
    let plan =
        kproxy_nftables::Plan { full: true, families: vec![kproxy_nftables::FamilyPlan { family: Some(family), ops }] };
    let encoded = netlink::encode_table(kproxy_ipvs::companion::TABLE, &plan, 1, &IntervalSets::default());
    lab.node().enter(|| netlink::apply(&encoded)).is_ok()
}

/// A TCP connection kept open (from inside a namespace) to send several
/// requests over, then closed with a reset so IPVS forgets it quickly
/// (CLOSE lasts 10 s, TIME_WAIT after a FIN 2 min).
pub struct Held {
    reader: BufReader<TcpStream>,
    /// The backend that answered the first request.
    pub backend: String,
}

impl Held {
    /// Connects from `ns` to `to` and sends a first request.
    pub fn open(ns: &Netns, to: &str) -> Held {
        let to: SocketAddr = to.parse().expect("an address");
        let stream = ns
            .enter(|| TcpStream::connect_timeout(&to, Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("connecting from {} to {to}: {e}", ns.name()));
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("a read timeout");
        let mut held = Held { reader: BufReader::new(stream), backend: String::new() };
        held.backend = held.request().unwrap_or_else(|e| panic!("the first request to {to}: {e}")).backend;
        held
    }

    /// One more request over the same connection.
    pub fn request(&mut self) -> Result<Reply, String> {
        self.reader.get_mut().write_all(b"hello\n").map_err(|e| format!("sending: {e}"))?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err("closed before a reply".to_owned()),
            Ok(_) => Reply::parse(&line).ok_or_else(|| format!("not a reply: {line:?}")),
            Err(e) => Err(format!("reading: {e}")),
        }
    }

    /// Closes with a reset (`SO_LINGER` 0).
    pub fn reset(self) {
        let stream = self.reader.into_inner();
        socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO)).expect("SO_LINGER");
        drop(stream);
    }
}

/// How many of `names` are `name`.
pub fn count(names: &[String], name: &str) -> usize {
    names.iter().filter(|n| *n == name).count()
}

/// `ip:PORT`, as `ipvsadm -Ln` prints a real server.
pub fn real(ip: impl Into<IpAddr>) -> String {
    SocketAddr::new(ip.into(), PORT).to_string()
}

/// Waits until every one of `servers` is in the kernel with `reals` real servers.
pub fn programmed(lab: &Lab, servers: &[&str], reals: usize) {
    within(lab, Duration::from_secs(20), &format!("{servers:?} with {reals} real servers each"), || {
        let kernel = kernel(lab);
        servers.iter().all(|s| kernel.get(*s).is_some_and(|v| v.reals.len() == reals))
    });
}

/// The sync summaries after the first `before`, once a sync with changes
/// came and a couple of periodic syncs (1 s) followed it; all partial.
pub fn summaries_since(lab: &Lab, before: usize) -> Vec<String> {
    within(lab, Duration::from_secs(10), "a sync with changes", || {
        sync_summaries(lab)[before..].iter().any(|s| changes(s) > 0)
    });
    std::thread::sleep(Duration::from_secs(2));
    let after = sync_summaries(lab)[before..].to_vec();
    assert!(after.iter().all(|s| s.starts_with("partial")), "only partial syncs: {after:?}");
    after
}

/// `ipvsadm -Ln`'s (or `kproxy list`'s) lines as whitespace-split fields,
/// without the version line and kproxy's `# kind service` comments.
pub fn fields(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.starts_with("IP Virtual Server version"))
        .map(|l| l.split_once(" #").map_or(l, |(fields, _)| fields))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}
