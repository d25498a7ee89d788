//! The crate's one error type. Every variant names the step that failed; the
//! cause is its `#[source]`, or the captured stderr of the failed command.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

/// Why building, using or tearing down a sandbox failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Sandboxes need root: creating namespaces and links needs `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`.
    #[error("sandboxes need effective uid 0, but this process runs as uid {euid}")]
    NotRoot {
        /// The effective uid found.
        euid: u32,
    },
    /// A program could not be started at all (missing binary, fork failure).
    #[error("could not start `{command}`")]
    Start {
        /// The command line.
        command: String,
        /// The error from spawning it.
        #[source]
        source: io::Error,
    },
    /// A program ran and exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// How it exited.
        status: ExitStatus,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A namespace's handle under `/run/netns` could not be opened or duplicated.
    #[error("could not open network namespace {path}")]
    Open {
        /// The namespace's path.
        path: PathBuf,
        /// The error from opening it.
        #[source]
        source: io::Error,
    },
    /// `setns(2)` into a namespace failed.
    #[error("could not join network namespace {netns}")]
    Enter {
        /// The namespace's name.
        netns: String,
        /// The error from `setns`.
        #[source]
        source: nix::Error,
    },
    /// A helper thread could not be started.
    #[error("could not start a thread to {step}")]
    Thread {
        /// What the thread was for.
        step: &'static str,
        /// The error from spawning it.
        #[source]
        source: io::Error,
    },
    /// Links did not become ready (carrier seen, no tentative IPv6 address) in time.
    #[error("links {interfaces} in {netns} were not ready after {waited:?}")]
    LinkNotReady {
        /// The namespace's name.
        netns: String,
        /// The links (or addresses) still pending.
        interfaces: String,
        /// How long we waited.
        waited: std::time::Duration,
    },
    /// Writing a sysctl under `/proc/sys` inside a namespace failed.
    #[error("could not set sysctl {key}={value} in {netns}")]
    Sysctl {
        /// The namespace's name.
        netns: String,
        /// The sysctl, dotted (`net.ipv4.ip_forward`).
        key: String,
        /// The value written.
        value: String,
        /// The error from writing it.
        #[source]
        source: io::Error,
    },
    /// A socket operation of a backend failed (create, bind, listen).
    #[error("could not {step} in {netns}")]
    Socket {
        /// The namespace's name.
        netns: String,
        /// What was attempted, e.g. `bind TCP port 8080`.
        step: String,
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// Signalling a spawned process failed.
    #[error("could not signal process {pid}")]
    Signal {
        /// The process id.
        pid: u32,
        /// The error from `kill(2)`.
        #[source]
        source: io::Error,
    },
    /// Waiting for a spawned process failed.
    #[error("could not wait for process {pid}")]
    Wait {
        /// The process id.
        pid: u32,
        /// The error from `waitpid(2)`.
        #[source]
        source: io::Error,
    },
    /// [`Topology::add_pod`](crate::Topology::add_pod) was given a node other than 1 or 2.
    #[error("the topology has no node {index} (nodes are 1 and 2)")]
    UnknownNode {
        /// The node index asked for.
        index: u8,
    },
    /// A pod with this name already exists in the topology.
    #[error("the topology already has a pod named {name}")]
    DuplicatePod {
        /// The pod's name.
        name: String,
    },
    /// A node's pod subnet has no host addresses left (hosts 10 to 254 are used).
    #[error("node {node} has no pod addresses left")]
    PodAddressesExhausted {
        /// The node's index.
        node: u8,
    },
    /// A step on a test cgroup failed (create, remove, move a process or thread, set its type).
    #[error("could not {step} cgroup {path}")]
    Cgroup {
        /// What was attempted, e.g. `move a thread into`.
        step: &'static str,
        /// The cgroup's directory (or the file read).
        path: PathBuf,
        /// The error from the file system.
        #[source]
        source: io::Error,
    },
    /// Test cgroups cannot be made here.
    #[error("test cgroups are unavailable: {reason}")]
    CgroupUnavailable {
        /// What is missing.
        reason: String,
    },
    /// A step on a test bpffs mount failed (its directory).
    #[error("could not {step} {path}")]
    Bpffs {
        /// What was attempted, e.g. `create the mount point`.
        step: &'static str,
        /// The directory.
        path: PathBuf,
        /// The error from the file system.
        #[source]
        source: io::Error,
    },
}
