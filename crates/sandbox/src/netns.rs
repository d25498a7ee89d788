//! One throwaway network namespace: creating it under `/run/netns`, running
//! commands, processes and threads inside it, and tearing it down on drop.
//!
//! It must not touch any namespace it did not create: every command targets
//! the namespace by name (`ip -n`, `ip netns exec`) or by its open handle.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nix::sched::CloneFlags;

use crate::process::{self, Spawned};
use crate::{Cgroup, SandboxError, command};

/// Where `ip netns` keeps the namespaces it names.
pub const NETNS_DIR: &str = "/run/netns";

/// Every namespace this crate creates has a name starting with this.
pub const NAME_PREFIX: &str = "kp-";

/// Counts namespaces created by this process, so names stay unique across threads.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// One network namespace, created under `/run/netns` with a unique name
/// `kp-<prefix>-<pid>-<n>`.
///
/// Dropping it kills every process spawned through [`Netns::spawn`] (SIGKILL,
/// then reaps it), kills any other process left inside the namespace, and
/// deletes the namespace.
#[derive(Debug)]
pub struct Netns {
    name: String,
    /// Held open so that `setns` always targets this namespace, even if its
    /// name were removed from `/run/netns` behind our back.
    handle: File,
    children: Mutex<Vec<Arc<Mutex<std::process::Child>>>>,
}

impl Netns {
    /// Creates a namespace named `kp-<prefix>-<pid>-<n>` and sets its `lo` up.
    ///
    /// `prefix` is cut to its first 8 ASCII alphanumeric or `-` characters.
    pub fn new(prefix: &str) -> Result<Netns, SandboxError> {
        let name = unique_name(prefix);
        command::run(command::new("ip", ["netns", "add", name.as_str()]))?;
        let path = path_of(&name);
        let handle = match File::open(&path) {
            Ok(handle) => handle,
            Err(source) => {
                delete(&name);
                return Err(SandboxError::Open { path, source });
            }
        };
        // From here on, Drop deletes the namespace if a later step fails.
        let netns = Netns { name, handle, children: Mutex::default() };
        netns.ip(&["link", "set", "lo", "up"])?;
        tracing::debug!(netns = %netns.name, "created network namespace");
        Ok(netns)
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's path, `/run/netns/<name>`.
    pub fn path(&self) -> PathBuf {
        path_of(&self.name)
    }

    /// Runs `ip -n <name> <args>`.
    pub fn ip(&self, args: &[&str]) -> Result<(), SandboxError> {
        self.ip_output(args).map(drop)
    }

    /// Runs `ip -n <name> <args>` and returns its stdout.
    pub fn ip_output(&self, args: &[&str]) -> Result<String, SandboxError> {
        let mut command = command::new("ip", ["-n", self.name.as_str()]);
        command.args(args);
        command::run(command)
    }

    /// Runs `program args` inside the namespace (through `ip netns exec`) and returns its stdout.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String, SandboxError> {
        let mut command = command::new("ip", ["netns", "exec", self.name.as_str(), program]);
        command.args(args);
        command::run(command)
    }

    /// Runs `command` to completion inside the namespace and returns its stdout.
    ///
    /// Unlike [`Netns::exec`] (`ip netns exec`, which gives the program a
    /// new mount namespace with a fresh `/sys`), the program only joins the
    /// network namespace, as [`Netns::spawn`] does: it sees the caller's
    /// mounts, such as a cgroup2 file system under `/sys/fs/cgroup`.
    pub fn output(&self, mut command: Command) -> Result<String, SandboxError> {
        let fd: OwnedFd =
            self.handle.try_clone().map_err(|source| SandboxError::Open { path: self.path(), source })?.into();
        let join = move || nix::sched::setns(&fd, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from);
        // SAFETY: as in `spawn`: the hook runs in the forked child before
        // exec and only calls setns(2), async-signal-safe, on its own descriptor.
        unsafe {
            command.pre_exec(join);
        }
        command::run(command)
    }

    /// Writes a sysctl inside the namespace, e.g. `("net.ipv4.ip_forward", "1")`.
    ///
    /// The key is dotted; it maps to `/proc/sys` by turning dots into
    /// slashes, so interface names containing dots cannot be addressed.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<(), SandboxError> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        // /proc/sys/net resolves against the network namespace of the calling
        // *thread*, so a write from a thread inside the namespace lands there.
        self.try_enter(|| std::fs::write(&path, value))?.map_err(|source| SandboxError::Sysctl {
            netns: self.name.clone(),
            key: key.to_owned(),
            value: value.to_owned(),
            source,
        })
    }

    /// Spawns a long-running process inside the namespace with its real PID.
    ///
    /// The child joins the namespace with `setns(2)` between fork and exec,
    /// so everything set on `command` (stdio, environment, directory) is
    /// kept, and [`Spawned::pid`] is the program's own PID. The process is
    /// killed when this `Netns` drops, or earlier through the returned handle.
    pub fn spawn(&self, mut command: Command) -> Result<Spawned, SandboxError> {
        let fd: OwnedFd =
            self.handle.try_clone().map_err(|source| SandboxError::Open { path: self.path(), source })?.into();
        let line = command::render(&command);
        let join = move || nix::sched::setns(&fd, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from);
        // SAFETY: the hook runs in the forked child before exec. It only calls
        // setns(2), which is async-signal-safe, on a descriptor the closure owns,
        // and converts an errno into io::Error without allocating.
        unsafe {
            command.pre_exec(join);
        }
        let child = command.spawn().map_err(|source| SandboxError::Start { command: line.clone(), source })?;
        tracing::debug!(netns = %self.name, pid = child.id(), command = %line, "spawned");
        let spawned = Spawned::new(child);
        self.children.lock().unwrap_or_else(PoisonError::into_inner).push(spawned.shared());
        Ok(spawned)
    }

    /// Runs `f` on a fresh thread that has joined this namespace and returns its result.
    ///
    /// Sockets created in `f` belong to this namespace for their whole life
    /// and work from any thread afterwards. A panic in `f` is resumed here.
    ///
    /// # Panics
    ///
    /// If the thread cannot be started or cannot join the namespace, which
    /// for a root process holding the namespace open means the system is out
    /// of resources; use [`Netns::try_enter`] to get that as an error.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        match self.try_enter(f) {
            Ok(value) => value,
            Err(error) => panic!("cannot enter network namespace {}: {error}", self.name),
        }
    }

    /// Like [`Netns::enter`], but returns an error if the thread cannot be started or join the namespace.
    pub fn try_enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, SandboxError> {
        self.run_entered(None, f)
    }

    /// Like [`Netns::enter`], on a thread that has also joined `cgroup`:
    /// sockets made in `f` belong to that cgroup for their whole life, so
    /// the cgroup's BPF programs see them.
    ///
    /// # Panics
    ///
    /// As [`Netns::enter`], or if the thread cannot join the cgroup; use
    /// [`Netns::try_enter_in`] to get either as an error.
    pub fn enter_in<T: Send>(&self, cgroup: &Cgroup, f: impl FnOnce() -> T + Send) -> T {
        match self.try_enter_in(cgroup, f) {
            Ok(value) => value,
            Err(error) => panic!("cannot enter {} in cgroup {}: {error}", self.name, cgroup.path().display()),
        }
    }

    /// Like [`Netns::enter_in`], but returns an error if the thread cannot be started or join either.
    pub fn try_enter_in<T: Send>(&self, cgroup: &Cgroup, f: impl FnOnce() -> T + Send) -> Result<T, SandboxError> {
        self.run_entered(Some(cgroup), f)
    }

    fn run_entered<T: Send>(&self, cgroup: Option<&Cgroup>, f: impl FnOnce() -> T + Send) -> Result<T, SandboxError> {
        let fd = self.handle.as_fd();
        std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name("kp-netns".to_owned())
                .spawn_scoped(scope, move || {
                    nix::sched::setns(fd, CloneFlags::CLONE_NEWNET)
                        .map_err(|source| SandboxError::Enter { netns: self.name.clone(), source })?;
                    // The thread ends with `f`, so it never leaves the cgroup by hand.
                    cgroup.map(Cgroup::join_current_thread).transpose()?;
                    Ok(f())
                })
                .map_err(|source| SandboxError::Thread { step: "enter a network namespace", source })?;
            thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let children = std::mem::take(self.children.get_mut().unwrap_or_else(PoisonError::into_inner));
        for child in &children {
            process::kill_and_reap(child);
        }
        // Grandchildren (a shell's jobs, a daemon's workers) would keep the
        // namespace alive after its name is gone; nothing else can be in it.
        process::kill_remaining_in(&self.handle, &self.name);
        delete(&self.name);
        tracing::debug!(netns = %self.name, "deleted network namespace");
    }
}

fn path_of(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

fn delete(name: &str) {
    if let Err(error) = command::run(command::new("ip", ["netns", "del", name])) {
        tracing::warn!(netns = %name, error = %error, "could not delete network namespace");
    }
}

fn unique_name(prefix: &str) -> String {
    let prefix: String =
        prefix.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(8).collect::<String>().to_lowercase();
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    format!("{NAME_PREFIX}{prefix}-{}-{id}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_short_and_prefixed() {
        let a = unique_name("Node A/with a long name");
        let b = unique_name("Node A/with a long name");
        assert_ne!(a, b);
        assert!(a.starts_with("kp-nodeawit-"), "{a}");
        assert!(a.contains(&format!("-{}-", std::process::id())), "{a}");
    }
}
