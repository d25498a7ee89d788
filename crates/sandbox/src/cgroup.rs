//! Test cgroups (v2): a per-process parent the test process joins while
//! any [`Cgroup`] lives, and one threaded child per user, which threads
//! join one at a time (see [`Netns::enter_in`](crate::Netns::enter_in)).
//!
//! Cgroup BPF programs attached to a child see only the sockets that
//! threads made while inside it. This module creates every directory it
//! removes (a name that already exists is an error, never reused), moves
//! only this process and its own threads, and moves the process back to
//! where it was when the last user drops, also on panic.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::{NAME_PREFIX, SandboxError};

/// How long removing a cgroup waits for tasks that are exiting to leave it.
const EMPTY_WAIT: Duration = Duration::from_secs(5);

/// The parent every [`Cgroup`] of this process lives in, while any does.
struct Shared {
    /// `<original>/kp-<pid>-<n>`, which this process joined.
    parent: PathBuf,
    /// The cgroup this process was in before, where it goes back.
    original: PathBuf,
    users: usize,
}

/// The process's parent cgroup and its users; every change to either happens under this lock.
static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

/// Counts directories created by this process, so names stay unique.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// A threaded cgroup v2 child of this process's test parent cgroup.
///
/// While one exists, the whole test process sits in the parent (a domain
/// that is the children's threaded root); threads join a child through
/// [`Netns::enter_in`](crate::Netns::enter_in). Dropping the last one
/// moves the process back to its original cgroup and removes both.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// Creates `<parent>/<prefix>-<n>` as a threaded cgroup, creating the
    /// parent and moving this process into it if no other `Cgroup` lives.
    ///
    /// `prefix` is cut to its first 8 ASCII alphanumeric or `-` characters.
    pub fn new(prefix: &str) -> Result<Cgroup, SandboxError> {
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.is_none() {
            *shared = Some(join_new_parent()?);
        }
        let state = shared.as_mut().expect("the parent was just created");
        let path = state.parent.join(unique_name(prefix));
        let created = make_threaded(&path);
        match created {
            Ok(()) => {
                state.users += 1;
                tracing::debug!(cgroup = %path.display(), "created threaded cgroup");
                Ok(Cgroup { path })
            }
            Err(error) => {
                if state.users == 0 {
                    leave(shared.take().expect("the parent exists"));
                }
                Err(error)
            }
        }
    }

    /// The child's directory under the cgroup2 mount: what a BPF program is attached to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the calling thread into this cgroup. Only threads of this
    /// process can join (they are all in the parent while `self` lives).
    pub(crate) fn join_current_thread(&self) -> Result<(), SandboxError> {
        let tid = nix::unistd::gettid();
        write(&self.path.join("cgroup.threads"), &tid.to_string(), "move a thread into")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        remove(&self.path);
        let Some(state) = shared.as_mut() else { return };
        state.users -= 1;
        if state.users == 0 {
            leave(shared.take().expect("the parent exists"));
        }
    }
}

/// Creates a fresh parent next to nothing else of ours, under this
/// process's cgroup, and moves the process into it.
fn join_new_parent() -> Result<Shared, SandboxError> {
    let original = current_cgroup()?;
    let parent = original.join(unique_name(""));
    std::fs::create_dir(&parent).map_err(cgroup_error("create", &parent))?;
    let pid = std::process::id().to_string();
    if let Err(error) = write(&parent.join("cgroup.procs"), &pid, "move this process into") {
        remove(&parent);
        return Err(error);
    }
    tracing::debug!(cgroup = %parent.display(), "joined the test parent cgroup");
    Ok(Shared { parent, original, users: 0 })
}

/// Moves this process back to its original cgroup and removes the parent.
fn leave(state: Shared) {
    let pid = std::process::id().to_string();
    if let Err(error) = write(&state.original.join("cgroup.procs"), &pid, "move this process back to") {
        tracing::warn!(error = %error, "could not leave the test parent cgroup");
    }
    remove(&state.parent);
}

/// Creates `path` and makes it threaded; removes it again if that fails.
fn make_threaded(path: &Path) -> Result<(), SandboxError> {
    std::fs::create_dir(path).map_err(cgroup_error("create", path))?;
    let typed = write(&path.join("cgroup.type"), "threaded", "make threaded");
    if typed.is_err() {
        remove(path);
    }
    typed
}

/// Removes a cgroup directory this module created, waiting (bounded) for
/// exiting tasks to leave it: a joined thread or a reaped child may still
/// count for a moment.
fn remove(path: &Path) {
    let deadline = Instant::now() + EMPTY_WAIT;
    loop {
        match std::fs::remove_dir(path) {
            Ok(()) => return,
            Err(error) if error.raw_os_error() == Some(nix::libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => {
                tracing::warn!(cgroup = %path.display(), error = %error, "could not remove a test cgroup");
                return;
            }
        }
    }
}

/// This process's cgroup v2 directory: its path in `/proc/self/cgroup`
/// under the cgroup2 mount found in `/proc/self/mountinfo`.
pub(crate) fn current_cgroup() -> Result<PathBuf, SandboxError> {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|source| SandboxError::Cgroup {
            step: "read",
            path: PathBuf::from(path),
            source,
        })
    };
    let (mount_root, mount_point) = cgroup2_mount(&read("/proc/self/mountinfo")?)
        .ok_or_else(|| SandboxError::CgroupUnavailable { reason: "no cgroup2 file system is mounted".to_owned() })?;
    let cgroups = read("/proc/self/cgroup")?;
    let own = cgroups.lines().find_map(|line| line.strip_prefix("0::")).ok_or_else(|| {
        SandboxError::CgroupUnavailable { reason: "/proc/self/cgroup has no cgroup v2 line".to_owned() }
    })?;
    // A mount of a subtree shows paths relative to the mount's root.
    let relative = Path::new(own).strip_prefix(&mount_root).unwrap_or(Path::new(own));
    let relative = relative.strip_prefix("/").unwrap_or(relative);
    Ok(mount_point.join(relative))
}

/// The root and mount point of the first cgroup2 mount in `mountinfo`.
fn cgroup2_mount(mountinfo: &str) -> Option<(PathBuf, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (mount, filesystem) = line.split_once(" - ")?;
        if filesystem.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut fields = mount.split_whitespace().skip(3);
        let root = fields.next()?;
        let point = fields.next()?;
        Some((PathBuf::from(unescape(root)), PathBuf::from(unescape(point))))
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4).and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn write(path: &Path, value: &str, step: &'static str) -> Result<(), SandboxError> {
    std::fs::write(path, value).map_err(cgroup_error(step, path))
}

fn cgroup_error(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SandboxError {
    let path = path.to_owned();
    move |source| SandboxError::Cgroup { step, path, source }
}

/// `kp-<prefix>-<pid>-<n>` (or `kp-<pid>-<n>` without a prefix).
fn unique_name(prefix: &str) -> String {
    let prefix: String =
        prefix.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(8).collect::<String>().to_lowercase();
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    match prefix.is_empty() {
        true => format!("{NAME_PREFIX}{pid}-{id}"),
        false => format!("{NAME_PREFIX}{prefix}-{pid}-{id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_in_a_hybrid_layout() {
        let mountinfo = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                         40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
                         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_mount(mountinfo), Some(("/".into(), "/sys/fs/cgroup/unified".into())));
    }

    #[test]
    fn mount_points_with_spaces_are_unescaped_and_no_cgroup2_is_none() {
        let mountinfo = "41 31 0:38 /sub /mnt/cg\\0402 rw - cgroup2 none rw\n";
        assert_eq!(cgroup2_mount(mountinfo), Some(("/sub".into(), "/mnt/cg 2".into())));
        assert_eq!(cgroup2_mount("40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw\n"), None);
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        let (a, b) = (unique_name("Lab one"), unique_name("Lab one"));
        assert_ne!(a, b);
        assert!(a.starts_with("kp-labone-"), "{a}");
        assert!(unique_name("").starts_with(&format!("kp-{}-", std::process::id())));
    }
}
