//! Throwaway network-namespace sandboxes for kproxy's real-kernel tests and
//! the `kproxy demo` command.
//!
//! - [`Netns`]: one namespace under `/run/netns`, named `kp-…`, deleted on
//!   drop together with every process spawned into it;
//! - [`Topology`]: the standard two-node, dual-stack layout (client/router,
//!   node-a, node-b, pods behind a bridge), addressed as in [`addressing`];
//! - [`Backend`]: a plain-socket TCP/UDP server that answers with its name
//!   and the source address it saw;
//! - probes ([`tcp_request`], [`udp_request`], [`TcpSession`], [`UdpFlow`]),
//!   run from a [`Place`]: a namespace, optionally with a test [`Cgroup`]
//!   (a threaded cgroup v2 child whose BPF programs see the probe's sockets);
//! - [`Bpffs`]: a private BPF file system mounted for one test.
//!
//! This crate owns only namespaces, cgroups and mounts it creates: it never
//! changes the host namespace's links, addresses, routes or sysctls, it
//! signals only processes it started, and it moves only its own process
//! and threads between cgroups. It needs root (see [`available`]).

pub mod addressing;
mod backend;
mod bpffs;
mod cgroup;
mod command;
mod error;
mod link;
mod netns;
mod place;
mod probe;
mod process;
mod reply;
mod topology;

pub use backend::Backend;
pub use bpffs::Bpffs;
pub use cgroup::Cgroup;
pub use error::SandboxError;
pub use netns::{NAME_PREFIX, NETNS_DIR, Netns};
pub use place::Place;
pub use probe::{DEFAULT_TIMEOUT, ProbeError, TcpSession, UdpFlow, tcp_request, udp_request};
pub use process::Spawned;
pub use reply::Reply;
pub use topology::{Node, Pod, Topology};

/// Whether sandboxes can be built here: effective uid 0, `ip` present, and
/// `ip netns add` working. The error says what is missing.
pub fn available() -> Result<(), SandboxError> {
    let euid = nix::unistd::geteuid();
    if !euid.is_root() {
        return Err(SandboxError::NotRoot { euid: euid.as_raw() });
    }
    command::run(command::new("ip", ["-V"]))?;
    // Creating (and dropping) a namespace proves `ip netns add`, /run/netns and setns all work.
    let probe = Netns::new("probe")?;
    probe.try_enter(|| ())?;
    Ok(())
}
