//! Test fixtures: the skip-or-fail gate, a private bpffs, a private cgroup.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use kproxy_ebpf::maps::{Backend, BackendKey, Frontend, FrontendKey, Op, Selection, addr16, sched, verdict};

/// Whether real-kernel tests can run; fails instead of skipping under
/// `KPROXY_REQUIRE_NETNS=1`.
pub fn kernel_available(test: &str) -> bool {
    let why = match kproxy_sandbox::available() {
        Err(e) => Some(e.to_string()),
        Ok(()) if cgroup2_mount().is_none() => Some("no cgroup2 mount".to_owned()),
        Ok(()) => None,
    };
    match why {
        None => true,
        Some(why) if std::env::var("KPROXY_REQUIRE_NETNS").as_deref() == Ok("1") => {
            panic!("{test}: real-kernel test cannot run and KPROXY_REQUIRE_NETNS=1: {why}")
        }
        Some(why) => {
            eprintln!("skipping {test}: {why}");
            false
        }
    }
}

fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A bpffs mounted on a temporary directory, unmounted on drop.
pub struct Bpffs {
    dir: tempfile::TempDir,
}

impl Bpffs {
    pub fn mount() -> Bpffs {
        let dir = tempfile::Builder::new().prefix("kp-bpffs").tempdir().expect("a temporary directory");
        let status = Command::new("mount").args(["-t", "bpf", "bpf"]).arg(dir.path()).status().expect("run mount");
        assert!(status.success(), "mount a bpffs on {}", dir.path().display());
        Bpffs { dir }
    }

    /// kproxy's pin directory on it.
    pub fn pin_dir(&self) -> PathBuf {
        self.dir.path().join("kproxy")
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        // Lazy: pins still open elsewhere must not keep the mount.
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// The cgroup2 mount point (`/sys/fs/cgroup/unified` on hybrid layouts).
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, at, fs) = (fields.next()?, fields.next()?, fields.next()?);
        (fs == "cgroup2").then(|| PathBuf::from(at))
    })
}

/// A cgroup this test created, for its own child processes only; removed
/// on drop once its processes have exited.
pub struct TestCgroup {
    path: PathBuf,
}

impl TestCgroup {
    pub fn new() -> TestCgroup {
        let path = cgroup2_mount().expect("a cgroup2 mount").join(unique("kp-bpf"));
        std::fs::create_dir(&path).expect("create the test cgroup");
        TestCgroup { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // The children were waited for; rmdir can still race their exit.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("could not remove test cgroup {}", self.path.display());
    }
}

/// One frontend (v4 or v6) forwarding to `backends` with `sched`.
pub fn service(frontend: (&str, u16, u8), group: u32, backends: &[(&str, u16)], id: u32) -> Vec<Op> {
    let mut ops: Vec<Op> = backends
        .iter()
        .enumerate()
        .map(|(slot, (ip, port))| {
            Op::PutBackend(
                BackendKey { group, slot: slot as u32 },
                Backend { addr: addr16(ip.parse().expect("ip")), port: port.to_be(), pad: 0 },
            )
        })
        .collect();
    let sel = Selection { group, count: backends.len() as u16, verdict: verdict::FORWARD, sched: sched::RANDOM };
    ops.push(Op::PutFrontend(
        fkey(frontend.0, frontend.1, frontend.2),
        Frontend { internal: sel, external: sel, id, ..Frontend::default() },
    ));
    ops
}

/// A frontend that answers with `verdict` (REJECT, DROP).
pub fn verdict_frontend(key: FrontendKey, verdict: u8, flags: u32, id: u32) -> Op {
    let sel = Selection { group: 0, count: 0, verdict, sched: 0 };
    Op::PutFrontend(key, Frontend { internal: sel, external: sel, id, flags, ..Frontend::default() })
}

pub fn fkey(ip: &str, port: u16, proto: u8) -> FrontendKey {
    FrontendKey { addr: addr16(ip.parse().expect("ip")), port: port.to_be(), proto, pad: 0 }
}

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;

/// Wait (up to 3 s) until `interfaces` in `ns` have carrier and `ns` has
/// no tentative IPv6 address: a new veth drops what it is given until
/// linkwatch (which batches for up to a second) has seen its carrier.
pub fn wait_ready(ns: &kproxy_sandbox::Netns, interfaces: &[&str]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let links = ns.ip_output(&["-o", "link", "show"]).expect("ip link show");
        let tentative = ns.ip_output(&["-6", "-o", "addr", "show", "tentative"]).expect("ip addr show");
        let running = |name: &str| {
            links.lines().any(|l| {
                let mut fields = l.split_whitespace();
                let named = fields.nth(1).is_some_and(|f| f.trim_end_matches(':').split('@').next() == Some(name));
                let flags = fields.next().unwrap_or_default();
                named && flags.contains("LOWER_UP") && !flags.contains("NO-CARRIER")
            })
        };
        if interfaces.iter().all(|i| running(i)) && tentative.trim().is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{interfaces:?} not ready in {}: {links}{tentative}", ns.name());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
