//! Ending connected UDP sockets that kproxy's socket programs sent to an
//! endpoint that left its service: the connect hook translated them once,
//! and no hook runs again for a connected socket's datagrams, so without
//! this they would talk to that endpoint forever.
//!
//! The sockets are found with sock_diag, which answers for one network
//! namespace: the namespaces are those of the threads in the cgroup the
//! programs are attached to (its whole subtree), plus the namespaces
//! pinned under [`PINNED_NETNS`] (where `ip netns` and the container
//! runtimes pin pod namespaces): a socket stays in the namespace it was
//! made in after its thread has exited or moved, so the cgroup's members
//! alone can miss it. Only sockets that `kp_sock_rev` records as
//! translated from the stale frontend to the stale endpoint (or from a
//! stale frontend) are destroyed, never one that talks to the
//! endpoint's address itself.
//! Reads `/proc` and the cgroup tree; decides nothing about which
//! endpoints are stale.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use kproxy_model::{IpFamily, StaleUdpEndpoint};
use kproxy_netlink::sock_diag::{SockDiag, SockDiagError, SockId};
use nix::sched::CloneFlags;

/// Where `ip netns` (and CRI runtimes, via `/var/run/netns`) pin network
/// namespaces.
pub const PINNED_NETNS: &str = "/run/netns";

/// A network namespace to search, held open so that it cannot go away
/// between finding it and entering it.
#[derive(Debug)]
pub struct Namespace {
    /// Where it was found (for messages).
    pub path: PathBuf,
    file: File,
}

/// What can go wrong for one namespace (or the cgroup walk); none of
/// these stops the others.
#[derive(Debug, thiserror::Error)]
pub enum SocketsError {
    #[error("reading the cgroup {path}")]
    Cgroup {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("entering the network namespace {path}")]
    Enter {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the UDP sockets of the network namespace {path}")]
    Diag {
        path: PathBuf,
        #[source]
        source: SockDiagError,
    },
    #[error("looking up socket {cookie} in kp_sock_rev")]
    Origin {
        cookie: u64,
        #[source]
        source: kproxy_bpf::BpfError,
    },
}

/// The network namespaces of the threads in `cgroup` and below it, and
/// those pinned in `pinned`, each once. Threads that exit meanwhile are
/// skipped; a cgroup that cannot be read is reported in `errors`.
pub fn namespaces(cgroup: &Path, pinned: &Path, errors: &mut Vec<SocketsError>) -> Vec<Namespace> {
    let mut tasks = BTreeSet::new();
    let mut dirs = vec![cgroup.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        match cgroup_tasks(&dir, &mut tasks) {
            Ok(children) => dirs.extend(children),
            // Removed while walking: nothing lives there any more.
            Err(e) if e.kind() == io::ErrorKind::NotFound && dir != cgroup => {}
            Err(source) => errors.push(SocketsError::Cgroup { path: dir, source }),
        }
    }
    let mut candidates: Vec<PathBuf> =
        tasks.into_iter().map(|id| PathBuf::from(format!("/proc/{id}/task/{id}/ns/net"))).collect();
    if let Ok(entries) = std::fs::read_dir(pinned) {
        candidates.extend(entries.flatten().map(|entry| entry.path()));
    }
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for path in candidates {
        // A task that exited, or a pin that is not a namespace, fails here.
        let Ok(file) = File::open(&path) else { continue };
        let Ok(meta) = file.metadata() else { continue };
        if seen.insert((meta.dev(), meta.ino())) {
            found.push(Namespace { path, file });
        }
    }
    found
}

/// Adds the ids in `dir`'s `cgroup.procs` and `cgroup.threads` (a
/// threaded cgroup lists its threads only there); returns its children.
fn cgroup_tasks(dir: &Path, tasks: &mut BTreeSet<u32>) -> io::Result<Vec<PathBuf>> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            children.push(entry.path());
        }
    }
    for file in ["cgroup.procs", "cgroup.threads"] {
        match std::fs::read_to_string(dir.join(file)) {
            Ok(text) => tasks.extend(text.lines().filter_map(|line| line.trim().parse::<u32>().ok())),
            // cgroup.procs of a threaded cgroup: EOPNOTSUPP.
            Err(e) if e.raw_os_error() == Some(nix::libc::EOPNOTSUPP) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(children)
}

/// A sock_diag socket of `namespace`: opened on a fresh thread that
/// joined it (the socket stays in that namespace wherever it is used).
fn diag_in(namespace: &Namespace) -> Result<SockDiag, SocketsError> {
    let path = namespace.path.clone();
    let enter = |source: io::Error| SocketsError::Enter { path: path.clone(), source };
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("kp-sock-diag".to_owned())
            .spawn_scoped(scope, || {
                // The thread ends right after, so its namespace never leaks
                // to other work of the process.
                nix::sched::setns(&namespace.file, CloneFlags::CLONE_NEWNET)
                    .map_err(|e| enter(e.into()))
                    .and_then(|()| SockDiag::open().map_err(|source| SocketsError::Diag { path: path.clone(), source }))
            })
            .map_err(&enter)?;
        thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// What makes a translated UDP socket stale: its destination is an
/// endpoint its frontend stopped using, or its frontend is itself stale
/// (gone, or just given endpoints).
#[derive(Debug, Default)]
pub struct Stale {
    /// Each endpoint, with the frontends that stopped using it.
    endpoints: BTreeMap<SocketAddr, BTreeSet<SocketAddr>>,
    frontends: BTreeSet<SocketAddr>,
}

impl Stale {
    /// From the sync's stale endpoints and frontends (v4-mapped
    /// addresses count as IPv4).
    pub fn new<'a>(
        endpoints: impl IntoIterator<Item = &'a StaleUdpEndpoint>,
        frontends: impl IntoIterator<Item = &'a SocketAddr>,
    ) -> Stale {
        let mut stale = Stale::default();
        for s in endpoints {
            stale.endpoints.entry(canonical(s.endpoint)).or_default().insert(canonical(s.frontend));
        }
        stale.frontends.extend(frontends.into_iter().map(|f| canonical(*f)));
        stale
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty() && self.frontends.is_empty()
    }

    /// Whether a socket connected to `endpoint` needs its origin looked
    /// up: any socket may come from a stale frontend.
    fn candidate(&self, endpoint: SocketAddr) -> bool {
        endpoint.port() != 0 && (!self.frontends.is_empty() || self.endpoints.contains_key(&endpoint))
    }

    /// Whether a socket translated from `frontend` to `endpoint` is stale.
    fn matches(&self, frontend: SocketAddr, endpoint: SocketAddr) -> bool {
        let frontend = canonical(frontend);
        self.frontends.contains(&frontend) || self.endpoints.get(&endpoint).is_some_and(|f| f.contains(&frontend))
    }

    /// The families to list: IPv4 peers are also reached from IPv6
    /// sockets (v4-mapped).
    fn families(&self) -> Vec<IpFamily> {
        let v4 = self.endpoints.keys().chain(&self.frontends).any(SocketAddr::is_ipv4);
        if v4 { vec![IpFamily::V4, IpFamily::V6] } else { vec![IpFamily::V6] }
    }
}

/// Destroys, in every namespace, the connected UDP sockets that `origin`
/// (the `kp_sock_rev` lookup: cookie and destination to the frontend the
/// socket asked for) shows were translated in a way `stale` names.
/// Returns how many were destroyed per family of their destination; the
/// errors of a namespace are added to `errors` and the others go on.
pub fn terminate_stale_udp(
    namespaces: &[Namespace],
    stale: &Stale,
    origin: impl Fn(u64, SocketAddr) -> Result<Option<SocketAddr>, kproxy_bpf::BpfError>,
    errors: &mut Vec<SocketsError>,
) -> BTreeMap<IpFamily, usize> {
    let mut destroyed = BTreeMap::new();
    if stale.is_empty() {
        return destroyed;
    }
    let families = stale.families();
    for namespace in namespaces {
        let result = diag_in(namespace).and_then(|mut diag| {
            for family in &families {
                let sockets = diag
                    .udp_sockets(*family)
                    .map_err(|source| SocketsError::Diag { path: namespace.path.clone(), source })?;
                for socket in sockets {
                    let endpoint = canonical(socket.dst);
                    if !stale.candidate(endpoint) {
                        continue;
                    }
                    match origin(socket.cookie, endpoint) {
                        Ok(Some(frontend)) if stale.matches(frontend, endpoint) => {}
                        Ok(_) => continue,
                        Err(source) => {
                            errors.push(SocketsError::Origin { cookie: socket.cookie, source });
                            continue;
                        }
                    }
                    if destroy(&mut diag, &socket, &namespace.path)? {
                        *destroyed.entry(family_of(endpoint)).or_default() += 1;
                    }
                }
            }
            Ok(())
        });
        if let Err(e) = result {
            errors.push(e);
        }
    }
    destroyed
}

fn destroy(diag: &mut SockDiag, socket: &SockId, path: &Path) -> Result<bool, SocketsError> {
    let destroyed =
        diag.destroy_udp(socket).map_err(|source| SocketsError::Diag { path: path.to_path_buf(), source })?;
    tracing::debug!(src = %socket.src, dst = %socket.dst, cookie = socket.cookie, netns = %path.display(), destroyed, "ebpf mode: UDP socket to a stale endpoint ended");
    Ok(destroyed)
}

/// A v4-mapped address as the IPv4 one (how IPv6 sockets show IPv4 peers).
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

fn family_of(addr: SocketAddr) -> IpFamily {
    if addr.is_ipv4() { IpFamily::V4 } else { IpFamily::V6 }
}

#[cfg(test)]
mod tests;
