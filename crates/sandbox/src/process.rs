//! Processes spawned into a namespace: the caller's handle on one, and the
//! teardown that kills whatever a namespace still holds.
//!
//! Processes are only ever signalled by PID while we know the PID is still
//! theirs: a child is signalled only before it has been reaped, and a
//! process found inside one of our namespaces was started there by us.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, ExitStatus};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::SandboxError;

/// How often waits poll a process.
const POLL: Duration = Duration::from_millis(10);

/// How long teardown waits for stray processes in a namespace to die.
const STRAY_GRACE: Duration = Duration::from_secs(2);

/// A process started by [`Netns::spawn`](crate::Netns::spawn).
///
/// The namespace it runs in kills it when that `Netns` drops; this handle
/// can stop it earlier. Its piped standard streams, if any, are the public
/// fields, as on [`std::process::Child`].
#[derive(Debug)]
pub struct Spawned {
    pid: u32,
    child: Arc<Mutex<Child>>,
    /// The child's stdin, if the command piped it.
    pub stdin: Option<ChildStdin>,
    /// The child's stdout, if the command piped it.
    pub stdout: Option<ChildStdout>,
    /// The child's stderr, if the command piped it.
    pub stderr: Option<ChildStderr>,
}

impl Spawned {
    pub(crate) fn new(mut child: Child) -> Spawned {
        Spawned {
            pid: child.id(),
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child: Arc::new(Mutex::new(child)),
        }
    }

    pub(crate) fn shared(&self) -> Arc<Mutex<Child>> {
        Arc::clone(&self.child)
    }

    /// The process's real PID (it is the program itself, not a wrapper).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends SIGKILL (unless it has already exited) and reaps it.
    pub fn kill(&self) -> Result<ExitStatus, SandboxError> {
        let mut child = self.lock();
        // Child::kill never signals a reaped child, so the PID cannot have been reused.
        child.kill().map_err(|source| SandboxError::Signal { pid: self.pid, source })?;
        child.wait().map_err(|source| SandboxError::Wait { pid: self.pid, source })
    }

    /// Sends SIGTERM, so the process can shut down cleanly, unless it has already exited.
    pub fn terminate(&self) -> Result<(), SandboxError> {
        let mut child = self.lock();
        if child.try_wait().map_err(|source| SandboxError::Wait { pid: self.pid, source })?.is_some() {
            return Ok(());
        }
        // Not reaped yet (checked under the lock), so the PID is still this child's.
        let pid = Pid::from_raw(i32::try_from(self.pid).expect("Linux PIDs fit in i32"));
        kill(pid, Signal::SIGTERM).map_err(|errno| SandboxError::Signal { pid: self.pid, source: errno.into() })
    }

    /// Its exit status if it has exited, without waiting.
    pub fn try_wait(&self) -> Result<Option<ExitStatus>, SandboxError> {
        self.lock().try_wait().map_err(|source| SandboxError::Wait { pid: self.pid, source })
    }

    /// Waits up to `timeout` for it to exit; `None` if it is still running.
    pub fn wait_with_timeout(&self, timeout: Duration) -> Result<Option<ExitStatus>, SandboxError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(POLL);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Kills a spawned child unless it has exited, and reaps it.
pub(crate) fn kill_and_reap(child: &Mutex<Child>) {
    let mut child = child.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = child.id();
    if let Err(error) = child.kill() {
        tracing::warn!(pid, error = %error, "could not kill a spawned process");
    }
    if let Err(error) = child.wait() {
        tracing::warn!(pid, error = %error, "could not reap a spawned process");
    }
}

/// Kills every other process whose network namespace is `netns` and waits
/// (bounded) until none is left in it.
pub(crate) fn kill_remaining_in(netns: &File, name: &str) {
    let Ok(target) = netns.metadata().map(|meta| (meta.dev(), meta.ino())) else {
        return;
    };
    let strays = processes_in(target);
    for &pid in &strays {
        tracing::warn!(netns = %name, pid, "killing a process left in the namespace");
        // A process in a namespace we created was started by us, directly or not.
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let deadline = Instant::now() + STRAY_GRACE;
    while !strays.is_empty() && !processes_in(target).is_empty() && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
}

/// PIDs of processes (other than this one) whose network namespace has this (device, inode).
fn processes_in(target: (u64, u64)) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let own = std::process::id();
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| {
            // Exited processes (zombies) have left their namespaces and fail here.
            std::fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|meta| (meta.dev(), meta.ino()) == target)
        })
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect()
}
